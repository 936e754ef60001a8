//! One snapshot: what the pipeline hands the recorder ([`Event`]), its NDJSON line (written
//! by hand into a reused buffer: no allocation, no serde on the hot path), and the line read
//! back ([`RawRecord`], borrowed from the line with serde).
//!
//! A line holds every field of SPEC §8.1, always in this order, `null` where there is nothing:
//!
//! ```text
//! {"id":"0193…","timestamp":"2026-11-30T08:23:45.123Z","table":"risk","version":"4209bd56f1d9",
//!  "file_version":"4209bd56f1d9","kind":"jev","instance":"local","input":{…as received…},
//!  "tried":3,"rule_id":"rule_001","matched":true,"action":{…},"confidence":1.0,
//!  "warnings":[{"rule_id":…,"message":…}],"degraded":null,"shadow":null,"variant":"baseline",
//!  "params":{"max_amount_usd":5000},"disabled_rules":[],"pinned":false,"canary_for":null,
//!  "traceparent":null,"latency_ns":1234}
//! ```
//!
//! What decided is recorded whole (SPEC §8.1 revision 4): the served `version` and the
//! `file_version` (they differ while promoted parameter values serve), the tuning arm as the
//! response names it (`variant`: `baseline`, `v1` … for a tuned table, else `null`), the
//! parameter values in force (`params`: the variant's, or the table's including promoted
//! values; `null` for a table without parameters) and the rules switched off; replay builds
//! the same table from the file with them.
//!
//! The input is copied as received (a byte order mark dropped, line breaks, which JSON allows
//! only as whitespace between tokens, turned into spaces so the record stays one line), so that
//! replay parses exactly the bytes the decision parsed. With `redact`, it is parsed, the named
//! fields replaced with `"<redacted>"`, and written again (`"redacted":true` follows it when a
//! field was replaced).
// This file is being changed on other branches, so its proofs are stated here rather than written
// into each line: every index is checked by the test beside it (a length, a loop bound, a position
// the scan just found).
#![allow(clippy::indexing_slicing)]

use std::borrow::Cow;
use std::fmt::Write as _;
use std::time::SystemTime;

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::config::{KeepClass, MAX_REDACT};
use super::id::SnapshotId;
use crate::expr::json::write_json_string;
use crate::render::{self, write_timestamp, ArmName, LOCAL_INSTANCE};
use crate::table::{Decision, Table};

/// What replaces a redacted input field.
pub const REDACTED: &str = "<redacted>";

/// The longest `traceparent` recorded (a W3C `traceparent` is 55 characters); longer values
/// are cut.
pub const MAX_TRACEPARENT: usize = 256;

/// The fields of SPEC §8.1 that every complete snapshot carries (`audit_completeness`).
pub const AUDIT_FIELDS: &[&str] = &[
    "id",
    "timestamp",
    "table",
    "version",
    "instance",
    "input",
    "tried",
    "rule_id",
    "action",
    "confidence",
    "warnings",
    "shadow",
    "variant",
    "params",
    "disabled_rules",
    "traceparent",
    "latency_ns",
];

/// One decision, as the pipeline knows it: what decided it (its provenance: the table, its
/// versions and kind, the parameter values in force, the tuning arm, the rules switched off,
/// a rollback pin, a canary's role) and what it answered. What the recorder needs to write
/// its snapshot, and what replay needs to decide it again the same way.
#[derive(Clone, Copy, Debug)]
pub struct Event<'a> {
    /// the table that decided, as served: its name, versions, kind, rules and kill switches
    pub table: &'a Table,
    /// the table whose engine made the decision: `table`, or a tuning variant of it; the
    /// parameter values in force are its values
    pub decider: &'a Table,
    /// its decision
    pub decision: &'a Decision,
    /// the input as received (the request body, or the input `/authz` built)
    pub input: &'a [u8],
    /// when it was decided: the response's `timestamp` (the id's time comes from it too)
    pub timestamp: SystemTime,
    /// how long evaluating took, in nanoseconds
    pub latency_ns: u64,
    /// the ids of the table's rules switched off at that moment (kill switches)
    pub disabled_rules: &'a [String],
    /// the tuning arm that decided a tuned table's decision, as the response names it
    /// (`baseline` or a variant); `None` for a table that is not tuned
    pub variant: Option<ArmName<'a>>,
    /// a rollback pin held the table at this (older) version
    pub pinned: bool,
    /// the table asked for, when `table` is its canary and answered instead
    pub canary_for: Option<&'a str>,
    /// what the shadow table answered, when one ran
    pub shadow: Option<Shadow<'a>>,
    /// the caller's `traceparent` header
    pub traceparent: Option<&'a [u8]>,
    /// how sure the decision is: 1.0 for deterministic rules
    pub confidence: f64,
}

