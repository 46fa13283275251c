//! swarm-linkd: swarm-emu's userspace link engine. It takes the packets iptables hands to NFQUEUE (in the
//! receiving node's PREROUTING, selected by the sender's MAC), holds each in a timer heap, and gives its
//! verdict (accept, drop, accept with a flipped bit, plus an injected copy) when the link's conditions say so.
//! Verdicts go out of order, by packet id. Conditions change at run time over a control socket; packets
//! already held keep the time they were given. If the engine dies, the kernel drops what it held and every
//! new packet of the links it served (the rules have no --queue-bypass): the link fails closed.
//!
//! usage:
//!   swarm-linkd run --queue N [--control PATH] [--config FILE] [--link "MAC|* key=value ..."]...
//!                   [--max-bytes B] [--max-packets N] [--seed S] [--pidfile PATH] [--state PATH] [--realtime]
//!                   [--inject-dev IFNAME --inject-mac MAC]
//!   swarm-linkd run --instance "queue=N control=PATH state=PATH [config=FILE] [inject-dev=IF inject-mac=MAC]"...
//!                   [--max-bytes B] [--max-packets N] [--seed S] [--pidfile PATH] [--realtime]
//!                   (one process serving many queues, e.g. every node of a swarm at its switch: see `Inst`)
//!   swarm-linkd ctl --control PATH set [LINE...] < config   (replace the conditions: the lines given, else
//!                   stdin; prints "ok gen=N set_at_ns=T" or the error, exit 2)
//!   swarm-linkd ctl --control PATH stats|ping|schedlog|schedclear
//!   swarm-linkd ctl --control PATH sched [ENTRY...] < schedule   (a link timeline the engine applies at each
//!                   entry's instant from its own clock: `<due realtime ns> <queue> link <MAC> key=value ...`;
//!                   see sched.rs; --max-sched N bounds the pending changes, default 1,000,000)
//!   swarm-linkd check [--max-bytes B] < config      (validate only; exit 2 with one line on bad input)
//!
//! --tick-us T (default 250), --tick-pps R (default 4000): above R packets/s over all its queues the engine
//! wakes every T microseconds (not per packet and per due time), reads every queue and releases what is due:
//! holds start at the kernel's arrival stamp, releases are late by at most T. --tick-us 0: never.
//! All queues are bound to one netlink socket: a tick is one `recvmmsg` for the packets of every queue and one
//! `sendto` for the verdicts of every queue (per ~60 KB), whatever the number of nodes.
//! --realtime: run at SCHED_FIFO priority 1 (else nice -10) so release times stay sub-millisecond on a busy host.
//! --state PATH: every accepted configuration is saved there and read at start, so an engine restarted by
//! its supervisor comes back with its links.
//! --kernel-hold N (default 49152): at most N packets are held in the kernel's queue, as verdicts pending
//! (newer kernels track at most 65,536 per queue and drop the next: "nf_queue: hash insert failed"). Past N
//! the engine keeps an IPv4 packet's bytes itself, drops the kernel's copy at once and sends the bytes when
//! they are due, as it sends a duplicate (below): the bound is then the engine's memory (--max-packets,
//! --max-bytes). The copy range widens to whole packets from N/2 held and narrows again below N/4.
//! --inject-dev/--inject-mac: where the engine holds packets at a forwarding hop (a bridge's FORWARD hook, not
//! the receiver's own stack), a duplicate cannot be routed from the engine's namespace: it is sent as an
//! Ethernet frame (the sender's MAC -> the receiver's MAC) out of IFNAME, the bridge port towards the
//! receiver, so it reaches the receiver without passing the hook again. Without them duplicates go in through
//! a raw IP socket in the engine's namespace (the receiver's own).
//! A config is lines `link <MAC|*> key=value ...`; keys: delay jitter dist delay_corr loss loss_corr
//! ge=p,r,1-h,1-k rate corrupt duplicate reorder limit, and the word `down` (see model.rs).

mod model;
mod nfq;
mod sched;

use model::{
    check_bound, fmt_mac, parse_config, parse_link_line, Decision, Link, LinkCfg, Mac, Rng,
};
use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::io::{Read, Write};
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

static STOP: AtomicBool = AtomicBool::new(false);
/// wake-ups of the main loop (all queues; shown by `stats`)
static WAKES: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_signal(_: i32) {
    STOP.store(true, Ordering::SeqCst);
}

fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn real_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The monotonic and the realtime clock read at one instant (to within 20 us), for turning the kernel's realtime
/// arrival stamps into the engine's monotonic clock: a stall between the two reads (a preempted thread, a vCPU
/// the hypervisor paused) would move every arrival back by its length and release packets that much early, so
/// a pair whose monotonic reads lie further apart is read again (three tries, then the last pair).
fn mono_real_ns() -> (u64, u64) {
    let mut pair = (0, 0);
    for _ in 0..3 {
        let before = mono_ns();
        let real = real_ns();
        let after = mono_ns();
        pair = (after, real);
        if after - before <= 20_000 {
            break;
        }
    }
    pair
}

enum Kind {
    Verdict(Option<Box<[u8]>>),
    Inject(Option<Mac>, Box<[u8]>),
}

struct Held {
    due: u64,
    seq: u64,
    /// when the packet reached the hook (engine clock): its hold time is measured from here
    arrived: u64,
    id: u32,
    key: Option<Mac>,
    kind: Kind,
}

impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        (self.due, self.seq) == (o.due, o.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.due, self.seq).cmp(&(o.due, o.seq))
    }
}

#[derive(Clone)]
struct Opts {
    queue: u16,
    control: Option<String>,
    config: Option<String>,
    links: Vec<String>,
    max_bytes: u64,
    max_packets: u32,
    seed: u64,
    pidfile: Option<String>,
    state: Option<String>,
    realtime: bool,
    inject_dev: Option<String>,
    inject_mac: Option<Mac>,
    kernel_hold: u64,
    instances: Vec<String>,
    tick_ns: u64,
    tick_pps: u64,
    max_sched: usize,
}

