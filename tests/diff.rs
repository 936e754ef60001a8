//! `clef diff OLD NEW` (SPEC §2) end to end on the real binary — every kind of table, parameter-
//! and enabled-only changes, moved rules, identical tables, files that do not load, the JSON
//! form — a property test that a table diffed with itself is empty and that one random edit is
//! reported as exactly that edit, and `clef replay --against` (SPEC §8.2) printing the diff above
//! the changed outcomes with the changes that caused each.
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use clef::diff::attribute::Attribution;
use clef::diff::{self, Change};
use clef::snapshot::{Compress, Event, Recorder, SnapshotsConfig, Status};
use clef::table::{Limits, Table};
use proptest::prelude::*;
use serde_json::{json, Value as Json};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn clef(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_clef")).args(args).current_dir(ROOT).output().expect("run clef")
}

fn clef_paths(args: &[&str], paths: &[&Path]) -> Output {
    let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    all.extend(paths.iter().map(|p| p.display().to_string()));
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    clef(&refs)
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn describe(o: &Output) -> String {
    format!("exit {:?}\n--- stdout\n{}--- stderr\n{}", o.status.code(), out(o), err(o))
}

/// `dir/rel` with `text` in it (folders made); its path.
fn write(dir: &Path, rel: &str, text: &str) -> PathBuf {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    path
}

/// `clef diff OLD NEW`: its exit code and its lines.
fn diff_lines(old: &Path, new: &Path) -> (i32, Vec<String>) {
    let o = clef_paths(&["diff"], &[old, new]);
    assert!(err(&o).is_empty(), "{}", describe(&o));
    (o.status.code().unwrap(), out(&o).lines().map(String::from).collect())
}

fn jev(params: Json, default: Json, rules: Json) -> String {
    serde_json::to_string_pretty(&json!({"params": params, "default": default, "rules": rules})).unwrap()
}

fn rule(id: &str, condition: &str, action: Json) -> Json {
    json!({"id": id, "condition": condition, "action": action})
}

fn base_rules() -> Json {
    json!([
        rule("vip", "tier == \"vip\"", json!({"level": "low"})),
        rule("high_amount", "amount > params.free_limit", json!({"level": "high"})),
        rule("new_account", "age_days < 7", json!({"level": "medium"})),
        rule("blocked_country", "country in [\"KP\", \"IR\"]", json!({"level": "blocked"})),
    ])
}

fn base_params() -> Json {
    json!({"free_limit": {"value": 100}, "step_limit": {"value": 3, "min": 1, "max": 9, "step": 1, "tunable": true}})
}

// ---------------------------------------------------------------------------------------------
// clef diff

#[test]
fn a_table_diffed_with_itself_or_a_reformatted_copy_has_no_changes() {
    let dir = tempfile::tempdir().unwrap();
    let text = jev(base_params(), json!({"level": "unknown"}), base_rules());
    let old = write(dir.path(), "old/risk.json", &text);
    let same = write(dir.path(), "same/risk.json", &text);
    assert_eq!(diff_lines(&old, &same), (0, vec!["no changes in what decides: the files are identical".to_string()]));
    // other layout, a description, tests, key order, `1.0` for `1`, a condition spaced and
    // parenthesized otherwise: nothing that decides
    let mut v: Json = serde_json::from_str(&text).unwrap();
    v["description"] = json!("now with a description");
    v["rules"][0]["description"] = json!("VIPs are low risk");
    v["rules"][1]["action"] = json!({"level": "high"});
    v["rules"][2]["condition"] = json!("(age_days<7)");
    v["params"]["free_limit"] = json!({"value": 100.0, "description": "the limit"});
    v["tests"] = json!([{"name": "vip", "input": {"tier": "vip"}, "expect": {"rule_id": "vip"}}]);
    let other = write(dir.path(), "other/risk.json", &serde_json::to_string(&v).unwrap());
    assert_eq!(
        diff_lines(&old, &other),
        (
            0,
            vec!["no changes in what decides: the files differ only in descriptions, tests, comments or layout".into()]
        )
    );
    let o = clef_paths(&["diff", "--json"], &[&old, &other]);
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    let j: Json = serde_json::from_str(&out(&o)).unwrap();
    assert_eq!(j["identical"], true);
    assert_eq!(j["changes"], json!([]));
    assert_eq!(j["kind"], "jev");
    // the example tables, each with itself
    for name in ["risk.json", "search_rewrite.yaml", "edge_routing.flash.json", "backup_rules.yaml"] {
        let p = Path::new(ROOT).join("tables").join(name);
        assert_eq!(diff_lines(&p, &p).0, 0, "{name}");
    }
}

#[test]
fn jev_changes_are_one_line_each_in_a_stable_order() {
    let dir = tempfile::tempdir().unwrap();
    let old = write(dir.path(), "old/risk.json", &jev(base_params(), json!({"level": "unknown"}), base_rules()));
    let new_rules = json!([
        rule("night", "hour < 6", json!({"level": "medium"})),
        rule("vip", "tier == \"vip\" && amount < 10000", json!({"level": "low"})),
        {"id": "high_amount", "condition": "amount > params.free_limit", "action": {"level": "high", "review": true},
         "enabled": false},
        rule("new_account", "age_days < 7", json!({"level": "medium"})),
    ]);
    let mut params = base_params();
    params["free_limit"]["value"] = json!(50);
    params["step_limit"]["max"] = json!(12);
    params["fresh"] = json!({"value": "x"});
    let new = write(dir.path(), "new/risk.json", &jev(params, json!({"level": "medium"}), new_rules));
    let (code, lines) = diff_lines(&old, &new);
    assert_eq!(code, 1);
    assert_eq!(
        lines,
        [
            r#"param free_limit: 100 -> 50"#,
            r#"param fresh added: {"value":"x"}"#,
            r#"param step_limit: max 9 -> 12"#,
            r#"default: {"level":"unknown"} -> {"level":"medium"}"#,
            r#"rule night added at 1 (before vip)"#,
            r#"rule vip condition: "tier == \"vip\"" -> "tier == \"vip\" && amount < 10000""#,
            r#"rule high_amount enabled: true -> false"#,
            r#"rule high_amount action: {"level":"high"} -> {"level":"high","review":true}"#,
            r#"rule blocked_country removed (was at 4)"#,
        ]
    );
    // the same diff as JSON, change by change
    let o = clef_paths(&["diff", "--json"], &[&old, &new]);
    assert_eq!(o.status.code(), Some(1), "{}", describe(&o));
    let j: Json = serde_json::from_str(&out(&o)).unwrap();
    assert_eq!(j["identical"], false);
    assert_eq!(j["old"]["path"], old.display().to_string());
    assert_eq!(j["new"]["version"].as_str().unwrap().len(), 12);
    let changes = j["changes"].as_array().unwrap();
    let texts: Vec<&str> = changes.iter().map(|c| c["text"].as_str().unwrap()).collect();
    assert_eq!(texts, lines);
    assert_eq!(
        changes[0],
        json!({"change": "param", "param": "free_limit", "key": "value", "old": 100, "new": 50,
        "text": "param free_limit: 100 -> 50"})
    );
    assert_eq!(changes[4]["change"], "rule_added");
    assert_eq!((changes[4]["position"].clone(), changes[4]["before"].clone()), (json!(1), json!("vip")));
    assert_eq!(changes[5]["new"], "tier == \"vip\" && amount < 10000");
    assert_eq!((changes[6]["change"].clone(), changes[6]["new"].clone()), (json!("rule_enabled"), json!(false)));
    assert_eq!(
        changes[8],
        json!({"change": "rule_removed", "rule": "blocked_country", "old_position": 4,
        "text": "rule blocked_country removed (was at 4)"})
    );
}

#[test]
fn a_parameter_only_change_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let old = write(dir.path(), "a/risk.json", &jev(base_params(), Json::Null, base_rules()));
    let mut params = base_params();
    params["free_limit"]["value"] = json!(50);
    let new = write(dir.path(), "b/risk.json", &jev(params, Json::Null, base_rules()));
    assert_eq!(diff_lines(&old, &new), (1, vec!["param free_limit: 100 -> 50".to_string()]));
}

