//! The typed HTTP client every component calls its peers with.
//!
//! Every call has a connect timeout and a whole-request deadline (connect, send, read the full
//! reply), enforced by reqwest and, as a hard cap, by `tokio::time::timeout` around the call.
//! Errors say whether the request may have reached the peer: a caller that executes actions must
//! not treat "maybe delivered" as "not delivered".

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::config::shared::HttpClientConfig;
use crate::protocol::ErrorBody;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The connection was never established: the request certainly did not reach the peer.
    #[error("cannot connect to {url}: {message}")]
    Connect { url: String, message: String },
    /// No full reply within the deadline; the peer may have acted on the request.
    #[error("{url} did not answer within {deadline_ms} ms")]
    Timeout { url: String, deadline_ms: u64 },
    /// The peer answered with an error status and (usually) the shared error body.
    #[error("{url} answered {status}: {} ({})", body.error, body.code)]
    Status { url: String, status: StatusCode, body: ErrorBody },
    /// The reply was not the expected JSON.
    #[error("reply from {url} is not valid: {message}")]
    Decode { url: String, message: String },
    /// The connection broke after the request was sent.
    #[error("request to {url} failed: {message}")]
    Transport { url: String, message: String },
}

impl ClientError {
    /// Whether the peer may have received and acted on the request.
    pub fn maybe_delivered(&self) -> bool {
        !matches!(self, ClientError::Connect { .. })
    }

    /// The HTTP status for [`ClientError::Status`].
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            ClientError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// A bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            ClientError::Connect { .. } => "connect",
            ClientError::Timeout { .. } => "timeout",
            ClientError::Status { .. } => "status",
            ClientError::Decode { .. } => "decode",
            ClientError::Transport { .. } => "transport",
        }
    }
}

/// 5 s: a pooled connection idle this long is dropped by the client, before an lb server closes
/// it (`http.head_timeout_ms`, 10 s by default): a request never goes out on a connection the
/// server is closing at that moment.
pub const IDLE_POOL_TIMEOUT: Duration = Duration::from_secs(5);

/// A client bound to one peer's base URL, e.g. `http://127.0.0.1:7101`. Cheap to clone.
#[derive(Debug, Clone)]
pub struct HttpClient {
    inner: reqwest::Client,
    base_url: String,
    bearer_token: Option<String>,
    deadline: Duration,
}

