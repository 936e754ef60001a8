//! `/authz/{table}` (forward-auth, SPEC §6): the input built from the request, 200/403 by the
//! action's `allow`, the status and headers an action asks for (as they are, or as nginx's
//! `auth_request` takes them), `X-Clef-Rule`, clef's own token in `X-Clef-Token`; what an action
//! may ask checked at load; and docs/api.md's nginx `auth_request` recipe run with a real nginx
//! on loopback.
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

/// A gate that says what it saw: every rule reads one part of the input.
const GATE: &str = r#"{"default": {"allow": false, "reason": "no rule"},
  "rules": [
    {"id": "probe", "condition": "method in [\"GET\", \"HEAD\"] && path == \"/health\"", "action": {"allow": true}},
    {"id": "admin_needs_bearer", "condition": "path startsWith \"/admin\" && !(headers.authorization ?? \"\" startsWith \"Bearer \")", "action": {"allow": false, "reason": "admin needs a bearer token"}},
    {"id": "admin", "condition": "path startsWith \"/admin\"", "action": {"allow": true, "who": "admin"}},
    {"id": "deletes", "condition": "method == \"DELETE\" && query contains \"force=1\"", "action": {"allow": true, "why": "forced delete"}},
    {"id": "browsers", "condition": "headers[\"user-agent\"] contains \"Mozilla\" && headers[\"x-many\"] == \"a, b\"", "action": {"allow": true}}
  ]}"#;

const MODEL: &str = "model:\n  watch_file: false\n";

fn gate_server(server: &str) -> Server {
    Server::start(&config(server, "", MODEL), &[("gate.json", GATE)])
}

#[test]
fn the_input_is_the_request_and_the_answer_is_200_or_403() {
    let srv = gate_server("");
    let ask = |method: &str, path: &str, headers: &[(&str, &str)]| call(srv.port, method, path, headers, b"");

    let r = ask("GET", "/authz/gate/health", &[]);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-clef-rule"), Some("probe"));
    assert_eq!(r.json()["rule_id"], json!("probe"));

    // the request's own Authorization header is input, not clef's token
    let r = ask("GET", "/authz/gate/admin/users", &[]);
    assert_eq!((r.status, r.header("x-clef-rule")), (403, Some("admin_needs_bearer")), "{}", r.text());
    let r = ask("GET", "/authz/gate/admin/users", &[("Authorization", "Bearer xyz")]);
    assert_eq!((r.status, r.header("x-clef-rule")), (200, Some("admin")), "{}", r.text());

    // any method; the query of the /authz request itself, or of the appended path
    let r = ask("DELETE", "/authz/gate/orders/7?force=1", &[]);
    assert_eq!((r.status, r.header("x-clef-rule")), (200, Some("deletes")), "{}", r.text());
    let r = ask("DELETE", "/v1/authz/gate/orders/7?force=0", &[]);
    assert_eq!(r.status, 403, "{}", r.text());

    // the original method and URI in the headers forward-auth setups use
    let r = ask("GET", "/authz/gate", &[("X-Original-Method", "DELETE"), ("X-Original-URI", "/orders/1?force=1")]);
    assert_eq!((r.status, r.header("x-clef-rule")), (200, Some("deletes")), "{}", r.text());
    let r = ask("GET", "/authz/gate", &[("X-Forwarded-Method", "GET"), ("X-Forwarded-Uri", "/admin/x")]);
    assert_eq!((r.status, r.header("x-clef-rule")), (403, Some("admin_needs_bearer")), "{}", r.text());

    // header names in lower case; a repeated header joined with ", "
    let r = ask("PUT", "/authz/gate/x", &[("User-Agent", "Mozilla/5.0"), ("X-Many", "a"), ("x-many", "b")]);
    assert_eq!((r.status, r.header("x-clef-rule")), (200, Some("browsers")), "{}", r.text());

    // no rule: the default answers, 403, no X-Clef-Rule
    let r = ask("POST", "/authz/gate", &[]);
    assert_eq!(r.status, 403);
    assert_eq!(r.header("x-clef-rule"), None);
    assert_eq!(r.json()["action"]["reason"], json!("no rule"));

    // errors are JSON errors, as for /decide
    ask("GET", "/authz/nope/x", &[]).assert_error(404, "unknown_table");
    call(srv.admin, "GET", "/authz/gate/health", &[], b"").assert_error(404, "not_found");
}

