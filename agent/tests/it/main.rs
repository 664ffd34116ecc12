//! lb-agent's integration tests over real HTTP on loopback, in one binary.

mod crash;
mod ingest;
mod registration;
mod support;
mod valkey_source;