struct Engine {
    links: HashMap<Option<Mac>, Link>,
    gen: u64,
    set_at: u64,
    first_packet_at: u64,
    heap: BinaryHeap<Reverse<Held>>,
    seq: u64,
    rng: Rng,
    max_bytes: u64,
    max_packets: u32,
    held_total: u64,
    held_peak: u64,
    unmatched: u64,
    dropped_full: u64,
    injected: u64,
    inject_errors: u64,
    raw: i32,
    /// AF_PACKET socket on the bridge port towards the receiver (--inject-dev), with the receiver's MAC
    l2: Option<(i32, i32, Mac)>,
    /// the largest packet the engine can send itself (the inject device's MTU at a hop)
    inject_max: usize,
    /// verdicts pending in the kernel's queue, their peak, the bound (--kernel-hold), packets held in the
    /// engine's own memory instead (see `keep_bytes`)
    kernel_held: u64,
    kernel_held_peak: u64,
    kernel_hold: u64,
    stolen: u64,
    /// whole packets are copied because the kernel's queue is filling (the copy range follows it)
    steal_armed: bool,
    full_copy: bool,
    gso: bool,
    /// started from a saved configuration: a previous engine of this node died (its held packets were dropped)
    restarted: bool,
    /// packets that came with the kernel's arrival stamp (their hold starts then, not when read)
    stamped: u64,
    /// lateness of releases (actual - due): counts per bucket of LATE_BOUNDS_US
    late: [u64; LATE_BOUNDS_US.len() + 1],
    /// each link's configuration line as handed over (by `set` or a scheduled change): the state file
    lines: BTreeMap<Option<Mac>, String>,
}

/// The senders' links made from the default take its conditions (a new `link *`).
fn follow_default(links: &mut HashMap<Option<Mac>, Link>, cfg: &LinkCfg, gen: u64) {
    for l in links.values_mut() {
        if l.from_default && l.cfg != *cfg {
            l.reconfigure(cfg.clone(), gen);
        }
    }
}

/// The link a packet from `src` meets: the sender's own, else one made for it from the default (`link *`) at
/// its first packet (O(1): the table grows with the senders that send, not with the pairs configured), else
/// the default itself for a frame without a source MAC; None: no link (the packet passes).
fn link_key(links: &mut HashMap<Option<Mac>, Link>, src: Option<Mac>) -> Option<Option<Mac>> {
    let Some(m) = src else {
        return links.contains_key(&None).then_some(None);
    };
    if links.contains_key(&Some(m)) {
        return Some(Some(m));
    }
    let d = links.get(&None)?;
    let mut l = Link::new(d.cfg.clone(), d.gen);
    l.from_default = true;
    links.insert(Some(m), l);
    Some(Some(m))
}

/// Upper bounds (microseconds) of the release-lateness histogram in `stats`.
/// One packet read in a batch: (packet id, source MAC, wire length, offset of its copied bytes in the arena,
/// bytes copied, checksum not yet computed, kernel arrival stamp in ns).
type BatchEntry = (u32, Option<Mac>, usize, usize, usize, bool, Option<u64>);

const LATE_BOUNDS_US: [u64; 10] = [10, 50, 100, 250, 500, 1000, 2000, 5000, 10000, 100000];

const COPY_META: u16 = 128; // enough for the IP header; the length comes with every packet

impl Engine {
    fn apply(&mut self, cfgs: HashMap<Option<Mac>, LinkCfg>) -> u64 {
        self.gen += 1;
        self.set_at = real_ns();
        self.first_packet_at = 0;
        let gen = self.gen;
        let default = cfgs.get(&None).cloned();
        // a sender's link made from the default stays (its state kept) while there is a default and no line of
        // its own; it takes the default's new conditions
        self.links
            .retain(|k, l| cfgs.contains_key(k) || (l.from_default && default.is_some()));
        for (k, cfg) in cfgs {
            match self.links.get_mut(&k) {
                Some(l) if l.cfg == cfg => l.from_default = false,
                Some(l) => {
                    l.reconfigure(cfg, gen);
                    l.from_default = false;
                }
                None => {
                    self.links.insert(k, Link::new(cfg, gen));
                }
            }
        }
        if let Some(d) = default {
            follow_default(&mut self.links, &d, gen);
        }
        gen
    }

    /// One link's new conditions (a scheduled change); the other links keep theirs.
    fn set_link(&mut self, key: Option<Mac>, cfg: LinkCfg, line: String) {
        self.gen += 1;
        self.set_at = real_ns();
        self.first_packet_at = 0;
        let gen = self.gen;
        if key.is_none() {
            follow_default(&mut self.links, &cfg, gen);
        }
        match self.links.get_mut(&key) {
            Some(l) if l.cfg == cfg => l.from_default = false,
            Some(l) => {
                l.reconfigure(cfg, gen);
                l.from_default = false;
            }
            None => {
                self.links.insert(key, Link::new(cfg, gen));
            }
        }
        self.lines.insert(key, line);
    }

