//! docs/openapi.yaml against the server: every endpoint of the route table is described (on the
//! listeners it is served on) and nothing else is; every error code the docs list is in its
//! `Error` schema; and a running clef — tables, a load error, snapshots, tuning, the router, both
//! tokens — is asked every operation, its requests and answers (statuses, content types, JSON
//! bodies, NDJSON lines) validated against the description with a JSON Schema validator.
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use common::*;
use serde_json::{json, Value as Json};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn spec() -> Json {
    let text = std::fs::read_to_string(Path::new(ROOT).join("docs/openapi.yaml")).expect("read docs/openapi.yaml");
    let options = clef::yaml::Options { max_depth: 64, depth_hint: "", what: "an OpenAPI description" };
    let doc = clef::yaml::parse(&text, &options).unwrap_or_else(|p| panic!("docs/openapi.yaml: {p:?}"));
    assert!(doc.problems.is_empty(), "docs/openapi.yaml: {:?}", doc.problems);
    let root = doc.root.expect("docs/openapi.yaml is empty");
    let spec = root.to_json().unwrap_or_else(|(at, e)| panic!("docs/openapi.yaml at byte {}: {e}", at.start));
    assert_eq!(spec["openapi"], "3.1.0");
    spec
}

const METHODS: [&str; 5] = ["get", "put", "post", "delete", "patch"];

/// Every operation: (METHOD, path template) → the operation.
fn operations(spec: &Json) -> BTreeMap<(String, String), Json> {
    let mut out = BTreeMap::new();
    for (path, item) in spec["paths"].as_object().expect("paths") {
        for method in METHODS {
            if let Some(op) = item.get(method) {
                out.insert((method.to_uppercase(), path.clone()), op.clone());
            }
        }
    }
    out
}

/// The path template of `spec` that `path` (no query) is, preferring literal segments
/// (`/decide/batch` over `/decide/{table}`).
fn template_of(spec: &Json, path: &str) -> Option<String> {
    let segments: Vec<&str> = path.split('/').collect();
    let mut best: Option<(usize, String)> = None;
    for template in spec["paths"].as_object().expect("paths").keys() {
        let parts: Vec<&str> = template.split('/').collect();
        // `/authz/{table}` goes on with the path it authorizes
        let prefix = template == "/authz/{table}";
        if (!prefix && parts.len() != segments.len()) || (prefix && segments.len() < parts.len()) {
            continue;
        }
        let mut literal = 0;
        let fits = parts.iter().zip(&segments).all(|(p, s)| {
            if p.starts_with('{') {
                !s.is_empty()
            } else {
                literal += 1;
                p == s
            }
        });
        if fits && best.as_ref().is_none_or(|(n, _)| literal > *n) {
            best = Some((literal, template.clone()));
        }
    }
    best.map(|(_, t)| t)
}

/// A JSON Schema validator for `schema` (a `$ref` into the description's components).
fn validator(spec: &Json, schema: &Json) -> jsonschema::Validator {
    let mut root = schema.as_object().cloned().unwrap_or_default();
    root.insert("components".into(), spec["components"].clone());
    jsonschema::draft202012::new(&Json::Object(root))
        .unwrap_or_else(|e| panic!("a schema of openapi.yaml: {e}: {schema}"))
}

fn check_against(spec: &Json, schema: &Json, value: &Json, what: &str) {
    let v = validator(spec, schema);
    let errors: Vec<String> = v.iter_errors(value).map(|e| format!("{} at {}", e, e.instance_path())).collect();
    assert!(errors.is_empty(), "{what} does not fit docs/openapi.yaml:\n{}\n{value}", errors.join("\n"));
}

/// Resolves a `$ref` to `#/components/…` (responses, request bodies).
fn resolve<'a>(spec: &'a Json, v: &'a Json) -> &'a Json {
    match v.get("$ref").and_then(Json::as_str) {
        Some(r) => spec.pointer(r.trim_start_matches('#')).unwrap_or_else(|| panic!("openapi.yaml: no {r}")),
        None => v,
    }
}

/// The exchanges checked so far: operation → statuses seen.
struct Checker {
    spec: Json,
    seen: BTreeMap<(String, String), BTreeSet<u16>>,
}

