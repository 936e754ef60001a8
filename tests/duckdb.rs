//! docs/snapshots.md's DuckDB recipe on real segments: a clef with snapshots on (zstd
//! segments) and a shadow table makes known decisions, stops (every snapshot reaches its
//! segment), and DuckDB's Python package runs the recipe's SQL — taken from the doc as written,
//! the folder put in — checking the rows each query returns.
//!
//! Without python3's `duckdb` module the test is skipped, unless `CLEF_REQUIRE_DUCKDB` is set:
//! then it fails (`.ci/run` installs it with pip).
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use nix::sys::signal::Signal;
use serde_json::{json, Value as Json};

/// The SQL blocks of docs/snapshots.md's DuckDB section, in order.
fn recipe() -> Vec<String> {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/snapshots.md")).unwrap();
    let start = doc.find("## Querying the segments with DuckDB").expect("docs/snapshots.md has the DuckDB recipe");
    let section = &doc[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let blocks: Vec<String> =
        section.split("```sql\n").skip(1).map(|b| b.split("```").next().unwrap().trim().to_string()).collect();
    assert_eq!(blocks.len(), 4, "the view and three queries");
    blocks
}

fn duckdb_available() -> bool {
    let ok = Command::new("python3").args(["-c", "import duckdb"]).output().is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CLEF_REQUIRE_DUCKDB").is_none(),
            "CLEF_REQUIRE_DUCKDB is set but python3 cannot import duckdb (pip install duckdb)"
        );
        eprintln!("SKIPPED: python3's duckdb is not installed here (pip install duckdb); .ci/run installs it");
    }
    ok
}

/// Runs the view, then each query, in DuckDB; the rows of each query as JSON arrays.
fn run(sql: &[String]) -> Vec<Vec<Json>> {
    let script = r#"
import duckdb, json, sys
statements = json.load(sys.stdin)
con = duckdb.connect()
con.execute(statements[0])
out = [con.execute(q).fetchall() for q in statements[1:]]
print(json.dumps(out, default=str))
"#;
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run python3");
    use std::io::Write as _;
    child.stdin.take().unwrap().write_all(serde_json::to_string(sql).unwrap().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "duckdb: {}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<Vec<Json>> = serde_json::from_slice(&out.stdout).unwrap();
    rows
}

/// `risk`: `x > 10` → big, `tier == "vip" && x > 1` → vip. Its shadow answers `big` from 20 on.
const SHADOW: &str = r#"{"default": {"a": "default"}, "rules": [
  {"id": "big", "condition": "x > 20", "action": {"a": "v1"}},
  {"id": "vip", "condition": "tier == \"vip\" && x > 1", "action": {"a": "vip"}}
]}
"#;

#[test]
fn the_duckdb_recipe_reads_the_segments() {
    if !duckdb_available() {
        return;
    }
    let rest = "model:\n  default_table: risk\n  watch_file: false\n  shadow: {risk: risk_next}\n\
                snapshots:\n  enabled: true\n  dir: snaps\n  flush_ms: 50\n  compress: zstd\n";
    let mut srv = Server::start(&config("", "", rest), &[("risk.json", &table("v1")), ("risk_next.json", SHADOW)]);
    // 30 decisions: x from 0 to 29. big: x > 10 (19: 11..=29), of them the shadow agrees from 21
    // on; vip (tier vip, 2..=10: 9); default: 0, 1 (2)
    for x in 0..30 {
        let body = format!("{{\"x\": {x}, \"tier\": \"vip\", \"n\": {x}}}");
        let r = srv.post("/decide/risk", &body);
        assert_eq!(r.status, 200, "{}", r.text());
    }
    // SIGTERM: the recorder writes every snapshot of an answered decision before the exit
    srv.signal(Signal::SIGTERM);
    assert!(srv.wait_exit().success());
    let dir = srv.path().join("snaps");
    let segments: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(segments.iter().all(|n| n.to_string_lossy().ends_with(".ndjson.zst")), "{segments:?}");

    let sql: Vec<String> =
        recipe().into_iter().map(|q| q.replace("/var/lib/clef/snapshots", dir.to_str().unwrap())).collect();
    let rows = run(&sql);

    // decisions per rule per hour: big 19, vip 9, (default) 2 — in this hour, or two if the
    // test ran across the hour
    let mut per_rule = std::collections::BTreeMap::new();
    for r in &rows[0] {
        assert_eq!(r[1], "risk", "{r:?}");
        *per_rule.entry(r[2].as_str().unwrap().to_string()).or_insert(0) += r[3].as_u64().unwrap();
    }
    assert_eq!(per_rule, [("(default)".to_string(), 2), ("big".into(), 19), ("vip".into(), 9)].into());
    // the inputs behind `big`: x from 11 to 29 (newest first by id: decisions of one
    // millisecond on different workers are in the order of their ids' random bits)
    let mut xs: Vec<u64> = rows[1]
        .iter()
        .map(|r| serde_json::from_str::<Json>(r[1].as_str().unwrap()).unwrap()["x"].as_u64().unwrap())
        .collect();
    xs.sort_unstable();
    assert_eq!(xs, (11..=29).collect::<Vec<u64>>());
    // shadow disagreements: x from 11 to 20 (the shadow's `big` starts at 21)
    let mut disagreed: Vec<(u64, String, Json)> = rows[2]
        .iter()
        .map(|r| {
            let input: Json = serde_json::from_str(r[7].as_str().unwrap()).unwrap();
            (
                input["x"].as_u64().unwrap(),
                r[5].as_str().unwrap_or("null").to_string(),
                serde_json::from_str(r[6].as_str().unwrap()).unwrap(),
            )
        })
        .collect();
    disagreed.sort_by_key(|d| d.0);
    let expected: Vec<(u64, String, Json)> = (11..=20).map(|x| (x, "vip".to_string(), json!({"a": "vip"}))).collect();
    assert_eq!(disagreed, expected);
    assert!(rows[2].iter().all(|r| r[4] == "risk_next" && r[2] == "big"), "{:?}", rows[2]);
}
