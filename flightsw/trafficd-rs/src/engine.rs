//! The event loop of one node for one test: trafficd.py's Engine, with batched UDP syscalls
//! (sendmmsg for the datagrams due at one wake-up, recvmmsg for what the receiver finds queued).

use crate::flows::{interval_of, InFlow, OutFlow};
use crate::wire::{self, os_error_text, HEADER_LEN, HELLO_LEN, MAGIC};
use serde_json::Value;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The receiver keeps counting this long after the end of sending (late datagrams, TCP tails).
pub const GRACE_S: f64 = 1.0;
const TCP_CHUNK: usize = 128 * 1024;
const RCVBUF: libc::c_int = 8 * 1024 * 1024;
/// After sending what is due the sender sleeps at least this long: a datagram leaves at most that late
/// (its schedule, hence the rate, is kept) and a node with ~2,700 datagrams a second wakes ~500 times.
const QUANTUM_S: f64 = 0.002;
/// Without real-time priority a wake-up sends at most this many datagrams before it looks at the receiver.
const BURST: usize = 256;
/// Datagrams per recvmmsg call.
const RECV_BATCH: usize = 32;

/// The shared host clock (time.time()): namespaces and containers of one host share CLOCK_REALTIME.
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// What a file descriptor in the poll set stands for.
#[derive(Clone, Copy)]
enum Watch {
    Receiver,
    Hello(usize),
    Incoming(usize),
    Outgoing(usize),
}

/// A TCP connection accepted but not yet identified by its hello.
struct PendingHello {
    sock: Socket,
    got: Vec<u8>,
}

/// A scheduled datagram of the UDP sender: (due time, plan position) orders the heap like trafficd.py's.
#[derive(PartialEq)]
struct Due(f64, usize);
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
    }
}

pub struct Engine {
    udp: bool,
    length: usize,
    interval: f64,
    pub outs: Vec<OutFlow>,
    out_addrs: Vec<Option<SockAddr>>,
    out_socks: Vec<Option<Socket>>,
    out_writable: Vec<bool>,
    pub ins: Vec<InFlow>,
    in_by_index: HashMap<u32, usize>,
    in_socks: Vec<Option<Socket>>,
    pending: Vec<Option<PendingHello>>,
    rx: Socket,
    tx: Option<Socket>,
    bind: Ipv4Addr,
    release: f64,
    normal_policy: Option<(libc::c_int, libc::sched_param)>,
    zeros: Vec<u8>,
    buf: Vec<u8>,
    /// RECV_BATCH slots of `buf`'s size for recvmmsg (allocated once: 2 MiB per wake-up would cost more than the reads)
    recv_slots: Vec<u8>,
}

fn plan_err(what: &str) -> String {
    format!("traffic engine: bad plan: {what}")
}

/// A number field that may be absent, null or 0 (Python's `x or default`).
fn number_or(v: Option<&Value>, default: f64) -> f64 {
    match v.and_then(Value::as_f64) {
        Some(x) if x != 0.0 => x,
        _ => default,
    }
}

fn int_field(spec: &Value, key: &str) -> Result<i64, String> {
    match spec.get(key) {
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|x| x as i64))
            .ok_or_else(|| plan_err(key)),
        Some(Value::String(s)) => s.trim().parse().map_err(|_| plan_err(key)),
        _ => Err(plan_err(key)),
    }
}

fn set_int_opt(sock: &Socket, level: libc::c_int, opt: libc::c_int, value: libc::c_int) -> bool {
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            opt,
            &value as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    rc == 0
}

/// Ask for an 8 MiB receive buffer; SO_RCVBUFFORCE passes net.core.rmem_max where allowed.
fn big_receive_buffer(sock: &Socket) {
    if !set_int_opt(sock, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, RCVBUF) {
        set_int_opt(sock, libc::SOL_SOCKET, libc::SO_RCVBUF, RCVBUF);
    }
}

fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