impl HttpClient {
    pub fn new(base_url: impl Into<String>, config: &HttpClientConfig) -> Self {
        let deadline = Duration::from_millis(config.deadline_ms);
        let inner = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(config.connect_timeout_ms))
            .timeout(deadline)
            .pool_idle_timeout(IDLE_POOL_TIMEOUT)
            .build()
            .expect("a client with only timeouts set always builds");
        let base_url = base_url.into().trim_end_matches('/').to_owned();
        Self { inner, base_url, bearer_token: None, deadline }
    }

    /// Sends `Authorization: Bearer <token>` with every request. The token is never logged.
    pub fn with_bearer_token(mut self, token: impl Into<String>) -> Self {
        self.bearer_token = Some(token.into());
        self
    }

    /// The same client (and connection pool) aimed at another peer.
    pub fn for_peer(&self, base_url: impl Into<String>) -> Self {
        let mut peer = self.clone();
        peer.base_url = base_url.into().trim_end_matches('/').to_owned();
        peer
    }

    /// The same client with another whole-request deadline (a collection round gives each
    /// agent its own).
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.call(Method::GET, path, None::<&()>, None::<&()>).await
    }

    pub async fn get_with_query<Q: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        query: &Q,
    ) -> Result<T, ClientError> {
        self.call(Method::GET, path, Some(query), None::<&()>).await
    }

    pub async fn post<B: Serialize, T: DeserializeOwned>(&self, path: &str, body: &B) -> Result<T, ClientError> {
        self.call(Method::POST, path, None::<&()>, Some(body)).await
    }

    /// `GET path` with `If-None-Match: etag` (when given): [`Conditional::NotModified`] on a
    /// `304`, else the reply and its `ETag`. A peer that ignores the header answers in full.
    pub async fn get_if_changed<T: DeserializeOwned>(
        &self,
        path: &str,
        etag: Option<&str>,
    ) -> Result<Conditional<T>, ClientError> {
        let (url, status, tag, bytes) = self.exchange(Method::GET, path, None::<&()>, None::<&()>, etag).await?;
        if status == StatusCode::NOT_MODIFIED {
            return Ok(Conditional::NotModified);
        }
        let value = decode(url, status, &bytes)?;
        Ok(Conditional::Modified { value, etag: tag })
    }

    async fn call<Q: Serialize, B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: Option<&Q>,
        body: Option<&B>,
    ) -> Result<T, ClientError> {
        let (url, status, _, bytes) = self.exchange(method, path, query, body, None).await?;
        decode(url, status, &bytes)
    }

    /// Sends one request and reads the whole reply: (url, status, its `ETag`, body).
    async fn exchange<Q: Serialize, B: Serialize>(
        &self,
        method: Method,
        path: &str,
        query: Option<&Q>,
        body: Option<&B>,
        if_none_match: Option<&str>,
    ) -> Result<(String, StatusCode, Option<String>, axum::body::Bytes), ClientError> {
        let url = format!("{}{}", self.base_url, path);
        let mut request = self.inner.request(method, &url).timeout(self.deadline);
        if let Some(query) = query {
            request = request.query(query);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        if let Some(token) = &self.bearer_token {
            request = request.bearer_auth(token);
        }
        if let Some(tag) = if_none_match {
            request = request.header(reqwest::header::IF_NONE_MATCH, tag);
        }
        let deadline_ms = u64::try_from(self.deadline.as_millis()).unwrap_or(u64::MAX);
        let exchange = async {
            let response = request.send().await.map_err(|e| classify(&url, deadline_ms, e))?;
            let status = response.status();
            let tag = response.headers().get(reqwest::header::ETAG).and_then(|v| v.to_str().ok()).map(str::to_owned);
            let bytes = response.bytes().await.map_err(|e| classify(&url, deadline_ms, e))?;
            Ok::<_, ClientError>((status, tag, bytes))
        };
        // reqwest enforces the deadline too; this cap also covers DNS and body streaming.
        let (status, tag, bytes) = tokio::time::timeout(self.deadline, exchange)
            .await
            .map_err(|_| ClientError::Timeout { url: url.clone(), deadline_ms })??;
        Ok((url, status, tag, bytes))
    }
}

/// The answer to [`HttpClient::get_if_changed`].
#[derive(Debug, Clone, PartialEq)]
pub enum Conditional<T> {
    /// The peer's copy is the one the caller named: nothing was sent.
    NotModified,
    /// The peer's copy, and its tag for the next call.
    Modified { value: T, etag: Option<String> },
}

/// A reply's body as `T`, or the error its status says.
fn decode<T: DeserializeOwned>(url: String, status: StatusCode, bytes: &[u8]) -> Result<T, ClientError> {
    if !status.is_success() {
        let body = error_body(bytes);
        return Err(ClientError::Status { url, status, body });
    }
    serde_json::from_slice(bytes).map_err(|e| ClientError::Decode { url, message: e.to_string() })
}

/// One [`HttpClient`] kept for as long as the settings it was built from hold.
///
/// Building a client loads the TLS trust roots: about a millisecond of CPU and a read of the
/// system's certificate files, plus a new connection pool (so a new TCP connection per call).
/// A loop that calls a peer every second (a heartbeat, the topology read, the online pass) asks
/// this for its client instead; a config reload that changes the URL, the timeouts or the token
/// builds a new one at the next call. Shared by reference between tasks.
#[derive(Debug, Default)]
pub struct KeptClient {
    kept: std::sync::Mutex<Option<(KeptKey, HttpClient)>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct KeptKey {
    base_url: String,
    config: HttpClientConfig,
    bearer_token: Option<String>,
}

impl KeptClient {
    /// The kept client if it was built for these settings, else a new one (kept from now on).
    pub fn get(&self, base_url: &str, config: &HttpClientConfig, bearer_token: Option<&str>) -> HttpClient {
        let key = KeptKey {
            base_url: base_url.to_owned(),
            config: config.clone(),
            bearer_token: bearer_token.map(str::to_owned),
        };
        let mut kept = self.kept.lock().expect("kept client lock is never poisoned");
        match kept.as_ref() {
            Some((old, client)) if *old == key => client.clone(),
            _ => {
                let mut client = HttpClient::new(base_url, config);
                if let Some(token) = bearer_token {
                    client = client.with_bearer_token(token);
                }
                *kept = Some((key, client.clone()));
                client
            }
        }
    }
}

/// How long an event stream may stay silent before it counts as lost: three of the master's
/// 15 s keep-alive comments.
pub const STREAM_IDLE: Duration = Duration::from_secs(45);

/// One server-sent event: its `event:` name (`message` when none) and its `data:` lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: String,
    pub data: String,
}

