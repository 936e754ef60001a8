//! What changed between two versions of a table (`clef diff`, and `clef replay --against`).
//!
//! Both versions are loaded by the table loaders the server uses ([`Table::load`]), and the
//! diff compares what they decide with, not their text: for rule tables (Jev `.json`, YAML rule
//! sets) the rules by id — added, removed, moved, and each one's condition (as an expression:
//! spacing and parentheses aside), action, fallback and `enabled` flag — the default action, the
//! parameters and the input schema; for flash tables
//! (`.flash.json` or compiled `.cfb`, which compare with each other) the dimensions, the actions
//! by their `id`, the action of each cell, and the default. Descriptions, tests, comments and
//! layout are not compared: two files that differ only there decide alike, and the diff is empty.
//!
//! **Moved.** A rule is moved when its place among the rules both versions have changed: the
//! rules kept in their order are a longest increasing subsequence of the old positions taken in
//! the new order, and every other common rule is reported as moved. Rules that only shift
//! because others were added or removed are not moved.
//!
//! **Order.** Changes come in a stable order: parameters by name, the schema by field, the
//! default; then the rules in the new table's order (each one's place first, then enabled,
//! condition, action, fallback), then the removed rules in the old order. A flash table's:
//! dimensions in the new order (then removed ones, then a change of their order), actions in the
//! new order (then removed ones), the default, then the cells in the new order.
//!
//! [`render`] writes a diff for people (one line per change) and as JSON; [`attribute`] names,
//! for a decision that changed between the versions, the changes that caused it.

pub mod attribute;
pub mod render;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use crate::expr::ast::{Expr, ExprKind, Step};
use crate::expr::{same_json_text, same_value};
use crate::table::flash::{DimensionSpec, FlashSpec};
use crate::table::{Engine, Limits, LoadError, RuleEngine, Table};

/// One of the two versions compared.
#[derive(Clone, Debug, PartialEq)]
pub struct Side {
    /// the file it was loaded from
    pub path: PathBuf,
    /// the table's version (the first 12 hex digits of the file's SHA-256)
    pub version: String,
}

/// What changed between two versions of one table.
#[derive(Clone, Debug, PartialEq)]
pub struct TableDiff {
    /// the kind of both tables (`jev`, `ruleset`, `flash`)
    pub kind: &'static str,
    /// the old version
    pub old: Side,
    /// the new version
    pub new: Side,
    /// the changes, in the order the module comment gives
    pub changes: Vec<Change>,
}

impl TableDiff {
    /// Whether the two versions decide with the same rules, parameters, schema and default.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }
}

