//! lb-launcher's browser tests, in a binary of their own: pages driven in a real headless
//! Chromium over the DevTools protocol. `browser` is the client (it installs Debian's Chromium
//! when it is missing); `harness` proves it against a tiny page served by the test itself, so
//! the web console's tests can trust its clicks, waits and error reports; `e2e` is the console itself
//! against a running system.

mod browser;
mod e2e;
mod harness;
#[path = "../support/install.rs"]
mod install;
