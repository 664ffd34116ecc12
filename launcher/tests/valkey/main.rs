//! lb-launcher's end-to-end tests against real Valkey clusters, in a binary of their own: each
//! runs three or four `valkey-server` processes, an agent per node, the ops server, the master and a
//! load generator, which starves anything that shares the machine's two cores with it. Cargo
//! runs test binaries one after the other, so these never overlap the testbed's own
//! end-to-end runs in `it` (whose hot-range relief, timed against a 60 s budget, once missed it
//! while sharing the cores with them).

mod attach;
mod missing_load;
mod valkey_e2e;
