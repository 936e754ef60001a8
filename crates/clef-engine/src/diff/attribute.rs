//! Which changes between two versions of a table made a decision come out differently
//! (`clef replay --against`: the `because:` lines, and `causes` in the JSON report).
//!
//! A decision is made by the first rule that holds. When the old version's decision was rule
//! `a` and the new one's is rule `b`, only `a` and `b` can explain the difference: a rule that
//! held in neither version, unchanged, holds in neither still, and one that holds in the new
//! version before `b` would have answered instead. So:
//! - `b` comes before `a` now (or `a` is gone): `b` is new, moved ahead of `a`, switched on, its
//!   condition changed, or a parameter its condition reads changed — `b`'s changes are the causes;
//! - `b` comes after `a`: `a` stopped holding — `a` was removed, switched off, its condition or a
//!   parameter it reads changed — and whatever changed about `b` may have helped;
//! - the same rule answered with another action: its action or fallback changed;
//! - no rule on either side: the default changed; an input the new version refuses: the schema.
//!
//! A flash decision is a cell: the same cell with another action (the cell's or the action's own
//! change), or another cell (a change of a dimension the input's bucket differs in).
//!
//! The causes are the lines of the diff, or short forms of them (`rule high_amount condition
//! changed`, `rule vip added before high_amount`, `param limit: 100 -> 50`). A changed decision
//! that nothing in the diff explains — decided by another version of the table when recorded,
//! say — has no causes.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::{action_keys, cells, Buckets, Change, TableDiff};
use crate::expr::ast::{Expr, ExprKind};
use crate::table::{Engine, Table};

/// What [`Attribution::causes`] needs of two versions and their diff, gathered once.
#[derive(Debug)]
pub struct Attribution {
    kind: Kind,
    /// the schema's changes (what makes the new version refuse an input)
    schema: Vec<String>,
    /// the default's change
    default: Option<String>,
}

#[derive(Debug)]
enum Kind {
    Rules(Rules),
    Flash(Flash),
}

/// The rules of both versions and what changed about each.
#[derive(Debug, Default)]
struct Rules {
    old_at: HashMap<String, usize>,
    new_at: HashMap<String, usize>,
    condition: HashSet<String>,
    action: HashSet<String>,
    fallback: HashSet<String>,
    /// the new `enabled` flag of rules whose flag changed
    enabled: HashMap<String, bool>,
    /// the parameters each rule's condition reads, in either version
    reads: HashMap<String, BTreeSet<String>>,
    /// the lines of the parameters whose value changed, by name
    params: HashMap<String, String>,
}

/// The cells of both versions and what changed about them.
#[derive(Debug, Default)]
struct Flash {
    /// cell name → its `(dimension, bucket)` pairs, in each version
    old_cells: HashMap<String, Buckets>,
    new_cells: HashMap<String, Buckets>,
    /// the new version's action key of each cell, by its sorted pairs
    new_action: HashMap<Buckets, String>,
    /// the lines of the cells whose action changed, by their sorted pairs
    cell: HashMap<Buckets, String>,
    /// the lines of the actions whose content changed, by key
    action: HashMap<String, String>,
    /// the lines of each dimension's changes (added, removed, field, buckets, ranges)
    dimension: HashMap<String, Vec<String>>,
}

