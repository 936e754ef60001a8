//! Promoted parameter values: an overlay on the table file, kept in `state_dir`.
//!
//! A promotion never rewrites the table file (it may be read-only, and the next deploy would
//! overwrite it). It writes `state_dir/tuning/overlays/NAME.json`:
//!
//! ```json
//! {"table": "search_rewrite", "params": {"error_rate_high": {"file": 0.05, "value": 0.06}}}
//! ```
//!
//! Whenever the table loads, each promoted value replaces the file's value **while the file
//! still says what it said at the promotion** (`file`). Once the file's own value of that
//! parameter changes — the promoted value was committed (`clef tune export`), or someone set
//! another — the file wins and the entry is dropped. Editing anything else in the file keeps
//! the promoted values.
//!
//! The overlay is checked as strictly as the table file itself before anything in it is
//! served ([`check`]): a promoted value must pass its parameter's declaration (a number within
//! `min` and `max` for a tunable one) and be the file's value moved by whole `step`s, as
//! promotions make it. An overlay that fails (a bit flipped on the SD card: 0.06 → 8.06) gives
//! way to its last good copy, and `GET /health` says so (see [`crate::state_file`]).

use crate::state_file::CheckFailed;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::expr::same_value;
use crate::state_file;
use crate::table::params::Tunable;
use crate::table::{Table, TableKind};

/// The largest overlay file read back.
const MAX_OVERLAY_BYTES: u64 = 1 << 20;

/// One table's promoted values.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Overlay {
    /// the table
    pub table: String,
    /// parameter → its value in the file when promoted, and the promoted value
    pub params: BTreeMap<String, Promoted>,
}

/// A promoted value, and the file's value it replaces.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Promoted {
    /// what the table file said when the value was promoted
    pub file: serde_json::Value,
    /// the promoted value
    pub value: serde_json::Value,
}

fn path_of(folder: &Path, table: &str) -> PathBuf {
    folder.join(format!("{table}.json"))
}

/// The overlay of `table` (whose parameters are declared by `params`: the file's, or with
/// promoted values, the bounds and steps are the same) in `folder`, checked: the file, else
/// its last good copy, with why the file was not used (see [`crate::state_file::load`]).
pub fn read(folder: &Path, table: &str, params: Option<&serde_json::Value>) -> state_file::Loaded<Overlay> {
    state_file::load(&path_of(folder, table), MAX_OVERLAY_BYTES, |o: &Overlay| check(o, table, params))
}

/// Writes `overlay` of `table` atomically, keeping the overlay it replaces as the last good
/// copy when that one passes [`check`]; an overlay with no entry removes the file.
fn write(folder: &Path, table: &str, overlay: &Overlay, params: Option<&serde_json::Value>) -> std::io::Result<()> {
    let path = path_of(folder, table);
    if overlay.params.is_empty() {
        return state_file::remove(&path);
    }
    let bytes = serde_json::to_vec_pretty(overlay).map_err(std::io::Error::other)?;
    state_file::save(&path, &bytes, MAX_OVERLAY_BYTES, |old| {
        serde_json::from_slice::<Overlay>(old).is_ok_and(|o| check(&o, table, params).is_ok())
    })
}

/// Whether `overlay` may be served for `table`, whose parameters `params` declares (the
/// file's, or with promoted values: bounds and steps are the same): it names the table, and
/// every entry for a declared parameter passes the declaration with its promoted value in
/// place, as the table's loader checks a value (for a tunable parameter: a number within
/// `min` and `max`). Entries for parameters the table no longer declares are left to [`apply`]
/// (they are stale).
pub fn check(overlay: &Overlay, table: &str, params: Option<&serde_json::Value>) -> Result<(), CheckFailed> {
    if overlay.table != table {
        return Err(CheckFailed(format!(
            "it holds the promoted values of table \"{}\", not \"{table}\"",
            overlay.table
        )));
    }
    for (name, p) in &overlay.params {
        let Some(decl) = params.and_then(|ps| ps.get(name)) else { continue };
        let mut with_value = decl.clone();
        if let Some(d) = with_value.as_object_mut() {
            d.insert("value".into(), p.value.clone());
        }
        Tunable::read(name, &with_value).map_err(|e| CheckFailed(e.to_string()))?;
    }
    Ok(())
}

