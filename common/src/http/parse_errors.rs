//! The shared error body on the replies hyper writes itself.
//!
//! When a request head cannot be parsed (a malformed request line or header, a URI over hyper's
//! own 64 KiB, a head over its buffer or more than 100 headers) hyper answers 400, 414 or 431 with
//! an empty body and closes the connection, before any of lb's layers sees a request. No hyper
//! option changes that reply, so the server's connection wraps its socket in [`JsonParseErrors`],
//! which recognises exactly that reply as hyper writes it — one buffer holding a whole head of one
//! of those statuses, `content-length: 0` and no content type — and writes the same status with
//! the shared JSON body instead. lb's own error replies always carry a JSON body and a content
//! type (see `layers::json_errors`), so they are never touched.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::protocol::ErrorBody;

/// A connection's socket whose hyper-made 400/414/431 replies get the JSON error body.
#[derive(Debug)]
pub struct JsonParseErrors<S> {
    inner: S,
    /// A rewritten reply being written: its bytes, how many are out, and how many bytes of
    /// hyper's buffer it stands for.
    rewrite: Option<(Vec<u8>, usize, usize)>,
}

impl<S> JsonParseErrors<S> {
    pub fn new(inner: S) -> Self {
        Self { inner, rewrite: None }
    }
}

/// The reply to write instead of `head`, when `head` is one of hyper's empty error replies.
fn rewritten(head: &[u8]) -> Option<Vec<u8>> {
    let head = std::str::from_utf8(head).ok()?;
    let rest = head.strip_prefix("HTTP/1.1 ")?;
    let (code, error) = match rest.get(..3)? {
        "400" => ("bad_request", "malformed request: the request line or a header does not parse"),
        "414" => ("uri_too_long", "the request URI is too long"),
        "431" => ("headers_too_large", "the request headers are too large or too many"),
        _ => return None,
    };
    let fields = head.strip_suffix("\r\n\r\n")?;
    if fields.contains("\r\n\r\n") {
        return None; // more than a head: a reply with a body
    }
    let mut lines = fields.split("\r\n");
    let status_line = lines.next()?;
    let headers: Vec<&str> = lines.collect();
    let named = |h: &str, name: &str| h.split(':').next().is_some_and(|n| n.trim().eq_ignore_ascii_case(name));
    let empty = headers.iter().any(|h| named(h, "content-length") && h.split(':').nth(1) == Some(" 0"));
    if !empty || headers.iter().any(|h| named(h, "content-type")) {
        return None;
    }
    let body = serde_json::to_vec(&ErrorBody { error: error.to_owned(), code: code.to_owned(), field: None })
        .expect("an error body always serialises");
    let mut reply = format!("{status_line}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n", body.len());
    for h in headers.iter().filter(|h| !named(h, "content-length") && !named(h, "connection")) {
        reply.push_str(h);
        reply.push_str("\r\n");
    }
    reply.push_str("connection: close\r\n\r\n");
    let mut reply = reply.into_bytes();
    reply.extend_from_slice(&body);
    Some(reply)
}

impl<S: AsyncWrite + Unpin> JsonParseErrors<S> {
    /// Writes the pending rewrite to its end; then `buf` counts as written.
    fn poll_rewrite(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let (reply, written, claimed) = self.rewrite.as_mut().expect("called with a rewrite pending");
        while *written < reply.len() {
            match ready!(Pin::new(&mut self.inner).poll_write(cx, &reply[*written..]))? {
                0 => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                n => *written += n,
            }
        }
        let claimed = *claimed;
        self.rewrite = None;
        Poll::Ready(Ok(claimed))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for JsonParseErrors<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for JsonParseErrors<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if self.rewrite.is_none() {
            match rewritten(buf) {
                Some(reply) => self.rewrite = Some((reply, 0, buf.len())),
                None => return Pin::new(&mut self.inner).poll_write(cx, buf),
            }
        }
        self.poll_rewrite(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.rewrite.is_none() {
            // hyper queues a head as one buffer; an error reply has nothing after it.
            let mut filled = bufs.iter().filter(|b| !b.is_empty());
            match (filled.next(), filled.next()) {
                (Some(head), None) => match rewritten(head) {
                    Some(reply) => self.rewrite = Some((reply, 0, head.len())),
                    None => return Pin::new(&mut self.inner).poll_write_vectored(cx, bufs),
                },
                _ => return Pin::new(&mut self.inner).poll_write_vectored(cx, bufs),
            }
        }
        self.poll_rewrite(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_empty_error_replies_are_rewritten() {
        let hyper_400 = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\ndate: Tue, 01 Dec 2026 18:00:00 GMT\r\n\r\n";
        let reply = String::from_utf8(rewritten(hyper_400).expect("rewritten")).expect("utf-8");
        let (head, body) = reply.split_once("\r\n\r\n").expect("a head and a body");
        assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{head}");
        assert!(head.contains("content-type: application/json") && head.contains("connection: close"), "{head}");
        assert!(head.contains(&format!("content-length: {}", body.len())) && head.contains("date: "), "{head}");
        let body: ErrorBody = serde_json::from_str(body).expect("the shared body");
        assert_eq!(body.code, "bad_request");
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n";
        assert!(rewritten(ours).is_none(), "lb's own replies are left alone");
        assert!(rewritten(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_none());
        assert!(rewritten(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n").is_some());
        assert!(rewritten(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n{}").is_none(), "a body follows");
    }
}
