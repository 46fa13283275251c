//! swarm-ltpcla: dtn7's External Convergence Layer module for LTP (RFC 5326) over UDP.
//!
//! It registers with its node's dtnd over the ECLA WebSocket (`dtnd --ecla`, ws://127.0.0.1:<web>/ws/ecla) as
//! the convergence layer `ltp`, takes the bundles dtnd forwards to `ecla+ltp://IP:port/node` peers, sends
//! each as one LTP block (red part reliable: checkpoints, reports, retransmission; green part best effort)
//! and hands every block it receives back to dtnd. The protocol state machine is `licklider-core` (sans-I/O,
//! timers with link-state suspension); this program adds what that crate leaves to its driver and what a
//! long-delay link needs: pacing at the link's rate (token bucket), socket buffers of the bandwidth-delay
//! product, per-peer one-way light time, link-state cues from the contact plan (timers suspended while a link
//! is down), and a CSV record of every block, retransmission, cancel and refusal (nothing dropped silently).
mod bundles;
mod pace;
mod schedule;

use base64::prelude::BASE64_STANDARD;
use base64::Engine as _;
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use licklider_core::segment::{Segment, SegmentBody};
use licklider_core::{
    Config, Duration as LDur, Engine, EngineId, Input, LinkStateCue, Notice, Output, PeerConfig,
    SessionId, Timestamp, TransmissionRequest,
};
use pace::{socket_buffer, TokenBucket};
use schedule::Schedule;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io::Write;
use std::net::SocketAddr;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

/// Bundle Protocol's LTP client service ID (RFC 7116).
const BP_SERVICE: u64 = 1;
/// LTP header allowance inside a segment (control byte, SDNVs of engine, session, service, offset, length,
/// checkpoint and report serials): the payload per segment is the segment size minus this.
const HEADER_ALLOWANCE: usize = 32;
/// IPv4 + UDP headers: what a segment costs the link beyond its own bytes (paced with it).
const IP_UDP: usize = 28;
/// dtnd's WebSocket frame limit (axum's default, 16 MiB); a received block is handed to dtnd base64-encoded.
const WS_FRAME_LIMIT: usize = 16 << 20;

fn die(msg: &str) -> ! {
    eprintln!("swarm-ltpcla: {msg}");
    std::process::exit(2)
}

#[derive(Debug, Clone)]
struct PeerArg {
    engine: u64,
    addr: SocketAddr,
    rate: f64, // bytes/s
    owlt: f64, // s
}

#[derive(Debug)]
struct Args {
    ws: String,
    name: String,
    engine: u64,
    bind: SocketAddr,
    peers: Vec<PeerArg>,
    segment: usize,
    red: f64,
    log: Option<String>,
    status: Option<String>,
    down: Option<String>,
    margin: f64,
    rtx_limit: u32,
    attempts: u32,
    max_inflight: usize,
    max_block: usize,
}

const USAGE: &str = "usage: swarm-ltpcla --ws URL --engine N --bind IP:PORT [--peer ENGINE,IP:PORT,RATE_BIT_S,OWLT_S]... \
[--name ltp] [--segment BYTES] [--red FRACTION] [--log CSV] [--status JSON] [--down FILE] [--margin S] \
[--rtx-limit N] [--attempts N] [--max-inflight BYTES] [--max-block BYTES]";

fn parse_args(argv: &[String]) -> Result<Args, String> {
    let mut a = Args {
        ws: String::new(),
        name: "ltp".into(),
        engine: 0,
        bind: "0.0.0.0:1113".parse().unwrap(),
        peers: vec![],
        segment: 1360,
        red: 1.0,
        log: None,
        status: None,
        down: None,
        margin: 0.5,
        rtx_limit: 20,
        attempts: 3,
        max_inflight: 512 << 20,
        max_block: 64 << 20,
    };
    let mut it = argv.iter();
    let mut engine_set = false;
    while let Some(flag) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag}: missing value"))
        };
        let num = |v: String, f: &str| {
            v.parse::<f64>()
                .map_err(|_| format!("{f} {v:?}: not a number"))
        };
        match flag.as_str() {
            "--ws" => a.ws = val()?,
            "--name" => a.name = val()?,
            "--engine" => {
                a.engine = val()?
                    .parse()
                    .map_err(|_| "--engine: not a whole number".to_string())?;
                engine_set = true
            }
            "--bind" => {
                a.bind = val()?
                    .parse()
                    .map_err(|_| "--bind: expected IP:PORT".to_string())?
            }
            "--peer" => {
                let v = val()?;
                let f: Vec<&str> = v.split(',').collect();
                if f.len() != 4 {
                    return Err(format!(
                        "--peer {v:?}: expected ENGINE,IP:PORT,RATE_BIT_S,OWLT_S"
                    ));
                }
                let rate = num(f[2].into(), "--peer rate")?;
                let owlt = num(f[3].into(), "--peer owlt")?;
                if rate.is_nan() || rate <= 0.0 || owlt.is_nan() || owlt < 0.0 {
                    return Err(format!("--peer {v:?}: rate must be > 0 and owlt >= 0"));
                }
                a.peers.push(PeerArg {
                    engine: f[0]
                        .parse()
                        .map_err(|_| format!("--peer {v:?}: engine is not a whole number"))?,
                    addr: f[1]
                        .parse()
                        .map_err(|_| format!("--peer {v:?}: expected IP:PORT"))?,
                    rate: rate / 8.0,
                    owlt,
                });
            }
            "--segment" => a.segment = num(val()?, "--segment")? as usize,
            "--red" => a.red = num(val()?, "--red")?,
            "--log" => a.log = Some(val()?),
            "--status" => a.status = Some(val()?),
            "--down" => a.down = Some(val()?),
            "--margin" => a.margin = num(val()?, "--margin")?,
            "--rtx-limit" => a.rtx_limit = num(val()?, "--rtx-limit")? as u32,
            "--attempts" => a.attempts = num(val()?, "--attempts")? as u32,
            "--max-inflight" => a.max_inflight = num(val()?, "--max-inflight")? as usize,
            "--max-block" => a.max_block = num(val()?, "--max-block")? as usize,
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?}; {USAGE}")),
        }
    }
    if a.ws.is_empty() || !engine_set {
        return Err(format!("--ws and --engine are required; {USAGE}"));
    }
    if !(64..=65_507).contains(&a.segment) {
        return Err(format!(
            "--segment {}: must be 64..65507 bytes (one UDP datagram)",
            a.segment
        ));
    }
    if !(0.0..=1.0).contains(&a.red) {
        return Err(format!("--red {}: must be 0..1", a.red));
    }
    if a.peers.iter().any(|p| p.engine == a.engine) {
        return Err(format!("--peer: engine {} is this engine", a.engine));
    }
    Ok(a)
}