/// The declared value of parameter `name` in `params` (a table's `params` as written).
fn declared(params: Option<&serde_json::Value>, name: &str) -> Option<serde_json::Value> {
    params?.get(name)?.get("value").cloned()
}

/// The values of `overlay` that still apply to a table whose file declares `file_params`, and
/// the entries that no longer do (the file's value changed), by name.
fn applicable(
    overlay: &Overlay,
    file_params: Option<&serde_json::Value>,
) -> (BTreeMap<String, serde_json::Value>, Vec<String>) {
    let mut apply = BTreeMap::new();
    let mut stale = Vec::new();
    for (name, p) in &overlay.params {
        match declared(file_params, name) {
            Some(now) if same_value(&now, &p.file) => {
                apply.insert(name.clone(), p.value.clone());
            }
            _ => stale.push(name.clone()),
        }
    }
    (apply, stale)
}

/// `table` (as loaded from its file) with its promoted values, if `folder` has an overlay for it
/// that still applies; entries the file has moved past are dropped from the overlay (logged). An
/// overlay that fails [`check`] is not served: its last good copy is, if it passes, and the
/// failure is reported for `GET /health` until the overlay passes again.
pub fn apply(table: Table, folder: &Path) -> Table {
    let path = path_of(folder, &table.name);
    let loaded = read(folder, &table.name, table.params.as_ref());
    match &loaded.problem {
        Some(why) => {
            let used = if loaded.value.is_some() { "" } else { "; the file's values serve" };
            let (detail, summary) = (&why.detail, &why.summary);
            log::error!(
                "table \"{}\": the file of its promoted values ({}) {detail}{used}",
                table.name,
                path.display()
            );
            let message = format!("the file of its promoted values {summary}{used}");
            state_file::report("tuning", &table.name, "overlay", message);
        }
        None => state_file::resolve("tuning", &table.name, "overlay"),
    }
    let Some(overlay) = loaded.value else { return table };
    let (values, stale) = applicable(&overlay, table.params.as_ref());
    if !stale.is_empty() {
        log::info!(
            "table \"{}\": the file changed the value of {}: the promoted value no longer applies",
            table.name,
            stale.join(", ")
        );
        let mut kept = overlay.clone();
        kept.params.retain(|name, _| !stale.contains(name));
        if let Err(e) = write(folder, &table.name, &kept, table.params.as_ref()) {
            log::error!("table \"{}\": cannot update {}: {e}", table.name, path.display());
        }
    }
    if values.is_empty() {
        return table;
    }
    match table.with_params(&values) {
        Ok(promoted) => promoted,
        Err(e) => {
            log::error!(
                "table \"{}\": its promoted values do not compile ({e}); serving the file's values",
                table.name
            );
            let message = "the promoted values do not compile with the table; the file's values serve".to_string();
            state_file::report("tuning", &table.name, "overlay", message);
            table
        }
    }
}

/// Why promoted values were not stored.
#[derive(Debug)]
pub enum PromoteFailed {
    /// the table declares no parameter of this name
    Undeclared(String),
    /// the values do not pass the table's declarations
    Invalid(CheckFailed),
    /// the file of promoted values could not be written
    Write {
        /// the file
        path: PathBuf,
        /// what the system said
        error: std::io::Error,
    },
}

impl std::fmt::Display for PromoteFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PromoteFailed::Undeclared(name) => write!(f, "the table declares no parameter \"{name}\""),
            PromoteFailed::Invalid(why) => why.fmt(f),
            PromoteFailed::Write { path, error } => write!(f, "{}: {error}", path.display()),
        }
    }
}

/// Why `clef tune export` has no table text to print.
#[derive(Debug)]
pub enum ExportFailed {
    /// the table file cannot be read
    Read {
        /// the file as shown
        shown: String,
        /// what the system said
        error: std::io::Error,
    },
    /// the table file does not load
    Load(crate::table::LoadError),
    /// the file of promoted values is unreadable or fails its checks
    Overlay {
        /// the table
        table: String,
        /// what is wrong with the file
        detail: String,
    },
    /// the table file is not UTF-8
    NotUtf8 {
        /// the file as shown
        shown: String,
        /// where
        error: std::str::Utf8Error,
    },
    /// the file does not write the value of a promoted parameter where it can be replaced
    ValueNotFound {
        /// the file as shown
        shown: String,
        /// the parameter
        name: String,
    },
    /// the text with the promoted values does not load
    ExportDoesNotLoad(crate::table::LoadError),
    /// the text with the promoted values loads without one of them
    ValueLost(String),
}

