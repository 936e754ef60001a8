//! Flash tables (`*.flash.json`, `*.cfb`) end to end: the source's diagnostics, the decisions
//! of SPEC §4.3 and its pinned points, the same table from the source and from its `.cfb`, a
//! `.cfb` beside its source in the registry, and `clef flash compile|inspect`.
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use clef::diagnostic::Diagnostic;
use clef::registry::{Outcome, Registry, Sources};
use clef::table::digest_hex as hex;
use clef::table::flash::{cfb, source, FlashTable};
use clef::table::{Limits, Table, TableKind};
use serde_json::{json, Value as Json};
use sha2::{Digest, Sha256};

const SPEC_EXAMPLE: &str = r#"{ "dimensions": [
    {"name": "device", "field": "device", "values": ["desktop", "mobile", "tablet"]},
    {"name": "error_rate_level", "field": "error_rate", "values": ["low", "medium", "high"],
     "mapping": {"0.0-0.03": "low", "0.03-0.1": "medium", "0.1+": "high"}} ],
  "actions": [ {"id": 1, "type": "proxy", "upstream": "model-v1"},
               {"id": 2, "type": "cache", "ttl": 10},
               {"id": 3, "type": "fallback", "response": "503 Service Unavailable"} ],
  "matrix": [[1, 2, 3], [2, 2, 3], [1, 2, 3]],
  "default": 3 }"#;

fn compile(text: &str) -> FlashTable {
    source::compile("t.flash.json", text.as_bytes()).unwrap_or_else(|d| panic!("{}", show(&d)))
}

fn errors(text: &str) -> Vec<Diagnostic> {
    match source::compile("t.flash.json", text.as_bytes()) {
        Ok(_) => panic!("should not compile:\n{text}"),
        Err(d) => d,
    }
}

fn show(diags: &[Diagnostic]) -> String {
    diags.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("\n")
}

/// The one error of `text`, which must contain every fragment.
fn one_error(text: &str, fragments: &[&str]) -> Diagnostic {
    let diags = errors(text);
    assert_eq!(diags.len(), 1, "{}", show(&diags));
    for f in fragments {
        assert!(diags[0].message.contains(f), "`{f}` not in: {}", diags[0].message);
    }
    diags.into_iter().next().unwrap()
}

fn load(path: &str, bytes: &[u8]) -> Table {
    Table::from_bytes(Path::new(path), bytes, &Limits::default()).unwrap_or_else(|e| panic!("{e}"))
}

/// `(rule_id, matched, action)` of a decision, as the response says them.
fn decide(t: &Table, input: &str) -> (Json, bool, Json) {
    let d = t.decide(input.as_bytes(), false).unwrap();
    let rule = t.outcome_id(&d).map(Json::String).unwrap_or(Json::Null);
    (rule, d.rule.is_some(), serde_json::from_str(t.action_json(&d)).unwrap())
}

