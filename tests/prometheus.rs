//! The Grafana dashboard (docs/grafana/clef.json) against a real Prometheus: Debian's
//! `prometheus` scrapes a running clef (tables, a broken one, snapshots, a router with a live
//! and a dead peer) under a little load, every panel's query is run through Prometheus's HTTP
//! API and must return data, and `promtool check metrics` finds nothing to say about
//! `/metrics`. The panels' data is drawn as an SVG (`CLEF_UPDATE_SCREENSHOTS=1` writes it to
//! docs/grafana/panels.svg for README): what Prometheus answered, not Grafana's rendering.
//!
//! Without prometheus installed the test is skipped, unless `CLEF_REQUIRE_PROMETHEUS` is set:
//! then it fails (`.ci/run` installs it).
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::Value as Json;

fn tool(name: &str) -> Option<std::path::PathBuf> {
    let paths = [format!("/usr/bin/{name}"), format!("/usr/local/bin/{name}")];
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    required_tool(&paths, "CLEF_REQUIRE_PROMETHEUS", "apt-get install prometheus")
}

/// A Prometheus process, killed on drop.
struct Prometheus {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Prometheus on 127.0.0.1, scraping `target` every second, its storage in a temp folder.
    fn start(exe: &Path, target: u16) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: clef\n    static_configs:\n      - targets: ['127.0.0.1:{target}']\n"
        );
        let file = write(dir.path(), "prometheus.yml", config);
        let port = free_port();
        let child = Command::new(exe)
            .arg(format!("--config.file={}", file.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--storage.tsdb.retention.time=1h")
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("prometheus.log")).unwrap())
            .spawn()
            .expect("start prometheus");
        let p = Prometheus { child, port, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Conn::try_open(port)
            .ok()
            .and_then(|mut c| c.try_request("GET", "/-/ready", &[], b"").ok())
            .is_none_or(|r| r.status != 200)
        {
            assert!(Instant::now() < deadline, "prometheus was not ready within 30 s");
            std::thread::sleep(Duration::from_millis(200));
        }
        p
    }

    fn api(&self, path: &str) -> Json {
        let r = call(self.port, "GET", path, &[], b"");
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        let v = r.json();
        assert_eq!(v["status"], "success", "{path}: {v}");
        v["data"].clone()
    }

    fn query(&self, expr: &str) -> Vec<Json> {
        let q = utf8_percent_encode(expr, NON_ALPHANUMERIC);
        self.api(&format!("/api/v1/query?query={q}"))["result"].as_array().cloned().unwrap_or_default()
    }

    fn query_range(&self, expr: &str, seconds: u64) -> Vec<Json> {
        let q = utf8_percent_encode(expr, NON_ALPHANUMERIC);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        let path = format!("/api/v1/query_range?query={q}&start={}&end={now}&step=1", now - seconds);
        self.api(&path)["result"].as_array().cloned().unwrap_or_default()
    }
}

/// A panel's query as Grafana sends it, for these tests: every box, rates over 5 s.
fn grafana_expr(expr: &str) -> String {
    expr.replace("$instance", ".*")
        .replace("$__rate_interval", "5s")
        .replace("$__range", "30s")
        .replace("$__interval", "1s")
}

fn dashboard() -> Json {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/grafana/clef.json")).unwrap();
    serde_json::from_str(&text).expect("docs/grafana/clef.json is JSON")
}

/// Every panel with its title and queries.
fn panels(d: &Json) -> Vec<(String, String, Vec<String>)> {
    d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] != "row")
        .map(|p| {
            let exprs =
                p["targets"].as_array().unwrap().iter().map(|t| t["expr"].as_str().unwrap().to_string()).collect();
            (p["title"].as_str().unwrap().to_string(), p["type"].as_str().unwrap().to_string(), exprs)
        })
        .collect()
}

