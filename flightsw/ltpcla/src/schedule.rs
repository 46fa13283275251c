//! When a peer's link is down (pure): windows from the framework's contact plan or link timeline. While a
//! link is down the engine gets LTP link-state cues (RFC 5325 §3.1.1): no transmission toward the peer and
//! its retransmission timers suspended, so a contact gap never uses up the retransmission limit.

/// Down windows per peer engine: `[start, end)` in Unix seconds.
#[derive(Debug, Clone, Default)]
pub struct Schedule {
    windows: Vec<(u64, f64, f64)>,
}

impl Schedule {
    /// Lines `<engine> <down from, unix s> <down until, unix s>`; `#` comments and blank lines skipped.
    pub fn parse(text: &str) -> Result<Schedule, String> {
        let mut windows = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let f: Vec<&str> = line.split_whitespace().collect();
            let bad = || {
                format!(
                    "down file line {}: expected '<engine> <from unix s> <until unix s>': {line:?}",
                    i + 1
                )
            };
            if f.len() != 3 {
                return Err(bad());
            }
            let e: u64 = f[0].parse().map_err(|_| bad())?;
            let a: f64 = f[1].parse().map_err(|_| bad())?;
            let b: f64 = f[2].parse().map_err(|_| bad())?;
            if a.is_nan() || b.is_nan() || b <= a {
                return Err(bad());
            }
            windows.push((e, a, b));
        }
        Ok(Schedule { windows })
    }

    /// Is the link to `engine` down at `now`?
    pub fn down(&self, engine: u64, now: f64) -> bool {
        self.windows
            .iter()
            .any(|&(e, a, b)| e == engine && now >= a && now < b)
    }

    /// The next instant after `now` at which any window opens or closes (to wake up for the cue).
    pub fn next_change(&self, now: f64) -> Option<f64> {
        self.windows
            .iter()
            .flat_map(|&(_, a, b)| [a, b])
            .filter(|&t| t > now)
            .fold(None, |m, t| Some(m.map_or(t, |m: f64| m.min(t))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows() {
        let s = Schedule::parse("# gaps\n2 100 110\n2 200 205.5\n3 50 60\n").unwrap();
        assert!(!s.down(2, 99.9));
        assert!(s.down(2, 100.0));
        assert!(s.down(2, 109.99));
        assert!(!s.down(2, 110.0));
        assert!(s.down(2, 205.0));
        assert!(!s.down(3, 100.0));
        assert!(s.down(3, 55.0));
        assert_eq!(s.next_change(0.0), Some(50.0));
        assert_eq!(s.next_change(100.0), Some(110.0));
        assert_eq!(s.next_change(300.0), None);
    }

    #[test]
    fn bad_lines() {
        assert!(Schedule::parse("2 100").unwrap_err().contains("line 1"));
        assert!(Schedule::parse("x 1 2").is_err());
        assert!(Schedule::parse("2 5 5").is_err());
    }
}
