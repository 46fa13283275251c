//! Link conditions (NetEm's model) and the per-packet decision, with no I/O: what happens to one packet
//! arriving on a directed link at time `now` (drop, or release at time `due`, maybe corrupted, maybe twice).
//!
//! The meaning follows Linux NetEm (net/sched/sch_netem.c) so the same spec means the same thing on both
//! engines:
//! - delay + jitter: `delay + jitter * z`, z drawn from the distribution (uniform on [-1, 1]; normal, pareto,
//!   paretonormal standardised to mean 0 and standard deviation 1), the random number correlated with the
//!   previous one as NetEm's `get_crandom` does (`u = (1 - rho) * rand + rho * last`). Packets leave in
//!   order of their release time (NetEm's tfifo), so jitter reorders as it does in NetEm.
//! - rate: a packet's serialisation ends at max(arrival, previous end) + size / rate; the delay is added after
//!   it (NetEm's `rate`); the backlog is bounded by the link's `limit` (packets, tail drop, as NetEm).
//! - loss: random with correlation (as NetEm: correlated uniform < p), or Gilbert-Elliott (`ge=p,r,1-h,1-k`,
//!   NetEm's `loss gemodel`: p good->bad, r bad->good, 1-h loss in bad, 1-k loss in good).
//! - duplicate: a second copy, with a delay of its own; corrupt: one bit flipped at a random offset past the
//!   IP header (the transport checksum then sees it, as a receiver sees a corrupted frame);
//!   reorder: that share of packets is sent at once, skipping the delay (NetEm's `reorder P` with gap 1).
//! - down: every new packet is dropped at once; packets already held keep the time they were given.

use std::collections::HashMap;
use std::fmt;

pub const NS: u64 = 1_000_000_000;

/// One xorshift64* generator per engine (seeded once; `--seed` makes runs repeatable).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // splitmix64 of the seed, never zero
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [0, 1).
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() >> 32) as usize * n) >> 32
    }
}

/// NetEm's correlated random number: the next value leans on the last by `rho` (0 = independent).
#[derive(Clone, Debug, Default)]
pub struct Correlated {
    last: f64,
}

