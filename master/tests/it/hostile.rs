//! The hostile-input suite (issue 17): every endpoint of the agent, the ops server and the
//! master, with tokens configured as in production, gets malformed JSON, arrays for objects,
//! wrong types, extremes, oversized bodies, injection strings, bad paths and queries, and
//! missing or garbage credentials. Each must be refused with a 4xx and the shared error body —
//! never a 2xx, never a 5xx, never an empty or plain-text reply — and must change nothing: the
//! servers stay up, no action is recorded, no agent is registered.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use lb_common::protocol::{ActionsResponse, AgentsResponse, ErrorBody};
use tokio::sync::watch;

const STOP: Duration = Duration::from_secs(20);
const SERVICE: &str = "hostile-service-token-0001";
const AGENT: &str = "hostile-agent-token-000001";
const OPERATOR: &str = "hostile-operator-token-001";
const VIEWER: &str = "hostile-viewer-token-00001";

fn parse<C: lb_common::config::ServiceConfig>(text: &str) -> C {
    lb_common::config::parse(text, Path::new("test.toml")).expect("valid test config")
}

/// One hostile request: method, path (with query), bearer token, content type, body.
struct Case {
    what: String,
    method: &'static str,
    path: String,
    token: Option<&'static str>,
    content_type: Option<&'static str>,
    body: Vec<u8>,
}

fn case(what: impl Into<String>, method: &'static str, path: impl Into<String>, token: Option<&'static str>) -> Case {
    Case { what: what.into(), method, path: path.into(), token, content_type: None, body: Vec::new() }
}

fn json(what: impl Into<String>, path: &str, token: Option<&'static str>, body: impl Into<Vec<u8>>) -> Case {
    Case {
        what: what.into(),
        method: "POST",
        path: path.to_owned(),
        token,
        content_type: Some("application/json"),
        body: body.into(),
    }
}

/// Bodies every JSON endpoint must refuse, whatever its type.
fn hostile_bodies(limit_bytes: usize) -> Vec<(&'static str, Vec<u8>)> {
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    vec![
        ("an empty body", Vec::new()),
        ("malformed JSON", b"{\"a\": ".to_vec()),
        ("an array for an object", b"[]".to_vec()),
        ("a positional object", b"[false, \"x\", 1]".to_vec()),
        ("a string for an object", b"\"halted\"".to_vec()),
        ("null", b"null".to_vec()),
        ("wrong field types", b"{\"worker_id\": 7, \"halted\": \"yes\", \"id\": [], \"spec\": 1}".to_vec()),
        ("an unknown field only", b"{\"'; DROP TABLE samples;--\": 1}".to_vec()),
        ("numbers past every range", b"{\"seq\": 18446744073709551616, \"timestamp_ms\": 1e400}".to_vec()),
        ("deep nesting", deep.into_bytes()),
        ("invalid UTF-8", b"{\"worker_id\": \"\xff\xfe\"}".to_vec()),
        ("a NUL in a string", b"{\"worker_id\": \"w\\u0000-1\"}".to_vec()),
        ("oversized", format!("{{\"pad\": \"{}\"}}", "x".repeat(limit_bytes + 1)).into_bytes()),
    ]
}

/// Queries and paths every read must refuse.
fn hostile_reads(base: &str) -> Vec<String> {
    [
        "?after=abc",
        "?after=-1",
        "?limit=99999999999999999999999",
        "?from_ms=1&to_ms=%FF",
        "?window_secs=1e400",
        "?metric=%3Cscript%3Ealert(1)%3C/script%3E",
        "?unknown_field=1",
    ]
    .iter()
    .map(|q| format!("{base}{q}"))
    .collect()
}

