//! lb-ops-server's integration tests over real HTTP on loopback, in one binary.

mod actions;
mod agents;
mod support;
mod testbed;
mod valkey;
