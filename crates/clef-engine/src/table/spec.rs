//! Format-neutral rule tables, and the one builder that turns them into an engine.
//!
//! Jev JSON tables and YAML rule sets are two front ends: each reads its file into a
//! [`TableSpec`] — rules with their condition text, action, fallback and where each sits in the
//! file — and reports the problems only its format can have (syntax, unknown keys, wrong
//! shapes). [`build`] does everything else once, for both: unique ids, actions that are
//! objects, placeholders, conditions parsed, checked and compiled together, and every problem
//! mapped back to the line and column of the file it came from.
// Load time: positions are those of the rules and parts of the same table, enumerated together.
#![allow(clippy::indexing_slicing)]

use std::collections::hash_map::Entry;

use rustc_hash::FxHashMap;

use super::rules::{BuildError, EngineParts, Rule, RuleEngine};
use super::template::placeholders;
use super::Limits;
use crate::diagnostic::{Diagnostic, SourceFile, MAX_LISTED};
use crate::expr::{parse_checked, Env, ExprError};

/// A place in the file: a byte offset and how many bytes the caret underlines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Place {
    /// byte offset in the file
    pub offset: usize,
    /// bytes underlined
    pub width: usize,
}

impl Place {
    /// A place `width` bytes wide at `offset`.
    pub fn new(offset: usize, width: usize) -> Place {
        Place { offset, width }
    }
}

/// One part of a rule's condition. A rule's condition is its parts joined with `&&`: a Jev
/// rule has one, a YAML rule one per `conditions:` entry and one for `when:`.
pub struct ConditionPart<'s> {
    /// the expression text
    pub text: String,
    /// where a byte of `text` is in the file (through the escapes of the string it was read from)
    pub locate: Box<dyn Fn(usize) -> usize + 's>,
    /// set when the front end wrote `text` itself (from `{field, operator, value}`): every
    /// problem in it is shown here
    pub written_at: Option<Place>,
}

impl<'s> ConditionPart<'s> {
    /// A part whose text stands in the file as is from `offset` (a plain YAML scalar).
    pub fn verbatim(text: String, offset: usize) -> ConditionPart<'s> {
        ConditionPart { text, locate: Box::new(move |i| offset + i), written_at: None }
    }

    /// A part the front end wrote itself from something at `at`.
    pub fn written(text: String, at: Place) -> ConditionPart<'s> {
        ConditionPart { text, locate: Box::new(move |_| at.offset), written_at: Some(at) }
    }
}

/// One rule as a front end read it.
pub struct RuleSpec<'s> {
    /// the rule's id
    pub id: String,
    /// where the id is written
    pub id_at: Place,
    /// the condition's parts (none: the rule always matches)
    pub condition: Vec<ConditionPart<'s>>,
    /// the action, any JSON value (the builder requires an object)
    pub action: serde_json::Value,
    /// where the action is written
    pub action_at: Place,
    /// the fallback and where it is written
    pub fallback: Option<(serde_json::Value, Place)>,
    /// whether the rule takes part in decisions
    pub enabled: bool,
    /// free text
    pub description: Option<String>,
}

/// A rule table as a front end read it.
pub struct TableSpec<'s> {
    /// the rules in order
    pub rules: Vec<RuleSpec<'s>>,
    /// the action when no rule matches
    pub default: Option<serde_json::Value>,
    /// parameters, schema and caps the conditions are checked against
    pub env: Env,
    /// whether `{{ path }}` in actions are placeholders (YAML rule sets); in Jev tables they are text
    pub templates: bool,
}