/// An open `text/event-stream` reply, read event by event. The connection's whole-request
/// deadline does not apply; a silence longer than [`STREAM_IDLE`] ends it with a timeout.
#[derive(Debug)]
pub struct EventStream {
    url: String,
    reply: reqwest::Response,
    buffer: String,
}

impl EventStream {
    /// The next event; `None` when the server ended the stream.
    pub async fn next(&mut self) -> Option<Result<SseEvent, ClientError>> {
        loop {
            if let Some(cut) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..cut + 2).collect();
                if let Some(event) = parse_event(&block) {
                    return Some(Ok(event));
                }
                continue;
            }
            let idle_ms = STREAM_IDLE.as_millis() as u64;
            let chunk = match tokio::time::timeout(STREAM_IDLE, self.reply.chunk()).await {
                Err(_) => return Some(Err(ClientError::Timeout { url: self.url.clone(), deadline_ms: idle_ms })),
                Ok(Err(e)) => return Some(Err(classify(&self.url, idle_ms, e))),
                Ok(Ok(None)) => return None,
                Ok(Ok(Some(chunk))) => chunk,
            };
            self.buffer.push_str(&String::from_utf8_lossy(&chunk).replace("\r\n", "\n"));
        }
    }
}

/// An event block's `event:` and `data:` fields (comments and other fields skipped); `None`
/// for a block without data (a keep-alive comment).
fn parse_event(block: &str) -> Option<SseEvent> {
    let mut event = None;
    let mut data: Vec<&str> = Vec::new();
    for line in block.lines() {
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => event = Some(value.to_owned()),
            "data" => data.push(value),
            _ => {}
        }
    }
    (!data.is_empty()).then(|| SseEvent { event: event.unwrap_or_else(|| "message".to_owned()), data: data.join("\n") })
}

impl HttpClient {
    /// Opens a server-sent event stream at `path`: the connection within the client's deadline,
    /// the events for as long as the server sends them.
    pub async fn event_stream(&self, path: &str) -> Result<EventStream, ClientError> {
        let url = format!("{}{}", self.base_url, path);
        // No whole-request deadline (a year stands for none); silence is bounded per read.
        let mut request = self
            .inner
            .get(&url)
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .timeout(Duration::from_secs(365 * 24 * 3600));
        if let Some(token) = &self.bearer_token {
            request = request.bearer_auth(token);
        }
        let deadline_ms = u64::try_from(self.deadline.as_millis()).unwrap_or(u64::MAX);
        let reply = tokio::time::timeout(self.deadline, request.send())
            .await
            .map_err(|_| ClientError::Timeout { url: url.clone(), deadline_ms })?
            .map_err(|e| classify(&url, deadline_ms, e))?;
        let status = reply.status();
        if !status.is_success() {
            let bytes = reply.bytes().await.unwrap_or_default();
            let body = error_body(&bytes);
            return Err(ClientError::Status { url, status, body });
        }
        Ok(EventStream { url, reply, buffer: String::new() })
    }
}

/// The shared error body of a failed reply, or its first 512 bytes when it is not one.
fn error_body(bytes: &[u8]) -> ErrorBody {
    serde_json::from_slice::<ErrorBody>(bytes).unwrap_or_else(|_| ErrorBody {
        error: String::from_utf8_lossy(&bytes[..bytes.len().min(512)]).into_owned(),
        code: "unknown".to_owned(),
        field: None,
    })
}

fn classify(url: &str, deadline_ms: u64, err: reqwest::Error) -> ClientError {
    let url = url.to_owned();
    // A connect timeout is both: it never reached the peer, so it counts as a connect error.
    if err.is_connect() {
        ClientError::Connect { url, message: error_chain(&err) }
    } else if err.is_timeout() {
        ClientError::Timeout { url, deadline_ms }
    } else if err.is_decode() {
        ClientError::Decode { url, message: error_chain(&err) }
    } else {
        ClientError::Transport { url, message: error_chain(&err) }
    }
}

/// reqwest's top-level message is vague ("error sending request"); the causes say what happened.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}
