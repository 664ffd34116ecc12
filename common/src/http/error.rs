//! The error every lb server answers with, and a JSON extractor whose rejections use it.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, JsonRejection};
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::protocol::ErrorBody;
use crate::validate::ValidationError;

/// An HTTP error: a status and the shared `{"error", "code"}` body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status} {code}: {message}")]
pub struct ApiError {
    pub status: StatusCode,
    /// Stable snake_case code for programs.
    pub code: &'static str,
    pub message: String,
    /// The request field at fault, when there is one.
    pub field: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), field: None }
    }

    /// Names the request field at fault (`spec.to_worker`).
    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    pub fn too_many(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::TOO_MANY_REQUESTS, code, message)
    }

    pub fn unavailable(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, code, message)
    }

    /// An internal failure. The detail is logged; the client gets a generic message.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        tracing::error!(error = %detail, "internal error");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "internal error, see the server log")
    }

    pub fn body(&self) -> ErrorBody {
        ErrorBody { error: self.message.clone(), code: self.code.to_owned(), field: self.field.clone() }
    }
}

impl From<ValidationError> for ApiError {
    /// 422 naming every bad field, with `field` set when there is just one.
    fn from(err: ValidationError) -> Self {
        let one = (err.errors.len() == 1).then(|| err.first().field.clone());
        let reply = Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_field", err.to_string());
        match one {
            Some(field) => reply.with_field(field),
            None => reply,
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        let status = rejection.status();
        let code = match status {
            StatusCode::BAD_REQUEST => "malformed_json",
            StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            StatusCode::UNPROCESSABLE_ENTITY => "invalid_field",
            _ => "bad_request",
        };
        Self::new(status, code, rejection.body_text())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}

impl From<BytesRejection> for ApiError {
    fn from(rejection: BytesRejection) -> Self {
        let status = rejection.status();
        let code = if status == StatusCode::PAYLOAD_TOO_LARGE { "body_too_large" } else { "bad_request" };
        Self::new(status, code, rejection.body_text())
    }
}

/// `axum::Json` whose rejections are [`ApiError`]s: 400 malformed, 413 too large (with the
/// router's `DefaultBodyLimit`), 415 wrong content type, 422 wrong shape naming the field.
///
/// A struct must be sent as a JSON object: serde also fills a struct from an array, by
/// position (`[false]` as a halt request), which no client means and which silently shifts
/// every field when one is added. Such a body is 422 naming the field that was an array.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned + Serialize, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        if !json_content_type(req.headers()) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "expected a request with `Content-Type: application/json`",
            ));
        }
        let bytes = Bytes::from_request(req, state).await?;
        let axum::Json(value) = axum::Json::<T>::from_bytes(&bytes)?;
        refuse_positional(&bytes, &value)?;
        Ok(ApiJson(value))
    }
}

/// `application/json`, or any `application/*+json`, with or without parameters (axum's rule).
fn json_content_type(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else { return false };
    let essence = value.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// 422 when the body has an array where the parsed value has an object (a struct filled by
/// position). The parsed value is serialised back and walked beside the body; a type that does
/// not serialise to JSON is not checked.
fn refuse_positional<T: Serialize>(bytes: &[u8], parsed: &T) -> Result<(), ApiError> {
    let (Ok(sent), Ok(shape)) = (serde_json::from_slice::<Value>(bytes), serde_json::to_value(parsed)) else {
        return Ok(());
    };
    match positional_at(&sent, &shape, String::new()) {
        None => Ok(()),
        Some(path) => {
            let shown = if path.is_empty() { "the body" } else { path.as_str() };
            let err = ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_field",
                format!("{shown} is an array: must be a JSON object with named fields"),
            );
            Err(if path.is_empty() { err } else { err.with_field(path) })
        }
    }
}

