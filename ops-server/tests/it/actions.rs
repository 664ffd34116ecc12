//! Actions end to end over real HTTP: every kind, every failure path, idempotency, limits and
//! fairness under a burst, restart, and bad input.

use std::sync::Arc;
use std::time::Duration;

use lb_common::http::ClientError;
use lb_common::ids::Key;
use lb_common::protocol::*;
use reqwest::StatusCode;

use crate::support::*;

#[tokio::test]
async fn every_kind_succeeds_end_to_end_and_is_audited() {
    let dir = tempfile::tempdir().expect("dir");
    let (storage, url) = fake_storage().await;
    let s = start(config(dir.path(), &url, "")).await;
    let specs = vec![
        ("a-split", split("p1")),
        ("a-move", mv("p3", "w-1")),
        (
            "a-merge",
            ActionSpec::Merge { left: "p1".parse().expect("id"), right: "p2".parse().expect("id"), to_worker: None },
        ),
        (
            "a-group",
            ActionSpec::Group {
                target: GroupTarget::Partition { partition: "p3".parse().expect("id") },
                group: "iso".parse().expect("id"),
            },
        ),
        (
            "a-reshard",
            ActionSpec::Reshard {
                tenant: "acme".parse().expect("id"),
                dataset: "profiles".parse().expect("id"),
                tenant_shards: 8,
                dataset_shards: 4,
                load_balancing: LoadBalancing::Fingerprint,
            },
        ),
    ];
    for (id, spec) in &specs {
        let record: ActionRecord =
            s.master.post("/v1/actions", &action(id, spec.clone(), "acme")).await.expect("accepted");
        assert_eq!((record.state, record.submitted_by.as_str()), (ActionState::Queued, "master"));
    }
    for (id, _) in &specs {
        let record = wait_done(&s.viewer, id).await;
        assert_eq!(record.state, ActionState::Succeeded, "{id}: {record:?}");
        assert!(record.operation_id.is_some() && record.started_at_ms.is_some() && record.finished_at_ms.is_some());
    }
    let events: serde_json::Value = s.viewer.get("/v1/actions/a-move/events").await.expect("events");
    let states: Vec<&str> =
        events["events"].as_array().expect("list").iter().map(|e| e["state"].as_str().unwrap_or("")).collect();
    assert_eq!(states, ["queued", "running", "running", "succeeded"], "submitted, started, operation accepted, done");
    assert_eq!(events["events"][0]["actor"], "master");
    assert_eq!(storage.submissions.lock().expect("lock").len(), 5);
    let topology: Topology = s.viewer.get("/v1/topology").await.expect("topology through the ops server");
    assert_eq!(topology.partitions.len(), 7, "p1..p3 and the four behaviour partitions");
    assert!(s.server.stop(STOP).await);
}

#[tokio::test]
async fn failing_stalling_timing_out_and_rejected_operations_end_in_the_right_state() {
    let dir = tempfile::tempdir().expect("dir");
    let (_storage, url) = fake_storage().await;
    let s = start(config(dir.path(), &url, "")).await;
    for (id, spec) in [
        ("f-fail", split("fail1")),
        ("f-stall", split("stall1")),
        ("f-slow", mv("slow1", "w-2")),
        ("f-reject", split("reject1")),
    ] {
        s.master.post::<_, ActionRecord>("/v1/actions", &action(id, spec, "acme")).await.expect("accepted");
    }
    let failed = wait_done(&s.viewer, "f-fail").await;
    assert_eq!(failed.state, ActionState::Failed);
    let f = failed.failure.expect("failure");
    assert_eq!((f.execution, f.message.as_str()), (Execution::NotExecuted, "disk full on target"));

    let stalled = wait_done(&s.viewer, "f-stall").await;
    assert_eq!(stalled.state, ActionState::Failed);
    let f = stalled.failure.expect("failure");
    assert!(f.message.starts_with("stalled"), "{}", f.message);
    assert_eq!(f.execution, Execution::MaybeExecuted);

    let slow = wait_done(&s.viewer, "f-slow").await;
    assert_eq!(slow.state, ActionState::TimedOut, "progress without end hits the move timeout: {slow:?}");
    assert_eq!(slow.failure.expect("failure").execution, Execution::MaybeExecuted);

    let rejected = wait_done(&s.viewer, "f-reject").await;
    assert_eq!(rejected.state, ActionState::Failed);
    let f = rejected.failure.expect("failure");
    assert_eq!(f.execution, Execution::NotExecuted);
    assert!(f.message.contains("422"), "{}", f.message);
    assert!(s.server.stop(STOP).await);
}