impl Checker {
    /// Checks one request and its answer against the description.
    fn check(&mut self, method: &str, target: &str, body: &[u8], rsp: &Resp) {
        let path = target.split('?').next().unwrap_or(target);
        let template = template_of(&self.spec, path)
            .unwrap_or_else(|| panic!("{method} {path}: no path of docs/openapi.yaml describes it"));
        // `GET` endpoints answer `HEAD` too (the description says so once, at the top)
        let method = if method == "HEAD" { "GET" } else { method };
        let op = self.spec["paths"][&template][method.to_lowercase()].clone();
        assert!(op.is_object(), "{method} {template} is not in docs/openapi.yaml");
        let what = format!("{method} {target} → {}", rsp.status);
        // the request's JSON body
        if let Some(rb) = op.get("requestBody") {
            let rb = resolve(&self.spec, rb).clone();
            if let (Some(schema), Ok(value)) =
                (rb.pointer("/content/application~1json/schema"), serde_json::from_slice::<Json>(body))
            {
                if !body.is_empty() && rsp.status < 400 {
                    check_against(&self.spec, schema, &value, &format!("the request body of {what}"));
                }
            }
        }
        let responses = &op["responses"];
        let described = responses.get(rsp.status.to_string()).or_else(|| responses.get("default"));
        let described =
            resolve(&self.spec, described.unwrap_or_else(|| panic!("{what}: that status is not described")));
        let described = described.clone();
        let content_type = rsp.header("content-type").unwrap_or("").split(';').next().unwrap_or("").trim().to_string();
        if rsp.body.is_empty() {
            return;
        }
        let content =
            described.get("content").unwrap_or_else(|| panic!("{what}: the answer has a body, none is described"));
        let media = content
            .get(&content_type)
            .unwrap_or_else(|| panic!("{what}: content type {content_type} is not described"));
        let schema = &media["schema"];
        match content_type.as_str() {
            "application/json" => {
                let value: Json = serde_json::from_slice(&rsp.body).unwrap_or_else(|e| panic!("{what}: not JSON: {e}"));
                check_against(&self.spec, schema, &value, &what);
            }
            "application/x-ndjson" => {
                for line in rsp.text().lines().filter(|l| !l.is_empty()) {
                    let value: Json =
                        serde_json::from_str(line).unwrap_or_else(|e| panic!("{what}: a line not JSON: {e}"));
                    check_against(&self.spec, schema, &value, &format!("a line of {what}"));
                }
            }
            _ => {}
        }
        self.seen.entry((method.to_string(), template)).or_default().insert(rsp.status);
    }
}

/// The box the examples come from: both tokens, tables (one broken, one tuned, a gate for
/// forward-auth), snapshots, the router with a peer.
struct Box {
    srv: Server,
    _peer: Server,
    checker: Checker,
}

const DECIDE_TOKEN: &str = "decide-token";
const ADMIN_TOKEN: &str = "admin-token";

const PAY: &str = r#"{"params": {"limit": {"value": 50, "min": 0, "max": 100, "step": 10, "tunable": true}},
  "default": {"allow": false},
  "rules": [{"id": "under", "condition": "amount < params.limit", "action": {"allow": true}}]}
"#;
const GATE: &str = r#"{"default": {"allow": false, "status": 403}, "rules": [
  {"id": "reads", "condition": "method == \"GET\"", "action": {"allow": true}}]}
"#;

impl Box {
    fn start() -> Box {
        let peer = Server::start(&plain(), &[("risk.json", &table("peer"))]);
        let tokens = tempfile::tempdir().expect("temp dir");
        let decide = write(tokens.path(), "decide.token", DECIDE_TOKEN);
        let admin = write(tokens.path(), "admin.token", ADMIN_TOKEN);
        let rest = format!(
            "model:\n  default_table: risk\n  watch_file: false\nstate_dir: state\n\
             snapshots:\n  enabled: true\n  dir: snaps\n  flush_ms: 50\n\
             tuning:\n  tables: [pay]\n  traffic: 0.5\n  variants: 2\n  min_samples: 5\n\
             router:\n  forward_timeout_ms: 1000\n  instances:\n    - {{id: local}}\n    - {{id: peer-1, addr: 127.0.0.1:{}}}\n",
            peer.port
        );
        let text = config(
            &format!("  token_file: {}\n", decide.display()),
            &format!("  token_file: {}\n", admin.display()),
            &rest,
        );
        let srv = Server::start(
            &text,
            &[("risk.json", &table("v1")), ("pay.json", PAY), ("gate.json", GATE), ("broken.json", BROKEN)],
        );
        std::mem::forget(tokens); // the server reads them at start only; the folder goes with the process's
        Box { srv, _peer: peer, checker: Checker { spec: spec(), seen: BTreeMap::new() } }
    }