/// Builds the engine of `spec`, read from `source` (shown as `path`); problems go to `diags`
/// (after those the front end found), sorted by position. `Err` when there is any, with how
/// many more problems were found than `diags` lists (see [`Problems`]).
pub fn build(
    path: &str,
    source: &str,
    spec: TableSpec<'_>,
    limits: &Limits,
    diags: &mut Vec<Diagnostic>,
) -> Result<RuleEngine, usize> {
    let file = SourceFile::new(path, source);
    let at = |place: Place, message: String| file.at(place.offset, place.width, message);
    if spec.rules.len() > limits.max_rules {
        diags.push(Diagnostic::whole_file(
            path,
            format!(
                "the table has {} rules; at most {} are allowed (limits.max_rules)",
                spec.rules.len(),
                limits.max_rules
            ),
        ));
        return Err(0);
    }
    let mut ids: FxHashMap<&str, usize> = FxHashMap::default();
    let mut rules = Vec::with_capacity(spec.rules.len());
    let mut layouts = Vec::with_capacity(spec.rules.len());
    let mut problems = Problems { failing: !diags.is_empty(), diags, listed: 0, unlisted: 0 };
    for (i, r) in spec.rules.iter().enumerate() {
        let listing = problems.listing();
        let label = || format!("rule \"{}\"", r.id);
        match ids.entry(&r.id) {
            Entry::Occupied(first) => problems.add(listing, || {
                let message =
                    format!("{}: the id is already used by rule #{}; ids must be unique", label(), first.get() + 1);
                at(r.id_at, message)
            }),
            Entry::Vacant(slot) => {
                slot.insert(i);
            }
        }
        let mut shapes_ok = true;
        for (what, value, place) in std::iter::once(("action", &r.action, r.action_at))
            .chain(r.fallback.as_ref().map(|(f, p)| ("fallback", f, *p)))
        {
            if !value.is_object() {
                problems.add(listing, || {
                    at(place, format!("{}: \"{what}\" must be an object (key: value pairs)", label()))
                });
                shapes_ok = false;
            } else if let Err(problem) = crate::authz::check_action(value) {
                problems.add(listing, || at(place, format!("{}: in the {what}: {problem}", label())));
                shapes_ok = false;
            } else if spec.templates {
                if let Err(problem) = each_string(value, &mut |s| placeholders(s).map(drop)) {
                    problems.add(listing, || at(place, format!("{}: in the {what}: {problem}", label())));
                    shapes_ok = false;
                }
            }
        }
        let layout = Layout::of(&r.condition);
        let parsed = parse_checked(&layout.text, &spec.env, true);
        match parsed {
            // the rules of a table that does not load are not built
            Ok(ast) if shapes_ok && !problems.failing => {
                let fallback = r.fallback.as_ref().map(|(f, _)| f.clone());
                rules.push(Rule::new(
                    r.id.clone(),
                    r.description.clone(),
                    r.enabled,
                    layout.text.clone(),
                    ast,
                    r.action.clone(),
                    fallback,
                ));
            }
            Ok(_) => {}
            Err(e) => problems.add(listing, || layout.diagnostic(&file, &r.condition, &e, &label())),
        }
        layouts.push(layout);
    }
    if problems.failing {
        let unlisted = problems.unlisted;
        diags.sort_by_key(|d| (d.line, d.column));
        return Err(unlisted);
    }
    let parts = EngineParts {
        default_action: spec.default,
        params: spec.env.params,
        schema: spec.env.schema.as_ref(),
        regex_size_limit: limits.regex_size_limit,
        templates: spec.templates,
    };
    match RuleEngine::new(rules, parts) {
        Ok(engine) => Ok(engine),
        Err((i, problem)) => {
            let r = &spec.rules[i];
            let label = format!("rule \"{}\"", r.id);
            diags.push(match problem {
                BuildError::Condition(e) => layouts[i].diagnostic(&file, &r.condition, &e, &label),
                BuildError::Action(m) => at(r.action_at, format!("{label}: in the action: {m}")),
                BuildError::Fallback(m) => {
                    at(r.fallback.as_ref().map_or(r.action_at, |f| f.1), format!("{label}: in the fallback: {m}"))
                }
            });
            Err(0)
        }
    }
}

/// The problems [`build`] finds in the rules. Rules come in the order of the file, so once
/// [`MAX_LISTED`] problems of earlier rules are listed, every problem of a later rule stands
/// after them and would be cut from the load error anyway: it is counted, and neither its
/// message nor its source line is made (for 100,000 broken rules those cost more than the rest
/// of the load). The rules are still all checked: a table with any problem does not load.
struct Problems<'d> {
    diags: &'d mut Vec<Diagnostic>,
    /// whether the table has any problem (the front end's too): its rules are not built
    failing: bool,
    listed: usize,
    unlisted: usize,
}

impl Problems<'_> {
    /// Whether the problems of the rule about to be checked are listed (all of one rule are).
    fn listing(&self) -> bool {
        self.listed < MAX_LISTED
    }

    fn add(&mut self, listing: bool, diagnostic: impl FnOnce() -> Diagnostic) {
        self.failing = true;
        if listing {
            self.diags.push(diagnostic());
            self.listed += 1;
        } else {
            self.unlisted += 1;
        }
    }
}

/// Calls `f` on every string inside `v`, stopping at the first error.
fn each_string<E>(v: &serde_json::Value, f: &mut dyn FnMut(&str) -> Result<(), E>) -> Result<(), E> {
    match v {
        serde_json::Value::String(s) => f(s),
        serde_json::Value::Array(items) => items.iter().try_for_each(|i| each_string(i, f)),
        serde_json::Value::Object(members) => members.values().try_for_each(|i| each_string(i, f)),
        _ => Ok(()),
    }
}

/// A rule's condition text and where each part starts in it.
struct Layout {
    text: String,
    /// (start in `text`, length) of each part
    parts: Vec<(usize, usize)>,
}

impl Layout {
    fn of(parts: &[ConditionPart<'_>]) -> Layout {
        match parts {
            [] => Layout { text: "true".into(), parts: Vec::new() },
            [one] => Layout { text: one.text.clone(), parts: vec![(0, one.text.len())] },
            many => {
                let mut text = String::new();
                let mut spans = Vec::with_capacity(many.len());
                for (i, p) in many.iter().enumerate() {
                    if i > 0 {
                        text.push_str(" && ");
                    }
                    text.push('(');
                    spans.push((text.len(), p.text.len()));
                    text.push_str(&p.text);
                    text.push(')');
                }
                Layout { text, parts: spans }
            }
        }
    }

    /// A condition error at its place in the file: inside the part it falls in.
    fn diagnostic(&self, file: &SourceFile<'_>, parts: &[ConditionPart<'_>], e: &ExprError, label: &str) -> Diagnostic {
        let message = format!("{label}: {}", e.message);
        let found = self.parts.iter().position(|&(start, len)| e.span.start >= start && e.span.start <= start + len);
        let Some(k) = found else {
            // an error about the whole condition: at its first part
            let offset = parts.first().map_or(0, |p| (p.locate)(0));
            return file.at(offset, 1, message);
        };
        let part = &parts[k];
        if let Some(place) = part.written_at {
            return file.at(place.offset, place.width, message);
        }
        let (start, len) = self.parts[k];
        let local_start = e.span.start - start;
        let local_end = e.span.end.clamp(e.span.start, start + len) - start;
        let from = (part.locate)(local_start);
        let to = (part.locate)(local_end);
        file.at(from, to.saturating_sub(from).max(1), message)
    }
}