#[tokio::test]
async fn an_older_leader_epoch_is_refused_with_409_audited_and_kept_across_a_restart() {
    let dir = tempfile::tempdir().expect("dir");
    let (storage, url) = fake_storage().await;
    let s = start(config(dir.path(), &url, "")).await;
    let announce = |epoch: u64| FencingRequest { leader_epoch: epoch, leader: "http://m-b:7400".to_owned() };
    let status: FencingStatus = s.master.post("/v1/fencing", &announce(7)).await.expect("announced");
    assert_eq!(status.newest_epoch, Some(7));
    // Announcing needs the master's service role.
    let err = s.sre.post::<_, FencingStatus>("/v1/fencing", &announce(8)).await.unwrap_err();
    assert_eq!(err.status(), Some(StatusCode::FORBIDDEN));
    let current = ActionRequest { leader_epoch: Some(7), ..action("lb-2-1", split("p1"), "acme") };
    s.master.post::<_, ActionRecord>("/v1/actions", &current).await.expect("the current term acts");
    let stale = ActionRequest { leader_epoch: Some(5), ..action("lb-1-9", split("p2"), "acme") };
    let err = s.master.post::<_, ActionRecord>("/v1/actions", &stale).await.unwrap_err();
    assert_eq!(err.status(), Some(StatusCode::CONFLICT));
    assert!(err.to_string().contains("stale_epoch"), "{err}");
    let err = s.master.post::<_, FencingStatus>("/v1/fencing", &announce(6)).await.unwrap_err();
    assert_eq!(err.status(), Some(StatusCode::CONFLICT));
    // Unfenced submissions (lbctl, a single master) are not affected.
    s.sre.post::<_, ActionRecord>("/v1/actions", &action("m-1", mv("p3", "w-1"), "acme")).await.expect("unfenced");
    let err = s.viewer.get::<ActionRecord>("/v1/actions/lb-1-9").await.unwrap_err();
    assert_eq!(err.status(), Some(StatusCode::NOT_FOUND), "a refused action is not in the book");
    let status: FencingStatus = s.viewer.get("/v1/fencing").await.expect("status");
    assert_eq!(status.refused.len(), 2, "{status:?}");
    assert_eq!(status.refused[1].action_id.as_ref().map(|a| a.as_str()), Some("lb-1-9"));
    assert_eq!(status.refused[0].action_id, None, "the refused announcement");
    let metrics = reqwest::get(format!("http://{}/metrics", s.server.addr())).await.expect("metrics");
    let metrics = metrics.text().await.expect("text");
    assert!(metrics.contains("lb_ops_stale_epoch_refusals_total 2"), "{metrics}");
    assert!(s.server.stop(STOP).await);
    drop(storage);

    let (_storage, url) = fake_storage().await;
    let s = start(config(dir.path(), &url, "")).await;
    let status: FencingStatus = s.viewer.get("/v1/fencing").await.expect("status");
    assert_eq!((status.newest_epoch, status.refused.len()), (Some(7), 2), "kept in the audit log");
    let err = s.master.post::<_, ActionRecord>("/v1/actions", &stale).await.unwrap_err();
    assert_eq!(err.status(), Some(StatusCode::CONFLICT), "still fenced after a restart");
    assert!(s.server.stop(STOP).await);
}

