//! lbctl's integration tests, in one binary: the renderers on fixed data against snapshots,
//! and the `lbctl` binary as a process — alone (usage errors, unreachable servers, config
//! precedence, completions) and against a running system started in-process with
//! `lb_launcher::up::up_with`, over real HTTP.

mod alone;
mod fixtures;
mod snapshots;
mod support;
mod system;
