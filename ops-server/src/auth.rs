//! Bearer tokens with roles, and a per-caller request rate limit.
//!
//! Tokens come from the live config (rotate them without a restart), are compared in constant
//! time, and never reach a log line or an error body. Reads need any role; agents' registry
//! calls and collection need `service`; submitting and cancelling actions needs `operator` or
//! `service`; the halt switch needs `operator`. With no tokens configured, auth is off.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use lb_common::http::ApiError;
use subtle::ConstantTimeEq;

use crate::config::Role;
use crate::http::AppState;

/// Who is calling, attached to the request for handlers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    pub role: Option<Role>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    Read,
    Service,
    OperatorOrService,
    Operator,
}

fn need(method: &Method, path: &str) -> Need {
    if method == Method::GET || method == Method::HEAD {
        Need::Read
    } else if path.starts_with("/v1/agents/") || path == "/v1/collect" {
        Need::Service
    } else if path.starts_with("/v1/actions") {
        Need::OperatorOrService
    } else {
        Need::Operator
    }
}

fn allowed(role: Role, need: Need) -> bool {
    match need {
        Need::Read => true,
        Need::Service => role == Role::Service,
        Need::OperatorOrService => matches!(role, Role::Operator | Role::Service),
        Need::Operator => role == Role::Operator,
    }
}

pub async fn authenticate(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let config = state.config.borrow().clone();
    let caller = if config.auth.tokens.is_empty() {
        Caller { name: "anonymous".to_owned(), role: None }
    } else {
        let presented = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let Some(presented) = presented else {
            return ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "missing bearer token").into_response();
        };
        // Compare against every token, without stopping at a match, in constant time per token.
        let mut found = None;
        for t in &config.auth.tokens {
            if bool::from(t.token.as_bytes().ct_eq(presented.as_bytes())) {
                found = Some(t);
            }
        }
        let Some(token) = found else {
            return ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "unknown bearer token").into_response();
        };
        let need = need(req.method(), req.uri().path());
        if !allowed(token.role, need) {
            let message = format!("{} ({:?}) may not {} {}", token.name, token.role, req.method(), req.uri().path());
            return ApiError::new(StatusCode::FORBIDDEN, "forbidden", message).into_response();
        }
        Caller { name: token.name.clone(), role: Some(token.role) }
    };
    if !state.rate_limiter.allow(&caller.name, config.limits.requests_per_sec) {
        return ApiError::too_many(
            "rate_limited",
            format!("{} is over {} requests per second", caller.name, config.limits.requests_per_sec),
        )
        .into_response();
    }
    req.extensions_mut().insert(caller);
    next.run(req).await
}

/// A token bucket per caller: `rate` tokens a second, bursts up to `rate`.
#[derive(Debug, Default)]
pub struct RateLimiter {
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl RateLimiter {
    pub fn allow(&self, caller: &str, rate: u64) -> bool {
        let rate = rate as f64;
        let mut buckets = self.buckets.lock().expect("rate limiter lock is never poisoned");
        let now = Instant::now();
        let (tokens, at) = buckets.entry(caller.to_owned()).or_insert((rate, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * rate).min(rate);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_map_to_routes() {
        assert_eq!(need(&Method::GET, "/v1/actions"), Need::Read);
        assert_eq!(need(&Method::POST, "/v1/agents/register"), Need::Service);
        assert_eq!(need(&Method::POST, "/v1/collect"), Need::Service);
        assert_eq!(need(&Method::POST, "/v1/actions/a/cancel"), Need::OperatorOrService);
        assert_eq!(need(&Method::POST, "/v1/halt"), Need::Operator);
        assert!(!allowed(Role::Viewer, Need::OperatorOrService));
        assert!(allowed(Role::Service, Need::OperatorOrService));
        assert!(!allowed(Role::Service, Need::Operator));
        assert!(!allowed(Role::Operator, Need::Service));
    }

    #[test]
    fn rate_limiter_refills() {
        let r = RateLimiter::default();
        assert!((0..5).all(|_| r.allow("a", 5)));
        assert!(!r.allow("a", 5));
        assert!(r.allow("b", 5), "buckets are per caller");
    }
}
