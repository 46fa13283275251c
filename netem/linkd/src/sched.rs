//! Link schedules executed by the engine: a timeline of link changes (an orbit plan, a fault timeline, a
//! contact plan) handed over ahead of time in one control message, applied by the engine at each change's
//! instant from its own clock, so a change's lag is the engine's wake-up, not a controller's round trip.
//!
//! Request (on any queue's control socket; an entry names the queue it changes, so one message serves every
//! node of a swarm's engine):
//!   sched
//!   <due, CLOCK_REALTIME ns> <queue> link <MAC|*> key=value ...     (one link's new conditions, as `set`)
//! Reply `ok entries=N first_id=I pending=P`, or `error: entry K: ...` (one line; nothing is kept then).
//! Entries are numbered from `first_id` in message order. `schedlog` drains what was applied since the last
//! `schedlog`: lines `<id> <due ns> <applied ns>` (applied = due + the engine's measured lateness);
//! `schedclear` drops what is still pending.
//! Refused: a change in the past, a queue this engine does not serve, a MAC that is not one of its nodes
//! (when the engine knows them: --instance inject-mac), a link changed twice at one instant (in the message
//! or against what is pending), a link's conditions above the held-data bound, more pending changes than
//! --max-sched.

use crate::model::{check_bound, fmt_mac, parse_link_line, LinkCfg, Mac};
use std::collections::{BTreeMap, HashMap, HashSet};

/// One pending change: which queue, which link (sender MAC), its conditions and the config line they came
/// from (kept for the state file).
pub struct Change {
    pub queue: u16,
    pub key: Option<Mac>,
    pub cfg: LinkCfg,
    pub line: String,
    pub due_real: u64,
}

/// The engine's schedule: pending changes ordered by their due time on the engine's monotonic clock, and the
/// record of applied ones until a `schedlog` takes it.
#[derive(Default)]
pub struct Schedule {
    /// (due on CLOCK_MONOTONIC, id) -> change
    pending: BTreeMap<(u64, u64), Change>,
    /// (queue, link, due on CLOCK_REALTIME) of every pending change: two changes of one link at one instant
    /// are refused
    instants: HashSet<(u16, Option<Mac>, u64)>,
    next_id: u64,
    /// (id, due ns, applied ns) on CLOCK_REALTIME
    pub log: Vec<(u64, u64, u64)>,
    /// applied changes not recorded because nobody drained the log
    pub log_dropped: u64,
    pub applied: u64,
    pub max_pending: usize,
}

/// What the engine knows to check entries against.
pub struct Known<'a> {
    /// queue -> the node's own MAC (None when the engine was not told: any sender MAC is accepted)
    pub queues: &'a HashMap<u16, Option<Mac>>,
    /// every node's MAC (empty: not known)
    pub macs: &'a HashSet<Mac>,
    pub max_bytes: u64,
}

const LOG_MAX: usize = 4_000_000;

impl Schedule {
    pub fn new(max_pending: usize) -> Schedule {
        Schedule {
            next_id: 1,
            max_pending,
            ..Default::default()
        }
    }

    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// The earliest pending change's due time (monotonic ns).
    pub fn next_due(&self) -> Option<u64> {
        self.pending.keys().next().map(|k| k.0)
    }