fn response(t: &Table, input: &str, explain: bool) -> Json {
    let d = t.decide(input.as_bytes(), explain).unwrap();
    let meta = clef::render::ResponseMeta {
        timestamp: std::time::SystemTime::now().into(),
        snapshot_id: None,
        recorded: true,
        variant: None,
    };
    let mut out = String::new();
    clef::render::write_decision(t, &d, &meta, &mut out);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

// ---------------------------------------------------------------------------------------------
// decisions

#[test]
fn the_spec_example_decides_by_cell() {
    let t = load("net.flash.json", SPEC_EXAMPLE.as_bytes());
    assert_eq!(t.name, "net");
    assert_eq!(t.kind, TableKind::Flash);
    assert_eq!(t.kind.name(), "flash");
    assert_eq!(t.engine.outcome_count(), 9);
    let r = response(&t, r#"{"device": "mobile", "error_rate": 0.2}"#, false);
    assert_eq!(r["rule_id"], "device=mobile,error_rate_level=high");
    assert_eq!(r["matched"], true);
    assert_eq!(r["action"], json!({"id": 3, "type": "fallback", "response": "503 Service Unavailable"}));
    assert_eq!(r["table"], "net");
    for (device, rate, cell, id) in [
        ("desktop", "0", "device=desktop,error_rate_level=low", 1),
        ("desktop", "0.0299", "device=desktop,error_rate_level=low", 1),
        ("desktop", "0.03", "device=desktop,error_rate_level=medium", 2),
        ("mobile", "0.01", "device=mobile,error_rate_level=low", 2),
        ("tablet", "0.1", "device=tablet,error_rate_level=high", 3),
        ("tablet", "1e300", "device=tablet,error_rate_level=high", 3),
        ("tablet", "99999999999999999999999", "device=tablet,error_rate_level=high", 3),
    ] {
        let (rule, matched, action) = decide(&t, &format!(r#"{{"device": "{device}", "error_rate": {rate}}}"#));
        assert_eq!((rule, matched, &action["id"]), (json!(cell), true, &json!(id)), "{device} {rate}");
    }
}

#[test]
fn an_input_that_fits_no_bucket_gets_the_default() {
    let t = load("net.flash.json", SPEC_EXAMPLE.as_bytes());
    let default = json!({"id": 3, "type": "fallback", "response": "503 Service Unavailable"});
    for input in [
        r#"{"device": "Mobile", "error_rate": 0.01}"#,
        r#"{"device": "mobile ", "error_rate": 0.01}"#,
        r#"{"device": "mobile", "error_rate": "0.05"}"#,
        r#"{"device": "mobile", "error_rate": -0.01}"#,
        r#"{"device": "mobile", "error_rate": null}"#,
        r#"{"device": "mobile", "error_rate": true}"#,
        r#"{"device": "mobile", "error_rate": [0.01]}"#,
        r#"{"device": "mobile"}"#,
        r#"{"device": 1, "error_rate": 0.01}"#,
        r#"{"error_rate": 0.01}"#,
        r#"{}"#,
    ] {
        let r = response(&t, input, false);
        assert_eq!((&r["rule_id"], &r["matched"], &r["action"]), (&Json::Null, &json!(false), &default), "{input}");
    }
    // Without a default, the action is null.
    let no_default = SPEC_EXAMPLE.replace(r#""default": 3"#, r#""default": null"#);
    let t = load("net.flash.json", no_default.as_bytes());
    assert_eq!(decide(&t, "{}"), (Json::Null, false, Json::Null));
    let t = load("net.flash.json", no_default.replace(r#","default": null"#, "").as_bytes());
    assert_eq!(decide(&t, "{}"), (Json::Null, false, Json::Null));
}

#[test]
fn the_trace_says_where_each_value_went() {
    let t = load("net.flash.json", SPEC_EXAMPLE.as_bytes());
    let r = response(&t, r#"{"device": "mobile", "error_rate": 0.07}"#, true);
    assert_eq!(
        r["trace"],
        json!([{"rule_id": "device=mobile,error_rate_level=medium", "matched": true,
                "reason": "device=\"mobile\" → mobile, error_rate=0.07 → medium"}])
    );
    assert_eq!(r["skipped"], 0);
    let r = response(&t, r#"{"device": "tv", "error_rate": "0.07"}"#, true);
    assert_eq!(r["trace"][0]["rule_id"], Json::Null);
    assert_eq!(r["trace"][0]["matched"], false);
    assert_eq!(
        r["trace"][0]["reason"],
        "device=\"tv\" → no bucket (not one of desktop, mobile, tablet), error_rate=\"0.07\" → no bucket (not a \
         number): the default answers"
    );
    let r = response(&t, r#"{"device": "desktop"}"#, true);
    assert_eq!(
        r["trace"][0]["reason"],
        "device=\"desktop\" → desktop, error_rate missing → no bucket: the default answers"
    );
}

#[test]
fn fields_are_dotted_paths_and_default_to_the_name() {
    let t = load(
        "p.flash.json",
        br#"{"dimensions": [{"name": "tier", "values": ["gold"]},
              {"name": "rate", "field": "metrics.edge.error_rate", "values": ["ok", "bad"],
               "ranges": [{"value": "bad", "max": 0}, {"value": "ok", "min": 0, "max": 0.5}, {"value": "bad", "min": 0.5}]}],
            "actions": [{"id": 10}, {"id": 20}], "cells": {"*,*": 10, "*,bad": 20}}"#,
    );
    for (input, cell) in [
        (r#"{"tier": "gold", "metrics": {"edge": {"error_rate": 0.1}}}"#, json!("tier=gold,rate=ok")),
        (r#"{"tier": "gold", "metrics": {"edge": {"error_rate": -3}}}"#, json!("tier=gold,rate=bad")),
        (r#"{"tier": "gold", "metrics": {"edge": {"error_rate": 7}}}"#, json!("tier=gold,rate=bad")),
        (r#"{"tier": "gold", "metrics": {"edge": 1}}"#, Json::Null),
        (r#"{"tier": "gold", "metrics.edge.error_rate": 0.1}"#, Json::Null),
        // A repeated key: the last one counts, as everywhere in clef.
        (
            r#"{"tier": "gold", "metrics": {"edge": {"error_rate": 1}, "edge": {"error_rate": 0.2}}}"#,
            json!("tier=gold,rate=ok"),
        ),
    ] {
        assert_eq!(decide(&t, input).0, cell, "{input}");
    }
}

#[test]
fn cells_with_wildcards_apply_in_order() {
    let matrix = compile(SPEC_EXAMPLE);
    let cells = compile(&SPEC_EXAMPLE.replace(
        r#""matrix": [[1, 2, 3], [2, 2, 3], [1, 2, 3]]"#,
        r#""cells": {"*,*": 1, "*,medium": 2, "mobile,low": 2, "*,high": 3}"#,
    ));
    assert_eq!(matrix.spec().cells, cells.spec().cells);
    // A later entry wins over an earlier one, a wildcard too.
    let later = compile(
        &SPEC_EXAMPLE
            .replace(r#""matrix": [[1, 2, 3], [2, 2, 3], [1, 2, 3]]"#, r#""cells": {"mobile,low": 2, "*,*": 1}"#),
    );
    assert!(later.spec().cells.iter().all(|&a| a == 0));
}

// ---------------------------------------------------------------------------------------------
// one table from either file

#[test]
fn a_table_decides_the_same_from_its_source_and_its_cfb() {
    let example = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tables/edge_routing.flash.json")).unwrap();
    let from_source = load("tables/edge_routing.flash.json", &example);
    let flash = flash_of(&from_source);
    let compiled = cfb::write(flash);
    assert!(compiled.len() < 1024, "{} bytes", compiled.len());
    let from_cfb = load("tables/edge_routing.cfb", &compiled);
    assert_eq!(from_cfb.kind, TableKind::FlashCompiled);
    assert_eq!(from_cfb.name, "edge_routing");
    assert_eq!(from_cfb.description, from_source.description);
    let again = flash_of(&from_cfb);
    assert_eq!(again.spec(), flash.spec());
    let inputs = [
        r#"{"device": "desktop", "error_rate": 0.01}"#,
        r#"{"device": "mobile", "error_rate": 0.07}"#,
        r#"{"device": "tablet", "error_rate": 0.25}"#,
        r#"{"device": "tv", "error_rate": 0.25}"#,
        r#"{"device": "tablet", "error_rate": "x"}"#,
        r#"{}"#,
    ];
    for input in inputs {
        let (a, b) = (response(&from_source, input, true), response(&from_cfb, input, true));
        for key in ["rule_id", "matched", "action", "trace", "skipped"] {
            assert_eq!(a[key], b[key], "{key} of {input}");
        }
    }
    // Compiling is deterministic.
    assert_eq!(cfb::write(&source::compile("x", &example).unwrap()), compiled);
}

fn flash_of(t: &Table) -> &FlashTable {
    match &*t.engine {
        clef::table::Engine::Flash(f) => f,
        _ => panic!("not a flash table"),
    }
}

// ---------------------------------------------------------------------------------------------
// the source's diagnostics

#[test]
fn missing_cells_are_named() {
    let d = one_error(
        &SPEC_EXAMPLE
            .replace(r#""matrix": [[1, 2, 3], [2, 2, 3], [1, 2, 3]]"#, r#""cells": {"mobile,*": 2, "*,high": 3}"#),
        &[
            "4 of 9 cells have no action",
            "device=desktop,error_rate_level=low; device=desktop,error_rate_level=medium; \
             device=tablet,error_rate_level=low; device=tablet,error_rate_level=medium",
            "\"*,*\"",
        ],
    );
    assert_eq!((d.line, d.column), (8, 12));
    let d = one_error(
        &SPEC_EXAMPLE.replace("[2, 2, 3]", "[2, 2]"),
        &["matrix[1] (device=mobile) has 2 entries", "missing cell device=mobile,error_rate_level=high"],
    );
    assert_eq!((d.line, d.column), (8, 25));
    one_error(&SPEC_EXAMPLE.replace("[2, 2, 3]", "[2, 2, 3, 1]"), &["matrix[1] (device=mobile) has 4 entries"]);
    one_error(&SPEC_EXAMPLE.replace("[2, 2, 3]", "2"), &["matrix[1] (device=mobile) must be an array of 3"]);
    one_error(
        &SPEC_EXAMPLE.replace("[2, 2, 3]", "[2, \"cache\", 3]"),
        &["matrix[1][1] (device=mobile,error_rate_level=medium) must be an action id (an integer)"],
    );
}

#[test]
fn gaps_and_overlaps_in_ranges_are_errors() {
    let with =
        |mapping: &str| SPEC_EXAMPLE.replace(r#""0.0-0.03": "low", "0.03-0.1": "medium", "0.1+": "high""#, mapping);
    let d = one_error(
        &with(r#""0.0-0.03": "low", "0.05-0.1": "medium", "0.1+": "high""#),
        &["dimension \"error_rate_level\": a gap between range \"0.0-0.03\" and range \"0.05-0.1\"", "[0.03, 0.05)"],
    );
    assert_eq!((d.line, d.column), (4, 37));
    one_error(
        &with(r#""0.0-0.03": "low", "0.02-0.1": "medium", "0.1+": "high""#),
        &["range \"0.0-0.03\" and range \"0.02-0.1\" overlap on [0.02, 0.03)"],
    );
    one_error(
        &with(r#""0.0-0.03": "low", "0.03-0.1": "medium", "0.1+": "high", "0.5+": "high""#),
        &["range \"0.1+\" and range \"0.5+\" overlap on [0.5, ∞)"],
    );
    one_error(&with(r#""0.0-0.03": "low", "0.03+": "medium""#), &["no range maps to \"high\""]);
    one_error(&with(r#""0.0-0.03": "low", "0.03-0.1": "meduim", "0.1+": "high""#), &["did you mean \"medium\"?"]);
    one_error(&with(r#""-1-0.03": "low", "0.03-0.1": "medium", "0.1+": "high""#), &["negative bound", "\"ranges\""]);
    one_error(&with(r#""0.0~0.03": "low", "0.03-0.1": "medium", "0.1+": "high""#), &["is not a range"]);
    one_error(&with(r#""0.03-0.0": "low", "0.03-0.1": "medium", "0.1+": "high""#), &["is empty"]);
    // In "ranges", likewise, and "min"/"max" are checked.
    let ranges = |r: &str| {
        SPEC_EXAMPLE.replace(
            r#""mapping": {"0.0-0.03": "low", "0.03-0.1": "medium", "0.1+": "high"}"#,
            &format!(r#""ranges": {r}"#),
        )
    };
    compile(&ranges(
        r#"[{"value": "low", "max": 0.03}, {"value": "medium", "min": 0.03, "max": 0.1}, {"value": "high", "min": 0.1}]"#,
    ));
    // A range without bounds takes every number: it overlaps the others.
    let diags = errors(&ranges(
        r#"[{"value": "low", "max": 0.03}, {"value": "medium", "min": 0.03, "max": 0.1}, {"value": "high"}]"#,
    ));
    assert!(
        diags.iter().any(|d| d.message.contains("ranges[0] and ranges[2] overlap on [-∞, 0.03)")),
        "{}",
        show(&diags)
    );
    one_error(
        &ranges(
            r#"[{"value": "low", "max": 0.03}, {"value": "medium", "min": 0.1, "max": 0.05}, {"value": "high", "min": 0.1}]"#,
        ),
        &["ranges[1] is empty"],
    );
    one_error(
        &ranges(
            r#"[{"value": "low", "max": "0.03"}, {"value": "medium", "min": 0.03, "max": 0.1}, {"value": "high", "min": 0.1}]"#,
        ),
        &["\"max\" must be a number"],
    );
    one_error(
        &ranges(
            r#"[{"value": "low", "maxx": 0.03}, {"value": "medium", "min": 0.03, "max": 0.1}, {"value": "high", "min": 0.1}]"#,
        ),
        &["unknown key \"maxx\"; did you mean \"max\"?"],
    );
}

#[test]
fn unknown_action_ids_are_errors() {
    let d = one_error(
        &SPEC_EXAMPLE.replace("[1, 2, 3]]", "[1, 7, 3]]"),
        &["matrix[2][1] (device=tablet,error_rate_level=medium): unknown action id 7; the actions' ids are 1, 2, 3"],
    );
    assert_eq!((d.line, d.column), (8, 40));
    one_error(&SPEC_EXAMPLE.replace(r#""default": 3"#, r#""default": 4"#), &["\"default\": unknown action id 4"]);
    one_error(
        &SPEC_EXAMPLE
            .replace(r#""matrix": [[1, 2, 3], [2, 2, 3], [1, 2, 3]]"#, r#""cells": {"*,*": 1, "mobile,high": 9}"#),
        &["cell \"mobile,high\": unknown action id 9"],
    );
    one_error(&SPEC_EXAMPLE.replace(r#"{"id": 3, "#, r#"{"id": 1}, {"id": 3, "#), &["two actions have the id 1"]);
    let diags = errors(&SPEC_EXAMPLE.replace(r#"{"id": 2, "#, r#"{"id": "2", "#));
    assert!(diags[0].message.contains("action #2: \"id\" must be an integer"), "{}", show(&diags));
}

#[test]
fn shape_errors_name_what_and_where() {
    one_error(
        &SPEC_EXAMPLE.replace(r#""default": 3"#, r#""defualt": 3"#),
        &["unknown key \"defualt\"; did you mean \"default\"?"],
    );
    one_error(
        &SPEC_EXAMPLE.replace(r#""field": "device", "#, r#""feild": "device", "#),
        &["dimension \"device\": unknown key \"feild\"; did you mean \"field\"?"],
    );
    one_error(
        &SPEC_EXAMPLE.replace(r#""desktop", "mobile""#, r#""desktop", "desktop""#),
        &["lists the value \"desktop\" twice"],
    );
    one_error(&SPEC_EXAMPLE.replace(r#""desktop", "mobile""#, r#""desktop", "mo,bile""#), &["may not contain `,`"]);
    one_error(&SPEC_EXAMPLE.replace(r#""name": "device""#, r#""name": "dev=ice""#), &["may not contain `,` or `=`"]);
    one_error(&SPEC_EXAMPLE.replace(r#""field": "device""#, r#""field": "client..device""#), &["dotted path"]);
    one_error(
        &SPEC_EXAMPLE.replace(r#""name": "error_rate_level""#, r#""name": "device""#),
        &["two dimensions are named \"device\""],
    );
    one_error(
        &SPEC_EXAMPLE.replace(r#""default": 3 }"#, r#""default": 3, "cells": {"*,*": 1} }"#),
        &["both \"matrix\" and \"cells\""],
    );
    let diags = errors(&SPEC_EXAMPLE.replace(
        r#""matrix": [[1, 2, 3], [2, 2, 3], [1, 2, 3]]"#,
        r#""cells": {"*,*": 1, "mobile": 2, "mobile,lo": 2}"#,
    ));
    assert_eq!(diags.len(), 2, "{}", show(&diags));
    assert!(diags[0].message.contains("cell \"mobile\" names 1 value; write one per dimension"), "{}", show(&diags));
    assert!(diags[1]
        .message
        .contains("\"lo\" is not a value of dimension \"error_rate_level\"; did you mean \"low\"?"));
    for (text, fragment) in [
        ("[]", "a flash table is a JSON object"),
        (r#"{"actions": [{"id": 1}], "matrix": [1]}"#, "no \"dimensions\""),
        (r#"{"dimensions": [{"name": "a", "values": ["x"]}], "matrix": [1]}"#, "no \"actions\""),
        (r#"{"dimensions": [{"name": "a", "values": ["x"]}], "actions": [{"id": 1}]}"#, "no \"matrix\""),
        (r#"{"dimensions": [], "actions": [{"id": 1}], "matrix": []}"#, "\"dimensions\" is empty"),
        (
            r#"{"dimensions": [{"name": "a", "values": []}], "actions": [{"id": 1}], "matrix": []}"#,
            "\"values\" is empty",
        ),
        (r#"{"dimensions": [{"name": "a", "values": ["x"]}], "actions": [], "matrix": [1]}"#, "\"actions\" is empty"),
        (
            r#"{"dimensions": [{"name": "a", "values": ["*"]}], "actions": [{"id": 1}], "matrix": [1]}"#,
            "may not be `*`",
        ),
        (r#"{"dimensions": [{"name": "a", "values": ["x"]}], "actions": [1], "matrix": [1]}"#, "must be a JSON object"),
    ] {
        let diags = errors(text);
        assert!(diags.iter().any(|d| d.message.contains(fragment)), "{text}: want `{fragment}`:\n{}", show(&diags));
    }
}

#[test]
fn more_than_64_kib_is_an_error() {
    // 180 × 180 = 32,400 cells: 64,800 bytes of cells alone, plus the rest.
    let values: Vec<String> = (0..180).map(|i| format!("\"v{i}\"")).collect();
    let values = values.join(",");
    let big = format!(
        r#"{{"dimensions": [{{"name": "a", "values": [{values}]}}, {{"name": "b", "values": [{values}]}}],
            "actions": [{{"id": 1}}], "cells": {{"*,*": 1}}}}"#
    );
    let d = one_error(&big, &["the compiled table would take", "at most 65536 (64 KiB)"]);
    assert_eq!((d.line, d.column), (1, 1));
    let huge: Vec<String> = (0..20).map(|i| format!(r#"{{"name": "d{i}", "values": ["a", "b", "c"]}}"#)).collect();
    one_error(
        &format!(r#"{{"dimensions": [{}], "actions": [{{"id": 1}}], "cells": {{}}}}"#, huge.join(",")),
        &["cells; at most 32768 fit"],
    );
}

#[test]
fn diagnostics_point_into_the_file() {
    let d = one_error(&SPEC_EXAMPLE.replace(r#""0.03-0.1": "medium""#, r#""0.03-0.1": "meduim""#), &["meduim"]);
    assert_eq!((d.line, d.column), (4, 49));
    let text = d.to_string();
    assert!(text.starts_with("t.flash.json:4:49: error: dimension \"error_rate_level\": range \"0.03-0.1\""), "{text}");
    assert!(text.contains("^^^^^^^^"), "{text}");
}

// ---------------------------------------------------------------------------------------------
// a .cfb beside its source

fn registry(dir: &Path) -> (Registry, Vec<(String, Outcome)>) {
    let (registry, loaded) = Registry::open(Sources {
        tables_dir: dir.to_path_buf(),
        extra: None,
        limits: Limits::default(),
        overlays: None,
    });
    (registry, loaded.outcomes)
}

fn reload(r: &Registry) -> Vec<(String, Outcome)> {
    r.reload().expect("the registry answers").outcomes
}

fn served(r: &Registry, name: &str) -> Option<(PathBuf, TableKind)> {
    let snapshot = r.served();
    let slot = snapshot.get(name)?;
    slot.current.as_ref().map(|t| (t.path.clone(), t.kind))
}

/// The error of table `name` in `outcomes`, if its load failed.
fn failure(outcomes: &[(String, Outcome)], name: &str) -> Option<String> {
    outcomes.iter().find_map(|(n, o)| match o {
        Outcome::Failed { error, .. } if n == name => Some(error.to_string()),
        _ => None,
    })
}

/// `bytes`, a `.cfb`, as one that records no source (all zeros), its checksum made whole again.
fn without_source(mut bytes: Vec<u8>) -> Vec<u8> {
    bytes[12..44].fill(0);
    let body = bytes.len() - 32;
    let sum = Sha256::digest(&bytes[..body]);
    bytes[body..].copy_from_slice(&sum);
    bytes
}

#[test]
fn a_cfb_beside_its_source_is_served_only_while_it_matches() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("net.flash.json");
    let bin = dir.path().join("net.cfb");
    std::fs::write(&src, SPEC_EXAMPLE).unwrap();
    std::fs::write(&bin, cfb::write(&source::compile("net", SPEC_EXAMPLE.as_bytes()).unwrap())).unwrap();
    let (r, outcomes) = registry(dir.path());
    assert!(matches!(outcomes.as_slice(), [(n, Outcome::Loaded { .. })] if n == "net"), "{outcomes:?}");
    assert_eq!(served(&r, "net"), Some((bin.clone(), TableKind::FlashCompiled)));
    assert!(r.served().get("net").unwrap().error.is_none());

    // The source changes: two files for one name, neither what the other says; a load error
    // naming both (/health degraded), and the version that loaded keeps serving.
    std::fs::write(&src, SPEC_EXAMPLE.replace("[1, 2, 3]]", "[3, 3, 3]]")).unwrap();
    let outcomes = reload(&r);
    let error = failure(&outcomes, "net").unwrap_or_else(|| panic!("{outcomes:?}"));
    for part in [
        "two files map to the table name \"net\"",
        "net.cfb",
        "net.flash.json",
        "another version",
        "clef flash compile",
    ] {
        assert!(error.contains(part), "{part}: {error}");
    }
    assert_eq!(r.served().get("net").unwrap().error.as_ref().map(|e| e.full.to_string()), Some(error.clone()));
    assert_eq!(served(&r, "net"), Some((bin.clone(), TableKind::FlashCompiled)));
    let t = r.served().get("net").unwrap().current.clone().unwrap();
    assert_eq!(decide(&t, r#"{"device": "tablet", "error_rate": 0}"#).2["id"], 1, "the old version");

    // Compiled again: the .cfb of the new source serves, and the error is gone.
    let now = std::fs::read(&src).unwrap();
    std::fs::write(&bin, cfb::write(&source::compile("net", &now).unwrap())).unwrap();
    reload(&r);
    assert_eq!(served(&r, "net"), Some((bin.clone(), TableKind::FlashCompiled)));
    assert!(r.served().get("net").unwrap().error.is_none());
    let t = r.served().get("net").unwrap().current.clone().unwrap();
    assert_eq!(decide(&t, r#"{"device": "tablet", "error_rate": 0}"#).2["id"], 3);

    // A damaged .cfb that still records the right source is the .cfb that serves: it fails to
    // load, saying why, and the good version keeps serving.
    let mut damaged = std::fs::read(&bin).unwrap();
    let last = damaged.len() - 40;
    damaged[last] ^= 0x40;
    std::fs::write(&bin, &damaged).unwrap();
    let error = failure(&reload(&r), "net").expect("a damaged .cfb does not load");
    assert!(error.contains("checksum does not match"), "{error}");
    assert_eq!(served(&r, "net"), Some((bin.clone(), TableKind::FlashCompiled)));

    // A .cfb that records no source, beside one: the same error.
    let good = cfb::write(&source::compile("net", &now).unwrap());
    std::fs::write(&bin, without_source(good.clone())).unwrap();
    let error = failure(&reload(&r), "net").expect("a .cfb without its source's hash is no pair");
    assert!(error.contains("does not record the source it was compiled from"), "{error}");

    // A .cfb alone is a table, whatever source it records.
    std::fs::remove_file(&src).unwrap();
    reload(&r);
    assert_eq!(served(&r, "net"), Some((bin.clone(), TableKind::FlashCompiled)));
    assert!(r.served().get("net").unwrap().error.is_none());
    std::fs::write(&bin, &good).unwrap();
    reload(&r);
    assert!(r.served().get("net").unwrap().error.is_none());
}

#[test]
fn a_stale_pair_at_start_is_a_load_error_not_a_table() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("net.cfb"), cfb::write(&source::compile("net", SPEC_EXAMPLE.as_bytes()).unwrap()))
        .unwrap();
    std::fs::write(dir.path().join("net.flash.json"), SPEC_EXAMPLE.replace("\"ttl\": 10", "\"ttl\": 20")).unwrap();
    let (r, outcomes) = registry(dir.path());
    let error = failure(&outcomes, "net").unwrap_or_else(|| panic!("{outcomes:?}"));
    assert!(error.contains("net.cfb") && error.contains("net.flash.json"), "{error}");
    assert!(served(&r, "net").is_none());
    assert!(r.served().get("net").unwrap().error.is_some());
}

#[test]
fn other_files_with_one_name_are_an_error_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let compiled = cfb::write(&source::compile("net", SPEC_EXAMPLE.as_bytes()).unwrap());
    std::fs::write(dir.path().join("net.json"), r#"[{"id": "r", "condition": "true", "action": {}}]"#).unwrap();
    std::fs::write(dir.path().join("net.cfb"), &compiled).unwrap();
    std::fs::write(dir.path().join("two.flash.json"), SPEC_EXAMPLE).unwrap();
    std::fs::write(dir.path().join("two.v2.flash.json"), SPEC_EXAMPLE).unwrap();
    let (r, outcomes) = registry(dir.path());
    for (name, a, b) in [("net", "net.cfb", "net.json"), ("two", "two.flash.json", "two.v2.flash.json")] {
        let error = failure(&outcomes, name).unwrap_or_else(|| panic!("{name}: {outcomes:?}"));
        assert!(error.contains("two files map to the table name") && error.contains(a) && error.contains(b), "{error}");
        assert!(served(&r, name).is_none());
    }
}

// ---------------------------------------------------------------------------------------------
// clef flash compile | inspect, and the other commands on flash files

fn clef(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_clef")).args(args).current_dir(dir).output().expect("run clef")
}

fn text(o: &Output) -> (i32, String, String) {
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn flash_compile_and_inspect() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("net.flash.json"), SPEC_EXAMPLE).unwrap();
    let (code, out, err) = text(&clef(&["flash", "compile", "net.flash.json"], d));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("net.cfb: flash table \"net\" (2 dimensions, 9 cells, 3 actions), "), "{out}");
    let (code, out, err) = text(&clef(&["flash", "compile", "net.flash.json", "-o", "other.cfb"], d));
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(std::fs::read(d.join("net.cfb")).unwrap(), std::fs::read(d.join("other.cfb")).unwrap());
    // Nothing but the two files: no temporary file is left behind.
    let mut names: Vec<String> =
        std::fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["net.cfb", "net.flash.json", "other.cfb"]);

    let (code, out, err) = text(&clef(&["flash", "inspect", "net.cfb"], d));
    assert_eq!(code, 0, "{out}{err}");
    for line in [
        "table:       net (2 dimensions, 9 cells, 3 actions)",
        "(verified)",
        "= net.flash.json (served)",
        "  1 device (field device): 3 categories: desktop, mobile, tablet",
        "  2 error_rate_level (field error_rate): 3 ranges: [0, 0.03) → low, [0.03, 0.1) → medium, [0.1, ∞) → high",
        "     2  {\"id\":2,\"type\":\"cache\",\"ttl\":10}",
        "default:     3",
        "  rows: device, columns: error_rate_level",
        "           low  medium  high",
        "  mobile     2       2     3",
    ] {
        assert!(out.contains(line), "`{line}` not in:\n{out}");
    }

    // The other commands take both files.
    for file in ["net.flash.json", "net.cfb"] {
        let (code, out, err) = text(&clef(&["check", file], d));
        assert_eq!(code, 0, "{file}: {out}{err}");
        assert!(out.contains("ok (flash table \"net\", 9 cells, version "), "{out}");
        let (code, out, err) = text(&clef(&["bench", file, "in.json", "-n", "100", "--json"], d));
        assert_eq!(code, 2, "no input file yet: {out}{err}");
    }
    std::fs::write(d.join("in.json"), r#"{"device": "mobile", "error_rate": 0.05}"#).unwrap();
    for file in ["net.flash.json", "net.cfb"] {
        let (code, out, err) = text(&clef(&["decide", file, "in.json"], d));
        assert_eq!(code, 0, "{out}{err}");
        let v: Json = serde_json::from_str(&out).unwrap();
        assert_eq!(v["rule_id"], "device=mobile,error_rate_level=medium");
        let (code, out, err) = text(&clef(&["bench", file, "in.json", "-n", "1000", "--json"], d));
        assert_eq!(code, 0, "{out}{err}");
        let v: Json = serde_json::from_str(&out).unwrap();
        assert_eq!(v["rules"], 9, "{v}");
    }

    // The source records its SHA-256 in the .cfb: inspect shows it.
    let sha = hex(&<[u8; 32]>::from(Sha256::digest(SPEC_EXAMPLE.as_bytes())));
    let (_, out, _) = text(&clef(&["flash", "inspect", "net.cfb"], d));
    assert!(out.contains(&format!("source:      SHA-256 {sha} = net.flash.json (served)")), "{out}");

    // A stale .cfb: check fails on it and on its source, as the server would; inspect says so.
    std::fs::write(d.join("net.flash.json"), SPEC_EXAMPLE.replace("\"ttl\": 10", "\"ttl\": 20")).unwrap();
    for file in ["net.cfb", "net.flash.json", "."] {
        let (code, out, err) = text(&clef(&["check", file], d));
        assert_eq!(code, 1, "{file}: {out}{err}");
        assert!(err.contains("error: two files map to the table name \"net\""), "{file}: {err}");
        assert!(err.contains("was compiled from another version of the source"), "{file}: {err}");
        assert_eq!(err.matches("two files map").count(), 1, "said once: {err}");
    }
    let (_, out, _) = text(&clef(&["flash", "inspect", "net.cfb"], d));
    assert!(out.contains("≠ net.flash.json now"), "{out}");
}

#[test]
fn flash_compile_and_inspect_refuse_bad_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("bad.flash.json"), SPEC_EXAMPLE.replace("[2, 2, 3]", "[2, 2]")).unwrap();
    let (code, out, err) = text(&clef(&["flash", "compile", "bad.flash.json"], d));
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.starts_with("bad.flash.json:8:25: error: matrix[1] (device=mobile) has 2 entries"), "{err}");
    assert!(!d.join("bad.cfb").exists());
    let (code, _, err) = text(&clef(&["flash", "compile", "missing.flash.json"], d));
    assert_eq!(code, 1);
    assert!(err.starts_with("missing.flash.json:1:1: error: cannot read the file"), "{err}");
    let (code, _, _) = text(&clef(&["flash", "compile"], d));
    assert_eq!(code, 2, "a usage error");

    std::fs::write(d.join("net.flash.json"), SPEC_EXAMPLE).unwrap();
    assert_eq!(text(&clef(&["flash", "compile", "net.flash.json"], d)).0, 0);
    let good = std::fs::read(d.join("net.cfb")).unwrap();
    let mut flipped = good.clone();
    flipped[200] ^= 1;
    for (bytes, fragment) in [
        (good[..good.len() - 7].to_vec(), "the .cfb file is truncated: its header says"),
        (flipped, "checksum does not match"),
        (b"{\"a\": 1}".to_vec(), "does not start with \"CFB1\""),
        (Vec::new(), "does not start with \"CFB1\""),
    ] {
        std::fs::write(d.join("x.cfb"), &bytes).unwrap();
        let (code, out, err) = text(&clef(&["flash", "inspect", "x.cfb"], d));
        assert_eq!(code, 1, "{out}{err}");
        assert!(err.starts_with("error: x.cfb: ") && err.contains(fragment), "{err}");
        assert!(out.is_empty());
        // The same file as a table: a load error, from check and decide alike.
        let (code, _, err) = text(&clef(&["check", "x.cfb"], d));
        assert_eq!(code, 1);
        assert!(err.contains(fragment), "{err}");
    }
}

#[test]
fn the_example_table_and_its_tests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (code, out, err) = text(&clef(&["test", "tables/edge_routing.flash.json", "--coverage"], root));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("coverage: 9/9 enabled cells reached by a test"), "{out}");
    // A tests file names cells; an unknown one is an error with a suggestion.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(root.join("tables/edge_routing.flash.json"), dir.path().join("e.flash.json")).unwrap();
    std::fs::write(
        dir.path().join("e.tests.json"),
        r#"[{"input": {}, "expect": {"rule_id": "device=mobile,error_rate_level=hihg"}}]"#,
    )
    .unwrap();
    let (code, out, err) = text(&clef(&["check", "e.tests.json"], dir.path()));
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("the table has no cell \"device=mobile,error_rate_level=hihg\"; did you mean \"device=mobile,error_rate_level=high\"?"),
        "{err}"
    );
}

/// The summary line of `clef test`: `(passed, failed)`.
fn test_summary(out: &str) -> (usize, usize) {
    let line = out.lines().rev().find(|l| l.contains(" passed, ")).unwrap_or_else(|| panic!("no summary in {out}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    (words[0].parse().unwrap(), words[2].parse().unwrap())
}

#[test]
fn clef_test_runs_a_compiled_table_once() {
    // `clef test tables/` ran the tests of a flash table twice, once for its .cfb and once for
    // its .flash.json, and counted both.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for entry in std::fs::read_dir(root.join("tables")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, d.join(path.file_name().unwrap())).unwrap();
        }
    }
    let (code, out, err) = text(&clef(&["test", "."], d));
    assert_eq!(code, 0, "{out}{err}");
    let before = test_summary(&out);
    let flash_tests = out.lines().find(|l| l.starts_with("edge_routing: ")).expect("edge_routing tested").to_string();

    let (code, out, err) = text(&clef(&["flash", "compile", "edge_routing.flash.json"], d));
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = text(&clef(&["test", "."], d));
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(test_summary(&out), before, "{out}");
    assert_eq!(out.lines().filter(|l| l.starts_with("edge_routing: ")).collect::<Vec<_>>(), [flash_tests.as_str()]);
    // naming both files, or either, runs them once too
    for args in [&["test", "edge_routing.cfb", "edge_routing.flash.json"][..], &["test", "edge_routing.cfb"]] {
        let (code, out, err) = text(&clef(args, d));
        assert_eq!(code, 0, "{out}{err}");
        assert_eq!(out.lines().filter(|l| l.starts_with("edge_routing: ")).count(), 1, "{args:?}: {out}");
    }

    // A source edited after the .cfb was compiled: the error the server gives, once.
    let source = std::fs::read_to_string(d.join("edge_routing.flash.json")).unwrap();
    std::fs::write(
        d.join("edge_routing.flash.json"),
        source.replacen("\"default\"", "\"description\": \"edited\", \"default\"", 1),
    )
    .unwrap();
    let (code, out, err) = text(&clef(&["test", "."], d));
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(err.matches("two files map to the table name \"edge_routing\"").count(), 1, "{err}");
    assert!(!out.contains("edge_routing: "), "{out}");
}