#[test]
fn the_dashboard_is_importable_as_is() {
    let d = dashboard();
    let vars = d["templating"]["list"].as_array().unwrap();
    let datasource = vars.iter().find(|v| v["type"] == "datasource").expect("a data source variable");
    assert_eq!(datasource["query"], "prometheus");
    let instance = vars.iter().find(|v| v["name"] == "instance").expect("an instance variable");
    assert_eq!(instance["definition"], "label_values(clef_build_info, instance)");
    assert_eq!(instance["multi"], true);
    // no data source of the author's Grafana: every panel and query uses the variable
    let text = d.to_string();
    for uid in regex::Regex::new(r#""uid":"([^"]*)""#).unwrap().captures_iter(&text) {
        assert!(&uid[1] == "${datasource}" || &uid[1] == "clef-appliance", "a fixed data source uid {}", &uid[1]);
    }
    let panels = panels(&d);
    assert!(panels.len() >= 12);
    // the metric names are those /metrics exposes (docs/metrics.md lists them; tests/docs.rs checks that list)
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/metrics.md")).unwrap();
    let name = regex::Regex::new(r"\b((?:clef|process)_[a-z_]+)").unwrap();
    for (title, _, exprs) in &panels {
        for e in exprs {
            assert!(e.contains("instance=~\"$instance\""), "{title}: {e} is not narrowed to $instance");
            for m in name.captures_iter(e) {
                let metric = m[1].trim_end_matches("_bucket");
                assert!(doc.contains(&format!("`{metric}`")), "{title}: {metric} is not in docs/metrics.md");
            }
        }
    }
}

