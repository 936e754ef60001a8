//! `/authz/{table}` (forward-auth, SPEC §6): the input built from the request, 200/403 by the
//! action's `allow`, `X-Clef-Rule`, clef's own token in `X-Clef-Token`; and the README's nginx
//! `auth_request` recipe run with a real nginx on loopback.
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

// ---------------------------------------------------------------------------------------------
// nginx auth_request in front of a service, as README shows

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
    let srv = gate_server("");
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
  server {{
    listen 127.0.0.1:{front};
    location / {{
      auth_request /_clef;
      proxy_pass http://127.0.0.1:{service};
    }}
    location = /_clef {{
      internal;
      proxy_pass http://127.0.0.1:{clef}/authz/gate$request_uri;
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
      proxy_set_header X-Original-Method $request_method;
    }}
  }}
}}
"#,
        dir = dir.path().display(),
        clef = srv.port,
    );
    let conf_path = write(dir.path(), "nginx.conf", conf);
    let mut child = Command::new(nginx)
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(&conf_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start nginx");
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(("127.0.0.1", front)).is_err() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "nginx did not listen: {}",
                std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let result = std::panic::catch_unwind(|| {
        let ok = call(front, "GET", "/health", &[], b"");
        assert_eq!((ok.status, ok.text()), (200, "backend /health".to_string()));
        let denied = call(front, "GET", "/admin/users", &[], b"");
        assert_eq!(denied.status, 403, "{}", denied.text());
        let admin = call(front, "GET", "/admin/users?page=2", &[("Authorization", "Bearer t")], b"");
        assert_eq!((admin.status, admin.text()), (200, "backend /admin/users?page=2".to_string()));
        let forced = call(front, "DELETE", "/orders/9?force=1", &[], b"");
        assert_eq!(forced.status, 200, "{}", forced.text());
        assert_eq!(call(front, "DELETE", "/orders/9", &[], b"").status, 403);
    });
    let _ = child.kill();
    let _ = child.wait();
    if let Err(e) = result {
        eprintln!("nginx error log:\n{}", std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default());
        std::panic::resume_unwind(e);
    }
}