impl<'a> Event<'a> {
    /// An event of `table` deciding by itself, made now, by `local`, with the rules switched
    /// off on `table` (its kill switches) and its parameter values, no tuning arm, pin, canary,
    /// shadow or `traceparent`; set the other fields as needed.
    pub fn new(table: &'a Table, decision: &'a Decision, input: &'a [u8]) -> Event<'a> {
        Event {
            table,
            decider: table,
            decision,
            input,
            timestamp: SystemTime::now(),
            latency_ns: 0,
            disabled_rules: table.switched_off_ids(),
            variant: None,
            pinned: false,
            canary_for: None,
            shadow: None,
            traceparent: None,
            confidence: 1.0,
        }
    }

    /// Whether the decision belongs to `class`.
    pub fn is(&self, class: KeepClass) -> bool {
        match class {
            KeepClass::Errors => !self.decision.warnings.is_empty(),
            KeepClass::Degraded => self.decision.degraded_reason.is_some(),
            KeepClass::ShadowDisagreement => self.shadow.is_some_and(|s| !s.agrees),
        }
    }
}

/// What the shadow table answered for the same input (SPEC §8.3).
#[derive(Clone, Copy, Debug)]
pub struct Shadow<'a> {
    /// the shadow table
    pub table: &'a Table,
    /// its decision
    pub decision: &'a Decision,
    /// whether it agreed with the decision served
    pub agrees: bool,
}

/// Per-thread scratch space of the encoder (so that encoding allocates nothing once warm).
#[derive(Default)]
pub(crate) struct Scratch {
    /// a warning's message
    pub text: String,
    /// the redacted input
    pub redacted: String,
    /// the encoded line, before it is copied into the queue
    pub line: String,
}

