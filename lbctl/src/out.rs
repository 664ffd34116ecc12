//! Writing to stdout without panicking: a closed pipe (`lbctl actions -f | head`) ends the
//! output quietly, any other write error is reported.

use std::io::Write;

use serde::Serialize;

use crate::error::CtlError;

fn write(bytes: &[u8]) -> Result<(), CtlError> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(bytes).and_then(|()| stdout.flush()).map_err(CtlError::Output)
}

/// Text as is (renderers end their lines in `\n`).
pub fn text(text: &str) -> Result<(), CtlError> {
    write(text.as_bytes())
}

/// Pretty JSON and a newline.
pub fn json<T: Serialize>(value: &T) -> Result<(), CtlError> {
    let mut s = serde_json::to_string_pretty(value).expect("lb's replies always serialise");
    s.push('\n');
    write(s.as_bytes())
}

/// One compact JSON value per line (`--follow -o json`).
pub fn json_line<T: Serialize>(value: &T) -> Result<(), CtlError> {
    let mut s = serde_json::to_string(value).expect("lb's replies always serialise");
    s.push('\n');
    write(s.as_bytes())
}