/// One line per event: `unix_time,event,peer,session,bundle_id,bytes,detail`.
struct Record {
    out: Option<std::io::BufWriter<std::fs::File>>,
}

impl Record {
    fn open(path: &Option<String>) -> Record {
        let out = path.as_ref().map(|p| {
            let new = !std::path::Path::new(p).exists();
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .unwrap_or_else(|e| die(&format!("--log {p}: {e}")));
            let mut w = std::io::BufWriter::new(f);
            if new {
                let _ = writeln!(w, "time,event,peer,session,bundle_id,bytes,detail");
            }
            w
        });
        Record { out }
    }
    fn ev(
        &mut self,
        event: &str,
        peer: u64,
        session: &str,
        bundle: &str,
        bytes: usize,
        detail: &str,
    ) {
        if let Some(w) = self.out.as_mut() {
            let _ = writeln!(
                w,
                "{:.6},{event},{peer},{session},{},{bytes},{}",
                unix_now(),
                bundle.replace(',', ";"),
                detail.replace(',', ";")
            );
        }
    }
    fn flush(&mut self) {
        if let Some(w) = self.out.as_mut() {
            let _ = w.flush();
        }
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

struct Peer {
    arg: PeerArg,
    bucket: TokenBucket,
    tx_on: bool,
    down: bool,
}

struct Pending {
    peer: u64,
    bundle: String,
    data: Bytes,
    attempts: u32,
}

struct Sending {
    peer: u64,
    bundle: String,
    data: Bytes,
    attempts: u32,
    started: f64,
    sent_hi: u64,
}

#[derive(Default)]
struct Partial {
    red: Option<Vec<u8>>,
    red_handed: bool, // the red part ended at a bundle boundary and went to dtnd on its own
    green: BTreeMap<u64, Vec<u8>>,
    eob_end: Option<u64>,
    last: f64,
    source: u64,
}

#[derive(Default, serde::Serialize)]
struct Counters {
    registered: bool,
    blocks_queued: u64,
    blocks_sent: u64,
    blocks_done: u64,
    blocks_received: u64,
    bytes_sent: u64,
    bytes_received: u64,
    segments_out: u64,
    segments_in: u64,
    retransmitted_segments: u64,
    retransmitted_bytes: u64,
    cancels: u64,
    recv_cancels: u64,
    refused: u64,
    dropped: u64,
    bundles_received: u64,
    duplicates: u64,
    unparsed_blocks: u64,
    unknown_engine: u64,
    unknown_session: u64,
    malformed: u64,
    send_would_block: u64,
    send_sessions: usize,
    recv_sessions: usize,
    queued: usize,
    inflight_bytes: usize,
    sndbuf: usize,
    rcvbuf: usize,
}

struct State {
    args: Args,
    engine: Engine,
    peers: BTreeMap<u64, Peer>,
    by_addr: HashMap<SocketAddr, u64>,
    schedule: Schedule,
    queue: VecDeque<Pending>,
    sending: HashMap<SessionId, Sending>,
    partial: HashMap<SessionId, Partial>,
    inflight: usize,
    to_dtnd: Vec<String>,
    rec: Record,
    c: Counters,
    t0: Instant,
    payload: usize,
    down_mtime: Option<SystemTime>,
    /// The peer of each of our sending sessions (the newest TX_SESSIONS_KEPT): replies to them carry our engine
    /// ID as originator, so this is how their sender is known.
    tx_peer: HashMap<SessionId, u64>,
    tx_order: VecDeque<SessionId>,
    seen: bundles::Seen,
    red_credit: f64,
    told_unknown: HashSet<u64>,
}

/// Sending sessions whose peer is remembered for late reports and cancel acknowledgements.
const TX_SESSIONS_KEPT: usize = 65_536;
/// How long (s) and how many bundles handed to dtnd are remembered to refuse a re-sent copy.
const SEEN_TTL: f64 = 3600.0;
const SEEN_KEPT: usize = 200_000;

/// The red length of a block of `len` bytes when a fraction `red` of the traffic is to be red: each block
/// (one bundle, as dtnd hands them over) is wholly red or wholly green, and `credit` carries the rounding
/// from block to block so that the red share of the bytes follows `red` (error diffusion). A bundle split
/// across red and green is what ION refuses (`CBOR error: not array.`).
fn red_share(credit: &mut f64, red: f64, len: u64) -> u64 {
    if red >= 1.0 {
        return len;
    }
    if red <= 0.0 {
        return 0;
    }
    *credit += red * len as f64;
    if *credit >= len as f64 / 2.0 {
        *credit -= len as f64;
        len
    } else {
        0
    }
}

impl State {
    fn mono(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }
    fn ts(&self) -> Timestamp {
        Timestamp::from_micros(self.t0.elapsed().as_micros() as u64)
    }

    fn cue(&mut self, cue: LinkStateCue) {
        let ts = self.ts();
        self.engine.handle_input(ts, Input::LinkCue(cue));
    }

    /// A bundle from dtnd for `dst` (IP:port of a peer's LTP socket).
    fn offer(&mut self, dst: &str, bundle: String, data: Vec<u8>) {
        let peer = dst
            .parse::<SocketAddr>()
            .ok()
            .and_then(|a| self.by_addr.get(&a).copied());
        let Some(peer) = peer else {
            self.c.refused += 1;
            self.rec.ev(
                "refused",
                0,
                "",
                &bundle,
                data.len(),
                &format!("no LTP peer at {dst}"),
            );
            eprintln!("swarm-ltpcla: refused bundle {bundle}: no LTP peer at {dst}");
            return;
        };
        if data.len() > self.args.max_block {
            self.c.refused += 1;
            self.rec.ev(
                "refused",
                peer,
                "",
                &bundle,
                data.len(),
                &format!("block larger than --max-block {}", self.args.max_block),
            );
            eprintln!(
                "swarm-ltpcla: refused bundle {bundle}: {} bytes > block limit {}",
                data.len(),
                self.args.max_block
            );
            return;
        }
        self.c.blocks_queued += 1;
        self.rec.ev("queued", peer, "", &bundle, data.len(), "");
        self.queue.push_back(Pending {
            peer,
            bundle,
            data: Bytes::from(data),
            attempts: 1,
        });
    }

    fn start_sessions(&mut self) {
        while let Some(front) = self.queue.front() {
            if self.inflight > 0 && self.inflight + front.data.len() > self.args.max_inflight {
                break;
            }
            let p = self.queue.pop_front().unwrap();
            let len = p.data.len() as u64;
            let red_len = red_share(&mut self.red_credit, self.args.red, len);
            let ts = self.ts();
            let req = TransmissionRequest {
                destination: EngineId(p.peer),
                client_service: BP_SERVICE,
                data: p.data.clone(),
                red_len,
            };
            match self.engine.request_transmission(ts, req) {
                Ok(sid) => {
                    self.inflight += p.data.len();
                    self.tx_peer.insert(sid, p.peer);
                    self.tx_order.push_back(sid);
                    if self.tx_order.len() > TX_SESSIONS_KEPT {
                        let old = self.tx_order.pop_front().unwrap();
                        self.tx_peer.remove(&old);
                    }
                    self.c.blocks_sent += 1;
                    self.rec.ev(
                        "start",
                        p.peer,
                        &sid.to_string(),
                        &p.bundle,
                        p.data.len(),
                        &format!("red {red_len} attempt {}", p.attempts),
                    );
                    let started = self.mono();
                    self.sending.insert(
                        sid,
                        Sending {
                            peer: p.peer,
                            bundle: p.bundle,
                            data: p.data,
                            attempts: p.attempts,
                            started,
                            sent_hi: 0,
                        },
                    );
                }
                Err(e) => {
                    self.c.dropped += 1;
                    self.rec.ev(
                        "dropped",
                        p.peer,
                        "",
                        &p.bundle,
                        p.data.len(),
                        &format!("engine refused: {e:?}"),
                    );
                    eprintln!(
                        "swarm-ltpcla: dropped bundle {}: engine refused {e:?}",
                        p.bundle
                    );
                }
            }
        }
    }

    /// Link-state cues: the contact plan (down: no transmission, timers suspended) and the pacer.
    fn link_cues(&mut self) {
        let (now, unix) = (self.mono(), unix_now());
        let ids: Vec<u64> = self.peers.keys().copied().collect();
        for id in ids {
            let down = self.schedule.down(id, unix);
            let peer = self.peers.get_mut(&id).unwrap();
            let changed = down != peer.down;
            peer.down = down;
            let want_tx = !down && peer.bucket.ready(now);
            let tx_changed = want_tx != peer.tx_on;
            peer.tx_on = want_tx;
            if changed {
                let e = EngineId(id);
                self.rec.ev(
                    if down { "link-down" } else { "link-up" },
                    id,
                    "",
                    "",
                    0,
                    "contact plan",
                );
                self.cue(if down {
                    LinkStateCue::RxStop { peer: e }
                } else {
                    LinkStateCue::RxStart { peer: e }
                });
            }
            if tx_changed {
                let e = EngineId(id);
                self.cue(if want_tx {
                    LinkStateCue::TxStart { peer: e }
                } else {
                    LinkStateCue::TxStop { peer: e }
                });
            }
        }
    }

    fn send_to(&mut self, sock: &std::net::UdpSocket, peer: u64, seg: &[u8]) {
        let addr = self.peers[&peer].arg.addr;
        loop {
            match sock.send_to(seg, addr) {
                Ok(_) => break,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.c.send_would_block += 1;
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
                Err(e) => {
                    // e.g. no route while an ISL is cut: LTP's retransmission recovers it; say so once per kind
                    self.rec
                        .ev("send-error", peer, "", "", seg.len(), &e.to_string());
                    break;
                }
            }
        }
        self.c.segments_out += 1;
        let now = self.mono();
        let p = self.peers.get_mut(&peer).unwrap();
        p.bucket.take(seg.len() + IP_UDP, now);
        if p.tx_on && !p.bucket.ready(now) {
            p.tx_on = false;
            self.cue(LinkStateCue::TxStop {
                peer: EngineId(peer),
            });
        }
    }

    /// Count retransmitted data of our own sessions: a data segment below what the session already sent.
    fn note_transmit(&mut self, seg: &[u8]) {
        let Ok(segs) = Segment::parse_all(seg) else {
            return;
        };
        for s in segs {
            if let SegmentBody::Data(d) = &s.body {
                if let Some(tx) = self.sending.get_mut(&s.session) {
                    let end = d.offset + d.data.len() as u64;
                    if d.offset < tx.sent_hi {
                        self.c.retransmitted_segments += 1;
                        self.c.retransmitted_bytes += d.data.len() as u64;
                        let (peer, bundle) = (tx.peer, tx.bundle.clone());
                        self.rec.ev(
                            "rtx",
                            peer,
                            &s.session.to_string(),
                            &bundle,
                            d.data.len(),
                            &format!("offset {}", d.offset),
                        );
                    } else {
                        tx.sent_hi = end;
                    }
                }
            }
        }
    }

    fn drain(&mut self, sock: &std::net::UdpSocket) {
        loop {
            let ts = self.ts();
            let Some(out) = self.engine.poll_output(ts) else {
                break;
            };
            match out {
                Output::Transmit { peer, segment } => {
                    self.note_transmit(&segment);
                    self.send_to(sock, peer.0, &segment);
                }
                Output::Notice(n) => self.notice(n),
            }
        }
    }

    fn notice(&mut self, n: Notice) {
        match n {
            Notice::TransmissionSessionCompleted { session } => {
                if let Some(tx) = self.sending.remove(&session) {
                    self.inflight -= tx.data.len();
                    self.c.blocks_done += 1;
                    self.c.bytes_sent += tx.data.len() as u64;
                    let took = self.mono() - tx.started;
                    self.rec.ev(
                        "done",
                        tx.peer,
                        &session.to_string(),
                        &tx.bundle,
                        tx.data.len(),
                        &format!("{took:.3} s"),
                    );
                }
            }
            Notice::TransmissionSessionCancelled { session, reason } => {
                if let Some(tx) = self.sending.remove(&session) {
                    self.inflight -= tx.data.len();
                    self.c.cancels += 1;
                    self.rec.ev(
                        "cancel",
                        tx.peer,
                        &session.to_string(),
                        &tx.bundle,
                        tx.data.len(),
                        &format!("{reason:?}"),
                    );
                    if tx.attempts < self.args.attempts {
                        self.queue.push_back(Pending {
                            peer: tx.peer,
                            bundle: tx.bundle,
                            data: tx.data,
                            attempts: tx.attempts + 1,
                        });
                    } else {
                        self.c.dropped += 1;
                        self.rec.ev(
                            "dropped",
                            tx.peer,
                            &session.to_string(),
                            &tx.bundle,
                            tx.data.len(),
                            &format!("cancelled on all {} attempts", tx.attempts),
                        );
                        eprintln!("swarm-ltpcla: dropped bundle {}: cancelled ({reason:?}) on all {} attempts", tx.bundle, tx.attempts);
                    }
                }
            }
            Notice::ReceptionSessionCancelled { session, reason } => {
                self.c.recv_cancels += 1;
                let p = self.partial.remove(&session);
                self.rec.ev(
                    "recv-cancel",
                    session.originator.0,
                    &session.to_string(),
                    "",
                    0,
                    &format!(
                        "{reason:?}{}",
                        if p.is_some() {
                            " (partial block discarded)"
                        } else {
                            ""
                        }
                    ),
                );
            }
            Notice::RedPartReceived {
                session,
                source,
                data,
                eob,
            } => {
                if eob {
                    self.partial.remove(&session);
                    self.deliver(session, source.0, data);
                } else {
                    // ION ends the red part at a bundle boundary: its bundles need not wait for the green part
                    let whole = matches!(bundles::split(&data), (b, None) if !b.is_empty());
                    if whole {
                        self.hand_over(session, source.0, &data);
                    }
                    let now = self.mono();
                    let p = self.partial.entry(session).or_default();
                    p.red = Some(data);
                    p.red_handed = whole;
                    p.last = now;
                    p.source = source.0;
                    self.try_complete(session);
                }
            }
            Notice::GreenSegmentArrived {
                session,
                source,
                offset,
                data,
                eob,
            } => {
                let now = self.mono();
                let p = self.partial.entry(session).or_default();
                if eob {
                    p.eob_end = Some(offset + data.len() as u64);
                }
                p.green.insert(offset, data);
                p.last = now;
                p.source = source.0;
                self.try_complete(session);
            }
            Notice::SessionStart { .. } | Notice::InitialTransmissionCompleted { .. } => {}
        }
    }

    fn try_complete(&mut self, session: SessionId) {
        let Some(p) = self.partial.get(&session) else {
            return;
        };
        let Some(end) = p.eob_end else { return };
        let mut cursor = p.red.as_ref().map_or(0, |r| r.len() as u64);
        if p.red.is_none() && p.green.keys().next() != Some(&0) {
            return; // red part still outstanding
        }
        for (&off, d) in &p.green {
            if off > cursor {
                return;
            }
            cursor = cursor.max(off + d.len() as u64);
        }
        if cursor < end {
            return;
        }
        let p = self.partial.remove(&session).unwrap();
        let red_len = p.red.as_ref().map_or(0, |r| r.len());
        let mut block = p.red.unwrap_or_default();
        for (off, d) in p.green {
            let off = off as usize;
            if off + d.len() > block.len() {
                let skip = block.len().saturating_sub(off);
                block.extend_from_slice(&d[skip..]);
            }
        }
        if p.red_handed {
            self.c.blocks_received += 1;
            self.c.bytes_received += block.len() as u64;
            self.hand_over(session, p.source, &block[red_len..]);
        } else {
            self.deliver(session, p.source, block);
        }
    }

    /// Green data lost for good: a partial block silent for its round trip plus margins is recorded, not kept.
    fn sweep_partials(&mut self) {
        let now = self.mono();
        let stale: Vec<SessionId> = self
            .partial
            .iter()
            .filter(|(_, p)| {
                let owlt = self.peers.get(&p.source).map_or(0.0, |x| x.arg.owlt);
                now - p.last > 2.0 * owlt + 4.0 * self.args.margin + 5.0
            })
            .map(|(s, _)| *s)
            .collect();
        for s in stale {
            let p = self.partial.remove(&s).unwrap();
            let have: usize = p.red.as_ref().map_or(0, |r| r.len())
                + p.green.values().map(|d| d.len()).sum::<usize>();
            self.c.dropped += 1;
            self.rec.ev(
                "green-lost",
                p.source,
                &s.to_string(),
                "",
                have,
                if p.red_handed {
                    "green part incomplete; its bundles not delivered (the red part's were)"
                } else {
                    "green part incomplete; block not delivered"
                },
            );
        }
    }

    fn deliver(&mut self, session: SessionId, source: u64, data: Vec<u8>) {
        self.c.blocks_received += 1;
        self.c.bytes_received += data.len() as u64;
        self.hand_over(session, source, &data);
    }

    /// Hand each bundle of `data` (a block, or its red or green part) to dtnd once: the block is split into
    /// its bundles by walking their CBOR, a bundle dtnd already had from us within SEEN_TTL is refused as a
    /// duplicate, and bytes that are not bundles are counted and recorded (never dropped silently).
    fn hand_over(&mut self, session: SessionId, source: u64, data: &[u8]) {
        let (found, fault) = bundles::split(data);
        let sid = session.to_string();
        if let Some(why) = &fault {
            self.c.unparsed_blocks += 1;
            let what = if found.is_empty() {
                "parses to no bundle"
            } else {
                "ends in bytes that are no bundle"
            };
            self.rec.ev(
                "unparsed",
                source,
                &sid,
                "",
                data.len(),
                &format!("{what}: {why}"),
            );
            eprintln!("swarm-ltpcla: block {sid} from engine {source} ({} bytes, {} bundles) {what}: {why}", data.len(), found.len());
        }
        self.rec.ev(
            "recv",
            source,
            &sid,
            "",
            data.len(),
            &format!("{} bundles", found.len()),
        );
        let src = self
            .peers
            .get(&source)
            .map(|p| p.arg.addr.to_string())
            .unwrap_or_default();
        let now = self.mono();
        for bundle in found {
            let key = bundles::primary_key(bundle).unwrap_or((0, 0));
            if !self.seen.first(key, now) {
                self.c.duplicates += 1;
                self.rec.ev(
                    "duplicate",
                    source,
                    &sid,
                    "",
                    bundle.len(),
                    "bundle already handed to dtnd (same primary block); not again",
                );
                continue;
            }
            let encoded = BASE64_STANDARD.encode(bundle);
            if encoded.len() + 256 > WS_FRAME_LIMIT {
                self.c.dropped += 1;
                self.rec.ev(
                    "too-large",
                    source,
                    &sid,
                    "",
                    bundle.len(),
                    "over dtnd's 16 MiB WebSocket frame limit",
                );
                eprintln!("swarm-ltpcla: a bundle of {} bytes in block {sid} is over dtnd's 16 MiB WebSocket frame limit (base64); not delivered", bundle.len());
                continue;
            }
            self.c.bundles_received += 1;
            let msg = serde_json::json!({"type": "ForwardData", "src": src, "dst": "", "bundle_id": "", "data": encoded});
            self.to_dtnd.push(msg.to_string());
        }
    }

    /// The down file is rewritten by the framework when a contact plan's clock starts: re-read it on change.
    fn reload_down(&mut self) {
        let Some(path) = self.args.down.clone() else {
            return;
        };
        let mtime = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        if mtime.is_none() || mtime == self.down_mtime {
            return;
        }
        self.down_mtime = mtime;
        match std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| Schedule::parse(&t))
        {
            Ok(s) => {
                self.schedule = s;
                self.rec
                    .ev("down-file", 0, "", "", 0, &format!("reloaded {path}"));
            }
            Err(e) => {
                self.rec
                    .ev("down-file", 0, "", "", 0, &format!("not reloaded: {e}"));
                eprintln!("swarm-ltpcla: --down {path}: {e}; keeping the previous windows");
            }
        }
    }

    fn write_status(&mut self) {
        let (s, r) = self.engine.session_count();
        self.c.send_sessions = s;
        self.c.recv_sessions = r;
        self.c.queued = self.queue.len();
        self.c.inflight_bytes = self.inflight;
        if let Some(path) = &self.args.status {
            let tmp = format!("{path}.tmp");
            if std::fs::write(&tmp, serde_json::to_vec(&self.c).unwrap()).is_ok() {
                let _ = std::fs::rename(&tmp, path);
            }
        }
        self.rec.flush();
    }
}

fn set_buffers(sock: &std::net::UdpSocket, bytes: usize) -> (usize, usize) {
    use std::os::fd::AsRawFd;
    let fd = sock.as_raw_fd();
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    let set = |force: libc::c_int, plain: libc::c_int| unsafe {
        let p = &v as *const libc::c_int as *const libc::c_void;
        let n = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        if libc::setsockopt(fd, libc::SOL_SOCKET, force, p, n) != 0 {
            libc::setsockopt(fd, libc::SOL_SOCKET, plain, p, n);
        }
    };
    set(libc::SO_SNDBUFFORCE, libc::SO_SNDBUF);
    set(libc::SO_RCVBUFFORCE, libc::SO_RCVBUF);
    let get = |opt: libc::c_int| unsafe {
        let mut out: libc::c_int = 0;
        let mut n = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            &mut out as *mut libc::c_int as *mut libc::c_void,
            &mut n,
        );
        out as usize
    };
    (get(libc::SO_SNDBUF), get(libc::SO_RCVBUF))
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = parse_args(&argv).unwrap_or_else(|e| die(&e));
    let schedule = match &args.down {
        Some(p) if std::path::Path::new(p).exists() => Schedule::parse(
            &std::fs::read_to_string(p).unwrap_or_else(|e| die(&format!("--down {p}: {e}"))),
        )
        .unwrap_or_else(|e| die(&format!("--down {p}: {e}"))),
        _ => Schedule::default(),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(args, schedule));
}