    /// Check every entry of a `sched` body, then keep them all (or none). `real_now`/`mono_now`: the two
    /// clocks read together (a change due at real time T is due at T - real_now + mono_now on the engine's
    /// monotonic clock). Returns (entries, first id).
    pub fn add(
        &mut self,
        body: &str,
        known: &Known,
        real_now: u64,
        mono_now: u64,
    ) -> Result<(usize, u64), String> {
        let mut new: Vec<Change> = vec![];
        let mut seen: HashMap<(u16, Option<Mac>, u64), usize> = HashMap::new();
        for (k, raw) in body
            .lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .filter(|l| !l.is_empty())
            .enumerate()
        {
            let entry = k + 1;
            let c = parse_entry(raw).map_err(|e| format!("entry {entry} ({raw:?}): {e}"))?;
            let who = c.key.map(|m| fmt_mac(&m)).unwrap_or_else(|| "*".into());
            let own = known.queues.get(&c.queue).ok_or_else(|| {
                format!(
                    "entry {entry}: link {who} -> queue {}: unknown link (this engine serves no queue {})",
                    c.queue, c.queue
                )
            })?;
            if let Some(m) = c.key {
                if (!known.macs.is_empty() && !known.macs.contains(&m)) || *own == Some(m) {
                    return Err(format!("entry {entry}: link {who} -> queue {}: unknown link ({who} is not another node of this engine's swarm)", c.queue));
                }
            }
            if c.due_real < real_now {
                return Err(format!(
                    "entry {entry}: link {who} -> queue {}: due at {} ns, {:.3} ms in the past",
                    c.queue,
                    c.due_real,
                    (real_now - c.due_real) as f64 / 1e6
                ));
            }
            let inst = (c.queue, c.key, c.due_real);
            if let Some(j) = seen.get(&inst) {
                return Err(format!(
                    "entry {entry}: link {who} -> queue {} changes twice at {} ns (also entry {j})",
                    c.queue, c.due_real
                ));
            }
            if self.instants.contains(&inst) {
                return Err(format!("entry {entry}: link {who} -> queue {} changes twice at {} ns (a pending change of an earlier schedule)", c.queue, c.due_real));
            }
            let one = HashMap::from([(c.key, c.cfg.clone())]);
            check_bound(&one, known.max_bytes).map_err(|e| format!("entry {entry}: {}", e.0))?;
            if self.pending.len() + entry > self.max_pending {
                return Err(format!("entry {entry}: the schedule would hold more than {} pending changes, this engine's bound (--max-sched); hand it over in windows", self.max_pending));
            }
            seen.insert(inst, entry);
            new.push(c);
        }
        let first = self.next_id;
        let n = new.len();
        for c in new {
            let due_mono = c.due_real.saturating_sub(real_now) + mono_now;
            self.instants.insert((c.queue, c.key, c.due_real));
            self.pending.insert((due_mono, self.next_id), c);
            self.next_id += 1;
        }
        Ok((n, first))
    }

    /// Take the changes due at `mono_now`, recording each one's lateness. `real_now` is read with it.
    pub fn take_due(&mut self, mono_now: u64) -> Vec<(u64, Change)> {
        let mut out = vec![];
        while let Some((&(due_mono, id), _)) = self.pending.first_key_value() {
            if due_mono > mono_now {
                break;
            }
            let c = self.pending.remove(&(due_mono, id)).unwrap();
            self.instants.remove(&(c.queue, c.key, c.due_real));
            let applied = c.due_real + (mono_now - due_mono);
            if self.log.len() < LOG_MAX {
                self.log.push((id, c.due_real, applied));
            } else {
                self.log_dropped += 1;
            }
            self.applied += 1;
            out.push((id, c));
        }
        out
    }

    /// Drop every pending change; returns how many.
    pub fn clear(&mut self) -> usize {
        let n = self.pending.len();
        self.pending.clear();
        self.instants.clear();
        n
    }

    /// The applied changes since the last drain, as the `schedlog` reply.
    pub fn drain_log(&mut self) -> String {
        let mut out = format!(
            "ok applied={} pending={} log_dropped={}\n",
            self.log.len(),
            self.pending.len(),
            self.log_dropped
        );
        for (id, due, applied) in self.log.drain(..) {
            out += &format!("{id} {due} {applied}\n");
        }
        out
    }
}

