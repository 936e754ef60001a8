//! The decision pipeline: resolve the table → parse the input once → evaluate → render.
//!
//! `POST /decide`, `/authz` and `clef decide` all go through here, so that what is added to
//! a decision later (routing to another box, snapshots, shadow and canary tables, tuning) is
//! a stage of this pipeline rather than code repeated in each handler.

use std::sync::Arc;
use std::time::SystemTime;

use crate::input::InputError;
use crate::suggest::did_you_mean;
use crate::table::registry::{Slot, Tables};
use crate::table::{Decision, ResponseMeta, Table};

/// Why a request got no decision.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// no table was named and none is the default
    NoDefaultTable,
    /// no table has this name
    UnknownTable {
        /// the name asked for
        name: String,
        /// the loaded name closest to it
        close: Option<String>,
        /// some loaded names, to list when none is close
        known: Vec<String>,
    },
    /// the table's file has never loaded
    Unavailable {
        /// the table
        name: String,
        /// why
        why: String,
    },
    /// the body is not an input this table takes
    Input(InputError),
}

impl Refusal {
    /// The HTTP status (SPEC §6).
    pub fn status(&self) -> u16 {
        match self {
            Refusal::NoDefaultTable | Refusal::UnknownTable { .. } => 404,
            Refusal::Unavailable { .. } => 503,
            Refusal::Input(e) => e.status(),
        }
    }

    /// The API error code (SPEC §6).
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::NoDefaultTable | Refusal::UnknownTable { .. } => "unknown_table",
            Refusal::Unavailable { .. } => "table_unavailable",
            Refusal::Input(e) => e.code(),
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NoDefaultTable => f.write_str("no default table is configured; use POST /decide/{table}"),
            Refusal::UnknownTable { name, close: Some(close), .. } => {
                write!(f, "no table named \"{name}\"; did you mean \"{close}\"?")
            }
            Refusal::UnknownTable { name, known, .. } if known.is_empty() => {
                write!(f, "no table named \"{name}\"; no tables are loaded")
            }
            Refusal::UnknownTable { name, known, .. } => {
                write!(f, "no table named \"{name}\"; the tables are {}", known.join(", "))
            }
            Refusal::Unavailable { name, why } => write!(f, "table \"{name}\" is not available: {why}"),
            Refusal::Input(e) => write!(f, "{e}"),
        }
    }
}

/// The table that serves `name` (or the default table when `name` is `None`), with its slot.
pub fn resolve<'t>(
    tables: &'t Tables,
    name: Option<&str>,
    default: Option<&str>,
) -> Result<(&'t Slot, &'t Arc<Table>), Refusal> {
    let name = name.or(default).ok_or(Refusal::NoDefaultTable)?;
    let Some(slot) = tables.get(name) else { return Err(unknown_table(tables, name)) };
    match &slot.current {
        Some(table) => Ok((slot, table)),
        None => Err(Refusal::Unavailable {
            name: name.to_string(),
            why: slot.error.clone().unwrap_or_else(|| "it has never loaded".into()),
        }),
    }
}

/// The refusal for a name no table has, naming the closest loaded table.
pub fn unknown_table(tables: &Tables, name: &str) -> Refusal {
    let names = || tables.slots.keys().map(String::as_str);
    Refusal::UnknownTable {
        name: name.to_string(),
        close: did_you_mean(name, names()).map(str::to_string),
        known: names().take(20).map(str::to_string).collect(),
    }
}

/// How to answer one decision.
#[derive(Debug, Clone, Copy)]
pub struct Options<'a> {
    /// add the trace of the rules tried
    pub explain: bool,
    /// who decides (`local`, or a peer's id)
    pub instance: &'a str,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Options { explain: false, instance: "local" }
    }
}

/// Decides `body` with `table` and appends the response body (SPEC §6) to `out`; returns the
/// decision for the caller's counters.
pub fn decide(table: &Table, body: &[u8], options: &Options<'_>, out: &mut String) -> Result<Decision, InputError> {
    let decision = table.decide(body, options.explain)?;
    let meta = ResponseMeta { timestamp: SystemTime::now(), snapshot_id: None, instance: options.instance };
    table.write_decision(&decision, &meta, out);
    Ok(decision)
}

/// One input of a batch: its line number (1-based: the NDJSON line, or the array element)
/// and its bytes.
pub type BatchItem<'b> = (usize, &'b [u8]);

/// The inputs of a batch body: NDJSON (one object per line; blank lines are skipped) or a JSON
/// array of objects. `Err` when an array body is not valid JSON as a whole.
pub fn batch_items(body: &[u8]) -> Result<Vec<BatchItem<'_>>, InputError> {
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    let start = body.iter().position(|b| !b.is_ascii_whitespace());
    if start.is_some_and(|i| body[i] == b'[') {
        let text = std::str::from_utf8(body).map_err(|e| InputError::InvalidJson {
            offset: e.valid_up_to(),
            message: "the body is not UTF-8".into(),
        })?;
        let items: Vec<&serde_json::value::RawValue> = serde_json::from_str(text).map_err(|e| {
            let message = e.to_string();
            let message = message.split(" at line ").next().unwrap_or(&message).to_string();
            InputError::InvalidJson { offset: byte_offset(text, e.line(), e.column()), message }
        })?;
        return Ok(items.into_iter().enumerate().map(|(i, raw)| (i + 1, raw.get().as_bytes())).collect());
    }
    Ok(body
        .split(|&b| b == b'\n')
        .enumerate()
        .filter(|(_, line)| line.iter().any(|b| !b.is_ascii_whitespace()))
        .map(|(i, line)| (i + 1, line))
        .collect())
}

/// The byte offset of serde_json's 1-based line and column.
fn byte_offset(text: &str, line: usize, column: usize) -> usize {
    let mut offset = 0;
    for (i, l) in text.split_inclusive('\n').enumerate() {
        if i + 1 == line {
            return offset + column.saturating_sub(1).min(l.len());
        }
        offset += l.len();
    }
    text.len()
}

/// Decides every input of a batch with `table`, appending one NDJSON line per input in input
/// order to `out`: what the single call answers, or `{"error": {…}, "line": N}`. `on_each` sees
/// every outcome (for the caller's counters).
pub fn decide_batch(
    table: &Table,
    items: &[BatchItem<'_>],
    options: &Options<'_>,
    out: &mut String,
    mut on_each: impl FnMut(&Result<Decision, InputError>),
) {
    for &(line, bytes) in items {
        let outcome = decide(table, bytes, options, out);
        if let Err(e) = &outcome {
            write_line_error(e.code(), &e.to_string(), line, out);
        }
        out.push('\n');
        on_each(&outcome);
    }
}

/// `{"error": {"code", "message"}, "line": N}`: a batch line that got no decision.
pub fn write_line_error(code: &str, message: &str, line: usize, out: &mut String) {
    use crate::expr::json::write_json_string;
    out.push_str("{\"error\":{\"code\":");
    write_json_string(code, out);
    out.push_str(",\"message\":");
    write_json_string(message, out);
    out.push_str("},\"line\":");
    out.push_str(&line.to_string());
    out.push('}');
}