    /// The lines of a `set` body, by link (a later line for a link replaces an earlier one, as in parse_config).
    fn set_lines(&mut self, body: &str) {
        self.lines.clear();
        for raw in body.lines() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if let Ok((key, _)) = parse_link_line(line) {
                self.lines.insert(key, line.to_string());
            }
        }
    }

    fn config_text(&self) -> String {
        self.lines.values().map(|l| format!("{l}\n")).collect()
    }

    fn needs_payload(&self) -> bool {
        self.links.values().any(|l| l.cfg.needs_payload())
    }

    fn per_segment(&self) -> bool {
        self.links.values().any(|l| l.cfg.per_segment())
    }

    /// Copy range and GSO mode follow the conditions: whole packets only when one is corrupted or copied,
    /// whole GSO super-packets unless a link gives each segment a fate of its own or the engine is about to
    /// keep packets itself (without GSO the kernel also finishes each copied packet's checksum, so the bytes
    /// can be sent again; with it a locally sent packet's checksum is left to the device).
    fn tune(&mut self, q: &mut nfq::Queue) {
        let want = self.needs_payload() || self.steal_armed;
        if want != self.full_copy && q.set_copy(if want { 0xffff } else { COPY_META }).is_ok() {
            self.full_copy = want;
        }
        let gso = !self.per_segment() && !self.steal_armed;
        if gso != self.gso && q.set_gso(gso).is_ok() {
            self.gso = gso;
        }
    }

    /// `arrived`: when the packet reached the hook (the kernel's stamp, else `now`), where its hold begins.
    fn on_packet(&mut self, q: &mut nfq::Queue, p: nfq::Packet, arrived: u64, now: u64) {
        let key = match link_key(&mut self.links, p.hw_src) {
            Some(k) => k,
            None => {
                self.unmatched += 1;
                q.verdict(p.id, nfq::NF_ACCEPT, None);
                return;
            }
        };
        self.stamped += p.stamp_ns.is_some() as u64;
        let ip_hlen = p.payload.first().map_or(20, |b| {
            if b >> 4 == 4 {
                ((b & 0xf) as usize) * 4
            } else {
                40
            }
        });
        let link = self.links.get_mut(&key).unwrap();
        let decision = if self.held_total >= self.max_packets as u64 {
            self.dropped_full += 1;
            Decision::Drop(model::DropWhy::Limit)
        } else {
            link.decide(arrived, p.len, ip_hlen, &mut self.rng)
        };
        if link.gen == self.gen && self.first_packet_at == 0 {
            self.first_packet_at = real_ns();
        }
        match decision {
            Decision::Drop(_) => q.verdict(p.id, nfq::NF_DROP, None),
            Decision::Hold {
                due,
                corrupt_at,
                dup_due,
                ..
            } => {
                let full = p.payload.len() == p.len;
                if due > now
                    && keep_bytes(
                        self.kernel_held,
                        self.kernel_hold,
                        full && !p.csum_not_ready,
                        p.payload,
                        self.inject_max,
                    )
                {
                    // the kernel's queue is near its bound: hold the bytes here and drop the kernel's copy
                    let mut b: Box<[u8]> = p.payload.into();
                    if let Some((at, bit)) = corrupt_at {
                        b[at] ^= 1 << bit;
                    }
                    if let Some(d) = dup_due {
                        self.push(d, arrived, 0, key, Kind::Inject(p.hw_src, b.clone()));
                    }
                    q.verdict(p.id, nfq::NF_DROP, None);
                    self.stolen += 1;
                    self.push(due, arrived, 0, key, Kind::Inject(p.hw_src, b));
                    return;
                }
                let payload = match corrupt_at {
                    Some((at, bit)) if full => {
                        let mut b: Box<[u8]> = p.payload.into();
                        b[at] ^= 1 << bit;
                        Some(b)
                    }
                    _ => None,
                };
                if let (Some(d), true) = (dup_due, full) {
                    self.push(d, arrived, 0, key, Kind::Inject(p.hw_src, p.payload.into()));
                }
                if due <= now && payload.is_none() && self.heap.peek().is_none_or(|h| h.0.due > now)
                {
                    q.verdict(p.id, nfq::NF_ACCEPT, None);
                } else {
                    self.push(due, arrived, p.id, key, Kind::Verdict(payload));
                }
            }
        }
    }

    fn push(&mut self, due: u64, arrived: u64, id: u32, key: Option<Mac>, kind: Kind) {
        self.seq += 1;
        if let Some(l) = self.links.get_mut(&key) {
            l.held += 1;
        }
        self.held_total += 1;
        self.held_peak = self.held_peak.max(self.held_total);
        if let Kind::Verdict(_) = kind {
            self.kernel_held += 1;
            self.kernel_held_peak = self.kernel_held_peak.max(self.kernel_held);
        }
        self.heap.push(Reverse(Held {
            due,
            seq: self.seq,
            arrived,
            id,
            key,
            kind,
        }));
    }

    fn release(&mut self, q: &mut nfq::Queue, now: u64) {
        while let Some(Reverse(h)) = self.heap.peek() {
            if h.due > now {
                break;
            }
            let Reverse(h) = self.heap.pop().unwrap();
            self.held_total -= 1;
            let late_us = (now - h.due) / 1000;
            self.late[LATE_BOUNDS_US
                .iter()
                .position(|&b| late_us < b)
                .unwrap_or(LATE_BOUNDS_US.len())] += 1;
            if let Some(l) = self.links.get_mut(&h.key) {
                l.held = l.held.saturating_sub(1);
                if let Kind::Verdict(_) = h.kind {
                    let s = &mut l.stats;
                    let hold = now.saturating_sub(h.arrived);
                    if s.last_hold_ns > 0 {
                        let d = hold.abs_diff(s.last_hold_ns) as f64;
                        s.hold_jitter_ns += (d - s.hold_jitter_ns) / 16.0;
                    }
                    s.last_hold_ns = hold.max(1);
                }
            }
            match h.kind {
                Kind::Verdict(payload) => {
                    self.kernel_held -= 1;
                    q.verdict(h.id, nfq::NF_ACCEPT, payload.as_deref())
                }
                Kind::Inject(src, bytes) => self.inject(src, &bytes),
            }
        }
    }

    /// A duplicate goes in as a new packet: from a raw socket in this namespace (delivered or forwarded
    /// as the original; it does not pass the ingress hook again, so it is not impaired twice), or at a hop
    /// as a frame out of the receiver's bridge port (see --inject-dev).
    fn inject(&mut self, src: Option<Mac>, pkt: &[u8]) {
        if pkt.len() < 20 || pkt[0] >> 4 != 4 {
            self.inject_errors += 1;
            return;
        }
        if let Some((fd, ifindex, dst)) = self.l2 {
            let mut frame = Vec::with_capacity(14 + pkt.len());
            frame.extend_from_slice(&dst);
            frame.extend_from_slice(&src.unwrap_or(dst));
            frame.extend_from_slice(&[0x08, 0x00]);
            frame.extend_from_slice(pkt);
            let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            addr.sll_family = libc::AF_PACKET as u16;
            addr.sll_ifindex = ifindex;
            addr.sll_halen = 6;
            addr.sll_addr[..6].copy_from_slice(&dst);
            let n = unsafe {
                libc::sendto(
                    fd,
                    frame.as_ptr() as *const libc::c_void,
                    frame.len(),
                    0,
                    &addr as *const _ as *const libc::sockaddr,
                    std::mem::size_of_val(&addr) as u32,
                )
            };
            if n < 0 {
                self.inject_errors += 1
            } else {
                self.injected += 1
            }
            return;
        }
        if self.raw < 0 {
            self.inject_errors += 1;
            return;
        }
        let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        addr.sin_family = libc::AF_INET as u16;
        addr.sin_addr.s_addr = u32::from_ne_bytes(pkt[16..20].try_into().unwrap());
        let n = unsafe {
            libc::sendto(
                self.raw,
                pkt.as_ptr() as *const libc::c_void,
                pkt.len(),
                0,
                &addr as *const _ as *const libc::sockaddr,
                std::mem::size_of_val(&addr) as u32,
            )
        };
        if n < 0 {
            self.inject_errors += 1;
        } else {
            self.injected += 1;
        }
    }

    /// The copy range follows the kernel's queue: whole packets from half the bound (so the bytes are there
    /// when it is reached), metadata again below a quarter (unless a condition needs the bytes).
    fn arm_keeping(&mut self, q: &mut nfq::Queue) {
        let armed = if self.steal_armed {
            self.kernel_held >= self.kernel_hold / 4
        } else {
            self.kernel_held >= self.kernel_hold / 2
        };
        if armed != self.steal_armed {
            self.steal_armed = armed;
            self.tune(q);
        }
    }

    fn stats(&self, q: &nfq::Queue) -> String {
        let mut out = format!(
            "gen={} set_at_ns={} first_packet_at_ns={} held={} held_peak={} unmatched={} dropped_full={} injected={} inject_errors={} verdicts={} verdict_errors={} kernel_dropped={} kernel_user_dropped={} kernel_held={} kernel_held_peak={} kernel_hold={} kept={} stamped={}\n",
            self.gen, self.set_at, self.first_packet_at, self.held_total, self.held_peak, self.unmatched,
            self.dropped_full, self.injected, self.inject_errors, q.verdicts_sent, q.verdict_errors,
            q.kernel_drops().0, q.kernel_drops().1, self.kernel_held, self.kernel_held_peak, self.kernel_hold, self.stolen, self.stamped);
        out += "late_us";
        for (i, n) in self.late.iter().enumerate() {
            match LATE_BOUNDS_US.get(i) {
                Some(b) => out += &format!(" lt{b}={n}"),
                None => out += &format!(" ge{}={n}", LATE_BOUNDS_US[LATE_BOUNDS_US.len() - 1]),
            }
        }
        let (sends, recvs) = q.sock_counters();
        out += &format!(
            " gso={} full_copy={}\nengine verdict_sends={sends} recv_calls={recvs} wakes={}\n",
            self.gso as u8,
            self.full_copy as u8,
            WAKES.load(Ordering::Relaxed)
        );
        let mut keys: Vec<_> = self.links.keys().collect();
        keys.sort();
        for k in keys {
            let l = &self.links[k];
            let s = &l.stats;
            out += &format!(
                "link {} gen={} held={} packets={} bytes={} dropped_down={} dropped_loss={} dropped_limit={} duplicated={} corrupted={} reordered={} hold_jitter_us={:.0}\n",
                k.map(|m| fmt_mac(&m)).unwrap_or_else(|| "*".into()), l.gen, l.held, s.packets, s.bytes,
                s.dropped_down, s.dropped_loss, s.dropped_limit, s.duplicated, s.corrupted, s.reordered,
                s.hold_jitter_ns / 1000.0);
        }
        out
    }
}

