//! A minimal NFQUEUE client on a raw netlink socket (libc only).
//!
//! Why not the `nfq` crate (0.2.5, pure Rust, the one on the Cargo registry without a C library): each of its
//! `Message`s keeps the whole receive buffer alive (an `Arc` of ~72 KB with full-packet copies) until its
//! verdict, so holding 100,000 packets for one second would pin gigabytes; its socket is private (no
//! `AsRawFd`), so it cannot be polled together with a control socket and a timer; and it sends one datagram
//! per verdict. Here a held packet costs its id (plus its bytes only when it must be changed or copied),
//! the socket is polled, and due verdicts go out many to one `sendto` (netlink handles every message of a
//! datagram).

use std::io;

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

pub struct Queue {
    fd: i32,
    num: u16,
    seq: u32,
    rbuf: Vec<u8>,
    vbuf: Vec<u8>,
    pub verdicts_sent: u64,
    pub verdict_errors: u64,
    /// packet messages that arrived while a configuration request awaited its ack: handed out by the next
    /// `recv_batch` (dropping them would leave their packets held by the kernel with no verdict, ever)
    stash: std::collections::VecDeque<Vec<u8>>,
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

    /// Open, bind queue `num`, copy up to `copy` bytes of each packet, hold at most `maxlen` packets in the
    /// kernel; fail closed (no FAIL_OPEN: a full queue or a dead engine drops).
    pub fn open(num: u16, copy: u16, maxlen: u32, rcvbuf: i32) -> io::Result<Queue> {
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
        let mut q = Queue {
            fd,
            num,
            seq: 1,
            rbuf: vec![0u8; 256 * 1024],
            vbuf: Vec::with_capacity(64 * 1024),
            verdicts_sent: 0,
            verdict_errors: 0,
            stash: Default::default(),
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

    pub fn fd(&self) -> i32 {
        self.fd
    }

    /// Copy range: the first `copy` bytes of each packet reach us (its length always does).
    pub fn set_copy(&mut self, copy: u16) -> io::Result<()> {
        let mut params = (copy as u32).to_be_bytes().to_vec();
        params.push(NFQNL_COPY_PACKET);
        self.config(|b| put_attr(b, NFQA_CFG_PARAMS, &params))
    }

    fn config(&mut self, attrs: impl FnOnce(&mut Vec<u8>)) -> io::Result<()> {
        let mut buf = Vec::with_capacity(128);
        self.seq += 1;
        let at = start_msg(&mut buf, NFQNL_MSG_CONFIG, NLM_F_ACK, self.seq, self.num);
        attrs(&mut buf);
        finish(&mut buf, at);
        self.send(&buf)?;
        // wait for the ack; packets that arrive in between are kept for the next recv_batch
        loop {
            let n = unsafe {
                libc::recv(
                    self.fd,
                    self.rbuf.as_mut_ptr() as *mut libc::c_void,
                    self.rbuf.len(),
                    0,
                )
            };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let mut off = 0usize;
            let n = n as usize;
            let mut acked = None;
            while off + 16 <= n {
                let len = u32::from_ne_bytes(self.rbuf[off..off + 4].try_into().unwrap()) as usize;
                let typ = u16::from_ne_bytes(self.rbuf[off + 4..off + 6].try_into().unwrap());
                if len < 16 || off + len > n {
                    break;
                }
                if typ == NLMSG_ERROR && len >= 20 {
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

    /// Receive the packets waiting (without blocking), calling `f` for each; returns how many, or an error
    /// other than "nothing waiting".
    pub fn recv_batch(&mut self, max: usize, mut f: impl FnMut(Packet)) -> io::Result<usize> {
        let mut count = 0;
        while count < max {
            let Some(msg) = self.stash.pop_front() else {
                break;
            };
            if msg.len() >= 20 {
                if let Some(p) = parse_packet(&msg[20..]) {
                    f(p);
                    count += 1;
                }
            }
        }
        while count < max {
            let n = unsafe {
                libc::recv(
                    self.fd,
                    self.rbuf.as_mut_ptr() as *mut libc::c_void,
                    self.rbuf.len(),
                    libc::MSG_DONTWAIT,
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
            let n = n as usize;
            let mut off = 0usize;
            while off + 20 <= n {
                let len = u32::from_ne_bytes(self.rbuf[off..off + 4].try_into().unwrap()) as usize;
                let typ = u16::from_ne_bytes(self.rbuf[off + 4..off + 6].try_into().unwrap());
                if len < 16 || off + len > n {
                    break;
                }
                if typ == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET {
                    if let Some(p) = parse_packet(&self.rbuf[off + 20..off + len]) {
                        f(p);
                        count += 1;
                    }
                }
                off += align4(len);
            }
        }
        Ok(count)
    }

    /// Add a verdict to the outgoing batch (sent by `flush`, or when the batch is full).
    pub fn verdict(&mut self, id: u32, verdict: u32, payload: Option<&[u8]>) {
        if self.vbuf.len() + 64 + payload.map_or(0, |p| p.len()) > 60 * 1024 {
            self.flush();
        }
        let at = start_msg(&mut self.vbuf, NFQNL_MSG_VERDICT, 0, 0, self.num);
        let mut vh = verdict.to_be_bytes().to_vec();
        vh.extend_from_slice(&id.to_be_bytes());
        put_attr(&mut self.vbuf, NFQA_VERDICT_HDR, &vh);
        if let Some(p) = payload {
            put_attr(&mut self.vbuf, NFQA_PAYLOAD, p);
        }
        finish(&mut self.vbuf, at);
        self.verdicts_sent += 1;
    }

    pub fn flush(&mut self) {
        if self.vbuf.is_empty() {
            return;
        }
        if self.send(&self.vbuf).is_err() {
            self.verdict_errors += 1;
        }
        self.vbuf.clear();
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

impl Drop for Queue {
    fn drop(&mut self) {
        unsafe { libc::close(self.fd) };
    }
}
