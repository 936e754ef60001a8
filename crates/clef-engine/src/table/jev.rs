//! Jev decision tables (SPEC §4.1): the seeds' bare array of rules, or an
//! object with `rules`, `default`, `schema`, `params`, `tests`.
//!
//! Values are read with `serde_json` into borrowed `RawValue`s, whose
//! addresses inside the file give every diagnostic its exact position — also
//! inside a condition string, through its JSON escapes.

use std::collections::BTreeMap;

use serde_json::value::RawValue;

use super::rules::RuleEngine;
use super::spec::{build, ConditionPart, Place, RuleSpec, TableSpec};
use super::{Limits, LoadError, TableMeta};
use crate::diagnostic::{json_string_offset, Diagnostic, SourceFile};
use crate::expr::check::Schema;
use crate::expr::{Const, Env};
use crate::suggest::did_you_mean;

/// The keys a table object may have.
pub const TABLE_KEYS: &[&str] = &["name", "description", "version", "schema", "params", "tests", "default", "rules"];
/// The keys a rule may have.
pub const RULE_KEYS: &[&str] = &["id", "condition", "action", "enabled", "description"];
/// Keys written for a rule's expression in other formats and languages (YAML rule sets' `when`):
/// in a Jev table it is `condition`.
const CONDITION_ALIASES: &[&str] = &["when", "if", "expr", "expression", "predicate", "rule", "conditions"];
/// The keys a parameter declaration may have.
pub const PARAM_KEYS: &[&str] = &["value", "min", "max", "step", "tunable", "description"];

/// How far before a value [`Loader::at_key`] looks for its key: past the colon and any spaces.
const KEY_SEARCH_BYTES: usize = 4096;

/// Reads a Jev table's source into a compiled engine.
pub fn load(path: &str, source: &str, limits: &Limits) -> Result<(RuleEngine, TableMeta), LoadError> {
    let mut p = Loader::new(path, source);
    let top: &RawValue = match serde_json::from_str(source) {
        Ok(v) => v,
        Err(e) => return Err(LoadError::from(vec![p.serde_error(&e)])),
    };
    let text = top.get();
    let mut meta = TableMeta::default();
    let mut env = Env { max_depth: limits.max_expr_depth, regex_size_limit: limits.regex_size_limit, ..Env::default() };
    let mut default = None;
    let rules_raw: Vec<&RawValue> = if text.starts_with('[') {
        p.parse_as(top, "the table").unwrap_or_default()
    } else if text.starts_with('{') {
        let fields: BTreeMap<String, &RawValue> = p.parse_as(top, "the table").unwrap_or_default();
        for (key, value) in &fields {
            if !TABLE_KEYS.contains(&key.as_str()) {
                let hint = did_you_mean(key, TABLE_KEYS.iter().copied())
                    .map(|s| format!("; did you mean \"{s}\"?"))
                    .unwrap_or_else(|| format!("; a table may have {}", TABLE_KEYS.join(", ")));
                p.at_key(value, key, format!("unknown key \"{key}\"{hint}"));
            }
        }
        meta.name = fields.get("name").and_then(|v| p.string(v, "\"name\""));
        meta.description = fields.get("description").and_then(|v| p.string(v, "\"description\""));
        if let Some(v) = fields.get("tests") {
            meta.tests = p.parse_as(v, "\"tests\"");
        }
        if let Some(v) = fields.get("schema") {
            env.schema = p.schema(v);
        }
        if let Some(v) = fields.get("params") {
            p.params(v, &mut env);
            meta.params = p.parse_as(v, "\"params\"");
        }
        if let Some(v) = fields.get("default") {
            default = p.default_action(v);
        }
        match fields.get("rules") {
            Some(v) if v.get().starts_with('[') => p.parse_as(v, "\"rules\"").unwrap_or_default(),
            Some(v) => {
                p.at(v, "\"rules\" must be an array of rules".into());
                Vec::new()
            }
            None => {
                p.at(
                    top,
                    "the table has no \"rules\"; add \"rules\": [ {\"id\": …, \"condition\": …, \"action\": {…}} ]"
                        .into(),
                );
                Vec::new()
            }
        }
    } else {
        p.at(top, "a table is a JSON array of rules, or an object with \"rules\"".into());
        Vec::new()
    };
    if rules_raw.len() > limits.max_rules {
        p.at(
            top,
            format!(
                "the table has {} rules; at most {} are allowed (limits.max_rules)",
                rules_raw.len(),
                limits.max_rules
            ),
        );
        return Err(LoadError::from(p.diags));
    }

    let mut rules = Vec::with_capacity(rules_raw.len());
    for (i, raw) in rules_raw.iter().enumerate() {
        if let Some(rule) = p.rule(i, raw) {
            rules.push(rule);
        }
    }
    let spec = TableSpec { rules, default, env, templates: false };
    let mut diags = std::mem::take(&mut p.diags);
    match build(path, source, spec, limits, &mut diags) {
        Ok(engine) => Ok((engine, meta)),
        Err(unlisted) => Err(LoadError::listing(diags, unlisted)),
    }
}

