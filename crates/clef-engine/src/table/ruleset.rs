//! Clef rule sets (SPEC §4.2): YAML files of rules, each with `conditions` (a list of
//! `{field, operator, value}`), a `when:` expression, or both; an `action` whose strings may hold
//! `{{ path }}` placeholders, and a `fallback` for when one cannot be filled.
//!
//! This is a front end: it reads the file ([`crate::yaml`] keeps where every node is written)
//! into a [`TableSpec`] and reports only what its format can get wrong — YAML syntax, misspelt
//! keys, unknown operators, values of the wrong type for their operator, fields that are not
//! paths. [`build`] does the rest, as for Jev tables: unique ids, actions that are objects,
//! placeholders, conditions parsed, checked and compiled into the same engine.
//!
//! Each `conditions` entry becomes the expression it stands for —
//! `{field: metrics.rate, operator: gt, value: 0.05}` is `metrics.rate != nil && metrics.rate >
//! 0.05`: the operators that cannot take nil (`gt gte lt lte contains not_contains starts_with
//! ends_with matches`) are guarded, so that an absent or null field makes the entry false
//! without a warning (SPEC §4.2, revision 4), and a value of the wrong type still warns — so a
//! rule set decides exactly as the equivalent Jev table does, at the same cost, through the one
//! evaluator, and the rule index reads the guard as it reads any `f != nil`. The pieces of that
//! text remember where they came from (the field, the operator, the value), so a problem the
//! compiler finds in it (an unknown field under a schema, a bad regex) is shown at the piece of
//! the file it is about. A `when:` is handed over as written, with a map from each byte of the
//! decoded scalar to its byte in the file (through quotes, escapes, folding and block
//! indentation: see [`yaml::scalar_map`]).

use std::ops::Range;

use super::rules::RuleEngine;
use super::spec::{build, ConditionPart, Place, RuleSpec, TableSpec};
use super::template::placeholders;
use super::{Limits, LoadError, TableMeta};
use crate::diagnostic::{quote, Diagnostic, SourceFile};
use crate::expr::check::Schema;
use crate::expr::lexer::KEYWORDS;
use crate::expr::{Const, Env};
use crate::suggest::did_you_mean;
use crate::yaml::{self, Kind, Node, Value};
use granit_parser::ScalarStyle;

/// The keys a rule set may have at its top level.
pub const TOP_KEYS: &[&str] = &["version", "name", "description", "schema", "params", "default", "rules"];
/// The keys a rule may have.
pub const RULE_KEYS: &[&str] = &["id", "description", "conditions", "when", "action", "fallback", "enabled"];
/// The keys of one entry of `conditions`.
pub const CONDITION_KEYS: &[&str] = &["field", "operator", "value"];
/// The operators of `conditions`, in the order the docs list them.
pub const OPERATORS: &[&str] = &[
    "eq",
    "ne",
    "gt",
    "gte",
    "lt",
    "lte",
    "in",
    "not_in",
    "contains",
    "not_contains",
    "starts_with",
    "ends_with",
    "matches",
    "exists",
    "not_exists",
];

/// How deep lists and mappings may nest below the top level of a rule set: a rule's action sits
/// three levels down, and JSON inputs may nest 128 levels.
pub const MAX_DEPTH: usize = 128;

const YAML: yaml::Options =
    yaml::Options { max_depth: MAX_DEPTH, depth_hint: "a rule set needs a few", what: "a rule set" };

/// What an operator's `value` must be.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Need {
    /// a scalar or a list (`eq`, `ne`)
    Any,
    /// a number or a string (`gt` …)
    Ordered,
    /// a string (`contains` …, `matches`)
    Text,
    /// a list (`in`, `not_in`)
    List,
    /// no value (`exists`, `not_exists`)
    Nothing,
}

impl Need {
    fn of(operator: &str) -> Need {
        match operator {
            "eq" | "ne" => Need::Any,
            "gt" | "gte" | "lt" | "lte" => Need::Ordered,
            "in" | "not_in" => Need::List,
            "exists" | "not_exists" => Need::Nothing,
            _ => Need::Text,
        }
    }

    /// Whether the operator cannot take nil (`gt`, `contains`, `matches` …), so that an entry
    /// on an absent or null field is false, not an error (SPEC §4.2, revision 4): the entry
    /// stands for `field != nil && …`. `eq ne in not_in` take nil as §3 says; `exists` asks.
    fn is_nil_guarded(self) -> bool {
        matches!(self, Need::Ordered | Need::Text)
    }

    fn says(self) -> &'static str {
        match self {
            Need::Any => "a number, a string, true, false, null or a list",
            Need::Ordered => "a number or a string",
            Need::Text => "a string",
            Need::List => "a list",
            Need::Nothing => "no value",
        }
    }
}

