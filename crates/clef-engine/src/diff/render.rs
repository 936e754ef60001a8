//! A [`TableDiff`] for people — one line per change — and as JSON (`clef diff --json`, the
//! `diff` of `clef replay --against --json`).
//!
//! Lines name what changed and show the old value, `->`, the new one:
//! `param free_limit: 100 -> 50`, `rule high_amount condition: "amount > 1000" -> "amount > 500"`,
//! `rule vip added at 1 (before high_amount)`. Conditions are quoted as JSON strings and
//! actions written as compact JSON, so every change is one line whatever it holds.

use serde_json::{json, Value as Json};

use super::{Change, Side, TableDiff};
use crate::expr::json::quote;

/// What a missing value (no default, no fallback, a key absent) is shown as.
const NONE: &str = "(none)";

impl TableDiff {
    /// One line per change, in the diff's order.
    pub fn lines(&self) -> Vec<String> {
        self.changes.iter().map(Change::line).collect()
    }

    /// The diff for people: its lines, or a line saying that nothing that decides changed.
    pub fn to_text(&self) -> String {
        if self.is_empty() {
            let why = if self.old.version == self.new.version {
                "the files are identical"
            } else {
                "the files differ only in descriptions, tests, comments or layout"
            };
            return format!("no changes in what decides: {why}\n");
        }
        self.lines().into_iter().map(|l| l + "\n").collect()
    }

    /// The diff as one JSON object: `kind`, `old` and `new` (`path`, `version`), `identical`
    /// (no change in what decides) and `changes` (one object per change, with its `text`).
    pub fn to_json(&self) -> Json {
        let side = |s: &Side| json!({"path": s.path.display().to_string(), "version": s.version});
        json!({
            "kind": self.kind,
            "old": side(&self.old),
            "new": side(&self.new),
            "identical": self.is_empty(),
            "changes": self.changes.iter().map(Change::to_json).collect::<Vec<_>>(),
        })
    }
}

/// An id or name as a line shows it: as written, or quoted when it holds spaces, quotes or
/// control characters (a line must stay one line and be read back unambiguously).
pub(crate) fn name(s: &str) -> String {
    if s.is_empty() || s.chars().any(|c| c.is_whitespace() || c.is_control() || c == '"') {
        quote(s)
    } else {
        s.to_string()
    }
}

/// A JSON value on one line; `null` as `(none)`.
fn value(v: &Json) -> String {
    if v.is_null() {
        NONE.to_string()
    } else {
        v.to_string()
    }
}