#[test]
fn the_server_token_goes_in_x_clef_token() {
    let dir = tempfile::tempdir().expect("temp dir");
    write(dir.path(), "tables/gate.json", GATE);
    write(dir.path(), "decide.token", "s3cret\n");
    let text = config("  token_file: decide.token\n", "", MODEL);
    let srv = Server::launch(dir, move |p| p.fill(&text).into_bytes(), |_, _| None);
    let path = "/authz/gate/admin/x";
    call(srv.port, "GET", path, &[], b"").assert_error(401, "unauthorized");
    // clef's token in Authorization is not clef's token here: it is the input's
    call(srv.port, "GET", path, &[("Authorization", "Bearer s3cret")], b"").assert_error(401, "unauthorized");
    let r = call(srv.port, "GET", path, &[("X-Clef-Token", "s3cret"), ("Authorization", "Bearer user")], b"");
    assert_eq!((r.status, r.header("x-clef-rule")), (200, Some("admin")), "{}", r.text());
}

/// A gate whose refusals ask for their status and headers.
const REFUSALS: &str = r#"{"default": {"allow": false, "status": 404, "reason": "no route"},
  "rules": [
    {"id": "open", "condition": "path == \"/open\"", "action": {"allow": true, "headers": {"X-User": "guest"}}},
    {"id": "embargo", "condition": "headers[\"cf-ipcountry\"] == \"KP\"", "action": {"allow": false, "status": 451}},
    {"id": "slow_down", "condition": "headers[\"x-rate\"] == \"high\"", "action": {"allow": false, "status": 429, "headers": {"Retry-After": "30"}}},
    {"id": "login", "condition": "path startsWith \"/private\" && headers.authorization == nil", "action": {"allow": false, "status": 401, "headers": {"WWW-Authenticate": "Bearer realm=\"api\""}}},
    {"id": "member", "condition": "path startsWith \"/private\"", "action": {"allow": true, "headers": {"X-User": "member"}}},
    {"id": "forbidden", "condition": "path startsWith \"/admin\"", "action": {"allow": false}}
  ]}"#;

#[test]
fn a_table_chooses_the_status_and_headers_of_the_answer() {
    let srv = Server::start(&config("", "", MODEL), &[("gate.json", REFUSALS)]);
    let ask = |path: &str, headers: &[(&str, &str)]| call(srv.port, "GET", path, headers, b"");
    let nginx = [("X-Clef-Proxy", "nginx")];

    // as Envoy's ext_authz and the others take it: the status the action asks for, its headers
    let r = ask("/authz/gate/open", &[]);
    assert_eq!((r.status, r.header("x-clef-status"), r.header("x-user")), (200, Some("200"), Some("guest")));
    let r = ask("/authz/gate/private/x", &[]);
    assert_eq!((r.status, r.header("www-authenticate")), (401, Some("Bearer realm=\"api\"")), "{}", r.text());
    assert_eq!((r.header("x-clef-status"), r.header("x-clef-rule")), (Some("401"), Some("login")));
    let r = ask("/authz/gate/private/x", &[("Authorization", "Basic x")]);
    assert_eq!((r.status, r.header("x-user")), (200, Some("member")), "{}", r.text());
    let r = ask("/authz/gate/open", &[("X-Rate", "high")]);
    assert_eq!((r.status, r.header("retry-after")), (200, None), "the first rule that matches decides");
    let r = ask("/authz/gate/x", &[("X-Rate", "high")]);
    assert_eq!((r.status, r.header("retry-after"), r.header("x-clef-rule")), (429, Some("30"), Some("slow_down")));
    assert_eq!(r.json()["action"]["status"], json!(429), "the body is the decision: {}", r.text());
    assert_eq!(ask("/authz/gate/x", &[("CF-IPCountry", "KP")]).status, 451);
    let r = ask("/authz/gate/admin", &[]);
    assert_eq!((r.status, r.header("x-clef-status")), (403, Some("403")), "no status: 403");
    assert_eq!(ask("/authz/gate/nowhere", &[]).status, 404, "the default's status");

    // as nginx's auth_request takes it: 2xx, 401 or 403, the status asked for in X-Clef-Status
    let r = ask("/authz/gate/x", &[("X-Rate", "high"), nginx[0]]);
    assert_eq!((r.status, r.header("x-clef-status"), r.header("retry-after")), (403, Some("429"), Some("30")));
    let r = ask("/authz/gate/private/x", &nginx);
    assert_eq!((r.status, r.header("www-authenticate")), (401, Some("Bearer realm=\"api\"")));
    let r = ask("/authz/gate/x", &[("CF-IPCountry", "KP"), nginx[0]]);
    assert_eq!((r.status, r.header("x-clef-status")), (403, Some("451")));
    assert_eq!(ask("/authz/gate/open", &nginx).status, 200);
    ask("/authz/gate/open", &[("X-Clef-Proxy", "envoy")]).assert_error(400, "invalid_header");
}