#[test]
fn moved_rules_are_those_out_of_their_order_not_those_shifted() {
    let dir = tempfile::tempdir().unwrap();
    let old = write(dir.path(), "a/risk.json", &jev(base_params(), Json::Null, base_rules()));
    let r = base_rules();
    // the last rule to the top: one move, the others only shift
    let moved = json!([r[3], r[0], r[1], r[2]]);
    let new = write(dir.path(), "b/risk.json", &jev(base_params(), Json::Null, moved));
    assert_eq!(diff_lines(&old, &new), (1, vec!["rule blocked_country moved 4 -> 1 (now before vip)".to_string()]));
    // a rule inserted at the top shifts every other one: only the insertion is reported
    let shifted = json!([rule("first", "true", json!({})), r[0], r[1], r[2], r[3]]);
    let new = write(dir.path(), "c/risk.json", &jev(base_params(), Json::Null, shifted));
    assert_eq!(diff_lines(&old, &new), (1, vec!["rule first added at 1 (before vip)".to_string()]));
    // the first rule to the bottom
    let last = json!([r[1], r[2], r[3], r[0]]);
    let new = write(dir.path(), "d/risk.json", &jev(base_params(), Json::Null, last));
    assert_eq!(diff_lines(&old, &new), (1, vec!["rule vip moved 1 -> 4 (now last)".to_string()]));
}