#[tokio::test]
async fn duplicate_submissions_run_once_and_conflicting_ones_are_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let (storage, url) = fake_storage().await;
    let s = start(config(dir.path(), &url, "")).await;
    let request = action("dup-1", split("p1"), "acme");
    let mut submits = Vec::new();
    for _ in 0..10 {
        let client = s.master.clone();
        let request = request.clone();
        submits.push(tokio::spawn(async move { client.post::<_, ActionRecord>("/v1/actions", &request).await }));
    }
    for submit in submits {
        assert_eq!(submit.await.expect("join").expect("accepted").request, request);
    }
    assert_eq!(wait_done(&s.viewer, "dup-1").await.state, ActionState::Succeeded);
    // A retry after completion returns the finished record and runs nothing.
    let again: ActionRecord = s.master.post("/v1/actions", &request).await.expect("idempotent");
    assert_eq!(again.state, ActionState::Succeeded);
    assert_eq!(storage.submissions.lock().expect("lock").values().copied().collect::<Vec<_>>(), [1]);

    let mut different = request.clone();
    different.spec = split("p2");
    let err = s.master.post::<_, ActionRecord>("/v1/actions", &different).await.unwrap_err();
    assert_eq!(err.status(), Some(StatusCode::CONFLICT));
    assert!(s.server.stop(STOP).await);
}

#[tokio::test]
async fn a_burst_from_two_tenants_respects_limits_and_does_not_starve_the_small_one() {
    let dir = tempfile::tempdir().expect("dir");
    let (storage, url) = fake_storage().await;
    // Halted while the burst is queued, so the queue alone decides the order.
    let extra = "[limits]\nrequests_per_sec = 100000\n";
    let mut cfg = config(dir.path(), &url, extra);
    cfg.executor.halted = true;
    cfg.executor.max_concurrent = 2;
    cfg.executor.max_concurrent_per_worker = 1;
    cfg.executor.poll_interval_ms = 10;
    let s = start(cfg.clone()).await;
    let mut ids = Vec::new();
    for i in 0..990 {
        // The storm: all on w-1 (p1, p2) or w-2 (p3).
        let partition = ["p1", "p2", "p3"][i % 3];
        let id = format!("big-{i:04}");
        s.master
            .post::<_, ActionRecord>("/v1/actions", &action(&id, split(partition), "bigcorp"))
            .await
            .expect("accepted");
        ids.push(id);
    }
    for i in 0..10 {
        let id = format!("small-{i:02}");
        s.master
            .post::<_, ActionRecord>("/v1/actions", &action(&id, mv("p3", "w-2"), "smallco"))
            .await
            .expect("accepted");
    }
    let halt: serde_json::Value = s.viewer.get("/v1/halt").await.expect("halt status");
    assert_eq!((halt["halted"].as_bool(), halt["queued"].as_u64()), (Some(true), Some(1000)));
    cfg.executor.halted = false;
    s.config.send_replace(std::sync::Arc::new(cfg));

    // Every small action finishes while most of the storm is still waiting.
    for i in 0..10 {
        assert_eq!(wait_done(&s.viewer, &format!("small-{i:02}")).await.state, ActionState::Succeeded);
    }
    let done = |records: &[ActionRecord]| records.iter().filter(|r| r.state.is_terminal()).count();
    let all: ActionsResponse = s.viewer.get("/v1/actions").await.expect("list");
    let big_done =
        done(&all.actions.iter().filter(|r| r.request.id.as_str().starts_with("big")).cloned().collect::<Vec<_>>());
    assert!(big_done < 100, "the small tenant waited behind {big_done} of the big tenant's actions");
    for id in ids.iter().rev().take(5) {
        assert_eq!(wait_done(&s.viewer, id).await.state, ActionState::Succeeded);
    }
    let (all_at_once, on_w1) = storage.max_overlap();
    assert!(all_at_once <= 2, "cluster-wide limit held: {all_at_once}");
    assert_eq!(on_w1, 1, "per-worker limit held");
    assert!(s.server.stop(STOP).await);
}

