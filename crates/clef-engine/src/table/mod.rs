//! Tables: loading any kind from a file, naming and versioning them, and
//! turning a decision into the response body of SPEC §6.

mod explain;
pub mod flash;
pub mod index;
pub mod jev;
pub mod params;

pub mod rules;
pub mod ruleset;
pub mod spec;
pub mod template;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use sha2::{Digest, Sha256};

use crate::authz::Verdict;
use crate::diagnostic::Diagnostic;
use crate::expr::json::write_json_string;
use crate::expr::value::{Const, Value};
use crate::input::{self, InputError};
pub use rules::{Decision, ParamsError, Problem, Rule, RuleEngine, RuleWarning, SwitchedOff, TraceEntry};

/// Load-time caps (SPEC §10), each configurable.
#[derive(Clone, Debug)]
pub struct Limits {
    /// rules per table
    pub max_rules: usize,
    /// expression nesting
    pub max_expr_depth: usize,
    /// compiled size of one regex, in bytes
    pub regex_size_limit: usize,
    /// nesting of decision inputs
    pub max_input_depth: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_rules: 100_000,
            max_expr_depth: crate::expr::parser::DEFAULT_MAX_DEPTH,
            regex_size_limit: crate::expr::compile::DEFAULT_REGEX_SIZE_LIMIT,
            max_input_depth: input::DEFAULT_MAX_DEPTH,
        }
    }
}

/// The kinds of table, told apart by the file name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableKind {
    /// `*.json`: a Jev decision table
    Jev,
    /// `*.yaml`, `*.yml`: a Clef rule set
    RuleSet,
    /// `*.flash.json`: a flash lookup table's source, compiled when it loads
    Flash,
    /// `*.cfb`: a compiled flash table
    FlashCompiled,
}

impl TableKind {
    /// The name shown by `/tables` and `clef check`.
    pub fn name(self) -> &'static str {
        match self {
            TableKind::Jev => "jev",
            TableKind::RuleSet => "ruleset",
            TableKind::Flash | TableKind::FlashCompiled => "flash",
        }
    }

    /// Which kind a file is, from its name; `None` for files that are not tables (tests
    /// files `NAME.tests.json`, hidden files, anything else).
    pub fn of_path(path: &Path) -> Option<TableKind> {
        let name = path.file_name()?.to_str()?;
        if name.ends_with(".tests.json") || name.starts_with('.') {
            return None;
        }
        if name.ends_with(".flash.json") {
            Some(TableKind::Flash)
        } else if name.ends_with(".json") {
            Some(TableKind::Jev)
        } else if name.ends_with(".yaml") || name.ends_with(".yml") {
            Some(TableKind::RuleSet)
        } else if name.ends_with(".cfb") {
            Some(TableKind::FlashCompiled)
        } else {
            None
        }
    }
}

/// A table that could not be loaded, with the problems found: the first
/// [`MAX_LISTED`](crate::diagnostic::MAX_LISTED), and how many more there are.
#[derive(Clone, Debug)]
pub struct LoadError {
    /// one entry per problem listed, in the order of the file
    pub diagnostics: Vec<Diagnostic>,
    /// problems found past those listed
    pub unlisted: usize,
}