const RULESET: &str = r#"version: "1.0"
params:
  error_rate_high: {value: 0.05, min: 0.01, max: 0.2, step: 0.01, tunable: true}
schema:
  headers.user-agent: string
  metrics.edge_error_rate_1m: number
  headers.x-experiment: any
rules:
  - id: mobile_cache
    conditions:
      - {field: headers.user-agent, operator: contains, value: Mobile}
      - {field: metrics.edge_error_rate_1m, operator: gt, value: {param: error_rate_high}}
    action: {type: cache, key: "rw_{{ headers.user-agent }}", ttl_seconds: 15}
    fallback: {type: proxy, upstream: fallback}
  - id: desktop
    when: 'headers["user-agent"] contains "Chrome"'
    action: {type: proxy, upstream: prod, timeout_ms: 800}
  - id: experiment
    enabled: false
    conditions:
      - {field: headers.x-experiment, operator: exists}
    action: {type: proxy, upstream: next}
default: {type: proxy, upstream: prod}
"#;

#[test]
fn rule_set_changes_enabled_only_and_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let old = write(dir.path(), "a/search.yaml", RULESET);
    // enabled only, with a comment added: one line
    let enabled = RULESET.replace("    enabled: false\n", "    enabled: true   # the A/B test starts\n");
    let new = write(dir.path(), "b/search.yaml", &enabled);
    assert_eq!(diff_lines(&old, &new), (1, vec!["rule experiment enabled: false -> true".to_string()]));
    // conditions, when, fallback, params, schema and default
    let changed = RULESET
        .replace("value: 0.05", "value: 0.08")
        .replace("value: Mobile}", "value: Android}")
        .replace("contains \"Chrome\"'", "contains \"Firefox\"'")
        .replace("    fallback: {type: proxy, upstream: fallback}\n", "")
        .replace("headers.x-experiment: any", "headers.x-experiment: string")
        .replace("default: {type: proxy, upstream: prod}", "default: {type: proxy, upstream: canary}");
    let new = write(dir.path(), "c/search.yaml", &changed);
    let (code, lines) = diff_lines(&old, &new);
    assert_eq!(code, 1);
    assert_eq!(
        lines,
        [
            "param error_rate_high: 0.05 -> 0.08",
            "schema headers.x-experiment: any -> string",
            r#"default: {"type":"proxy","upstream":"prod"} -> {"type":"proxy","upstream":"canary"}"#,
            // the expression the entries of `conditions` stand for (docs/tables.md)
            concat!(
                r#"rule mobile_cache condition: "#,
                r#""(headers[\"user-agent\"] != nil && headers[\"user-agent\"] contains \"Mobile\") && "#,
                r#"(metrics.edge_error_rate_1m != nil && metrics.edge_error_rate_1m > params.error_rate_high)" -> "#,
                r#""(headers[\"user-agent\"] != nil && headers[\"user-agent\"] contains \"Android\") && "#,
                r#"(metrics.edge_error_rate_1m != nil && metrics.edge_error_rate_1m > params.error_rate_high)""#
            ),
            r#"rule mobile_cache fallback: {"type":"proxy","upstream":"fallback"} -> (none)"#,
            r#"rule desktop condition: "headers[\"user-agent\"] contains \"Chrome\"" -> "headers[\"user-agent\"] contains \"Firefox\"""#,
        ]
    );
}

const FLASH: &str = r#"{
  "dimensions": [
    {"name": "device", "field": "device", "values": ["desktop", "mobile", "tablet"]},
    {"name": "level", "field": "error_rate", "values": ["low", "medium", "high"],
     "mapping": {"0.0-0.03": "low", "0.03-0.1": "medium", "0.1+": "high"}}
  ],
  "actions": [
    {"id": 1, "type": "proxy", "upstream": "model-v1"},
    {"id": 2, "type": "cache", "ttl": 10},
    {"id": 3, "type": "fallback", "response": "503"}
  ],
  "matrix": [[1, 2, 3], [2, 2, 3], [1, 2, 3]],
  "default": 3
}"#;