#[tokio::test]
async fn queue_limit_gives_429_and_queued_actions_can_be_cancelled() {
    let dir = tempfile::tempdir().expect("dir");
    let (storage, url) = fake_storage().await;
    let mut cfg = config(dir.path(), &url, "");
    cfg.executor.halted = true;
    cfg.executor.max_queued_per_tenant = 3;
    let s = start(cfg.clone()).await;
    for i in 0..3 {
        s.sre
            .post::<_, ActionRecord>("/v1/actions", &action(&format!("q-{i}"), split("p1"), "acme"))
            .await
            .expect("accepted");
    }
    let err = s.sre.post::<_, ActionRecord>("/v1/actions", &action("q-3", split("p1"), "acme")).await.unwrap_err();
    assert_eq!(err.status(), Some(StatusCode::TOO_MANY_REQUESTS));
    let missing = s.viewer.get::<ActionRecord>("/v1/actions/q-3").await.unwrap_err();
    assert_eq!(missing.status(), Some(StatusCode::NOT_FOUND), "a refused action leaves no trace");
    // Another tenant still gets in.
    s.sre.post::<_, ActionRecord>("/v1/actions", &action("other-0", split("p3"), "globex")).await.expect("accepted");

    let cancelled: ActionRecord = s.sre.post("/v1/actions/q-1/cancel", &()).await.expect("cancel");
    assert_eq!(cancelled.state, ActionState::Cancelled);
    let twice = s.sre.post::<_, ActionRecord>("/v1/actions/q-1/cancel", &()).await.unwrap_err();
    assert_eq!(twice.status(), Some(StatusCode::CONFLICT));
    // The API switch cannot lift a halt the config file holds: both must be off.
    let halt: serde_json::Value = s.sre.post("/v1/halt", &serde_json::json!({"halted": false})).await.expect("unhalt");
    assert_eq!((halt["halted"].as_bool(), halt["halted_by_config"].as_bool()), (Some(true), Some(true)));
    cfg.executor.halted = false;
    s.config.send_replace(std::sync::Arc::new(cfg));
    assert_eq!(wait_done(&s.viewer, "q-2").await.state, ActionState::Succeeded);
    assert_eq!(wait_done(&s.viewer, "q-1").await.state, ActionState::Cancelled);
    assert!(!storage.submissions.lock().expect("lock").contains_key(&"q-1".parse().expect("id")), "never ran");
    assert!(s.server.stop(STOP).await);
}

/// Issue 17 item 11: with the executor halted, cancelled actions still counted against the
/// tenant's queue limit (nothing took them off the fair queue), so the next submit got 429.
#[tokio::test]
async fn cancelled_queued_actions_free_their_place_in_the_tenants_queue() {
    let dir = tempfile::tempdir().expect("dir");
    let (storage, url) = fake_storage().await;
    let mut cfg = config(dir.path(), &url, "");
    cfg.executor.halted = true;
    cfg.executor.max_queued_per_tenant = 2;
    let s = start(cfg.clone()).await;
    for i in 0..2 {
        let id = format!("c-{i}");
        s.sre.post::<_, ActionRecord>("/v1/actions", &action(&id, split("p1"), "acme")).await.expect("accepted");
        let cancelled: ActionRecord = s.sre.post(&format!("/v1/actions/{id}/cancel"), &()).await.expect("cancel");
        assert_eq!(cancelled.state, ActionState::Cancelled);
    }
    let halt: HaltStatus = s.viewer.get("/v1/halt").await.expect("halt status");
    assert_eq!(halt.queued, 0, "cancelled actions are off the queue");
    for i in 2..4 {
        let id = format!("c-{i}");
        s.sre.post::<_, ActionRecord>("/v1/actions", &action(&id, split("p1"), "acme")).await.expect("room again");
    }
    cfg.executor.halted = false;
    s.config.send_replace(std::sync::Arc::new(cfg));
    assert_eq!(wait_done(&s.viewer, "c-3").await.state, ActionState::Succeeded);
    let ran = storage.submissions.lock().expect("lock").keys().map(ToString::to_string).collect::<Vec<_>>();
    assert!(!ran.iter().any(|id| id == "c-0" || id == "c-1"), "a cancelled action never runs: {ran:?}");
    assert!(s.server.stop(STOP).await);
}

#[tokio::test]
async fn restart_keeps_the_audit_and_the_queue() {
    let dir = tempfile::tempdir().expect("dir");
    let (_storage, url) = fake_storage().await;
    let s = start(config(dir.path(), &url, "")).await;
    s.master.post::<_, ActionRecord>("/v1/actions", &action("r-1", split("p1"), "acme")).await.expect("accepted");
    assert_eq!(wait_done(&s.viewer, "r-1").await.state, ActionState::Succeeded);
    let _: serde_json::Value = s.sre.post("/v1/halt", &serde_json::json!({"halted": true})).await.expect("halt");
    s.master.post::<_, ActionRecord>("/v1/actions", &action("r-2", split("p2"), "acme")).await.expect("accepted");
    assert!(s.server.stop(STOP).await);

    let s = start(config(dir.path(), &url, "")).await;
    let r1: ActionRecord = s.viewer.get("/v1/actions/r-1").await.expect("audit kept");
    assert_eq!(r1.state, ActionState::Succeeded);
    let events: serde_json::Value = s.viewer.get("/v1/actions/r-1/events").await.expect("events");
    assert_eq!(events["events"].as_array().map(Vec::len), Some(4));
    // The queued action survived the restart (the API halt did not: it is runtime state).
    assert_eq!(wait_done(&s.viewer, "r-2").await.state, ActionState::Succeeded);
    assert!(s.server.stop(STOP).await);
}