impl std::fmt::Display for ExportFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExportFailed::Read { shown, error } => write!(f, "{shown}: cannot read the file: {error}"),
            ExportFailed::Load(e) => e.fmt(f),
            ExportFailed::Overlay { table, detail } => {
                write!(f, "the file of promoted values of \"{table}\" {detail}")
            }
            ExportFailed::NotUtf8 { shown, error } => write!(f, "{shown}: {error}"),
            ExportFailed::ValueNotFound { shown, name } => {
                write!(f, "{shown}: cannot find the value of parameter \"{name}\" in the file")
            }
            ExportFailed::ExportDoesNotLoad(e) => write!(f, "the exported table does not load: {e}"),
            ExportFailed::ValueLost(name) => {
                write!(f, "the exported table does not hold the promoted value of \"{name}\"")
            }
        }
    }
}

/// Stores `values` in `folder` as promoted values of `served` (the table as it serves now, maybe
/// already with promoted values), keeping what the file says for each.
pub fn promote(
    folder: &Path,
    served: &Table,
    values: &serde_json::Map<String, serde_json::Value>,
) -> Result<(), PromoteFailed> {
    let loaded = read(folder, &served.name, served.params.as_ref());
    if let Some(why) = loaded.problem.as_ref().map(|p| &p.detail) {
        log::warn!(
            "table \"{}\": the file of its promoted values {why}; the promotion starts from what passes",
            served.name
        );
    }
    let mut overlay = loaded.value.unwrap_or_else(|| Overlay { table: served.name.clone(), ..Overlay::default() });
    for (name, value) in values {
        // the file's value: what an earlier promotion recorded, else what serves now (the file's)
        let file = match overlay.params.get(name) {
            Some(p) => p.file.clone(),
            None => declared(served.params.as_ref(), name).ok_or_else(|| PromoteFailed::Undeclared(name.clone()))?,
        };
        if same_value(&file, value) {
            overlay.params.remove(name);
        } else {
            overlay.params.insert(name.clone(), Promoted { file, value: value.clone() });
        }
    }
    check(&overlay, &served.name, served.params.as_ref()).map_err(PromoteFailed::Invalid)?;
    write(folder, &served.name, &overlay, served.params.as_ref())
        .map_err(|error| PromoteFailed::Write { path: path_of(folder, &served.name), error })
}

/// The text of the table file at `path` with the promoted values of `folder` written in place
/// of the file's values (everything else as it is, comments included): what `clef tune export`
/// prints. The result is loaded again to check it.
pub fn export(path: &Path, folder: &Path) -> Result<String, ExportFailed> {
    let shown = path.display().to_string();
    let bytes =
        crate::table::read_table_file(path).map_err(|error| ExportFailed::Read { shown: shown.clone(), error })?;
    let limits = crate::table::Limits::default();
    let table = Table::from_bytes(path, &bytes, &limits).map_err(ExportFailed::Load)?;
    let loaded = read(folder, &table.name, table.params.as_ref());
    if let Some(why) = loaded.problem {
        return Err(ExportFailed::Overlay { table: table.name.clone(), detail: why.detail });
    }
    let overlay = loaded.value.unwrap_or_default();
    let (values, _) = applicable(&overlay, table.params.as_ref());
    let (bom, body) = match bytes.strip_prefix(b"\xEF\xBB\xBF") {
        Some(rest) => ("\u{feff}", rest),
        None => ("", &bytes[..]),
    };
    let text = std::str::from_utf8(body).map_err(|error| ExportFailed::NotUtf8 { shown: shown.clone(), error })?;
    let mut spans = Vec::new();
    for (name, value) in &values {
        let span = match table.kind {
            TableKind::Jev => json_value_span(text, name),
            TableKind::RuleSet => yaml_value_span(text, name),
            TableKind::Flash | TableKind::FlashCompiled => None,
        }
        .ok_or_else(|| ExportFailed::ValueNotFound { shown: shown.clone(), name: name.clone() })?;
        spans.push((span, value.to_string()));
    }
    spans.sort_by_key(|(s, _)| std::cmp::Reverse(s.start));
    let mut out = text.to_string();
    for (span, value) in spans {
        out.replace_range(span, &value);
    }
    let out = format!("{bom}{out}");
    let check = Table::from_bytes(path, out.as_bytes(), &limits).map_err(ExportFailed::ExportDoesNotLoad)?;
    for (name, value) in &values {
        let now = declared(check.params.as_ref(), name);
        if !now.as_ref().is_some_and(|v| same_value(v, value)) {
            return Err(ExportFailed::ValueLost(name.clone()));
        }
    }
    Ok(out)
}