/// Operators people write from other languages, with the one to write instead.
const OPERATOR_ALIASES: &[(&str, &str)] = &[
    ("==", "eq"),
    ("=", "eq"),
    ("equals", "eq"),
    ("!=", "ne"),
    ("not_equals", "ne"),
    (">", "gt"),
    (">=", "gte"),
    ("<", "lt"),
    ("<=", "lte"),
    ("not in", "not_in"),
    ("nin", "not_in"),
    ("startsWith", "starts_with"),
    ("endsWith", "ends_with"),
    ("~", "matches"),
    ("regex", "matches"),
];

/// Reads a rule set's source into a compiled engine.
pub fn load(path: &str, source: &str, limits: &Limits) -> Result<(RuleEngine, TableMeta), LoadError> {
    read(path, source, limits).map_err(|(diags, unlisted)| LoadError::listing(diags, unlisted))
}

/// [`load`], with the problems and how many more were found than they list.
fn read(path: &str, source: &str, limits: &Limits) -> Result<(RuleEngine, TableMeta), (Vec<Diagnostic>, usize)> {
    let mut r = Reader { source, file: SourceFile::new(path, source), diags: Vec::new() };
    let document = match yaml::parse(source, &YAML) {
        Ok(d) => d,
        Err(p) => return Err((vec![Diagnostic::at_offset(path, source, p.at, p.width, p.message)], 0)),
    };
    for p in &document.problems {
        r.diags.push(r.file.at(p.at, p.width, p.message.clone()));
    }
    let root = match document.root {
        Some(root) if root.entries().is_some() => root,
        Some(root) if !root.is_null() => {
            r.at(
                &root.span,
                format!("a rule set is a mapping with `rules:` (a list of rules), not {}", root.kind_name()),
            );
            return Err((r.diags, 0));
        }
        _ => {
            r.diags.push(Diagnostic::whole_file(
                path,
                "the rule set is empty; write `rules:` and a list of rules under it".into(),
            ));
            return Err((r.diags, 0));
        }
    };
    r.keys(&root, TOP_KEYS, "", "a rule set");
    let mut meta = TableMeta::default();
    let mut env = Env { max_depth: limits.max_expr_depth, regex_size_limit: limits.regex_size_limit, ..Env::default() };
    meta.name = root.get("name").and_then(|v| r.text(v, "\"name\""));
    meta.description = root.get("description").and_then(|v| r.text(v, "\"description\""));
    if let Some(v) = root.get("version").filter(|v| v.scalar().is_none()) {
        r.at(&v.span, "\"version\" must be a string like \"1.0\"".into());
    }
    if let Some(v) = root.get("schema") {
        env.schema = r.schema(v);
    }
    if let Some(v) = root.get("params") {
        meta.params = r.params(v, &mut env);
    }
    let default = root.get("default").and_then(|v| r.default_action(v));
    let rule_nodes: &[Node<'_>] = match root.get("rules").map(|v| (v, &v.kind)) {
        Some((_, Kind::Seq(items))) => items,
        Some((v, _)) if v.is_null() => &[],
        Some((v, _)) => {
            r.at(&v.span, format!("\"rules\" must be a list of rules (`- id: …` lines), not {}", v.kind_name()));
            &[]
        }
        None => {
            r.at(
                &(0..0),
                "the rule set has no \"rules\"; add `rules:` with a list of rules like `- {id: all, when: 'true', \
                 action: {type: allow}}`"
                    .into(),
            );
            &[]
        }
    };
    if rule_nodes.len() > limits.max_rules {
        r.diags.push(Diagnostic::whole_file(
            path,
            format!(
                "the table has {} rules; at most {} are allowed (limits.max_rules)",
                rule_nodes.len(),
                limits.max_rules
            ),
        ));
        return Err((r.diags, 0));
    }
    let mut rules = Vec::with_capacity(rule_nodes.len());
    for (i, node) in rule_nodes.iter().enumerate() {
        if let Some(rule) = r.rule(i, node, &env) {
            rules.push(rule);
        }
    }
    // the tree is read: free it before the conditions are compiled
    drop(root);
    let spec = TableSpec { rules, default, env, templates: true };
    let mut diags = std::mem::take(&mut r.diags);
    match build(path, source, spec, limits, &mut diags) {
        Ok(engine) => Ok((engine, meta)),
        Err(unlisted) => {
            diags.sort_by_key(|d| (d.line, d.column));
            Err((diags, unlisted))
        }
    }
}

/// Whether YAML `source` is a rule set rather than a configuration: its top level is a mapping
/// with a `rules` key (read up to the first syntax error, so a broken rule set is still one).
pub fn is_rule_set(source: &str) -> bool {
    yaml::has_top_level_key(source, "rules")
}