/// Whether a held packet's bytes stay in the engine (its kernel copy dropped at once) rather than in the kernel's
/// queue: only past the kernel bound, only with the whole packet copied, only IPv4 (what `inject` can send) and
/// no larger than the engine can send (a GSO super-packet stays in the kernel: few of them carry much).
/// `whole`: every byte was copied and the checksum is final (not left to the device: NFQA_SKB_CSUMNOTREADY).
fn keep_bytes(kernel_held: u64, kernel_hold: u64, whole: bool, pkt: &[u8], max_len: usize) -> bool {
    kernel_held >= kernel_hold
        && whole
        && pkt.len() >= 20
        && pkt[0] >> 4 == 4
        && pkt.len() <= max_len
}

fn usage() -> ! {
    eprintln!("usage: swarm-linkd run [--swarm NAME] --queue N [--control PATH] [--config FILE] [--link 'MAC|* key=value ...']... \
               [--max-bytes B] [--max-packets N] [--kernel-hold N] [--seed S] [--pidfile PATH]\n       \
               swarm-linkd run [--swarm NAME] --instance 'queue=N control=PATH state=PATH [inject-dev=IF inject-mac=MAC]'... \
               [--tick-us T] [--tick-pps R] [--max-bytes B] [--max-packets N] [--realtime]\n       \
               swarm-linkd ctl --control PATH set|sched|stats|ping|schedlog|schedclear   (set and sched read stdin)\n       \
               swarm-linkd check [--max-bytes B] < config");
    std::process::exit(2);
}

fn bad(msg: &str) -> ! {
    eprintln!("swarm-linkd: {msg}");
    std::process::exit(2);
}

/// The interface's MTU (1500 when it cannot be read).
fn iface_mtu(fd: i32, dev: &str) -> usize {
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req
        .ifr_name
        .iter_mut()
        .zip(dev.bytes().take(libc::IFNAMSIZ - 1))
    {
        *d = s as libc::c_char;
    }
    if unsafe { libc::ioctl(fd, libc::SIOCGIFMTU, &mut req) } == 0 {
        (unsafe { req.ifr_ifru.ifru_mtu }) as usize
    } else {
        1500
    }
}

/// A send-only AF_PACKET socket on `dev` (protocol 0: it receives nothing), with its interface index.
fn packet_socket(dev: &str, mac: Mac) -> (i32, i32, Mac) {
    let name = std::ffi::CString::new(dev)
        .unwrap_or_else(|_| bad(&format!("--inject-dev {dev:?}: bad name")));
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) } as i32;
    if ifindex == 0 {
        bad(&format!(
            "--inject-dev {dev:?}: no such interface in this namespace"
        ));
    }
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        bad(&format!(
            "--inject-dev {dev:?}: cannot open a packet socket (needs CAP_NET_RAW)"
        ));
    }
    (fd, ifindex, mac)
}

