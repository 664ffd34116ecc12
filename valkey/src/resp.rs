//! A plain RESP2 connection for the one large reply lb reads every second.
//!
//! `CLUSTER SLOT-STATS` over a node's slots is ~120 bytes of reply per slot (~0.5 MB for a
//! quarter of the 16,384), read every second by the agent beside each node. Through the `redis`
//! crate's parser (combine, a `Value` built in partial steps as the bytes arrive) that reply
//! was 30–40 % of a release agent's CPU (`docs/benchmarks.md`, "What lb costs beside Valkey").
//! This module reads it on a connection of its own: the command packed by `redis` itself, the
//! reply's end found by a resumable scan that counts the values still owed (no value is built
//! until the whole reply is in), then one pass that builds the same [`Value`] the crate would
//! (the typed parsers in [`crate::reply`] read both alike: `resp_parses_as_redis_does` checks it).
//!
//! RESP2 only (the connection never sends `HELLO 3`): `+` simple string (`+OK` is
//! [`Value::Okay`]), `-` error, `:` integer, `$` bulk string, `*` array (`-1` lengths are
//! [`Value::Nil`]). An error reply at the top is returned as [`Reply::Error`]; one nested in an
//! array is a protocol error here, as lb sends no command that answers with one.

use redis::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A reply: a value, or the server's error line (`ERR ...`, `NOAUTH ...`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reply {
    Value(Value),
    Error(String),
}

/// How far a reply's bytes have been scanned for its end: resumed after every read, so a
/// reply arriving in many reads is scanned once.
#[derive(Debug, Clone, Copy)]
struct Scan {
    /// Bytes of whole values (or headers) seen.
    pos: usize,
    /// Values still owed: 1 at the start, an array of n adds n - 1.
    pending: u64,
}

impl Default for Scan {
    fn default() -> Self {
        Self { pos: 0, pending: 1 }
    }
}

/// A malformed reply (the connection cannot be trusted after one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed RESP reply at byte {at}: {what}")]
pub(crate) struct Malformed {
    at: usize,
    what: &'static str,
}

fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    let rest = buf.get(from..)?;
    rest.windows(2).position(|w| w == b"\r\n").map(|i| from + i)
}

fn number(buf: &[u8], from: usize, end: usize) -> Result<i64, Malformed> {
    std::str::from_utf8(&buf[from..end])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(Malformed { at: from, what: "a length or integer that is not a number" })
}

/// Advances `scan` over `buf`; `Ok(Some(len))` once the reply's `len` bytes are all in.
fn scan(buf: &[u8], scan: &mut Scan) -> Result<Option<usize>, Malformed> {
    while scan.pending > 0 {
        let Some(&kind) = buf.get(scan.pos) else { return Ok(None) };
        let Some(end) = line_end(buf, scan.pos + 1) else { return Ok(None) };
        let next = end + 2;
        match kind {
            b'+' | b'-' | b':' => scan.pos = next,
            b'$' => {
                let len = number(buf, scan.pos + 1, end)?;
                if len >= 0 {
                    let after = next + len as usize + 2;
                    if buf.len() < after {
                        return Ok(None);
                    }
                    scan.pos = after;
                } else {
                    scan.pos = next;
                }
            }
            b'*' => {
                let len = number(buf, scan.pos + 1, end)?;
                scan.pos = next;
                scan.pending += len.max(0) as u64;
            }
            _ => return Err(Malformed { at: scan.pos, what: "an unknown type byte" }),
        }
        scan.pending -= 1;
    }
    Ok(Some(scan.pos))
}

/// Parses the one complete reply in `buf` (found by [`scan`]).
fn parse(buf: &[u8]) -> Result<Reply, Malformed> {
    if buf.first() == Some(&b'-') {
        let end = line_end(buf, 1).ok_or(Malformed { at: 0, what: "an unterminated error" })?;
        return Ok(Reply::Error(String::from_utf8_lossy(&buf[1..end]).into_owned()));
    }
    let mut pos = 0;
    value(buf, &mut pos).map(Reply::Value)
}

fn value(buf: &[u8], pos: &mut usize) -> Result<Value, Malformed> {
    let at = *pos;
    let kind = *buf.get(at).ok_or(Malformed { at, what: "a missing value" })?;
    let end = line_end(buf, at + 1).ok_or(Malformed { at, what: "an unterminated line" })?;
    *pos = end + 2;
    Ok(match kind {
        b'+' if &buf[at + 1..end] == b"OK" => Value::Okay,
        b'+' => Value::SimpleString(String::from_utf8_lossy(&buf[at + 1..end]).into_owned()),
        b':' => Value::Int(number(buf, at + 1, end)?),
        b'$' => match number(buf, at + 1, end)? {
            len if len < 0 => Value::Nil,
            len => {
                let data = buf.get(*pos..*pos + len as usize).ok_or(Malformed { at, what: "a short bulk string" })?;
                *pos += len as usize + 2;
                Value::BulkString(data.to_vec())
            }
        },
        b'*' => match number(buf, at + 1, end)? {
            len if len < 0 => Value::Nil,
            len => {
                let mut items = Vec::with_capacity(len as usize);
                for _ in 0..len {
                    items.push(value(buf, pos)?);
                }
                Value::Array(items)
            }
        },
        b'-' => return Err(Malformed { at, what: "an error reply inside an array" }),
        _ => return Err(Malformed { at, what: "an unknown type byte" }),
    })
}

/// One TCP connection speaking RESP2, one command at a time.
#[derive(Debug)]
pub(crate) struct RawConnection {
    stream: TcpStream,
    buf: Vec<u8>,
}