/// The path of the first array in `sent` that stands where `shape` has an object.
fn positional_at(sent: &Value, shape: &Value, path: String) -> Option<String> {
    match (sent, shape) {
        (Value::Array(_), Value::Object(_)) => Some(path),
        (Value::Object(sent), Value::Object(shape)) => sent.iter().find_map(|(key, value)| {
            let child = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
            shape.get(key).and_then(|shape| positional_at(value, shape, child))
        }),
        (Value::Array(sent), Value::Array(shape)) => {
            sent.iter().zip(shape).enumerate().find_map(|(i, (v, s))| positional_at(v, s, format!("{path}[{i}]")))
        }
        _ => None,
    }
}

impl<T: serde::Serialize> IntoResponse for ApiJson<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::Body;
    use axum::routing::post;
    use serde::Deserialize;
    use tower::ServiceExt;

    use super::*;
    use crate::protocol::HaltRequest;

    #[derive(Debug, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Outer {
        name: String,
        inner: Vec<Inner>,
        pair: (u32, u32),
    }

    #[derive(Debug, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        on: bool,
    }

    async fn post_body(router: Router, body: &str) -> (StatusCode, ErrorBody) {
        let request = axum::http::Request::post("/")
            .header("content-type", "application/json")
            .body(Body::from(body.to_owned()))
            .expect("request");
        let response = router.oneshot(request).await.expect("served");
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.expect("body");
        let body = serde_json::from_slice(&bytes).unwrap_or_else(|_| ErrorBody {
            error: String::from_utf8_lossy(&bytes).into_owned(),
            code: "ok".to_owned(),
            field: None,
        });
        (status, body)
    }

    /// Issue 17 item 9: serde filled structs from arrays by position (`[false]` as a halt).
    #[tokio::test]
    async fn arrays_where_objects_belong_are_422_naming_the_field() {
        let halt = Router::new().route("/", post(|ApiJson(_): ApiJson<HaltRequest>| async { "ok" }));
        let (status, body) = post_body(halt.clone(), "[false]").await;
        assert_eq!((status, body.code.as_str()), (StatusCode::UNPROCESSABLE_ENTITY, "invalid_field"), "{body:?}");
        assert!(body.error.contains("the body is an array"), "{body:?}");
        assert_eq!(post_body(halt, r#"{"halted": false}"#).await.0, StatusCode::OK);

        let outer = Router::new().route("/", post(|ApiJson(_): ApiJson<Outer>| async { "ok" }));
        let (status, body) =
            post_body(outer.clone(), r#"{"name": "a", "inner": [{"on": true}, [false]], "pair": [1, 2]}"#).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body:?}");
        assert_eq!(body.field.as_deref(), Some("inner[1]"), "{body:?}");
        // A tuple and a list are arrays on both sides: fine.
        let (status, body) = post_body(outer, r#"{"name": "a", "inner": [{"on": true}], "pair": [1, 2]}"#).await;
        assert_eq!(status, StatusCode::OK, "{body:?}");
    }

    #[tokio::test]
    async fn rejections_keep_their_status_and_the_error_body() {
        let outer = Router::new().route("/", post(|ApiJson(_): ApiJson<Outer>| async { "ok" }));
        let (status, body) = post_body(outer.clone(), "{nope").await;
        assert_eq!((status, body.code.as_str()), (StatusCode::BAD_REQUEST, "malformed_json"));
        let (status, body) = post_body(outer.clone(), r#"{"name": 1, "inner": [], "pair": [1, 2]}"#).await;
        assert_eq!((status, body.code.as_str()), (StatusCode::UNPROCESSABLE_ENTITY, "invalid_field"));
        assert!(body.error.contains("name"), "{body:?}");
        let (status, _) = post_body(outer.clone(), r#"{"name": "a", "name": "b", "inner": [], "pair": [1, 2]}"#).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "a duplicate field is refused");
        let request = axum::http::Request::post("/")
            .header("content-type", "text/plain")
            .body(Body::from("{}"))
            .expect("request");
        let response = outer.oneshot(request).await.expect("served");
        assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    }
}