/// Appends the snapshot line of `ev` with id `id` (and its `\n`) to `out`. `redacted`: the
/// input as [`write_redacted`] wrote it, when `redact` is on; `msg` is scratch space.
pub(crate) fn encode(id: SnapshotId, ev: &Event<'_>, redacted: Option<&str>, msg: &mut String, out: &mut String) {
    let d = ev.decision;
    out.push_str("{\"id\":\"");
    out.push_str(&id.text());
    out.push_str("\",\"timestamp\":\"");
    write_timestamp(ev.timestamp, out);
    out.push_str("\",\"table\":");
    write_json_string(&ev.table.name, out);
    out.push_str(",\"version\":");
    write_json_string(&ev.table.version, out);
    out.push_str(",\"file_version\":");
    write_json_string(&ev.table.file_version, out);
    out.push_str(",\"kind\":\"");
    out.push_str(ev.table.kind.name()); // a fixed word: nothing to escape
    out.push_str("\",\"instance\":\"");
    out.push_str(LOCAL_INSTANCE);
    out.push('"');
    out.push_str(",\"input\":");
    match redacted {
        None => write_input(ev.input, out),
        Some(text) => out.push_str(text),
    }
    out.push_str(",\"tried\":");
    write_u64(d.evaluated as u64, out);
    out.push(',');
    render::write_outcome(ev.table, d, out);
    out.push_str(",\"confidence\":");
    write_f64(ev.confidence, out);
    out.push_str(",\"warnings\":");
    render::write_warnings(ev.table, d, msg, out);
    out.push_str(",\"degraded\":");
    match d.degraded_reason {
        Some(reason) => write_json_string(reason, out),
        None => out.push_str("null"),
    }
    out.push_str(",\"shadow\":");
    match &ev.shadow {
        Some(s) => {
            out.push_str("{\"table\":");
            write_json_string(&s.table.name, out);
            out.push_str(",\"version\":");
            write_json_string(&s.table.version, out);
            out.push_str(",\"rule_id\":");
            render::write_rule_id(s.table, s.decision.rule, out);
            out.push_str(",\"action\":");
            out.push_str(s.table.action_json(s.decision));
            out.push_str(",\"agrees\":");
            out.push_str(if s.agrees { "true" } else { "false" });
            out.push('}');
        }
        None => out.push_str("null"),
    }
    out.push_str(",\"variant\":");
    match ev.variant {
        Some(ArmName::Baseline) => out.push_str("\"baseline\""),
        // the id as a JSON string already
        Some(ArmName::Variant(id_json)) => out.push_str(id_json),
        None => out.push_str("null"),
    }
    out.push_str(",\"params\":");
    out.push_str(ev.decider.params_json().unwrap_or("null"));
    out.push_str(",\"disabled_rules\":[");
    for (i, r) in ev.disabled_rules.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_json_string(r, out);
    }
    out.push_str("],\"pinned\":");
    out.push_str(if ev.pinned { "true" } else { "false" });
    out.push_str(",\"canary_for\":");
    match ev.canary_for {
        Some(name) => write_json_string(name, out),
        None => out.push_str("null"),
    }
    out.push_str(",\"traceparent\":");
    match ev.traceparent {
        Some(t) => {
            let t = &t[..t.len().min(MAX_TRACEPARENT)];
            write_json_string(&String::from_utf8_lossy(t), out);
        }
        None => out.push_str("null"),
    }
    out.push_str(",\"latency_ns\":");
    write_u64(ev.latency_ns, out);
    out.push_str("}\n");
}

/// The input as received: a byte order mark dropped, surrounding whitespace trimmed, line
/// breaks (whitespace between JSON tokens: inside strings JSON has them escaped) turned into
/// spaces. Bytes that are not UTF-8 (which no decided input has) are recorded as `null`.
fn write_input(input: &[u8], out: &mut String) {
    let input = input.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(input).trim_ascii();
    let Ok(text) = std::str::from_utf8(input) else {
        out.push_str("null");
        return;
    };
    if text.is_empty() {
        out.push_str("null");
        return;
    }
    let mut rest = text;
    while let Some(i) = memchr::memchr2(b'\n', b'\r', rest.as_bytes()) {
        out.push_str(&rest[..i]);
        out.push(' ');
        rest = &rest[i + 1..];
    }
    out.push_str(rest);
}

/// The input with the `redact` paths (split at the dots; at most [`MAX_REDACT`]) replaced,
/// followed by `,"redacted":true` when a field was (line breaks turned into spaces). The input is
/// scanned, not parsed into values: no allocation per field and no recursion (a worker's stack
/// is small and inputs nest deep). An input that is not valid JSON is not written at all
/// (`null`): what it holds might be what must not be recorded.
pub(crate) fn write_redacted(input: &[u8], redact: &[Vec<String>], out: &mut String) {
    let input = input.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(input).trim_ascii();
    let mut spans = Vec::new();
    let text = std::str::from_utf8(input).ok();
    let (Some(text), Some(())) = (text, redact_spans(input, &redact[..redact.len().min(MAX_REDACT)], &mut spans))
    else {
        out.push_str("null,\"redacted\":true");
        return;
    };
    let mut at = 0;
    for &(start, end) in &spans {
        push_one_line(&text[at..start], out);
        write_json_string(REDACTED, out);
        at = end;
    }
    push_one_line(&text[at..], out);
    if !spans.is_empty() {
        out.push_str(",\"redacted\":true");
    }
}

