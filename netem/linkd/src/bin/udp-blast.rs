//! udp-blast: a paced UDP sender for the link-engine benchmark (experiments/bench/bench_linkd.py), so the
//! offered load is not limited by the sender (iperf3 sends one datagram per syscall from one thread).
//! usage: udp-blast HOST:PORT RATE_BIT_S SECONDS [SIZE]   (RATE 0 = as fast as possible)
//! Sends SIZE-byte datagrams (default 1400) with sendmmsg in batches of up to 64, paced to RATE; prints
//! `sent=N seconds=S` on stdout.

use std::net::{SocketAddr, UdpSocket};
use std::os::unix::io::AsRawFd;
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: udp-blast HOST:PORT RATE_BIT_S SECONDS [SIZE]");
        std::process::exit(2);
    }
    let dst: SocketAddr = args[1].parse().expect("HOST:PORT");
    let rate: f64 = args[2].parse().expect("rate");
    let secs: f64 = args[3].parse().expect("seconds");
    let size: usize = args
        .get(4)
        .map(|s| s.parse().expect("size"))
        .unwrap_or(1400);
    let sock = UdpSocket::bind("0.0.0.0:0").expect("bind");
    sock.connect(dst).expect("connect");
    let fd = sock.as_raw_fd();
    let buf = vec![0u8; size];
    const BATCH: usize = 64;
    let mut iov: Vec<libc::iovec> = (0..BATCH)
        .map(|_| libc::iovec {
            iov_base: buf.as_ptr() as *mut libc::c_void,
            iov_len: size,
        })
        .collect();
    let mut msgs: Vec<libc::mmsghdr> = (0..BATCH)
        .map(|i| {
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_iov = &mut iov[i] as *mut libc::iovec;
            h.msg_hdr.msg_iovlen = 1;
            h
        })
        .collect();
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    let per_pkt = if rate > 0.0 {
        (size as f64 * 8.0) / rate
    } else {
        0.0
    };
    let mut sent: u64 = 0;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        let mut n = BATCH;
        if per_pkt > 0.0 {
            let due = (now - start).as_secs_f64() / per_pkt;
            let owed = due as u64 + 1 - sent.min(due as u64 + 1);
            if owed == 0 {
                std::thread::sleep(Duration::from_micros(50));
                continue;
            }
            n = (owed as usize).min(BATCH);
        }
        let r = unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), n as u32, 0) };
        if r > 0 {
            sent += r as u64;
        }
    }
    println!("sent={} seconds={:.3}", sent, start.elapsed().as_secs_f64());
}