/// Reads the nodes of one file and collects diagnostics positioned at them.
struct Reader<'s> {
    source: &'s str,
    /// positions diagnostics in `source`
    file: SourceFile<'s>,
    diags: Vec<Diagnostic>,
}

impl<'s> Reader<'s> {
    fn at(&mut self, span: &Range<usize>, message: String) {
        self.diags.push(self.file.at(span.start, span.len(), message));
    }

    /// Reports the keys of `node` (a mapping) that are not `known`, with a "did you mean"; returns
    /// the keys suggested (so that "there is no X" is not said of a misspelt X).
    fn keys(&mut self, node: &Node<'_>, known: &[&'static str], label: &str, what: &str) -> Vec<&'static str> {
        let mut suggested = Vec::new();
        for (k, _) in node.entries().unwrap_or_default() {
            let Some(key) = k.key_text() else {
                self.at(&k.span, format!("{label}a key must be a name, not {}", k.kind_name()));
                continue;
            };
            if known.contains(&key) {
                continue;
            }
            let hint = match (key, did_you_mean(key, known.iter().copied())) {
                // a Jev rule's key: which of the two YAML ones is meant depends on what follows
                ("condition", _) if known.contains(&"when") => {
                    "; write \"when\" for an expression, \"conditions\" for a list of {field, operator, value}"
                        .to_string()
                }
                (_, Some(s)) => {
                    suggested.push(s);
                    format!("; did you mean \"{s}\"?")
                }
                ("tests", None) if what == "a rule set" => {
                    "; the tests of a rule set go in a file NAME.tests.json beside it".to_string()
                }
                _ => format!("; {what} may have {}", known.join(", ")),
            };
            self.at(&k.span, format!("{label}unknown key \"{}\"{hint}", quote(key)));
        }
        suggested
    }

    /// A scalar's text (not null, not a collection).
    fn text(&mut self, node: &Node<'_>, what: &str) -> Option<String> {
        match node.scalar() {
            Some(s) if !node.is_null() => Some(s.text.to_string()),
            _ => {
                self.at(&node.span, format!("{what} must be a string, not {}", node.kind_name()));
                None
            }
        }
    }

    fn json(&mut self, node: &Node<'_>) -> Option<serde_json::Value> {
        match node.to_json() {
            Ok(v) => Some(v),
            Err((span, message)) => {
                self.at(&span, message);
                None
            }
        }
    }

    fn schema(&mut self, node: &Node<'_>) -> Option<Schema> {
        let Some(entries) = node.entries() else {
            self.at(&node.span, "\"schema\" must be a mapping of field → type, like `user_tier: string`".into());
            return None;
        };
        let mut schema = Schema::default();
        let mut keys = Vec::new();
        for (k, t) in entries {
            let Some(field) = k.key_text() else { continue };
            let name = t.scalar().filter(|_| !t.is_null()).map(|s| s.text.to_string()).unwrap_or_default();
            if let Err(message) = schema.declare(field, &name) {
                self.at(&t.span, message.to_string());
            }
            keys.push((field.to_string(), k.span.clone()));
        }
        for (path, message) in schema.path_problems() {
            if let Some((_, span)) = keys.iter().find(|(k, _)| k == path) {
                let span = span.clone();
                self.at(&span, message);
            }
        }
        Some(schema)
    }

    /// Reads `params` into `env` (as Jev tables do) and returns them as declared. A declaration
    /// with a problem is reported here once: its name goes to `env.broken_params`.
    fn params(&mut self, node: &Node<'_>, env: &mut Env) -> Option<serde_json::Value> {
        let Some(entries) = node.entries() else {
            self.at(&node.span, "\"params\" must be a mapping of name → {value: …}".into());
            return None;
        };
        for (k, decl) in entries {
            let Some(name) = k.key_text().map(str::to_string) else { continue };
            if decl.entries().is_none() {
                self.at(&decl.span, format!("parameter \"{name}\" must be a mapping such as {{value: 0.05}}"));
                env.broken_params.insert(name);
                continue;
            }
            let mut misspelt_value = false;
            for (pk, _) in decl.entries().unwrap_or_default() {
                let Some(key) = pk.key_text() else { continue };
                if !super::jev::PARAM_KEYS.contains(&key) {
                    let suggestion = did_you_mean(key, super::jev::PARAM_KEYS.iter().copied());
                    misspelt_value |= suggestion == Some("value");
                    let hint = suggestion.map(|s| format!("; did you mean \"{s}\"?")).unwrap_or_default();
                    self.at(&pk.span, format!("unknown key \"{}\" in parameter \"{name}\"{hint}", quote(key)));
                }
            }
            if let Some(Err(problem)) = decl.to_json().ok().map(|d| super::params::Tunable::read(&name, &d)) {
                self.at(&decl.span, problem.to_string());
                env.broken_params.insert(name);
                continue;
            }
            match decl.get("value").map(|v| self.json(v)) {
                Some(Some(v)) => {
                    env.params.insert(name, Const::from_json(&v));
                }
                Some(None) => {
                    env.broken_params.insert(name);
                }
                None => {
                    if !misspelt_value {
                        self.at(&decl.span, format!("parameter \"{name}\" has no \"value\""));
                    }
                    env.broken_params.insert(name);
                }
            }
        }
        self.json(node)
    }

    fn default_action(&mut self, node: &Node<'_>) -> Option<serde_json::Value> {
        if node.is_null() {
            return None;
        }
        if node.entries().is_none() {
            self.at(&node.span, format!("\"default\" must be an action (a mapping) or null, not {}", node.kind_name()));
            return None;
        }
        let value = self.json(node)?;
        let mut found = None;
        each_string(&value, &mut |s| {
            if let Ok(list) = placeholders(s) {
                found = found.take().or(list.first().map(|(_, p)| p.to_string()));
            }
        });
        if let Some(p) = found {
            self.at(
                &node.span,
                format!(
                    "\"default\" holds the placeholder `{{{{ {p} }}}}`, which is never filled in: the default answers \
                     when no rule matched and is returned as written; move it into a rule's action \
                     (`when: 'true'` matches everything)"
                ),
            );
            return None;
        }
        if let Err(problem) = crate::authz::check_action(&value) {
            self.at(&node.span, format!("in the default: {problem}"));
            return None;
        }
        Some(value)
    }

    /// Reads one rule; problems of its shape are reported here, the rest by the builder.
    fn rule(&mut self, i: usize, node: &Node<'_>, env: &Env) -> Option<RuleSpec<'static>> {
        if node.entries().is_none() {
            self.at(
                &node.span,
                format!("rule #{} must be a mapping with \"id\", \"when\" or \"conditions\", and \"action\"", i + 1),
            );
            return None;
        }
        let id = match node.entry("id") {
            Some((_, v)) => match v.scalar() {
                Some(s) if !v.is_null() && !s.text.trim().is_empty() => {
                    Some((s.text.to_string(), place(&v.span, self.source)))
                }
                _ => {
                    self.at(&v.span, format!("rule #{}: \"id\" must be a non-empty string", i + 1));
                    None
                }
            },
            None => {
                self.at(&node.span, format!("rule #{} has no \"id\"", i + 1));
                None
            }
        };
        let label = id.as_ref().map(|(s, _)| format!("rule \"{s}\"")).unwrap_or_else(|| format!("rule #{}", i + 1));
        let misspelt = self.keys(node, RULE_KEYS, &format!("{label}: "), "a rule");
        let enabled = match node.get("enabled") {
            None => true,
            Some(v) => match v.value() {
                Some(Value::Bool(b)) => b,
                _ => {
                    self.at(&v.span, format!("{label}: \"enabled\" must be true or false"));
                    true
                }
            },
        };
        let description = node.get("description").and_then(|v| self.text(v, &format!("{label}: \"description\"")));
        // A rule with a problem here still goes to the builder, with what could be read (an
        // empty action for a missing one): the builder then reports what else is wrong with it
        // (its id used twice, an error in another condition), and nothing is built.
        let action = match node.get("action") {
            Some(v) => (self.json(v).unwrap_or_default(), template_place(v, self.source)),
            None => {
                if !misspelt.contains(&"action") {
                    self.at(&node.span, format!("{label} has no \"action\""));
                }
                (serde_json::Value::Object(Default::default()), place(&node.span, self.source))
            }
        };
        let fallback = match node.get("fallback") {
            Some(v) if !v.is_null() => self.json(v).map(|f| (f, template_place(v, self.source))),
            _ => None,
        };
        let mut condition = Vec::new();
        match node.get("conditions") {
            Some(Node { kind: Kind::Seq(items), .. }) => {
                for (n, item) in items.iter().enumerate() {
                    if let Some(part) = self.condition(&format!("{label}: condition #{}: ", n + 1), item, env) {
                        condition.push(part);
                    }
                }
            }
            Some(v) if v.is_null() => {}
            Some(v) => {
                self.at(
                    &v.span,
                    format!(
                        "{label}: \"conditions\" must be a list of {{field, operator, value}} (one `- ` line each), \
                         not {}",
                        v.kind_name()
                    ),
                );
            }
            None => {}
        }
        if let Some(part) = node.entry("when").and_then(|(k, v)| self.when(&label, k, v, env)) {
            condition.push(part);
        }
        let (id, id_at) = id?;
        let (action, action_at) = action;
        Some(RuleSpec { id, id_at, condition, action, action_at, fallback, enabled, description })
    }

    /// A `when:` expression, located through its scalar's quoting.
    fn when(&mut self, label: &str, key: &Node<'_>, node: &Node<'_>, env: &Env) -> Option<ConditionPart<'static>> {
        let text = match node.scalar() {
            Some(s) if s.style == ScalarStyle::Plain && !node.is_null() => {
                if let Some((at, why)) = unquoted_when_mistake(self.source, &node.span, &s.text, env.max_depth) {
                    self.at(&(at..at + 1), format!("{label}: {why}"));
                    return None;
                }
                s.text.to_string()
            }
            Some(s) if !node.is_null() && !s.text.trim().is_empty() => s.text.to_string(),
            Some(_) => {
                self.at(&key.span, format!("{label}: \"when\" is empty; write an expression, or remove the key"));
                return None;
            }
            None => {
                self.at(
                    &node.span,
                    format!("{label}: \"when\" must be an expression (a string), not {}", node.kind_name()),
                );
                return None;
            }
        };
        let start = node.span.start;
        let locate: Box<dyn Fn(usize) -> usize> = match yaml::scalar_map(self.source, node) {
            Some(map) => Box::new(move |i| map.get(i).or(map.last()).copied().unwrap_or(start)),
            // a scalar whose folding is not reproduced exactly: every problem at its start
            None => Box::new(move |_| start),
        };
        Some(ConditionPart { text, locate, written_at: None })
    }

    /// One `{field, operator, value}` as the expression it stands for.
    fn condition(&mut self, label: &str, node: &Node<'_>, env: &Env) -> Option<ConditionPart<'static>> {
        if node.entries().is_none() {
            self.at(
                &node.span,
                format!(
                    "{label}must be a mapping like {{field: user.tier, operator: eq, value: gold}}, not {}",
                    node.kind_name()
                ),
            );
            return None;
        }
        let before = self.diags.len();
        let misspelt = self.keys(node, CONDITION_KEYS, label, "a condition");
        let field = match node.get("field") {
            Some(v) => match v.scalar().filter(|_| !v.is_null()) {
                Some(s) => match field_expr(&s.text) {
                    Ok(expr) => {
                        // a plain path of names is written in the file as it is in the expression
                        let exact = expr == *s.text && self.source.get(v.span.clone()) == Some(&*s.text);
                        Some((expr, v.span.clone(), exact))
                    }
                    Err(why) => {
                        self.at(&v.span, format!("{label}\"field\" {why}"));
                        None
                    }
                },
                None => {
                    self.at(&v.span, format!("{label}\"field\" must be a dotted path like headers.user-agent"));
                    None
                }
            },
            None => {
                if !misspelt.contains(&"field") {
                    self.at(&node.span, format!("{label}there is no \"field\""));
                }
                None
            }
        };
        let operator = match node.entry("operator") {
            Some((_, v)) => match v.value() {
                Some(Value::Str(op)) if OPERATORS.contains(&op) => Some((op.to_string(), v.span.clone())),
                _ => {
                    let written = v.scalar().map(|s| s.text.to_string()).unwrap_or_default();
                    let hint = match OPERATOR_ALIASES.iter().find(|(alias, _)| *alias == written) {
                        Some((_, op)) => format!("; write \"{op}\""),
                        None => match did_you_mean(&written, OPERATORS.iter().copied()) {
                            Some(s) => format!("; did you mean \"{s}\"?"),
                            None => format!("; the operators are {}", OPERATORS.join(", ")),
                        },
                    };
                    self.at(&v.span, format!("{label}unknown operator \"{}\"{hint}", quote(&written)));
                    None
                }
            },
            None => {
                if !misspelt.contains(&"operator") {
                    self.at(&node.span, format!("{label}there is no \"operator\" ({})", OPERATORS.join(", ")));
                }
                None
            }
        };
        let value = node.entry("value");
        let operator = operator?;
        let need = Need::of(&operator.0);
        let value = match (need, value) {
            (Need::Nothing, None) => None,
            (Need::Nothing, Some((k, _))) => {
                self.at(&k.span, format!("{label}\"{}\" takes no \"value\"; remove it", operator.0));
                return None;
            }
            (_, None) => {
                if !misspelt.contains(&"value") {
                    self.at(&node.span, format!("{label}\"{}\" needs a \"value\": {}", operator.0, need.says()));
                }
                return None;
            }
            (_, Some((_, v))) => Some(self.value(label, &operator.0, need, v, env)?),
        };
        let (field, field_span, field_exact) = field?;
        if self.diags.len() > before {
            return None;
        }
        let mut w = Written::default();
        let op = |w: &mut Written, s: &str| w.push_at(s, &operator.1, false);
        if need.is_nil_guarded() {
            // revision 4: an absent or null field makes the entry false, without the error the
            // operator would give nil
            w.push_at(&field, &field_span, field_exact);
            op(&mut w, " != nil && ");
        }
        match operator.0.as_str() {
            "not_contains" => {
                op(&mut w, "!(");
                w.push_at(&field, &field_span, field_exact);
                op(&mut w, " contains ");
            }
            "exists" | "not_exists" => {
                w.push_at(&field, &field_span, field_exact);
                op(&mut w, if operator.0 == "exists" { " != nil" } else { " == nil" });
            }
            name => {
                w.push_at(&field, &field_span, field_exact);
                let symbol = match name {
                    "eq" => " == ",
                    "ne" => " != ",
                    "gt" => " > ",
                    "gte" => " >= ",
                    "lt" => " < ",
                    "lte" => " <= ",
                    "in" => " in ",
                    "not_in" => " not in ",
                    "contains" => " contains ",
                    "starts_with" => " startsWith ",
                    "ends_with" => " endsWith ",
                    _ => " matches ",
                };
                op(&mut w, symbol);
            }
        }
        if let Some((literal, span, exact)) = &value {
            w.push_at(literal, span, *exact);
        }
        if operator.0 == "not_contains" {
            op(&mut w, ")");
        }
        Some(w.part())
    }

    /// The value of a condition as an expression literal, checked against what its operator needs.
    fn value(
        &mut self,
        label: &str,
        operator: &str,
        need: Need,
        node: &Node<'_>,
        env: &Env,
    ) -> Option<(String, Range<usize>, bool)> {
        // `{param: NAME}` reads a parameter
        if let Some(entries) = node.entries() {
            let param = match entries {
                [(k, v)] if k.key_text() == Some("param") => v.scalar().filter(|_| !v.is_null()).map(|s| &s.text),
                _ => None,
            };
            let Some(name) = param else {
                self.at(
                    &node.span,
                    format!(
                        "{label}\"value\" of \"{operator}\" must be {}; a mapping is only `{{param: NAME}}`, to use a \
                         parameter",
                        need.says()
                    ),
                );
                return None;
            };
            if !name.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '$') || name.is_empty() {
                self.at(&node.span, format!("{label}`{}` is not a parameter name", quote(name)));
                return None;
            }
            if let Some(c) = env.params.get(&**name) {
                if !const_fits(c, need) {
                    self.at(
                        &node.span,
                        format!(
                            "{label}\"{operator}\" needs {}, but parameter \"{name}\" is {}",
                            need.says(),
                            const_kind(c)
                        ),
                    );
                    return None;
                }
            }
            // an undeclared parameter is the builder's error ("unknown parameter"), shown here
            return Some((format!("params.{name}"), node.span.clone(), false));
        }
        let fits = match (&node.kind, need) {
            (Kind::Seq(_), Need::Any | Need::List) => true,
            (Kind::Seq(_), _) | (_, Need::List) => false,
            (_, Need::Any) => true,
            (_, Need::Ordered) => {
                matches!(node.value(), Some(Value::Int(_) | Value::UInt(_) | Value::Float(_) | Value::Str(_)))
            }
            (_, Need::Text) => matches!(node.value(), Some(Value::Str(_))),
            (_, Need::Nothing) => false,
        };
        if !fits {
            let example = match need {
                Need::List => format!(" (like `[{}]`)", node.scalar().map(|s| s.text.to_string()).unwrap_or_default()),
                Need::Text if node.scalar().is_some() => {
                    format!(" (quote it: '{}')", node.scalar().map(|s| s.text.to_string()).unwrap_or_default())
                }
                _ => String::new(),
            };
            self.at(
                &node.span,
                format!(
                    "{label}\"value\" of \"{operator}\" must be {}, not {}{example}",
                    need.says(),
                    node.kind_name()
                ),
            );
            return None;
        }
        match literal(node) {
            Ok(text) => {
                let exact = node.scalar().is_some() && self.source.get(node.span.clone()) == Some(text.as_str());
                Some((text, node.span.clone(), exact))
            }
            Err((span, why)) => {
                self.at(&span, format!("{label}{why}"));
                None
            }
        }
    }
}