/// A flash dimension's ranges (`[{"value", "min", "max"}]`, `null` bounds unbounded) as
/// `[0, 0.03) low, [0.03, 0.1) medium, [0.1, ∞) high`.
fn ranges(v: &Json) -> String {
    let Some(list) = v.as_array() else { return NONE.to_string() };
    let bound = |b: Option<&Json>, inf: &str| b.and_then(Json::as_f64).map_or(inf.to_string(), |x| x.to_string());
    list.iter()
        .map(|r| {
            let bucket = r.get("value").and_then(Json::as_str).unwrap_or("");
            format!("[{}, {}) {}", bound(r.get("min"), "-∞"), bound(r.get("max"), "∞"), name(bucket))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn key_or_none(k: Option<&String>) -> String {
    k.map_or(NONE.to_string(), |k| format!("action {k}"))
}

impl Change {
    /// The change as one line for people.
    pub fn line(&self) -> String {
        let place =
            |before: &Option<String>| before.as_deref().map_or("last".to_string(), |b| format!("before {}", name(b)));
        match self {
            Change::ParamAdded { name: n, declaration } => format!("param {} added: {declaration}", name(n)),
            Change::ParamRemoved { name: n, declaration } => format!("param {} removed (was {declaration})", name(n)),
            Change::Param { name: n, key, old, new } if key == "value" => {
                format!("param {}: {} -> {}", name(n), value(old), value(new))
            }
            Change::Param { name: n, key, old, new } => {
                format!("param {}: {} {} -> {}", name(n), name(key), value(old), value(new))
            }
            Change::Schema { field, old: None, new: Some(t) } => format!("schema {} added: {t}", name(field)),
            Change::Schema { field, old: Some(t), new: None } => format!("schema {} removed (was {t})", name(field)),
            Change::Schema { field, old, new } => {
                format!("schema {}: {} -> {}", name(field), old.unwrap_or(NONE), new.unwrap_or(NONE))
            }
            Change::Default { old, new } => format!("default: {} -> {}", value(old), value(new)),
            Change::RuleAdded { rule, position, before } => {
                format!("rule {} added at {position} ({})", name(rule), place(before))
            }
            Change::RuleRemoved { rule, position } => format!("rule {} removed (was at {position})", name(rule)),
            Change::RuleMoved { rule, old_position, position, before } => {
                format!("rule {} moved {old_position} -> {position} (now {})", name(rule), place(before))
            }
            Change::RuleEnabled { rule, old, new } => format!("rule {} enabled: {old} -> {new}", name(rule)),
            Change::RuleCondition { rule, old, new } => {
                format!("rule {} condition: {} -> {}", name(rule), quote(old), quote(new))
            }
            Change::RuleAction { rule, old, new } => {
                format!("rule {} action: {} -> {}", name(rule), value(old), value(new))
            }
            Change::RuleFallback { rule, old, new } => {
                format!("rule {} fallback: {} -> {}", name(rule), value(old), value(new))
            }
            Change::DimensionAdded { dimension, description } => {
                format!("dimension {} added: {description}", name(dimension))
            }
            Change::DimensionRemoved { dimension, description } => {
                format!("dimension {} removed (was {description})", name(dimension))
            }
            Change::Dimension { dimension, part: "ranges", old, new } => {
                format!("dimension {}: ranges {} -> {}", name(dimension), ranges(old), ranges(new))
            }
            Change::Dimension { dimension, part, old, new } => {
                format!("dimension {}: {part} {} -> {}", name(dimension), value(old), value(new))
            }
            Change::DimensionOrder { old, new } => {
                let list = |v: &[String]| v.iter().map(|d| name(d)).collect::<Vec<_>>().join(", ");
                format!("dimensions reordered: {} -> {}", list(old), list(new))
            }
            Change::ActionAdded { action, new } => format!("action {action} added: {new}"),
            Change::ActionRemoved { action, old } => format!("action {action} removed (was {old})"),
            Change::Action { action, old, new } => format!("action {action}: {old} -> {new}"),
            Change::FlashDefault { old, new } => {
                format!("default: {} -> {}", key_or_none(old.as_ref()), key_or_none(new.as_ref()))
            }
            Change::Cell { cell, old, new } => format!("cell {}: action {old} -> action {new}", name(cell)),
        }
    }

    /// The change as a JSON object: `change` (its kind), what it is about, `old` and `new`
    /// where they apply, and `text` (the line).
    pub fn to_json(&self) -> Json {
        let mut v = match self {
            Change::ParamAdded { name, declaration } => {
                json!({"change": "param_added", "param": name, "new": declaration})
            }
            Change::ParamRemoved { name, declaration } => {
                json!({"change": "param_removed", "param": name, "old": declaration})
            }
            Change::Param { name, key, old, new } => {
                json!({"change": "param", "param": name, "key": key, "old": old, "new": new})
            }
            Change::Schema { field, old, new } => json!({"change": "schema", "field": field, "old": old, "new": new}),
            Change::Default { old, new } => json!({"change": "default", "old": old, "new": new}),
            Change::RuleAdded { rule, position, before } => {
                json!({"change": "rule_added", "rule": rule, "position": position, "before": before})
            }
            Change::RuleRemoved { rule, position } => {
                json!({"change": "rule_removed", "rule": rule, "old_position": position})
            }
            Change::RuleMoved { rule, old_position, position, before } => json!({
                "change": "rule_moved", "rule": rule, "old_position": old_position, "position": position,
                "before": before,
            }),
            Change::RuleEnabled { rule, old, new } => {
                json!({"change": "rule_enabled", "rule": rule, "old": old, "new": new})
            }
            Change::RuleCondition { rule, old, new } => {
                json!({"change": "rule_condition", "rule": rule, "old": old, "new": new})
            }
            Change::RuleAction { rule, old, new } => {
                json!({"change": "rule_action", "rule": rule, "old": old, "new": new})
            }
            Change::RuleFallback { rule, old, new } => {
                json!({"change": "rule_fallback", "rule": rule, "old": old, "new": new})
            }
            Change::DimensionAdded { dimension, description } => {
                json!({"change": "dimension_added", "dimension": dimension, "new": description})
            }
            Change::DimensionRemoved { dimension, description } => {
                json!({"change": "dimension_removed", "dimension": dimension, "old": description})
            }
            Change::Dimension { dimension, part, old, new } => {
                json!({"change": "dimension", "dimension": dimension, "part": part, "old": old, "new": new})
            }
            Change::DimensionOrder { old, new } => json!({"change": "dimension_order", "old": old, "new": new}),
            Change::ActionAdded { action, new } => json!({"change": "action_added", "action": action, "new": new}),
            Change::ActionRemoved { action, old } => {
                json!({"change": "action_removed", "action": action, "old": old})
            }
            Change::Action { action, old, new } => {
                json!({"change": "action", "action": action, "old": old, "new": new})
            }
            Change::FlashDefault { old, new } => json!({"change": "default", "old": old, "new": new}),
            Change::Cell { cell, old, new } => json!({"change": "cell", "cell": cell, "old": old, "new": new}),
        };
        if let Some(obj) = v.as_object_mut() {
            obj.insert("text".into(), Json::String(self.line()));
        }
        v
    }
}