#[tokio::test]
async fn every_endpoint_refuses_hostile_input_with_the_error_body_and_changes_nothing() {
    lb_common::telemetry::metrics_handle();
    let dir = tempfile::tempdir().expect("dir");
    let limit = 65_536;
    let ops_config: lb_ops_server::config::OpsServerConfig = parse(&format!(
        "[http]\nlisten = \"127.0.0.1:0\"\nbody_limit_bytes = {limit}\n[audit]\npath = \"{}\"\n\
         [storage]\nurl = \"http://127.0.0.1:9\"\n[limits]\nrequests_per_sec = 100000\n\
         [[auth.tokens]]\nname = \"master\"\ntoken = \"{SERVICE}\"\nrole = \"service\"\n\
         [[auth.tokens]]\nname = \"agents\"\ntoken = \"{AGENT}\"\nrole = \"agent\"\n\
         [[auth.tokens]]\nname = \"sre\"\ntoken = \"{OPERATOR}\"\nrole = \"operator\"\n\
         [[auth.tokens]]\nname = \"dash\"\ntoken = \"{VIEWER}\"\nrole = \"viewer\"\n",
        dir.path().join("ops.sqlite").display()
    ));
    let (_ops_tx, rx) = watch::channel(Arc::new(ops_config));
    let ops = lb_ops_server::start(rx, tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind"), None)
        .await
        .expect("ops server");
    let ops_url = format!("http://{}", ops.addr());
    let agent_config: lb_agent::config::AgentConfig = parse(&format!(
        "worker_id = \"w-1\"\n[http]\nlisten = \"127.0.0.1:0\"\nbody_limit_bytes = {limit}\n[store]\npath = \"{}\"\n\
         [host]\nenabled = false\n[ops_server]\nurl = \"{ops_url}\"\ntoken = \"{AGENT}\"\n",
        dir.path().join("agent.sqlite").display()
    ));
    let (_agent_tx, rx) = watch::channel(Arc::new(agent_config));
    let agent = lb_agent::start(rx, tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind"), None)
        .await
        .expect("agent");
    let agent_url = format!("http://{}", agent.addr());
    let master_config: lb_master::config::MasterConfig = parse(&format!(
        "[http]\nlisten = \"127.0.0.1:0\"\nbody_limit_bytes = {limit}\n[ops_server]\nurl = \"{ops_url}\"\n\
         token = \"{SERVICE}\"\n[store]\npath = \"{}\"\n\
         [collector]\ninterval_ms = 200\nstale_after_ms = 2000\ntopology_interval_ms = 3600000\n\
         [[auth.tokens]]\nname = \"sre\"\ntoken = \"{OPERATOR}\"\nrole = \"operator\"\n\
         [[auth.tokens]]\nname = \"dash\"\ntoken = \"{VIEWER}\"\nrole = \"viewer\"\n",
        dir.path().join("master.sqlite").display()
    ));
    let (_master_tx, rx) = watch::channel(Arc::new(master_config));
    let master = lb_master::start(rx, tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind"), None)
        .await
        .expect("master");
    let master_url = format!("http://{}", master.addr());

    // Wait for the real agent to register, so "no agent was registered" below means something.
    let client = reqwest::Client::new();
    let registered = || async {
        let reply = client.get(format!("{ops_url}/v1/agents")).bearer_auth(VIEWER).send().await.expect("agents");
        reply.json::<AgentsResponse>().await.expect("agents body").agents
    };
    for _ in 0..100 {
        if !registered().await.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(registered().await.len(), 1, "the real agent registered");

    let mut cases: Vec<(String, Case)> = Vec::new();
    // Every JSON body endpoint, with the token that may call it, gets every hostile body.
    let writes: [(&str, &str, Option<&'static str>); 9] = [
        (&agent_url, "/v1/report", None),
        (&ops_url, "/v1/agents/register", Some(AGENT)),
        (&ops_url, "/v1/agents/heartbeat", Some(AGENT)),
        (&ops_url, "/v1/collect", Some(SERVICE)),
        (&ops_url, "/v1/actions", Some(OPERATOR)),
        (&ops_url, "/v1/halt", Some(OPERATOR)),
        (&master_url, "/api/v1/actions", Some(OPERATOR)),
        (&master_url, "/api/v1/halt", Some(OPERATOR)),
        (&agent_url, "/v1/report", Some(OPERATOR)),
    ];
    for (base, path, token) in writes {
        for (what, body) in hostile_bodies(limit) {
            cases.push((base.to_owned(), json(format!("{path}: {what}"), path, token, body)));
        }
        let mut wrong_type = json(format!("{path}: declared text/plain"), path, token, b"{}".to_vec());
        wrong_type.content_type = Some("text/plain");
        cases.push((base.to_owned(), wrong_type));
        cases.push((base.to_owned(), case(format!("{path}: GET on a POST route"), "DELETE", path, token)));
    }
    // Missing and garbage credentials on every guarded write and read.
    let long_token: &'static str = Box::leak("t".repeat(10_000).into_boxed_str());
    let guarded: [(&str, &str, &str); 9] = [
        (&ops_url, "POST", "/v1/actions"),
        (&ops_url, "POST", "/v1/halt"),
        (&ops_url, "POST", "/v1/agents/register"),
        (&ops_url, "POST", "/v1/collect"),
        (&ops_url, "GET", "/v1/actions"),
        (&ops_url, "GET", "/v1/agents"),
        (&ops_url, "POST", "/v1/actions/a-1/cancel"),
        (&master_url, "POST", "/api/v1/halt"),
        (&master_url, "POST", "/api/v1/proposals/p-1/approve"),
    ];
    for (base, method, path) in guarded {
        for (what, token) in [
            ("no token", None),
            ("an unknown token", Some("hostile-unknown-token-0001")),
            ("a long token", Some(long_token)),
        ] {
            let method = if method == "GET" { "GET" } else { "POST" };
            let mut c = json(format!("{method} {path}: {what}"), path, token, b"{}".to_vec());
            c.method = method;
            cases.push((base.to_owned(), c));
        }
        let mut viewer = json(format!("{method} {path}: a viewer's token"), path, Some(VIEWER), b"{}".to_vec());
        viewer.method = if method == "GET" { "GET" } else { "POST" };
        if viewer.method == "POST" {
            cases.push((base.to_owned(), viewer));
        }
    }
    // Bad queries and paths on the reads.
    let reads: [(&str, &str, Option<&'static str>); 11] = [
        (&agent_url, "/v1/samples", None),
        (&agent_url, "/v1/rollups", None),
        (&ops_url, "/v1/actions", Some(VIEWER)),
        (&master_url, "/api/v1/overview", None),
        (&master_url, "/api/v1/workers", None),
        (&master_url, "/api/v1/partitions", None),
        (&master_url, "/api/v1/top", None),
        (&master_url, "/api/v1/heatmap", None),
        (&master_url, "/api/v1/cluster/history", None),
        (&master_url, "/api/v1/records/action", None),
        (&master_url, "/api/v1/actions", None),
    ];
    for (base, path, token) in reads {
        for target in hostile_reads(path) {
            cases.push((base.to_owned(), case(format!("GET {target}"), "GET", target, token)));
        }
    }
    for (base, path, token) in [
        (&ops_url, "/v1/actions/..%2F..%2Fetc%2Fpasswd", Some(VIEWER)),
        (&ops_url, "/v1/actions/%00", Some(VIEWER)),
        (&ops_url, "/v1/actions/%FF%FE/events", Some(VIEWER)),
        (&master_url, "/api/v1/partitions/%3Cscript%3E/history", None),
        (&master_url, "/api/v1/records/%27%3B%20DROP%20TABLE%20records%3B--", None),
        (&master_url, "/api/v1/records/action/%FF", None),
        (&agent_url, "/v1/nothing-here", None),
    ] {
        cases.push((base.to_owned(), case(format!("GET {path}"), "GET", path, token)));
    }
    let long_id = format!("/v1/actions/{}", "a".repeat(200));
    cases.push((ops_url.clone(), case("an id over 128 bytes", "GET", long_id, Some(VIEWER))));

    let mut failures = Vec::new();
    for (base, c) in &cases {
        let method = reqwest::Method::from_bytes(c.method.as_bytes()).expect("method");
        let mut request = client.request(method, format!("{base}{}", c.path)).body(c.body.clone());
        if let Some(token) = c.token {
            request = request.bearer_auth(token);
        }
        if let Some(content_type) = c.content_type {
            request = request.header("content-type", content_type);
        }
        let reply = match request.send().await {
            Ok(reply) => reply,
            Err(error) => {
                failures.push(format!("{}: no reply ({error})", c.what));
                continue;
            }
        };
        let status = reply.status();
        let content_type = reply.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        let text = reply.text().await.unwrap_or_default();
        let body = serde_json::from_str::<ErrorBody>(&text);
        if !status.is_client_error() {
            failures.push(format!("{}: {status}, not a 4xx: {}", c.what, &text[..text.len().min(200)]));
        } else if !content_type.starts_with("application/json") || body.as_ref().map_or(true, |b| b.code.is_empty()) {
            failures.push(format!("{}: {status} without the error body: {:?}", c.what, &text[..text.len().min(200)]));
        } else if text.len() > 4096 {
            failures.push(format!("{}: a {} byte error body echoes the input", c.what, text.len()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} hostile requests misanswered:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );

    // Free text over the contract's limits on bodies that are otherwise valid: each is a 422
    // naming the field (a 4xx for another reason would not show the limit holds).
    let long = "x".repeat(5_000);
    for (base, path, token, body, field) in [
        (&ops_url, "/v1/halt", OPERATOR, format!("{{\"halted\": true, \"reason\": \"{long}\"}}"), "reason"),
        (&master_url, "/api/v1/halt", OPERATOR, format!("{{\"halted\": true, \"reason\": \"{long}\"}}"), "reason"),
        (&ops_url, "/v1/fencing", SERVICE, format!("{{\"leader_epoch\": 9, \"leader\": \"{long}\"}}"), "leader"),
        (
            &ops_url,
            "/v1/agents/heartbeat",
            AGENT,
            format!("{{\"worker_id\": \"w-1\", \"latest_cursor\": 0, \"address\": \"http://{long}\"}}"),
            "address",
        ),
    ] {
        let reply = client
            .post(format!("{base}{path}"))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("reply");
        let status = reply.status().as_u16();
        let error: ErrorBody = reply.json().await.expect("error body");
        assert_eq!((status, error.field.as_deref()), (422, Some(field)), "{path}: 5,000 bytes of {field}: {error:?}");
    }

    // Nothing changed, and everything is still up.
    for base in [&agent_url, &ops_url, &master_url] {
        let live = client.get(format!("{base}/live")).send().await.expect("live");
        assert_eq!(live.status().as_u16(), 200, "{base} survived");
    }
    let actions = client.get(format!("{ops_url}/v1/actions")).bearer_auth(VIEWER).send().await.expect("actions");
    assert!(actions.json::<ActionsResponse>().await.expect("actions body").actions.is_empty(), "no action recorded");
    let agents = registered().await;
    assert_eq!(agents.len(), 1, "no agent registered: {agents:?}");
    let halt = client.get(format!("{ops_url}/v1/halt")).bearer_auth(VIEWER).send().await.expect("halt");
    let halt: serde_json::Value = halt.json().await.expect("halt body");
    assert_eq!(halt["halted"], false, "the executor was not halted");
    let fencing = client.get(format!("{ops_url}/v1/fencing")).bearer_auth(VIEWER).send().await.expect("fencing");
    let fencing: serde_json::Value = fencing.json().await.expect("fencing body");
    assert!(fencing["newest_epoch"].is_null(), "no leadership term announced: {fencing}");
    assert!(master.stop(STOP).await && agent.stop(STOP).await && ops.stop(STOP).await);
}