impl From<Vec<Diagnostic>> for LoadError {
    /// The load error of every problem a loader found, listing the first ones.
    fn from(mut diagnostics: Vec<Diagnostic>) -> LoadError {
        let unlisted = diagnostics.len().saturating_sub(crate::diagnostic::MAX_LISTED);
        if unlisted > 0 {
            diagnostics.truncate(crate::diagnostic::MAX_LISTED);
            diagnostics.shrink_to_fit();
        }
        LoadError { diagnostics, unlisted }
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.diagnostics.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        if let Some(last) = self.diagnostics.last().filter(|_| self.unlisted > 0) {
            write!(
                f,
                "\n{}: {} more {} not listed; fix the first ones, then check the file again",
                last.path,
                self.unlisted,
                if self.unlisted == 1 { "problem is" } else { "problems are" }
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for LoadError {}

impl LoadError {
    /// The load error of `diagnostics`, the problems a loader listed, when it found `unlisted`
    /// more past them (see `spec::build`).
    pub(crate) fn listing(diagnostics: Vec<Diagnostic>, unlisted: usize) -> LoadError {
        let mut e = LoadError::from(diagnostics);
        e.unlisted += unlisted;
        e
    }

    /// A load error of one problem about the whole file.
    pub fn single(path: &str, message: String) -> LoadError {
        LoadError::from(vec![Diagnostic::whole_file(path, message)])
    }

    /// How many problems were found, listed or not.
    pub fn count(&self) -> usize {
        self.diagnostics.len() + self.unlisted
    }

    /// The first problem on one line, for logs and `/health`.
    pub fn summary(&self) -> String {
        let Some(d) = self.diagnostics.first() else { return "failed to load".to_string() };
        let more = match self.count() - 1 {
            0 => String::new(),
            1 => " (and 1 more problem)".to_string(),
            n => format!(" (and {n} more problems)"),
        };
        format!("{}:{}:{}: {}{more}", d.path, d.line, d.column, d.message)
    }
}

/// A loaded, compiled table. Cloning one is cheap: the engine is shared (the registry clones a
/// table to serve it with other kill switches, without compiling it again).
#[derive(Debug, Clone)]
pub struct Table {
    /// the file name without extensions
    pub name: String,
    /// the served version, which decisions carry: the file's version while the file's own
    /// parameter values serve; with other values in force (promoted, or a tuning variant's), the
    /// first 12 hex characters of a SHA-256 of the file and those values ([`served_version`]),
    /// so that one version names one behaviour (SPEC §9)
    pub version: String,
    /// first 12 hex characters of the SHA-256 of the file's bytes
    pub file_version: String,
    /// what kind of table
    pub kind: TableKind,
    /// where it was loaded from
    pub path: PathBuf,
    /// `description` from the file
    pub description: Option<String>,
    /// `name` written inside the file, when present
    pub declared_name: Option<String>,
    /// tests stored in the table file
    pub tests: Option<serde_json::Value>,
    /// `params` as declared in the file
    pub params: Option<serde_json::Value>,
    /// what decides: the engine of its kind
    pub engine: Arc<Engine>,
    /// when it was loaded
    pub loaded_at: SystemTime,
    /// how long loading and compiling took
    pub compile_time: Duration,
    /// load-time caps it was built with
    pub limits: Limits,
    name_json: Box<str>,
    /// the rules kill switches turn off on this copy (SPEC §8.3); `None`: the file's rules as written
    switched_off: Option<Arc<SwitchedOff>>,
    /// the file's bytes, zstd-compressed, when the registry keeps them (to pin a rollback to
    /// this version across restarts, its source is written to `state_dir`)
    packed_source: Option<Arc<[u8]>>,
    /// the SHA-256 of the file's bytes
    file_digest: [u8; 32],
    /// the parameter values in force, as a JSON object sorted by name (`None`: the table
    /// declares no parameter)
    params_json: Option<Arc<str>>,
    /// the parameter values the file declares, the same way
    file_params_json: Option<Arc<str>>,
    /// what forward-auth answers for each outcome's action as written, then the default's:
    /// worked out once per engine, on the first `/authz` decision, not per request
    verdicts: Arc<std::sync::OnceLock<Box<[Verdict]>>>,
}

/// The engine that decides for one table, chosen by its kind when it loads (as the regex
/// crate picks a strategy once per pattern). Every engine answers with the same [`Decision`]
/// shape; its `rule` indexes the engine's outcomes (rules, or the cells of a flash table).
// One per loaded table, so its size does not matter; boxing the rules would add a pointer
// chase to every decision.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Engine {
    /// ordered rules, the first that holds answers: Jev tables and YAML rule sets
    Rules(RuleEngine),
    /// one bucket lookup per dimension and one cell read: flash tables
    Flash(flash::FlashTable),
}

impl Engine {
    fn decide_body(
        &self,
        body: &[u8],
        explain: bool,
        max_depth: usize,
        switched: Option<&SwitchedOff>,
    ) -> Result<Decision, InputError> {
        match self {
            Engine::Rules(e) => e.decide_body_with(body, explain, max_depth, switched),
            Engine::Flash(f) => input::with_parsed(body, max_depth, |root| f.decide(&root, explain)),
        }
    }

    fn decide_parsed(
        &self,
        root: &Value<'_>,
        explain: bool,
        switched: Option<&SwitchedOff>,
    ) -> Result<Decision, InputError> {
        match self {
            Engine::Rules(e) => e.decide_parsed_with(root, explain, switched),
            Engine::Flash(f) => Ok(f.decide(root, explain)),
        }
    }

    fn decide_reference(&self, root: &Value<'_>, switched: Option<&SwitchedOff>) -> Result<Decision, InputError> {
        match self {
            Engine::Rules(e) => e.decide_reference_with(root, switched),
            Engine::Flash(f) => Ok(f.decide_reference(root)),
        }
    }

    /// The rules, in order (empty for kinds without rules).
    pub fn rules(&self) -> &[Rule] {
        match self {
            Engine::Rules(e) => &e.rules,
            Engine::Flash(_) => &[],
        }
    }

    /// How many outcomes a decision can name: rules, or cells.
    pub fn outcome_count(&self) -> usize {
        match self {
            Engine::Rules(e) => e.rules.len(),
            Engine::Flash(f) => f.cell_count(),
        }
    }

    /// The id of outcome `i` as a JSON string (what `rule_id` says).
    pub fn outcome_id_json(&self, i: usize) -> &str {
        match self {
            Engine::Rules(e) => e.rules.get(i).map_or("null", |r| &r.id_json),
            Engine::Flash(f) => f.cell_id_json(i),
        }
    }

    /// The ids decisions are counted by, in outcome order.
    pub fn outcome_ids(&self) -> Vec<String> {
        match self {
            Engine::Rules(e) => e.rules.iter().map(|r| r.id.clone()).collect(),
            Engine::Flash(f) => f.cell_names().to_vec(),
        }
    }

    /// The action outcome `i` answers with as written (or the default for `None`).
    pub fn action_json(&self, outcome: Option<usize>) -> &str {
        match (self, outcome) {
            (Engine::Rules(e), Some(r)) => e.rules.get(r).map_or("null", |r| &r.action_json),
            (Engine::Rules(e), None) => &e.default_json,
            (Engine::Flash(f), cell) => f.action_json(cell),
        }
    }

    /// The default action as JSON (`null` without one).
    pub fn default_json(&self) -> &str {
        self.action_json(None)
    }

    /// Whether outcome `i` can be chosen at all (a disabled rule cannot).
    pub fn outcome_enabled(&self, i: usize) -> bool {
        match self {
            Engine::Rules(e) => e.rules.get(i).is_some_and(|r| r.enabled),
            Engine::Flash(f) => i < f.cell_count(),
        }
    }

    /// What the outcomes are called, in the plural: `rules` or `cells`.
    pub fn outcome_noun(&self) -> &'static str {
        match self {
            Engine::Rules(_) => "rules",
            Engine::Flash(_) => "cells",
        }
    }

    /// A short description for people: `11 rules, 3 indexed fields`.
    pub fn summary(&self) -> String {
        match self {
            Engine::Rules(e) => format!("{} rules, {} indexed fields", e.rules.len(), e.indexed_fields()),
            Engine::Flash(f) => f.summary(),
        }
    }
}

/// What a table file holds besides what decides: names, descriptions, tests and parameters as
/// written (every kind of table may have them).
#[derive(Debug, Default)]
pub struct TableMeta {
    /// `name` inside the file, if any
    pub name: Option<String>,
    /// `description`
    pub description: Option<String>,
    /// `tests`, kept as written for `clef test`
    pub tests: Option<serde_json::Value>,
    /// `params` as declared
    pub params: Option<serde_json::Value>,
}

/// The largest table file clef reads: 100,000 rules of a few hundred bytes each fit well.
pub const MAX_TABLE_BYTES: u64 = 64 << 20;

/// The bytes of a table file: a regular file of at most [`MAX_TABLE_BYTES`] (a compiled flash
/// table: at most 64 KiB, read whole rather than mapped, since a reload replaces the file).
pub fn read_table_file(path: &Path) -> std::io::Result<Vec<u8>> {
    let max = match TableKind::of_path(path) {
        Some(TableKind::FlashCompiled) => flash::cfb::MAX_BYTES as u64,
        _ => MAX_TABLE_BYTES,
    };
    crate::files::read_limited(path, max)
}

/// The table name for a file: its file name without every extension.
pub fn table_name(path: &Path) -> String {
    let file = path.file_name().and_then(|n| n.to_str()).unwrap_or("table");
    file.split('.').next().filter(|s| !s.is_empty()).unwrap_or(file).to_string()
}

/// The SHA-256 of a table file's bytes: the one hash of a file that its version, the
/// registry's "has it changed" and a flash table's record of its source are all made of.
/// Whoever reads a file hashes it once and hands the digest on ([`Table::from_digested_bytes`]).
pub fn file_digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// A digest in hex, every byte (64 characters for a SHA-256).
pub fn digest_hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The version of a table file: the first 12 hex characters of its SHA-256.
pub fn version_of(bytes: &[u8]) -> String {
    short_hex(&file_digest(bytes))
}

/// The first 12 hex characters of a digest.
fn short_hex(digest: &[u8; 32]) -> String {
    digest.iter().take(6).map(|b| format!("{b:02x}")).collect()
}

/// The version of a table served with parameter values other than its file's (SPEC §9
/// revision 4): the first 12 hex characters of the SHA-256 of the file's SHA-256, a zero byte,
/// and the values in force as a JSON object sorted by name (`params_json`). Anyone with the
/// file and the values (a snapshot records them) derives it again.
pub fn served_version(file_digest: &[u8; 32], params_json: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(file_digest);
    hasher.update([0u8]);
    hasher.update(params_json.as_bytes());
    short_hex(&hasher.finalize().into())
}

/// The values of the parameters `declared` (a table's `params` as written: name → declaration
/// with a `value`) as a JSON object sorted by name; `None` when there are none.
fn params_json_of(declared: Option<&serde_json::Value>) -> Option<Arc<str>> {
    let serde_json::Value::Object(decls) = declared? else { return None };
    let values: BTreeMap<&String, &serde_json::Value> =
        decls.iter().filter_map(|(name, decl)| Some((name, decl.get("value")?))).collect();
    if values.is_empty() {
        return None;
    }
    serde_json::to_string(&values).ok().map(Arc::from)
}

impl Table {
    /// Loads a table file of any kind.
    pub fn load(path: &Path, limits: &Limits) -> Result<Table, LoadError> {
        let shown = path.display().to_string();
        let bytes =
            read_table_file(path).map_err(|e| LoadError::single(&shown, format!("cannot read the file: {e}")))?;
        Table::from_bytes(path, &bytes, limits)
    }

    /// Loads a table from its bytes; `path` names it and locates diagnostics.
    pub fn from_bytes(path: &Path, bytes: &[u8], limits: &Limits) -> Result<Table, LoadError> {
        Table::from_digested_bytes(path, bytes, file_digest(bytes), limits)
    }

    /// [`Table::from_bytes`] for a caller that has hashed the file already (`file_digest`:
    /// [`file_digest`] of `bytes`), so that a load hashes the file once.
    pub fn from_digested_bytes(
        path: &Path,
        bytes: &[u8],
        file_digest: [u8; 32],
        limits: &Limits,
    ) -> Result<Table, LoadError> {
        let started = Instant::now();
        let shown = path.display().to_string();
        if table_name(path) == "batch" {
            return Err(LoadError::single(
                &shown,
                "a table may not be named \"batch\": POST /decide/batch is the default table's batch endpoint; \
                 rename the file"
                    .into(),
            ));
        }
        let kind = TableKind::of_path(path).unwrap_or(TableKind::Jev);
        let body = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
        let source = std::str::from_utf8(body).or_else(|e| match kind {
            // A compiled flash table is binary.
            TableKind::FlashCompiled => Ok(""),
            _ => Err(LoadError::single(
                &shown,
                format!("the file is not UTF-8 (invalid byte at offset {})", e.valid_up_to()),
            )),
        })?;
        let (engine, meta) = match kind {
            TableKind::Jev => {
                let (rules, meta) = jev::load(&shown, source, limits)?;
                (Engine::Rules(rules), meta)
            }
            TableKind::RuleSet => {
                let (rules, meta) = ruleset::load(&shown, source, limits)?;
                (Engine::Rules(rules), meta)
            }
            TableKind::Flash | TableKind::FlashCompiled => flash::load(&shown, kind, source, bytes, file_digest)?,
        };
        let name = table_name(path);
        let mut name_json = String::new();
        write_json_string(&name, &mut name_json);
        let version = short_hex(&file_digest);
        let params_json = params_json_of(meta.params.as_ref());
        Ok(Table {
            name,
            file_version: version.clone(),
            version,
            kind,
            path: path.to_path_buf(),
            description: meta.description,
            declared_name: meta.name,
            tests: meta.tests,
            params: meta.params,
            engine: Arc::new(engine),
            loaded_at: SystemTime::now(),
            compile_time: started.elapsed(),
            limits: limits.clone(),
            name_json: name_json.into(),
            switched_off: None,
            packed_source: None,
            file_digest,
            file_params_json: params_json.clone(),
            params_json,
            verdicts: Arc::default(),
        })
    }

    /// The same table with other values for some of its parameters (`overrides`: declared
    /// name → new value), compiled as the file's values are: a tuning variant, or promoted
    /// values. Its `params` show the new values, and its version is the served version of the
    /// file with them ([`served_version`]; the file's version when they are the file's values);
    /// name, file version, path and kill switches stay. Applying values one after the other
    /// gives the table that applying the last of each at once gives: replay builds the table a
    /// snapshot was decided with from the values it records.
    pub fn with_params(&self, overrides: &BTreeMap<String, serde_json::Value>) -> Result<Table, ParamsError> {
        let Engine::Rules(rules) = &*self.engine else {
            return Err(ParamsError::NoParameters { table: self.name.clone(), kind: self.kind.name() });
        };
        let consts = overrides.iter().map(|(k, v)| (k.clone(), Const::from_json(v))).collect();
        let started = Instant::now();
        let engine = Arc::new(Engine::Rules(rules.with_params(&consts)?));
        let mut params = self.params.clone();
        if let Some(serde_json::Value::Object(decls)) = params.as_mut() {
            for (name, value) in overrides {
                if let Some(serde_json::Value::Object(decl)) = decls.get_mut(name) {
                    decl.insert("value".into(), value.clone());
                }
            }
        }
        let params_json = params_json_of(params.as_ref());
        let version = if params_json == self.file_params_json {
            self.file_version.clone()
        } else {
            served_version(&self.file_digest, params_json.as_deref().unwrap_or("{}"))
        };
        Ok(Table {
            name: self.name.clone(),
            version,
            file_version: self.file_version.clone(),
            kind: self.kind,
            path: self.path.clone(),
            description: self.description.clone(),
            declared_name: self.declared_name.clone(),
            tests: self.tests.clone(),
            params,
            engine,
            loaded_at: SystemTime::now(),
            compile_time: started.elapsed(),
            limits: self.limits.clone(),
            name_json: self.name_json.clone(),
            // a variant has the same rules in the same order: the switches apply to it as they are
            switched_off: self.switched_off.clone(),
            packed_source: self.packed_source.clone(),
            file_digest: self.file_digest,
            params_json,
            file_params_json: self.file_params_json.clone(),
            // the values may be in the actions: worked out again for the new engine
            verdicts: Arc::default(),
        })
    }

    /// The parameter values in force on this table (the file's, promoted ones, or a tuning
    /// variant's) as a JSON object sorted by name: what a snapshot records so that replay
    /// decides with the same values. `None` for a table that declares no parameter.
    pub fn params_json(&self) -> Option<&str> {
        self.params_json.as_deref()
    }

    /// Whether the parameter values in force are the file's own.
    pub fn params_are_the_files(&self) -> bool {
        self.params_json == self.file_params_json
    }

    /// Decides one JSON body: parsed once, checked against the table's schema
    /// (when it has one), then evaluated with the rules enabled on this copy.
    pub fn decide(&self, body: &[u8], explain: bool) -> Result<Decision, InputError> {
        self.engine.decide_body(body, explain, self.limits.max_input_depth, self.switched_off.as_deref())
    }

    /// Decides an input already parsed (by [`input::with_parsed`], with this table's
    /// `limits.max_input_depth`): the same decision [`Table::decide`] makes of its body, for a
    /// body that several stages read.
    pub fn decide_parsed(&self, root: &Value<'_>, explain: bool) -> Result<Decision, InputError> {
        self.engine.decide_parsed(root, explain, self.switched_off.as_deref())
    }

    /// Decides one JSON body with the reference evaluator (for tests and checks).
    pub fn decide_reference(&self, body: &[u8]) -> Result<Decision, InputError> {
        input::with_parsed(body, self.limits.max_input_depth, |root| {
            self.engine.decide_reference(&root, self.switched_off.as_deref())
        })?
    }

    /// This table with the rules named by `ids` switched off (kill switches; any switches of
    /// `self` are replaced), and the ids it has no rule for. The engine is shared, not rebuilt.
    /// A flash table has no rules: every id is returned.
    pub fn with_switched_off(&self, ids: &BTreeSet<String>) -> (Table, Vec<String>) {
        let (switched, missing) = match &*self.engine {
            Engine::Rules(e) => e.switch_off(ids),
            Engine::Flash(_) => (None, ids.iter().cloned().collect()),
        };
        (Table { switched_off: switched.map(Arc::new), ..self.clone() }, missing)
    }

    /// The table's name as a JSON string.
    pub fn name_json(&self) -> &str {
        &self.name_json
    }

    /// Keeps the table file's bytes, compressed by their holder, with this table (the registry
    /// keeps them to pin a rollback to this version across restarts).
    pub fn keep_packed_source(&mut self, packed: Option<Arc<[u8]>>) {
        self.packed_source = packed;
    }

    /// The bytes [`Table::keep_packed_source`] kept.
    pub fn packed_source(&self) -> Option<&[u8]> {
        self.packed_source.as_deref()
    }

    /// The ids of the rules switched off on this copy, in rule order (empty without any).
    pub fn switched_off_ids(&self) -> &[String] {
        self.switched_off.as_deref().map_or(&[], SwitchedOff::ids)
    }

    /// Whether rule `i` is switched off on this copy.
    pub fn rule_switched_off(&self, i: usize) -> bool {
        self.switched_off.as_ref().is_some_and(|s| s.contains(i))
    }

    /// Whether rule (or cell) `i` takes part in decisions: enabled in the file and not switched off.
    pub fn outcome_enabled(&self, i: usize) -> bool {
        self.engine.outcome_enabled(i) && !self.rule_switched_off(i)
    }

    /// The action JSON a decision answers with: as built for its input, else as written.
    pub fn action_json<'d>(&'d self, d: &'d Decision) -> &'d str {
        d.action.as_deref().unwrap_or_else(|| self.engine.action_json(d.rule))
    }

    /// What forward-auth answers for a decision ([`Verdict`]): of an action built for the input
    /// (a template), worked out now; of an action as written, worked out once per engine.
    pub fn verdict<'d>(&'d self, d: &'d Decision) -> Cow<'d, Verdict> {
        if let Some(built) = &d.action {
            let action = serde_json::from_str(built).unwrap_or(serde_json::Value::Null);
            return Cow::Owned(Verdict::of_action(&action));
        }
        let verdicts = self.verdicts.get_or_init(|| {
            let count = self.engine.outcome_count();
            (0..=count)
                .map(|i| {
                    let json = self.engine.action_json((i < count).then_some(i));
                    Verdict::of_action(&serde_json::from_str(json).unwrap_or(serde_json::Value::Null))
                })
                .collect()
        });
        let at = d.rule.unwrap_or(verdicts.len() - 1);
        verdicts.get(at).map_or_else(|| Cow::Owned(Verdict::of_action(&serde_json::Value::Null)), Cow::Borrowed)
    }

    /// The `rule_id` of a decision: the id of the rule (or cell) that answered, if any.
    pub fn outcome_id(&self, d: &Decision) -> Option<String> {
        d.rule.and_then(|r| serde_json::from_str(self.engine.outcome_id_json(r)).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_are_the_actions_verdicts_and_worked_out_once() {
        let file = br#"{"rules": [
            {"id": "in", "condition": "x > 1", "action": {"allow": true, "headers": {"X-N": "1"}}},
            {"id": "slow", "condition": "x < 0", "action": {"status": 429}}
        ], "default": {"status": 401}}"#;
        let table = Table::from_bytes(Path::new("gate.json"), file, &Limits::default()).expect("loads");
        for (input, allowed, status) in
            [("{\"x\": 2}", true, 200), ("{\"x\": -1}", false, 429), ("{\"x\": 0}", false, 401)]
        {
            let d = table.decide(input.as_bytes(), false).expect("decides");
            let written = Verdict::of_action(&serde_json::from_str(table.action_json(&d)).expect("json"));
            let v = table.verdict(&d);
            assert_eq!(*v, written, "{input}");
            assert_eq!((v.allowed, v.status), (allowed, status), "{input}");
            assert!(matches!(v, Cow::Borrowed(_)), "an action as written is not worked out per request");
        }
        // a copy with a kill switch shares them
        let (off, _) = table.with_switched_off(&BTreeSet::from(["slow".to_string()]));
        assert!(Arc::ptr_eq(&off.verdicts, &table.verdicts));
    }

    #[test]
    fn a_false_rules_reason_is_written_into_a_string_of_its_size() {
        // long values (cut to 80 characters), several fields, nil, nested paths: a trace
        // writes two strings per false rule and should not grow either
        let file = br#"{"rules": [
            {"id": "a", "condition": "user.age > user.score * 20 && user.name contains \"zz\"", "action": {"n": 1}},
            {"id": "b", "condition": "user[\"bio-text\"] contains \"zzz\"", "action": {"n": 2}},
            {"id": "c", "condition": "(user.missing ?? user.nothing) != nil", "action": {"n": 3}},
            {"id": "d", "condition": "user.age + user.score > 1000 && user.name != nil", "action": {"n": 4}}
        ], "default": {"n": 0}}"#;
        let table = Table::from_bytes(Path::new("sized.json"), file, &Limits::default()).expect("loads");
        let bio = "é long biography ".repeat(20);
        let input = format!(r#"{{"user": {{"name": "a name", "age": 30, "score": 7, "bio-text": "{bio}"}}}}"#);
        let d = table.decide(input.as_bytes(), true).expect("decides");
        let trace = d.trace.expect("a trace");
        assert_eq!(trace.len(), 4, "{trace:?}");
        for entry in &trace {
            assert!(entry.reason.contains("was"), "{entry:?}");
            assert_eq!(entry.reason.capacity(), entry.reason.len(), "{:?}", entry.reason);
            let json = entry.reason_json.as_ref().expect("written for JSON");
            assert_eq!(json.capacity(), json.len(), "{json:?}");
        }
    }

    #[test]
    fn a_load_error_lists_the_first_problems_and_counts_the_others() {
        let problems = |n: usize| -> Vec<Diagnostic> {
            (1..=n).map(|i| Diagnostic::whole_file("t.json", format!("problem {i}"))).collect()
        };
        let e = LoadError::from(problems(crate::diagnostic::MAX_LISTED + 70));
        assert_eq!((e.diagnostics.len(), e.unlisted, e.count()), (50, 70, 120));
        let text = e.to_string();
        assert!(text.contains("problem 50") && !text.contains("problem 51"), "{text}");
        assert!(
            text.ends_with("t.json: 70 more problems are not listed; fix the first ones, then check the file again")
        );
        assert_eq!(e.summary(), "t.json:1:1: problem 1 (and 119 more problems)");
        let one = LoadError::from(problems(1));
        assert_eq!((one.unlisted, one.to_string()), (0, "t.json:1:1: error: problem 1".to_string()));
        assert_eq!(one.summary(), "t.json:1:1: problem 1");
    }

    #[test]
    fn a_table_broken_in_every_rule_lists_its_first_problems_in_file_order() {
        // Rule i is on line i + 2. Every rule has a problem the builder finds; rules 0 and 150
        // also one the reader finds (an unknown key). The builder renders only the problems
        // that can be listed: the listing is the first 50 of the file all the same.
        let rules: Vec<String> = (0..200)
            .map(|i| match i {
                0 | 150 => format!(r#"{{"id": "r{i}", "conditon": 1, "condition": "x >", "action": {{}}}}"#),
                _ if i % 2 == 0 => format!(r#"{{"id": "r{i}", "condition": "x >", "action": {{}}}}"#),
                _ => format!(r#"{{"id": "r{i}", "condition": "x > 1", "action": 5}}"#),
            })
            .collect();
        let text = format!("[\n{}\n]\n", rules.join(",\n"));
        let e = Table::from_bytes(Path::new("t.json"), text.as_bytes(), &Limits::default()).unwrap_err();
        let lines: Vec<usize> = e.diagnostics.iter().map(|d| d.line).collect();
        let expected: Vec<usize> = [2].into_iter().chain(2..=50).collect();
        assert_eq!(lines, expected, "{e}");
        assert_eq!((e.count(), e.unlisted), (202, 152));
        assert!(e.diagnostics[0].message.contains("conditon") || e.diagnostics[1].message.contains("conditon"), "{e}");
        // a rule set the same way
        let rules: String = (0..200).map(|i| format!("  - {{id: r{i}, when: 'x >', action: {{}}}}\n")).collect();
        let e = Table::from_bytes(Path::new("t.yaml"), format!("rules:\n{rules}").as_bytes(), &Limits::default());
        let e = e.unwrap_err();
        assert_eq!(e.diagnostics.iter().map(|d| d.line).collect::<Vec<_>>(), (2..=51).collect::<Vec<_>>(), "{e}");
        assert_eq!(e.unlisted, 150);
    }
}
