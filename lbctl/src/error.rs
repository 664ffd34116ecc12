//! What can go wrong, and the exit status each gives: 1 when a request failed (the line names
//! the component, the URL and the status), 2 for a usage error (clap's own parse errors exit 2
//! too). Every error is one line on stderr, never a backtrace.

use std::fmt;

use lb_common::http::ClientError;

use crate::fmt::one_line;

/// Which server a request went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    Master,
    Ops,
}

impl fmt::Display for Component {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Component::Master => "master",
            Component::Ops => "ops server",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// A request to the master or the ops server failed.
    #[error("{}", request_line(*component, error, context.as_deref()))]
    /// (Boxed: a client error is large, and every command's `Result` carries this type.)
    Request { component: Component, error: Box<ClientError>, context: Option<String> },
    /// A bad flag value, config file or argument combination.
    #[error("{0}")]
    Usage(String),
    /// Writing the output failed (other than a closed pipe, which is not an error).
    #[error("cannot write the output: {0}")]
    Output(std::io::Error),
    /// What a command waits for did not come in time.
    #[error("{0}")]
    Timeout(String),
}

impl CtlError {
    pub fn master(error: ClientError) -> CtlError {
        CtlError::Request { component: Component::Master, error: Box::new(error), context: None }
    }

    pub fn ops(error: ClientError) -> CtlError {
        CtlError::Request { component: Component::Ops, error: Box::new(error), context: None }
    }

    /// The process exit status.
    pub fn exit_code(&self) -> u8 {
        match self {
            CtlError::Request { .. } | CtlError::Output(_) | CtlError::Timeout(_) => 1,
            CtlError::Usage(_) => 2,
        }
    }

    /// The HTTP status of a failed request, if it got one.
    pub fn status(&self) -> Option<u16> {
        match self {
            CtlError::Request { error, .. } => error.status().map(|s| s.as_u16()),
            _ => None,
        }
    }

    /// Adds what lbctl was looking for to a failed request's line.
    pub fn with_context(self, more: impl Into<String>) -> CtlError {
        match self {
            CtlError::Request { component, error, .. } => {
                CtlError::Request { component, error, context: Some(more.into()) }
            }
            other => other,
        }
    }
}

/// `master at http://127.0.0.1:7000/api/v1/proposals/x/approve refused: 403 forbidden: dash
/// (viewer) may not approve proposals`.
fn request_line(component: Component, error: &ClientError, context: Option<&str>) -> String {
    let line = match error {
        ClientError::Status { url, status, body } => {
            let verb = if status.is_client_error() { "refused" } else { "failed" };
            format!("{component} at {url} {verb}: {} {}: {}", status.as_u16(), body.code, one_line(&body.error))
        }
        ClientError::Connect { url, message } => {
            format!("{component} at {url} is unreachable: {}", connect_cause(message))
        }
        ClientError::Timeout { url, deadline_ms } => {
            format!("{component} at {url} did not answer within {deadline_ms} ms (see --timeout)")
        }
        ClientError::Decode { url, message } => {
            format!("{component} at {url} sent a reply lbctl cannot read (another version?): {}", one_line(message))
        }
        ClientError::Transport { url, message } => {
            format!("{component} at {url}: the request failed: {}", connect_cause(message))
        }
    };
    match context {
        Some(more) => format!("{line}; {more}"),
        None => line,
    }
}

/// reqwest's chain without its generic head: `tcp connect error: Connection refused (os error
/// 111)` rather than `error sending request for url (…): client error (Connect): …`.
fn connect_cause(message: &str) -> String {
    let parts: Vec<&str> = message
        .split(": ")
        .filter(|p| !p.starts_with("error sending request for url") && !p.starts_with("client error ("))
        .collect();
    if parts.is_empty() { one_line(message) } else { one_line(&parts.join(": ")) }
}

/// Tags a client error with the component it came from: `master.overview(..).await.at_master()?`.
pub trait AtComponent<T> {
    fn at_master(self) -> Result<T, CtlError>;
    fn at_ops(self) -> Result<T, CtlError>;
}

impl<T> AtComponent<T> for Result<T, ClientError> {
    fn at_master(self) -> Result<T, CtlError> {
        self.map_err(CtlError::master)
    }

    fn at_ops(self) -> Result<T, CtlError> {
        self.map_err(CtlError::ops)
    }
}

pub fn is_not_found(error: &ClientError) -> bool {
    error.status().is_some_and(|s| s.as_u16() == 404)
}

/// A lookup where 404 means "there is none": `Ok(None)` instead of an error.
pub fn found<T>(result: Result<T, ClientError>) -> Result<Option<T>, ClientError> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use lb_common::protocol::ErrorBody;

    use super::*;

    #[test]
    fn a_refusal_names_the_component_url_status_and_message() {
        let error = ClientError::Status {
            url: "http://m/api/v1/proposals/x/approve".into(),
            status: 403u16.try_into().expect("status"),
            body: ErrorBody {
                error: "dash (viewer) may not\napprove proposals".into(),
                code: "forbidden".into(),
                field: None,
            },
        };
        let e = CtlError::Request { component: Component::Master, error: Box::new(error), context: None };
        assert_eq!(
            e.to_string(),
            "master at http://m/api/v1/proposals/x/approve refused: 403 forbidden: dash (viewer) may not approve proposals"
        );
        assert_eq!((e.exit_code(), e.status()), (1, Some(403)));
    }

    #[test]
    fn an_unreachable_server_is_one_short_line() {
        let message = "error sending request for url (http://127.0.0.1:1/api/v1/overview): client error (Connect): \
                       tcp connect error: Connection refused (os error 111)";
        let error = ClientError::Connect { url: "http://127.0.0.1:1/api/v1/overview".into(), message: message.into() };
        let e = CtlError::Request { component: Component::Ops, error: Box::new(error), context: None };
        assert_eq!(
            e.to_string(),
            "ops server at http://127.0.0.1:1/api/v1/overview is unreachable: tcp connect error: Connection refused (os error 111)"
        );
    }
}
