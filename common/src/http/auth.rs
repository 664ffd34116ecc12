//! Bearer tokens with roles, shared by every server with write endpoints (the ops server, the
//! master). Tokens come from the live config (rotate them without a restart), are compared in
//! constant time against every configured token, and never reach a log line or an error body.
//! With no tokens configured, auth is off (loopback demos) and callers are "anonymous".

use axum::http::{HeaderMap, StatusCode, header};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use super::ApiError;
use crate::validate::Scope;

/// Tokens shorter than this are refused by validation: guessable secrets are worse than none.
pub const MIN_TOKEN_LEN: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads only.
    Viewer,
    /// Reads, submits, approves and cancels actions, halts the executor.
    Operator,
    /// Components: the master collects and submits actions.
    Service,
    /// An agent: registers and heartbeats, nothing else.
    Agent,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Service => "service",
            Role::Agent => "agent",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// Who the token belongs to; recorded as `submitted_by` / `approved_by` and in audit logs.
    pub name: String,
    pub token: String,
    pub role: Role,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// No tokens means no authentication (loopback demos); servers warn at start-up.
    #[serde(default)]
    pub tokens: Vec<TokenConfig>,
    /// The master's read API (and its console's data) answers only callers with a token of any
    /// role. Off by default: reads are open, writes need `operator`. The ops server and agents
    /// need a token for every request whenever tokens are configured, whatever this says.
    #[serde(default)]
    pub reads_need_token: bool,
}

impl AuthConfig {
    /// Names valid and unique, tokens long enough and unique; a token's value is never echoed.
    pub fn validate(&self, auth: &mut Scope<'_>) {
        auth.check(
            !self.reads_need_token || !self.tokens.is_empty(),
            "reads_need_token",
            "true",
            "needs at least one token in auth.tokens",
        );
        let mut seen_names = std::collections::HashSet::new();
        let mut seen_tokens = std::collections::HashSet::new();
        for (i, t) in self.tokens.iter().enumerate() {
            let mut a = auth.at_index("tokens", i);
            a.check(crate::ids::validate_id(&t.name).is_ok(), "name", &t.name, "must be a valid id");
            a.check(t.token.len() >= MIN_TOKEN_LEN, "token", "<redacted>", "must be at least 16 characters");
            a.check(seen_names.insert(&t.name), "name", &t.name, "must be unique");
            a.check(seen_tokens.insert(&t.token), "token", "<redacted>", "must be unique");
        }
    }
}

/// Who is calling, attached to the request for handlers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    /// `None` when auth is off.
    pub role: Option<Role>,
}

impl Caller {
    pub fn anonymous() -> Self {
        Self { name: "anonymous".to_owned(), role: None }
    }
}

/// The token of an `Authorization: Bearer <token>` value; the scheme is case-insensitive
/// (RFC 9110 §11.1) and may be followed by more than one space.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, rest) = value.split_once(' ')?;
    let token = rest.trim_start_matches(' ');
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The token a request presents in `Authorization: Bearer <token>`, if any (not checked).
pub fn presented_token(headers: &HeaderMap) -> Option<&str> {
    headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(bearer_token)
}

/// The caller behind a request's `Authorization: Bearer` header: 401 without one or with an
/// unknown token. Compares against every token without stopping at a match.
pub fn identify(auth: &AuthConfig, headers: &HeaderMap) -> Result<Caller, ApiError> {
    if auth.tokens.is_empty() {
        return Ok(Caller::anonymous());
    }
    let presented = presented_token(headers)
        .ok_or_else(|| ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "missing bearer token"))?;
    let mut found = None;
    for t in &auth.tokens {
        if bool::from(t.token.as_bytes().ct_eq(presented.as_bytes())) {
            found = Some(t);
        }
    }
    let token = found.ok_or_else(|| ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "unknown bearer token"))?;
    Ok(Caller { name: token.name.clone(), role: Some(token.role) })
}

/// 403 unless the caller has one of `roles` (or auth is off).
pub fn require(caller: &Caller, roles: &[Role], what: &str) -> Result<(), ApiError> {
    match caller.role {
        None => Ok(()),
        Some(role) if roles.contains(&role) => Ok(()),
        Some(role) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("{} ({}) may not {what}", caller.name, role.as_str()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;
    use crate::validate::Validator;

    fn config() -> AuthConfig {
        AuthConfig {
            tokens: vec![
                TokenConfig { name: "sre".into(), token: "operator-secret-0001".into(), role: Role::Operator },
                TokenConfig { name: "dash".into(), token: "viewer-secret-00001".into(), role: Role::Viewer },
            ],
            reads_need_token: false,
        }
    }

    fn headers(token: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {token}")).expect("header"));
        h
    }

    #[test]
    fn tokens_identify_callers_and_roles_gate_writes() {
        let auth = config();
        let sre = identify(&auth, &headers("operator-secret-0001")).expect("known");
        assert_eq!(sre.role, Some(Role::Operator));
        assert!(require(&sre, &[Role::Operator], "approve").is_ok());
        let dash = identify(&auth, &headers("viewer-secret-00001")).expect("known");
        let err = require(&dash, &[Role::Operator], "approve proposals").expect_err("viewer");
        assert_eq!(err.body().code, "forbidden");
        assert!(err.body().error.contains("dash (viewer) may not approve proposals"), "{:?}", err.body());
        assert_eq!(identify(&auth, &headers("nope-nope-nope-nope")).expect_err("unknown").body().code, "unauthorized");
        assert_eq!(identify(&auth, &HeaderMap::new()).expect_err("missing").body().code, "unauthorized");
        assert_eq!(identify(&AuthConfig::default(), &HeaderMap::new()).expect("auth off"), Caller::anonymous());
    }

    /// Issue 17: the scheme was matched case-sensitively.
    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        let auth = config();
        for value in ["bearer operator-secret-0001", "BEARER operator-secret-0001", "Bearer  operator-secret-0001"] {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(value).expect("header"));
            assert_eq!(identify(&auth, &h).expect(value).role, Some(Role::Operator), "{value}");
        }
        for value in ["Basic operator-secret-0001", "Bearer", "Bearer ", "Bearer operator-secret-0001x"] {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(value).expect("header"));
            assert!(identify(&auth, &h).is_err(), "{value}");
        }
    }

    #[test]
    fn validation_never_echoes_a_token() {
        let mut auth = config();
        auth.tokens[1].token = "short".into();
        auth.tokens[1].name = "sre".into();
        let mut v = Validator::new();
        auth.validate(&mut v.at("auth"));
        let err = v.finish().expect_err("invalid").to_string();
        assert!(err.contains("auth.tokens[1].token = <redacted>"), "{err}");
        assert!(err.contains("auth.tokens[1].name = sre: must be unique"), "{err}");
        assert!(!err.contains("short"), "{err}");
    }
}