fn parse_opts(args: &[String]) -> (Opts, Vec<String>) {
    let mut o = Opts {
        queue: 0,
        control: None,
        config: None,
        links: vec![],
        max_bytes: 1 << 30,
        max_packets: 1_000_000,
        seed: 0,
        pidfile: None,
        state: None,
        realtime: false,
        inject_dev: None,
        inject_mac: None,
        kernel_hold: 49_152,
        instances: vec![],
        tick_ns: 250_000,
        tick_pps: 4_000,
        max_sched: 1_000_000,
    };
    let mut rest = vec![];
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        let val = |i: usize| {
            args.get(i + 1)
                .cloned()
                .unwrap_or_else(|| bad(&format!("{a}: missing value")))
        };
        match a {
            "--queue" => {
                o.queue = val(i)
                    .parse()
                    .unwrap_or_else(|_| bad(&format!("--queue {:?}: expected 0-65535", val(i))))
            }
            "--control" => o.control = Some(val(i)),
            "--config" => o.config = Some(val(i)),
            "--link" => o.links.push(val(i)),
            "--max-bytes" => {
                o.max_bytes = val(i)
                    .parse()
                    .unwrap_or_else(|_| bad(&format!("--max-bytes {:?}: expected bytes", val(i))))
            }
            "--max-packets" => {
                o.max_packets = val(i).parse().unwrap_or_else(|_| {
                    bad(&format!("--max-packets {:?}: expected a count", val(i)))
                })
            }
            "--seed" => {
                o.seed = val(i)
                    .parse()
                    .unwrap_or_else(|_| bad(&format!("--seed {:?}: expected a number", val(i))))
            }
            "--pidfile" => o.pidfile = Some(val(i)),
            "--kernel-hold" => {
                o.kernel_hold = val(i).parse().unwrap_or_else(|_| {
                    bad(&format!("--kernel-hold {:?}: expected a count", val(i)))
                })
            }
            "--state" => o.state = Some(val(i)),
            // a label only: the swarm this engine serves, so `ps` (and `swarm down`/`wipe` after a crash)
            // can tell whose engine a process is
            "--swarm" => {
                val(i);
            }
            "--instance" => o.instances.push(val(i)),
            "--tick-us" => {
                o.tick_ns = 1000
                    * val(i).parse::<u64>().unwrap_or_else(|_| {
                        bad(&format!(
                            "--tick-us {:?}: expected microseconds (0: never tick)",
                            val(i)
                        ))
                    })
            }
            "--tick-pps" => {
                o.tick_pps = val(i).parse().unwrap_or_else(|_| {
                    bad(&format!("--tick-pps {:?}: expected packets/s", val(i)))
                })
            }
            "--max-sched" => {
                o.max_sched = val(i).parse().unwrap_or_else(|_| {
                    bad(&format!(
                        "--max-sched {:?}: expected a count of changes",
                        val(i)
                    ))
                })
            }
            "--inject-dev" => o.inject_dev = Some(val(i)),
            "--inject-mac" => {
                o.inject_mac = Some(model::parse_mac(&val(i)).unwrap_or_else(|| {
                    bad(&format!(
                        "--inject-mac {:?}: expected aa:bb:cc:dd:ee:ff",
                        val(i)
                    ))
                }))
            }
            "--realtime" => {
                o.realtime = true;
                i += 1;
                continue;
            }
            "-h" | "--help" => usage(),
            _ if a.starts_with("--") => bad(&format!("unknown option {a}")),
            _ => {
                rest.push(args[i].clone());
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    (o, rest)
}

fn read_stdin() -> String {
    let mut s = String::new();
    std::io::stdin()
        .read_to_string(&mut s)
        .unwrap_or_else(|e| bad(&format!("stdin: {e}")));
    s
}

fn ctl(o: &Opts, rest: &[String]) -> i32 {
    let path = o
        .control
        .as_deref()
        .unwrap_or_else(|| bad("ctl: --control PATH is required"));
    let cmd = rest.first().map(String::as_str).unwrap_or_else(|| usage());
    let body = match cmd {
        "set" | "sched" if rest.len() > 1 => format!("{cmd}\n{}\n", rest[1..].join("\n")),
        "set" | "sched" => format!("{cmd}\n{}", read_stdin()),
        "stats" | "ping" | "schedlog" | "schedclear" => format!("{cmd}\n"),
        _ => usage(),
    };
    let mut s = match UnixStream::connect(path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("swarm-linkd: {path}: {e} (engine not running?)");
            return 1;
        }
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    s.write_all(body.as_bytes())
        .and_then(|_| s.shutdown(std::net::Shutdown::Write))
        .ok();
    let mut reply = String::new();
    if let Err(e) = s.read_to_string(&mut reply) {
        eprintln!("swarm-linkd: {path}: {e}");
        return 1;
    }
    if let Some(msg) = reply.strip_prefix("error: ") {
        eprint!("swarm-linkd: {msg}");
        return 2;
    }
    print!("{reply}");
    0
}

/// A control connection's request (None when it could not be read in time).
fn read_request(conn: &mut UnixStream) -> Option<String> {
    conn.set_nonblocking(false).ok();
    conn.set_read_timeout(Some(Duration::from_secs(2))).ok();
    let mut req = String::new();
    conn.read_to_string(&mut req).ok().map(|_| req)
}

/// The queue's saved configuration (read again by a restarted engine, so a restart keeps the links).
fn save_state(eng: &Engine, state: Option<&str>) {
    if let Some(path) = state {
        let tmp = format!("{path}.tmp");
        if std::fs::write(&tmp, eng.config_text())
            .and_then(|_| std::fs::rename(&tmp, path))
            .is_err()
        {
            eprintln!("swarm-linkd: --state {path}: cannot save the configuration");
        }
    }
}

fn handle_control(
    eng: &mut Engine,
    q: &mut nfq::Queue,
    cmd: &str,
    body: &str,
    state: Option<&str>,
) -> String {
    match cmd {
        "ping" => format!(
            "ok pid={} gen={} restarted={}\n",
            std::process::id(),
            eng.gen,
            eng.restarted as u8
        ),
        "stats" => eng.stats(q),
        "set" => match parse_config(body).and_then(|c| check_bound(&c, eng.max_bytes).map(|_| c)) {
            Ok(cfgs) => {
                let gen = eng.apply(cfgs);
                eng.set_lines(body);
                eng.tune(q);
                save_state(eng, state);
                format!("ok gen={gen} set_at_ns={}\n", eng.set_at)
            }
            Err(e) => format!("error: {e}\n"),
        },
        other => format!(
            "error: unknown request {other:?} (set, stats, ping, sched, schedlog, schedclear)\n"
        ),
    }
}

/// The engine's schedule and what its entries are checked against: the queues it serves (with each node's own
/// MAC where known) and every node's MAC.
struct Sched {
    s: sched::Schedule,
    queues: HashMap<u16, Option<Mac>>,
    macs: HashSet<Mac>,
    index: HashMap<u16, usize>,
}

impl Sched {
    fn new(insts: &[Inst], max_pending: usize) -> Sched {
        Sched {
            s: sched::Schedule::new(max_pending),
            queues: insts.iter().map(|i| (i.o.queue, i.o.inject_mac)).collect(),
            // with one queue the inject MAC is the node's own: other nodes' MACs are not known
            macs: if insts.len() > 1 {
                insts.iter().filter_map(|i| i.o.inject_mac).collect()
            } else {
                HashSet::new()
            },
            index: insts
                .iter()
                .enumerate()
                .map(|(k, i)| (i.o.queue, k))
                .collect(),
        }
    }

    fn request(&mut self, cmd: &str, body: &str, max_bytes: u64) -> Option<String> {
        Some(match cmd {
            "sched" => {
                let known = sched::Known {
                    queues: &self.queues,
                    macs: &self.macs,
                    max_bytes,
                };
                match self.s.add(body, &known, real_ns(), mono_ns()) {
                    Ok((n, first)) => format!(
                        "ok entries={n} first_id={first} pending={}\n",
                        self.s.pending()
                    ),
                    Err(e) => format!("error: {e}\n"),
                }
            }
            "schedlog" => self.s.drain_log(),
            "schedclear" => format!("ok dropped={}\n", self.s.clear()),
            _ => return None,
        })
    }

    /// Apply every change that is due, each to its queue's link; then retune and save the queues it touched.
    fn apply_due(&mut self, insts: &mut [Inst]) {
        if self.s.next_due().is_none_or(|d| d > mono_ns()) {
            return;
        }
        let mut touched = vec![];
        for (_, c) in self.s.take_due(mono_ns()) {
            let k = self.index[&c.queue];
            insts[k].eng.set_link(c.key, c.cfg, c.line);
            touched.push(k);
        }
        touched.sort();
        touched.dedup();
        for k in touched {
            let i = &mut insts[k];
            i.eng.tune(&mut i.q);
            save_state(&i.eng, i.o.state.as_deref());
        }
    }
}

/// One queue the engine serves: the links of one receiving node (the packets sent to it), with that node's
/// control socket, saved configuration and inject device. A swarm's engine serves every node's queue from one
/// process (`--instance`, repeated): one wake-up takes what waits in all of them and releases what is due in
/// all of them, instead of one process and one wake-up per packet per node.
struct Inst {
    eng: Engine,
    q: nfq::Queue,
    listener: Option<UnixListener>,
    o: Opts,
}

/// `--instance "queue=N control=PATH state=PATH config=FILE inject-dev=IF inject-mac=MAC"`: the options of one
/// queue, on top of the engine-wide ones (bounds, seed, --realtime, --pidfile).
fn parse_instance(spec: &str, base: &Opts) -> Opts {
    let mut o = base.clone();
    o.links = vec![];
    o.control = None;
    o.state = None;
    o.config = None;
    o.inject_dev = None;
    o.inject_mac = None;
    for w in spec.split_whitespace() {
        let (k, v) = w
            .split_once('=')
            .unwrap_or_else(|| bad(&format!("--instance {spec:?}: {w:?} is not key=value")));
        match k {
            "queue" => o.queue = v.parse().unwrap_or_else(|_| bad(&format!("--instance {spec:?}: queue {v:?}: expected 0-65535"))),
            "control" => o.control = Some(v.into()),
            "state" => o.state = Some(v.into()),
            "config" => o.config = Some(v.into()),
            "inject-dev" => o.inject_dev = Some(v.into()),
            "inject-mac" => o.inject_mac = Some(model::parse_mac(v).unwrap_or_else(|| bad(&format!("--instance {spec:?}: inject-mac {v:?}: expected aa:bb:cc:dd:ee:ff")))),
            _ => bad(&format!("--instance {spec:?}: unknown key {k:?} (queue control state config inject-dev inject-mac)")),
        }
    }
    o
}

fn open_instance(o: Opts, sock: &Rc<RefCell<nfq::Sock>>) -> Inst {
    let mut text = String::new();
    let saved = o
        .state
        .as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok());
    let restarted = saved.is_some();
    if let Some(saved) = saved {
        text = saved; // restarted: the last configuration handed over the control socket
    } else if let Some(path) = &o.config {
        text =
            std::fs::read_to_string(path).unwrap_or_else(|e| bad(&format!("--config {path}: {e}")));
    }
    for l in &o.links {
        let line = if l.starts_with("link ") {
            l.clone()
        } else {
            format!("link {l}")
        };
        parse_link_line(&line).unwrap_or_else(|e| bad(&format!("--link: {e}")));
        text += &format!("\n{line}");
    }
    let cfgs = parse_config(&text)
        .and_then(|c| check_bound(&c, o.max_bytes).map(|_| c))
        .unwrap_or_else(|e| bad(&e.to_string()));
    let raw = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::IPPROTO_RAW,
        )
    };
    let l2 = match (&o.inject_dev, o.inject_mac) {
        (Some(dev), Some(mac)) => Some(packet_socket(dev, mac)),
        (None, None) => None,
        _ => bad("--inject-dev and --inject-mac go together"),
    };
    let inject_max = match (&o.inject_dev, l2) {
        (Some(dev), Some((fd, _, _))) => iface_mtu(fd, dev),
        _ => 65_535,
    };
    let mut eng = Engine {
        links: HashMap::new(),
        gen: 0,
        set_at: 0,
        first_packet_at: 0,
        heap: BinaryHeap::new(),
        seq: 0,
        rng: Rng::new(if o.seed == 0 {
            real_ns() ^ o.queue as u64
        } else {
            o.seed
        }),
        max_bytes: o.max_bytes,
        max_packets: o.max_packets,
        held_total: 0,
        held_peak: 0,
        unmatched: 0,
        dropped_full: 0,
        injected: 0,
        inject_errors: 0,
        raw,
        l2,
        inject_max,
        kernel_held: 0,
        kernel_held_peak: 0,
        kernel_hold: o.kernel_hold,
        stolen: 0,
        steal_armed: false,
        full_copy: false,
        gso: false,
        restarted,
        stamped: 0,
        late: [0; LATE_BOUNDS_US.len() + 1],
        lines: BTreeMap::new(),
    };
    eng.set_lines(&text);
    eng.apply(cfgs);
    let mut q = nfq::Queue::open(sock, o.queue, COPY_META, o.max_packets).unwrap_or_else(|e| {
        eprintln!("swarm-linkd: NFQUEUE {}: {e} (needs root/CAP_NET_ADMIN and the kernel's nfnetlink_queue; is another engine bound to it?)", o.queue);
        std::process::exit(1);
    });
    eng.tune(&mut q);
    let listener = o.control.as_ref().map(|p| {
        let _ = std::fs::remove_file(p);
        let l = UnixListener::bind(p).unwrap_or_else(|e| {
            eprintln!("swarm-linkd: --control {p}: {e}");
            std::process::exit(1);
        });
        l.set_nonblocking(true).ok();
        l
    });
    eprintln!(
        "swarm-linkd: queue {} bound, {} link(s), pid {}{}",
        o.queue,
        eng.links.len(),
        std::process::id(),
        if eng.restarted {
            " (restarted with the saved configuration: the previous engine died)"
        } else {
            ""
        }
    );
    Inst {
        eng,
        q,
        listener,
        o,
    }
}