impl Correlated {
    pub fn next(&mut self, rng: &mut Rng, rho: f64) -> f64 {
        let r = rng.f64();
        let v = if rho <= 0.0 {
            r
        } else {
            (1.0 - rho) * r + rho * self.last
        };
        self.last = v;
        v
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dist {
    Uniform,
    Normal,
    Pareto,
    ParetoNormal,
}

impl Dist {
    pub fn parse(s: &str) -> Option<Dist> {
        match s {
            "uniform" => Some(Dist::Uniform),
            "normal" => Some(Dist::Normal),
            "pareto" => Some(Dist::Pareto),
            "paretonormal" => Some(Dist::ParetoNormal),
            _ => None,
        }
    }
}

/// Inverse normal CDF (Acklam's rational approximation, |error| < 1.2e-9), so a correlated uniform gives a
/// correlated normal deviate, as NetEm's table lookup does.
#[allow(clippy::excessive_precision)] // Acklam's published coefficients, kept digit for digit
pub fn norm_inv(p: f64) -> f64 {
    let p = p.clamp(1e-12, 1.0 - 1e-12);
    const A: [f64; 6] = [
        -3.969683028665376e+01,
        2.209460984245205e+02,
        -2.759285104469687e+02,
        1.383577518672690e+02,
        -3.066479806614716e+01,
        2.506628277459239e+00,
    ];
    const B: [f64; 5] = [
        -5.447609879822406e+01,
        1.615858368580409e+02,
        -1.556989798598866e+02,
        6.680131188771972e+01,
        -1.328068155288572e+01,
    ];
    const C: [f64; 6] = [
        -7.784894002430293e-03,
        -3.223964580411365e-01,
        -2.400758277161838e+00,
        -2.549732539343734e+00,
        4.374664141464968e+00,
        2.938163982698783e+00,
    ];
    const D: [f64; 4] = [
        7.784695709041462e-03,
        3.224671290700398e-01,
        2.445134137142996e+00,
        3.754408661907416e+00,
    ];
    let plow = 0.02425;
    if p < plow {
        let q = (-2.0 * p.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    } else if p <= 1.0 - plow {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        let q = (-2.0 * (1.0 - p).ln()).sqrt();
        -(((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    }
}

/// Pareto with shape 3 (NetEm's table uses shape 3), standardised: mean 1.5, sd sqrt(3)/2.
fn pareto_std(u: f64) -> f64 {
    let x = (1.0 - u).max(1e-12).powf(-1.0 / 3.0);
    (x - 1.5) / (3.0f64.sqrt() / 2.0)
}

/// A standardised deviate (mean 0; sd 1 except uniform, which spans [-1, 1] as NetEm's plain jitter does)
/// from a uniform u in [0, 1) (and u2 for paretonormal's normal part). NetEm's tables stop at 4 standard
/// deviations; so do these, and the clipped pareto shapes are re-centred and re-scaled (mean and sd of the
/// clipped shapes, computed once over 3 million draws) so `jitter` is their standard deviation as for normal.
pub fn deviate(dist: Dist, u: f64, u2: f64) -> f64 {
    match dist {
        Dist::Uniform => 2.0 * u - 1.0,
        Dist::Normal => norm_inv(u).clamp(-4.0, 4.0),
        Dist::Pareto => (pareto_std(u).clamp(-4.0, 4.0) + 0.023638) / 0.736380,
        // iproute2's paretonormal: 1/4 normal + 3/4 pareto
        Dist::ParetoNormal => {
            ((0.25 * norm_inv(u2) + 0.75 * pareto_std(u)).clamp(-4.0, 4.0) + 0.011770) / 0.639378
        }
    }
}

/// Ethernet header and the MTU the rate's wire length assumes (the swarm's default MTU).
const ETH_HLEN: usize = 14;
const WIRE_MTU: usize = 1500;

/// Bytes a packet of `len` IP bytes takes on the wire, as NetEm's rate counts them (qdisc_pkt_len: the frame
/// with its Ethernet header; a GSO super-packet as the segments it becomes, each with its own headers, the
/// transport header taken as TCP's with timestamps).
pub fn wire_len(len: usize, ip_hlen: usize) -> usize {
    if len <= WIRE_MTU {
        return len + ETH_HLEN;
    }
    let hdr = ip_hlen + 32;
    let payload = len.saturating_sub(hdr);
    let segs = payload.div_ceil(WIRE_MTU - hdr).max(1);
    payload + segs * (hdr + ETH_HLEN)
}

/// Conditions of one directed link. Probabilities are fractions (0..1), times nanoseconds, rate bit/s.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkCfg {
    pub delay_ns: u64,
    pub jitter_ns: u64,
    pub dist: Dist,
    pub delay_corr: f64,
    pub loss: f64,
    pub loss_corr: f64,
    pub ge: Option<[f64; 4]>,
    pub rate_bps: u64,
    pub corrupt: f64,
    pub duplicate: f64,
    pub reorder: f64,
    pub down: bool,
    pub limit: u32,
}

impl Default for LinkCfg {
    fn default() -> LinkCfg {
        LinkCfg {
            delay_ns: 0,
            jitter_ns: 0,
            dist: Dist::Uniform,
            delay_corr: 0.0,
            loss: 0.0,
            loss_corr: 0.0,
            ge: None,
            rate_bps: 0,
            corrupt: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            down: false,
            limit: 1_000_000,
        }
    }
}

impl LinkCfg {
    pub fn needs_payload(&self) -> bool {
        self.corrupt > 0.0 || self.duplicate > 0.0
    }
    /// True when each wire packet needs a fate of its own (loss, duplication, corruption, reordering): then
    /// GSO super-packets must be segmented before they are queued, as a NIC would put them on the wire.
    pub fn per_segment(&self) -> bool {
        self.loss > 0.0 || self.ge.is_some() || self.needs_payload() || self.reorder > 0.0
    }
    /// Bytes this link holds at its rate over its longest delay (0: no rate, bounded by `limit` only).
    pub fn held_bytes(&self) -> u64 {
        if self.rate_bps == 0 {
            return 0;
        }
        ((self.rate_bps as u128 * (self.delay_ns + 4 * self.jitter_ns) as u128) / (8 * NS as u128))
            as u64
    }
}

/// A link key: a source MAC, or None for "any source" (`*`: conditions for every frame, e.g. one link in a
/// guest or a per-node condition).
pub type Mac = [u8; 6];

pub fn parse_mac(s: &str) -> Option<Mac> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return None;
    }
    let mut mac = [0u8; 6];
    for (i, p) in parts.iter().enumerate() {
        if p.is_empty() || p.len() > 2 {
            return None;
        }
        mac[i] = u8::from_str_radix(p, 16).ok()?;
    }
    Some(mac)
}

pub fn fmt_mac(m: &Mac) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[derive(Debug, PartialEq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn err<T>(msg: String) -> Result<T, ConfigError> {
    Err(ConfigError(msg))
}

/// "100ms", "1.3s", "500us", "250ns"; a bare number is milliseconds (as in the swarm spec).
pub fn parse_time_ns(s: &str) -> Option<u64> {
    let (num, mult) = if let Some(n) = s.strip_suffix("ns") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix("us") {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e9)
    } else {
        (s, 1e6)
    };
    let v: f64 = num.parse().ok()?;
    if !v.is_finite() || v < 0.0 {
        return None;
    }
    Some((v * mult).round() as u64)
}

/// "1%", "0.5%"; a bare number is percent. Returns a fraction.
pub fn parse_pct(s: &str) -> Option<f64> {
    let v: f64 = s.strip_suffix('%').unwrap_or(s).parse().ok()?;
    if !v.is_finite() || !(0.0..=100.0).contains(&v) {
        return None;
    }
    Some(v / 100.0)
}

/// "10mbit", "1.5gbit", "500kbit", "1000" (bit/s); decimal units, bits.
pub fn parse_rate(s: &str) -> Option<u64> {
    let low = s.to_ascii_lowercase();
    let low = low.trim_end_matches("ps").trim_end_matches("bit");
    let (num, mult) = match low.chars().last()? {
        'k' => (&low[..low.len() - 1], 1e3),
        'm' => (&low[..low.len() - 1], 1e6),
        'g' => (&low[..low.len() - 1], 1e9),
        _ => (low, 1.0),
    };
    let v: f64 = num.parse().ok()?;
    if !v.is_finite() || v < 0.0 {
        return None;
    }
    Some((v * mult).round() as u64)
}

/// One config line: `link <MAC|*> key=value ...` (keys: delay jitter dist delay_corr loss loss_corr ge rate
/// corrupt duplicate reorder limit down).
pub fn parse_link_line(line: &str) -> Result<(Option<Mac>, LinkCfg), ConfigError> {
    let mut words = line.split_whitespace();
    if words.next() != Some("link") {
        return err(format!("{line:?}: expected `link <mac|*> key=value ...`"));
    }
    let who = words
        .next()
        .ok_or_else(|| ConfigError("link: missing the source MAC (or *)".into()))?;
    let mac = if who == "*" {
        None
    } else {
        Some(parse_mac(who).ok_or_else(|| {
            ConfigError(format!(
                "link {who}: not a MAC address (aa:bb:cc:dd:ee:ff or *)"
            ))
        })?)
    };
    let mut cfg = LinkCfg::default();
    let mut limit_given = false;
    for w in words {
        if w == "down" {
            cfg.down = true;
            continue;
        }
        let (k, v) = w
            .split_once('=')
            .ok_or_else(|| ConfigError(format!("link {who}: {w:?}: expected key=value")))?;
        let bad = |what: &str| ConfigError(format!("link {who}: {k} {v:?}: {what}"));
        match k {
            "delay" => cfg.delay_ns = parse_time_ns(v).ok_or_else(|| bad("expected a time (e.g. 100ms, 1.3s)"))?,
            "jitter" => cfg.jitter_ns = parse_time_ns(v).ok_or_else(|| bad("expected a time (e.g. 10ms)"))?,
            "dist" => cfg.dist = Dist::parse(v).ok_or_else(|| bad("expected uniform, normal, pareto or paretonormal"))?,
            "delay_corr" => cfg.delay_corr = parse_pct(v).ok_or_else(|| bad("expected a percentage 0-100%"))?,
            "loss" => cfg.loss = parse_pct(v).ok_or_else(|| bad("expected a percentage 0-100%"))?,
            "loss_corr" => cfg.loss_corr = parse_pct(v).ok_or_else(|| bad("expected a percentage 0-100%"))?,
            "corrupt" => cfg.corrupt = parse_pct(v).ok_or_else(|| bad("expected a percentage 0-100%"))?,
            "duplicate" => cfg.duplicate = parse_pct(v).ok_or_else(|| bad("expected a percentage 0-100%"))?,
            "reorder" => cfg.reorder = parse_pct(v).ok_or_else(|| bad("expected a percentage 0-100%"))?,
            "rate" => cfg.rate_bps = parse_rate(v).ok_or_else(|| bad("expected a rate (e.g. 10mbit)"))?,
            "limit" => {
                cfg.limit = v.parse().ok().filter(|&n: &u32| n > 0).ok_or_else(|| bad("expected a packet count > 0"))?;
                limit_given = true;
            }
            "ge" => {
                // p, r, 1-h, 1-k as NetEm's `loss gemodel`; missing ones take NetEm's defaults
                let vals: Option<Vec<f64>> = v.split(',').map(parse_pct).collect();
                let vals = vals.filter(|v| !v.is_empty() && v.len() <= 4)
                    .ok_or_else(|| bad("expected p[,r[,1-h[,1-k]]] percentages"))?;
                let p = vals[0];
                let r = vals.get(1).copied().unwrap_or(1.0 - p);
                let one_h = vals.get(2).copied().unwrap_or(1.0);
                let one_k = vals.get(3).copied().unwrap_or(0.0);
                cfg.ge = Some([p, r, one_h, one_k]);
            }
            "down" => cfg.down = matches!(v, "1" | "true" | "yes"),
            _ => return err(format!("link {who}: unknown key {k:?} (known: delay jitter dist delay_corr loss loss_corr ge rate corrupt duplicate reorder limit down)")),
        }
    }
    if cfg.jitter_ns > 0 && cfg.delay_ns == 0 {
        return err(format!(
            "link {who}: jitter needs a delay (jitter varies the delay)"
        ));
    }
    if !limit_given && cfg.rate_bps > 0 {
        // NetEm's sizing in the planner: 1.5 x the packets of one delay at the rate, at least 1000
        let pkts = cfg.held_bytes() as f64 * 1.5 / 1500.0;
        cfg.limit = pkts.ceil().clamp(1000.0, 1_000_000.0) as u32;
    }
    Ok((mac, cfg))
}

/// A whole configuration: `link` lines (blank lines and `#` comments ignored). A later line for the same
/// key replaces an earlier one.
pub fn parse_config(text: &str) -> Result<HashMap<Option<Mac>, LinkCfg>, ConfigError> {
    let mut out = HashMap::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (mac, cfg) = parse_link_line(line)?;
        out.insert(mac, cfg);
    }
    Ok(out)
}

/// Check a configuration against the engine's bound on held data.
pub fn check_bound(
    cfgs: &HashMap<Option<Mac>, LinkCfg>,
    max_bytes: u64,
) -> Result<(), ConfigError> {
    for (mac, cfg) in cfgs {
        let held = cfg.held_bytes();
        if held > max_bytes {
            let who = mac.map(|m| fmt_mac(&m)).unwrap_or_else(|| "*".into());
            return err(format!(
                "link {who}: rate {} bit/s x delay {:.3} s holds {} bytes, above this engine's bound of {} bytes (--max-bytes)",
                cfg.rate_bps, (cfg.delay_ns + 4 * cfg.jitter_ns) as f64 / 1e9, held, max_bytes));
        }
    }
    Ok(())
}

/// Running state of one link: its configuration and what it needs to remember between packets.
#[derive(Debug)]
pub struct Link {
    pub cfg: LinkCfg,
    pub gen: u64,
    /// made from the `link *` line for a sender without a line of its own, at its first packet: each sender
    /// keeps its own state (rate backlog, loss run, counters) under the default's conditions, and the
    /// configuration stays one line for all of them
    pub from_default: bool,
    delay_rnd: Correlated,
    loss_rnd: Correlated,
    ge_bad: bool,
    ser_end: u64,
    pub held: u32,
    pub stats: LinkStats,
}

#[derive(Debug, Default, Clone)]
pub struct LinkStats {
    /// RFC 3550 interarrival jitter of the engine's own hold (release - arrival at the hook), in release
    /// order, ns: what the engine adds to the link's jitter, without the endpoints' scheduling
    pub hold_jitter_ns: f64,
    pub last_hold_ns: u64,
    pub packets: u64,
    pub bytes: u64,
    pub dropped_down: u64,
    pub dropped_loss: u64,
    pub dropped_limit: u64,
    pub duplicated: u64,
    pub corrupted: u64,
    pub reordered: u64,
}

/// What to do with one packet.
#[derive(Debug, PartialEq)]
pub enum Decision {
    Drop(DropWhy),
    /// Release at `due` (ns, monotonic clock); `corrupt_at`: flip bit `.1` of byte `.0`; `dup_due`: inject a
    /// copy at that time.
    Hold {
        due: u64,
        corrupt_at: Option<(usize, u8)>,
        dup_due: Option<u64>,
        reordered: bool,
    },
}

#[derive(Debug, PartialEq, Clone, Copy)]
pub enum DropWhy {
    Down,
    Loss,
    Limit,
}

impl Link {
    pub fn new(cfg: LinkCfg, gen: u64) -> Link {
        Link {
            cfg,
            gen,
            from_default: false,
            delay_rnd: Correlated::default(),
            loss_rnd: Correlated::default(),
            ge_bad: false,
            ser_end: 0,
            held: 0,
            stats: LinkStats::default(),
        }
    }

    /// Replace the conditions; what the link remembers (its rate backlog, held packets) stays, so packets
    /// already held keep the delay they were given.
    pub fn reconfigure(&mut self, cfg: LinkCfg, gen: u64) {
        self.cfg = cfg;
        self.gen = gen;
    }

    fn lost(&mut self, rng: &mut Rng) -> bool {
        if let Some([p, r, one_h, one_k]) = self.cfg.ge {
            // NetEm's gemodel: draw the loss in the current state, then the transition
            let lose = if self.ge_bad {
                rng.f64() < one_h
            } else {
                rng.f64() < one_k
            };
            let flip = rng.f64();
            self.ge_bad = if self.ge_bad { flip >= r } else { flip < p };
            return lose;
        }
        self.cfg.loss > 0.0 && self.loss_rnd.next(rng, self.cfg.loss_corr) < self.cfg.loss
    }

    fn delay_sample(&mut self, rng: &mut Rng) -> u64 {
        if self.cfg.jitter_ns == 0 {
            return self.cfg.delay_ns;
        }
        let u = self.delay_rnd.next(rng, self.cfg.delay_corr);
        let z = deviate(self.cfg.dist, u, rng.f64());
        let d = self.cfg.delay_ns as f64 + z * self.cfg.jitter_ns as f64;
        d.max(0.0) as u64
    }

    fn release_time(&mut self, now: u64, len: usize, ip_hlen: usize, rng: &mut Rng) -> u64 {
        let delay = self.delay_sample(rng);
        if self.cfg.rate_bps == 0 {
            return now + delay;
        }
        let start = self.ser_end.max(now);
        let wire = wire_len(len, ip_hlen) as u128;
        self.ser_end = start + (wire * 8 * NS as u128 / self.cfg.rate_bps as u128) as u64;
        self.ser_end + delay
    }

    /// The fate of one packet of `len` bytes (`ip_hlen`: its IP header length, for corruption) at `now`.
    pub fn decide(&mut self, now: u64, len: usize, ip_hlen: usize, rng: &mut Rng) -> Decision {
        self.stats.packets += 1;
        self.stats.bytes += len as u64;
        if self.cfg.down {
            self.stats.dropped_down += 1;
            return Decision::Drop(DropWhy::Down);
        }
        if self.lost(rng) {
            self.stats.dropped_loss += 1;
            return Decision::Drop(DropWhy::Loss);
        }
        if self.held >= self.cfg.limit {
            self.stats.dropped_limit += 1;
            return Decision::Drop(DropWhy::Limit);
        }
        let dup = self.cfg.duplicate > 0.0 && rng.f64() < self.cfg.duplicate;
        let corrupt_at = if self.cfg.corrupt > 0.0 && rng.f64() < self.cfg.corrupt && len > ip_hlen
        {
            self.stats.corrupted += 1;
            Some((ip_hlen + rng.below(len - ip_hlen), rng.below(8) as u8))
        } else {
            None
        };
        let reordered = self.cfg.reorder > 0.0 && rng.f64() < self.cfg.reorder;
        let due = if reordered {
            self.stats.reordered += 1;
            now
        } else {
            self.release_time(now, len, ip_hlen, rng)
        };
        let dup_due = if dup {
            self.stats.duplicated += 1;
            Some(self.release_time(now, len, ip_hlen, rng))
        } else {
            None
        };
        Decision::Hold {
            due,
            corrupt_at,
            dup_due,
            reordered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(line: &str) -> LinkCfg {
        parse_link_line(line).unwrap().1
    }

    #[test]
    fn parses_units_and_defaults() {
        let c =
            cfg("link 02:42:0a:c8:00:02 delay=1.3s jitter=10ms dist=normal loss=1% rate=10mbit");
        assert_eq!(c.delay_ns, 1_300_000_000);
        assert_eq!(c.jitter_ns, 10_000_000);
        assert_eq!(c.dist, Dist::Normal);
        assert!((c.loss - 0.01).abs() < 1e-12);
        assert_eq!(c.rate_bps, 10_000_000);
        assert_eq!(c.limit, 1_675); // 10 Mbit/s x (1.3 s + 4 x 10 ms) = 1.675 MB -> x1.5 / 1500 bytes
        assert_eq!(
            parse_link_line("link * delay=5").unwrap().1.delay_ns,
            5_000_000
        );
        assert_eq!(parse_link_line("link * delay=5").unwrap().0, None);
    }

    #[test]
    fn bad_input_names_the_key_and_value() {
        let e = parse_link_line("link 02:00:00:00:00:01 dist=gamma")
            .unwrap_err()
            .0;
        assert!(e.contains("dist \"gamma\""), "{e}");
        let e = parse_link_line("link 02:00:00:00:00:01 loss=-1%")
            .unwrap_err()
            .0;
        assert!(e.contains("loss \"-1%\""), "{e}");
        let e = parse_link_line("link 02:00:00:00:00:01 jitter=10ms")
            .unwrap_err()
            .0;
        assert!(e.contains("jitter needs a delay"), "{e}");
        let e = parse_link_line("link zz delay=1ms").unwrap_err().0;
        assert!(e.contains("not a MAC"), "{e}");
        let big = parse_config("link * delay=4s rate=10gbit").unwrap();
        let e = check_bound(&big, 1 << 30).unwrap_err().0;
        assert!(e.contains("above this engine's bound"), "{e}");
    }

    #[test]
    fn rate_then_delay_as_netem() {
        let mut l = Link::new(cfg("link * delay=100ms rate=8mbit"), 1);
        let mut rng = Rng::new(1);
        // 986 IP bytes + 14 of Ethernet header at 8 Mbit/s = 1 ms on the wire, then 100 ms
        let d1 = l.decide(0, 986, 20, &mut rng);
        let d2 = l.decide(0, 986, 20, &mut rng);
        let d3 = l.decide(10 * 1_000_000, 986, 20, &mut rng);
        let due = |d: Decision| match d {
            Decision::Hold { due, .. } => due,
            _ => panic!(),
        };
        assert_eq!(due(d1), 101_000_000);
        assert_eq!(due(d2), 102_000_000);
        assert_eq!(due(d3), 111_000_000);
    }

    #[test]
    fn wire_length_as_netem_counts_it() {
        assert_eq!(wire_len(1500, 20), 1514);
        assert_eq!(wire_len(60, 20), 74);
        // a TCP GSO super-packet of 10 full segments (1448 bytes of payload each, 52 bytes of headers)
        assert_eq!(wire_len(52 + 10 * 1448, 20), 10 * 1514);
    }

    #[test]
    fn shares_match_the_settings() {
        let mut rng = Rng::new(7);
        let mut l = Link::new(
            cfg("link * delay=10ms loss=10% duplicate=5% corrupt=2% reorder=20%"),
            1,
        );
        let n = 200_000;
        for _ in 0..n {
            l.decide(0, 1000, 20, &mut rng);
        }
        let s = &l.stats;
        let share = |x: u64, of: u64| x as f64 / of as f64;
        assert!((share(s.dropped_loss, n) - 0.10).abs() < 0.005);
        let kept = n - s.dropped_loss;
        assert!((share(s.duplicated, kept) - 0.05).abs() < 0.005);
        assert!((share(s.corrupted, kept) - 0.02).abs() < 0.003);
        assert!((share(s.reordered, kept) - 0.20).abs() < 0.005);
    }

    #[test]
    fn gilbert_elliott_mean_loss() {
        // p=1%, r=10%, 1-h=50%, 1-k=0: stationary bad share p/(p+r) = 1/11, loss = 0.5/11 = 4.5 %
        let mut rng = Rng::new(3);
        let mut l = Link::new(cfg("link * ge=1%,10%,50%,0%"), 1);
        let n = 400_000;
        for _ in 0..n {
            l.decide(0, 100, 20, &mut rng);
        }
        let loss = l.stats.dropped_loss as f64 / n as f64;
        assert!((loss - 0.5 / 11.0).abs() < 0.004, "{loss}");
    }

    #[test]
    fn jitter_distributions_have_the_set_spread() {
        for (d, want) in [
            ("normal", 1.0),
            ("pareto", 1.0),
            ("paretonormal", 1.0),
            ("uniform", 1.0 / 3f64.sqrt()),
        ] {
            let mut rng = Rng::new(11);
            let mut l = Link::new(cfg(&format!("link * delay=100ms jitter=10ms dist={d}")), 1);
            let xs: Vec<f64> = (0..100_000)
                .map(|_| match l.decide(0, 100, 20, &mut rng) {
                    Decision::Hold { due, .. } => due as f64 / 1e6,
                    _ => panic!(),
                })
                .collect();
            let m = xs.iter().sum::<f64>() / xs.len() as f64;
            let sd = (xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / xs.len() as f64).sqrt();
            assert!((sd / 10.0 - want).abs() < 0.08, "{d}: sd {sd}");
            assert!((m - 100.0).abs() < 1.0, "{d}: mean {m}");
        }
    }

    #[test]
    fn down_drops_and_reconfigure_keeps_backlog() {
        let mut rng = Rng::new(1);
        let mut l = Link::new(cfg("link * rate=8mbit"), 1);
        l.decide(0, 986, 20, &mut rng); // 1000 bytes on the wire: 1 ms
        l.reconfigure(cfg("link * down"), 2);
        assert_eq!(
            l.decide(0, 986, 20, &mut rng),
            Decision::Drop(DropWhy::Down)
        );
        l.reconfigure(cfg("link * rate=8mbit"), 3);
        match l.decide(0, 986, 20, &mut rng) {
            Decision::Hold { due, .. } => assert_eq!(due, 2_000_000),
            d => panic!("{d:?}"),
        }
    }
}