/// `<due ns> <queue> link <MAC|*> key=value ...`
fn parse_entry(line: &str) -> Result<Change, String> {
    let mut it = line.splitn(3, char::is_whitespace);
    let due = it.next().unwrap_or("");
    let queue = it.next().unwrap_or("");
    let rest = it.next().unwrap_or("").trim();
    let due_real: u64 = due
        .parse()
        .map_err(|_| format!("due {due:?}: expected CLOCK_REALTIME nanoseconds"))?;
    let queue: u16 = queue
        .parse()
        .map_err(|_| format!("queue {queue:?}: expected 0-65535"))?;
    let (key, cfg) = parse_link_line(rest).map_err(|e| e.0)?;
    Ok(Change {
        queue,
        key,
        cfg,
        line: rest.to_string(),
        due_real,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "02:00:00:00:00:01";
    const B: &str = "02:00:00:00:00:02";

    fn known() -> (HashMap<u16, Option<Mac>>, HashSet<Mac>) {
        let a = crate::model::parse_mac(A).unwrap();
        let b = crate::model::parse_mac(B).unwrap();
        (
            HashMap::from([(1, Some(a)), (2, Some(b))]),
            HashSet::from([a, b]),
        )
    }

    fn add(s: &mut Schedule, body: &str) -> Result<(usize, u64), String> {
        let (q, m) = known();
        let k = Known {
            queues: &q,
            macs: &m,
            max_bytes: 1 << 30,
        };
        s.add(body, &k, 1_000_000_000, 5_000)
    }

    #[test]
    fn changes_are_applied_in_due_order_with_their_lateness() {
        let mut s = Schedule::new(10);
        let body = format!("3000000000 1 link {B} delay=20ms\n2000000000 2 link {A} down\n");
        assert_eq!(add(&mut s, &body), Ok((2, 1)));
        assert_eq!(s.next_due(), Some(1_000_005_000));
        assert!(s.take_due(1_000_004_999).is_empty());
        let got = s.take_due(1_000_005_250);
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].0, got[0].1.queue), (2, 2));
        assert!(got[0].1.cfg.down);
        assert_eq!(s.log, vec![(2, 2_000_000_000, 2_000_000_250)]);
        let got = s.take_due(10_000_000_000);
        assert_eq!(got[0].1.cfg.delay_ns, 20_000_000);
        assert!(s.drain_log().starts_with("ok applied=2 pending=0"));
        assert!(s.log.is_empty());
    }

    #[test]
    fn bad_entries_are_named_and_nothing_is_kept() {
        let mut s = Schedule::new(3);
        let past = format!("2000000000 1 link {B} delay=1ms\n999999999 1 link {B} delay=2ms\n");
        assert!(add(&mut s, &past).unwrap_err().starts_with("entry 2: "));
        assert!(add(&mut s, &past).unwrap_err().contains("in the past"));
        assert_eq!(s.pending(), 0);
        let unknown_queue = format!("2000000000 7 link {B} delay=1ms\n");
        assert!(add(&mut s, &unknown_queue)
            .unwrap_err()
            .contains("unknown link"));
        let own = format!("2000000000 2 link {B} delay=1ms\n");
        assert!(add(&mut s, &own).unwrap_err().contains("unknown link"));
        let stranger = "2000000000 1 link 02:00:00:00:00:09 delay=1ms\n";
        assert!(add(&mut s, stranger).unwrap_err().contains("unknown link"));
        let twice = format!("2000000000 1 link {B} delay=1ms\n2000000000 1 link {B} down\n");
        let e = add(&mut s, &twice).unwrap_err();
        assert!(
            e.starts_with("entry 2: ") && e.contains("also entry 1"),
            "{e}"
        );
        let big = (0..4)
            .map(|i| format!("{} 1 link {B} delay=1ms\n", 2_000_000_000 + i))
            .collect::<String>();
        assert!(add(&mut s, &big)
            .unwrap_err()
            .starts_with("entry 4: the schedule would hold more than 3"));
        assert!(add(&mut s, "2000000000 1 link nope\n")
            .unwrap_err()
            .starts_with("entry 1 ("));
        assert_eq!(s.pending(), 0);
        // against what is pending from an earlier message
        assert!(add(&mut s, &format!("2000000000 1 link {B} delay=1ms\n")).is_ok());
        assert!(add(&mut s, &format!("2000000000 1 link {B} delay=5ms\n"))
            .unwrap_err()
            .contains("pending change"));
        assert_eq!(s.clear(), 1);
    }
}