/// A JSON syntax error of a file, positioned with a caret and named as the mistake a person
/// makes where it is recognisable (see [`json_mistake`]); else serde_json's message.
pub fn json_error(path: &str, source: &str, e: &serde_json::Error) -> Diagnostic {
    let offset = line_col_offset(source, e.line(), e.column());
    if let Some((at, width, message)) = json_mistake(source, offset, e) {
        return Diagnostic::at_offset(path, source, at, width, message);
    }
    let msg = e.to_string();
    let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
    let msg = match e.classify() {
        serde_json::error::Category::Eof => format!("the file ends too early ({msg}); is a bracket or quote missing?"),
        _ => format!("invalid JSON: {msg}"),
    };
    Diagnostic::at_line_col(path, source, e.line().max(1), e.column().max(1), msg)
}

/// The mistake behind a JSON syntax error that serde_json found at byte `offset`, as
/// `(where, width, message)`:
/// - a trailing comma, which serde_json reports at the bracket after it (as "trailing comma",
///   or, when it skips values, as "key must be a string" or "expected value"): at the comma;
/// - a line break in a string: its closing quote is missing (the whole string underlined);
///   another control character (a tab) must be escaped;
/// - a word right after a string (`"a > 5, "action"`): the string before lacks its closing
///   quote and ran on to the quote that was to open the word;
/// - a value right after a value: a comma is missing between them;
/// - single quotes, keys without quotes and `//` comments, which JSON does not have.
fn json_mistake(source: &str, offset: usize, e: &serde_json::Error) -> Option<(usize, usize, String)> {
    let bytes = source.as_bytes();
    let here = bytes.get(offset).copied();
    let message = e.to_string();
    let message = message.split(" at line ").next().unwrap_or(&message);
    let previous = bytes.iter().take(offset).rposition(|b| !b.is_ascii_whitespace());
    if let Some(close) = here.filter(|b| matches!(b, b'}' | b']')) {
        if let Some(comma) = previous.filter(|&i| bytes.get(i) == Some(&b',')) {
            let message = format!("trailing comma before `{}`: JSON allows none here; remove it", close as char);
            return Some((comma, 1, message));
        }
    }
    if message.starts_with("control character") {
        // serde_json's column is the character before it
        let at = (offset..=offset + 1).find(|&i| bytes.get(i).is_some_and(|b| *b < 0x20))?;
        let here = bytes.get(at).copied();
        if matches!(here, Some(b'\n' | b'\r')) {
            let start = string_start(bytes, at)?;
            return Some((
                start,
                at - start,
                "this string is not closed on its line: a closing `\"` is probably missing at its end (a string \
                 cannot hold a line break; write \\n for one)"
                    .to_string(),
            ));
        }
        let message = match here {
            Some(b'\t') => "a tab inside a string: write it as \\t".to_string(),
            Some(b) => format!("a control character (U+{b:04X}) inside a string: write it as \\u{b:04x}"),
            None => return None,
        };
        return Some((at, 1, message));
    }
    if message.starts_with("expected `,` or") {
        let word_end = bytes.get(offset..)?.iter().position(|b| !(b.is_ascii_alphanumeric() || *b == b'_'));
        let word = source.get(offset..offset + word_end.unwrap_or(0)).unwrap_or_default();
        let after_string = previous.is_some_and(|i| bytes.get(i) == Some(&b'"'));
        if after_string && !word.is_empty() && !matches!(word, "true" | "false" | "null") {
            let close = previous?;
            let start = string_start(bytes, close)?;
            return Some((
                start,
                close + 1 - start,
                format!(
                    "a closing `\"` is probably missing in this string: it runs on to the `\"` before `{word}` \
                     ({}), which was to open a string",
                    line_col(source, offset)
                ),
            ));
        }
        let starts_value =
            matches!(here, Some(b'{' | b'[' | b'"' | b'-' | b'0'..=b'9')) || matches!(word, "true" | "false" | "null");
        if starts_value {
            let between = if message.ends_with("`]`") { "the items of an array" } else { "the members of an object" };
            return Some((offset, 1, format!("a `,` is missing before this: JSON separates {between} with commas")));
        }
    }
    match here {
        Some(b'\'') => {
            Some((offset, 1, "JSON strings are written in double quotes: write \"…\" instead of '…'".to_string()))
        }
        Some(b'/') if bytes.get(offset + 1).is_some_and(|b| matches!(b, b'/' | b'*')) => Some((
            offset,
            2,
            "JSON has no comments; remove it (a table, a rule and a parameter may have a \"description\")".to_string(),
        )),
        Some(b) if message == "key must be a string" && (b.is_ascii_alphabetic() || b == b'_') => {
            let end =
                bytes.get(offset..)?.iter().position(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-')));
            let key = source.get(offset..offset + end.unwrap_or(0)).unwrap_or_default();
            Some((offset, key.len().max(1), format!("a key is a string in double quotes in JSON: write \"{key}\"")))
        }
        _ => None,
    }
}

/// Where the string whose text runs up to byte `end` (on the same line) opens: the last `"`
/// before it that no backslash escapes.
fn string_start(bytes: &[u8], end: usize) -> Option<usize> {
    let mut i = end;
    while i > 0 {
        i -= 1;
        match bytes.get(i) {
            Some(b'\n') | None => return None,
            Some(b'"') => {
                let backslashes = bytes.get(..i)?.iter().rev().take_while(|b| **b == b'\\').count();
                if backslashes % 2 == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// `line:column` of byte `offset`, counted as diagnostics count them.
fn line_col(source: &str, offset: usize) -> String {
    let d = Diagnostic::at_offset("", source, offset, 1, String::new());
    format!("{}:{}", d.line, d.column)
}

/// The byte offset of serde_json's 1-based line and byte column.
fn line_col_offset(source: &str, line: usize, column: usize) -> usize {
    let mut offset = 0;
    for (i, l) in source.split_inclusive('\n').enumerate() {
        if i + 1 == line.max(1) {
            return offset + column.saturating_sub(1).min(l.len());
        }
        offset += l.len();
    }
    source.len()
}

/// Reads JSON values of one file and collects diagnostics positioned at them:
/// a `RawValue` borrowed from `source` knows where it is. The tests files of
/// `clef test` and `clef check` are read with it too.
pub struct Loader<'s> {
    path: &'s str,
    source: &'s str,
    file: SourceFile<'s>,
    /// the problems found so far
    pub diags: Vec<Diagnostic>,
}

impl<'s> Loader<'s> {
    /// A loader of `source`, the text of the file `path`.
    pub fn new(path: &'s str, source: &'s str) -> Loader<'s> {
        Loader { path, source, file: SourceFile::new(path, source), diags: Vec::new() }
    }

    /// The file, as diagnostics name it.
    pub fn path(&self) -> &'s str {
        self.path
    }

    fn offset(&self, raw: &RawValue) -> usize {
        let start = raw.get().as_ptr() as usize;
        let base = self.source.as_ptr() as usize;
        start.saturating_sub(base).min(self.source.len())
    }

    /// An error at `raw` (which must be borrowed from the source).
    pub fn at(&mut self, raw: &RawValue, message: String) {
        let off = self.offset(raw);
        let width = raw.get().find('\n').unwrap_or(raw.get().len()).min(40);
        self.diags.push(self.file.at(off, width, message));
    }

    /// An error at the key written before `value`.
    pub fn at_key(&mut self, value: &RawValue, key: &str, message: String) {
        let off = self.offset(value);
        let quoted = serde_json::to_string(key).unwrap_or_default();
        // The key stands just before its value; a key written with other escapes than serde's is
        // not found, and the search for it must not read back through the whole file each time.
        let from = off.saturating_sub(quoted.len() + KEY_SEARCH_BYTES);
        let from = (0..=from).rev().find(|&i| self.source.is_char_boundary(i)).unwrap_or(0);
        let key_off = self.source[from..off].rfind(&quoted).map_or(off, |i| from + i);
        self.diags.push(self.file.at(key_off, quoted.len(), message));
    }

    fn serde_error(&self, e: &serde_json::Error) -> Diagnostic {
        json_error(self.path, self.source, e)
    }

    fn parse_as<T: serde::Deserialize<'s>>(&mut self, raw: &'s RawValue, what: &str) -> Option<T> {
        match serde_json::from_str::<T>(raw.get()) {
            Ok(v) => Some(v),
            Err(e) => {
                let kind = match raw.get().as_bytes().first() {
                    Some(b'{') => "an object",
                    Some(b'[') => "an array",
                    Some(b'"') => "a string",
                    _ => "a value",
                };
                let msg = e.to_string();
                let msg = msg.split(" at line ").next().unwrap_or(&msg);
                self.at(raw, format!("{what} is {kind} that does not have the expected shape: {msg}"));
                None
            }
        }
    }

    fn string(&mut self, raw: &RawValue, what: &str) -> Option<String> {
        match serde_json::from_str::<String>(raw.get()) {
            Ok(s) => Some(s),
            Err(_) => {
                self.at(raw, format!("{what} must be a string"));
                None
            }
        }
    }

    fn schema(&mut self, raw: &'s RawValue) -> Option<Schema> {
        let fields: BTreeMap<String, &RawValue> = match serde_json::from_str(raw.get()) {
            Ok(f) => f,
            Err(_) => {
                self.at(raw, "\"schema\" must be an object of field → type, e.g. {\"user_tier\": \"string\"}".into());
                return None;
            }
        };
        let mut schema = Schema::default();
        for (field, t) in &fields {
            let name: Option<String> = serde_json::from_str(t.get()).ok();
            if let Err(message) = schema.declare(field, name.as_deref().unwrap_or_default()) {
                self.at(t, message.to_string());
            }
        }
        for (path, message) in schema.path_problems() {
            if let Some(t) = fields.get(path) {
                self.at_key(t, path, message);
            }
        }
        Some(schema)
    }

    /// Reads `params` into `env`. A declaration with a problem is reported
    /// once, here: its name goes to `env.broken_params`, so that conditions
    /// using it do not add an "unknown parameter" error.
    fn params(&mut self, raw: &'s RawValue, env: &mut Env) {
        let Some(decls) = self.parse_as::<BTreeMap<String, &RawValue>>(raw, "\"params\"") else { return };
        for (name, decl) in decls {
            let fields: Option<BTreeMap<String, &RawValue>> = serde_json::from_str(decl.get()).ok();
            let Some(fields) = fields else {
                self.at(decl, format!("parameter \"{name}\" must be an object such as {{\"value\": 0.05}}"));
                env.broken_params.insert(name);
                continue;
            };
            let mut misspelt_value = false;
            for (k, v) in &fields {
                if !PARAM_KEYS.contains(&k.as_str()) {
                    let suggestion = did_you_mean(k, PARAM_KEYS.iter().copied());
                    misspelt_value |= suggestion == Some("value");
                    let hint = suggestion.map(|s| format!("; did you mean \"{s}\"?")).unwrap_or_default();
                    self.at_key(v, k, format!("unknown key \"{k}\" in parameter \"{name}\"{hint}"));
                }
            }
            let problem = match serde_json::from_str::<serde_json::Value>(decl.get()) {
                Ok(d) => super::params::Tunable::read(&name, &d).err().map(|e| e.to_string()),
                Err(e) => Some(e.to_string()),
            };
            if let Some(problem) = problem {
                self.at(decl, problem);
                env.broken_params.insert(name);
                continue;
            }
            match fields.get("value").map(|v| serde_json::from_str::<serde_json::Value>(v.get())) {
                Some(Ok(v)) => {
                    env.params.insert(name, Const::from_json(&v));
                }
                _ => {
                    // A misspelt "value" is already reported, with its fix.
                    if !misspelt_value {
                        self.at(decl, format!("parameter \"{name}\" has no \"value\""));
                    }
                    env.broken_params.insert(name);
                }
            }
        }
    }

    fn default_action(&mut self, raw: &RawValue) -> Option<serde_json::Value> {
        match serde_json::from_str::<serde_json::Value>(raw.get()) {
            Ok(v @ serde_json::Value::Object(_)) => match crate::authz::check_action(&v) {
                Ok(()) => Some(v),
                Err(problem) => {
                    self.at(raw, format!("in the default: {problem}"));
                    None
                }
            },
            Ok(serde_json::Value::Null) => None,
            _ => {
                self.at(raw, "\"default\" must be an action object (or null)".into());
                None
            }
        }
    }

    /// Reads one rule; its problems of shape are reported here, the rest by the builder.
    fn rule(&mut self, i: usize, raw: &'s RawValue) -> Option<RuleSpec<'s>> {
        let fields: BTreeMap<String, &RawValue> = match serde_json::from_str(raw.get()) {
            Ok(f) => f,
            Err(_) => {
                self.at(raw, format!("rule #{} must be an object with \"id\", \"condition\" and \"action\"", i + 1));
                return None;
            }
        };
        let id = match fields.get("id") {
            Some(v) => match serde_json::from_str::<String>(v.get()) {
                Ok(s) if !s.trim().is_empty() => Some((s, self.place(v))),
                _ => {
                    self.at(v, format!("rule #{}: \"id\" must be a non-empty string", i + 1));
                    None
                }
            },
            None => {
                self.at(raw, format!("rule #{} has no \"id\"", i + 1));
                None
            }
        };
        let label = id.as_ref().map(|(s, _)| format!("rule \"{s}\"")).unwrap_or_else(|| format!("rule #{}", i + 1));
        // the keys an unknown key stands for: they are not said to be missing as well
        let mut meant = Vec::new();
        for (k, v) in &fields {
            if RULE_KEYS.contains(&k.as_str()) {
                continue;
            }
            let hint = if CONDITION_ALIASES.contains(&k.as_str()) {
                meant.push("condition");
                "; a rule of a JSON table writes its expression in \"condition\" (\"when\" and \"conditions\" are keys \
                 of YAML rule sets): rename the key to \"condition\""
                    .to_string()
            } else if let Some(s) = did_you_mean(k, RULE_KEYS.iter().copied()) {
                meant.push(s);
                format!("; did you mean \"{s}\"?")
            } else {
                format!("; a rule may have {}", RULE_KEYS.join(", "))
            };
            self.at_key(v, k, format!("{label}: unknown key \"{k}\"{hint}"));
        }
        let enabled = match fields.get("enabled") {
            None => true,
            Some(v) => match serde_json::from_str::<bool>(v.get()) {
                Ok(b) => b,
                Err(_) => {
                    self.at(v, format!("{label}: \"enabled\" must be true or false"));
                    true
                }
            },
        };
        let description = fields.get("description").and_then(|v| self.string(v, &format!("{label}: \"description\"")));
        let action = match fields.get("action") {
            Some(v) => match serde_json::from_str::<serde_json::Value>(v.get()) {
                Ok(a) => Some((a, self.place(v))),
                Err(_) => {
                    self.at(v, format!("{label}: \"action\" must be a JSON object"));
                    None
                }
            },
            None => {
                if !meant.contains(&"action") {
                    self.at(raw, format!("{label} has no \"action\""));
                }
                None
            }
        };
        let cond_raw = match fields.get("condition") {
            Some(v) => *v,
            None => {
                if !meant.contains(&"condition") {
                    self.at(
                        raw,
                        format!("{label} has no \"condition\" (write \"condition\": \"true\" for a catch-all)"),
                    );
                }
                return None;
            }
        };
        let condition = match serde_json::from_str::<String>(cond_raw.get()) {
            Ok(c) => c,
            Err(_) => {
                self.at(cond_raw, format!("{label}: \"condition\" must be a string"));
                return None;
            }
        };
        let (id, id_at) = id?;
        let (action, action_at) = action?;
        let literal = cond_raw.get();
        let base = self.offset(cond_raw);
        let part = ConditionPart {
            text: condition,
            locate: Box::new(move |i| base + json_string_offset(literal, i)),
            written_at: None,
        };
        Some(RuleSpec { id, id_at, condition: vec![part], action, action_at, fallback: None, enabled, description })
    }

    /// Where `raw` is written, as a place one line wide at most.
    fn place(&self, raw: &RawValue) -> Place {
        Place::new(self.offset(raw), raw.get().find('\n').unwrap_or(raw.get().len()).min(40))
    }
}