#[tokio::test]
async fn bad_input_gets_4xx_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("dir");
    let (storage, url) = fake_storage().await;
    let s = start(config(dir.path(), &url, "")).await;
    let raw = reqwest::Client::new();
    let endpoint = format!("http://{}/v1/actions", s.server.addr());
    let post = |body: String| {
        raw.post(&endpoint).bearer_auth(MASTER_TOKEN).header("content-type", "application/json").body(body).send()
    };
    let good = serde_json::to_value(action("b-1", split("p1"), "acme")).expect("json");
    let cases = [
        ("{not json".to_owned(), StatusCode::BAD_REQUEST),
        (good.to_string().replace("\"split\"", "\"explode\""), StatusCode::UNPROCESSABLE_ENTITY),
        (good.to_string().replace("\"partition\":\"p1\",", ""), StatusCode::UNPROCESSABLE_ENTITY),
        (format!("{{\"pad\": \"{}\"}}", "x".repeat(70_000)), StatusCode::PAYLOAD_TOO_LARGE),
        (good.to_string().replace("\"reason\":\"test\"", "\"reason\":\" \""), StatusCode::UNPROCESSABLE_ENTITY),
        (good.to_string().replace("[\"acme\",\"orders\"]", "[\"acme\",\"\"]"), StatusCode::UNPROCESSABLE_ENTITY),
        (
            good.to_string().replace("[\"acme\",\"orders\"]", "[\"a\",\"b\",\"c\",\"d\",\"e\"]"),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ];
    for (body, status) in cases {
        let reply = post(body.clone()).await.expect("reply");
        assert_eq!(reply.status(), status, "{}", &body[..body.len().min(120)]);
        let err: ErrorBody = reply.json().await.expect("error body");
        assert!(!err.code.is_empty());
    }
    let split_zero = ActionRequest {
        spec: ActionSpec::Split { partition: "p1".parse().expect("id"), split_key: Key(0) },
        ..action("b-2", split("p1"), "acme")
    };
    let err = s.master.post::<_, ActionRecord>("/v1/actions", &split_zero).await.unwrap_err();
    assert!(matches!(&err, ClientError::Status { body, .. } if body.error.contains("spec.split_key")), "{err}");
    // Issue 17: actions the storage would refuse a second later are refused at submission,
    // against the topology, with the field and why.
    let refused = [
        (mv("nope", "w-2"), "spec.partition"),
        (mv("p1", "w-9"), "spec.to_worker"),
        (mv("p1", "w-1"), "already owns"),
        (ActionSpec::Split { partition: "p2".parse().expect("id"), split_key: Key(50) }, "strictly inside"),
        (
            ActionSpec::Merge { left: "p1".parse().expect("id"), right: "p3".parse().expect("id"), to_worker: None },
            "right after left",
        ),
        (
            ActionSpec::Merge {
                left: "p1".parse().expect("id"),
                right: "p2".parse().expect("id"),
                to_worker: Some("w-9".parse().expect("id")),
            },
            "spec.to_worker = w-9: must own left or right (they are on w-1 and w-1)",
        ),
    ];
    for (i, (spec, why)) in refused.into_iter().enumerate() {
        let request = action(&format!("b-topo-{i}"), spec, "acme");
        let err = s.master.post::<_, ActionRecord>("/v1/actions", &request).await.expect_err("refused");
        assert!(
            matches!(&err, ClientError::Status { status, body, .. } if status.as_u16() == 422 && body.error.contains(why)),
            "{why}: {err}"
        );
    }
    let listed: ActionsResponse = s.viewer.get("/v1/actions").await.expect("list");
    assert!(listed.actions.is_empty(), "nothing was recorded");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(storage.submissions.lock().expect("lock").is_empty(), "nothing ran");
    assert!(s.server.stop(STOP).await);
}

