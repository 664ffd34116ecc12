//! Bearer tokens with roles, and a per-caller request rate limit.
//!
//! Tokens come from the live config (rotate them without a restart), are compared in constant
//! time, and never reach a log line or an error body. Reads need any role; agents' registry
//! calls (register, heartbeat) need `agent`, so no other component can take an agent's place;
//! collection and announcing a leadership term (`/v1/fencing`) need `service`; submitting and cancelling actions needs `operator` or
//! `service`; the halt switch needs `operator`. With no tokens configured, auth is off.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use lb_common::http::ApiError;

use crate::config::Role;
use crate::http::AppState;

pub use lb_common::http::auth::Caller;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    Read,
    Agent,
    Service,
    OperatorOrService,
    Operator,
}

fn need(method: &Method, path: &str) -> Need {
    if method == Method::GET || method == Method::HEAD {
        Need::Read
    } else if path.starts_with("/v1/agents/") {
        Need::Agent
    } else if path == "/v1/collect" || path == "/v1/collect/rollups" || path == "/v1/fencing" {
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
        Need::Agent => role == Role::Agent,
        Need::Service => role == Role::Service,
        Need::OperatorOrService => matches!(role, Role::Operator | Role::Service),
        Need::Operator => role == Role::Operator,
    }
}

pub async fn authenticate(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let config = state.config.borrow().clone();
    let caller = match lb_common::http::auth::identify(&config.auth, req.headers()) {
        Ok(caller) => caller,
        Err(error) => return error.into_response(),
    };
    if let Some(role) = caller.role {
        let need = need(req.method(), req.uri().path());
        if !allowed(role, need) {
            let message = format!("{} ({}) may not {} {}", caller.name, role.as_str(), req.method(), req.uri().path());
            return ApiError::new(StatusCode::FORBIDDEN, "forbidden", message).into_response();
        }
    }
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
        assert_eq!(need(&Method::POST, "/v1/agents/register"), Need::Agent);
        assert_eq!(need(&Method::POST, "/v1/agents/heartbeat"), Need::Agent);
        assert_eq!(need(&Method::POST, "/v1/collect"), Need::Service);
        assert_eq!(need(&Method::POST, "/v1/collect/rollups"), Need::Service);
        assert_eq!(need(&Method::POST, "/v1/actions/a/cancel"), Need::OperatorOrService);
        assert_eq!(need(&Method::POST, "/v1/halt"), Need::Operator);
        assert!(!allowed(Role::Viewer, Need::OperatorOrService));
        assert!(allowed(Role::Service, Need::OperatorOrService));
        assert!(!allowed(Role::Service, Need::Operator));
        assert!(!allowed(Role::Operator, Need::Service));
        assert!(!allowed(Role::Service, Need::Agent), "the master cannot register as an agent");
        assert!(allowed(Role::Agent, Need::Agent));
        assert!(!allowed(Role::Agent, Need::Service) && !allowed(Role::Agent, Need::OperatorOrService));
    }

    #[test]
    fn rate_limiter_refills() {
        let r = RateLimiter::default();
        assert!((0..5).all(|_| r.allow("a", 5)));
        assert!(!r.allow("a", 5));
        assert!(r.allow("b", 5), "buckets are per caller");
    }
}