/// One change between two versions of a table. Positions count from 1.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// a parameter the old version does not declare
    ParamAdded {
        /// its name
        name: String,
        /// its declaration (without `description`)
        declaration: Json,
    },
    /// a parameter the new version no longer declares
    ParamRemoved {
        /// its name
        name: String,
        /// its old declaration (without `description`)
        declaration: Json,
    },
    /// a key of a parameter's declaration (`value`, `min`, `max`, `step`, `tunable`) changed
    Param {
        /// the parameter's name
        name: String,
        /// which key
        key: String,
        /// the old value (`null`: the key was absent)
        old: Json,
        /// the new value (`null`: the key is absent)
        new: Json,
    },
    /// the schema's type of a field changed, or the field was declared or dropped
    Schema {
        /// the dotted path
        field: String,
        /// the old type (`None`: not declared)
        old: Option<&'static str>,
        /// the new type (`None`: no longer declared)
        new: Option<&'static str>,
    },
    /// a rule table's default action changed (`null`: none)
    Default {
        /// the old default
        old: Json,
        /// the new default
        new: Json,
    },
    /// a rule that the old version does not have
    RuleAdded {
        /// its id
        rule: String,
        /// its place in the new version
        position: usize,
        /// the rule after it in the new version (`None`: it is the last)
        before: Option<String>,
    },
    /// a rule that the new version no longer has
    RuleRemoved {
        /// its id
        rule: String,
        /// its place in the old version
        position: usize,
    },
    /// a rule whose place among the other rules changed
    RuleMoved {
        /// its id
        rule: String,
        /// its place in the old version
        old_position: usize,
        /// its place in the new version
        position: usize,
        /// the rule after it in the new version (`None`: it is the last)
        before: Option<String>,
    },
    /// a rule switched on or off in the file (`enabled`)
    RuleEnabled {
        /// its id
        rule: String,
        /// the old flag
        old: bool,
        /// the new flag
        new: bool,
    },
    /// a rule's condition, as written (a YAML rule's `conditions` and `when` joined with `&&`)
    RuleCondition {
        /// its id
        rule: String,
        /// the old condition
        old: String,
        /// the new condition
        new: String,
    },
    /// a rule's action
    RuleAction {
        /// its id
        rule: String,
        /// the old action
        old: Json,
        /// the new action
        new: Json,
    },
    /// a rule's fallback (`null`: none)
    RuleFallback {
        /// its id
        rule: String,
        /// the old fallback
        old: Json,
        /// the new fallback
        new: Json,
    },
    /// a flash dimension the old version does not have
    DimensionAdded {
        /// its name
        dimension: String,
        /// its field, buckets and ranges
        description: Json,
    },
    /// a flash dimension the new version no longer has
    DimensionRemoved {
        /// its name
        dimension: String,
        /// its old field, buckets and ranges
        description: Json,
    },
    /// a flash dimension's `field`, `buckets` or `ranges` changed
    Dimension {
        /// its name
        dimension: String,
        /// which part: `field`, `buckets` or `ranges`
        part: &'static str,
        /// the old part (`null`: a category dimension has no ranges)
        old: Json,
        /// the new part
        new: Json,
    },
    /// the dimensions both versions have are in another order (the cells' names follow it)
    DimensionOrder {
        /// the old order
        old: Vec<String>,
        /// the new order
        new: Vec<String>,
    },
    /// a flash action the old version does not have
    ActionAdded {
        /// its key: its `id` as JSON (`2`), or `#N` for the Nth action when ids do not tell them apart
        action: String,
        /// the action
        new: Json,
    },
    /// a flash action the new version no longer has
    ActionRemoved {
        /// its key
        action: String,
        /// the old action
        old: Json,
    },
    /// a flash action whose content changed
    Action {
        /// its key
        action: String,
        /// the old action
        old: Json,
        /// the new action
        new: Json,
    },
    /// a flash table's default (`None`: no default)
    FlashDefault {
        /// the old default's action key
        old: Option<String>,
        /// the new default's action key
        new: Option<String>,
    },
    /// a cell both versions have that answers with another action
    Cell {
        /// the cell's name in the new version (`device=mobile,error_rate_level=high`)
        cell: String,
        /// the old action key
        old: String,
        /// the new action key
        new: String,
    },
}

/// Why two tables cannot be compared.
#[derive(Debug)]
pub enum DiffError {
    /// a file did not load: the loader's diagnostics
    Load(LoadError),
    /// the two files are tables of different kinds
    Kinds {
        /// the old file and its kind
        old: (PathBuf, &'static str),
        /// the new file and its kind
        new: (PathBuf, &'static str),
    },
}

impl fmt::Display for DiffError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DiffError::Load(e) => write!(f, "{e}"),
            DiffError::Kinds { old, new } => write!(
                f,
                "error: {} is a {} table and {} a {} table: clef diff compares two versions of one table, \
                 which are of one kind (a flash table's .flash.json and .cfb compare with each other)",
                old.0.display(),
                old.1,
                new.0.display(),
                new.1
            ),
        }
    }
}

impl std::error::Error for DiffError {}

/// Loads two table files with the default limits and compares them.
pub fn diff_files(old: &Path, new: &Path) -> Result<TableDiff, DiffError> {
    let limits = Limits::default();
    let old = Table::load(old, &limits).map_err(DiffError::Load)?;
    let new = Table::load(new, &limits).map_err(DiffError::Load)?;
    diff(&old, &new)
}

/// What changed from `old` to `new`, two loaded versions of one table.
pub fn diff(old: &Table, new: &Table) -> Result<TableDiff, DiffError> {
    let (old_kind, new_kind) = (old.kind.name(), new.kind.name());
    let changes = match (&*old.engine, &*new.engine) {
        (Engine::Rules(a), Engine::Rules(b)) if old_kind == new_kind => {
            let mut changes = param_changes(old.params.as_ref(), new.params.as_ref());
            changes.extend(schema_changes(a, b));
            if !same_json_text(&a.default_json, &b.default_json) {
                changes.push(Change::Default { old: parse(&a.default_json), new: parse(&b.default_json) });
            }
            changes.extend(rule_changes(a, b));
            changes
        }
        (Engine::Flash(a), Engine::Flash(b)) => flash_changes(a.spec(), b.spec()),
        _ => return Err(DiffError::Kinds { old: (old.path.clone(), old_kind), new: (new.path.clone(), new_kind) }),
    };
    Ok(TableDiff {
        kind: old_kind,
        old: Side { path: old.path.clone(), version: old.version.clone() },
        new: Side { path: new.path.clone(), version: new.version.clone() },
        changes,
    })
}

