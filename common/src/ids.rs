//! Newtype identifiers. No bare `String` or `u64` id crosses a crate boundary.
//!
//! String ids are validated on construction and on deserialisation: non-empty, at most
//! [`MAX_ID_BYTES`] bytes, ASCII letters, digits and `- _ . : @` only. Spaces, `/` (URL paths)
//! and `|` (actor path separator in headers) can never appear, so an id is safe in a URL, a log
//! field and a metric label without escaping.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Long enough for a UUID-prefixed name or a hostname:port, short enough to keep labels and rows small.
pub const MAX_ID_BYTES: usize = 128;

/// FNV-1a, 64 bit: a hash that is the same in every process and version (std's hasher is
/// randomly keyed), for seeds and derived names.
pub fn fnv1a_64(bytes: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET_BASIS, |h, &b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

/// An id derived from another: `prefix` + `id`, or, when that would be over [`MAX_ID_BYTES`],
/// `prefix` + the head of `id` + `-` + [`fnv1a_64`] of all of `id` in hex. Valid whenever
/// `prefix` + `id` would be but for its length, and the same in every process, so a derived id
/// can be recomputed after a restart.
pub fn derived_id(prefix: &str, id: &str) -> String {
    let plain = format!("{prefix}{id}");
    if plain.len() <= MAX_ID_BYTES {
        return plain;
    }
    // The id is ASCII (validated), so bytes are characters.
    let keep = MAX_ID_BYTES.saturating_sub(prefix.len() + 17);
    format!("{prefix}{}-{:016x}", &id[..keep.min(id.len())], fnv1a_64(id.as_bytes()))
}

/// Why a string was refused as an id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("id is empty")]
    Empty,
    #[error("id is {len} bytes, over the limit of {MAX_ID_BYTES}")]
    TooLong { len: usize },
    #[error("id {id:?} has the character {ch:?} at byte {index}; allowed are ASCII letters, digits and - _ . : @")]
    BadCharacter { id: String, ch: char, index: usize },
}

/// Checks the id grammar shared by every string id.
pub fn validate_id(s: &str) -> Result<(), IdError> {
    if s.is_empty() {
        return Err(IdError::Empty);
    }
    if s.len() > MAX_ID_BYTES {
        return Err(IdError::TooLong { len: s.len() });
    }
    if let Some((index, ch)) =
        s.char_indices().find(|&(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '@')))
    {
        return Err(IdError::BadCharacter { id: s.to_owned(), ch, index });
    }
    Ok(())
}

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[cfg_attr(
            feature = "openapi",
            derive(utoipa::ToSchema),
            // The grammar of `validate_id`; 128 is `MAX_ID_BYTES` (the attribute takes literals).
            schema(min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9_.:@-]+$")
        )]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Validates and wraps `s`.
            pub fn new(s: impl Into<String>) -> Result<Self, IdError> {
                let s = s.into();
                validate_id(&s)?;
                Ok(Self(s))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(s: String) -> Result<Self, IdError> {
                Self::new(s)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = IdError;
            fn try_from(s: &str) -> Result<Self, IdError> {
                Self::new(s)
            }
        }

        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                Self::new(s)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }
    };
}

string_id!(
    /// A storage worker (a node that owns partitions). One agent runs beside each worker and uses
    /// the worker's id as its own.
    WorkerId
);
string_id!(
    /// A failure domain a worker sits in: an availability zone (data kept in it stays off the
    /// cross-zone links, which are billed or slow).
    ZoneId
);
string_id!(
    /// A rack (or host group) inside a zone: a narrower failure domain, reported for display.
    RackId
);
string_id!(
    /// A partition of a range-partitioned table, or a Valkey hash slot.
    PartitionId
);
string_id!(
    /// A tenant: the first level of every actor path and of hash-sharded placement.
    TenantId
);
string_id!(
    /// A table of one tenant.
    TableId
);
string_id!(
    /// A hash-sharded dataset of one tenant.
    DatasetId
);
string_id!(
    /// A group of dedicated workers that partitions, tables or tenants can be pinned to.
    GroupId
);
string_id!(
    /// An action. Chosen by whoever submits it; resubmitting the same id is idempotent.
    ActionId
);
string_id!(
    /// An operation the storage system runs for an action; poll it until it finishes.
    OperationId
);

/// A key of the 64-bit key space of range-partitioned tables.
///
/// On the wire it is a 16-digit lowercase hex string, so that consoles written in JavaScript
/// (whose numbers lose precision past 2^53) read it exactly and string order equals key order.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(
    feature = "openapi",
    derive(utoipa::ToSchema),
    schema(value_type = String, pattern = "^[0-9a-fA-F]{16}$", examples("4000000000000000"))
)]
pub struct Key(pub u64);

