//! lb-common's integration tests, in one binary to keep link time down.

mod config_reload;
mod http_plumbing;
mod protocol_examples;