/// A JSON text the loaders wrote, as a value (`null` if it somehow is not JSON).
fn parse(text: &str) -> Json {
    serde_json::from_str(text).unwrap_or(Json::Null)
}

/// A parameter's declaration without its `description` (which does not decide anything).
fn declaration(decl: &Json) -> BTreeMap<String, Json> {
    match decl {
        Json::Object(keys) => {
            keys.iter().filter(|(k, _)| *k != "description").map(|(k, v)| (k.clone(), v.clone())).collect()
        }
        other => BTreeMap::from([("value".to_string(), other.clone())]),
    }
}

fn param_changes(old: Option<&Json>, new: Option<&Json>) -> Vec<Change> {
    let decls = |p: Option<&Json>| -> BTreeMap<String, BTreeMap<String, Json>> {
        match p {
            Some(Json::Object(m)) => m.iter().map(|(k, v)| (k.clone(), declaration(v))).collect(),
            _ => BTreeMap::new(),
        }
    };
    let (old, new) = (decls(old), decls(new));
    let names: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    let mut out = Vec::new();
    for name in names {
        match (old.get(name), new.get(name)) {
            (None, Some(d)) => out.push(Change::ParamAdded { name: name.clone(), declaration: object(d) }),
            (Some(d), None) => out.push(Change::ParamRemoved { name: name.clone(), declaration: object(d) }),
            (Some(a), Some(b)) => {
                // `value` first: it is what conditions see
                let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect::<BTreeSet<_>>().into_iter().collect();
                keys.sort_by_key(|k| (k.as_str() != "value", k.as_str()));
                for key in keys {
                    let (x, y) = (a.get(key).cloned().unwrap_or(Json::Null), b.get(key).cloned().unwrap_or(Json::Null));
                    if !same_value(&x, &y) {
                        out.push(Change::Param { name: name.clone(), key: key.clone(), old: x, new: y });
                    }
                }
            }
            (None, None) => {}
        }
    }
    out
}