#[test]
fn every_panel_has_data_from_a_real_prometheus() {
    let (Some(prometheus), Some(promtool)) = (tool("prometheus"), tool("promtool")) else { return };
    // a live peer serving `remote` (the box forwards it) and a dead one
    let peer = Server::start(&plain(), &[("remote.json", &table("peer"))]);
    let dead = free_port();
    let rest = format!(
        "model:\n  default_table: risk\n  watch_file: false\n\
         snapshots:\n  enabled: true\n  dir: snaps\n  flush_ms: 100\n\
         router:\n  forward_timeout_ms: 1000\n  health: {{interval_ms: 200, timeout_ms: 100, unhealthy_after: 2, healthy_after: 1, ejection_ms: 1000}}\n  instances:\n    - {{id: local}}\n    - {{id: peer-1, addr: 127.0.0.1:{}}}\n    - {{id: gone, addr: 127.0.0.1:{dead}}}\n",
        peer.port
    );
    let srv = Server::start(&config("", "", &rest), &[("risk.json", &table("v1")), ("broken.json", BROKEN)]);

    // promtool on the classic text format Prometheus reads
    let metrics = call(srv.admin, "GET", "/metrics", &[], b"");
    assert_eq!(metrics.status, 200);
    let mut check = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check.stdin.take().unwrap().write_all(&metrics.body).unwrap();
    let out = check.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "promtool check metrics:\n{said}");

    // a little load while Prometheus scrapes: decisions here and forwarded, warnings, invalid
    // inputs, a reload
    let stop = Arc::new(AtomicBool::new(false));
    let (port, stopping) = (srv.port, stop.clone());
    let load = std::thread::spawn(move || {
        let mut i = 0u64;
        while !stopping.load(Ordering::Relaxed) {
            let Ok(mut c) = Conn::try_open(port) else { return };
            for _ in 0..20 {
                i += 1;
                let (path, body) = match i % 5 {
                    0 => ("/decide/risk", format!("{{\"x\": {}}}", i % 30)),
                    1 => ("/decide/risk", "{\"x\": \"text\"}".to_string()),
                    2 => ("/decide/remote", format!("{{\"x\": {}}}", i % 30)),
                    3 => ("/decide/risk", "not json".to_string()),
                    _ => ("/decide/risk", "{\"x\": 2, \"tier\": \"vip\"}".to_string()),
                };
                let _ = c.try_request("POST", path, &[], body.as_bytes());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    let prom = Prometheus::start(&prometheus, srv.admin);
    srv.admin_post("/reload");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let scrapes = prom.query("count_over_time(clef_uptime_seconds[1m])");
        let n = scrapes.first().and_then(|r| r["value"][1].as_str()).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        if n >= 15.0 {
            break;
        }
        assert!(Instant::now() < deadline, "prometheus scraped clef {n} times in 60 s, not 15");
        std::thread::sleep(Duration::from_millis(500));
    }

    // the instance variable's values, and every panel's queries
    let values = prom.api("/api/v1/label/instance/values?match[]=clef_build_info");
    assert_eq!(values, serde_json::json!([format!("127.0.0.1:{}", srv.admin)]));
    let d = dashboard();
    let mut drawn = Vec::new();
    for (title, kind, exprs) in panels(&d) {
        let mut series = Vec::new();
        for e in &exprs {
            let q = grafana_expr(e);
            let now = prom.query(&q);
            assert!(!now.is_empty(), "panel \"{title}\": {q} returned no data");
            if kind == "timeseries" {
                series.extend(prom.query_range(&q, 30));
            }
        }
        if kind == "timeseries" {
            drawn.push((title, series));
        }
    }
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();

    let svg = draw(&drawn);
    std::fs::write(srv.path().join("panels.svg"), &svg).unwrap();
    if std::env::var_os("CLEF_UPDATE_SCREENSHOTS").is_some() {
        std::fs::write(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/grafana/panels.svg"), &svg).unwrap();
    }
}

/// The panels' series as small line charts in an SVG, three to a row.
fn draw(panels: &[(String, Vec<Json>)]) -> String {
    const W: f64 = 360.0;
    const H: f64 = 170.0;
    const COLORS: [&str; 6] = ["#3274d9", "#e0752d", "#56a64b", "#a352cc", "#f2cc0c", "#e02f44"];
    let rows = panels.len().div_ceil(3);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"11\">\
         <rect width=\"100%\" height=\"100%\" fill=\"#181b1f\"/>",
        3.0 * W + 40.0,
        rows as f64 * (H + 20.0) + 50.0
    );
    let _ = write!(
        s,
        "<text x=\"20\" y=\"28\" fill=\"#ccccdc\" font-size=\"12\">docs/grafana/clef.json: each timeseries panel's queries \
         as a real Prometheus answered them over 30 s of tests/prometheus.rs, drawn by the test (not by Grafana)</text>"
    );
    for (i, (title, series)) in panels.iter().enumerate() {
        let (x0, y0) = (20.0 + (i % 3) as f64 * (W + 0.0), 45.0 + (i / 3) as f64 * (H + 20.0));
        let _ = write!(
            s,
            "<g transform=\"translate({x0},{y0})\"><rect width=\"{}\" height=\"{H}\" fill=\"#22252b\" stroke=\"#34373d\"/>\
             <text x=\"8\" y=\"16\" fill=\"#ccccdc\" font-weight=\"bold\">{}</text>",
            W - 10.0,
            xml(title)
        );
        let points: Vec<Vec<(f64, f64)>> = series
            .iter()
            .map(|r| {
                r["values"]
                    .as_array()
                    .map(|v| {
                        v.iter()
                            .filter_map(|p| {
                                Some((p[0].as_f64()?, p[1].as_str()?.parse::<f64>().ok().filter(|v| v.is_finite())?))
                            })
                            .collect()
                    })
                    .unwrap_or_default()
            })
            .collect();
        let all: Vec<&(f64, f64)> = points.iter().flatten().collect();
        let (t0, t1) = all.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
        let top = all.iter().fold(0.0f64, |m, p| m.max(p.1));
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"16\" fill=\"#8e8e8e\" text-anchor=\"end\">max {}</text>",
            W - 18.0,
            short(top)
        );
        for (k, line) in points.iter().enumerate() {
            let path: Vec<String> = line
                .iter()
                .map(|(t, v)| {
                    let x = 10.0 + (t - t0) / (t1 - t0).max(1.0) * (W - 30.0);
                    let y = H - 12.0 - if top > 0.0 { v / top } else { 0.0 } * (H - 40.0);
                    format!("{x:.1},{y:.1}")
                })
                .collect();
            let _ = write!(
                s,
                "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>",
                COLORS[k % COLORS.len()],
                path.join(" ")
            );
        }
        let _ = write!(s, "<text x=\"8\" y=\"{}\" fill=\"#8e8e8e\">{} series</text></g>", H - 2.0, series.len());
    }
    s.push_str("</svg>\n");
    s
}

fn short(v: f64) -> String {
    match v {
        v if v >= 1e6 => format!("{:.1}M", v / 1e6),
        v if v >= 1e3 => format!("{:.1}k", v / 1e3),
        v if v >= 1.0 => format!("{v:.1}"),
        v => format!("{v:.2e}"),
    }
}

fn xml(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