#[test]
fn flash_tables_compare_by_cell_action_and_dimension_in_either_file() {
    let dir = tempfile::tempdir().unwrap();
    let old = write(dir.path(), "a/edge.flash.json", FLASH);
    // one cell
    let one_cell = FLASH.replace("[[1, 2, 3], [2, 2, 3]", "[[1, 2, 3], [2, 1, 3]");
    let new = write(dir.path(), "b/edge.flash.json", &one_cell);
    assert_eq!(diff_lines(&old, &new), (1, vec!["cell device=mobile,level=medium: action 2 -> action 1".to_string()]));
    // an action's content, the default, a range bound, a dimension's field
    let changed = FLASH
        .replace(r#""ttl": 10"#, r#""ttl": 30"#)
        .replace(r#""default": 3"#, r#""default": 1"#)
        .replace(r#""0.03-0.1": "medium", "0.1+""#, r#""0.03-0.2": "medium", "0.2+""#)
        .replace(r#""field": "device""#, r#""field": "client.device""#);
    let new = write(dir.path(), "c/edge.flash.json", &changed);
    assert_eq!(
        diff_lines(&old, &new),
        (
            1,
            [
                r#"dimension device: field "device" -> "client.device""#,
                "dimension level: ranges [0, 0.03) low, [0.03, 0.1) medium, [0.1, ∞) high -> [0, 0.03) low, [0.03, 0.2) medium, [0.2, ∞) high",
                r#"action 2: {"id":2,"type":"cache","ttl":10} -> {"id":2,"type":"cache","ttl":30}"#,
                "default: action 3 -> action 1",
            ]
            .map(String::from)
            .to_vec()
        )
    );
    // a bucket added: its cells are new, the others keep their actions
    let bucket = FLASH.replace(r#""tablet"]"#, r#""tablet", "tv"]"#).replace("[1, 2, 3]],", "[1, 2, 3], [3, 3, 3]],");
    let new = write(dir.path(), "d/edge.flash.json", &bucket);
    assert_eq!(
        diff_lines(&old, &new),
        (
            1,
            vec![r#"dimension device: buckets ["desktop","mobile","tablet"] -> ["desktop","mobile","tablet","tv"]"#
                .into()]
        )
    );
    // compiled: a .cfb is the same table as its source, and compares with another .cfb
    let cfb_old = dir.path().join("a/edge.cfb");
    let o = clef_paths(&["flash", "compile"], &[&old, Path::new("-o"), &cfb_old]);
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    let cfb_new = dir.path().join("b/edge.cfb");
    let o = clef_paths(&["flash", "compile"], &[&dir.path().join("b/edge.flash.json"), Path::new("-o"), &cfb_new]);
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    assert_eq!(diff_lines(&old, &cfb_old).0, 0);
    assert_eq!(
        diff_lines(&cfb_old, &cfb_new),
        (1, vec!["cell device=mobile,level=medium: action 2 -> action 1".into()])
    );
    let o = clef_paths(&["diff", "--json"], &[&cfb_old, &cfb_new]);
    let j: Json = serde_json::from_str(&out(&o)).unwrap();
    assert_eq!(j["kind"], "flash");
    assert_eq!(j["changes"][0]["change"], "cell");
    assert_eq!((j["changes"][0]["old"].clone(), j["changes"][0]["new"].clone()), (json!("2"), json!("1")));
}

#[test]
fn files_that_do_not_load_or_differ_in_kind_are_errors_that_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let good = write(dir.path(), "risk.json", &jev(base_params(), Json::Null, base_rules()));
    let bad = write(dir.path(), "bad/risk.json", "[{\"id\": \"a\", \"condition\": \"x >\", \"action\": {}}]");
    let o = clef_paths(&["diff"], &[&good, &bad]);
    assert_eq!(o.status.code(), Some(2), "{}", describe(&o));
    assert!(out(&o).is_empty());
    assert!(err(&o).contains(&format!("{}:1:", bad.display())) && err(&o).contains("error:"), "{}", describe(&o));
    let missing = dir.path().join("missing.json");
    let o = clef_paths(&["diff"], &[&missing, &good]);
    assert_eq!(o.status.code(), Some(2), "{}", describe(&o));
    assert!(err(&o).contains("missing.json") && err(&o).contains("cannot read the file"), "{}", describe(&o));
    let yaml = write(dir.path(), "risk.yaml", RULESET);
    let o = clef_paths(&["diff", "--json"], &[&good, &yaml]);
    assert_eq!(o.status.code(), Some(2), "{}", describe(&o));
    assert!(out(&o).is_empty());
    assert!(
        err(&o).contains("is a jev table") && err(&o).contains("a ruleset table") && err(&o).contains("of one kind"),
        "{}",
        describe(&o)
    );
    let flash = write(dir.path(), "edge.flash.json", FLASH);
    assert_eq!(clef_paths(&["diff"], &[&flash, &good]).status.code(), Some(2));
}

// ---------------------------------------------------------------------------------------------
// one edit, reported as exactly that edit

/// One edit of a generated table.
#[derive(Clone, Debug)]
enum Edit {
    Condition(usize, i64),
    Action(usize, i64),
    Toggle(usize),
    Param(usize, i64),
    Add(usize, i64),
    Remove(usize),
    Move(usize, usize),
    Default(i64),
}

/// A generated rule: `x > LIMIT` or `x < params.pN`, an action, the enabled flag.
#[derive(Clone, Debug)]
struct GenRule {
    id: String,
    condition: String,
    action: i64,
    enabled: bool,
}

#[derive(Clone, Debug)]
struct Gen {
    params: Vec<i64>,
    rules: Vec<GenRule>,
    default: i64,
}

fn gen_table() -> impl Strategy<Value = Gen> {
    let rule = (0..3usize, -50..50i64, 0..9i64, prop::bool::weighted(0.8));
    (prop::collection::vec(0..100i64, 3), prop::collection::vec(rule, 1..9), 0..9i64).prop_map(
        |(params, rules, default)| Gen {
            params,
            rules: rules
                .into_iter()
                .enumerate()
                .map(|(i, (p, k, action, enabled))| GenRule {
                    id: format!("r{i}"),
                    condition: if k % 2 == 0 { format!("x > {k}") } else { format!("x < params.p{p}") },
                    action,
                    enabled,
                })
                .collect(),
            default,
        },
    )
}

fn gen_edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (0..64usize, 50..99i64).prop_map(|(i, k)| Edit::Condition(i, k)),
        (0..64usize, 10..19i64).prop_map(|(i, k)| Edit::Action(i, k)),
        (0..64usize).prop_map(Edit::Toggle),
        (0..3usize, 100..200i64).prop_map(|(j, v)| Edit::Param(j, v)),
        (0..64usize, 0..99i64).prop_map(|(i, k)| Edit::Add(i, k)),
        (0..64usize).prop_map(Edit::Remove),
        (0..64usize, 0..64usize).prop_map(|(i, j)| Edit::Move(i, j)),
        (10..19i64).prop_map(Edit::Default),
    ]
}

impl Gen {
    /// The table as a Jev file, or as a YAML rule set.
    fn text(&self, yaml: bool) -> String {
        if yaml {
            let mut s = String::from("params:\n");
            for (j, v) in self.params.iter().enumerate() {
                s += &format!("  p{j}: {{value: {v}}}\n");
            }
            s += "rules:\n";
            for r in &self.rules {
                s += &format!(
                    "  - {{id: {}, when: '{}', action: {{v: {}}}, enabled: {}}}\n",
                    r.id, r.condition, r.action, r.enabled
                );
            }
            s + &format!("default: {{v: {}}}\n", self.default)
        } else {
            let params: serde_json::Map<String, Json> =
                self.params.iter().enumerate().map(|(j, v)| (format!("p{j}"), json!({"value": v}))).collect();
            let rules: Vec<Json> = self
                .rules
                .iter()
                .map(|r| json!({"id": r.id, "condition": r.condition, "action": {"v": r.action}, "enabled": r.enabled}))
                .collect();
            json!({"params": params, "default": {"v": self.default}, "rules": rules}).to_string()
        }
    }

    /// The table with `edit` applied, and the one change the diff must report (`None`: the edit
    /// changes nothing, such as a move to the same place).
    fn apply(&self, edit: &Edit) -> (Gen, Option<Change>) {
        let mut g = self.clone();
        let n = g.rules.len();
        let ids: Vec<String> = g.rules.iter().map(|r| r.id.clone()).collect();
        let id = |i: usize| ids[i % n].clone();
        let change = match *edit {
            Edit::Condition(i, k) => {
                let old = g.rules[i % n].condition.clone();
                let new = format!("x > {k}");
                g.rules[i % n].condition = new.clone();
                (old != new).then(|| Change::RuleCondition { rule: id(i), old, new })
            }
            Edit::Action(i, k) => {
                let old = g.rules[i % n].action;
                g.rules[i % n].action = k;
                Some(Change::RuleAction { rule: id(i), old: json!({"v": old}), new: json!({"v": k}) })
            }
            Edit::Toggle(i) => {
                let old = g.rules[i % n].enabled;
                g.rules[i % n].enabled = !old;
                Some(Change::RuleEnabled { rule: id(i), old, new: !old })
            }
            Edit::Param(j, v) => {
                let old = g.params[j];
                g.params[j] = v;
                Some(Change::Param { name: format!("p{j}"), key: "value".into(), old: json!(old), new: json!(v) })
            }
            Edit::Add(i, k) => {
                let at = i % (n + 1);
                let rule = GenRule { id: "added".into(), condition: format!("x > {k}"), action: 1, enabled: true };
                g.rules.insert(at, rule);
                let before = g.rules.get(at + 1).map(|r| r.id.clone());
                Some(Change::RuleAdded { rule: "added".into(), position: at + 1, before })
            }
            Edit::Remove(i) => {
                let removed = g.rules.remove(i % n);
                Some(Change::RuleRemoved { rule: removed.id, position: i % n + 1 })
            }
            Edit::Move(i, j) => {
                let (from, to) = (i % n, j % n);
                let r = g.rules.remove(from);
                g.rules.insert(to, r);
                // which rule a swap of neighbours names is a choice: checked apart
                (from != to).then(|| Change::RuleMoved {
                    rule: String::new(),
                    old_position: from + 1,
                    position: to + 1,
                    before: None,
                })
            }
            Edit::Default(k) => {
                let old = g.default;
                g.default = k;
                Some(Change::Default { old: json!({"v": old}), new: json!({"v": k}) })
            }
        };
        (g, change)
    }
}

fn load(text: &str, yaml: bool) -> Table {
    let path = if yaml { "gen.yaml" } else { "gen.json" };
    Table::from_bytes(Path::new(path), text.as_bytes(), &Limits::default()).expect("a generated table loads")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// A table diffed with itself is empty; after one edit, the diff is exactly that edit.
    #[test]
    fn one_edit_is_reported_as_exactly_that_edit(g in gen_table(), edit in gen_edit(), yaml in any::<bool>()) {
        let old = load(&g.text(yaml), yaml);
        let same = diff::diff(&old, &old).unwrap();
        prop_assert!(same.is_empty(), "{:?}", same.changes);
        let (edited, expected) = g.apply(&edit);
        let new = load(&edited.text(yaml), yaml);
        let d = diff::diff(&old, &new).unwrap();
        match (expected, &d.changes[..]) {
            (None, changes) => prop_assert!(changes.is_empty(), "{:?}", changes),
            (Some(Change::RuleMoved { .. }), [Change::RuleMoved { rule, old_position, position, before }]) => {
                // moving the one reported rule from its old place to its new one gives the new order
                let mut order: Vec<&String> = g.rules.iter().map(|r| &r.id).collect();
                prop_assert_eq!(order[old_position - 1], rule);
                let r = order.remove(old_position - 1);
                order.insert(position - 1, r);
                let now: Vec<&String> = edited.rules.iter().map(|r| &r.id).collect();
                prop_assert_eq!(&order, &now);
                prop_assert_eq!(before.as_ref(), now.get(*position).copied());
            }
            (Some(want), changes) => prop_assert_eq!(changes, &[want][..]),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// attribution

#[test]
fn a_changed_parameter_is_the_cause_for_the_rules_that_read_it() {
    let limits = Limits::default();
    let old_text = jev(base_params(), json!({"level": "none"}), base_rules());
    let mut params = base_params();
    params["free_limit"]["value"] = json!(50);
    let new_text = jev(params, json!({"level": "none"}), base_rules());
    let old = Table::from_bytes(Path::new("risk.json"), old_text.as_bytes(), &limits).unwrap();
    let new = Table::from_bytes(Path::new("risk.json"), new_text.as_bytes(), &limits).unwrap();
    let d = diff::diff(&old, &new).unwrap();
    let a = Attribution::new(&old, &new, &d);
    // amount 70: the default before, high_amount now
    assert_eq!(a.causes(None, Some("high_amount"), false), ["param free_limit: 100 -> 50"]);
    // from a later rule to high_amount
    assert_eq!(a.causes(Some("new_account"), Some("high_amount"), false), ["param free_limit: 100 -> 50"]);
    // nothing in the diff moves a decision between rules that read no changed parameter
    assert!(a.causes(Some("vip"), Some("new_account"), false).is_empty());
    assert!(a.causes(None, None, false).is_empty());
}

#[test]
fn flash_and_schema_changes_explain_the_decisions_they_change() {
    let limits = Limits::default();
    let load = |name: &str, text: &str| Table::from_bytes(Path::new(name), text.as_bytes(), &limits).unwrap();
    let old = load("edge.flash.json", FLASH);
    let changed = FLASH
        .replace("[[1, 2, 3], [2, 2, 3]", "[[1, 2, 3], [2, 1, 3]")
        .replace(r#""response": "503""#, r#""response": "502""#)
        .replace(r#""0.03-0.1": "medium", "0.1+""#, r#""0.03-0.2": "medium", "0.2+""#)
        .replace(r#""default": 3"#, r#""default": 2"#);
    let new = load("edge.flash.json", &changed);
    let d = diff::diff(&old, &new).unwrap();
    let a = Attribution::new(&old, &new, &d);
    let cell = "device=mobile,level=medium";
    assert_eq!(a.causes(Some(cell), Some(cell), false), ["cell device=mobile,level=medium: action 2 -> action 1"]);
    // a cell whose action's content changed
    let high = "device=tablet,level=high";
    assert_eq!(
        a.causes(Some(high), Some(high), false),
        [r#"action 3: {"id":3,"type":"fallback","response":"503"} -> {"id":3,"type":"fallback","response":"502"}"#]
    );
    // another bucket of a dimension whose ranges changed (0.15 was high, is medium)
    let ranges = "dimension level: ranges [0, 0.03) low, [0.03, 0.1) medium, [0.1, ∞) high -> [0, 0.03) low, [0.03, 0.2) medium, [0.2, ∞) high";
    assert_eq!(a.causes(Some("device=desktop,level=high"), Some("device=desktop,level=medium"), false), [ranges]);
    // no cell on either side: the default
    assert_eq!(a.causes(None, None, false), ["default: action 3 -> action 2"]);
    // a table whose schema changed refuses inputs it decided before
    let with_schema = |t: &str| {
        jev(base_params(), Json::Null, base_rules()).replacen(
            '{',
            &format!(
                r#"{{"schema": {{"amount": "{t}", "tier": "string", "age_days": "number", "country": "string"}},"#
            ),
            1,
        )
    };
    let (old, new) = (load("risk.json", &with_schema("number")), load("risk.json", &with_schema("integer")));
    let d = diff::diff(&old, &new).unwrap();
    assert_eq!(d.lines(), ["schema amount: number -> integer"]);
    let a = Attribution::new(&old, &new, &d);
    assert_eq!(a.causes(Some("high_amount"), None, true), ["schema amount: number -> integer"]);
}

/// Writes risk-like inputs: a tier, an amount, a country, a payment method, an account age.
fn inputs(n: usize) -> Vec<String> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let tiers = ["vip", "premium", "basic", "standard"];
    let countries = ["CN", "US", "JP", "RU", "KP"];
    let methods = ["card", "wallet", "crypto", "Gift_Card"];
    (0..n)
        .map(|_| {
            json!({
                // young accounts and small amounts often enough that new_account_big_order's
                // bound matters
                "user_tier": tiers[next(4) as usize], "order_amount_usd": if next(2) == 0 { next(8000) } else { next(600) },
                "country_code": countries[next(5) as usize], "ip_country": countries[next(5) as usize],
                "is_vpn": next(4) == 0, "failed_logins_24h": next(8),
                "account_age_days": if next(2) == 0 { next(800) } else { next(10) },
                "payment_method": methods[next(4) as usize],
            })
            .to_string()
        })
        .collect()
}

#[test]
fn replay_against_an_edited_table_prints_the_diff_and_why_each_outcome_changed() {
    let dir = tempfile::tempdir().unwrap();
    let source = std::fs::read_to_string(Path::new(ROOT).join("tables/risk.json")).unwrap();
    let table_path = write(dir.path(), "risk.json", &source);
    // record decisions as the server would, with the table as it is
    let table = Table::load(&table_path, &Limits::default()).unwrap();
    let snaps = dir.path().join("snapshots");
    let cfg = SnapshotsConfig {
        enabled: true,
        dir: snaps.clone(),
        flush_ms: 20,
        compress: Compress::Zstd,
        ..Default::default()
    };
    let rec = Recorder::start(&cfg).unwrap();
    for input in inputs(2000) {
        let d = table.decide(input.as_bytes(), false).unwrap();
        let ev = Event::new(&table, &d, input.as_bytes());
        while rec.record(&ev).status == Status::Dropped {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    rec.shutdown();
    // the candidate: one condition widened, one rule added near the top
    let mut candidate: Json = serde_json::from_str(&source).unwrap();
    let rules = candidate["rules"].as_array_mut().unwrap();
    let at = rules.iter().position(|r| r["id"] == "new_account_big_order").unwrap();
    let widened = rules[at]["condition"].as_str().unwrap().replace("> 500", "> 100");
    assert_ne!(widened, rules[at]["condition"].as_str().unwrap());
    rules[at]["condition"] = json!(widened);
    rules.insert(
        1,
        rule("crypto_block", "lower(payment_method ?? \"\") == \"crypto\"", json!({"risk_level": "blocked"})),
    );
    let against = write(dir.path(), "candidate/risk.json", &serde_json::to_string_pretty(&candidate).unwrap());

    let o = clef_paths(&["replay"], &[&snaps, Path::new("--table"), &table_path, Path::new("--against"), &against]);
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    let text = out(&o);
    let diff_at = text.find("\nchanges from risk ").expect("the diff");
    let outcomes_at = text.find("rules whose outcomes changed with risk").expect("changed outcomes");
    assert!(diff_at < outcomes_at, "{text}");
    assert!(text.contains("  rule crypto_block added at 2 (before sanctioned_region)\n"), "{text}");
    assert!(text.contains("  rule new_account_big_order condition: "), "{text}");
    assert!(text.contains("    because: rule crypto_block added before "), "{text}");
    assert!(text.contains("    because: rule new_account_big_order condition changed ("), "{text}");
    assert!(!text.contains("no change between the tables explains it"), "{text}");

    let o = clef_paths(
        &["replay", "--json", "--examples", "50"],
        &[&snaps, Path::new("--table"), &table_path, Path::new("--against"), &against],
    );
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    let j: Json = serde_json::from_str(&out(&o)).unwrap();
    assert_eq!(j["changed"], 0, "the recorded table reproduces its decisions");
    assert_eq!(j["diff"]["changes"].as_array().unwrap().len(), 2, "{}", j["diff"]);
    assert_eq!(j["diff"]["changes"][0]["change"], "rule_added");
    assert_eq!(j["diff"]["changes"][1]["change"], "rule_condition");
    let changed = j["against"]["changed_rules"].as_array().unwrap();
    assert!(j["against"]["changed"].as_u64().unwrap() > 100, "{}", j["against"]);
    let mut by_cause = std::collections::BTreeMap::<String, u64>::new();
    let mut examples = 0;
    for entry in changed {
        assert_eq!(entry["unexplained"], 0, "{entry}");
        for c in entry["causes"].as_array().unwrap() {
            *by_cause.entry(c["cause"].as_str().unwrap().to_string()).or_default() += c["count"].as_u64().unwrap();
        }
        for e in entry["examples"].as_array().unwrap() {
            examples += 1;
            let causes: Vec<&str> = e["causes"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
            let (was, now) = (&e["recorded"]["rule_id"], &e["replayed"]["rule_id"]);
            let input: Json = e["input"].clone();
            if now == "crypto_block" {
                // the new rule answers now: it is the cause, placed before the rule that answered
                assert_eq!(input["payment_method"], "crypto", "{e}");
                let want = match was.as_str() {
                    Some(was) => format!("rule crypto_block added before {was}"),
                    None => "rule crypto_block added".to_string(),
                };
                assert_eq!(causes, [want.as_str()], "{e}");
            } else {
                assert_eq!(now, "new_account_big_order", "{e}");
                assert_eq!(causes, ["rule new_account_big_order condition changed"], "{e}");
                let amount = input["order_amount_usd"].as_u64().unwrap();
                assert!((101..=500).contains(&amount), "{e}");
            }
        }
    }
    assert!(examples > 20, "{changed:?}");
    assert!(
        by_cause
            .keys()
            .all(|c| c.starts_with("rule crypto_block added") || c == "rule new_account_big_order condition changed"),
        "{by_cause:?}"
    );
    assert!(by_cause.contains_key("rule new_account_big_order condition changed"), "{by_cause:?}");
    assert!(by_cause.keys().any(|c| c.starts_with("rule crypto_block added before ")), "{by_cause:?}");
}
