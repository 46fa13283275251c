//! The bundles inside an LTP block, and which of them this node already handed to dtnd.
//!
//! ION (and any sender that aggregates) puts several bundles into one block, back to back. A BPv7 bundle is a
//! CBOR indefinite-length array (RFC 9171 §4.1: 0x9f ... 0xff), so the boundaries are found by walking the
//! CBOR items, never by searching for bytes (a payload may hold 0xff 0x9f anywhere). The first item of a bundle
//! is its primary block, which no node may change in transit (RFC 9171 §4.3.1): its bytes name the bundle, and
//! a bundle whose primary block was handed on recently is a duplicate (e.g. the sender cancelled a session we
//! had completed, because our last report was lost, and sent the block again in a new session).
use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};

/// Deeper nesting than any bundle has: refuse it rather than recurse without bound.
const MAX_DEPTH: usize = 32;

/// Where the CBOR item starting at `pos` ends (exclusive), or why it is not one whole item.
pub fn item_end(buf: &[u8], pos: usize) -> Result<usize, String> {
    walk(buf, pos, 0)
}

fn head(buf: &[u8], pos: usize) -> Result<(u8, u8, u64, usize), String> {
    let b = *buf
        .get(pos)
        .ok_or_else(|| format!("truncated at byte {pos}"))?;
    let (major, ai) = (b >> 5, b & 0x1f);
    let extra = match ai {
        0..=23 => return Ok((major, ai, ai as u64, pos + 1)),
        24 => 1,
        25 => 2,
        26 => 4,
        27 => 8,
        31 => return Ok((major, ai, 0, pos + 1)),
        _ => return Err(format!("reserved additional info {ai} at byte {pos}")),
    };
    let bytes = buf
        .get(pos + 1..pos + 1 + extra)
        .ok_or_else(|| format!("truncated argument at byte {pos}"))?;
    let val = bytes.iter().fold(0u64, |v, &x| (v << 8) | x as u64);
    Ok((major, ai, val, pos + 1 + extra))
}

fn walk(buf: &[u8], pos: usize, depth: usize) -> Result<usize, String> {
    if depth > MAX_DEPTH {
        return Err(format!("nested deeper than {MAX_DEPTH} at byte {pos}"));
    }
    let (major, ai, val, mut at) = head(buf, pos)?;
    let indefinite = ai == 31;
    match (major, indefinite) {
        (0 | 1, false) | (7, false) => Ok(at),
        (0 | 1 | 6, true) => Err(format!(
            "indefinite length on major type {major} at byte {pos}"
        )),
        (7, true) => Err(format!("unexpected break at byte {pos}")),
        (2 | 3, false) => {
            let end = at
                .checked_add(usize::try_from(val).map_err(|_| "length overflow".to_string())?)
                .filter(|&e| e <= buf.len())
                .ok_or_else(|| format!("string of {val} bytes runs past the end at byte {pos}"))?;
            Ok(end)
        }
        (2 | 3, true) => loop {
            if buf.get(at) == Some(&0xff) {
                return Ok(at + 1);
            }
            let (m, a, _, _) = head(buf, at)?;
            if m != major || a == 31 {
                return Err(format!("bad chunk in indefinite string at byte {at}"));
            }
            at = walk(buf, at, depth + 1)?;
        },
        (4 | 5, false) => {
            let items = if major == 5 {
                val.saturating_mul(2)
            } else {
                val
            };
            if items > (buf.len() - at) as u64 {
                return Err(format!("{items} items cannot fit at byte {pos}"));
            }
            for _ in 0..items {
                at = walk(buf, at, depth + 1)?;
            }
            Ok(at)
        }
        (4 | 5, true) => {
            let mut n = 0u64;
            loop {
                match buf.get(at) {
                    None => return Err(format!("no break for the container at byte {pos}")),
                    Some(0xff) if major == 4 || n.is_multiple_of(2) => return Ok(at + 1),
                    _ => {}
                }
                at = walk(buf, at, depth + 1)?;
                n += 1;
            }
        }
        (6, false) => walk(buf, at, depth + 1),
        _ => Err(format!("major type {major} at byte {pos}")),
    }
}

/// The bundles a block holds, in order, and what could not be parsed: `(bundles, None)` when the block is
/// whole bundles back to back, else the bundles before the fault and the fault (offset and why).
pub fn split(block: &[u8]) -> (Vec<&[u8]>, Option<String>) {
    let mut out = vec![];
    let mut pos = 0;
    while pos < block.len() {
        if block[pos] != 0x9f {
            let why = format!(
                "byte {pos} is 0x{:02x}, not a bundle (0x9f, an indefinite-length array)",
                block[pos]
            );
            return (out, Some(why));
        }
        match item_end(block, pos) {
            Ok(end) => {
                out.push(&block[pos..end]);
                pos = end;
            }
            Err(e) => return (out, Some(format!("bundle at byte {pos}: {e}"))),
        }
    }
    (out, None)
}

/// The name of a bundle: a digest of its primary block's bytes (None when the bundle has no first item).
pub fn primary_key(bundle: &[u8]) -> Option<(u64, usize)> {
    let end = item_end(bundle, 1).ok()?;
    let primary = &bundle[1..end];
    let mut h = DefaultHasher::new();
    primary.hash(&mut h);
    Some((h.finish(), primary.len()))
}

/// Bundles handed to dtnd recently, forgotten after `ttl` seconds or beyond `capacity` entries (oldest first).
pub struct Seen {
    order: VecDeque<(f64, (u64, usize))>,
    set: HashMap<(u64, usize), f64>,
    ttl: f64,
    capacity: usize,
}

