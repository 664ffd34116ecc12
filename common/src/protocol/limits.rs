//! How much free text a server takes in one field.
//!
//! The `MAX_*` constants beside each message are the wire contract's ceiling: no lb server
//! accepts more, so a client that keeps under them is never refused anywhere for length. A
//! server may take less: [`TextLimits`] is the `[limits]` part of its config that says how
//! much, each value between a floor and the contract's ceiling. The floors are what lb's own
//! components send at most, so no configured value refuses the master's, the agents' or lbctl's
//! own requests: the master cuts the reasons it writes to [`MIN_REASON_BYTES`], and the agents'
//! versions are far under their floor. Addresses (an agent's, a master's advertised one) are
//! not typed text but how a component is reached, made by deployment tooling: a DNS name may
//! take most of [`super::registry::MAX_ADDRESS_BYTES`], so they answer to the contract alone.

use serde::{Deserialize, Serialize};

use crate::validate::Scope;

use super::actions::{MAX_POLICY_BYTES, MAX_REASON_BYTES};
use super::registry::MAX_VERSION_BYTES;

/// 1 KiB: the planner's longest reasons are ~400 bytes; the master cuts what it writes here.
pub const MIN_REASON_BYTES: usize = 1024;
/// lb's longest policy name, `partition_overload`, is 18 bytes.
pub const MIN_POLICY_BYTES: usize = 32;
/// A semver with a pre-release or a short git describe fits in 16.
pub const MIN_VERSION_BYTES: usize = 16;

/// The free-text limits a server enforces, each within its floor and the contract's ceiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TextLimits {
    /// An action's `reason` and the halt switch's `reason`.
    pub max_reason_bytes: usize,
    /// An action's `policy` name.
    pub max_policy_bytes: usize,
    /// A registered agent's `version`.
    pub max_version_bytes: usize,
}

impl Default for TextLimits {
    /// The contract's ceilings: what every lb server takes unless configured for less.
    fn default() -> Self {
        Self {
            max_reason_bytes: MAX_REASON_BYTES,
            max_policy_bytes: MAX_POLICY_BYTES,
            max_version_bytes: MAX_VERSION_BYTES,
        }
    }
}

impl TextLimits {
    /// Checks each value against its floor and ceiling; the error names the field.
    pub fn validate_into(&self, v: &mut Scope<'_>) {
        for (field, value, min, max) in [
            ("max_reason_bytes", self.max_reason_bytes, MIN_REASON_BYTES, MAX_REASON_BYTES),
            ("max_policy_bytes", self.max_policy_bytes, MIN_POLICY_BYTES, MAX_POLICY_BYTES),
            ("max_version_bytes", self.max_version_bytes, MIN_VERSION_BYTES, MAX_VERSION_BYTES),
        ] {
            v.range_u64(field, value as u64, min as u64, max as u64);
        }
    }
}

/// `text` cut to at most `max_bytes` on a character boundary, with `…` where it was cut.
pub fn cut_text(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    const MARK: &str = "…";
    let mut end = max_bytes.saturating_sub(MARK.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{MARK}", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::Validator;

    #[test]
    fn the_defaults_are_the_contract_and_valid() {
        let limits = TextLimits::default();
        assert_eq!(limits.max_reason_bytes, MAX_REASON_BYTES);
        let mut v = Validator::new();
        limits.validate_into(&mut v.at("limits"));
        assert!(v.finish().is_ok());
    }

    #[test]
    fn a_limit_above_the_contract_or_below_its_floor_names_the_field() {
        let limits =
            TextLimits { max_reason_bytes: MAX_REASON_BYTES + 1, max_version_bytes: 1, ..TextLimits::default() };
        let mut v = Validator::new();
        limits.validate_into(&mut v.at("limits"));
        let err = v.finish().expect_err("out of range").to_string();
        assert!(err.contains("limits.max_reason_bytes = 4097"), "{err}");
        assert!(err.contains("limits.max_version_bytes = 1"), "{err}");
    }

    #[test]
    fn text_is_cut_on_a_character_boundary() {
        assert_eq!(cut_text("short", 10), "short");
        let cut = cut_text(&"é".repeat(100), 11);
        assert!(cut.len() <= 11, "{cut}");
        assert_eq!(cut, format!("{}…", "é".repeat(4)));
        assert_eq!(cut_text(&"a".repeat(2000), MIN_REASON_BYTES).len(), MIN_REASON_BYTES);
    }
}
