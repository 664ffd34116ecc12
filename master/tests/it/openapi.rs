//! The OpenAPI document against the master it describes: served as generated, every path in it
//! routed, and the replies of a running master and the protocol examples in `docs/examples/`
//! each an instance of the schema the document gives it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use lb_common::config::watch::ReloadStatus;
use lb_master::http::openapi;
use serde_json::Value;
use tokio::sync::watch;

const STOP: Duration = Duration::from_secs(20);

fn docs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs")
}

fn generated() -> Value {
    serde_json::to_value(openapi::document()).expect("the document is JSON")
}

fn pointer(reference: &str) -> &str {
    reference.strip_prefix('#').unwrap_or_else(|| panic!("{reference} is not a local reference"))
}

/// The operator's token of [`start_master`].
const TOKEN: &str = "operator-secret-0001";

/// A master with an operator token, reads behind a token, a config status, and no ops server
/// behind it: every route answers from what the master has (little), which is all routing needs.
async fn start_master(dir: &Path) -> lb_master::RunningMaster {
    let text = format!(
        "[http]\nlisten = \"127.0.0.1:0\"\n[ops_server]\nurl = \"http://127.0.0.1:9\"\n[store]\npath = \"{}\"\n\
         [auth]\nreads_need_token = true\n[[auth.tokens]]\nname = \"sre\"\ntoken = \"{TOKEN}\"\nrole = \"operator\"\n",
        dir.join("master.sqlite").display()
    );
    let config: lb_master::config::MasterConfig =
        lb_common::config::parse(&text, Path::new("test.toml")).expect("valid test config");
    let status: ReloadStatus =
        serde_json::from_str(include_str!("../../../docs/examples/config_status.json")).expect("example");
    let (_tx, rx) = watch::channel(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    lb_master::start(rx, listener, Some(Arc::new(RwLock::new(status)))).await.expect("master")
}

/// A value for a parameter: the first of an enum, else an id.
fn sample(doc: &Value, schema: &Value) -> String {
    let schema = match schema["$ref"].as_str() {
        Some(reference) => doc.pointer(pointer(reference)).expect("resolves"),
        None => schema,
    };
    schema["enum"][0].as_str().unwrap_or("test-1").to_owned()
}

/// `path` with its path parameters and required query parameters filled in.
fn url_for(doc: &Value, base: &str, path: &str, operation: &Value) -> String {
    let mut url = format!("{base}{path}");
    let mut query = Vec::new();
    for p in operation["parameters"].as_array().into_iter().flatten() {
        let (name, value) = (p["name"].as_str().expect("named"), sample(doc, &p["schema"]));
        match p["in"].as_str() {
            Some("path") => url = url.replace(&format!("{{{name}}}"), &value),
            Some("query") if p["required"] == true => query.push(format!("{name}={value}")),
            _ => {}
        }
    }
    if !query.is_empty() {
        url = format!("{url}?{}", query.join("&"));
    }
    url
}

#[tokio::test]
async fn the_served_openapi_document_is_the_generated_one_and_every_path_in_it_is_routed() {
    lb_common::telemetry::metrics_handle();
    let dir = tempfile::tempdir().expect("dir");
    let master = start_master(dir.path()).await;
    let base = format!("http://{}", master.addr());
    let http = reqwest::Client::new();

    let served = http.get(format!("{base}{}", openapi::PATH)).bearer_auth(TOKEN).send().await.expect("served");
    assert_eq!(served.status(), reqwest::StatusCode::OK);
    assert_eq!(served.headers()[reqwest::header::CONTENT_TYPE], "application/json");
    let text = served.text().await.expect("text");
    assert!(text == openapi::document_pretty_json(), "the served document is not the generated one");
    let doc: Value = serde_json::from_str(&text).expect("the served document is JSON");
    assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")), "openapi = {}", doc["openapi"]);

    // What a path without a route gets, to tell it from a handler's own 404.
    let unrouted = http.get(format!("{base}/api/v1/no-such-route")).send().await.expect("fallback");
    assert_eq!(unrouted.status(), reqwest::StatusCode::NOT_FOUND);
    let unrouted = unrouted.text().await.expect("text");

    let checker = Checker { doc: &doc };
    // Reads carry the token `auth.reads_need_token` asks for; writes none, so they stop at 401
    // instead of waiting for an online pass that cannot run without an ops server.
    let mut operations = 0;
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("path item") {
            operations += 1;
            let url = url_for(&doc, &base, path, operation);
            let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
            let request = http.request(method.clone(), &url);
            let request = if method == reqwest::Method::GET { request.bearer_auth(TOKEN) } else { request };
            let reply = request.send().await.expect("answered");
            let status = reply.status();
            let content_type = reply.headers().get(reqwest::header::CONTENT_TYPE).cloned();
            if content_type.is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream")) {
                // A stream does not end: its status and type are the answer.
                let documented = &operation["responses"][status.as_str()]["content"]["text/event-stream"];
                assert!(documented.is_object(), "{method} {url}: {status} as a stream is not documented");
                continue;
            }
            let body = reply.text().await.expect("text");
            assert!(
                status != reqwest::StatusCode::METHOD_NOT_ALLOWED
                    && !(status == reqwest::StatusCode::NOT_FOUND && body == unrouted),
                "{method} {url}: not routed ({status} {body})"
            );
            let documented = &operation["responses"][status.as_str()];
            assert!(documented.is_object(), "{method} {url}: {status}, a status the document does not list: {body}");
            if let Some(schema) = documented.pointer("/content/application~1json/schema") {
                let value: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{method} {url}: {e}"));
                if let Err(e) = checker.check(schema, &value, "") {
                    panic!("{method} {url}: the {status} reply does not match its schema: {e}\n{body}");
                }
            }
        }
    }
    assert!(operations >= 31, "only {operations} operations");

    // Without the token a read is refused, as its documented 401.
    let refused = http.get(format!("{base}/api/v1/overview")).send().await.expect("answered");
    assert_eq!(refused.status(), reqwest::StatusCode::UNAUTHORIZED);
    let documented = &doc["paths"]["/api/v1/overview"]["get"]["responses"]["401"];
    let body: Value = refused.json().await.expect("error body");
    assert_eq!(checker.check(&documented["content"]["application/json"]["schema"], &body, ""), Ok(()));
    assert!(master.stop(STOP).await);
}