/// What YAML did to an unquoted `when:` (the plain scalar `text` at `span`) that makes it an
/// expression that does not parse, and where the mistake is: a ` #` that began a comment in
/// the middle of it, or a closing quote at its end with none opening it. `None` when the
/// expression parses, or fails for another reason (which the builder reports).
fn unquoted_when_mistake(source: &str, span: &Range<usize>, text: &str, max_depth: usize) -> Option<(usize, String)> {
    let rest_of_line = source.get(span.end..)?.split('\n').next().unwrap_or_default();
    let comment = rest_of_line.find('#').filter(|&h| h > 0 && rest_of_line[..h].trim().is_empty());
    let closing = text.chars().last().filter(|&c| matches!(c, '\'' | '"') && !text.starts_with(c));
    if comment.is_none() && closing.is_none() {
        return None;
    }
    // only what does not parse is a mistake: `x > 1 # why` is a comment as meant
    let failure = crate::expr::parser::parse(text, max_depth).err()?;
    if let Some(hash) = comment {
        return Some((
            span.end + hash,
            format!(
                "` #` starts a YAML comment, so this `when:` ends before it, as `{}`; put the whole expression in \
                 quotes: when: '…'",
                quote(text)
            ),
        ));
    }
    let last = closing?;
    (failure.span.start + last.len_utf8() == text.len()).then(|| {
        (
            span.start,
            format!(
                "this `when:` ends with a `{last}` but does not start with one: the opening `{last}` is probably \
                 missing here, at the start of the expression"
            ),
        )
    })
}