impl Engine {
    pub fn new(plan: &Value) -> Result<Engine, String> {
        let protocol = plan
            .get("protocol")
            .and_then(Value::as_str)
            .ok_or_else(|| plan_err("protocol"))?;
        let udp = match protocol {
            "udp" => true,
            "tcp" => false,
            other => return Err(plan_err(&format!("protocol {other:?}"))),
        };
        let default_length = if udp { 1448.0 } else { TCP_CHUNK as f64 };
        let mut length = number_or(plan.get("length"), default_length) as usize;
        if udp {
            length = length.max(HEADER_LEN);
        }
        let interval = number_or(plan.get("interval"), 1.0);
        let bind: Ipv4Addr = plan
            .get("bind")
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| plan_err("bind"))?;
        let port = int_field(plan, "port")? as u16;
        let mut outs = Vec::new();
        for spec in plan
            .get("out")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let dst = spec
                .get("dst")
                .and_then(Value::as_str)
                .ok_or_else(|| plan_err("dst"))?
                .to_string();
            let rate = spec.get("rate_bps").and_then(Value::as_f64);
            let id = spec.get("id").cloned().ok_or_else(|| plan_err("id"))?;
            outs.push(OutFlow::new(
                id,
                int_field(spec, "index")? as u32,
                dst,
                int_field(spec, "port")? as u16,
                rate,
            ));
        }
        let mut ins: Vec<InFlow> = Vec::new();
        let mut in_by_index = HashMap::new();
        for spec in plan
            .get("in")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = int_field(spec, "index")? as u32;
            let flow = InFlow::new(spec.get("id").cloned().ok_or_else(|| plan_err("id"))?);
            match in_by_index.get(&index) {
                Some(&at) => ins[at] = flow, // a repeated index replaces the earlier entry, as a dict does
                None => {
                    in_by_index.insert(index, ins.len());
                    ins.push(flow);
                }
            }
        }
        let io_err = |e: io::Error| format!("traffic engine: {}", os_error_text(&e));
        let local = SockAddr::from(SocketAddrV4::new(bind, port));
        let (rx, tx) = if udp {
            let rx = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).map_err(io_err)?;
            big_receive_buffer(&rx);
            let tx = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).map_err(io_err)?;
            tx.bind(&SockAddr::from(SocketAddrV4::new(bind, 0)))
                .map_err(io_err)?;
            tx.set_nonblocking(true).map_err(io_err)?;
            rx.bind(&local).map_err(io_err)?;
            (rx, Some(tx))
        } else {
            let rx =
                Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).map_err(io_err)?;
            rx.set_reuse_address(true).map_err(io_err)?;
            rx.bind(&local).map_err(io_err)?;
            rx.listen(1024).map_err(io_err)?;
            (rx, None)
        };
        rx.set_nonblocking(true).map_err(io_err)?;
        let out_addrs = outs
            .iter()
            .map(|f| {
                f.dst
                    .parse::<Ipv4Addr>()
                    .ok()
                    .map(|ip| SockAddr::from(SocketAddrV4::new(ip, f.port)))
            })
            .collect();
        let n_out = outs.len();
        let n_in = ins.len();
        Ok(Engine {
            udp,
            length,
            interval,
            outs,
            out_addrs,
            out_socks: (0..n_out).map(|_| None).collect(),
            out_writable: vec![false; n_out],
            ins,
            in_by_index,
            in_socks: (0..n_in).map(|_| None).collect(),
            pending: Vec::new(),
            rx,
            tx,
            bind,
            release: f64::NAN,
            normal_policy: None,
            zeros: vec![0u8; length],
            buf: vec![0u8; if udp { length.max(65536) } else { 256 * 1024 }],
            recv_slots: if udp {
                vec![0u8; length.max(65536) * RECV_BATCH]
            } else {
                Vec::new()
            },
        })
    }

    /// The port the receiver is bound to (step 1's reply).
    pub fn listening_port(&self) -> u16 {
        self.rx
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .map(|a| a.port())
            .unwrap_or(0)
    }

    // ---------------------------------------------------------------------------- set-up (before release)

    /// TCP: connect every outgoing flow and send its hello. UDP: send every destination one empty datagram
    /// (the receiver ignores it), so that address resolution is done before the release: at n=100 the first
    /// datagrams of 9,900 flows otherwise wait on 9,900 ARP look-ups. Returns (connected, [(id, error)]).
    pub fn connect(&mut self) -> (usize, Vec<(Value, String)>) {
        let mut errors = Vec::new();
        for i in 0..self.outs.len() {
            let f = &mut self.outs[i];
            let Some(addr) = self.out_addrs[i].clone() else {
                let msg = format!("[Errno -2] Name or service not known: {:?}", f.dst);
                if self.udp {
                    errors.push((
                        f.id.clone(),
                        format!("warm-up datagram to {}: {msg}", f.dst),
                    ));
                } else {
                    f.error = format!("connect to {}:{}: {msg}", f.dst, f.port);
                    f.closed = true;
                    errors.push((f.id.clone(), f.error.clone()));
                }
                continue;
            };
            if let Some(tx) = &self.tx {
                if let Err(e) = tx.send_to(b"", &addr) {
                    errors.push((
                        f.id.clone(),
                        format!("warm-up datagram to {}: {}", f.dst, os_error_text(&e)),
                    ));
                }
                continue;
            }
            match connect_tcp(self.bind, &addr, f.index) {
                Ok(sock) => self.out_socks[i] = Some(sock),
                Err(e) => {
                    f.error = format!("connect to {}:{}: {}", f.dst, f.port, os_error_text(&e));
                    f.closed = true;
                    errors.push((f.id.clone(), f.error.clone()));
                }
            }
        }
        (self.outs.iter().filter(|f| !f.closed).count(), errors)
    }

    // ------------------------------------------------------------------------------------------ the test

    /// Send from `release` for `duration` seconds; receive until the grace period ends. Returns the
    /// actual wake-up. From the wait for the release until every flow's first datagram or write is out,
    /// the engine runs as a real-time (SCHED_FIFO) task where it may, so a loaded host cannot delay the start.
    pub fn run(&mut self, release: f64, duration: f64) -> f64 {
        self.release = release;
        let end = release + duration;
        let stop_rx = end + GRACE_S;
        self.normal_policy = realtime_on();
        // Sleep in the poll (no spinning: a swarm has many more engines than the host has cores).
        while now() < release {
            self.poll(f64::min(0.05, (release - now()).max(0.0)));
        }
        let woke = now();
        if self.udp {
            self.run_udp(end);
        } else {
            self.run_tcp(end);
        }
        self.drop_realtime();
        for i in 0..self.outs.len() {
            if self.out_socks[i].is_some() && !self.outs[i].closed {
                self.close_out(i);
            }
        }
        while now() < stop_rx {
            if !self.udp
                && !self.ins.is_empty()
                && self.ins.iter().all(|f| f.closed)
                && self.pending.iter().all(Option::is_none)
            {
                break;
            }
            self.poll(f64::min(0.05, (stop_rx - now()).max(0.0)));
        }
        woke
    }

    fn drop_realtime(&mut self) {
        if let Some(previous) = self.normal_policy.take() {
            realtime_off(previous);
        }
    }

    fn run_udp(&mut self, end: f64) {
        let gaps: Vec<f64> = self
            .outs
            .iter()
            .map(|f| match f.rate_bps {
                Some(r) if r != 0.0 => self.length as f64 * 8.0 / r,
                _ => 0.0,
            })
            .collect();
        // flows due at the same instant go in plan order
        let mut heap: BinaryHeap<Reverse<Due>> = (0..self.outs.len())
            .map(|n| Reverse(Due(self.release, n)))
            .collect();
        let mut batch: Vec<(usize, f64)> = Vec::new();
        loop {
            let t = now();
            // Past the end: what fell due before it still goes (a wake-up the host made late must not shorten
            // the flow: R bit/s for D s is R*D bits), then the sender stops.
            let last = t >= end;
            batch.clear();
            while let Some(Reverse(Due(due, _))) = heap.peek() {
                let not_yet = if last { *due >= end } else { *due > t };
                if not_yet || (batch.len() >= BURST && self.normal_policy.is_none()) {
                    break;
                }
                let Reverse(Due(due, n)) = heap.pop().unwrap();
                batch.push((n, due));
            }
            if last && batch.is_empty() {
                return;
            }
            let tried = self.send_datagrams(&batch, t, &gaps, &mut heap);
            self.drop_realtime(); // every flow has its first datagram out
            let next = match heap.peek() {
                Some(Reverse(Due(due, _))) => f64::max(*due, t + QUANTUM_S),
                None => end,
            };
            let timeout = if tried < BURST {
                (f64::min(next, end) - now()).max(0.0)
            } else {
                0.0
            };
            self.poll(timeout);
        }
    }

    /// Send one datagram of every (flow, due) in `batch`, stamped `t`, with as few sendmmsg calls as
    /// possible; reschedule each flow on the heap. Returns how many were tried (trafficd.py's sent_any).
    fn send_datagrams(
        &mut self,
        batch: &[(usize, f64)],
        t: f64,
        gaps: &[f64],
        heap: &mut BinaryHeap<Reverse<Due>>,
    ) -> usize {
        let tx = self
            .tx
            .as_ref()
            .expect("UDP engine has a sender")
            .as_raw_fd();
        let mut headers = vec![[0u8; HEADER_LEN]; batch.len()];
        for (k, &(n, _)) in batch.iter().enumerate() {
            wire::pack_header(&mut headers[k], self.outs[n].index, self.outs[n].seq, t);
        }
        let tail = self.length - HEADER_LEN;
        let mut iovs: Vec<[libc::iovec; 2]> = headers
            .iter_mut()
            .map(|h| {
                [
                    libc::iovec {
                        iov_base: h.as_mut_ptr() as *mut libc::c_void,
                        iov_len: HEADER_LEN,
                    },
                    libc::iovec {
                        iov_base: self.zeros.as_ptr() as *mut libc::c_void,
                        iov_len: tail,
                    },
                ]
            })
            .collect();
        let mut tried = 0;
        let mut start = 0;
        let k_interval = interval_of(t, self.release, self.interval);
        while start < batch.len() {
            // A flow without a usable address fails on its own (as sendto would), outside the batch.
            let (n0, due0) = batch[start];
            if self.out_addrs[n0].is_none() {
                let f = &mut self.outs[n0];
                f.errors += 1;
                if f.error.is_empty() {
                    f.error = format!("[Errno -2] Name or service not known: {:?}", f.dst);
                }
                tried += 1;
                heap.push(Reverse(Due(
                    if gaps[n0] > 0.0 { due0 + gaps[n0] } else { t },
                    n0,
                )));
                start += 1;
                continue;
            }
            let mut msgs: Vec<libc::mmsghdr> = Vec::new();
            for (k, &(n, _)) in batch.iter().enumerate().skip(start).take(1024) {
                let Some(addr) = self.out_addrs[n].as_ref() else {
                    break;
                };
                let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
                hdr.msg_name = addr.as_ptr() as *mut libc::c_void;
                hdr.msg_namelen = addr.len();
                hdr.msg_iov = iovs[k].as_mut_ptr();
                hdr.msg_iovlen = if tail > 0 { 2 } else { 1 };
                msgs.push(libc::mmsghdr {
                    msg_hdr: hdr,
                    msg_len: 0,
                });
            }
            let rc =
                unsafe { libc::sendmmsg(tx, msgs.as_mut_ptr(), msgs.len() as libc::c_uint, 0) };
            if rc > 0 {
                for &(n, due) in &batch[start..start + rc as usize] {
                    self.outs[n].sent(t, k_interval, self.length as u64, true);
                    heap.push(Reverse(Due(
                        if gaps[n] > 0.0 { due + gaps[n] } else { t },
                        n,
                    )));
                }
                tried += rc as usize;
                start += rc as usize;
                continue;
            }
            let err = io::Error::last_os_error();
            if would_block(&err) {
                // socket full: retry these datagrams a little later (not counted as tried, as in trafficd.py)
                for &(n, due) in &batch[start..] {
                    heap.push(Reverse(Due(due + 0.0005, n)));
                }
                return tried;
            }
            // e.g. no route while a link is cut: count it against this datagram's flow, keep the pace
            let (n, due) = batch[start];
            let f = &mut self.outs[n];
            f.errors += 1;
            if f.error.is_empty() {
                f.error = os_error_text(&err);
            }
            heap.push(Reverse(Due(
                if gaps[n] > 0.0 { due + gaps[n] } else { t },
                n,
            )));
            tried += 1;
            start += 1;
        }
        tried
    }

    fn run_tcp(&mut self, end: f64) {
        // every flow's first write right at the release, then as each can take more
        for i in 0..self.outs.len() {
            if self.out_socks[i].is_some() && !self.outs[i].closed {
                self.tcp_send(i);
                if !self.outs[i].closed {
                    self.out_writable[i] = true;
                }
            }
        }
        self.drop_realtime();
        while now() < end {
            self.poll(f64::min(0.05, (end - now()).max(0.0)));
        }
    }

    fn close_out(&mut self, i: usize) {
        self.outs[i].closed = true;
        self.out_writable[i] = false;
        if let Some(sock) = &self.out_socks[i] {
            let _ = sock.shutdown(std::net::Shutdown::Write);
        }
    }

    // ------------------------------------------------------------------------------------- the poll loop

    /// Wait up to `timeout` seconds for any socket, then serve every ready one.
    fn poll(&mut self, timeout: f64) {
        let mut fds = vec![libc::pollfd {
            fd: self.rx.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let mut watches = vec![Watch::Receiver];
        for (i, p) in self.pending.iter().enumerate() {
            if let Some(p) = p {
                fds.push(libc::pollfd {
                    fd: p.sock.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
                watches.push(Watch::Hello(i));
            }
        }
        for (i, s) in self.in_socks.iter().enumerate() {
            if let Some(s) = s {
                fds.push(libc::pollfd {
                    fd: s.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
                watches.push(Watch::Incoming(i));
            }
        }
        for (i, s) in self.out_socks.iter().enumerate() {
            if let (Some(s), true) = (s, self.out_writable[i]) {
                fds.push(libc::pollfd {
                    fd: s.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                });
                watches.push(Watch::Outgoing(i));
            }
        }
        // round up: a timeout that rounds down to 0 ms would spin until the instant passes
        let ms = (timeout * 1000.0).ceil().clamp(0.0, i32::MAX as f64) as libc::c_int;
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if ready <= 0 {
            return;
        }
        for (pfd, watch) in fds.iter().zip(watches) {
            if pfd.revents == 0 {
                continue;
            }
            match watch {
                Watch::Receiver if self.udp => self.udp_receive(),
                Watch::Receiver => self.accept(),
                Watch::Hello(i) => self.read_hello(i),
                Watch::Incoming(i) => self.tcp_receive(i),
                Watch::Outgoing(i) => {
                    if self.out_writable[i] {
                        self.tcp_send(i)
                    }
                }
            }
        }
    }

    /// Read every queued datagram (recvmmsg, RECV_BATCH at a time) and count it against its flow.
    fn udp_receive(&mut self) {
        let slot = self.buf.len();
        let bufs = &mut self.recv_slots;
        let fd = self.rx.as_raw_fd();
        loop {
            let mut iovs: Vec<libc::iovec> = bufs
                .chunks_mut(slot)
                .map(|c| libc::iovec {
                    iov_base: c.as_mut_ptr() as *mut libc::c_void,
                    iov_len: slot,
                })
                .collect();
            let mut msgs: Vec<libc::mmsghdr> = iovs
                .iter_mut()
                .map(|iov| {
                    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
                    hdr.msg_iov = iov as *mut libc::iovec;
                    hdr.msg_iovlen = 1;
                    libc::mmsghdr {
                        msg_hdr: hdr,
                        msg_len: 0,
                    }
                })
                .collect();
            let rc = unsafe {
                libc::recvmmsg(
                    fd,
                    msgs.as_mut_ptr(),
                    RECV_BATCH as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if rc <= 0 {
                return;
            }
            let t = now();
            for (k, m) in msgs.iter().take(rc as usize).enumerate() {
                let n = m.msg_len as usize;
                if n < HEADER_LEN {
                    continue; // a warm-up datagram
                }
                let (magic, index, seq, sent) =
                    wire::unpack_header(&bufs[k * slot..k * slot + HEADER_LEN]);
                if magic != MAGIC {
                    continue;
                }
                if let Some(&at) = self.in_by_index.get(&index) {
                    self.ins[at].datagram(t, n as u64, seq, sent, self.release, self.interval);
                }
            }
            if (rc as usize) < RECV_BATCH {
                return;
            }
        }
    }

    fn accept(&mut self) {
        while let Ok((sock, _)) = self.rx.accept() {
            if sock.set_nonblocking(true).is_ok() {
                self.pending.push(Some(PendingHello {
                    sock,
                    got: Vec::new(),
                }));
            }
        }
    }

    fn read_hello(&mut self, i: usize) {
        let Some(p) = self.pending[i].as_mut() else {
            return;
        };
        let mut chunk = [0u8; HELLO_LEN];
        let want = HELLO_LEN - p.got.len();
        let n = match (&p.sock).read(&mut chunk[..want]) {
            Err(e) if would_block(&e) => return,
            Err(_) => 0,
            Ok(n) => n,
        };
        if n == 0 {
            self.pending[i] = None; // closed before identifying itself
            return;
        }
        p.got.extend_from_slice(&chunk[..n]);
        if p.got.len() < HELLO_LEN {
            return;
        }
        let p = self.pending[i].take().unwrap();
        let magic = u32::from_be_bytes(p.got[0..4].try_into().unwrap());
        let index = u32::from_be_bytes(p.got[4..8].try_into().unwrap());
        if let (MAGIC, Some(&at)) = (magic, self.in_by_index.get(&index)) {
            self.in_socks[at] = Some(p.sock);
        }
    }

    fn tcp_receive(&mut self, i: usize) {
        let Some(sock) = self.in_socks[i].as_ref() else {
            return;
        };
        let mut reader = sock;
        let n = match reader.read(&mut self.buf) {
            Err(e) if would_block(&e) => return,
            Err(_) => 0,
            Ok(n) => n,
        };
        let t = now();
        if n == 0 {
            self.ins[i].closed = true;
            self.in_socks[i] = None;
            return;
        }
        self.ins[i].stream_bytes(t, n as u64, self.release, self.interval);
    }

    fn tcp_send(&mut self, i: usize) {
        let Some(sock) = self.out_socks[i].as_ref() else {
            return;
        };
        let mut writer = sock;
        let chunk = &self.zeros[..self.length];
        match writer.write(chunk) {
            Err(e) if would_block(&e) => {}
            Err(e) => {
                let f = &mut self.outs[i];
                f.error = format!("send to {}: {}", f.dst, os_error_text(&e));
                self.close_out(i);
            }
            Ok(n) => {
                let t = now();
                let k = interval_of(t, self.release, self.interval);
                self.outs[i].sent(t, k, n as u64, false);
            }
        }
    }
}

/// Connect (from `bind`, within 10 s) and send the flow's hello; the socket is left non-blocking.
fn connect_tcp(bind: Ipv4Addr, addr: &SockAddr, index: u32) -> io::Result<Socket> {
    let sock = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    sock.bind(&SockAddr::from(SocketAddr::from((bind, 0))))?;
    sock.connect_timeout(addr, Duration::from_secs(10))?;
    sock.set_write_timeout(Some(Duration::from_secs(10)))?;
    (&sock).write_all(&wire::pack_hello(index))?;
    sock.set_nonblocking(true)?;
    Ok(sock)
}

/// Become SCHED_FIFO (priority 50) if allowed; returns the policy to go back to, or None.
fn realtime_on() -> Option<(libc::c_int, libc::sched_param)> {
    unsafe {
        let policy = libc::sched_getscheduler(0);
        let mut param: libc::sched_param = std::mem::zeroed();
        if policy < 0 || libc::sched_getparam(0, &mut param) != 0 {
            return None;
        }
        let fifo = libc::sched_param { sched_priority: 50 };
        if libc::sched_setscheduler(0, libc::SCHED_FIFO, &fifo) != 0 {
            return None; // no CAP_SYS_NICE (e.g. a container without it): run as is
        }
        Some((policy, param))
    }
}

fn realtime_off((policy, param): (libc::c_int, libc::sched_param)) {
    unsafe {
        libc::sched_setscheduler(0, policy, &param);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heap_yields_the_earliest_due_then_plan_order() {
        let mut heap: BinaryHeap<Reverse<Due>> = BinaryHeap::new();
        for (due, n) in [(2.0, 0), (1.0, 2), (1.0, 1), (3.0, 3)] {
            heap.push(Reverse(Due(due, n)));
        }
        let order: Vec<usize> =
            std::iter::from_fn(|| heap.pop().map(|Reverse(Due(_, n))| n)).collect();
        assert_eq!(order, vec![1, 2, 0, 3]);
    }

    #[test]
    fn plan_numbers_follow_pythons_or_default() {
        assert_eq!(number_or(None, 1.0), 1.0);
        assert_eq!(number_or(Some(&Value::Null), 1448.0), 1448.0);
        assert_eq!(number_or(Some(&Value::from(0)), 1.0), 1.0);
        assert_eq!(number_or(Some(&Value::from(0.5)), 1.0), 0.5);
    }
}