#[test]
fn what_an_action_asks_of_forward_auth_is_checked_at_load() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cases = [
        (
            "jev.json",
            "{\"rules\": [\n  {\"id\": \"a\", \"condition\": \"true\", \"action\": {\"status\": 99}}\n]}\n",
            "jev.json:2:46: error: rule \"a\": in the action: \"status\" 99 must be an integer from 400 to 599",
        ),
        (
            "allow.json",
            "{\"default\": {\"allow\": true, \"status\": 403},\n \"rules\": []}\n",
            "allow.json:1:13: error: in the default: \"status\" 403 must be an integer from 200 to 299 with \"allow\": true",
        ),
        (
            "rules.yaml",
            "rules:\n  - id: a\n    when: 'true'\n    action: {allow: false, headers: {Retry After: '30'}}\n",
            "rules.yaml:4:13: error: rule \"a\": in the action: \"headers\": \"Retry After\" is not a header name",
        ),
        (
            "cells.flash.json",
            "{\"dimensions\": [{\"name\": \"d\", \"values\": [\"a\"]}],\n \"actions\": [{\"id\": 1, \"headers\": {\"Content-Length\": \"0\"}}],\n \"matrix\": [1]}\n",
            "cells.flash.json:2:14: error: action 1: \"headers\": \"Content-Length\" is set by clef itself",
        ),
    ];
    for (name, text, says) in cases {
        let path = write(dir.path(), name, text);
        let out = Command::new(env!("CARGO_BIN_EXE_clef")).arg("check").arg(&path).output().expect("run clef check");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
        let want = format!("{}/{says}", dir.path().display());
        assert!(stderr.contains(&want), "{name}: want `{want}` in\n{stderr}");
    }
}

// ---------------------------------------------------------------------------------------------
// nginx auth_request in front of a service: docs/api.md's recipe, run as it is written

fn nginx() -> Option<&'static str> {
    ["/usr/sbin/nginx", "/usr/bin/nginx"].into_iter().find(|p| std::path::Path::new(p).exists())
}

/// A service that answers every request `200 backend PATH`.
fn backend() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(64) {
            let Ok(mut s) = stream else { continue };
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]);
            let path = head.split(' ').nth(1).unwrap_or("?").to_string();
            let body = format!("backend {path}");
            let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
        }
    });
    port
}

