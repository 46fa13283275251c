//! A minimal NFQUEUE client on a raw netlink socket (libc only).
//!
//! Why not the `nfq` crate (0.2.5, pure Rust, the one on the Cargo registry without a C library): each of its
//! `Message`s keeps the whole receive buffer alive (an `Arc` of ~72 KB with full-packet copies) until its
//! verdict, so holding 100,000 packets for one second would pin gigabytes; its socket is private (no
//! `AsRawFd`), so it cannot be polled together with a control socket and a timer; and it sends one datagram
//! per verdict. Here a held packet costs its id (plus its bytes only when it must be changed or copied),
//! the socket is polled, and due verdicts go out many to one `sendto` (netlink handles every message of a
//! datagram). One socket serves every queue of the engine (`Sock`; each `Queue` is a bound queue number on
//! it), so the packets of all queues come with one `recvmmsg` and their verdicts leave in one datagram.

use std::cell::RefCell;
use std::io;
use std::rc::Rc;

const NETLINK_NETFILTER: i32 = 12;
const NFNL_SUBSYS_QUEUE: u16 = 3;
const NFQNL_MSG_PACKET: u16 = 0;
const NFQNL_MSG_VERDICT: u16 = 1;
const NFQNL_MSG_CONFIG: u16 = 2;
const NFQA_PACKET_HDR: u16 = 1;
const NFQA_VERDICT_HDR: u16 = 2;
const NFQA_TIMESTAMP: u16 = 4;
const NFQA_HWADDR: u16 = 9;
const NFQA_PAYLOAD: u16 = 10;
const NFQA_CAP_LEN: u16 = 13;
const NFQA_SKB_INFO: u16 = 14;
/// NFQA_SKB_INFO flag: the packet's transport checksum is not filled in yet (CHECKSUM_PARTIAL; only with F_GSO)
const NFQA_SKB_CSUMNOTREADY: u32 = 1;
const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQA_CFG_MASK: u16 = 4;
const NFQA_CFG_FLAGS: u16 = 5;
const NFQNL_CFG_CMD_BIND: u8 = 1;
const NFQNL_COPY_PACKET: u8 = 2;
const NFQA_CFG_F_FAIL_OPEN: u32 = 1;
const NFQA_CFG_F_GSO: u32 = 4;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLMSG_ERROR: u16 = 2;
const SOL_NETLINK: i32 = 270;
const NETLINK_NO_ENOBUFS: i32 = 5;

pub const NF_DROP: u32 = 0;
pub const NF_ACCEPT: u32 = 1;

/// One queued packet, as much of it as was copied.
pub struct Packet<'a> {
    pub id: u32,
    pub hw_src: Option<[u8; 6]>,
    /// The packet's full length (larger than `payload` when the copy range cut it).
    pub len: usize,
    pub payload: &'a [u8],
    /// The copied bytes carry an unfinished transport checksum (the kernel completes it on the way out, so an
    /// accepted packet is fine, but these bytes sent again would be dropped by the receiver as corrupt).
    pub csum_not_ready: bool,
    /// When the packet arrived (CLOCK_REALTIME, ns; the skb's receive stamp, present while some socket on the
    /// host asks for timestamps): a packet read late (batched) still starts its hold when it arrived.
    pub stamp_ns: Option<u64>,
}

/// The netlink socket every queue of the engine is bound to: one socket can bind many queue numbers (the
/// kernel checks only that a verdict comes from the queue's peer port), so packets of all queues are read
/// with one `recvmmsg` and the verdicts of all queues go out in one datagram per tick.
pub struct Sock {
    fd: i32,
    seq: u32,
    /// `recvmmsg` slots (`SLOTS` of `SLOT` bytes: a whole GSO super-packet's message fits one)
    rbuf: Vec<u8>,
    vbuf: Vec<u8>,
    /// packet messages that arrived while a configuration request awaited its ack: handed out by the next
    /// `recv_batch` (dropping them would leave their packets held by the kernel with no verdict, ever)
    stash: std::collections::VecDeque<Vec<u8>>,
    pub sends: u64,
    pub recv_calls: u64,
    pub send_errors: u64,
}

const SLOTS: usize = 64;
const SLOT: usize = 65536 + 1024;

/// One queue of the shared socket: its number and its verdict counters.
pub struct Queue {
    sock: Rc<RefCell<Sock>>,
    num: u16,
    pub verdicts_sent: u64,
    pub verdict_errors: u64,
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

fn put_attr(buf: &mut Vec<u8>, typ: u16, data: &[u8]) {
    let len = 4 + data.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&typ.to_ne_bytes());
    buf.extend_from_slice(data);
    buf.resize(align4(buf.len()), 0);
}