impl Key {
    pub const MIN: Key = Key(0);
    pub const MAX: Key = Key(u64::MAX);
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({:016x})", self.0)
    }
}

impl std::str::FromStr for Key {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.len() != 16 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("key {s:?} is not 16 hex digits"));
        }
        u64::from_str_radix(s, 16).map(Key).map_err(|e| format!("key {s:?}: {e}"))
    }
}

impl Serialize for Key {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// An inclusive range of keys `[start, end]`; inclusive so that one range can cover the whole
/// 64-bit space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct KeyRange {
    pub start: Key,
    pub end: Key,
}

impl KeyRange {
    pub const FULL: KeyRange = KeyRange { start: Key::MIN, end: Key::MAX };

    /// Number of keys in the range as a float (the full range does not fit a `u64`).
    pub fn width(&self) -> f64 {
        (self.end.0 - self.start.0) as f64 + 1.0
    }

    pub fn contains(&self, key: Key) -> bool {
        self.start <= key && key <= self.end
    }

    pub fn is_valid(&self) -> bool {
        self.start <= self.end
    }

    /// Whether `other` starts right after `self` ends.
    pub fn is_left_neighbour_of(&self, other: &KeyRange) -> bool {
        self.end.0.checked_add(1) == Some(other.start.0)
    }

    /// Splits into `[start, key - 1]` and `[key, end]`; `None` if either half would be empty.
    pub fn split_at(&self, key: Key) -> Option<(KeyRange, KeyRange)> {
        if key <= self.start || key > self.end {
            return None;
        }
        Some((KeyRange { start: self.start, end: Key(key.0 - 1) }, KeyRange { start: key, end: self.end }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_ids_stay_within_the_limit_and_are_stable() {
        assert_eq!(derived_id("valkey-", "a-1"), "valkey-a-1");
        let long = "a".repeat(MAX_ID_BYTES);
        let derived = derived_id("dedicated-", &long);
        assert_eq!(derived.len(), MAX_ID_BYTES);
        assert!(validate_id(&derived).is_ok(), "{derived}");
        assert_eq!(derived, derived_id("dedicated-", &long), "the same every time");
        assert_ne!(derived, derived_id("dedicated-", &format!("{}b", &long[1..])), "the hash tells ids apart");
        assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
    }

    #[test]
    fn ids_reject_empty_long_and_reserved_characters() {
        assert_eq!(WorkerId::new(""), Err(IdError::Empty));
        assert!(matches!(WorkerId::new("a".repeat(129)), Err(IdError::TooLong { len: 129 })));
        for bad in ["a b", "a/b", "a|b", "a\nb", "é"] {
            assert!(TenantId::new(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(WorkerId::new("w-1.dc:7000").map(|w| w.to_string()), Ok("w-1.dc:7000".into()));
    }

    #[test]
    fn ids_validate_when_deserialised() {
        let err = serde_json::from_str::<PartitionId>("\"bad id\"").unwrap_err();
        assert!(err.to_string().contains("character ' '"), "{err}");
        let ok: PartitionId = serde_json::from_str("\"t1.p7\"").expect("valid id");
        assert_eq!(ok.as_str(), "t1.p7");
    }

    #[test]
    fn keys_are_hex_on_the_wire_and_round_trip() {
        let k = Key(0xdead_beef);
        let s = serde_json::to_string(&k).expect("serialise");
        assert_eq!(s, "\"00000000deadbeef\"");
        assert_eq!(serde_json::from_str::<Key>(&s).expect("parse"), k);
        assert!(serde_json::from_str::<Key>("\"dead\"").is_err());
        assert!(serde_json::from_str::<Key>("\"zzzzzzzzzzzzzzzz\"").is_err());
        assert!(serde_json::from_str::<Key>("12").is_err());
    }

    #[test]
    fn key_ranges_split_and_neighbour() {
        let full = KeyRange::FULL;
        assert_eq!(full.width(), 18446744073709551616.0);
        assert!(full.split_at(Key(0)).is_none());
        let (l, r) = full.split_at(Key(1 << 63)).expect("inside");
        assert_eq!(l.end, Key((1 << 63) - 1));
        assert!(l.is_left_neighbour_of(&r));
        assert!(!r.is_left_neighbour_of(&l));
        let one = KeyRange { start: Key(5), end: Key(5) };
        assert!(one.split_at(Key(5)).is_none());
        assert_eq!(one.width(), 1.0);
    }
}