/// The nginx configuration docs/api.md gives (README.md shows the same), with the ports and
/// table of this test.
fn documented_recipe(front: u16, service: u16, clef: u16) -> String {
    let api = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/api.md")).expect("docs/api.md");
    let marker = "<!-- nginx recipe: tests/authz.rs runs it -->\n```nginx\n";
    let start = api.find(marker).expect("docs/api.md has the nginx recipe") + marker.len();
    let recipe = &api[start..start + api[start..].find("```").expect("the recipe's fence ends")];
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README.md");
    assert!(readme.contains(recipe), "README.md shows another nginx recipe than docs/api.md");
    for from in ["listen 80;", "127.0.0.1:3000", "127.0.0.1:8080/authz/request_gate"] {
        assert!(recipe.contains(from), "the recipe lost `{from}`");
    }
    recipe
        .replace("listen 80;", &format!("listen 127.0.0.1:{front};"))
        .replace("127.0.0.1:3000", &format!("127.0.0.1:{service}"))
        .replace("127.0.0.1:8080/authz/request_gate", &format!("127.0.0.1:{clef}/authz/gate"))
}

/// The nginx master process, stopped when dropped (a failed assertion included) with SIGTERM,
/// on which it stops its workers too: a killed master would leave them running.
struct Nginx(std::process::Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        let master = nix::unistd::Pid::from_raw(self.0.id() as i32);
        if nix::sys::signal::kill(master, nix::sys::signal::Signal::SIGTERM).is_err() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

#[test]
fn nginx_auth_request_in_front_of_a_service() {
    let Some(nginx) = nginx() else {
        assert!(
            std::env::var_os("CLEF_REQUIRE_NGINX").is_none(),
            "CLEF_REQUIRE_NGINX is set but nginx is not installed"
        );
        eprintln!("SKIPPED: nginx is not installed here (apt-get install nginx-light); .ci/run installs it");
        return;
    };
    let srv = Server::start(&config("", "", MODEL), &[("gate.json", REFUSALS)]);
    let service = backend();
    let front = free_port();
    let dir = tempfile::tempdir().expect("temp dir");
    let conf = format!(
        r#"daemon off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {dir}/body; proxy_temp_path {dir}/proxy; fastcgi_temp_path {dir}/fcgi;
  uwsgi_temp_path {dir}/uwsgi; scgi_temp_path {dir}/scgi;
{recipe}
}}
"#,
        dir = dir.path().display(),
        recipe = documented_recipe(front, service, srv.port),
    );
    let conf_path = write(dir.path(), "nginx.conf", conf);
    let child = Command::new(nginx)
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(&conf_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start nginx");
    let nginx = Nginx(child);
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(("127.0.0.1", front)).is_err() {
        assert!(
            Instant::now() < deadline,
            "nginx did not listen: {}",
            std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let result = std::panic::catch_unwind(|| {
        let ask = |method: &str, path: &str, headers: &[(&str, &str)]| call(front, method, path, headers, b"");
        let ok = ask("GET", "/open?page=2", &[]);
        assert_eq!((ok.status, ok.text()), (200, "backend /open?page=2".to_string()));
        let member = ask("POST", "/private/notes", &[("Authorization", "Bearer t")]);
        assert_eq!((member.status, member.text()), (200, "backend /private/notes".to_string()));
        // each refusal with the status and headers its rule asks for
        let login = ask("GET", "/private/notes", &[]);
        assert_eq!((login.status, login.header("www-authenticate")), (401, Some("Bearer realm=\"api\"")));
        let slow = ask("GET", "/x", &[("X-Rate", "high")]);
        assert_eq!((slow.status, slow.header("retry-after")), (429, Some("30")), "{}", slow.text());
        assert_eq!(ask("GET", "/x", &[("CF-IPCountry", "KP")]).status, 451);
        assert_eq!(ask("DELETE", "/admin/users", &[]).status, 403);
        let nowhere = ask("GET", "/nowhere", &[]);
        assert_eq!((nowhere.status, nowhere.header("retry-after")), (404, None));
    });
    drop(nginx);
    let log = std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default();
    if let Err(e) = result {
        eprintln!("nginx error log:\n{log}");
        std::panic::resume_unwind(e);
    }
    // a status auth_request does not take would be its 500, and an error in its log
    assert!(!log.contains("auth request unexpected status"), "{log}");
}
