//! HTTP plumbing shared by every lb server and client.
//!
//! - [`error`]: [`ApiError`] and the [`ApiJson`] extractor, both speaking the shared error body.
//! - [`observability`]: `/metrics`, `/live`, `/ready` and `/v1/config/status`.
//! - [`layers`]: the standard middleware stack (request tracing, metrics, deadline, URI, header
//!   and body limits, panic catching, every error reply as JSON, 404/405 included).
//! - [`parse_errors`]: the JSON error body on the 400/414/431 replies hyper writes itself.
//! - [`client`]: the typed HTTP client with a connect timeout and a whole-request deadline.

pub mod auth;
pub mod client;
pub mod error;
pub mod layers;
pub mod observability;
pub mod parse_errors;

pub use client::{ClientError, Conditional, EventStream, HttpClient, KeptClient, SseEvent};
pub use error::{ApiError, ApiJson};
pub use layers::with_standard_layers;
pub use observability::{Readiness, observability_router};
