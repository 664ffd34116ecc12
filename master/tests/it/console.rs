//! What the web console needs from the master, over real HTTP with a real ops server: its files
//! (ETags, the redirect), the event stream (hello, passes, records; it ends with the master),
//! the ops server's halt switch and actions passed on with the caller's own token, and reads
//! behind a token when configured.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use lb_common::clients::MasterClient;
use lb_common::config::shared::HttpClientConfig;
use lb_common::config::watch::{ReloadOutcome, ReloadStatus};
use lb_common::http::ClientError;
use tokio::sync::watch;

const OPERATOR: &str = "console-operator-0001";
const VIEWER: &str = "console-viewer-00001";
const SERVICE: &str = "console-service-0001";

fn parse<C: lb_common::config::ServiceConfig>(text: &str) -> C {
    lb_common::config::parse(text, Path::new("test.toml")).expect("valid test config")
}

fn tokens() -> String {
    format!(
        "[[auth.tokens]]\nname = \"sre\"\ntoken = \"{OPERATOR}\"\nrole = \"operator\"\n\
         [[auth.tokens]]\nname = \"dash\"\ntoken = \"{VIEWER}\"\nrole = \"viewer\"\n"
    )
}

/// An ops server knowing the SRE and the master's service token, and a master in front of it.
async fn start(dir: &Path, master_extra: &str) -> (lb_ops_server::RunningOpsServer, lb_master::RunningMaster) {
    let ops: lb_ops_server::config::OpsServerConfig = parse(&format!(
        "[http]\nlisten = \"127.0.0.1:0\"\n[audit]\npath = \"{}\"\n[storage]\nurl = \"http://127.0.0.1:9\"\n{}\
         [[auth.tokens]]\nname = \"master\"\ntoken = \"{SERVICE}\"\nrole = \"service\"\n",
        dir.join("ops.sqlite").display(),
        tokens()
    ));
    let (_tx, rx) = watch::channel(Arc::new(ops));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let ops = lb_ops_server::start(rx, listener, None).await.expect("ops server");
    let master: lb_master::config::MasterConfig = parse(&format!(
        "[http]\nlisten = \"127.0.0.1:0\"\n[ops_server]\nurl = \"http://{}\"\ntoken = \"{SERVICE}\"\n\
         [store]\npath = \"{}\"\n[analyzer]\ninterval_ms = 200\n{}{master_extra}",
        ops.addr(),
        dir.join("results.sqlite").display(),
        tokens()
    ));
    let (_tx, rx) = watch::channel(Arc::new(master));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let master = lb_master::start(rx, listener, None).await.expect("master");
    (ops, master)
}

fn plain() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client")
}

#[tokio::test]
async fn the_console_is_served_from_the_binary_with_etags() {
    let dir = tempfile::tempdir().expect("dir");
    let (ops, master) = start(dir.path(), "").await;
    let base = format!("http://{}", master.addr());
    let http = plain();

    let root = http.get(format!("{base}/")).send().await.expect("/");
    assert_eq!(root.status().as_u16(), 308);
    assert_eq!(root.headers()["location"], "/console/");
    let page = http.get(format!("{base}/console/")).send().await.expect("page");
    assert_eq!(page.status().as_u16(), 200);
    assert!(page.headers()["content-type"].to_str().expect("ascii").starts_with("text/html"));
    let etag = page.headers()["etag"].clone();
    assert!(page.text().await.expect("body").contains("js/app.js"), "the shell loads the app");
    let again = http.get(format!("{base}/console/")).header("if-none-match", etag).send().await.expect("again");
    assert_eq!(again.status().as_u16(), 304, "an unchanged file is not sent again");
    let js = http.get(format!("{base}/console/js/pages/heatmap.js")).send().await.expect("js");
    assert_eq!(js.status().as_u16(), 200);
    assert!(js.headers()["content-type"].to_str().expect("ascii").contains("javascript"));
    let licence = http.get(format!("{base}/console/vendor/uplot/LICENSE")).send().await.expect("licence");
    assert_eq!(licence.status().as_u16(), 200, "the vendored library's licence ships with it");
    let missing = http.get(format!("{base}/console/nope.js")).send().await.expect("missing");
    assert_eq!(missing.status().as_u16(), 404);

    master.stop(Duration::from_secs(5)).await;
    ops.stop(Duration::from_secs(5)).await;
}