/// nlmsghdr + nfgenmsg for the queue subsystem; returns the offset of the header (its length is patched
/// by `finish`).
fn start_msg(buf: &mut Vec<u8>, msg: u16, flags: u16, seq: u32, queue: u16) -> usize {
    let at = buf.len();
    buf.extend_from_slice(&0u32.to_ne_bytes()); // len, patched
    buf.extend_from_slice(&((NFNL_SUBSYS_QUEUE << 8) | msg).to_ne_bytes());
    buf.extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes()); // pid
    buf.push(libc::AF_UNSPEC as u8); // nfgen_family
    buf.push(0); // NFNETLINK_V0
    buf.extend_from_slice(&queue.to_be_bytes()); // res_id
    at
}

fn finish(buf: &mut [u8], at: usize) {
    let len = (buf.len() - at) as u32;
    buf[at..at + 4].copy_from_slice(&len.to_ne_bytes());
}

/// Each NFQUEUE packet message in `buf` (one datagram): its queue number and its attributes.
fn packet_msgs(buf: &[u8], mut f: impl FnMut(u16, &[u8])) {
    let n = buf.len();
    let mut off = 0usize;
    while off + 20 <= n {
        let len = u32::from_ne_bytes(buf[off..off + 4].try_into().unwrap()) as usize;
        let typ = u16::from_ne_bytes(buf[off + 4..off + 6].try_into().unwrap());
        if len < 16 || off + len > n {
            break;
        }
        if typ == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET && len >= 20 {
            let queue = u16::from_be_bytes([buf[off + 18], buf[off + 19]]);
            f(queue, &buf[off + 20..off + len]);
        }
        off += align4(len);
    }
}

