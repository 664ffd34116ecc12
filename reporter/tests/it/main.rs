//! lb-reporter's integration tests: one binary (link time), a module per concern.

mod accuracy;
mod push;
mod support;