/// Reads the stream until `wanted` is in it (or 10 s pass); returns what was read.
async fn read_until(reply: &mut reqwest::Response, seen: &mut String, wanted: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !seen.contains(wanted) {
        let chunk = tokio::time::timeout_at(deadline, reply.chunk())
            .await
            .unwrap_or_else(|_| panic!("no {wanted:?} in the stream within 10 s; got {seen}"))
            .expect("chunk")
            .unwrap_or_else(|| panic!("the stream ended before {wanted:?}; got {seen}"));
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
}

#[tokio::test]
async fn the_stream_sends_hello_and_records_and_ends_with_the_master() {
    let dir = tempfile::tempdir().expect("dir");
    let (ops, master) = start(dir.path(), "").await;
    let base = format!("http://{}", master.addr());
    let mut reply = plain().get(format!("{base}/api/v1/stream")).send().await.expect("stream");
    assert_eq!(reply.status().as_u16(), 200);
    assert!(reply.headers()["content-type"].to_str().expect("ascii").starts_with("text/event-stream"));
    let mut seen = String::new();
    read_until(&mut reply, &mut seen, "event: hello\ndata: {\"pass\":").await;
    // (No pass runs here: nothing reports, so the collector is stale. The console's browser test
    // sees `pass` events drive its pages.)

    let status = ReloadStatus {
        path: "master.toml".into(),
        version: 7,
        loaded_at_ms: 1,
        last_attempt_at_ms: 1,
        last_outcome: ReloadOutcome::Initial,
        last_error: None,
        changed_fields: vec![],
    };
    master.shared.store.put_record("reload-7", 1, &status).await.expect("a record");
    read_until(&mut reply, &mut seen, "event: record\ndata: {\"kind\":\"config_reload\",\"key\":\"reload-7\"").await;

    // A console attached does not hold the master's shutdown up: its stream ends.
    let stopped = tokio::time::timeout(Duration::from_secs(8), master.stop(Duration::from_secs(5))).await;
    assert_eq!(stopped, Ok(true), "the master stops cleanly with a stream open");
    let rest =
        tokio::time::timeout(Duration::from_secs(5), async { while let Ok(Some(_)) = reply.chunk().await {} }).await;
    assert!(rest.is_ok(), "the stream ended with the master");
    ops.stop(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn halt_and_actions_pass_through_to_the_ops_server_with_the_callers_token() {
    let dir = tempfile::tempdir().expect("dir");
    let (ops, master) = start(dir.path(), "").await;
    let base = format!("http://{}", master.addr());
    let anonymous = MasterClient::new(&base, &HttpClientConfig::default());
    let viewer = MasterClient::new(&base, &HttpClientConfig::default()).with_bearer_token(VIEWER);
    let sre = MasterClient::new(&base, &HttpClientConfig::default()).with_bearer_token(OPERATOR);
    let code = |e: &ClientError| e.status().map(|s| s.as_u16());

    // Reads go with the master's own service token when the caller has none.
    let halt = anonymous.halt_status().await.expect("halt status");
    assert!(!halt.halted, "{halt:?}");
    assert!(anonymous.actions(None).await.expect("actions").is_empty());

    assert_eq!(code(&anonymous.set_halt(true, None).await.expect_err("no token")), Some(401));
    let refused = viewer.set_halt(true, None).await.expect_err("a viewer");
    assert_eq!(code(&refused), Some(403), "{refused}");
    assert!(!sre.halt_status().await.expect("status").halted, "a refused halt changed nothing");

    let halted = sre.set_halt(true, Some("console drill".to_owned())).await.expect("the operator halts");
    assert!(halted.halted && halted.halted_by_api, "{halted:?}");
    assert_eq!(halted.changed_by.as_deref(), Some("sre"), "the ops server audited the person, not the master");
    assert_eq!(halted.reason.as_deref(), Some("console drill (by sre through the master)"));
    let resumed = sre.set_halt(false, None).await.expect("resume");
    assert!(!resumed.halted, "{resumed:?}");

    master.stop(Duration::from_secs(5)).await;
    ops.stop(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn with_reads_need_token_every_read_needs_a_token_but_the_console_files_do_not() {
    let dir = tempfile::tempdir().expect("dir");
    let (ops, master) = start(dir.path(), "[auth]\nreads_need_token = true\n").await;
    let base = format!("http://{}", master.addr());
    let anonymous = MasterClient::new(&base, &HttpClientConfig::default());
    let viewer = MasterClient::new(&base, &HttpClientConfig::default()).with_bearer_token(VIEWER);

    let err = anonymous.pass().await.expect_err("no token");
    assert_eq!(err.status().map(|s| s.as_u16()), Some(401), "{err}");
    assert_eq!(plain().get(format!("{base}/api/v1/stream")).send().await.expect("stream").status().as_u16(), 401);
    viewer.pass().await.expect("a viewer reads");
    let page = plain().get(format!("{base}/console/")).send().await.expect("page");
    assert_eq!(page.status().as_u16(), 200, "the console loads, then asks for a token");

    master.stop(Duration::from_secs(5)).await;
    ops.stop(Duration::from_secs(5)).await;
}
