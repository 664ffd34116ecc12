//! lb-master's integration tests with real agents and a real ops server, in-process on loopback.

mod collect;
mod console;
mod hostile;
mod openapi;
mod store;