/// Appends JSON text with its line breaks (whitespace between tokens) turned into spaces.
fn push_one_line(mut rest: &str, out: &mut String) {
    while let Some(i) = memchr::memchr2(b'\n', b'\r', rest.as_bytes()) {
        out.push_str(&rest[..i]);
        out.push(' ');
        rest = &rest[i + 1..];
    }
    out.push_str(rest);
}

/// The byte ranges of the values at the `paths` in the JSON text `b` (through arrays, every
/// occurrence of a repeated key), in order; `None` when `b` is not one JSON value.
fn redact_spans(b: &[u8], paths: &[Vec<String>], spans: &mut Vec<(usize, usize)>) -> Option<()> {
    enum State {
        Value,
        Key,
        After,
    }
    // (object?, paths still matching, object keys above)
    let mut stack: Vec<(bool, u64, usize)> = Vec::new();
    let all = if paths.len() >= 64 { u64::MAX } else { (1u64 << paths.len()) - 1 };
    let mut next = (all, 0usize);
    let mut i = skip_ws(b, 0);
    let mut state = State::Value;
    loop {
        match state {
            State::Value => match *b.get(i)? {
                open @ (b'{' | b'[') => {
                    stack.push((open == b'{', next.0, next.1));
                    i = skip_ws(b, i + 1);
                    if b.get(i) == Some(if open == b'{' { &b'}' } else { &b']' }) {
                        stack.pop();
                        i += 1;
                        state = State::After;
                    } else if open == b'{' {
                        state = State::Key;
                    }
                }
                _ => {
                    i = skip_value(b, i)?;
                    state = State::After;
                }
            },
            State::Key => {
                if b.get(i) != Some(&b'"') {
                    return None;
                }
                let end = skip_string(b, i)?;
                let raw = &b[i + 1..end - 1];
                let decoded;
                let key: &[u8] = if raw.contains(&b'\\') {
                    decoded = serde_json::from_slice::<String>(&b[i..end]).ok()?;
                    decoded.as_bytes()
                } else {
                    raw
                };
                i = skip_ws(b, end);
                if b.get(i) != Some(&b':') {
                    return None;
                }
                i = skip_ws(b, i + 1);
                let &(_, alive, depth) = stack.last()?;
                let (mut deeper, mut hit) = (0u64, false);
                for (j, p) in paths.iter().enumerate().filter(|(j, _)| alive >> j & 1 == 1) {
                    if p.get(depth).is_some_and(|name| name.as_bytes() == key) {
                        if p.len() == depth + 1 {
                            hit = true;
                        } else {
                            deeper |= 1 << j;
                        }
                    }
                }
                if hit || deeper == 0 {
                    let end = skip_value(b, i)?;
                    if hit {
                        spans.push((i, end));
                    }
                    i = end;
                    state = State::After;
                } else {
                    next = (deeper, depth + 1);
                    state = State::Value;
                }
            }
            State::After => {
                i = skip_ws(b, i);
                let Some(&(object, alive, depth)) = stack.last() else {
                    return (i == b.len()).then_some(());
                };
                match *b.get(i)? {
                    b',' => {
                        i = skip_ws(b, i + 1);
                        if object {
                            state = State::Key;
                        } else {
                            next = (alive, depth);
                            state = State::Value;
                        }
                    }
                    b'}' if object => {
                        stack.pop();
                        i += 1;
                    }
                    b']' if !object => {
                        stack.pop();
                        i += 1;
                    }
                    _ => return None,
                }
            }
        }
    }
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// The end of the string starting with the quote at `i`.
fn skip_string(b: &[u8], i: usize) -> Option<usize> {
    let mut at = i + 1;
    loop {
        let j = at + memchr::memchr2(b'"', b'\\', b.get(at..)?)?;
        if b[j] == b'"' {
            return Some(j + 1);
        }
        at = j + 2;
    }
}

/// The end of the value starting at `i` (whole objects and arrays skipped without recursion).
/// Also how `GET /snapshots` steps over a recorded input to the fields after it.
pub(crate) fn skip_value(b: &[u8], mut i: usize) -> Option<usize> {
    let mut depth = 0usize;
    loop {
        match *b.get(i)? {
            b'"' => {
                i = skip_string(b, i)?;
                if depth == 0 {
                    return Some(i);
                }
            }
            b'{' | b'[' => {
                depth += 1;
                i += 1;
            }
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                i += 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ if depth > 0 => i += 1,
            _ => {
                let start = i;
                while i < b.len() && !matches!(b[i], b',' | b']' | b'}' | b':' | b' ' | b'\t' | b'\r' | b'\n') {
                    i += 1;
                }
                return (i > start).then_some(i);
            }
        }
    }
}

/// The `redact` setting, prepared once: the paths split at the dots (at most [`MAX_REDACT`]),
/// and a searcher for each last name.
pub struct Redact {
    paths: Vec<Vec<String>>,
    leaves: Vec<memchr::memmem::Finder<'static>>,
}

impl Redact {
    /// From the dotted paths of the setting.
    pub fn new(paths: &[String]) -> Redact {
        let paths: Vec<Vec<String>> =
            paths.iter().take(MAX_REDACT).map(|p| p.split('.').map(str::to_string).collect()).collect();
        let leaves = paths
            .iter()
            .filter_map(|p| p.last())
            .map(|leaf| memchr::memmem::Finder::new(format!("\"{leaf}\"").as_bytes()).into_owned())
            .collect();
        Redact { paths, leaves }
    }

    /// Whether there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// Appends `input` with the fields replaced (see [`write_redacted`]).
    pub fn write(&self, input: &[u8], out: &mut String) {
        let input = input.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(input).trim_ascii();
        if self.may_hold(input) {
            write_redacted(input, &self.paths, out);
        } else {
            write_input(input, out);
        }
    }

    /// Whether `input` may hold a field to redact: a last name appears in it as a quoted
    /// string, or it has an escape that could spell one (`\u0065mail`). Most inputs do not, and
    /// are recorded without being scanned.
    fn may_hold(&self, input: &[u8]) -> bool {
        memchr::memchr_iter(b'\\', input).any(|i| matches!(input.get(i + 1), Some(b'u' | b'/')))
            || self.leaves.iter().any(|f| f.find(input).is_some())
    }
}

/// Replaces the value at `path` (through every element of the arrays on the way) with
/// [`REDACTED`]; whether something was replaced. Missing fields are not added.
pub fn redact_path(value: &mut serde_json::Value, path: &[String]) -> bool {
    let Some((first, rest)) = path.split_first() else { return false };
    match value {
        serde_json::Value::Object(map) => match map.get_mut(first.as_str()) {
            Some(v) if rest.is_empty() => {
                *v = serde_json::Value::String(REDACTED.into());
                true
            }
            Some(v) => redact_path(v, rest),
            None => false,
        },
        serde_json::Value::Array(items) => {
            let mut any = false;
            for item in items {
                any |= redact_path(item, path);
            }
            any
        }
        _ => false,
    }
}

/// Appends the decimal digits of `n`.
#[inline]
pub(crate) fn write_u64(mut n: u64, out: &mut String) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // only ASCII digits
    out.push_str(std::str::from_utf8(&buf[i..]).unwrap_or("0"));
}

