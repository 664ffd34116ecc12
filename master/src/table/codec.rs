//! Column codecs: how one value of one metric is stored in one slot.
//!
//! Partition history uses log quantisation, `code = 1 + round(ln(1 + v / unit) * scale)`, so the
//! relative error is the same at every magnitude above `unit` and the absolute error below it is
//! at most `unit * half_step`. Code 0 means "no sample in this slot" (absent), code 1 means zero.
//! Decoding is table lookups (no `exp` on the query path): one table for `u8`, two 256-entry
//! tables whose product is `exp(code / scale)` for `u16`.
//!
//! Worker series are few, so they keep plain `f32` (absent = NaN).

use std::fmt;

/// How a column stores a value in a slot.
pub(crate) trait Codec: fmt::Debug + Clone {
    type Code: Copy + PartialEq + fmt::Debug;
    /// The code of an empty slot.
    const ABSENT: Self::Code;
    fn is_present(code: Self::Code) -> bool;
    /// Encodes a non-negative value; negative and NaN values are stored as zero, values over the
    /// column's maximum saturate.
    fn encode(&self, value: f64) -> Self::Code;
    /// Decodes a present code; meaningless for [`Self::ABSENT`].
    fn decode(&self, code: Self::Code) -> f64;
    /// Decodes, with 0 for an absent code (branch-free where the codec allows it).
    #[inline]
    fn decode_or_zero(&self, code: Self::Code) -> f64 {
        if Self::is_present(code) { self.decode(code) } else { 0.0 }
    }
    /// Sum of the present values in `codes` and how many were present: the hot loop of top-N.
    #[inline]
    fn sum_codes(&self, codes: &[Self::Code]) -> (f64, usize) {
        let mut acc = [0.0f64; 4];
        let mut present = 0usize;
        for (j, &code) in codes.iter().enumerate() {
            acc[j & 3] += self.decode_or_zero(code);
            present += usize::from(Self::is_present(code));
        }
        (acc[0] + acc[1] + acc[2] + acc[3], present)
    }
}

/// 16-bit log-quantised column: ~±0.015 % relative error over the default ranges.
#[derive(Clone)]
pub(crate) struct LogU16 {
    unit: f64,
    scale: f64,
    hi: Box<[f64; 256]>,
    lo: Box<[f64; 256]>,
    /// `unit * exp((256 * h - 1) / scale)`: with `lo`, `value(code) = raw[code >> 8] *
    /// lo[code & 255] - unit` indexes by the raw code (no subtraction) for the summing loop.
    raw_hi: Box<[f64; 256]>,
}

impl fmt::Debug for LogU16 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogU16").field("unit", &self.unit).field("scale", &self.scale).finish_non_exhaustive()
    }
}

impl LogU16 {
    /// `unit`: the value below which the error is absolute rather than relative;
    /// `max`: the largest value stored without saturating.
    pub(crate) fn new(unit: f64, max: f64) -> Self {
        let scale = f64::from(u16::MAX - 1) / (max / unit).ln_1p();
        let mut hi = Box::new([0.0; 256]);
        let mut lo = Box::new([0.0; 256]);
        for i in 0..256 {
            hi[i] = ((i * 256) as f64 / scale).exp();
            lo[i] = (i as f64 / scale).exp();
        }
        let mut raw_hi = Box::new([0.0; 256]);
        for (h, slot) in raw_hi.iter_mut().enumerate() {
            *slot = unit * (((h * 256) as f64 - 1.0) / scale).exp();
        }
        Self { unit, scale, hi, lo, raw_hi }
    }

    /// Largest relative error of a value at or above `unit` (half a code step in log space).
    pub(crate) fn max_relative_error(&self) -> f64 {
        (0.5 / self.scale).exp_m1()
    }
}

impl Codec for LogU16 {
    type Code = u16;
    const ABSENT: u16 = 0;

    fn is_present(code: u16) -> bool {
        code != 0
    }

    fn encode(&self, value: f64) -> u16 {
        if value.is_nan() || value <= 0.0 {
            return 1;
        }
        let step = ((value / self.unit).ln_1p() * self.scale).round();
        1 + step.min(f64::from(u16::MAX - 1)) as u16
    }

    #[inline]
    fn decode(&self, code: u16) -> f64 {
        let c = usize::from(code.saturating_sub(1));
        self.unit * (self.hi[c >> 8] * self.lo[c & 0xff] - 1.0)
    }

    /// Absent (0) and zero (1) both map to table index 0, which decodes to exactly 0.
    #[inline]
    fn decode_or_zero(&self, code: u16) -> f64 {
        self.decode(code)
    }

