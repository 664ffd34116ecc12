//! The pusher posts each worker's report to a real lb-agent started in-process.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lb_agent::config::AgentConfig;
use lb_common::config::shared::HttpClientConfig;
use lb_common::http::HttpClient;
use lb_common::protocol::{SamplesQuery, SamplesResponse};
use lb_testbed::Engine;
use lb_testbed::realtime::{Pusher, RealtimeOptions};

use crate::support::{scenario, step_secs};

async fn start_agent(dir: &Path, worker: &str) -> lb_agent::RunningAgent {
    let text = format!(
        "worker_id = \"{worker}\"\n[http]\nlisten = \"127.0.0.1:0\"\n[store]\npath = \"{}\"\n[host]\nenabled = false\n",
        dir.join("agent.sqlite").display()
    );
    let config: AgentConfig = lb_common::config::parse(&text, Path::new("agent.toml")).expect("agent config");
    let (_tx, rx) = tokio::sync::watch::channel(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    lb_agent::start(rx, listener, None).await.expect("agent starts")
}

#[tokio::test]
async fn reports_reach_the_agent_and_become_samples() {
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = start_agent(dir.path(), "w-0000").await;
    let extra = r#"
[[tables.workloads]]
kind = "hot_key"
ops_per_sec = 5000
key = "0000000000001234"
"#;
    let mut engine = Engine::new(&scenario(3, 4, extra));
    // Reports carry real times, as in `lb up`: the agent refuses reports older than its retention.
    engine.set_clock_origin(chrono::Utc::now().timestamp_millis() - 10_000);
    step_secs(&mut engine, 3);
    let mut options = RealtimeOptions::new("127.0.0.1:0".parse().expect("addr"));
    options.agents = BTreeMap::from([
        ("w-0000".parse().expect("id"), format!("http://{}", agent.addr())),
        // An agent that is not there: logged, not fatal.
        ("w-0001".parse().expect("id"), "http://127.0.0.1:9".to_owned()),
    ]);
    let engine = Arc::new(Mutex::new(engine));
    let pusher = Pusher::new(engine.clone(), &options);
    assert_eq!(pusher.run_once().await, 1);
    lb_testbed::http::lock(&engine).step(Duration::from_secs(1));
    assert_eq!(pusher.run_once().await, 1);

    let client = HttpClient::new(format!("http://{}", agent.addr()), &HttpClientConfig::default());
    let mut samples = Vec::new();
    for _ in 0..50 {
        let page: SamplesResponse = client
            .get_with_query("/v1/samples", &SamplesQuery { after: Default::default(), limit: Some(100) })
            .await
            .expect("samples");
        samples = page.samples;
        if !samples.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!samples.is_empty(), "the agent stored the pushed reports");
    let text = serde_json::to_string(&samples).expect("json");
    assert!(text.contains("acme.orders.p000000"), "the hot partition's samples arrived: {text:.300}");
    agent.stop(Duration::from_secs(5)).await;
}