fn write_f64(v: f64, out: &mut String) {
    if v == 1.0 {
        out.push_str("1.0");
    } else if v.is_finite() {
        let _ = write!(out, "{v:?}");
    } else {
        out.push_str("null");
    }
}

// ---------------------------------------------------------------------------------------------
// Reading

/// A snapshot line read back, every field borrowed from the line as raw JSON (`None`: the field
/// is missing; a JSON `null` is `Some("null")`). Unknown fields are ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawRecord<'a> {
    /// the snapshot id
    #[serde(borrow, deserialize_with = "present")]
    pub id: Option<&'a RawValue>,
    /// when it was decided
    #[serde(borrow, deserialize_with = "present")]
    pub timestamp: Option<&'a RawValue>,
    /// the table's name
    #[serde(borrow, deserialize_with = "present")]
    pub table: Option<&'a RawValue>,
    /// the table's version
    #[serde(borrow, deserialize_with = "present")]
    pub version: Option<&'a RawValue>,
    /// who decided
    #[serde(borrow, deserialize_with = "present")]
    pub instance: Option<&'a RawValue>,
    /// the input
    #[serde(borrow, deserialize_with = "present")]
    pub input: Option<&'a RawValue>,
    /// whether the input was redacted
    #[serde(borrow, deserialize_with = "present")]
    pub redacted: Option<&'a RawValue>,
    /// how many rules were tried
    #[serde(borrow, deserialize_with = "present")]
    pub tried: Option<&'a RawValue>,
    /// the rule that matched
    #[serde(borrow, deserialize_with = "present")]
    pub rule_id: Option<&'a RawValue>,
    /// whether a rule matched
    #[serde(borrow, deserialize_with = "present")]
    pub matched: Option<&'a RawValue>,
    /// the action answered
    #[serde(borrow, deserialize_with = "present")]
    pub action: Option<&'a RawValue>,
    /// 1.0 for deterministic rules
    #[serde(borrow, deserialize_with = "present")]
    pub confidence: Option<&'a RawValue>,
    /// rules that failed to evaluate
    #[serde(borrow, deserialize_with = "present")]
    pub warnings: Option<&'a RawValue>,
    /// why the answer was degraded
    #[serde(borrow, deserialize_with = "present")]
    pub degraded: Option<&'a RawValue>,
    /// the shadow table's answer
    #[serde(borrow, deserialize_with = "present")]
    pub shadow: Option<&'a RawValue>,
    /// the tuned table's arm (`"baseline"`, `"v1"` …); snapshots written before revision 4
    /// hold a variant's `{"id", "params"}` here
    #[serde(borrow, deserialize_with = "present")]
    pub variant: Option<&'a RawValue>,
    /// the parameter values in force, as a JSON object
    #[serde(borrow, deserialize_with = "present")]
    pub params: Option<&'a RawValue>,
    /// the version of the table file (the served `version` differs with promoted values)
    #[serde(borrow, deserialize_with = "present")]
    pub file_version: Option<&'a RawValue>,
    /// rules switched off at the time
    #[serde(borrow, deserialize_with = "present")]
    pub disabled_rules: Option<&'a RawValue>,
    /// the caller's `traceparent`
    #[serde(borrow, deserialize_with = "present")]
    pub traceparent: Option<&'a RawValue>,
    /// evaluation time
    #[serde(borrow, deserialize_with = "present")]
    pub latency_ns: Option<&'a RawValue>,
    /// a label: the action that should have been answered (added by people, for replay)
    #[serde(borrow, deserialize_with = "present")]
    pub expected: Option<&'a RawValue>,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