/// `[limits]`'s free-text limits (issue 17): the contract's ceilings by default, lower where
/// configured, live on reload; a refusal names the field and the limit, and changes nothing.
#[tokio::test]
async fn free_text_over_the_configured_limits_is_refused_and_the_limits_reload_live() {
    let dir = tempfile::tempdir().expect("dir");
    let (storage, url) = fake_storage().await;
    let s = start(config(dir.path(), &url, "")).await;
    let refused = |err: &ClientError, field: &str, limit: usize| {
        matches!(err, ClientError::Status { status, body, .. } if status.as_u16() == 422
            && body.field.as_deref() == Some(field) && body.error.contains(&format!("at most {limit}")))
    };
    let with_reason =
        |id: &str, bytes: usize| ActionRequest { reason: "r".repeat(bytes), ..action(id, split("p1"), "acme") };

    // The contract's ceilings by default: 4 KiB of reason, no more, on an action and the halt.
    let err = s.master.post::<_, ActionRecord>("/v1/actions", &with_reason("t-0", 4097)).await.expect_err("over");
    assert!(refused(&err, "reason", 4096), "{err}");
    let halt = HaltRequest { halted: true, reason: Some("h".repeat(4097)) };
    let err = s.sre.post::<_, HaltStatus>("/v1/halt", &halt).await.expect_err("over");
    assert!(refused(&err, "reason", 4096), "{err}");
    let fencing = FencingRequest { leader_epoch: 7, leader: "m".repeat(257) };
    let err = s.master.post::<_, FencingStatus>("/v1/fencing", &fencing).await.expect_err("over");
    assert!(refused(&err, "leader", 256), "{err}");

    let beat = HeartbeatRequest {
        worker_id: "w-1".parse().expect("id"),
        latest_cursor: Cursor(0),
        address: Some(format!("http://{}.example:7101", "a".repeat(250))),
    };
    let err = s.agent.post::<_, RegisterResponse>("/v1/agents/heartbeat", &beat).await.expect_err("over");
    assert!(refused(&err, "address", 256), "{err}");

    // Lowered in the config, live.
    let mut cfg = (**s.config.borrow()).clone();
    cfg.limits.max_reason_bytes = 1024;
    cfg.limits.max_version_bytes = 16;
    s.config.send(Arc::new(cfg)).expect("reload");
    let err = s.master.post::<_, ActionRecord>("/v1/actions", &with_reason("t-1", 1025)).await.expect_err("over");
    assert!(refused(&err, "reason", 1024), "{err}");
    let halt = HaltRequest { halted: true, reason: Some("h".repeat(1025)) };
    let err = s.sre.post::<_, HaltStatus>("/v1/halt", &halt).await.expect_err("over");
    assert!(refused(&err, "reason", 1024), "{err}");
    // An address is how an agent is reached, not typed text: a long DNS name still registers
    // (below); only its version answers to the lowered limit.
    let long_name = format!("http://{}.example:7101", "a".repeat(120));
    let register = RegisterRequest {
        worker_id: "w-1".parse().expect("id"),
        address: long_name.clone(),
        version: "v".repeat(17),
        tenant: None,
    };
    let err = s.agent.post::<_, RegisterResponse>("/v1/agents/register", &register).await.expect_err("over");
    assert!(refused(&err, "version", 16), "{err}");

    // Nothing of it stayed.
    let listed: ActionsResponse = s.viewer.get("/v1/actions").await.expect("list");
    assert!(listed.actions.is_empty(), "no action recorded: {:?}", listed.actions);
    let status: HaltStatus = s.viewer.get("/v1/halt").await.expect("halt");
    assert!(!status.halted, "not halted");
    let agents: AgentsResponse = s.viewer.get("/v1/agents").await.expect("agents");
    assert!(agents.agents.is_empty(), "no agent registered");
    let fenced: FencingStatus = s.viewer.get("/v1/fencing").await.expect("fencing");
    assert_eq!(fenced.newest_epoch, None, "no epoch announced");

    // Within the limits, the same requests are taken.
    let taken = s.master.post::<_, ActionRecord>("/v1/actions", &with_reason("t-2", 1024)).await.expect("taken");
    assert_eq!(taken.request.reason.len(), 1024);
    assert_eq!(wait_done(&s.viewer, "t-2").await.state, ActionState::Succeeded);
    let register = RegisterRequest { version: "v".repeat(16), ..register };
    s.agent.post::<_, RegisterResponse>("/v1/agents/register", &register).await.expect("registered");
    let agents: AgentsResponse = s.viewer.get("/v1/agents").await.expect("agents");
    assert_eq!(agents.agents.iter().map(|a| a.address.as_str()).collect::<Vec<_>>(), [long_name.as_str()]);
    let halt = HaltRequest { halted: true, reason: Some("h".repeat(1024)) };
    assert!(s.sre.post::<_, HaltStatus>("/v1/halt", &halt).await.expect("halted").halted);
    assert_eq!(storage.submissions.lock().expect("lock").len(), 1, "the one action ran");
    assert!(s.server.stop(STOP).await);
}