impl State {
    /// The engine, its peers and the bookkeeping for `args` (no socket: `run` owns those).
    fn new(args: Args, schedule: Schedule, sndbuf: usize, rcvbuf: usize) -> State {
        let mut cfg = Config::new(
            EngineId(args.engine),
            args.engine.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ unix_now() as u64,
        );
        let margin = LDur::from_micros((args.margin * 1e6) as u64);
        cfg.local_delay = margin;
        cfg.checkpoint_rtx_limit = args.rtx_limit;
        cfg.report_rtx_limit = args.rtx_limit;
        cfg.max_send_sessions = 1 << 20;
        cfg.max_recv_sessions = 1 << 20;
        cfg.max_block_size = args.max_block as u64;
        let mut engine = Engine::new(cfg).unwrap();
        engine.register_client_service(BP_SERVICE);
        let payload = args.segment.min(65_507) - HEADER_ALLOWANCE;
        let mut peers = BTreeMap::new();
        let mut by_addr = HashMap::new();
        for p in &args.peers {
            let owlt = LDur::from_micros((p.owlt * 1e6) as u64);
            let mut pc = PeerConfig::new(EngineId(p.engine));
            pc.owlt_out = owlt;
            pc.owlt_in = owlt;
            pc.remote_delay = margin;
            pc.max_segment_len = payload;
            engine
                .add_peer(pc)
                .unwrap_or_else(|e| die(&format!("--peer {}: {e:?}", p.engine)));
            let burst = (p.rate * 0.002).max(4.0 * (args.segment + IP_UDP) as f64);
            peers.insert(
                p.engine,
                Peer {
                    arg: p.clone(),
                    bucket: TokenBucket::new(p.rate, burst, 0.0),
                    tx_on: true,
                    down: false,
                },
            );
            by_addr.insert(p.addr, p.engine);
        }
        let rec = Record::open(&args.log);
        State {
            args,
            engine,
            peers,
            by_addr,
            schedule,
            queue: VecDeque::new(),
            sending: HashMap::new(),
            partial: HashMap::new(),
            inflight: 0,
            to_dtnd: vec![],
            rec,
            c: Counters {
                sndbuf,
                rcvbuf,
                ..Default::default()
            },
            t0: Instant::now(),
            payload,
            down_mtime: None,
            tx_peer: HashMap::new(),
            tx_order: VecDeque::new(),
            seen: bundles::Seen::new(SEEN_TTL, SEEN_KEPT),
            red_credit: 0.0,
            told_unknown: HashSet::new(),
        }
    }
}