fn non_null(v: Option<&RawValue>) -> Option<&RawValue> {
    v.filter(|v| v.get() != "null")
}

/// A JSON string's value (borrowed when it has no escapes).
pub fn json_str(v: &RawValue) -> Option<Cow<'_, str>> {
    let text = v.get();
    if text.len() >= 2 && text.starts_with('"') && !text.contains('\\') {
        return Some(Cow::Borrowed(&text[1..text.len() - 1]));
    }
    serde_json::from_str::<String>(text).ok().map(Cow::Owned)
}

impl<'a> RawRecord<'a> {
    /// Reads one line.
    pub fn parse(line: &'a [u8]) -> Result<RawRecord<'a>, serde_json::Error> {
        serde_json::from_slice(line)
    }

    /// The snapshot id, if the line has a valid one.
    pub fn snapshot_id(&self) -> Option<SnapshotId> {
        non_null(self.id).and_then(json_str).and_then(|s| SnapshotId::parse(&s))
    }

    /// The table's name.
    pub fn table_name(&self) -> Option<Cow<'a, str>> {
        non_null(self.table).and_then(json_str)
    }

    /// The table's version.
    pub fn table_version(&self) -> Option<Cow<'a, str>> {
        non_null(self.version).and_then(json_str)
    }

    /// The recorded rule id (`None`: no rule matched, or not recorded).
    pub fn rule(&self) -> Option<Cow<'a, str>> {
        non_null(self.rule_id).and_then(json_str)
    }

    /// The recorded evaluation latency.
    pub fn latency_ns(&self) -> Option<u64> {
        non_null(self.latency_ns).and_then(|v| v.get().parse().ok())
    }

    /// The ids of the rules switched off at the time (empty when none or not recorded).
    pub fn disabled(&self) -> Vec<String> {
        match non_null(self.disabled_rules) {
            Some(v) if v.get() != "[]" => serde_json::from_str(v.get()).unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// The parameter values the decision was made with, as a raw JSON object: `params`, or in
    /// a snapshot written before revision 4, the params of its variant (`None`: the table's own
    /// values, or a table without parameters).
    pub fn params_in_force(&self) -> Option<&'a RawValue> {
        if let Some(params) = non_null(self.params) {
            return Some(params);
        }
        let variant = non_null(self.variant)?;
        if !variant.get().starts_with('{') {
            return None;
        }
        #[derive(Deserialize)]
        struct V<'b> {
            #[serde(borrow)]
            params: Option<&'b RawValue>,
        }
        let v: V<'a> = serde_json::from_str(variant.get()).ok()?;
        non_null(v.params)
    }

    /// Whether the line carries every field of SPEC §8.1 (`null` only where the field may be
    /// absent: `rule_id`, `action`, `shadow`, `variant`, `params`, `traceparent`).
    pub fn is_complete(&self) -> bool {
        let required = [
            self.id,
            self.timestamp,
            self.table,
            self.version,
            self.instance,
            self.input,
            self.tried,
            self.confidence,
            self.warnings,
            self.disabled_rules,
            self.latency_ns,
        ];
        let may_be_null = [self.rule_id, self.action, self.shadow, self.variant, self.params, self.traceparent];
        required.iter().all(|v| non_null(*v).is_some()) && may_be_null.iter().all(Option::is_some)
    }

    /// The classes the decision belongs to: warnings (`errors`), `degraded`, a shadow that
    /// disagreed.
    pub fn is(&self, class: KeepClass) -> bool {
        match class {
            KeepClass::Errors => non_null(self.warnings).is_some_and(|w| w.get() != "[]"),
            KeepClass::Degraded => non_null(self.degraded).is_some_and(|d| d.get() != "false"),
            KeepClass::ShadowDisagreement => non_null(self.shadow).is_some_and(|s| {
                #[derive(Deserialize)]
                struct S {
                    agrees: Option<bool>,
                }
                serde_json::from_str::<S>(s.get()).is_ok_and(|s| s.agrees == Some(false))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(p: &str) -> Vec<String> {
        p.split('.').map(str::to_string).collect()
    }

    #[test]
    fn input_lines_become_one() {
        let mut out = String::new();
        write_input(b"\xEF\xBB\xBF {\n  \"a\": \"x\\ny\",\r\n  \"b\": 1\n}\n", &mut out);
        assert_eq!(out, "{   \"a\": \"x\\ny\",    \"b\": 1 }");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["a"], "x\ny");
    }

    #[test]
    fn redaction_reaches_nested_fields_and_arrays() {
        let mut out = String::new();
        let redact = [path("card_number"), path("user.email"), path("items.secret"), path("absent.field")];
        write_redacted(
            br#"{"card_number":"4111","user":{"email":"a@b","name":"Ann"},"items":[{"secret":1},{"other":2}],"n":5}"#,
            &redact,
            &mut out,
        );
        assert_eq!(
            out,
            r#"{"card_number":"<redacted>","user":{"email":"<redacted>","name":"Ann"},"items":[{"secret":"<redacted>"},{"other":2}],"n":5},"redacted":true"#
        );
        out.clear();
        Redact::new(&["card_number".into()]).write(br#"{"n":5}"#, &mut out);
        assert_eq!(out, r#"{"n":5}"#, "nothing to redact: no mark, no field added");
        out.clear();
        write_redacted(br#"{"n": "card_number", "m":5}"#, &redact, &mut out);
        assert_eq!(out, r#"{"n": "card_number", "m":5}"#, "a value that names a field: nothing redacted");
        out.clear();
        write_redacted(br#"{"card\u005fnumber": "4111"}"#, &redact, &mut out);
        assert_eq!(out, r#"{"card\u005fnumber": "<redacted>"},"redacted":true"#, "an escaped name is found too");
        out.clear();
        Redact::new(&["card_number".into()]).write(b"{\n\"n\": 5}", &mut out);
        assert_eq!(out, r#"{ "n": 5}"#, "nothing to redact: the input as received");
        out.clear();
        Redact::new(&["card_number".into()]).write(br#"{"card\u005fnumber": 1, "x": "\/"}"#, &mut out);
        assert_eq!(
            out, r#"{"card\u005fnumber": "<redacted>", "x": "\/"},"redacted":true"#,
            "the quick check sees escapes"
        );
        out.clear();
        write_redacted(b"{\"card_number\": 1, \"card_number\": {\"a\": [1, \"}\"]}}", &redact, &mut out);
        assert_eq!(
            out, r#"{"card_number": "<redacted>", "card_number": "<redacted>"},"redacted":true"#,
            "every occurrence"
        );
        out.clear();
        write_redacted(br#"{"card_number": "4111""#, &redact, &mut out);
        assert_eq!(out, r#"null,"redacted":true"#, "not JSON: not recorded");
    }

    /// The scanner against serde_json on generated inputs: the same value once parsed.
    #[test]
    fn redaction_agrees_with_parsing() {
        let redact = [path("a"), path("b.c"), path("d.e.f")];
        let mut x: u64 = 88172645463325252;
        let mut rnd = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for _ in 0..2000 {
            // a random value over the names a..f, depth at most 5
            fn gen(rnd: &mut dyn FnMut(u64) -> u64, depth: u32) -> serde_json::Value {
                match if depth > 4 { rnd(3) } else { rnd(6) } {
                    0 => serde_json::json!(rnd(100)),
                    1 => serde_json::json!("s}\"]\\{"),
                    2 => serde_json::Value::Null,
                    3 | 4 => {
                        let n = rnd(4);
                        let mut m = serde_json::Map::new();
                        for _ in 0..n {
                            let k = ["a", "b", "c", "d", "e", "f"][rnd(6) as usize];
                            m.insert(k.to_string(), gen(rnd, depth + 1));
                        }
                        serde_json::Value::Object(m)
                    }
                    _ => serde_json::Value::Array((0..rnd(3)).map(|_| gen(rnd, depth + 1)).collect()),
                }
            }
            let mut v = serde_json::Value::Object(Default::default());
            for _ in 0..3 {
                let k = ["a", "b", "d"][rnd(3) as usize];
                v[k] = gen(&mut rnd, 1);
            }
            let text = if rnd(2) == 0 { serde_json::to_string_pretty(&v) } else { serde_json::to_string(&v) }.unwrap();
            let mut want = v.clone();
            let changed = redact.iter().fold(false, |c, p| redact_path(&mut want, p) | c);
            let mut out = String::new();
            write_redacted(text.as_bytes(), &redact, &mut out);
            let (got, mark) = match out.strip_suffix(",\"redacted\":true") {
                Some(g) => (g, true),
                None => (out.as_str(), false),
            };
            assert!(!got.contains('\n'), "{got}");
            assert_eq!(serde_json::from_str::<serde_json::Value>(got).unwrap(), want, "{text}");
            assert_eq!(mark, changed, "{text}");
        }
    }

    #[test]
    fn numbers() {
        let mut out = String::new();
        for n in [0u64, 7, 10, 1234567890, u64::MAX] {
            out.clear();
            write_u64(n, &mut out);
            assert_eq!(out, n.to_string());
        }
    }
}