/// A place one line wide at most (what a caret underlines for a whole value).
fn place(span: &Range<usize>, source: &str) -> Place {
    let text = source.get(span.clone()).unwrap_or("");
    Place::new(span.start, text.find('\n').unwrap_or(text.len()).clamp(1, 40))
}

/// Where the builder shows a problem of an action or fallback: at the first string whose
/// placeholders are wrong, when one is, else at the whole value.
fn template_place(node: &Node<'_>, source: &str) -> Place {
    fn bad<'a, 's>(node: &'a Node<'s>) -> Option<&'a Node<'s>> {
        match &node.kind {
            Kind::Scalar(s) => matches!(s.value(), Value::Str(t) if placeholders(t).is_err()).then_some(node),
            Kind::Seq(items) => items.iter().find_map(bad),
            Kind::Map(entries) => entries.iter().find_map(|(_, v)| bad(v)),
        }
    }
    place(&bad(node).unwrap_or(node).span, source)
}

/// Calls `f` on every string inside `v`.
fn each_string(v: &serde_json::Value, f: &mut dyn FnMut(&str)) {
    match v {
        serde_json::Value::String(s) => f(s),
        serde_json::Value::Array(items) => items.iter().for_each(|i| each_string(i, f)),
        serde_json::Value::Object(members) => members.values().for_each(|i| each_string(i, f)),
        _ => {}
    }
}