    /// A request on the decision listener (`admin` false) or the admin one, with its token
    /// unless `token` is false; checked against the description.
    fn ask(
        &mut self,
        admin: bool,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        token: bool,
    ) -> Resp {
        let port = if admin { self.srv.admin } else { self.srv.port };
        let bearer = format!("Bearer {}", if admin { ADMIN_TOKEN } else { DECIDE_TOKEN });
        let mut all: Vec<(&str, &str)> = headers.to_vec();
        if token {
            all.push(("Authorization", &bearer));
        }
        let rsp = call(port, method, target, &all, body);
        self.checker.check(method, target, body, &rsp);
        rsp
    }

    fn main(&mut self, method: &str, target: &str, body: &str) -> Resp {
        self.ask(false, method, target, &[], body.as_bytes(), true)
    }

    fn admin(&mut self, method: &str, target: &str, body: &str) -> Resp {
        self.ask(true, method, target, &[], body.as_bytes(), true)
    }
}

#[test]
fn every_operation_answers_as_described() {
    let mut b = Box::start();
    // decisions
    assert_eq!(b.main("POST", "/decide", r#"{"x": 20}"#).status, 200);
    assert_eq!(b.main("POST", "/decide/risk?explain=true", r#"{"x": 2, "tier": "vip"}"#).status, 200);
    assert_eq!(b.main("POST", "/decide/risk", r#"{"x": "#).status, 400);
    assert_eq!(b.main("POST", "/decide/risk", "[1]").status, 400);
    assert_eq!(b.main("POST", "/decide/nope", "{}").status, 404);
    assert_eq!(b.main("POST", "/decide/broken", "{}").status, 503);
    assert_eq!(b.ask(false, "POST", "/decide/risk", &[], b"{}", false).status, 401);
    assert_eq!(b.main("POST", "/decide/batch", "{\"x\": 1}\n{\"x\": 30}\n").status, 200);
    assert_eq!(b.main("POST", "/decide/risk/batch?explain=true", "{\"x\": 1}\n[2]\n").status, 200);
    // forward-auth: its token in X-Clef-Token
    let gate = [("X-Clef-Token", DECIDE_TOKEN)];
    assert_eq!(b.ask(false, "GET", "/authz/gate/reports", &gate, b"", false).status, 200);
    assert_eq!(b.ask(false, "POST", "/authz/gate/reports", &gate, b"", false).status, 403);
    // tuning and feedback
    let id = loop {
        let d = b.main("POST", "/decide/pay", r#"{"amount": 10}"#).json();
        if d.get("variant").is_some() {
            break d["snapshot_id"].as_str().unwrap().to_string();
        }
    };
    let fb = format!(r#"{{"snapshot_id": "{id}", "reward": 1}}"#);
    assert_eq!(b.main("POST", "/feedback", &fb).status, 200);
    assert_eq!(
        b.main("POST", "/feedback", r#"{"snapshot_id": "01a230b8-dbd5-7137-bffb-a4cb18ebdb45", "reward": 1}"#).status,
        404
    );
    assert_eq!(b.main("POST", "/feedback", r#"{"reward": 1}"#).status, 400);
    assert_eq!(b.main("GET", "/tuning/pay", "").status, 200);
    assert_eq!(b.main("GET", "/tuning/risk", "").status, 404);
    // read-only endpoints, on both listeners
    for admin in [false, true] {
        assert_eq!(b.ask(admin, "GET", "/health", &[], b"", true).status, 200);
        assert_eq!(b.ask(admin, "GET", "/metrics", &[], b"", true).status, 200);
        assert_eq!(b.ask(admin, "GET", "/tables", &[], b"", true).status, 200);
        assert_eq!(b.ask(admin, "GET", "/tables/risk", &[], b"", true).status, 200);
        assert_eq!(b.ask(admin, "GET", "/tables/broken", &[], b"", true).status, 200);
        assert_eq!(b.ask(admin, "GET", "/tables/nope", &[], b"", true).status, 404);
        assert_eq!(b.ask(admin, "HEAD", "/health", &[], b"", true).status, 200);
    }
    assert_eq!(b.ask(false, "GET", "/tables", &[], b"", false).status, 401);
    assert_eq!(b.ask(true, "GET", "/health", &[], b"", false).status, 401);
    // the page and its figures
    assert_eq!(b.ask(true, "GET", "/", &[], b"", false).status, 200);
    assert_eq!(b.admin("GET", "/activity", "").status, 200);
    // kill switches, reloads, rollbacks
    assert_eq!(b.admin("PUT", "/tables/risk/rules/vip/enabled", "false").status, 200);
    assert_eq!(b.admin("PUT", "/tables/risk/rules/off/enabled", "true").status, 409);
    assert_eq!(b.admin("PUT", "/tables/risk/rules/nope/enabled", "false").status, 404);
    assert_eq!(b.admin("PUT", "/tables/risk/rules/vip/enabled", "maybe").status, 400);
    assert_eq!(b.admin("POST", "/tables/risk/rollback", "").status, 409);
    b.srv.write_table("risk.json", &table("v2"));
    assert_eq!(b.admin("POST", "/reload", "").status, 200);
    assert_eq!(b.admin("POST", "/tables/risk/rollback", "").status, 200);
    assert_eq!(b.admin("POST", "/tables/nope/rollback", "").status, 404);
    assert_eq!(b.admin("POST", "/reload", "").status, 200);
    // recent decisions
    b.srv.eventually(10, "snapshots listed", |s| {
        call(s.admin, "GET", "/snapshots?limit=1", &[("Authorization", &format!("Bearer {ADMIN_TOKEN}"))], b"").json()
            ["count"]
            == 1
    });
    let listed = b.admin("GET", "/snapshots?table=risk&limit=5", "").json();
    let id = listed["snapshots"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(b.admin("GET", &format!("/snapshots/{id}"), "").status, 200);
    assert_eq!(b.admin("GET", "/snapshots/not-an-id", "").status, 400);
    assert_eq!(b.admin("GET", "/snapshots/01a230b8-dbd5-7137-bffb-a4cb18ebdb45", "").status, 404);
    assert_eq!(b.admin("GET", "/snapshots?limit=5000", "").status, 400);
    // the router
    assert_eq!(b.admin("GET", "/router", "").status, 200);
    assert_eq!(b.admin("POST", "/router/failover", r#"{"table": "risk", "to": "gate"}"#).status, 200);
    assert_eq!(b.admin("POST", "/router/failover", r#"{"table": "risk", "to": "nope"}"#).status, 404);
    assert_eq!(b.admin("POST", "/router/failover", r#"{"table": "risk"}"#).status, 400);
    assert_eq!(b.admin("DELETE", "/router/failover/risk", "").status, 200);
    assert_eq!(b.admin("DELETE", "/router/failover/risk", "").status, 404);
    // promotion
    assert_eq!(b.admin("POST", "/tuning/pay/promote", "").status, 409);
    assert_eq!(b.admin("POST", "/tuning/pay/promote", r#"{"variant": "v9"}"#).status, 404);
    assert_eq!(b.admin("POST", "/tuning/pay/promote", r#"{"variant": "v1"}"#).status, 200);

    // every operation was asked, and answered with success at least once
    let ops = operations(&b.checker.spec);
    let unasked: Vec<_> = ops
        .keys()
        .filter(|k| !b.checker.seen.get(*k).is_some_and(|s| s.iter().any(|st| (200..300).contains(st) || *st == 403)))
        .collect();
    assert!(unasked.is_empty(), "operations of docs/openapi.yaml no example answered with success: {unasked:?}");
}

/// A path with its names made anonymous (`/tables/{name}` and `/tables/{table}` are one path);
/// forward-auth's `/authz/{table}/{path}` is `/authz/{table}` (OpenAPI's path names hold no `/`:
/// the description says that the path goes on).
fn shape(path: &str) -> String {
    let anonymous = regex::Regex::new(r"\{[^}]+\}").unwrap().replace_all(path, "{}").into_owned();
    anonymous.strip_suffix("/{}").filter(|p| *p == "/authz/{}").map(String::from).unwrap_or(anonymous)
}

/// Where an endpoint is served (listeners) and the tokens it takes (security scheme names).
type Served<'a> = (BTreeSet<&'a str>, BTreeSet<&'a str>);

#[test]
fn every_route_is_described_and_nothing_else() {
    use clef::server::routes::{Token, ADMIN_ROUTES, MAIN_ROUTES};
    let spec = spec();
    // (METHOD, path) → listeners, and the tokens asked (security scheme names)
    let mut routed: BTreeMap<(String, String), Served<'_>> = BTreeMap::new();
    for (listener, rows) in [("decision", MAIN_ROUTES), ("admin", ADMIN_ROUTES)] {
        for row in rows {
            // any method: the description has the two a proxy uses, GET and POST
            let methods: &[&str] = if row.method == "*" { &["GET", "POST"] } else { &[row.method] };
            for method in methods {
                let entry = routed.entry((method.to_string(), shape(row.path))).or_default();
                entry.0.insert(listener);
                entry.1.extend(match row.token {
                    Token::None => None,
                    Token::Server => Some("decisionToken"),
                    Token::ServerInHeader => Some("clefToken"),
                    Token::Admin => Some("adminToken"),
                });
            }
        }
    }
    let mut described: BTreeMap<(String, String), Served<'_>> = BTreeMap::new();
    let ops = operations(&spec);
    for ((method, path), op) in &ops {
        let listeners: BTreeSet<&str> = match op["x-clef-listener"].as_str() {
            Some("both") => ["decision", "admin"].into(),
            Some(one @ ("decision" | "admin")) => [one].into(),
            other => panic!("{method} {path}: x-clef-listener {other:?}"),
        };
        let security = op.get("security").unwrap_or(&spec["security"]);
        let tokens: BTreeSet<&str> = security
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s.as_object().unwrap().keys().map(String::as_str))
            .collect();
        described.insert((method.clone(), shape(path)), (listeners, tokens));
    }
    let missing: Vec<_> = routed.keys().filter(|k| !described.contains_key(*k)).collect();
    let extra: Vec<_> = described.keys().filter(|k| !routed.contains_key(*k)).collect();
    assert!(missing.is_empty(), "endpoints of the route tables docs/openapi.yaml lacks: {missing:?}");
    assert!(extra.is_empty(), "operations of docs/openapi.yaml no route table has: {extra:?}");
    for (key, (listeners, tokens)) in &routed {
        let (l, t) = &described[key];
        assert_eq!(l, listeners, "{key:?}: the listeners of docs/openapi.yaml's x-clef-listener");
        assert_eq!(t, tokens, "{key:?}: the tokens of docs/openapi.yaml's security");
    }
}

#[test]
fn every_error_code_of_the_docs_is_in_the_error_schema() {
    let spec = spec();
    let described: BTreeSet<String> = spec
        .pointer("/components/schemas/Error/properties/error/properties/code/enum")
        .and_then(Json::as_array)
        .expect("the Error schema's code enum")
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    // docs/api.md's error table: `| status | code | when |` (tests/docs.rs checks it against src/)
    let api = std::fs::read_to_string(Path::new(ROOT).join("docs/api.md")).unwrap();
    let errors = &api[api.find("## Errors").expect("docs/api.md has ## Errors")..];
    let row = regex::Regex::new(r"(?m)^\| (\d{3}) \| `([a-z_]+)` \|").unwrap();
    let documented: BTreeSet<String> = row.captures_iter(errors).map(|c| c[2].to_string()).collect();
    assert!(documented.len() > 20, "{documented:?}");
    assert_eq!(described, documented, "error codes: docs/openapi.yaml vs docs/api.md");
    // and each operation's responses are statuses, `default`, or refs that resolve
    for ((method, path), op) in operations(&spec) {
        assert!(op["operationId"].is_string(), "{method} {path}: no operationId");
        assert!(
            matches!(op["x-clef-listener"].as_str(), Some("decision" | "admin" | "both")),
            "{method} {path}: x-clef-listener"
        );
        for (status, r) in op["responses"].as_object().unwrap() {
            assert!(status == "default" || status.parse::<u16>().is_ok(), "{method} {path}: response {status}");
            resolve(&spec, r);
        }
    }
    let _ = json!(null);
}