impl Attribution {
    /// Gathers what attributing needs of `old` and `new` and their `diff` (as [`super::diff`]
    /// made it of them).
    pub fn new(old: &Table, new: &Table, diff: &TableDiff) -> Attribution {
        let mut schema = Vec::new();
        let mut default = None;
        let kind = match (&*old.engine, &*new.engine) {
            (Engine::Flash(a), Engine::Flash(b)) => {
                let mut f = Flash::default();
                for (name, mut pairs, _) in cells(a.spec()) {
                    pairs.sort();
                    f.old_cells.insert(name, pairs);
                }
                let keys = action_keys(b.spec());
                for (name, mut pairs, action) in cells(b.spec()) {
                    pairs.sort();
                    f.new_action.insert(pairs.clone(), keys.get(action).cloned().unwrap_or_default());
                    f.new_cells.insert(name, pairs);
                }
                Kind::Flash(f)
            }
            (a, b) => {
                let mut r = Rules::default();
                for (at, engine) in [(&mut r.old_at, a), (&mut r.new_at, b)] {
                    at.extend(engine.rules().iter().enumerate().map(|(i, rule)| (rule.id.clone(), i)));
                }
                for rule in a.rules().iter().chain(b.rules()) {
                    r.reads.entry(rule.id.clone()).or_default().extend(params_read(&rule.ast));
                }
                Kind::Rules(r)
            }
        };
        let mut kind = kind;
        for change in &diff.changes {
            let line = change.line();
            match (&mut kind, change) {
                (_, Change::Schema { .. }) => schema.push(line),
                (_, Change::Default { .. } | Change::FlashDefault { .. }) => default = Some(line),
                (Kind::Rules(r), Change::Param { name, key, .. }) if key == "value" => {
                    r.params.insert(name.clone(), line);
                }
                (Kind::Rules(r), Change::RuleCondition { rule, .. }) => {
                    r.condition.insert(rule.clone());
                }
                (Kind::Rules(r), Change::RuleAction { rule, .. }) => {
                    r.action.insert(rule.clone());
                }
                (Kind::Rules(r), Change::RuleFallback { rule, .. }) => {
                    r.fallback.insert(rule.clone());
                }
                (Kind::Rules(r), Change::RuleEnabled { rule, new, .. }) => {
                    r.enabled.insert(rule.clone(), *new);
                }
                (
                    Kind::Flash(f),
                    Change::DimensionAdded { dimension, .. }
                    | Change::DimensionRemoved { dimension, .. }
                    | Change::Dimension { dimension, .. },
                ) => f.dimension.entry(dimension.clone()).or_default().push(line),
                (Kind::Flash(f), Change::Action { action, .. }) => {
                    f.action.insert(action.clone(), line);
                }
                (Kind::Flash(f), Change::Cell { cell, .. }) => {
                    if let Some(pairs) = f.new_cells.get(cell).cloned() {
                        f.cell.insert(pairs, line);
                    }
                }
                _ => {}
            }
        }
        Attribution { kind, schema, default }
    }

    /// The changes that explain why a decision that was made by rule (or cell) `was` in the old
    /// version is made by `now` in the new one (`None`: no rule, the default answered), or is
    /// refused by the new version (`refused`); empty when nothing in the diff explains it.
    pub fn causes(&self, was: Option<&str>, now: Option<&str>, refused: bool) -> Vec<String> {
        let mut out = if refused {
            self.schema.clone()
        } else {
            match (&self.kind, was, now) {
                (_, None, None) => self.default.iter().cloned().collect(),
                (Kind::Rules(r), was, now) => r.causes(was, now),
                (Kind::Flash(f), was, now) => f.causes(was, now, self.default.as_deref()),
            }
        };
        let mut seen = HashSet::new();
        out.retain(|c| seen.insert(c.clone()));
        out
    }
}

impl Rules {
    fn causes(&self, was: Option<&str>, now: Option<&str>) -> Vec<String> {
        match (was, now) {
            (Some(a), Some(b)) if a == b => {
                let mut out = Vec::new();
                if self.action.contains(a) {
                    out.push(format!("rule {} action changed", n(a)));
                }
                if self.fallback.contains(a) {
                    out.push(format!("rule {} fallback changed", n(a)));
                }
                out
            }
            (Some(a), Some(b)) => {
                let b_first = match (self.new_at.get(a), self.new_at.get(b)) {
                    (Some(pa), Some(pb)) => pb < pa,
                    _ => false,
                };
                let mut out = if b_first { Vec::new() } else { self.stopped(a) };
                out.extend(self.started(b, Some(a)));
                out
            }
            (Some(a), None) => self.stopped(a),
            (None, Some(b)) => self.started(b, None),
            (None, None) => Vec::new(),
        }
    }