async fn run(args: Args, schedule: Schedule) {
    let std_sock = std::net::UdpSocket::bind(args.bind)
        .unwrap_or_else(|e| die(&format!("--bind {}: {e}", args.bind)));
    let want = args
        .peers
        .iter()
        .map(|p| socket_buffer(p.rate, p.owlt))
        .max()
        .unwrap_or(4 << 20);
    let (sndbuf, rcvbuf) = set_buffers(&std_sock, want);
    std_sock.set_nonblocking(true).unwrap();
    let send_sock = std_sock.try_clone().unwrap();
    let sock = tokio::net::UdpSocket::from_std(std_sock).unwrap();

    let mut st = State::new(args, schedule, sndbuf, rcvbuf);
    st.reload_down();
    eprintln!("swarm-ltpcla: engine {} on {} ({} peers), segment {} B (payload {} B), red {}, socket buffers snd {} rcv {}",
              st.args.engine, st.args.bind, st.peers.len(), st.args.segment, st.payload, st.args.red, sndbuf, rcvbuf);
    st.rec.ev(
        "engine",
        st.args.engine,
        "",
        "",
        st.args.segment,
        &format!("bind {} sndbuf {sndbuf} rcvbuf {rcvbuf}", st.args.bind),
    );
    st.write_status();

    let mut term =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
    let mut buf = vec![0u8; 65_536];
    // dtnd hands bundles to a module through a 100-slot channel with try_send and drops what does not fit
    // (dtn7 0.21.0, ecla/ws.rs): the WebSocket is read on a thread of its own that only decodes and queues,
    // so the channel empties as fast as dtnd fills it while this thread paces segments out.
    let (in_tx, mut in_rx) = tokio::sync::mpsc::unbounded_channel::<FromDtnd>();
    let (out_tx, out_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let (ws_url, name, port) = (
        st.args.ws.clone(),
        st.args.name.clone(),
        st.args.bind.port(),
    );
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(ws_thread(ws_url, name, port, in_tx, out_rx));
    });
    let mut last_status = 0.0;
    loop {
        let ts = st.ts();
        st.engine.handle_timeout(ts);
        st.link_cues();
        st.start_sessions();
        st.drain(&send_sock);
        for msg in std::mem::take(&mut st.to_dtnd) {
            if out_tx.send(msg).is_err() {
                st.c.dropped += 1;
                st.rec
                    .ev("forward-error", 0, "", "", 0, "WebSocket thread gone");
            }
        }
        let now = st.mono();
        if now - last_status >= 1.0 {
            last_status = now;
            st.sweep_partials();
            st.reload_down();
            st.write_status();
        }
        // wake for: the engine's next timer, a paced peer's bucket, the contact plan's next change, status
        let mut wake: f64 = 1.0 - (now - last_status);
        if let Some(t) = st.engine.next_timeout() {
            wake = wake.min((t.as_micros() as f64 / 1e6 - now).max(0.0));
        }
        for p in st.peers.values_mut() {
            if !p.tx_on && !p.down {
                wake = wake.min(p.bucket.wait(now));
            }
        }
        if let Some(t) = st.schedule.next_change(unix_now()) {
            wake = wake.min((t - unix_now()).max(0.0));
        }
        let sleep = tokio::time::sleep(std::time::Duration::from_secs_f64(wake.max(0.0002)));
        tokio::select! {
            msg = in_rx.recv() => {
                if let Some(m) = msg {
                    from_dtnd(&mut st, m);
                    // take what else is waiting (bounded, so pacing and timers keep their turn)
                    for _ in 0..64 {
                        match in_rx.try_recv() {
                            Ok(m) => from_dtnd(&mut st, m),
                            Err(_) => break,
                        }
                    }
                }
            },
            r = sock.recv_from(&mut buf) => {
                if let Ok((n, from)) = r {
                    input(&mut st, &buf[..n], from);
                    // take what else is waiting before running the engine's output (up to a bound)
                    for _ in 0..512 {
                        match sock.try_recv_from(&mut buf) {
                            Ok((n, from)) => input(&mut st, &buf[..n], from),
                            Err(_) => break,
                        }
                    }
                }
            },
            _ = sleep => {},
            _ = term.recv() => {
                st.write_status();
                st.rec.flush();
                std::process::exit(0);
            }
        }
    }
}