fn const_fits(c: &Const, need: Need) -> bool {
    match need {
        Need::Any => !matches!(c, Const::Object(_)),
        Need::Ordered => matches!(c, Const::Int(_) | Const::Float(_) | Const::Str(_)),
        Need::Text => matches!(c, Const::Str(_)),
        Need::List => matches!(c, Const::Array(_)),
        Need::Nothing => false,
    }
}

fn const_kind(c: &Const) -> &'static str {
    match c {
        Const::Nil => "null",
        Const::Bool(_) => "true or false",
        Const::Int(_) | Const::Float(_) => "a number",
        Const::Str(_) => "a string",
        Const::Array(_) => "a list",
        Const::Object(_) => "a mapping",
    }
}

/// Why a condition's `field` is not a dotted path of the input; the loader writes the message
/// after `"field"`.
#[derive(Debug, PartialEq, Eq)]
enum FieldPathError {
    /// two dots with nothing between them (or a dot at an end)
    EmptyName {
        /// the path as written
        path: String,
    },
    /// the first segment is not a name of letters, digits and `_`
    FirstNotAName {
        /// the path as written
        path: String,
    },
    /// the first segment is a word of the condition language (`nil`, `in`, …)
    Keyword {
        /// the path as written
        path: String,
        /// the word
        word: String,
    },
}