impl Sock {
    /// One netlink socket for every queue of this engine; `rcvbuf`: its receive buffer (the messages of all
    /// its queues wait there between reads).
    pub fn open(rcvbuf: i32) -> io::Result<Rc<RefCell<Sock>>> {
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                NETLINK_NETFILTER,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let s = Sock {
            fd,
            seq: 1,
            rbuf: vec![0u8; SLOTS * SLOT],
            vbuf: Vec::with_capacity(64 * 1024),
            stash: Default::default(),
            sends: 0,
            recv_calls: 0,
            send_errors: 0,
        };
        unsafe {
            let mut addr: libc::sockaddr_nl = std::mem::zeroed();
            addr.nl_family = libc::AF_NETLINK as u16;
            if libc::bind(
                fd,
                &addr as *const _ as *const libc::sockaddr,
                std::mem::size_of_val(&addr) as u32,
            ) < 0
            {
                return Err(io::Error::last_os_error());
            }
            let one: i32 = 1;
            libc::setsockopt(
                fd,
                SOL_NETLINK,
                NETLINK_NO_ENOBUFS,
                &one as *const _ as *const libc::c_void,
                4,
            );
            // SO_RCVBUFFORCE (root) so a burst of queued packets waits in the socket, not in a drop counter
            if libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                &rcvbuf as *const _ as *const libc::c_void,
                4,
            ) < 0
            {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUF,
                    &rcvbuf as *const _ as *const libc::c_void,
                    4,
                );
            }
        }
        Ok(Rc::new(RefCell::new(s)))
    }

    pub fn fd(&self) -> i32 {
        self.fd
    }

    /// Packets kept while a configuration awaited its ack, not yet handed out.
    pub fn stashed(&self) -> bool {
        !self.stash.is_empty()
    }

    fn send(&self, buf: &[u8]) -> io::Result<()> {
        unsafe {
            let mut addr: libc::sockaddr_nl = std::mem::zeroed();
            addr.nl_family = libc::AF_NETLINK as u16;
            let n = libc::sendto(
                self.fd,
                buf.as_ptr() as *const libc::c_void,
                buf.len(),
                0,
                &addr as *const _ as *const libc::sockaddr,
                std::mem::size_of_val(&addr) as u32,
            );
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    fn config(&mut self, queue: u16, attrs: impl FnOnce(&mut Vec<u8>)) -> io::Result<()> {
        // verdicts already batched go first (a configuration does not wait behind them, nor they behind it)
        self.flush();
        let mut buf = Vec::with_capacity(128);
        self.seq += 1;
        let at = start_msg(&mut buf, NFQNL_MSG_CONFIG, NLM_F_ACK, self.seq, queue);
        attrs(&mut buf);
        finish(&mut buf, at);
        self.send(&buf)?;
        let seq = self.seq;
        // wait for the ack; packets that arrive in between are kept for the next recv_batch
        loop {
            let n = unsafe {
                libc::recv(
                    self.fd,
                    self.rbuf.as_mut_ptr() as *mut libc::c_void,
                    SLOT,
                    0,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(e);
            }
            let mut off = 0usize;
            let n = n as usize;
            let mut acked = None;
            while off + 16 <= n {
                let len = u32::from_ne_bytes(self.rbuf[off..off + 4].try_into().unwrap()) as usize;
                let typ = u16::from_ne_bytes(self.rbuf[off + 4..off + 6].try_into().unwrap());
                let mseq = u32::from_ne_bytes(self.rbuf[off + 8..off + 12].try_into().unwrap());
                if len < 16 || off + len > n {
                    break;
                }
                // the ack of this request (errors of batched verdicts carry sequence 0: ignored)
                if typ == NLMSG_ERROR && len >= 20 && mseq == seq {
                    let errno =
                        i32::from_ne_bytes(self.rbuf[off + 16..off + 20].try_into().unwrap());
                    acked = Some(if errno == 0 {
                        Ok(())
                    } else {
                        Err(io::Error::from_raw_os_error(-errno))
                    });
                } else if typ == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET {
                    self.stash.push_back(self.rbuf[off..off + len].to_vec());
                }
                off += align4(len);
            }
            if let Some(res) = acked {
                return res;
            }
        }
    }

    /// Receive the packets waiting in every queue (without blocking; up to SLOTS datagrams per call, at most
    /// `max` packets), calling `f` with each one's queue number; returns how many, or an error other than
    /// "nothing waiting".
    pub fn recv_batch(&mut self, max: usize, mut f: impl FnMut(u16, Packet)) -> io::Result<usize> {
        let mut count = 0;
        while count < max {
            let Some(msg) = self.stash.pop_front() else {
                break;
            };
            packet_msgs(&msg, |queue, attrs| {
                if let Some(p) = parse_packet(attrs) {
                    f(queue, p);
                    count += 1;
                }
            });
        }
        while count < max {
            let want = SLOTS.min(max - count);
            let mut iov: [libc::iovec; SLOTS] = unsafe { std::mem::zeroed() };
            let mut hdrs: [libc::mmsghdr; SLOTS] = unsafe { std::mem::zeroed() };
            let base = self.rbuf.as_mut_ptr();
            for k in 0..want {
                iov[k].iov_base = unsafe { base.add(k * SLOT) } as *mut libc::c_void;
                iov[k].iov_len = SLOT;
                hdrs[k].msg_hdr.msg_iov = &mut iov[k];
                hdrs[k].msg_hdr.msg_iovlen = 1;
            }
            self.recv_calls += 1;
            let n = unsafe {
                libc::recvmmsg(
                    self.fd,
                    hdrs.as_mut_ptr(),
                    want as u32,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::EINTR) {
                    return Ok(count);
                }
                if e.raw_os_error() == Some(libc::ENOBUFS) {
                    continue; // the kernel dropped messages for us; its counters say how many
                }
                return Err(e);
            }
            for (k, h) in hdrs.iter().enumerate().take(n as usize) {
                let len = (h.msg_len as usize).min(SLOT);
                let buf = &self.rbuf[k * SLOT..k * SLOT + len];
                packet_msgs(buf, |queue, attrs| {
                    if let Some(p) = parse_packet(attrs) {
                        f(queue, p);
                        count += 1;
                    }
                });
            }
            if (n as usize) < want {
                return Ok(count); // the socket is empty
            }
        }
        Ok(count)
    }

    /// Send the verdicts batched so far, of every queue, in one datagram.
    pub fn flush(&mut self) {
        if self.vbuf.is_empty() {
            return;
        }
        self.sends += 1;
        if self.send(&self.vbuf).is_err() {
            self.send_errors += 1;
        }
        self.vbuf.clear();
    }
}

impl Queue {
    /// The kernel's drops for this queue (/proc/net/netfilter/nfnetlink_queue, this namespace): packets refused
    /// because the queue was full or the kernel could not track one more held packet (queue_dropped), and
    /// those whose message did not fit the socket (user_dropped). Newer kernels track held packets in a table
    /// that takes at most 65,536 per queue: beyond that the kernel drops new packets before we see them.
    pub fn kernel_drops(&self) -> (u64, u64) {
        let text =
            std::fs::read_to_string("/proc/net/netfilter/nfnetlink_queue").unwrap_or_default();
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() >= 7 && f[0].parse::<u16>().ok() == Some(self.num) {
                return (f[5].parse().unwrap_or(0), f[6].parse().unwrap_or(0));
            }
        }
        (0, 0)
    }

    /// Bind queue `num` to the engine's socket, copy up to `copy` bytes of each packet, hold at most `maxlen`
    /// packets in the kernel; fail closed (no FAIL_OPEN: a full queue or a dead engine drops).
    pub fn open(sock: &Rc<RefCell<Sock>>, num: u16, copy: u16, maxlen: u32) -> io::Result<Queue> {
        let mut q = Queue {
            sock: sock.clone(),
            num,
            verdicts_sent: 0,
            verdict_errors: 0,
        };
        let mut cmd = vec![NFQNL_CFG_CMD_BIND, 0];
        cmd.extend_from_slice(&0u16.to_be_bytes());
        q.config(|b| put_attr(b, NFQA_CFG_CMD, &cmd))?;
        q.set_copy(copy)?;
        q.config(|b| put_attr(b, NFQA_CFG_QUEUE_MAXLEN, &maxlen.to_be_bytes()))?;
        q.set_gso(false)?;
        Ok(q)
    }

    /// With `gso`, a GSO super-packet (up to 64 KB of TCP segments) comes as one message and gets one fate;
    /// without, the kernel segments it first and each segment is queued on its own. FAIL_OPEN stays off.
    pub fn set_gso(&mut self, gso: bool) -> io::Result<()> {
        let flags = if gso { NFQA_CFG_F_GSO } else { 0 };
        self.config(|b| {
            put_attr(b, NFQA_CFG_FLAGS, &flags.to_be_bytes());
            put_attr(
                b,
                NFQA_CFG_MASK,
                &(NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO).to_be_bytes(),
            );
        })
    }

    /// Copy range: the first `copy` bytes of each packet reach us (its length always does).
    pub fn set_copy(&mut self, copy: u16) -> io::Result<()> {
        let mut params = (copy as u32).to_be_bytes().to_vec();
        params.push(NFQNL_COPY_PACKET);
        self.config(|b| put_attr(b, NFQA_CFG_PARAMS, &params))
    }

    fn config(&mut self, attrs: impl FnOnce(&mut Vec<u8>)) -> io::Result<()> {
        self.sock.borrow_mut().config(self.num, attrs)
    }

    /// The shared socket's counters: verdict datagrams sent, receive calls made (all queues together).
    pub fn sock_counters(&self) -> (u64, u64) {
        let s = self.sock.borrow();
        (s.sends, s.recv_calls)
    }

    /// Add a verdict to the engine's outgoing batch (sent by `Sock::flush`, or when the batch is full).
    pub fn verdict(&mut self, id: u32, verdict: u32, payload: Option<&[u8]>) {
        let mut s = self.sock.borrow_mut();
        if s.vbuf.len() + 64 + payload.map_or(0, |p| p.len()) > 60 * 1024 {
            s.flush();
        }
        let at = start_msg(&mut s.vbuf, NFQNL_MSG_VERDICT, 0, 0, self.num);
        let mut vh = [0u8; 8];
        vh[..4].copy_from_slice(&verdict.to_be_bytes());
        vh[4..].copy_from_slice(&id.to_be_bytes());
        put_attr(&mut s.vbuf, NFQA_VERDICT_HDR, &vh);
        if let Some(p) = payload {
            put_attr(&mut s.vbuf, NFQA_PAYLOAD, p);
        }
        finish(&mut s.vbuf, at);
        self.verdicts_sent += 1;
    }
}

fn parse_packet(mut attrs: &[u8]) -> Option<Packet<'_>> {
    let mut id = None;
    let mut hw_src = None;
    let mut payload: &[u8] = &[];
    let mut cap_len = None;
    let mut csum_not_ready = false;
    let mut stamp_ns = None;
    while attrs.len() >= 4 {
        let alen = u16::from_ne_bytes([attrs[0], attrs[1]]) as usize;
        let typ = u16::from_ne_bytes([attrs[2], attrs[3]]) & 0x3fff;
        if alen < 4 || alen > attrs.len() {
            break;
        }
        let data = &attrs[4..alen];
        match typ {
            NFQA_PACKET_HDR if data.len() >= 4 => {
                id = Some(u32::from_be_bytes(data[..4].try_into().unwrap()))
            }
            NFQA_HWADDR if data.len() >= 10 => {
                let hlen = u16::from_be_bytes([data[0], data[1]]) as usize;
                if hlen == 6 {
                    hw_src = Some(data[4..10].try_into().unwrap());
                }
            }
            NFQA_PAYLOAD => payload = data,
            NFQA_TIMESTAMP if data.len() >= 16 => {
                let sec = u64::from_be_bytes(data[..8].try_into().unwrap());
                let usec = u64::from_be_bytes(data[8..16].try_into().unwrap());
                stamp_ns = Some(sec * 1_000_000_000 + usec * 1000);
            }
            NFQA_CAP_LEN if data.len() >= 4 => {
                cap_len = Some(u32::from_be_bytes(data[..4].try_into().unwrap()) as usize)
            }
            NFQA_SKB_INFO if data.len() >= 4 => {
                csum_not_ready =
                    u32::from_be_bytes(data[..4].try_into().unwrap()) & NFQA_SKB_CSUMNOTREADY != 0
            }
            _ => {}
        }
        attrs = &attrs[align4(alen).min(attrs.len())..];
    }
    Some(Packet {
        id: id?,
        hw_src,
        len: cap_len.unwrap_or(payload.len()),
        payload,
        csum_not_ready,
        stamp_ns,
    })
}