/// Release what is due in every queue; the verdicts of all queues go out together (one datagram per ~60 KB).
fn release_all(insts: &mut [Inst], sock: &RefCell<nfq::Sock>) {
    let now = mono_ns();
    for i in insts.iter_mut() {
        i.eng.release(&mut i.q, now);
        i.eng.arm_keeping(&mut i.q);
    }
    sock.borrow_mut().flush();
}

/// A socket that asks for receive timestamps: while one exists the kernel stamps every packet it receives,
/// and NFQUEUE passes the stamp on (NFQA_TIMESTAMP). -1 when it cannot be made (packets are then stamped when
/// read).
fn timestamp_socket() -> i32 {
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    let one: i32 = 1;
    if fd >= 0 {
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                &one as *const _ as *const libc::c_void,
                4,
            )
        };
    }
    fd
}

fn run(o: Opts) -> i32 {
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1000u64, 0, 0, 0); // 1 us: sub-millisecond release times
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let specs: Vec<Opts> = if o.instances.is_empty() {
        vec![o.clone()]
    } else {
        if o.control.is_some()
            || o.state.is_some()
            || o.config.is_some()
            || !o.links.is_empty()
            || o.inject_dev.is_some()
        {
            bad("--instance carries its own queue, control, state, config and inject-dev: give them there");
        }
        let specs: Vec<Opts> = o.instances.iter().map(|s| parse_instance(s, &o)).collect();
        let mut queues: Vec<u16> = specs.iter().map(|s| s.queue).collect();
        queues.sort();
        if let Some(w) = queues.windows(2).find(|w| w[0] == w[1]) {
            bad(&format!("--instance: queue {} is given twice", w[0]));
        }
        specs
    };
    // one netlink socket for every queue: its receive buffer holds the messages of all of them between reads
    let rcvbuf = (64i64 << 20)
        .saturating_mul(specs.len() as i64)
        .min(1 << 30) as i32;
    let sock = nfq::Sock::open(rcvbuf).unwrap_or_else(|e| {
        eprintln!("swarm-linkd: netlink socket: {e}");
        std::process::exit(1);
    });
    let mut insts: Vec<Inst> = specs.into_iter().map(|s| open_instance(s, &sock)).collect();
    let index: HashMap<u16, usize> = insts
        .iter()
        .enumerate()
        .map(|(k, i)| (i.o.queue, k))
        .collect();
    let mut sched = Sched::new(&insts, o.max_sched);
    if o.realtime {
        // release times are the product: a low real-time priority keeps them sub-millisecond on a busy host
        // (the kernel's RT throttling still leaves 5 % to everything else); else a high nice priority
        let param = libc::sched_param { sched_priority: 1 };
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
            unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -10) };
        }
    }
    if let Some(p) = &o.pidfile {
        std::fs::write(p, format!("{}\n", std::process::id())).ok();
    }

    // poll set: the queues' socket and one epoll set of every control socket (its event data: the instance).
    // Polling one epoll descriptor each tick costs the same for 1 or 100 nodes; polling every listener did
    // not (15 % of the engine's time at n=32).
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        eprintln!("swarm-linkd: epoll: {}", std::io::Error::last_os_error());
        return 1;
    }
    for (k, i) in insts.iter().enumerate() {
        if let Some(l) = &i.listener {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: k as u64,
            };
            if unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, l.as_raw_fd(), &mut ev) } < 0 {
                eprintln!("swarm-linkd: epoll: {}", std::io::Error::last_os_error());
                return 1;
            }
        }
    }
    let mut fds = [
        libc::pollfd {
            fd: sock.borrow().fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: ep,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let mut events: Vec<libc::epoll_event> = vec![libc::epoll_event { events: 0, u64: 0 }; 64];
    // one packet read in a batch: its queue's instance and what `BatchEntry` keeps
    let mut batch: Vec<(usize, BatchEntry)> = Vec::with_capacity(256);
    let mut arena: Vec<u8> = Vec::with_capacity(256 * 256);
    // Tick mode: above --tick-pps packets/s (all queues together) the engine stops waking for each packet and
    // each due time; it wakes every --tick-us instead, reads what waits in every queue and releases what is due
    // in every queue. A packet's hold still starts at the kernel's arrival stamp; a release is late by at most
    // one tick. Below the rate it waits on the queues and wakes at each due time (sub-10 us lateness).
    let stamps = timestamp_socket();
    let mut stamped: u64 = 0;
    let mut window_start = mono_ns();
    let mut window_packets: u64 = 0;
    let mut ticking = false;
    let mut wakes: u64 = 0;
    while !STOP.load(Ordering::SeqCst) {
        let now = mono_ns();
        if now - window_start >= 50_000_000 {
            let pps = window_packets * 1_000_000_000 / (now - window_start);
            ticking = o.tick_ns > 0 && pps >= o.tick_pps;
            window_start = now;
            window_packets = 0;
        }
        let next = insts
            .iter()
            .filter_map(|i| i.eng.heap.peek().map(|h| h.0.due))
            .chain(sched.s.next_due())
            .min();
        let mut wait = next.map(|d| d.saturating_sub(now)).unwrap_or(1_000_000_000);
        if ticking {
            wait = o.tick_ns; // one tick, whatever is due within it waits for its end
        }
        if sock.borrow().stashed() {
            wait = 0; // packets that came while a configuration awaited its ack: read them now
        }
        let ts = libc::timespec {
            tv_sec: (wait / 1_000_000_000) as i64,
            tv_nsec: (wait % 1_000_000_000) as i64,
        };
        // ticking: the queues' socket is not polled (it is read at the tick), only the control sockets
        let at = ticking as usize;
        for f in fds.iter_mut() {
            f.revents = 0;
        }
        let n = unsafe {
            libc::ppoll(
                fds[at..].as_mut_ptr(),
                (fds.len() - at) as u64,
                &ts,
                std::ptr::null(),
            )
        };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            eprintln!("swarm-linkd: poll: {}", std::io::Error::last_os_error());
            return 1;
        }
        wakes += 1;
        WAKES.store(wakes, Ordering::Relaxed);
        sched.apply_due(&mut insts);
        // packets first (up to 256 per read, from every queue), then what is due in every queue, then more
        // packets: a burst neither delays due verdicts nor waits behind them
        let mut more = ticking || fds[0].revents != 0 || sock.borrow().stashed();
        while more {
            batch.clear();
            arena.clear();
            let got = sock.borrow_mut().recv_batch(256, |queue, p| {
                let Some(&k) = index.get(&queue) else {
                    return; // not ours (cannot happen: the socket is bound to our queues only)
                };
                batch.push((
                    k,
                    (
                        p.id,
                        p.hw_src,
                        p.len,
                        arena.len(),
                        p.payload.len(),
                        p.csum_not_ready,
                        p.stamp_ns,
                    ),
                ));
                arena.extend_from_slice(p.payload);
            });
            match got {
                Ok(n) => more = n >= 256,
                Err(e) => {
                    eprintln!("swarm-linkd: NFQUEUE receive: {e}");
                    return 1;
                }
            }
            if batch.is_empty() {
                break;
            }
            // both clocks at one instant, after the read (before, the read itself lay between them)
            let (now, real) = mono_real_ns();
            let mut touched: u64 = 0;
            for &(k, (id, hw_src, len, at, n, csum_not_ready, stamp_ns)) in batch.iter() {
                let inst = &mut insts[k];
                let payload = &arena[at..at + n];
                // the kernel's arrival stamp, on the engine's clock; never in the future nor more than a second
                // back (a clock step)
                let arrived = match stamp_ns {
                    Some(t) if t <= real && real - t < 1_000_000_000 => {
                        now.saturating_sub(real - t)
                    }
                    _ => now,
                };
                stamped += stamp_ns.is_some() as u64;
                inst.eng.on_packet(
                    &mut inst.q,
                    nfq::Packet {
                        id,
                        hw_src,
                        len,
                        payload,
                        csum_not_ready,
                        stamp_ns,
                    },
                    arrived,
                    now,
                );
                if k < 64 {
                    touched |= 1 << k;
                } else {
                    inst.eng.arm_keeping(&mut inst.q);
                }
            }
            window_packets += batch.len() as u64;
            while touched != 0 {
                let k = touched.trailing_zeros() as usize;
                touched &= touched - 1;
                let inst = &mut insts[k];
                inst.eng.arm_keeping(&mut inst.q);
            }
            if more {
                release_all(&mut insts, &sock); // due verdicts do not wait behind a burst
            }
        }
        release_all(&mut insts, &sock);
        let ready = if fds[1].revents != 0 {
            unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), events.len() as i32, 0) }.max(0)
                as usize
        } else {
            0
        };
        for ev in events.iter().take(ready) {
            let k = ev.u64 as usize;
            let conns: Vec<UnixStream> = match &insts[k].listener {
                Some(l) => std::iter::from_fn(|| l.accept().ok().map(|c| c.0)).collect(),
                None => vec![],
            };
            for mut conn in conns {
                let Some(req) = read_request(&mut conn) else {
                    continue;
                };
                let (cmd, body) = req.split_once('\n').unwrap_or((req.as_str(), ""));
                let cmd = cmd.trim();
                let reply = sched.request(cmd, body, o.max_bytes).unwrap_or_else(|| {
                    let inst = &mut insts[k];
                    handle_control(
                        &mut inst.eng,
                        &mut inst.q,
                        cmd,
                        body,
                        inst.o.state.as_deref(),
                    )
                });
                conn.write_all(reply.as_bytes()).ok();
            }
            sched.apply_due(&mut insts);
        }
    }
    let held: u64 = insts.iter().map(|i| i.eng.held_total).sum();
    eprintln!("swarm-linkd: stopping; {held} held packet(s) are dropped by the kernel ({wakes} wake-ups, {stamped} packets with the kernel's arrival stamp)");
    if stamps >= 0 {
        unsafe { libc::close(stamps) };
    }
    unsafe { libc::close(ep) };
    for i in &insts {
        if let Some(p) = &i.o.control {
            let _ = std::fs::remove_file(p);
        }
    }
    if let Some(p) = &o.pidfile {
        let _ = std::fs::remove_file(p);
    }
    0
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (sub, args) = match args.first().map(String::as_str) {
        Some("run") | Some("ctl") | Some("check") => (args[0].clone(), args[1..].to_vec()),
        Some(a) if a.starts_with("--") && a != "--help" => ("run".to_string(), args.clone()),
        _ => usage(),
    };
    let (o, rest) = parse_opts(&args);
    let code = match sub.as_str() {
        "run" => run(o),
        "ctl" => ctl(&o, &rest),
        "check" => match parse_config(&read_stdin()).and_then(|c| check_bound(&c, o.max_bytes)) {
            Ok(()) => 0,
            Err(e) => bad(&e.to_string()),
        },
        _ => usage(),
    };
    std::process::exit(code);
}

