//! The wire protocol: every message lb's components exchange, as serde types.
//!
//! `docs/protocol.md` documents each message and `docs/examples/*.json` holds one example per
//! message; `tests/protocol_examples.rs` deserialises every example, so docs and code cannot
//! drift. Conventions: JSON, snake_case fields, units in field names, timestamps as epoch millis
//! (`*_ms`), keys as 16-digit hex strings. Requests reject unknown fields; replies accept them.
//!
//! With feature `openapi` (only the master enables it), the types of the master's API derive
//! `utoipa::ToSchema` (its queries `utoipa::IntoParams`) from the same serde attributes, for the
//! master's `GET /api/v1/openapi.json`.

pub mod actions;
pub mod error;
pub mod limits;
pub mod master;
pub mod offline;
pub mod placement;
pub mod proposals;
pub mod records;
pub mod registry;
pub mod report;
pub mod samples;
pub mod storage;

pub use actions::*;
pub use error::ErrorBody;
pub use limits::{TextLimits, cut_text};
pub use master::*;
pub use offline::*;
pub use placement::*;
pub use proposals::*;
pub use records::*;
pub use registry::*;
pub use report::*;
pub use samples::*;
pub use storage::*;