fn object(m: &BTreeMap<String, Json>) -> Json {
    Json::Object(m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

fn schema_changes(old: &RuleEngine, new: &RuleEngine) -> Vec<Change> {
    let fields = |e: &RuleEngine| -> BTreeMap<String, &'static str> {
        e.schema().map(|s| s.fields.iter().map(|(k, t)| (k.clone(), t.name())).collect()).unwrap_or_default()
    };
    let (old, new) = (fields(old), fields(new));
    let paths: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    paths
        .into_iter()
        .filter_map(|p| {
            let (a, b) = (old.get(p).copied(), new.get(p).copied());
            (a != b).then(|| Change::Schema { field: p.clone(), old: a, new: b })
        })
        .collect()
}

/// The positions (in `seq`) of a longest strictly increasing subsequence of `seq`.
fn longest_increasing(seq: &[usize]) -> HashSet<usize> {
    // patience sorting: tails[k] = the position of the smallest last value of an increasing
    // subsequence of length k + 1; prev links each position to the one before it
    let mut tails: Vec<usize> = Vec::new();
    let mut prev: Vec<Option<usize>> = vec![None; seq.len()];
    for (i, &v) in seq.iter().enumerate() {
        let k = tails.partition_point(|&t| seq.get(t).is_some_and(|&tv| tv < v));
        if let (Some(p), Some(slot)) = (k.checked_sub(1).and_then(|k| tails.get(k)), prev.get_mut(i)) {
            *slot = Some(*p);
        }
        match tails.get_mut(k) {
            Some(t) => *t = i,
            None => tails.push(i),
        }
    }
    let mut kept = HashSet::new();
    let mut at = tails.last().copied();
    while let Some(i) = at {
        kept.insert(i);
        at = prev.get(i).copied().flatten();
    }
    kept
}

fn rule_changes(old: &RuleEngine, new: &RuleEngine) -> Vec<Change> {
    let old_at: HashMap<&str, usize> = old.rules.iter().enumerate().map(|(i, r)| (r.id.as_str(), i)).collect();
    let new_ids: HashSet<&str> = new.rules.iter().map(|r| r.id.as_str()).collect();
    // the old positions of the common rules, in the new order
    let common: Vec<usize> = new.rules.iter().filter_map(|r| old_at.get(r.id.as_str()).copied()).collect();
    let kept: HashSet<usize> = longest_increasing(&common).into_iter().filter_map(|i| common.get(i).copied()).collect();
    let mut out = Vec::new();
    for (j, rule) in new.rules.iter().enumerate() {
        let before = new.rules.get(j + 1).map(|r| r.id.clone());
        let Some((i, was)) = old_at.get(rule.id.as_str()).and_then(|&i| old.rules.get(i).map(|r| (i, r))) else {
            out.push(Change::RuleAdded { rule: rule.id.clone(), position: j + 1, before });
            continue;
        };
        if !kept.contains(&i) {
            out.push(Change::RuleMoved { rule: rule.id.clone(), old_position: i + 1, position: j + 1, before });
        }
        if was.enabled != rule.enabled {
            out.push(Change::RuleEnabled { rule: rule.id.clone(), old: was.enabled, new: rule.enabled });
        }
        if !same_condition(&was.ast, &rule.ast) {
            out.push(Change::RuleCondition {
                rule: rule.id.clone(),
                old: was.condition.clone(),
                new: rule.condition.clone(),
            });
        }
        if !same_json_text(&was.action_json, &rule.action_json) {
            out.push(Change::RuleAction { rule: rule.id.clone(), old: was.action.clone(), new: rule.action.clone() });
        }
        let fallback = |r: &crate::table::Rule| r.fallback.clone().unwrap_or(Json::Null);
        if !same_value(&fallback(was), &fallback(rule)) {
            out.push(Change::RuleFallback { rule: rule.id.clone(), old: fallback(was), new: fallback(rule) });
        }
    }
    for (i, rule) in old.rules.iter().enumerate() {
        if !new_ids.contains(rule.id.as_str()) {
            out.push(Change::RuleRemoved { rule: rule.id.clone(), position: i + 1 });
        }
    }
    out
}

/// Whether two conditions are the same expression, however they are spaced or parenthesized:
/// the same tree of operators, names and literals (positions aside). Walked without recursion.
fn same_condition(a: &Expr, b: &Expr) -> bool {
    let mut todo = vec![(a, b)];
    while let Some((a, b)) = todo.pop() {
        let same_node = match (&a.kind, &b.kind) {
            (ExprKind::Nil, ExprKind::Nil) => true,
            (ExprKind::Bool(x), ExprKind::Bool(y)) => x == y,
            (ExprKind::Int(x), ExprKind::Int(y)) => x == y,
            (ExprKind::Float(x), ExprKind::Float(y)) => x.to_bits() == y.to_bits() || x == y,
            (ExprKind::Str(x), ExprKind::Str(y)) | (ExprKind::Field(x), ExprKind::Field(y)) => x == y,
            (ExprKind::Param(x), ExprKind::Param(y)) => x == y,
            (ExprKind::Access(_, x), ExprKind::Access(_, y)) => {
                x.len() == y.len()
                    && x.iter().zip(y).all(|((s, _), (t, _))| match (s, t) {
                        (Step::Member(m), Step::Member(n)) => m == n,
                        (Step::Index(_), Step::Index(_)) => true,
                        _ => false,
                    })
            }
            (ExprKind::Call(f, _), ExprKind::Call(g, _)) => f == g,
            (ExprKind::Unary(o, _), ExprKind::Unary(p, _)) => o == p,
            (ExprKind::Binary(o, _, _), ExprKind::Binary(p, _, _)) => o == p,
            (ExprKind::Chain(_, x), ExprKind::Chain(_, y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|((o, _), (p, _))| o == p)
            }
            (ExprKind::Array(_), ExprKind::Array(_))
            | (ExprKind::Power(_), ExprKind::Power(_))
            | (ExprKind::And(_), ExprKind::And(_))
            | (ExprKind::Or(_), ExprKind::Or(_))
            | (ExprKind::Ternary(..), ExprKind::Ternary(..)) => true,
            _ => false,
        };
        let (x, y) = (a.children(), b.children());
        if !same_node || x.len() != y.len() {
            return false;
        }
        todo.extend(x.into_iter().zip(y));
    }
    true
}

/// Each action's key: its `id` as JSON when every action has a distinct one, else `#N`.
pub(crate) fn action_keys(spec: &FlashSpec) -> Vec<String> {
    let ids: Vec<Option<String>> =
        spec.actions.iter().map(|a| parse(a).get("id").filter(|id| !id.is_null()).map(Json::to_string)).collect();
    let distinct: HashSet<&String> = ids.iter().flatten().collect();
    if distinct.len() == ids.len() {
        ids.into_iter().flatten().collect()
    } else {
        (1..=ids.len()).map(|n| format!("#{n}")).collect()
    }
}

/// A dimension's ranges as JSON (`null` for a category dimension), as `GET /tables` shows them.
fn ranges_json(d: &DimensionSpec) -> Json {
    let bound = |x: f64| {
        if x.is_finite() {
            serde_json::Number::from_f64(x).map_or(Json::Null, Json::Number)
        } else {
            Json::Null
        }
    };
    match &d.ranges {
        None => Json::Null,
        Some(ranges) => Json::Array(
            ranges
                .iter()
                .map(|r| {
                    let value = d.values.get(usize::from(r.bucket)).cloned().unwrap_or_default();
                    serde_json::json!({"value": value, "min": bound(r.min), "max": bound(r.max)})
                })
                .collect(),
        ),
    }
}

fn dimension_json(d: &DimensionSpec) -> Json {
    serde_json::json!({"field": d.field, "buckets": d.values, "ranges": ranges_json(d)})
}

/// A flash cell's `(dimension, bucket)` pairs.
pub(crate) type Buckets = Vec<(String, String)>;

/// Every cell of a flash table: its name, what identifies it whatever the order of the
/// dimensions (its [`Buckets`], sorted), and its action index.
pub(crate) fn cells(spec: &FlashSpec) -> Vec<(String, Buckets, usize)> {
    let mut out = Vec::with_capacity(spec.cells.len());
    for (i, &action) in spec.cells.iter().enumerate() {
        let mut rest = i;
        let mut pairs: Buckets = Vec::with_capacity(spec.dimensions.len());
        for d in spec.dimensions.iter().rev() {
            let n = d.values.len().max(1);
            pairs.push((d.name.clone(), d.values.get(rest % n).cloned().unwrap_or_default()));
            rest /= n;
        }
        pairs.reverse();
        let name = pairs.iter().map(|(d, v)| format!("{d}={v}")).collect::<Vec<_>>().join(",");
        pairs.sort();
        out.push((name, pairs, usize::from(action)));
    }
    out
}

fn flash_changes(old: &FlashSpec, new: &FlashSpec) -> Vec<Change> {
    let mut out = Vec::new();
    // dimensions
    let old_dims: HashMap<&str, &DimensionSpec> = old.dimensions.iter().map(|d| (d.name.as_str(), d)).collect();
    let new_names: HashSet<&str> = new.dimensions.iter().map(|d| d.name.as_str()).collect();
    for d in &new.dimensions {
        let Some(was) = old_dims.get(d.name.as_str()) else {
            out.push(Change::DimensionAdded { dimension: d.name.clone(), description: dimension_json(d) });
            continue;
        };
        let dim =
            |part: &'static str, old: Json, new: Json| Change::Dimension { dimension: d.name.clone(), part, old, new };
        if was.field != d.field {
            out.push(dim("field", Json::String(was.field.clone()), Json::String(d.field.clone())));
        }
        if was.values != d.values {
            out.push(dim("buckets", serde_json::json!(was.values), serde_json::json!(d.values)));
        }
        let (a, b) = (ranges_json(was), ranges_json(d));
        if a != b {
            out.push(dim("ranges", a, b));
        }
    }
    for d in &old.dimensions {
        if !new_names.contains(d.name.as_str()) {
            out.push(Change::DimensionRemoved { dimension: d.name.clone(), description: dimension_json(d) });
        }
    }
    let common = |from: &FlashSpec, other: &dyn Fn(&str) -> bool| -> Vec<String> {
        from.dimensions.iter().filter(|d| other(&d.name)).map(|d| d.name.clone()).collect()
    };
    let (old_order, new_order) = (common(old, &|n| new_names.contains(n)), common(new, &|n| old_dims.contains_key(n)));
    if old_order != new_order {
        out.push(Change::DimensionOrder { old: old_order, new: new_order });
    }
    // actions, by key
    let (old_keys, new_keys) = (action_keys(old), action_keys(new));
    let old_actions: HashMap<&String, Json> = old_keys.iter().zip(&old.actions).map(|(k, a)| (k, parse(a))).collect();
    let new_actions: HashMap<&String, Json> = new_keys.iter().zip(&new.actions).map(|(k, a)| (k, parse(a))).collect();
    for (key, action) in new_keys.iter().zip(&new.actions) {
        let action = parse(action);
        match old_actions.get(key) {
            None => out.push(Change::ActionAdded { action: key.clone(), new: action }),
            Some(was) if !same_value(was, &action) => {
                out.push(Change::Action { action: key.clone(), old: was.clone(), new: action })
            }
            Some(_) => {}
        }
    }
    for (key, action) in old_keys.iter().zip(&old.actions) {
        if !new_actions.contains_key(key) {
            out.push(Change::ActionRemoved { action: key.clone(), old: parse(action) });
        }
    }
    let key_of = |keys: &[String], a: Option<u16>| a.and_then(|a| keys.get(usize::from(a)).cloned());
    let (old_default, new_default) = (key_of(&old_keys, old.default), key_of(&new_keys, new.default));
    if old_default != new_default {
        out.push(Change::FlashDefault { old: old_default, new: new_default });
    }
    // cells both versions have, by their buckets
    let old_cells: HashMap<Buckets, usize> = cells(old).into_iter().map(|(_, k, a)| (k, a)).collect();
    for (name, key, action) in cells(new) {
        let Some(&was) = old_cells.get(&key) else { continue };
        let (a, b) = (old_keys.get(was), new_keys.get(action));
        if let (Some(a), Some(b)) = (a, b) {
            if a != b {
                out.push(Change::Cell { cell: name, old: a.clone(), new: b.clone() });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_compare_as_expressions_not_as_text() {
        let parse = |text: &str| {
            let table = format!(
                r#"{{"params": {{"a": {{"value": 1}}, "b": {{"value": 2}}, "p": {{"value": 3}}}},
                    "rules": [{{"id": "r", "condition": {}, "action": {{}}}}]}}"#,
                serde_json::json!(text)
            );
            let t = Table::from_bytes(Path::new("t.json"), table.as_bytes(), &Limits::default()).unwrap();
            t.engine.rules()[0].ast.clone()
        };
        let same = |a: &str, b: &str| same_condition(&parse(a), &parse(b));
        assert!(same("x > 5 && y == \"a\"", "  x>5&&(y == 'a')  "));
        assert!(same("a.b[0].c in [1, 2.5, nil]", "a . b [0] . c in [1,2.5,null]"));
        assert!(same("f ?? 1 + 2 > params.p", "(f ?? 1) + 2 > params.p"));
        assert!(!same("x > 5", "x > 6"));
        assert!(!same("x > 5", "x >= 5"));
        assert!(!same("x > 5", "x > 5.0"));
        assert!(!same("a.b", "a.c"));
        assert!(!same("a.b", "a[\"b\"].c"));
        assert!(!same("x in [1, 2]", "x in [1, 2, 3]"));
        assert!(!same("a && b", "a || b"));
        assert!(!same("a && b && c", "a && b"));
        assert!(!same("lower(s) == \"a\"", "upper(s) == \"a\""));
        assert!(!same("x > params.a", "x > params.b"));
        assert!(!same("1 + 2 - x > 0", "1 - 2 + x > 0"));
    }

    #[test]
    fn the_longest_increasing_run_keeps_rules_in_order() {
        let kept = |seq: &[usize]| {
            let mut v: Vec<usize> = longest_increasing(seq).into_iter().map(|i| seq[i]).collect();
            v.sort_unstable();
            v
        };
        assert_eq!(kept(&[0, 1, 2, 3]), vec![0, 1, 2, 3]);
        assert_eq!(kept(&[3, 0, 1, 2]), vec![0, 1, 2]);
        assert_eq!(kept(&[1, 2, 3, 0]), vec![1, 2, 3]);
        assert_eq!(kept(&[0, 3, 1, 2, 4]), vec![0, 1, 2, 4]);
        assert_eq!(kept(&[]), Vec::<usize>::new());
        assert_eq!(kept(&[1, 0]).len(), 1);
    }
}