impl Seen {
    pub fn new(ttl: f64, capacity: usize) -> Seen {
        Seen {
            order: VecDeque::new(),
            set: HashMap::new(),
            ttl,
            capacity: capacity.max(1),
        }
    }

    /// True when `key` is new (and remember it from `now`), false when it was seen within the window.
    pub fn first(&mut self, key: (u64, usize), now: f64) -> bool {
        while let Some(&(t, k)) = self.order.front() {
            if now - t <= self.ttl && self.order.len() < self.capacity {
                break;
            }
            self.order.pop_front();
            if self.set.get(&k) == Some(&t) {
                self.set.remove(&k);
            }
        }
        if self.set.contains_key(&key) {
            return false;
        }
        self.set.insert(key, now);
        self.order.push_back((now, key));
        true
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A minimal BPv7 bundle: primary block (no CRC) with `seq` in its creation timestamp, a payload block.
    pub fn bundle(seq: u8, payload: &[u8]) -> Vec<u8> {
        let mut b = vec![0x9f];
        // [7, flags 0, crc 0, dst [1, "//b/in"], src [1, "//a/"], report-to [1, 0], [0, seq], lifetime 3600000]
        b.extend_from_slice(&[0x88, 0x07, 0x00, 0x00]);
        b.extend_from_slice(&[0x82, 0x01, 0x66]);
        b.extend_from_slice(b"//b/in");
        b.extend_from_slice(&[0x82, 0x01, 0x64]);
        b.extend_from_slice(b"//a/");
        b.extend_from_slice(&[0x82, 0x01, 0x00]);
        b.extend_from_slice(&[0x82, 0x00, 0x18, seq]);
        b.extend_from_slice(&[0x1a, 0x00, 0x36, 0xee, 0x80]);
        // [1, 1, 0, 0, payload]
        b.extend_from_slice(&[0x85, 0x01, 0x01, 0x00, 0x00]);
        assert!(payload.len() < 65_536);
        b.extend_from_slice(&[0x59, (payload.len() >> 8) as u8, payload.len() as u8]);
        b.extend_from_slice(payload);
        b.push(0xff);
        b
    }

    #[test]
    fn splits_aggregated_bundles_by_walking_cbor() {
        // payloads full of what a byte search would take for boundaries: 0xff 0x9f
        let (a, b, c) = (
            bundle(1, &[0xff, 0x9f, 0xff]),
            bundle(2, &[0x9f; 700]),
            bundle(3, &[0xff; 1000]),
        );
        let block = [a.clone(), b.clone(), c.clone()].concat();
        let (got, err) = split(&block);
        assert_eq!(err, None);
        assert_eq!(got, vec![&a[..], &b[..], &c[..]]);
    }

    #[test]
    fn a_truncated_or_foreign_block_keeps_what_parsed_and_says_why() {
        let (a, b) = (bundle(1, b"one"), bundle(2, b"two"));
        let cut = [a.clone(), b[..b.len() - 5].to_vec()].concat();
        let (got, err) = split(&cut);
        assert_eq!(got, vec![&a[..]]);
        assert!(err
            .unwrap()
            .contains(&format!("bundle at byte {}", a.len())));
        let (got, err) = split(b"hello");
        assert!(got.is_empty());
        assert!(err.unwrap().contains("0x68, not a bundle"));
        // a definite-length array is CBOR but not a bundle
        let (got, err) = split(&[0x82, 0x01, 0x02]);
        assert!(got.is_empty() && err.is_some());
        // reserved additional info and nesting bombs are faults, not panics
        assert!(item_end(&[0x1c], 0).is_err());
        assert!(item_end(&[0x81; 100], 0).unwrap_err().contains("deeper"));
        assert!(item_end(&[0x9b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], 0).is_err());
    }

    #[test]
    fn cbor_walk_covers_every_major_type() {
        // {1: h'01', "k": [-1, 1.5, true, null, 1(0)], indefinite text "ab" "c"}
        let item = [
            0xa3, 0x01, 0x41, 0x01, 0x61, b'k', 0x85, 0x20, 0xf9, 0x3e, 0x00, 0xf5, 0xf6, 0xc1,
            0x00, 0x02, 0x7f, 0x62, b'a', b'b', 0x61, b'c', 0xff,
        ];
        assert_eq!(item_end(&item, 0), Ok(item.len()));
        assert!(item_end(&item[..item.len() - 1], 0).is_err());
        // an indefinite map with an odd number of items has no break where one may be
        assert!(item_end(&[0xbf, 0x01, 0xff], 0).is_err());
    }

    #[test]
    fn duplicates_are_known_by_their_primary_block() {
        let a1 = bundle(1, b"payload");
        let a_other_payload = bundle(1, b"different extension and payload bytes");
        let b = bundle(2, b"payload");
        let mut seen = Seen::new(10.0, 100);
        let k = |x: &[u8]| primary_key(x).unwrap();
        assert!(seen.first(k(&a1), 0.0));
        assert!(!seen.first(k(&a_other_payload), 1.0)); // same bundle, re-sent
        assert!(seen.first(k(&b), 2.0));
        assert!(seen.first(k(&a1), 11.0)); // forgotten after the window
        let mut small = Seen::new(1e9, 2);
        for s in 0..3u8 {
            assert!(small.first(k(&bundle(s, b"x")), 0.0));
        }
        assert!(small.first(k(&bundle(0, b"x")), 0.0)); // evicted at capacity
    }
}