/// What the WebSocket thread passes on.
enum FromDtnd {
    Registered(String),
    Refused(String),
    Bundle {
        dst: String,
        id: String,
        data: Result<Vec<u8>, String>,
    },
    Disconnected,
}

async fn ws_thread(
    url: String,
    name: String,
    port: u16,
    tx: tokio::sync::mpsc::UnboundedSender<FromDtnd>,
    mut out: tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let ws_cfg = WebSocketConfig {
        max_message_size: Some(1 << 30),
        max_frame_size: Some(1 << 30),
        ..Default::default()
    };
    loop {
        let (ws, _) = loop {
            match tokio_tungstenite::connect_async_with_config(url.as_str(), Some(ws_cfg)).await {
                Ok(x) => break x,
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
            }
        };
        let (mut sink, mut stream) = ws.split();
        let reg = serde_json::json!({"type": "Register", "name": name, "enable_beacon": false, "port": port});
        if sink.send(Message::Text(reg.to_string())).await.is_err() {
            continue;
        }
        loop {
            tokio::select! {
                msg = stream.next() => match msg {
                    Some(Ok(Message::Text(t))) => {
                        if let Some(m) = parse_dtnd(&t) {
                            let _ = tx.send(m);
                        }
                    }
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => {
                        let _ = tx.send(FromDtnd::Disconnected);
                        break;
                    }
                    Some(Ok(_)) => {}
                },
                m = out.recv() => match m {
                    Some(text) => {
                        if sink.send(Message::Text(text)).await.is_err() {
                            let _ = tx.send(FromDtnd::Disconnected);
                            break;
                        }
                    }
                    None => return,
                },
            }
        }
    }
}

