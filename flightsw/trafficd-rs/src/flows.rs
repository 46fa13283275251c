//! Per-flow counters and their report lines (the fields and meanings of trafficd.py's OutFlow / InFlow).

use serde::Serialize;
use serde_json::Value;

/// Add `amount` to interval `k` (a negative interval counts as the first, as in trafficd.py's _bin).
pub fn add_to_bin(bins: &mut Vec<u64>, k: i64, amount: u64) {
    let k = k.max(0) as usize;
    if bins.len() <= k {
        bins.resize(k + 1, 0);
    }
    bins[k] += amount;
}

/// The interval an instant falls in, counted from `origin` (Python's int() truncates toward zero).
pub fn interval_of(instant: f64, origin: f64, interval: f64) -> i64 {
    ((instant - origin) / interval) as i64
}

fn num(x: f64) -> Option<f64> {
    if x.is_nan() {
        None
    } else {
        Some(x)
    }
}

/// One flow this node sends.
pub struct OutFlow {
    pub id: Value,
    pub index: u32,
    pub dst: String,
    pub port: u16,
    pub rate_bps: Option<f64>,
    pub seq: u64,
    pub bytes: u64,
    pub first_ts: f64,
    pub last_ts: f64,
    pub errors: u64,
    pub error: String,
    pub bins_packets: Vec<u64>,
    pub bins_bytes: Vec<u64>,
    pub closed: bool,
}

#[derive(Serialize)]
pub struct SendRecord<'a> {
    id: &'a Value,
    side: &'static str,
    first_send_ts: Option<f64>,
    last_send_ts: Option<f64>,
    packets: u64,
    bytes: u64,
    send_errors: u64,
    error: &'a str,
    bins_packets: &'a [u64],
    bins_bytes: &'a [u64],
}

impl OutFlow {
    pub fn new(id: Value, index: u32, dst: String, port: u16, rate_bps: Option<f64>) -> Self {
        OutFlow {
            id,
            index,
            dst,
            port,
            rate_bps,
            seq: 0,
            bytes: 0,
            first_ts: f64::NAN,
            last_ts: f64::NAN,
            errors: 0,
            error: String::new(),
            bins_packets: Vec::new(),
            bins_bytes: Vec::new(),
            closed: false,
        }
    }

    /// A datagram or a write of `bytes` went out at `now`; `k` is its interval.
    pub fn sent(&mut self, now: f64, k: i64, bytes: u64, is_datagram: bool) {
        if self.first_ts.is_nan() {
            self.first_ts = now;
        }
        self.last_ts = now;
        self.bytes += bytes;
        if is_datagram {
            add_to_bin(&mut self.bins_packets, k, 1);
            self.seq += 1;
        }
        add_to_bin(&mut self.bins_bytes, k, bytes);
    }

    pub fn record(&self) -> SendRecord<'_> {
        SendRecord {
            id: &self.id,
            side: "send",
            first_send_ts: num(self.first_ts),
            last_send_ts: num(self.last_ts),
            packets: self.seq,
            bytes: self.bytes,
            send_errors: self.errors,
            error: &self.error,
            bins_packets: &self.bins_packets,
            bins_bytes: &self.bins_bytes,
        }
    }
}

/// One flow this node receives.
pub struct InFlow {
    pub id: Value,
    pub packets: u64,
    pub bytes: u64,
    max_seq: i128,
    pub out_of_order: u64,
    pub first_ts: f64,
    pub last_ts: f64,
    pub jitter: f64,
    prev_transit: Option<f64>,
    latency_sum: f64,
    latency_max: f64,
    pub bins_bytes: Vec<u64>,
    pub bins_packets: Vec<u64>,
    pub bins_sent_packets: Vec<u64>,
    pub closed: bool,
}

#[derive(Serialize)]
pub struct RecvRecord<'a> {
    id: &'a Value,
    side: &'static str,
    first_recv_ts: Option<f64>,
    last_recv_ts: Option<f64>,
    packets: u64,
    bytes: u64,
    out_of_order: u64,
    jitter_ms: f64,
    latency_ms_mean: Option<f64>,
    latency_ms_max: Option<f64>,
    bins_bytes: &'a [u64],
    bins_packets: &'a [u64],
    bins_sent_packets: &'a [u64],
}

impl InFlow {
    pub fn new(id: Value) -> Self {
        InFlow {
            id,
            packets: 0,
            bytes: 0,
            max_seq: -1,
            out_of_order: 0,
            first_ts: f64::NAN,
            last_ts: f64::NAN,
            jitter: 0.0,
            prev_transit: None,
            latency_sum: 0.0,
            latency_max: 0.0,
            bins_bytes: Vec::new(),
            bins_packets: Vec::new(),
            bins_sent_packets: Vec::new(),
            closed: false,
        }
    }