/// Which schema each example of `docs/examples/` is an instance of, as a JSON pointer into the
/// document: the reply or body of the route it is an example of.
const EXAMPLES: &[(&str, &str)] = &[
    ("master_overview.json", "/paths/~1api~1v1~1overview/get/responses/200"),
    ("master_workers.json", "/paths/~1api~1v1~1workers/get/responses/200"),
    ("master_partitions.json", "/paths/~1api~1v1~1partitions/get/responses/200"),
    ("master_top.json", "/paths/~1api~1v1~1top/get/responses/200"),
    ("master_heatmap.json", "/paths/~1api~1v1~1heatmap/get/responses/200"),
    ("master_history.json", "/paths/~1api~1v1~1partitions~1{id}~1history/get/responses/200"),
    ("topology.json", "/paths/~1api~1v1~1topology/get/responses/200"),
    ("master_collector.json", "/paths/~1api~1v1~1collector/get/responses/200"),
    ("master_table_memory.json", "/paths/~1api~1v1~1table~1memory/get/responses/200"),
    ("record_analysis.json", "/paths/~1api~1v1~1records~1{kind}/get/responses/200"),
    ("record_proposal.json", "/paths/~1api~1v1~1records~1{kind}/get/responses/200"),
    ("record_action.json", "/paths/~1api~1v1~1records~1{kind}/get/responses/200"),
    ("record_evaluation.json", "/paths/~1api~1v1~1records~1{kind}/get/responses/200"),
    ("record_config_reload.json", "/paths/~1api~1v1~1records~1{kind}/get/responses/200"),
    ("master_pending.json", "/paths/~1api~1v1~1proposals~1pending/get/responses/200"),
    ("placement_rules.json", "/paths/~1api~1v1~1placement~1rules/get/responses/200"),
    ("master_pass.json", "/paths/~1api~1v1~1pass/get/responses/200"),
    ("master_leadership.json", "/paths/~1api~1v1~1leadership/get/responses/200"),
    ("master_offline.json", "/paths/~1api~1v1~1offline/get/responses/200"),
    ("master_offline_pass.json", "/paths/~1api~1v1~1offline~1pass/post/responses/200"),
    ("action_record.json", "/paths/~1api~1v1~1proposals~1{id}~1approve/post/responses/200"),
    ("master_manual_action_request.json", "/paths/~1api~1v1~1actions/post/requestBody"),
    ("master_manual_action_reply.json", "/paths/~1api~1v1~1actions/post/responses/200"),
    ("master_policy.json", "/paths/~1api~1v1~1policy/get/responses/200"),
    ("actions_response.json", "/paths/~1api~1v1~1actions/get/responses/200"),
    ("halt_status.json", "/paths/~1api~1v1~1halt/get/responses/200"),
    ("config_status.json", "/paths/~1v1~1config~1status/get/responses/200"),
    ("error.json", "/components/responses/Error"),
];