impl std::fmt::Display for FieldPathError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FieldPathError::EmptyName { path } => {
                write!(f, "`{}` has an empty name between dots; write a path like headers.user-agent", quote(path))
            }
            FieldPathError::FirstNotAName { path } => write!(
                f,
                "`{}` must start with a name (letters, digits and `_`, not starting with a digit): the top-level \
                 field of the input",
                quote(path)
            ),
            FieldPathError::Keyword { path, word } => {
                write!(f, "`{}` starts with `{word}`, a word of the condition language", quote(path))
            }
        }
    }
}

impl std::error::Error for FieldPathError {}

/// A dotted field path as an expression: `headers.user-agent` → `headers["user-agent"]`.
fn field_expr(path: &str) -> Result<String, FieldPathError> {
    let mut segments = path.split('.');
    let first = segments.next().unwrap_or("");
    let is_name = |s: &str| {
        let mut chars = s.chars();
        chars.next().is_some_and(|c| c.is_alphabetic() || c == '_' || c == '$')
            && chars.all(|c| c.is_alphanumeric() || c == '_' || c == '$')
    };
    if path.split('.').any(str::is_empty) {
        return Err(FieldPathError::EmptyName { path: path.to_string() });
    }
    if !is_name(first) {
        return Err(FieldPathError::FirstNotAName { path: path.to_string() });
    }
    if KEYWORDS.iter().any(|(k, _)| *k == first) {
        return Err(FieldPathError::Keyword { path: path.to_string(), word: first.to_string() });
    }
    let mut out = first.to_string();
    for seg in segments {
        if is_name(seg) {
            out.push('.');
            out.push_str(seg);
        } else {
            out.push('[');
            string_literal(seg, &mut out);
            out.push(']');
        }
    }
    Ok(out)
}

