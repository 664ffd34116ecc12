//! The document against the committed copy and itself. `tests/it/openapi.rs` checks it against
//! a running master and the protocol examples.

use std::path::PathBuf;

use serde_json::Value;

use super::*;

fn docs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs")
}

fn generated() -> Value {
    serde_json::to_value(document()).expect("the document is JSON")
}

/// `docs/openapi.json` is what the code generates; `UPDATE_OPENAPI=1` rewrites it.
#[test]
fn the_committed_openapi_document_is_the_generated_one() {
    let generated = document_pretty_json();
    let path = docs().join("openapi.json");
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).expect("write docs/openapi.json");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed == generated {
        return;
    }
    let (line, (was, is)) = committed
        .lines()
        .chain(std::iter::repeat(""))
        .zip(generated.lines().chain(std::iter::repeat("")))
        .enumerate()
        .find(|(_, (a, b))| a != b)
        .expect("the texts differ somewhere");
    panic!(
        "docs/openapi.json differs from the document the code generates (a route, a handler's doc or \
         a protocol type changed), first at line {}:\n  committed: {}\n  generated: {}\n\n\
         Regenerate it with\n\n    UPDATE_OPENAPI=1 cargo test -p lb-master --lib openapi\n\nand commit the change",
        line + 1,
        was.trim(),
        is.trim()
    );
}

/// Every `$ref` in `value`, with where it is.
fn refs<'a>(value: &'a Value, at: String, out: &mut Vec<(String, &'a str)>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => out.push((at.clone(), r)),
                    _ => refs(v, format!("{at}/{k}"), out),
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                refs(v, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

fn pointer(reference: &str) -> &str {
    reference.strip_prefix('#').unwrap_or_else(|| panic!("{reference} is not a local reference"))
}

#[test]
fn every_reference_resolves_and_every_path_parameter_is_declared() {
    let doc = generated();
    assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")), "{}", doc["openapi"]);
    let mut found = Vec::new();
    refs(&doc, String::new(), &mut found);
    assert!(found.len() > 100, "only {} references", found.len());
    for (at, reference) in found {
        assert!(doc.pointer(pointer(reference)).is_some(), "{at}: {reference} does not resolve");
    }
    let paths = doc["paths"].as_object().expect("paths");
    for (path, item) in paths {
        for (method, operation) in item.as_object().expect("path item") {
            let declared: Vec<&str> = operation["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["in"] == "path")
                .filter_map(|p| p["name"].as_str())
                .collect();
            let placeholders: Vec<&str> =
                path.split('/').filter_map(|s| s.strip_prefix('{')?.strip_suffix('}')).collect();
            assert_eq!(declared, placeholders, "{method} {path}: path parameters");
            assert!(operation["responses"]["200"].is_object(), "{method} {path}: no 200 reply");
            assert!(operation["responses"]["default"].is_object(), "{method} {path}: no default reply");
        }
    }
}

#[test]
fn writes_name_the_operator_role_and_reads_under_api_v1_an_optional_token() {
    let doc = generated();
    let optional = serde_json::json!([{}, {"bearer": []}]);
    let operator = serde_json::json!([{"bearer": ["operator"]}]);
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("path item") {
            let security = &operation["security"];
            match (method.as_str(), path.starts_with("/api/v1/")) {
                ("get", true) => assert_eq!(security, &optional, "{method} {path}"),
                ("get", false) => assert!(security.is_null(), "{method} {path} is outside auth: {security}"),
                _ => assert_eq!(security, &operator, "{method} {path}"),
            }
            if !security.is_null() {
                assert!(operation["responses"]["401"].is_object(), "{method} {path}: no 401");
            }
            if security == &operator {
                assert!(operation["responses"]["403"].is_object(), "{method} {path}: no 403");
            }
        }
    }
}