#[tokio::test]
async fn shutdown_interrupts_running_actions_and_restart_resumes_them() {
    let dir = tempfile::tempdir().expect("dir");
    let (storage, url) = fake_storage().await;
    // Slow polling, so the action is certainly mid-flight when the server stops.
    let mut slow_polls = config(dir.path(), &url, "");
    slow_polls.executor.poll_interval_ms = 5_000;
    let s = start(slow_polls).await;
    s.master.post::<_, ActionRecord>("/v1/actions", &action("i-1", split("p1"), "acme")).await.expect("accepted");
    let started = tokio::time::Instant::now();
    loop {
        let r: ActionRecord = s.viewer.get("/v1/actions/i-1").await.expect("get");
        if r.operation_id.is_some() {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "never submitted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(s.server.stop(STOP).await, "running actions do not hold up shutdown");

    let s = start(config(dir.path(), &url, "")).await;
    assert_eq!(wait_done(&s.viewer, "i-1").await.state, ActionState::Succeeded);
    let events: serde_json::Value = s.viewer.get("/v1/actions/i-1/events").await.expect("events");
    let details: Vec<&str> =
        events["events"].as_array().expect("list").iter().map(|e| e["detail"].as_str().unwrap_or("")).collect();
    assert!(details.iter().any(|d| d.starts_with("interrupted by shutdown")), "{details:?}");
    assert!(details.iter().any(|d| d.starts_with("resumed polling")), "{details:?}");
    assert_eq!(
        storage.submissions.lock().expect("lock").values().copied().collect::<Vec<_>>(),
        [1],
        "not submitted again"
    );
    assert!(s.server.stop(STOP).await);
}

#[tokio::test]
async fn the_topology_is_sent_only_to_a_caller_without_it() {
    use lb_common::http::Conditional;
    let dir = tempfile::tempdir().expect("dir");
    let (_storage, url) = fake_storage().await;
    let s = start(config(dir.path(), &url, "")).await;
    let first = s.master.get_if_changed::<Topology>("/v1/topology", None).await.expect("topology");
    let Conditional::Modified { value: topology, etag: Some(tag) } = first else { panic!("no tag: {first:?}") };
    assert_eq!(topology.partitions.len(), 7);
    assert!(tag.starts_with('"') && tag.ends_with('"'), "a strong entity tag: {tag}");
    // The same topology, read again after the cache's two seconds: the same tag, nothing sent.
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let again = s.master.get_if_changed::<Topology>("/v1/topology", Some(&tag)).await.expect("topology");
    assert_eq!(again, Conditional::NotModified);
    // A tag of another topology (or another ops server's life) gets the whole of it.
    let other = s.master.get_if_changed::<Topology>("/v1/topology", Some("\"0-1\"")).await.expect("topology");
    assert_eq!(other, Conditional::Modified { value: topology, etag: Some(tag.clone()) });
    // The plain read is unchanged for callers that send no tag.
    assert_eq!(s.master.get::<Topology>("/v1/topology").await.expect("plain").partitions.len(), 7);
    // Auth still applies before anything is compared.
    let err = s.anonymous.get_if_changed::<Topology>("/v1/topology", Some(&tag)).await.expect_err("no token");
    assert_eq!(err.status(), Some(StatusCode::UNAUTHORIZED));
}