#[test]
fn the_protocol_examples_match_their_schemas() {
    let doc = generated();
    let checker = Checker { doc: &doc };
    let mut failures = Vec::new();
    for (file, at) in EXAMPLES {
        let text =
            std::fs::read_to_string(docs().join("examples").join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let example: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        let media = doc.pointer(at).unwrap_or_else(|| panic!("{file}: no {at} in the document"));
        let schema = &media["content"]["application/json"]["schema"];
        assert!(schema.is_object(), "{file}: {at} has no JSON schema");
        if let Err(e) = checker.check(schema, &example, "") {
            failures.push(format!("{file}: {e}"));
        }
    }
    assert!(failures.is_empty(), "examples that do not match their schema:\n{}", failures.join("\n"));
}

/// The mistakes the checker must catch, so that a pass above means something.
#[test]
fn the_checker_refuses_what_serde_would() {
    let doc = generated();
    let checker = Checker { doc: &doc };
    let schema = |name: &str| serde_json::json!({"$ref": format!("#/components/schemas/{name}")});
    let split = serde_json::json!({"kind": "split", "partition": "p-1", "split_key": "8000000000000000"});
    assert_eq!(checker.check(&schema("ActionSpec"), &split, ""), Ok(()));
    let bad = [
        ("ActionSpec", serde_json::json!({"kind": "explode", "partition": "p-1"}), "oneOf"),
        ("ActionSpec", serde_json::json!({"partition": "p-1", "split_key": "8000000000000000"}), "oneOf"),
        ("KeyRange", serde_json::json!({"start": "00", "end": "ff", "width": 1}), "/width: not allowed"),
        ("KeyRange", serde_json::json!({"start": "0000000000000000"}), "missing end"),
        ("ManualActionRequest", serde_json::json!({"spec": split, "reason": "x", "dryrun": true}), "/dryrun"),
        ("Metric", serde_json::json!("opz"), "not one of"),
        ("WorkerId", serde_json::json!(""), "shorter than 1"),
        ("Cursor", serde_json::json!(-1), "below 0"),
    ];
    for (name, value, why) in bad {
        let err = checker.check(&schema(name), &value, "").expect_err(name);
        assert!(err.contains(why), "{name} {value}: {err}");
    }
}

/// A JSON Schema checker for the keywords this document uses (a full validator would be a
/// heavy dependency for a test): `$ref`, `type`, `enum`, `properties`, `required`,
/// `additionalProperties`, `items`, `prefixItems`, `oneOf`, `allOf`, length and minimum bounds.
/// `pattern` and `format` are not checked.
struct Checker<'a> {
    doc: &'a Value,
}