#[cfg(test)]
mod tests {
    use super::{follow_default, keep_bytes, link_key};
    use crate::model::{parse_link_line, Link};
    use std::collections::HashMap;

    #[test]
    fn a_sender_without_a_line_gets_a_link_of_its_own_from_the_default() {
        let cfg = |l: &str| parse_link_line(l).unwrap().1;
        let a = Some([2, 0, 0, 0, 0, 1]);
        let b = Some([2, 0, 0, 0, 0, 2]);
        let mut links = HashMap::new();
        assert_eq!(link_key(&mut links, a), None); // no default: the packet passes
        links.insert(None, Link::new(cfg("link * delay=10ms rate=1mbit"), 1));
        links.insert(b, Link::new(cfg("link 02:00:00:00:00:02 down"), 1));
        assert_eq!(link_key(&mut links, a), Some(a)); // made from the default, with state of its own
        assert!(links[&a].from_default && links[&a].cfg.delay_ns == 10_000_000);
        assert_eq!(link_key(&mut links, b), Some(b)); // its own line
        assert!(!links[&b].from_default);
        assert_eq!(link_key(&mut links, None), Some(None)); // no source MAC: the default itself
        follow_default(&mut links, &cfg("link * delay=20ms"), 2);
        assert_eq!(links[&a].cfg.delay_ns, 20_000_000);
        assert!(links[&b].cfg.down); // a sender with its own line keeps it
        assert_eq!(links.len(), 3);
    }

    #[test]
    fn bytes_are_kept_only_past_the_kernel_bound_for_whole_ipv4_packets_that_fit() {
        let v4 = [0x45u8; 1400];
        assert!(!keep_bytes(100, 101, true, &v4, 1500)); // below the bound: the kernel holds it
        assert!(keep_bytes(101, 101, true, &v4, 1500));
        assert!(!keep_bytes(101, 101, false, &v4[..128], 1500)); // only metadata was copied, or the checksum is unfinished
        assert!(!keep_bytes(101, 101, true, &[0x60u8; 1400], 1500)); // IPv6: inject sends IPv4 only
        assert!(!keep_bytes(101, 101, true, &[0x45u8; 9000], 1500)); // a GSO super-packet stays in the kernel
        assert!(!keep_bytes(101, 101, true, &[0x45u8; 10], 1500));
    }
}