    #[inline]
    fn sum_codes(&self, codes: &[u16]) -> (f64, usize) {
        let mut acc = [0.0f64; 4];
        let mut absent = 0usize;
        for (j, &code) in codes.iter().enumerate() {
            let c = usize::from(code);
            acc[j & 3] += self.raw_hi[c >> 8] * self.lo[c & 0xff];
            absent += usize::from(code == 0);
        }
        let present = codes.len() - absent;
        // Every code contributed `value + unit`, except absent ones, which contributed `raw(0)`.
        let raw_absent = self.raw_hi[0] * self.lo[0];
        let sum = acc[0] + acc[1] + acc[2] + acc[3] - self.unit * present as f64 - raw_absent * absent as f64;
        (sum.max(0.0), present)
    }
}

/// 8-bit log-quantised column: a few per cent relative error (exact figure per column in the
/// module doc), for the long coarse history.
#[derive(Clone)]
pub(crate) struct LogU8 {
    unit: f64,
    scale: f64,
    table: Box<[f64; 256]>,
}

impl fmt::Debug for LogU8 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogU8").field("unit", &self.unit).field("scale", &self.scale).finish_non_exhaustive()
    }
}

impl LogU8 {
    pub(crate) fn new(unit: f64, max: f64) -> Self {
        let scale = f64::from(u8::MAX - 1) / (max / unit).ln_1p();
        let mut table = Box::new([0.0; 256]);
        for (code, slot) in table.iter_mut().enumerate().skip(1) {
            *slot = unit * ((code - 1) as f64 / scale).exp_m1();
        }
        Self { unit, scale, table }
    }

    pub(crate) fn max_relative_error(&self) -> f64 {
        (0.5 / self.scale).exp_m1()
    }
}

impl Codec for LogU8 {
    type Code = u8;
    const ABSENT: u8 = 0;

    fn is_present(code: u8) -> bool {
        code != 0
    }

    fn encode(&self, value: f64) -> u8 {
        if value.is_nan() || value <= 0.0 {
            return 1;
        }
        let step = ((value / self.unit).ln_1p() * self.scale).round();
        1 + step.min(f64::from(u8::MAX - 1)) as u8
    }

    fn decode(&self, code: u8) -> f64 {
        self.table[usize::from(code)]
    }
}

/// Plain `f32` column for the (few) worker series.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlainF32;

impl Codec for PlainF32 {
    type Code = f32;
    const ABSENT: f32 = f32::NAN;

    fn is_present(code: f32) -> bool {
        !code.is_nan()
    }

    fn encode(&self, value: f64) -> f32 {
        if value.is_nan() || value <= 0.0 { 0.0 } else { value as f32 }
    }

    fn decode(&self, code: f32) -> f64 {
        f64::from(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn zero_and_absent_are_distinct() {
        let c = LogU16::new(1.0, 1e8);
        assert_eq!(c.encode(0.0), 1);
        assert_eq!(c.decode(1), 0.0);
        assert!(!LogU16::is_present(LogU16::ABSENT));
        let c8 = LogU8::new(1.0, 1e8);
        assert_eq!(c8.decode(c8.encode(0.0)), 0.0);
        assert!(!LogU8::is_present(LogU8::ABSENT));
        assert_eq!(c8.encode(f64::NAN), 1);
        assert_eq!(c8.encode(1e30), 255, "saturates");
    }

    proptest! {
        /// The summing fast path equals decoding one by one.
        #[test]
        fn sum_codes_matches_decode(codes in prop::collection::vec(0u16..=u16::MAX, 0..100)) {
            let c = LogU16::new(1.0, 1e8);
            let (sum, present) = c.sum_codes(&codes);
            let want: f64 = codes.iter().filter(|&&x| x != 0).map(|&x| c.decode(x)).sum();
            prop_assert_eq!(present, codes.iter().filter(|&&x| x != 0).count());
            prop_assert!((sum - want).abs() <= 1e-9 * (1.0 + want) + 1e-9 * codes.len() as f64, "{} {}", sum, want);
        }

        /// The documented error bound holds: relative above `unit`, absolute below it.
        #[test]
        fn round_trip_error_is_bounded(v in 0.0f64..1e8) {
            for (unit, max) in [(1.0, 1e8), (100.0, 1e11), (1e-3, 1e3)] {
                let v = v.min(max);
                let c16 = LogU16::new(unit, max);
                let c8 = LogU8::new(unit, max);
                for (got, bound) in [
                    (c16.decode(c16.encode(v)), c16.max_relative_error()),
                    (c8.decode(c8.encode(v)), c8.max_relative_error()),
                ] {
                    let err = (got - v).abs();
                    prop_assert!(err <= bound * (v + unit) * 1.0001 + 1e-12, "v={v} got={got} bound={bound}");
                }
            }
        }
    }
}