fn parse_dtnd(text: &str) -> Option<FromDtnd> {
    #[derive(serde::Deserialize)]
    struct Msg<'a> {
        #[serde(rename = "type")]
        kind: &'a str,
        #[serde(default)]
        dst: String,
        #[serde(default)]
        bundle_id: String,
        #[serde(default)]
        data: String,
        #[serde(default)]
        reason: String,
        #[serde(default)]
        eid: serde_json::Value,
    }
    let m: Msg = serde_json::from_str(text).ok()?;
    match m.kind {
        "Registered" => Some(FromDtnd::Registered(m.eid.to_string())),
        "Error" => Some(FromDtnd::Refused(m.reason)),
        "ForwardData" => Some(FromDtnd::Bundle {
            dst: m.dst,
            id: m.bundle_id,
            data: BASE64_STANDARD
                .decode(m.data.as_bytes())
                .map_err(|e| e.to_string()),
        }),
        _ => None,
    }
}

fn from_dtnd(st: &mut State, m: FromDtnd) {
    match m {
        FromDtnd::Registered(eid) => {
            st.c.registered = true;
            eprintln!(
                "swarm-ltpcla: registered with dtnd as '{}' ({eid})",
                st.args.name
            );
            st.rec.ev(
                "registered",
                st.args.engine,
                "",
                "",
                0,
                &st.args.name.clone(),
            );
            st.write_status();
        }
        FromDtnd::Refused(reason) => {
            st.rec.ev("dtnd-error", 0, "", "", 0, &reason);
            st.rec.flush();
            die(&format!("dtnd refused the module: {reason}"));
        }
        FromDtnd::Bundle { dst, id, data } => match data {
            Ok(data) => st.offer(&dst, id, data),
            Err(e) => {
                st.c.refused += 1;
                st.rec.ev(
                    "refused",
                    0,
                    "",
                    &id,
                    0,
                    &format!("bad base64 from dtnd: {e}"),
                );
            }
        },
        FromDtnd::Disconnected => {
            st.c.registered = false;
            eprintln!("swarm-ltpcla: dtnd connection closed; reconnecting");
            st.rec.ev("dtnd-disconnected", 0, "", "", 0, "");
        }
    }
}