/// A string as a literal of the condition language.
fn string_literal(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A value of `conditions` as a literal of the condition language.
fn literal(node: &Node<'_>) -> Result<String, (Range<usize>, String)> {
    match &node.kind {
        Kind::Scalar(s) => Ok(match s.value() {
            Value::Null => "nil".into(),
            Value::Bool(b) => b.to_string(),
            Value::Int(i64::MIN) => "(-9223372036854775807 - 1)".into(),
            Value::Int(i) => i.to_string(),
            Value::UInt(_) => {
                return Err((
                    node.span.clone(),
                    format!(
                    "`{}` is larger than the condition language's integers (64 bits); write it as a float, like 1e19",
                    s.text
                ),
                ))
            }
            Value::Float(f) if f.is_finite() => format!("{f:?}"),
            Value::Float(_) => {
                return Err((node.span.clone(), format!("`{}` is not a number a condition can compare with", s.text)))
            }
            Value::Str(t) => {
                let mut out = String::with_capacity(t.len() + 2);
                string_literal(t, &mut out);
                out
            }
        }),
        Kind::Seq(items) => {
            let items: Vec<String> = items.iter().map(literal).collect::<Result<_, _>>()?;
            Ok(format!("[{}]", items.join(", ")))
        }
        Kind::Map(_) => Err((node.span.clone(), "a list of values cannot hold a mapping".into())),
    }
}

/// Expression text written from pieces of the file, each remembering where it came from.
#[derive(Default)]
struct Written {
    text: String,
    /// (range in `text`, range in the file, whether the text is the file's bytes as they are)
    marks: Vec<(Range<usize>, Range<usize>, bool)>,
}

impl Written {
    fn push_at(&mut self, s: &str, file: &Range<usize>, exact: bool) {
        let start = self.text.len();
        self.text.push_str(s);
        self.marks.push((start..self.text.len(), file.clone(), exact));
    }

    /// The condition part: a byte of the text is located at the piece of the file it came
    /// from (the same byte, where the text is the file's; else the start of that piece, and its
    /// end for the end of the piece).
    fn part(self) -> ConditionPart<'static> {
        let marks = self.marks;
        let locate = move |i: usize| {
            for (text, file, exact) in &marks {
                if text.contains(&i) {
                    return if *exact { (file.start + i - text.start).min(file.end) } else { file.start };
                }
            }
            // the end of a piece: the end of what it came from
            marks.iter().rev().find(|(text, _, _)| text.end <= i).map_or(0, |(_, file, _)| file.end)
        };
        ConditionPart { text: self.text, locate: Box::new(locate), written_at: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_become_expressions() {
        assert_eq!(field_expr("headers.user-agent").unwrap(), "headers[\"user-agent\"]");
        assert_eq!(field_expr("metrics.edge_error_rate_1m").unwrap(), "metrics.edge_error_rate_1m");
        assert_eq!(field_expr("a.in.b c").unwrap(), "a.in[\"b c\"]");
        assert_eq!(field_expr("a.\"q\"").unwrap(), "a[\"\\\"q\\\"\"]");
        assert_eq!(field_expr("a..b"), Err(FieldPathError::EmptyName { path: "a..b".into() }));
        assert!(field_expr("user-agent").is_err());
        assert_eq!(field_expr("1a"), Err(FieldPathError::FirstNotAName { path: "1a".into() }));
        assert_eq!(
            field_expr("nil.x").unwrap_err().to_string(),
            "`nil.x` starts with `nil`, a word of the condition language"
        );
    }

    #[test]
    fn values_become_literals() {
        let options = yaml::Options { max_depth: 8, depth_hint: "", what: "" };
        let lit = |text: &str| {
            let doc = yaml::parse(text, &options).unwrap();
            literal(&doc.root.unwrap())
        };
        assert_eq!(lit("0.05").unwrap(), "0.05");
        assert_eq!(lit("1e20").unwrap(), "1e20");
        assert_eq!(lit("-3").unwrap(), "-3");
        assert_eq!(lit("-9223372036854775808").unwrap(), "(-9223372036854775807 - 1)");
        assert_eq!(lit("'a \"b\" \\d'").unwrap(), "\"a \\\"b\\\" \\\\d\"");
        assert_eq!(lit("[a, 1, ~, true]").unwrap(), "[\"a\", 1, nil, true]");
        assert!(lit(".inf").is_err());
        assert!(lit("18446744073709551615").is_err());
    }
}