    fn arrived(&mut self, now: f64, bytes: u64) {
        if self.first_ts.is_nan() {
            self.first_ts = now;
        }
        self.last_ts = now;
        self.bytes += bytes;
    }

    /// A datagram of `n` bytes (sequence `seq`, sent at `sent`) arrived at `now`: counts, RFC 3550 jitter,
    /// bytes and packets by receive time, packets by send time (for exact loss per interval).
    pub fn datagram(&mut self, now: f64, n: u64, seq: u64, sent: f64, release: f64, interval: f64) {
        self.arrived(now, n);
        self.packets += 1;
        if (seq as i128) < self.max_seq {
            self.out_of_order += 1;
        } else {
            self.max_seq = seq as i128;
        }
        let transit = now - sent;
        if let Some(prev) = self.prev_transit {
            self.jitter += ((transit - prev).abs() - self.jitter) / 16.0;
        }
        self.prev_transit = Some(transit);
        self.latency_sum += transit;
        self.latency_max = self.latency_max.max(transit);
        let origin = if release.is_nan() { now } else { release };
        add_to_bin(&mut self.bins_bytes, interval_of(now, origin, interval), n);
        add_to_bin(
            &mut self.bins_packets,
            interval_of(now, origin, interval),
            1,
        );
        add_to_bin(
            &mut self.bins_sent_packets,
            interval_of(sent, origin, interval),
            1,
        );
    }

    /// `n` bytes of a TCP flow arrived at `now` (binned by receive time).
    pub fn stream_bytes(&mut self, now: f64, n: u64, release: f64, interval: f64) {
        self.arrived(now, n);
        let origin = if release.is_nan() { now } else { release };
        add_to_bin(&mut self.bins_bytes, interval_of(now, origin, interval), n);
    }

    pub fn record(&self) -> RecvRecord<'_> {
        let any = self.packets > 0;
        RecvRecord {
            id: &self.id,
            side: "recv",
            first_recv_ts: num(self.first_ts),
            last_recv_ts: num(self.last_ts),
            packets: self.packets,
            bytes: self.bytes,
            out_of_order: self.out_of_order,
            jitter_ms: self.jitter * 1000.0,
            latency_ms_mean: any.then(|| self.latency_sum / self.packets as f64 * 1000.0),
            latency_ms_max: any.then_some(self.latency_max * 1000.0),
            bins_bytes: &self.bins_bytes,
            bins_packets: &self.bins_packets,
            bins_sent_packets: &self.bins_sent_packets,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::dumps;

    #[test]
    fn bins_grow_and_clamp_negative_intervals() {
        let mut b = Vec::new();
        add_to_bin(&mut b, 2, 5);
        add_to_bin(&mut b, -3, 1);
        assert_eq!(b, vec![1, 0, 5]);
        assert_eq!(interval_of(99.9, 100.0, 0.5), 0); // int(-0.2) == 0 in Python
        assert_eq!(interval_of(101.2, 100.0, 0.5), 2);
    }

    #[test]
    fn rfc3550_jitter_and_reordering() {
        let mut f = InFlow::new(Value::from("a__b"));
        f.datagram(10.010, 100, 0, 10.000, 10.0, 1.0); // transit 10 ms
        f.datagram(10.030, 100, 2, 10.014, 10.0, 1.0); // transit 16 ms: D = 6 ms
        f.datagram(10.031, 100, 1, 10.007, 10.0, 1.0); // late: out of order
        let expected = 0.006 / 16.0;
        let d3 = (0.024f64 - 0.016).abs();
        let expected = expected + (d3 - expected) / 16.0;
        assert!((f.jitter - expected).abs() < 1e-12);
        assert_eq!((f.packets, f.out_of_order, f.bytes), (3, 1, 300));
        assert_eq!(f.bins_sent_packets, vec![3]);
    }

    #[test]
    fn records_carry_trafficd_py_fields_in_order() {
        let f = OutFlow::new(Value::from("a__b"), 1, "127.0.0.1".into(), 5000, Some(1e6));
        assert_eq!(
            dumps(&f.record()),
            "{\"id\": \"a__b\", \"side\": \"send\", \"first_send_ts\": null, \"last_send_ts\": null, \
             \"packets\": 0, \"bytes\": 0, \"send_errors\": 0, \"error\": \"\", \"bins_packets\": [], \"bins_bytes\": []}"
        );
        let r = InFlow::new(Value::from("b__a"));
        assert_eq!(
            dumps(&r.record()),
            "{\"id\": \"b__a\", \"side\": \"recv\", \"first_recv_ts\": null, \"last_recv_ts\": null, \
             \"packets\": 0, \"bytes\": 0, \"out_of_order\": 0, \"jitter_ms\": 0.0, \"latency_ms_mean\": null, \
             \"latency_ms_max\": null, \"bins_bytes\": [], \"bins_packets\": [], \"bins_sent_packets\": []}"
        );
    }
}