/// A datagram from the LTP socket. Its sender is the engine named in the segment header (RFC 5326 §3.1: the
/// session originator; for replies to our own sessions, the peer that session went to), never the datagram's
/// source address: ION's udplso sends from an ephemeral port. Replies go to the peer's configured address.
fn input(st: &mut State, data: &[u8], from: SocketAddr) {
    st.c.segments_in += 1;
    let session = match Segment::parse(data) {
        Ok((seg, _)) => seg.session,
        Err(e) => {
            st.c.malformed += 1;
            st.rec.ev(
                "malformed",
                0,
                "",
                "",
                data.len(),
                &format!("from {from}: {e:?}"),
            );
            return;
        }
    };
    let originator = session.originator.0;
    let peer = if originator == st.args.engine {
        match st.tx_peer.get(&session) {
            Some(&p) => p,
            None => {
                st.c.unknown_session += 1;
                st.rec.ev(
                    "unknown-session",
                    0,
                    &session.to_string(),
                    "",
                    data.len(),
                    &format!("from {from}: a session of ours not (or no longer) known"),
                );
                return;
            }
        }
    } else {
        originator
    };
    if !st.peers.contains_key(&peer) {
        st.c.unknown_engine += 1;
        st.rec.ev(
            "unknown-engine",
            peer,
            &session.to_string(),
            "",
            data.len(),
            &format!("from {from}: no LTP peer with this engine ID"),
        );
        if st.told_unknown.insert(peer) {
            eprintln!("swarm-ltpcla: segments from engine {peer} (at {from}): not a configured LTP peer; discarded (counted as unknown_engine)");
        }
        return;
    }
    let ts = st.ts();
    st.engine.handle_input(
        ts,
        Input::Segment {
            peer: EngineId(peer),
            data,
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn args_ok() {
        let a = parse_args(&s(&[
            "--ws",
            "ws://127.0.0.1:3000/ws/ecla",
            "--engine",
            "1",
            "--bind",
            "10.0.0.1:1113",
            "--peer",
            "2,10.0.0.2:1113,1e9,4",
            "--segment",
            "1360",
            "--red",
            "0.5",
        ]))
        .unwrap();
        assert_eq!(a.peers[0].engine, 2);
        assert_eq!(a.peers[0].rate, 125e6);
        assert_eq!(a.peers[0].owlt, 4.0);
        assert_eq!(a.red, 0.5);
    }

    #[test]
    fn args_refused() {
        let base = ["--ws", "ws://x", "--engine", "1"];
        let with = |extra: &[&str]| parse_args(&s(&[&base[..], extra].concat()));
        assert!(with(&["--segment", "63"])
            .unwrap_err()
            .contains("--segment 63"));
        assert!(with(&["--segment", "65508"])
            .unwrap_err()
            .contains("--segment"));
        assert!(with(&["--peer", "2,10.0.0.2:1,0,4"])
            .unwrap_err()
            .contains("rate"));
        assert!(with(&["--peer", "1,10.0.0.2:1,1e6,4"])
            .unwrap_err()
            .contains("this engine"));
        assert!(with(&["--red", "2"]).is_err());
        assert!(parse_args(&s(&["--ws", "ws://x"])).is_err());
    }

    fn node(engine: u64, peer: u64, red: f64) -> State {
        let args = parse_args(&s(&[
            "--ws",
            "ws://x",
            "--engine",
            &engine.to_string(),
            "--bind",
            "127.0.0.1:0",
            "--peer",
            &format!("{peer},127.0.0.{peer}:1113,1e9,0"),
            "--red",
            &red.to_string(),
            "--margin",
            "0.05",
            "--rtx-limit",
            "1",
        ]))
        .unwrap();
        State::new(args, Schedule::default(), 0, 0)
    }

    /// What `st`'s engine transmits now (its notices handled as in `drain`).
    fn out(st: &mut State) -> Vec<Vec<u8>> {
        let ts = st.ts();
        st.engine.handle_timeout(ts);
        st.start_sessions();
        let mut v = vec![];
        while let Some(o) = st.engine.poll_output(st.ts()) {
            match o {
                Output::Transmit { segment, .. } => {
                    st.note_transmit(&segment);
                    v.push(segment)
                }
                Output::Notice(n) => st.notice(n),
            }
        }
        v
    }

    /// Run `a` and `b` against each other over a lossless channel (b -> a cut while `cut_b_to_a` says so),
    /// each datagram arriving from a new ephemeral port, until `done` or 20 s.
    fn exchange(
        a: &mut State,
        b: &mut State,
        mut cut_b_to_a: impl FnMut(&State, &State) -> bool,
        done: impl Fn(&State, &State) -> bool,
    ) {
        let mut port = 32_768u16;
        let t = Instant::now();
        while !done(a, b) && t.elapsed().as_secs() < 20 {
            for seg in out(a) {
                port += 1;
                input(b, &seg, format!("10.9.9.9:{port}").parse().unwrap());
            }
            let cut = cut_b_to_a(a, b);
            for seg in out(b) {
                port += 1;
                if !cut {
                    input(a, &seg, format!("10.9.9.8:{port}").parse().unwrap());
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    /// The bundles `st` handed to dtnd.
    fn handed(st: &State) -> Vec<Vec<u8>> {
        st.to_dtnd
            .iter()
            .map(|m| {
                let v: serde_json::Value = serde_json::from_str(m).unwrap();
                BASE64_STANDARD.decode(v["data"].as_str().unwrap()).unwrap()
            })
            .collect()
    }

    #[test]
    fn peers_are_known_by_engine_id_not_by_source_port() {
        let (mut a, mut b) = (node(1, 2, 1.0), node(2, 1, 1.0));
        let three: Vec<Vec<u8>> = (1..=3)
            .map(|i| crate::bundles::tests::bundle(i, &vec![i; 900 * i as usize]))
            .collect();
        a.offer("127.0.0.2:1113", "agg".into(), three.concat());
        exchange(&mut a, &mut b, |_, _| false, |a, _| a.c.blocks_done == 1);
        // every datagram came from a port never configured, and the reports reached their session
        assert_eq!(
            (a.c.blocks_done, a.c.cancels, a.c.unknown_session),
            (1, 0, 0)
        );
        assert_eq!(b.c.unknown_engine, 0);
        assert_eq!(b.c.blocks_received, 1);
        assert_eq!(handed(&b), three); // one block, three bundles, each handed on by itself
        assert_eq!(b.c.bundles_received, 3);
    }

    #[test]
    fn an_unknown_engine_or_garbage_is_counted_and_recorded() {
        let path = std::env::temp_dir().join(format!("ltpcla-unknown-{}.csv", std::process::id()));
        let (mut c, mut b) = (node(7, 2, 1.0), node(2, 1, 1.0));
        b.rec = Record::open(&Some(path.to_string_lossy().into()));
        c.offer(
            "127.0.0.2:1113",
            "x".into(),
            crate::bundles::tests::bundle(1, b"hi"),
        );
        for seg in out(&mut c) {
            input(&mut b, &seg, "10.0.0.7:1113".parse().unwrap());
        }
        input(&mut b, b"\xff not LTP", "10.0.0.7:1113".parse().unwrap());
        assert!(b.c.unknown_engine >= 1 && b.c.malformed == 1);
        assert!(b.to_dtnd.is_empty());
        b.rec.flush();
        let log = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(log.contains(",unknown-engine,7,7/"), "{log}");
        assert!(log.contains("no LTP peer with this engine ID") && log.contains(",malformed,"));
    }

    #[test]
    fn a_block_of_no_bundles_is_counted_never_silently_dropped() {
        let (mut a, mut b) = (node(1, 2, 1.0), node(2, 1, 1.0));
        let good = crate::bundles::tests::bundle(9, b"fine");
        a.offer("127.0.0.2:1113", "junk".into(), b"not a bundle".to_vec());
        a.offer(
            "127.0.0.2:1113",
            "tail".into(),
            [&good[..], b"\x9f\x88"].concat(),
        );
        exchange(&mut a, &mut b, |_, _| false, |a, _| a.c.blocks_done == 2);
        assert_eq!(b.c.blocks_received, 2);
        assert_eq!(b.c.unparsed_blocks, 2);
        assert_eq!(handed(&b), vec![good]); // what parsed before the fault still goes on
    }

    #[test]
    fn red_bundles_go_on_before_the_green_part_and_green_bundles_after() {
        let (mut a, mut b) = (node(1, 2, 1.0), node(2, 1, 1.0));
        let (r1, r2, g) = (
            crate::bundles::tests::bundle(1, &[1; 2000]),
            crate::bundles::tests::bundle(2, &[2; 10]),
            crate::bundles::tests::bundle(3, &[3; 3000]),
        );
        let block = [r1.clone(), r2.clone(), g.clone()].concat();
        // ION's way: the red part ends at a bundle boundary
        let ts = a.ts();
        let sid = a
            .engine
            .request_transmission(
                ts,
                TransmissionRequest {
                    destination: EngineId(2),
                    client_service: BP_SERVICE,
                    data: Bytes::from(block),
                    red_len: (r1.len() + r2.len()) as u64,
                },
            )
            .unwrap();
        a.tx_peer.insert(sid, 2);
        exchange(
            &mut a,
            &mut b,
            |_, _| false,
            |_, b| b.c.bundles_received == 3,
        );
        assert_eq!(handed(&b), vec![r1, r2, g]);
        assert_eq!((b.c.blocks_received, b.c.unparsed_blocks), (1, 0));
        // and an all-green block (red 0) of one bundle
        let (mut a, mut b) = (node(1, 2, 0.0), node(2, 1, 1.0));
        let one = crate::bundles::tests::bundle(4, &[4; 5000]);
        a.offer("127.0.0.2:1113", "green".into(), one.clone());
        exchange(
            &mut a,
            &mut b,
            |_, _| false,
            |_, b| b.c.bundles_received == 1,
        );
        assert_eq!(handed(&b), vec![one]);
    }

    #[test]
    fn each_block_is_wholly_red_or_wholly_green_in_the_asked_share() {
        let mut credit = 0.0;
        let (mut red, mut all) = (0u64, 0u64);
        for i in 0..1000u64 {
            let len = 500 + (i * 7919) % 1500;
            let r = red_share(&mut credit, 0.3, len);
            assert!(r == 0 || r == len);
            red += r;
            all += len;
        }
        assert!(
            (red as f64 / all as f64 - 0.3).abs() < 0.01,
            "{red} of {all}"
        );
        assert_eq!(red_share(&mut credit, 1.0, 10), 10);
        assert_eq!(red_share(&mut credit, 0.0, 10), 0);
    }

    #[test]
    fn no_duplicate_after_a_cancelled_session_the_receiver_had_completed() {
        // Every report from b is lost until a has cancelled the session (one checkpoint retransmission) and
        // b has refused the block a sent again in a new session; then the retry completes.
        let (mut a, mut b) = (node(1, 2, 1.0), node(2, 1, 1.0));
        let x = crate::bundles::tests::bundle(5, &[5; 4000]);
        a.offer("127.0.0.2:1113", "x".into(), x.clone());
        exchange(
            &mut a,
            &mut b,
            |_, b| b.c.duplicates == 0,
            |a, _| a.c.blocks_done == 1,
        );
        assert!(
            a.c.cancels >= 1 && a.c.blocks_done == 1,
            "{:?}",
            a.c.cancels
        );
        assert!(b.c.blocks_received >= 2 && b.c.duplicates >= 1);
        assert_eq!(handed(&b), vec![x]);
    }

    /// The measurement behind using licklider-core: two engines in memory, 100 x 100 kB blocks over a 1 %
    /// lossy channel, all delivered intact (timers driven by virtual time).
    #[test]
    fn licklider_engines_deliver_through_loss() {
        let mk = |id: u64, peer: u64| {
            let mut c = Config::new(EngineId(id), id);
            c.max_send_sessions = 10_000;
            c.max_recv_sessions = 10_000;
            c.checkpoint_rtx_limit = 50;
            c.report_rtx_limit = 50;
            let mut e = Engine::new(c).unwrap();
            e.register_client_service(BP_SERVICE);
            let mut pc = PeerConfig::new(EngineId(peer));
            pc.owlt_in = LDur::from_millis(10);
            pc.owlt_out = LDur::from_millis(10);
            pc.max_segment_len = 1328;
            e.add_peer(pc).unwrap();
            e
        };
        let (mut a, mut b) = (mk(1, 2), mk(2, 1));
        let mut now = 0u64;
        let mut rng = 12345u64;
        let mut lose = || {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (rng >> 33) % 100 == 0
        };
        for i in 0..100u8 {
            let data = Bytes::from(vec![i; 100_000]);
            a.request_transmission(
                Timestamp::from_micros(now),
                TransmissionRequest {
                    destination: EngineId(2),
                    client_service: BP_SERVICE,
                    data,
                    red_len: 100_000,
                },
            )
            .unwrap();
        }
        let mut got = 0;
        let mut done = 0;
        for _ in 0..200_000 {
            now += 1000;
            let ts = Timestamp::from_micros(now);
            a.handle_timeout(ts);
            b.handle_timeout(ts);
            let mut to_b = vec![];
            while let Some(o) = a.poll_output(ts) {
                match o {
                    Output::Transmit { segment, .. } => {
                        if !lose() {
                            to_b.push(segment)
                        }
                    }
                    Output::Notice(Notice::TransmissionSessionCompleted { .. }) => done += 1,
                    _ => {}
                }
            }
            for s in to_b {
                b.handle_input(
                    ts,
                    Input::Segment {
                        peer: EngineId(1),
                        data: &s,
                    },
                );
            }
            let mut to_a = vec![];
            while let Some(o) = b.poll_output(ts) {
                match o {
                    Output::Transmit { segment, .. } => {
                        if !lose() {
                            to_a.push(segment)
                        }
                    }
                    Output::Notice(Notice::RedPartReceived { data, .. }) => {
                        assert!(data.iter().all(|&x| x == data[0]));
                        got += 1
                    }
                    _ => {}
                }
            }
            for s in to_a {
                a.handle_input(
                    ts,
                    Input::Segment {
                        peer: EngineId(2),
                        data: &s,
                    },
                );
            }
            if got == 100 && done == 100 {
                break;
            }
        }
        assert_eq!((got, done), (100, 100));
    }
}
