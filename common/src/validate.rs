//! Field-level validation shared by wire messages and config files.
//!
//! Every check names the field by its dotted path (`partitions[3].read_ops`,
//! `policies.split.engage_ratio`) and the bad value, so that an SRE reading a 422 body or a
//! rejected config reload knows exactly what to fix.

use std::fmt;

/// One invalid field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Dotted path of the field, with `[i]` for list elements.
    pub field: String,
    /// The offending value, rendered for humans.
    pub value: String,
    /// What is wrong, as "must ..." or "is ...".
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} = {}: {}", self.field, self.value, self.message)
    }
}

/// All the invalid fields of one value; never empty.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ValidationError {
    pub errors: Vec<FieldError>,
}

impl ValidationError {
    /// The first field at fault, for one-line error bodies.
    pub fn first(&self) -> &FieldError {
        self.errors.first().expect("a ValidationError is never empty")
    }
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// Collects field errors under a path prefix.
///
/// ```
/// use lb_common::validate::Validator;
/// let mut v = Validator::new();
/// v.at("policies").at("split").ratio("engage_ratio", 1.5);
/// let err = v.finish().unwrap_err();
/// assert_eq!(err.to_string(), "policies.split.engage_ratio = 1.5: must be within 0..=1");
/// ```
#[derive(Debug, Default)]
pub struct Validator {
    errors: Vec<FieldError>,
    prefix: String,
}

impl Validator {
    pub fn new() -> Self {
        Self::default()
    }

    /// A child validator whose fields are under `name`. Errors are merged back when it drops.
    pub fn at(&mut self, name: &str) -> Scope<'_> {
        let prefix = join(&self.prefix, name);
        Scope { parent: self, prefix }
    }

    /// A child validator for element `index` of the list `name`.
    pub fn at_index(&mut self, name: &str, index: usize) -> Scope<'_> {
        let prefix = format!("{}[{index}]", join(&self.prefix, name));
        Scope { parent: self, prefix }
    }

    pub fn finish(self) -> Result<(), ValidationError> {
        if self.errors.is_empty() { Ok(()) } else { Err(ValidationError { errors: self.errors }) }
    }

    fn push(&mut self, prefix: &str, field: &str, value: String, message: String) {
        self.errors.push(FieldError { field: join(prefix, field), value: shortened(value), message });
    }
}

/// An echoed value is cut to this many characters: enough to recognise it, and a 422 never
/// repeats a megabyte of hostile input back.
pub const MAX_ECHOED_VALUE_CHARS: usize = 120;

fn shortened(value: String) -> String {
    match value.char_indices().nth(MAX_ECHOED_VALUE_CHARS) {
        None => value,
        Some((cut, _)) => format!("{}… ({} bytes)", &value[..cut], value.len()),
    }
}

/// Checks under one path prefix; see [`Validator`].
#[derive(Debug)]
pub struct Scope<'a> {
    parent: &'a mut Validator,
    prefix: String,
}

impl Scope<'_> {
    pub fn at(&mut self, name: &str) -> Scope<'_> {
        let prefix = join(&self.prefix, name);
        Scope { parent: self.parent, prefix }
    }

    pub fn at_index(&mut self, name: &str, index: usize) -> Scope<'_> {
        let prefix = format!("{}[{index}]", join(&self.prefix, name));
        Scope { parent: self.parent, prefix }
    }

    /// Records an error on `field` unless `ok`.
    pub fn check(&mut self, ok: bool, field: &str, value: impl fmt::Display, message: &str) -> &mut Self {
        if !ok {
            self.parent.push(&self.prefix, field, value.to_string(), message.to_owned());
        }
        self
    }

    /// A finite, non-negative quantity (rates, latencies, shares).
    pub fn non_negative(&mut self, field: &str, value: f64) -> &mut Self {
        self.check(value.is_finite() && value >= 0.0, field, value, "must be a finite number >= 0")
    }

    /// A finite, strictly positive quantity.
    pub fn positive(&mut self, field: &str, value: f64) -> &mut Self {
        self.check(value.is_finite() && value > 0.0, field, value, "must be a finite number > 0")
    }

    /// A `_ratio` quantity, within 0..=1.
    pub fn ratio(&mut self, field: &str, value: f64) -> &mut Self {
        self.check(value.is_finite() && (0.0..=1.0).contains(&value), field, value, "must be within 0..=1")
    }

    /// An integer within `min..=max`.
    pub fn range_u64(&mut self, field: &str, value: u64, min: u64, max: u64) -> &mut Self {
        let ok = (min..=max).contains(&value);
        if !ok {
            let message = format!("must be within {min}..={max}");
            self.parent.push(&self.prefix, field, value.to_string(), message);
        }
        self
    }
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else if name.is_empty() {
        prefix.to_owned()
    } else {
        format!("{prefix}.{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_full_path_and_value() {
        let mut v = Validator::new();
        {
            let mut p = v.at_index("partitions", 3);
            p.non_negative("latency_p99_us", -1.0).ratio("share_ratio", f64::NAN);
            p.at("sketch").check(false, "buckets", "[]", "must not be empty");
        }
        v.at("").range_u64("interval_ms", 0, 1, 10);
        let err = v.finish().unwrap_err();
        let fields: Vec<_> = err.errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "partitions[3].latency_p99_us",
                "partitions[3].share_ratio",
                "partitions[3].sketch.buckets",
                "interval_ms"
            ]
        );
        assert_eq!(err.first().to_string(), "partitions[3].latency_p99_us = -1: must be a finite number >= 0");
        assert!(err.to_string().contains("interval_ms = 0: must be within 1..=10"));
    }

    #[test]
    fn no_errors_is_ok() {
        let mut v = Validator::new();
        v.at("x").positive("a", 1.0).ratio("b", 1.0).non_negative("c", 0.0);
        assert!(v.finish().is_ok());
    }
}
