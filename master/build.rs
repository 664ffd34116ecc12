//! The console's files are embedded by `rust-embed`; a file added to or removed from
//! `dashboards/console/` must rebuild the master too, not only an edited one.
fn main() {
    println!("cargo:rerun-if-changed=../dashboards/console");
}
