//! The one error body every lb server answers with.

use serde::{Deserialize, Serialize};

/// `{"error": "...", "code": "snake_case_code"}` with a fitting HTTP status: 400 malformed,
/// 401/403 auth, 404, 409 conflict, 413 too large, 422 invalid, 429 over limit, 503 not leader
/// or not ready.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    /// For humans: what went wrong and, for 422, the field and value at fault.
    pub error: String,
    /// For programs: a stable snake_case code such as `invalid_field` or `queue_full`.
    pub code: String,
    /// For a 422 about one field of the request, its path (`spec.split_key`), so a form can show
    /// the error next to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}
