//! `docs/openapi.yaml` checked against the code: the router's routes, the
//! error envelope on every operation, and the error codes with their statuses.
//!
//! Runs without root or runsc: it only reads source files.

use serde_yaml::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

const METHODS: [&str; 7] = ["get", "post", "put", "delete", "patch", "head", "options"];
const ERROR_ENVELOPE: &str = "#/components/schemas/ErrorEnvelope";

fn repo_file(rel: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn spec() -> Value {
    serde_yaml::from_str(&repo_file("docs/openapi.yaml")).expect("docs/openapi.yaml is YAML")
}

/// The text between the bracket at `open` (`(` or `{`) and its match, exclusive.
fn balanced(text: &str, open: usize) -> &str {
    let (left, right) = match text[open..].chars().next() {
        Some('(') => ('(', ')'),
        Some('{') => ('{', '}'),
        other => panic!("no bracket at byte {open}: {other:?}"),
    };
    let mut depth = 0usize;
    for (i, c) in text[open..].char_indices() {
        match c {
            c if c == left => depth += 1,
            c if c == right => {
                depth -= 1;
                if depth == 0 {
                    return &text[open + 1..open + i];
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced brackets at byte {open}");
}

/// HTTP methods named in a route's method router with their handlers, e.g.
/// `post(a::b).get(a::c)` gives `{post: a::b, get: a::c}`.
fn methods_in(router: &str) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    for m in METHODS {
        let call = format!("{m}(");
        let mut from = 0;
        while let Some(pos) = router[from..].find(&call) {
            let at = from + pos;
            let before = router[..at].chars().next_back();
            // `get(` but not `sandboxes::get)` or `secret_put(`.
            if !before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                let handler = balanced(router, at + m.len()).trim().to_string();
                found.insert(m.to_string(), handler);
            }
            from = at + call.len();
        }
    }
    found
}

/// Every (path, method) registered with `.route("...", ...)` in the router, with its handler.
fn router_handlers() -> BTreeMap<(String, String), String> {
    let source = repo_file("crates/daemon/src/api/mod.rs");
    let mut routes = BTreeMap::new();
    let mut from = 0;
    while let Some(pos) = source[from..].find(".route(") {
        let open = from + pos + ".route".len();
        let args = balanced(&source, open);
        let start = args.find('"').expect("route path literal") + 1;
        let len = args[start..].find('"').expect("end of route path");
        let path = &args[start..start + len];
        let methods = methods_in(&args[start + len + 1..]);
        assert!(!methods.is_empty(), "no method found for route {path}");
        for (m, handler) in methods {
            routes.insert((path.to_string(), m), handler);
        }
        from = open + args.len();
    }
    routes
}

fn router_routes() -> BTreeSet<(String, String)> {
    router_handlers().into_keys().collect()
}

/// The success statuses a handler (`module::function` in `src/api/`) returns,
/// read from its body: `StatusCode::X` values, list envelopes and NDJSON streams.
fn handler_success_statuses(handler: &str) -> BTreeSet<u16> {
    if handler.starts_with("||") {
        // An inline closure returning a string (`/healthz`): 200.
        return BTreeSet::from([200]);
    }
    let (module, function) = handler
        .split_once("::")
        .unwrap_or_else(|| panic!("handler {handler} is not module::function"));
    let source = repo_file(&format!("crates/daemon/src/api/{module}.rs"));
    let sig = source
        .find(&format!("pub async fn {function}("))
        .unwrap_or_else(|| panic!("handler {handler} not found"));
    let args_open = sig + source[sig..].find('(').expect("arguments");
    let args_end = args_open + balanced(&source, args_open).len() + 2;
    let body_open = args_end + source[args_end..].find('{').expect("handler body");
    let body = balanced(&source, body_open);
    let mut statuses = BTreeSet::new();
    for (needle, status) in [
        ("StatusCode::OK", 200),
        ("StatusCode::CREATED", 201),
        ("StatusCode::ACCEPTED", 202),
        ("StatusCode::NO_CONTENT", 204),
        ("envelope::list(", 200),
        ("ndjson(", 200),
        // A WebSocket route (the terminal) answers `101 Switching Protocols`.
        ("on_upgrade(", 101),
    ] {
        if body.contains(needle) {
            statuses.insert(status);
        }
    }
    assert!(
        !statuses.is_empty(),
        "no success status found in handler {handler}"
    );
    statuses
}

fn spec_operations(spec: &Value) -> BTreeMap<(String, String), Value> {
    let paths = spec["paths"].as_mapping().expect("paths");
    let mut ops = BTreeMap::new();
    for (path, item) in paths {
        let path = path.as_str().expect("path key").to_string();
        for (key, op) in item.as_mapping().expect("path item") {
            let key = key.as_str().expect("path item key");
            if METHODS.contains(&key) {
                ops.insert((path.clone(), key.to_string()), op.clone());
            }
        }
    }
    ops
}

/// Follows a local `$ref` (`#/a/b/c`) inside the spec.
fn resolve<'a>(spec: &'a Value, v: &'a Value) -> &'a Value {
    match v.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let target = r
                .strip_prefix("#/")
                .unwrap_or_else(|| panic!("non-local $ref {r}"))
                .split('/')
                .fold(spec, |node, key| &node[key]);
            assert!(!target.is_null(), "dangling $ref {r}");
            target
        }
        None => v,
    }
}

/// Parses the arms of `match self { A | B => value, ... }` in the function `fn_name`.
fn match_arms(source: &str, fn_name: &str) -> Vec<(Vec<String>, String)> {
    let start = source
        .find(&format!("fn {fn_name}("))
        .unwrap_or_else(|| panic!("fn {fn_name} not found"));
    let brace = start + source[start..].find("match self {").expect("match self") + 11;
    let body = balanced(source, brace);
    let segments: Vec<&str> = body.split("=>").collect();
    let mut arms = Vec::new();
    let mut pattern = segments[0];
    for seg in &segments[1..] {
        let (value, rest) = seg.split_once(',').unwrap_or((seg, ""));
        let variants = pattern
            .split('|')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect();
        arms.push((variants, value.trim().to_string()));
        pattern = rest;
    }
    assert!(arms.len() > 5, "could not parse the arms of {fn_name}");
    arms
}

/// Wire code → the HTTP statuses it is sent with, read from `ErrorCode` in api-types.
fn error_codes() -> BTreeMap<String, BTreeSet<u16>> {
    let source = repo_file("crates/api-types/src/errors.rs");
    let mut code_of = BTreeMap::new();
    for (variants, value) in match_arms(&source, "as_str") {
        let code = value.trim_matches('"').to_string();
        assert!(
            value.starts_with('"') && !code.is_empty(),
            "as_str value {value}"
        );
        for v in variants {
            code_of.insert(v, code.clone());
        }
    }
    let mut statuses: BTreeMap<String, BTreeSet<u16>> = BTreeMap::new();
    for (variants, value) in match_arms(&source, "http_status") {
        let status: u16 = value
            .parse()
            .unwrap_or_else(|_| panic!("http_status value {value}"));
        for v in variants {
            let code = code_of
                .get(&v)
                .unwrap_or_else(|| panic!("{v} has a status but no code"));
            statuses.entry(code.clone()).or_default().insert(status);
        }
    }
    for (variant, code) in &code_of {
        assert!(statuses.contains_key(code), "{variant} has no status");
    }
    statuses
}

#[test]
fn spec_is_openapi_3_0_3() {
    let spec = spec();
    assert_eq!(spec["openapi"].as_str(), Some("3.0.3"));
    assert!(spec["components"]["securitySchemes"]["signingKey"]["scheme"] == "bearer");
}

#[test]
fn route_parser_sees_the_router() {
    let routes = router_routes();
    // Sanity: the parser must see multi-line routes and `axum::routing::put`.
    for (path, method) in [
        ("/v2/sandboxes", "post"),
        ("/v2/sandboxes", "get"),
        ("/v2/snapshots/{id}", "delete"),
        ("/v1/secrets/{name}", "put"),
        ("/v2/sandboxes/{id}/files", "put"),
        ("/healthz", "get"),
    ] {
        assert!(
            routes.contains(&(path.to_string(), method.to_string())),
            "parser missed {method} {path}: {routes:?}"
        );
    }
    assert!(routes.len() >= 25, "only {} routes parsed", routes.len());
}

#[test]
fn every_route_is_in_the_spec_and_nothing_else() {
    let routes = router_routes();
    let spec = spec();
    let ops: BTreeSet<_> = spec_operations(&spec).into_keys().collect();
    let missing: Vec<_> = routes.difference(&ops).collect();
    let extra: Vec<_> = ops.difference(&routes).collect();
    assert!(
        missing.is_empty(),
        "routes missing from docs/openapi.yaml: {missing:?}"
    );
    assert!(
        extra.is_empty(),
        "operations in docs/openapi.yaml that the router does not serve: {extra:?}"
    );
}

#[test]
fn success_statuses_are_the_handlers() {
    let spec = spec();
    let ops = spec_operations(&spec);
    for ((path, method), handler) in router_handlers() {
        let Some(op) = ops.get(&(path.clone(), method.clone())) else {
            continue; // reported by every_route_is_in_the_spec_and_nothing_else
        };
        let documented: BTreeSet<u16> = op["responses"]
            .as_mapping()
            .expect("responses")
            .keys()
            .filter_map(|k| match k {
                Value::String(s) => s.parse().ok(),
                Value::Number(n) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
                _ => None,
            })
            .filter(|s| (200..300).contains(s) || *s == 101)
            .collect();
        let returned = handler_success_statuses(&handler);
        assert_eq!(
            documented,
            returned,
            "{} {path}: the spec's success statuses differ from what {handler} returns",
            method.to_uppercase()
        );
    }
}

#[test]
fn path_parameters_are_declared() {
    let spec = spec();
    for ((path, method), op) in spec_operations(&spec) {
        let mut declared = BTreeSet::new();
        let item_params = spec["paths"][path.as_str()]["parameters"].as_sequence();
        let op_params = op["parameters"].as_sequence();
        for p in item_params.into_iter().chain(op_params).flatten() {
            let p = resolve(&spec, p);
            if p["in"] == "path" {
                assert_eq!(p["required"].as_bool(), Some(true), "{method} {path}");
                declared.insert(p["name"].as_str().expect("param name").to_string());
            }
        }
        let in_template: BTreeSet<String> = path
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .map(str::to_string)
            .collect();
        assert_eq!(declared, in_template, "path parameters of {method} {path}");
    }
}

#[test]
fn every_operation_has_success_and_enveloped_errors() {
    let spec = spec();
    let known = error_codes();
    for ((path, method), op) in spec_operations(&spec) {
        let what = format!("{} {path}", method.to_uppercase());
        let responses = op["responses"]
            .as_mapping()
            .unwrap_or_else(|| panic!("{what}: no responses"));
        let mut successes = 0;
        let mut errors = 0;
        for (status, response) in responses {
            let status = match status {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                other => panic!("{what}: status key {other:?}"),
            };
            let response = resolve(&spec, response);
            assert!(
                response["description"].is_string(),
                "{what} {status}: no description"
            );
            let numeric: Option<u16> = status.parse().ok();
            // 101: a WebSocket route's success (the console's terminal).
            if numeric.is_some_and(|s| (200..300).contains(&s) || s == 101) {
                successes += 1;
                continue;
            }
            assert!(
                status == "default" || numeric.is_some_and(|s| (400..600).contains(&s)),
                "{what}: unexpected response key {status}"
            );
            errors += 1;
            let schema = &response["content"]["application/json"]["schema"]["$ref"];
            assert_eq!(
                schema.as_str(),
                Some(ERROR_ENVELOPE),
                "{what} {status}: error responses must use the error envelope"
            );
            // Codes listed for this status must exist and be sent with this status.
            let codes = response["x-error-codes"]
                .as_sequence()
                .unwrap_or_else(|| panic!("{what} {status}: no x-error-codes"));
            assert!(!codes.is_empty(), "{what} {status}: empty x-error-codes");
            for code in codes {
                let code = code.as_str().expect("code string");
                let statuses = known
                    .get(code)
                    .unwrap_or_else(|| panic!("{what} {status}: unknown error code {code}"));
                if let Some(n) = numeric {
                    assert!(
                        statuses.contains(&n),
                        "{what}: {code} is listed under {n} but ErrorCode sends it with {statuses:?}"
                    );
                }
            }
        }
        assert!(successes > 0, "{what}: no success response");
        assert!(errors > 0, "{what}: no error response");
        // Public operations (`security: []`: /healthz, the console page) need no 401.
        let public = op["security"].as_sequence().is_some_and(|s| s.is_empty());
        if !public {
            assert!(
                responses.contains_key(Value::from("401")),
                "{what}: authenticated routes must document 401"
            );
        }
    }
}

#[test]
fn error_code_enum_matches_error_code() {
    let spec = spec();
    let in_spec: BTreeSet<String> = spec["components"]["schemas"]["ErrorCode"]["enum"]
        .as_sequence()
        .expect("ErrorCode enum")
        .iter()
        .map(|v| v.as_str().expect("code").to_string())
        .collect();
    let in_code: BTreeSet<String> = error_codes().into_keys().collect();
    let missing: Vec<_> = in_code.difference(&in_spec).collect();
    let extra: Vec<_> = in_spec.difference(&in_code).collect();
    assert!(
        missing.is_empty(),
        "codes of ErrorCode::as_str missing from the spec's ErrorCode enum: {missing:?}"
    );
    assert!(
        extra.is_empty(),
        "codes in the spec that ErrorCode never sends: {extra:?}"
    );
}

#[test]
fn stream_endpoints_are_ndjson_with_an_error_frame() {
    let spec = spec();
    for path in [
        "/v2/sandboxes/{id}/logs",
        "/v2/sandboxes/{id}/processes/{pid}/output/stream",
    ] {
        let ok = &spec["paths"][path]["get"]["responses"]["200"]["content"];
        assert_eq!(
            ok["application/x-ndjson"]["schema"]["$ref"].as_str(),
            Some("#/components/schemas/StreamFrame"),
            "{path}"
        );
    }
    let frame = &spec["components"]["schemas"]["ErrorFrame"];
    let required: Vec<_> = frame["required"]
        .as_sequence()
        .expect("required")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(required.contains(&"type") && required.contains(&"error"));
    assert_eq!(frame["properties"]["type"]["enum"][0], "error");
}