/// Where `params.NAME.value` is written in a Jev table's text.
fn json_value_span(text: &str, name: &str) -> Option<std::ops::Range<usize>> {
    use serde_json::value::RawValue;
    let root: BTreeMap<String, &RawValue> = serde_json::from_str(text).ok()?;
    let params: BTreeMap<String, &RawValue> = serde_json::from_str(root.get("params")?.get()).ok()?;
    let decl: BTreeMap<String, &RawValue> = serde_json::from_str(params.get(name)?.get()).ok()?;
    let raw = decl.get("value")?.get();
    let start = raw.as_ptr() as usize - text.as_ptr() as usize;
    Some(start..start + raw.len())
}

/// Where `params.NAME.value` is written in a YAML rule set's text.
fn yaml_value_span(text: &str, name: &str) -> Option<std::ops::Range<usize>> {
    let options = crate::yaml::Options { max_depth: 64, depth_hint: "a rule set needs a few", what: "a rule set" };
    let doc = crate::yaml::parse(text, &options).ok()?;
    let node = doc.root?.get("params")?.get(name)?.get("value")?.clone();
    node.scalar()?;
    Some(node.span)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const JEV: &str = r#"{
  "params": {"rate": {"value": 0.05, "min": 0, "max": 0.2, "step": 0.01, "tunable": true},
             "n": {"value": 3}},
  "rules": [{"id": "r", "condition": "x > params.rate", "action": {"a": 1}}]
}
"#;

    const YAML: &str = "# the rule set\nparams:\n  rate: {value: 0.05, min: 0, max: 0.2, step: 0.01, tunable: true}   # tuned\nrules:\n  - id: r\n    when: x > params.rate\n    action: {a: 1}\n";

    fn setup(name: &str, text: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let table = dir.path().join(name);
        std::fs::write(&table, text).unwrap();
        let overlays = dir.path().join("overlays");
        (dir, table, overlays)
    }

    fn rate(t: &Table) -> serde_json::Value {
        declared(t.params.as_ref(), "rate").unwrap()
    }

    #[test]
    fn promoted_values_apply_until_the_file_changes_them() {
        for (name, text) in [("t.json", JEV), ("t.yaml", YAML)] {
            let (_dir, path, folder) = setup(name, text);
            let table = Table::load(&path, &Default::default()).unwrap();
            promote(&folder, &table, &json!({"rate": 0.06}).as_object().unwrap().clone()).unwrap();
            let served = apply(Table::load(&path, &Default::default()).unwrap(), &folder);
            assert_eq!(rate(&served), json!(0.06));
            // decisions see the promoted value
            let d = served.decide(br#"{"x": 0.055}"#, false).unwrap();
            assert_eq!(d.rule, None, "0.055 is not above 0.06");
            // promoting again keeps what the file says
            promote(&folder, &served, &json!({"rate": 0.07}).as_object().unwrap().clone()).unwrap();
            let o = read(&folder, "t", table.params.as_ref()).value.unwrap();
            assert_eq!(o.params["rate"], Promoted { file: json!(0.05), value: json!(0.07) });
            // the export has the value in place, and the rest as written
            let exported = export(&path, &folder).unwrap();
            assert_eq!(exported, text.replacen("0.05", "0.07", 1), "{name}");
            // the file moves on: the file wins, the overlay entry goes
            std::fs::write(&path, text.replacen("0.05", "0.04", 1)).unwrap();
            let served = apply(Table::load(&path, &Default::default()).unwrap(), &folder);
            assert_eq!(rate(&served), json!(0.04));
            assert_eq!(read(&folder, "t", table.params.as_ref()).value, None);
        }
    }

    #[test]
    fn a_table_without_an_overlay_exports_as_written() {
        let (_dir, path, folder) = setup("t.json", JEV);
        assert_eq!(export(&path, &folder).unwrap(), JEV);
    }
}