impl Checker<'_> {
    fn check(&self, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
        if let Some(reference) = schema["$ref"].as_str() {
            let target = self.doc.pointer(pointer(reference)).ok_or_else(|| format!("{reference} does not resolve"))?;
            return self.check(target, value, at);
        }
        if let Some(types) = schema.get("type") {
            let types: Vec<&str> = match types {
                Value::String(t) => vec![t.as_str()],
                Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
                other => return Err(format!("{at}: bad type {other}")),
            };
            if !types.iter().any(|t| is_type(t, value)) {
                return Err(format!("{at}: {value} is not {}", types.join(" or ")));
            }
        }
        if let Some(options) = schema["enum"].as_array()
            && !options.contains(value)
        {
            return Err(format!("{at}: {value} is not one of {options:?}"));
        }
        if let Some(parts) = schema["allOf"].as_array() {
            for part in parts {
                self.check(part, value, at)?;
            }
        }
        if let Some(options) = schema["oneOf"].as_array() {
            let errors: Vec<String> = options.iter().filter_map(|o| self.check(o, value, at).err()).collect();
            if options.len() - errors.len() != 1 {
                return Err(format!(
                    "{at}: matches {} of oneOf's {} (not exactly one): {}",
                    options.len() - errors.len(),
                    options.len(),
                    errors.join("; ")
                ));
            }
        }
        match value {
            Value::Object(map) => self.check_object(schema, map, at),
            Value::Array(items) => self.check_array(schema, items, at),
            Value::String(s) => {
                let len = s.chars().count() as u64;
                if schema["minLength"].as_u64().is_some_and(|min| len < min) {
                    return Err(format!("{at}: {value} is shorter than {}", schema["minLength"]));
                }
                if schema["maxLength"].as_u64().is_some_and(|max| len > max) {
                    return Err(format!("{at}: {value} is longer than {}", schema["maxLength"]));
                }
                Ok(())
            }
            Value::Number(n) => match (schema["minimum"].as_f64(), n.as_f64()) {
                (Some(min), Some(n)) if n < min => Err(format!("{at}: below {min}")),
                _ => Ok(()),
            },
            Value::Bool(_) | Value::Null => Ok(()),
        }
    }

    fn check_object(&self, schema: &Value, map: &serde_json::Map<String, Value>, at: &str) -> Result<(), String> {
        for required in schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            if !map.contains_key(required) {
                return Err(format!("{at}: missing {required}"));
            }
        }
        let properties = schema["properties"].as_object();
        for (key, v) in map {
            let here = format!("{at}/{key}");
            match (properties.and_then(|p| p.get(key)), &schema["additionalProperties"]) {
                (Some(property), _) => self.check(property, v, &here)?,
                (None, Value::Bool(false)) => return Err(format!("{here}: not allowed")),
                (None, additional @ Value::Object(_)) => self.check(additional, v, &here)?,
                (None, _) => {}
            }
        }
        Ok(())
    }

    fn check_array(&self, schema: &Value, items: &[Value], at: &str) -> Result<(), String> {
        let prefix = schema["prefixItems"].as_array().map_or(&[][..], Vec::as_slice);
        for (i, item) in items.iter().enumerate() {
            let here = format!("{at}/{i}");
            match (prefix.get(i), &schema["items"]) {
                (Some(first), _) => self.check(first, item, &here)?,
                (None, Value::Bool(false)) => return Err(format!("{here}: past the {} items allowed", prefix.len())),
                (None, each @ Value::Object(_)) => self.check(each, item, &here)?,
                (None, _) => {}
            }
        }
        Ok(())
    }
}

fn is_type(name: &str, value: &Value) -> bool {
    match name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        _ => false,
    }
}
