//! Row encodings: u64 counters as SQLite integers, and the key sketch as a compact blob.
//!
//! SQLite integers are i64; counters are stored bit-for-bit (`u64 as i64`) and read back the
//! same way, so no value is lost. The sketch blob is versioned:
//! `[1][n: u8][n × u64 LE bucket ops][k: u8][k × (u64 LE key, f64 LE share)][f64 LE seq ratio]`,
//! or with bucket bounds `[2][n: u8][n × u64 LE bucket ops][m: u8][m × u64 LE bounds][k: u8]…`
//! (a sketch without bounds is still written as format 1).

use lb_common::ids::Key;
use lb_common::protocol::{KeySketch, TopKey};

pub fn to_sql(v: u64) -> i64 {
    v as i64
}

pub fn from_sql(v: i64) -> u64 {
    v as u64
}

const SKETCH_FORMAT: u8 = 1;
/// Format 1 with the buckets' inner bounds after their ops.
const SKETCH_FORMAT_BOUNDS: u8 = 2;

pub fn encode_sketch(s: &KeySketch) -> Vec<u8> {
    let mut out = Vec::with_capacity(3 + s.bucket_ops.len() * 8 + s.top_keys.len() * 16 + 8);
    out.push(if s.bucket_bounds.is_empty() { SKETCH_FORMAT } else { SKETCH_FORMAT_BOUNDS });
    // Validation bounds the lists far below 256.
    out.push(u8::try_from(s.bucket_ops.len()).expect("validated: at most 64 buckets"));
    for b in &s.bucket_ops {
        out.extend_from_slice(&b.to_le_bytes());
    }
    if !s.bucket_bounds.is_empty() {
        out.push(u8::try_from(s.bucket_bounds.len()).expect("validated: one fewer than the buckets"));
        for k in &s.bucket_bounds {
            out.extend_from_slice(&k.0.to_le_bytes());
        }
    }
    out.push(u8::try_from(s.top_keys.len()).expect("validated: at most 16 top keys"));
    for t in &s.top_keys {
        out.extend_from_slice(&t.key.0.to_le_bytes());
        out.extend_from_slice(&t.share_ratio.to_le_bytes());
    }
    out.extend_from_slice(&s.sequential_write_ratio.to_le_bytes());
    out
}

/// `None` for a blob this build cannot read (corruption or a newer format).
pub fn decode_sketch(blob: &[u8]) -> Option<KeySketch> {
    let mut r = Reader(blob);
    let format = r.u8()?;
    if format != SKETCH_FORMAT && format != SKETCH_FORMAT_BOUNDS {
        return None;
    }
    let n = r.u8()? as usize;
    let bucket_ops = (0..n).map(|_| r.u64()).collect::<Option<Vec<_>>>()?;
    let bucket_bounds = if format == SKETCH_FORMAT_BOUNDS {
        let m = r.u8()? as usize;
        (0..m).map(|_| r.u64().map(Key)).collect::<Option<Vec<_>>>()?
    } else {
        Vec::new()
    };
    let k = r.u8()? as usize;
    let top_keys = (0..k)
        .map(|_| Some(TopKey { key: Key(r.u64()?), share_ratio: f64::from_bits(r.u64()?) }))
        .collect::<Option<Vec<_>>>()?;
    let sequential_write_ratio = f64::from_bits(r.u64()?);
    r.0.is_empty().then_some(KeySketch { bucket_ops, bucket_bounds, top_keys, sequential_write_ratio })
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    fn u64(&mut self) -> Option<u64> {
        let (bytes, rest) = self.0.split_first_chunk::<8>()?;
        self.0 = rest;
        Some(u64::from_le_bytes(*bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sketch_round_trips_and_rejects_garbage() {
        let s = KeySketch {
            bucket_ops: vec![0, 1, u64::MAX],
            bucket_bounds: Vec::new(),
            top_keys: vec![TopKey { key: Key(42), share_ratio: 0.25 }],
            sequential_write_ratio: 0.5,
        };
        let blob = encode_sketch(&s);
        assert_eq!(decode_sketch(&blob), Some(s.clone()));
        assert_eq!(decode_sketch(&blob[..blob.len() - 1]), None);
        assert_eq!(decode_sketch(&[3]), None);
        // With bounds: format 2, read back the same; without, format 1 as before.
        assert_eq!(blob[0], 1);
        let bounded = KeySketch { bucket_bounds: vec![Key(7), Key(9)], ..s.clone() };
        let blob2 = encode_sketch(&bounded);
        assert_eq!(blob2[0], 2);
        assert_eq!(decode_sketch(&blob2), Some(bounded));
        assert_eq!(decode_sketch(&blob2[..blob2.len() - 1]), None);
        let mut longer = blob.clone();
        longer.push(0);
        assert_eq!(decode_sketch(&longer), None);
        assert_eq!(from_sql(to_sql(u64::MAX)), u64::MAX);
    }
}