impl Drop for Sock {
    fn drop(&mut self) {
        unsafe { libc::close(self.fd) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A packet message as the kernel sends it: nlmsghdr + nfgenmsg (queue number) + attributes.
    fn packet_msg(buf: &mut Vec<u8>, queue: u16, id: u32, payload: &[u8]) {
        let at = buf.len();
        buf.extend_from_slice(&0u32.to_ne_bytes());
        buf.extend_from_slice(&((NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET).to_ne_bytes());
        buf.extend_from_slice(&0u16.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes());
        buf.extend_from_slice(&[libc::AF_INET as u8, 0]);
        buf.extend_from_slice(&queue.to_be_bytes());
        let mut hdr = id.to_be_bytes().to_vec();
        hdr.extend_from_slice(&[0x08, 0x00, 3]); // hw protocol, hook
        put_attr(buf, NFQA_PACKET_HDR, &hdr);
        put_attr(buf, NFQA_CAP_LEN, &1400u32.to_be_bytes());
        put_attr(buf, NFQA_PAYLOAD, payload);
        finish(buf, at);
    }

    #[test]
    fn messages_of_several_queues_in_one_datagram_are_told_apart_by_their_queue_number() {
        let mut buf = vec![];
        packet_msg(&mut buf, 3, 11, &[0x45; 21]); // an odd length: the next message starts 4-aligned
        packet_msg(&mut buf, 7, 12, &[0x45; 20]);
        let mut seen = vec![];
        packet_msgs(&buf, |q, attrs| {
            let p = parse_packet(attrs).unwrap();
            seen.push((q, p.id, p.len, p.payload.len()));
        });
        assert_eq!(seen, vec![(3, 11, 1400, 21), (7, 12, 1400, 20)]);
    }

    #[test]
    fn verdicts_of_several_queues_share_one_batch() {
        // no socket needed to build the batch: a closed fd only makes the flush fail (counted)
        let sock = Rc::new(RefCell::new(Sock {
            fd: -1,
            seq: 1,
            rbuf: vec![],
            vbuf: vec![],
            stash: Default::default(),
            sends: 0,
            recv_calls: 0,
            send_errors: 0,
        }));
        let mut a = Queue {
            sock: sock.clone(),
            num: 3,
            verdicts_sent: 0,
            verdict_errors: 0,
        };
        let mut b = Queue {
            sock: sock.clone(),
            num: 7,
            verdicts_sent: 0,
            verdict_errors: 0,
        };
        a.verdict(1, NF_ACCEPT, None);
        b.verdict(2, NF_DROP, None);
        let v = sock.borrow().vbuf.clone();
        // two verdict messages, each naming its queue (res_id) and carrying verdict + id
        let mut off = 0;
        let mut got = vec![];
        while off < v.len() {
            let len = u32::from_ne_bytes(v[off..off + 4].try_into().unwrap()) as usize;
            let queue = u16::from_be_bytes([v[off + 18], v[off + 19]]);
            let verdict = u32::from_be_bytes(v[off + 24..off + 28].try_into().unwrap());
            let id = u32::from_be_bytes(v[off + 28..off + 32].try_into().unwrap());
            got.push((queue, verdict, id));
            off += align4(len);
        }
        assert_eq!(got, vec![(3, NF_ACCEPT, 1), (7, NF_DROP, 2)]);
        sock.borrow_mut().flush();
        assert_eq!((sock.borrow().sends, sock.borrow().send_errors), (1, 1));
        assert!(sock.borrow().vbuf.is_empty());
    }
}