    /// Why rule `a` no longer answers.
    fn stopped(&self, a: &str) -> Vec<String> {
        if !self.new_at.contains_key(a) {
            return if self.old_at.contains_key(a) { vec![format!("rule {} removed", n(a))] } else { Vec::new() };
        }
        let mut out = Vec::new();
        if self.enabled.get(a) == Some(&false) {
            out.push(format!("rule {} disabled", n(a)));
        }
        if self.condition.contains(a) {
            out.push(format!("rule {} condition changed", n(a)));
        }
        out.extend(self.params_of(a));
        out
    }

    /// Why rule `b` answers now, where `a` (or, for `None`, no rule) answered.
    fn started(&self, b: &str, a: Option<&str>) -> Vec<String> {
        let new_b = self.new_at.get(b);
        let new_a = a.and_then(|a| self.new_at.get(a));
        let before_a = match (a, new_b, new_a) {
            (Some(a), Some(pb), Some(pa)) if pb < pa => format!(" before {}", n(a)),
            _ => String::new(),
        };
        let Some(old_b) = self.old_at.get(b) else {
            return if new_b.is_some() { vec![format!("rule {} added{before_a}", n(b))] } else { Vec::new() };
        };
        let mut out = Vec::new();
        if let (false, Some(old_a)) = (before_a.is_empty(), a.and_then(|a| self.old_at.get(a))) {
            if old_b > old_a {
                out.push(format!("rule {} moved{before_a}", n(b)));
            }
        }
        if self.enabled.get(b) == Some(&true) {
            out.push(format!("rule {} enabled", n(b)));
        }
        if self.condition.contains(b) {
            out.push(format!("rule {} condition changed", n(b)));
        }
        out.extend(self.params_of(b));
        out
    }

    /// The changed parameters rule `id`'s condition reads.
    fn params_of(&self, id: &str) -> Vec<String> {
        self.reads.get(id).into_iter().flatten().filter_map(|p| self.params.get(p).cloned()).collect()
    }
}

impl Flash {
    fn causes(&self, was: Option<&str>, now: Option<&str>, default: Option<&str>) -> Vec<String> {
        let old = was.and_then(|c| self.old_cells.get(c));
        let new = now.and_then(|c| self.new_cells.get(c));
        match (old, new) {
            (Some(a), Some(b)) if a == b => {
                let mut out: Vec<String> = self.cell.get(b).cloned().into_iter().collect();
                if let Some(line) = self.new_action.get(b).and_then(|k| self.action.get(k)) {
                    out.push(line.clone());
                }
                out
            }
            (old, new) => {
                // the dimensions the input's bucket differs in (all of them, without a cell on a side)
                let bucket = |pairs: Option<&Buckets>, d: &str| {
                    pairs.and_then(|p| p.iter().find(|(name, _)| name == d)).map(|(_, b)| b.clone())
                };
                let mut dims: Vec<&String> = self.dimension.keys().collect();
                dims.sort();
                let mut out: Vec<String> = dims
                    .into_iter()
                    .filter(|d| old.is_none() || new.is_none() || bucket(old, d) != bucket(new, d))
                    .flat_map(|d| self.dimension.get(d).cloned().unwrap_or_default())
                    .collect();
                if new.is_none() {
                    out.extend(default.map(str::to_string));
                }
                out
            }
        }
    }
}

/// A rule id as a cause names it.
fn n(id: &str) -> String {
    super::render::name(id)
}

/// The parameters an expression reads (`params.NAME`), walked without recursion.
fn params_read(e: &Expr) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut todo = vec![e];
    while let Some(e) = todo.pop() {
        if let ExprKind::Param(name) = &e.kind {
            out.insert(name.clone());
        }
        todo.extend(e.children());
    }
    out
}