/// Read this much at a time: a slot-stats reply is a few hundred KB.
const READ_CHUNK: usize = 64 * 1024;

impl RawConnection {
    /// Connects and, with a password, authenticates (`AUTH [user] password`). No deadline of
    /// its own: the caller bounds the whole of it.
    pub(crate) async fn connect(host: &str, port: u16, auth: Option<(Option<&str>, &str)>) -> std::io::Result<Self> {
        let stream = TcpStream::connect((host, port)).await?;
        stream.set_nodelay(true)?;
        let mut conn = Self { stream, buf: Vec::new() };
        if let Some((user, password)) = auth {
            let mut cmd = redis::cmd("AUTH");
            if let Some(user) = user {
                cmd.arg(user);
            }
            cmd.arg(password);
            match conn.query(&cmd).await? {
                Reply::Value(Value::Okay) => {}
                Reply::Error(message) => {
                    return Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, message));
                }
                Reply::Value(other) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("AUTH answered {other:?}"),
                    ));
                }
            }
        }
        Ok(conn)
    }

    /// Sends `cmd` and reads its whole reply. An I/O error or a malformed reply leaves the
    /// connection unusable (drop it); so does a caller's timeout around this.
    pub(crate) async fn query(&mut self, cmd: &redis::Cmd) -> std::io::Result<Reply> {
        self.stream.write_all(&cmd.get_packed_command()).await?;
        self.buf.clear();
        let mut state = Scan::default();
        let len = loop {
            let malformed = |e: Malformed| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
            if let Some(len) = scan(&self.buf, &mut state).map_err(malformed)? {
                break len;
            }
            self.buf.reserve(READ_CHUNK);
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        };
        if len != self.buf.len() {
            // One command in flight: bytes past its reply are not ours to have.
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "bytes after the reply"));
        }
        parse(&self.buf).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// RESP2 bytes of `v` (the subset this module reads).
    fn encode(v: &Value, out: &mut Vec<u8>) {
        match v {
            Value::Nil => out.extend_from_slice(b"$-1\r\n"),
            Value::Okay => out.extend_from_slice(b"+OK\r\n"),
            Value::SimpleString(s) => out.extend_from_slice(format!("+{s}\r\n").as_bytes()),
            Value::Int(n) => out.extend_from_slice(format!(":{n}\r\n").as_bytes()),
            Value::BulkString(b) => {
                out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            Value::Array(items) => {
                out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
                items.iter().for_each(|i| encode(i, out));
            }
            other => unreachable!("not generated: {other:?}"),
        }
    }

    fn resp_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Nil),
            Just(Value::Okay),
            "[a-z0-9 -]{0,12}".prop_filter("not OK", |s| s != "OK").prop_map(Value::SimpleString),
            any::<i64>().prop_map(Value::Int),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(Value::BulkString),
        ];
        leaf.prop_recursive(3, 64, 8, |inner| proptest::collection::vec(inner, 0..8).prop_map(Value::Array))
    }

    /// The reply found complete only once its last byte is in, however the bytes arrive.
    fn scan_in_pieces(bytes: &[u8], cuts: &[usize]) -> Result<Option<usize>, Malformed> {
        let mut state = Scan::default();
        let mut last = 0;
        for &cut in cuts.iter().chain(std::iter::once(&bytes.len())) {
            let cut = cut.clamp(last, bytes.len());
            let found = scan(&bytes[..cut], &mut state)?;
            if cut < bytes.len() {
                assert_eq!(found, None, "complete after {cut} of {} bytes", bytes.len());
            } else {
                return Ok(found);
            }
            last = cut;
        }
        unreachable!()
    }

    proptest! {
        #[test]
        fn resp_parses_as_redis_does(v in resp_value(), mut cuts in proptest::collection::vec(0usize..2000, 0..6)) {
            let mut bytes = Vec::new();
            encode(&v, &mut bytes);
            cuts.sort_unstable();
            prop_assert_eq!(scan_in_pieces(&bytes, &cuts), Ok(Some(bytes.len())));
            let ours = parse(&bytes).expect("parses");
            let theirs = redis::parse_redis_value(&bytes).expect("redis parses");
            prop_assert_eq!(ours, Reply::Value(theirs));
        }
    }

    #[test]
    fn a_captured_slot_stats_reply_reads_as_redis_reads_it() {
        let bytes = include_bytes!("fixtures/slot_stats_range.resp");
        assert_eq!(scan_in_pieces(bytes, &[1, 7, 40]), Ok(Some(bytes.len())));
        let Reply::Value(ours) = parse(bytes).expect("parses") else { panic!("an error reply") };
        assert_eq!(ours, redis::parse_redis_value(bytes).expect("redis parses"));
        assert_eq!(crate::reply::parse_slot_stats(&ours).expect("typed").len(), 3);
    }

    #[test]
    fn errors_and_garbage_are_told_apart() {
        let error = b"-ERR unknown subcommand 'SLOT-STATS'\r\n";
        assert_eq!(scan_in_pieces(error, &[]), Ok(Some(error.len())));
        assert_eq!(parse(error), Ok(Reply::Error("ERR unknown subcommand 'SLOT-STATS'".to_owned())));
        assert!(scan(b"?what\r\n", &mut Scan::default()).is_err());
        assert!(scan(b"*x\r\n", &mut Scan::default()).is_err());
        assert!(parse(b"*1\r\n-ERR nested\r\n").is_err());
        // A bulk string whose bytes have not all arrived is not complete.
        assert_eq!(scan(b"$5\r\nab", &mut Scan::default()), Ok(None));
    }
}
