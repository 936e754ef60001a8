//! The serving side's JSON of a decision: the response body of SPEC §6 (`/decide`, each batch
//! line) and the decision fields the snapshot record shares with it. The engine answers with a
//! [`Decision`] (data); everything that turns one into text for a client or a record is here,
//! so a field is written by one function wherever it appears.

use std::time::{Duration, SystemTime};

use crate::expr::json::write_json_string;
use crate::snapshot::SnapshotId;
use crate::table::{Decision, Table};

/// The `instance` of a decision made by this process (SPEC §7): the router rewrites it to the
/// peer's id in the answers it forwards.
pub const LOCAL_INSTANCE: &str = "local";

/// Per-response details that are not part of the decision itself.
#[derive(Clone, Debug)]
pub struct ResponseMeta<'a> {
    /// when the decision was made
    pub timestamp: Timestamp,
    /// the snapshot id, when snapshots are on
    pub snapshot_id: Option<SnapshotId>,
    /// whether the snapshot was written (`"recorded": false` follows the id otherwise)
    pub recorded: bool,
    /// the tuning arm that decided, for a tuned table
    pub variant: Option<ArmName<'a>>,
}

/// The tuning arm that made a decision, as its response names it (`"variant"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArmName<'a> {
    /// the table as served: `"baseline"`, the name of nearly every tuned decision's arm, so a
    /// constant the response writes in one piece with the text before it
    Baseline,
    /// a variant, by its id as a JSON string (`"v1"`)
    Variant(&'a str),
}

/// A time as a response writes it: whole seconds and milliseconds since 1970 (0 before), from
/// one conversion of a `SystemTime` that the decision's snapshot id can share
/// ([`Timestamp::unix_ms`]) instead of converting the clock again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timestamp {
    secs: u64,
    millis: u32,
}

impl Timestamp {
    /// Unix milliseconds.
    #[inline]
    pub fn unix_ms(self) -> u64 {
        // no overflow before the year 584,000,000
        self.secs.wrapping_mul(1000).wrapping_add(u64::from(self.millis))
    }
}

impl From<SystemTime> for Timestamp {
    #[inline]
    fn from(t: SystemTime) -> Timestamp {
        let since = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        Timestamp { secs: since.as_secs(), millis: since.subsec_millis() }
    }
}

/// Appends the decision response body of SPEC §6 to `out`.
pub fn write_decision(table: &Table, d: &Decision, meta: &ResponseMeta<'_>, out: &mut String) {
    out.push('{');
    write_outcome(table, d, out);
    out.push_str(",\"timestamp\":\"");
    write_time(meta.timestamp, out);
    out.push_str("\",\"table\":");
    out.push_str(table.name_json());
    out.push_str(",\"version\":\"");
    out.push_str(&table.version);
    out.push('"');
    // the constant text between the id and the variant is pushed in one piece: a tuned
    // decision writes all of these
    match (meta.snapshot_id, meta.variant) {
        (Some(id), variant) => {
            out.push_str(",\"snapshot_id\":\"");
            id.write_text(out); // hex digits and hyphens: nothing to escape
            match (meta.recorded, variant) {
                (true, None) => out.push('"'),
                (false, None) => out.push_str("\",\"recorded\":false"),
                (true, Some(ArmName::Baseline)) => out.push_str("\",\"variant\":\"baseline\""),
                (false, Some(ArmName::Baseline)) => out.push_str("\",\"recorded\":false,\"variant\":\"baseline\""),
                (true, Some(ArmName::Variant(v))) => {
                    out.push_str("\",\"variant\":");
                    out.push_str(v);
                }
                (false, Some(ArmName::Variant(v))) => {
                    out.push_str("\",\"recorded\":false,\"variant\":");
                    out.push_str(v);
                }
            }
        }
        (None, Some(ArmName::Baseline)) => out.push_str(",\"variant\":\"baseline\""),
        (None, Some(ArmName::Variant(v))) => {
            out.push_str(",\"variant\":");
            out.push_str(v);
        }
        (None, None) => {}
    }
    out.push_str(",\"instance\":\"");
    out.push_str(LOCAL_INSTANCE);
    out.push('"');
    if let Some(reason) = d.degraded_reason {
        out.push_str(",\"degraded\":true,\"degraded_reason\":");
        write_json_string(reason, out);
    }
    if let Some(fallback) = &d.fallback {
        out.push_str(",\"fallback\":");
        out.push_str(fallback);
    }
    if !d.warnings.is_empty() {
        out.push_str(",\"warnings\":");
        write_warnings(table, d, &mut String::new(), out);
    }
    if let Some(trace) = &d.trace {
        // a trace is most of an explained response (hundreds of lines on a large table):
        // room for it at once rather than doubling through it
        out.reserve(trace.iter().map(|t| t.reason.len() + 64).sum());
        out.push_str(",\"trace\":[");
        for (i, t) in trace.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str("{\"rule_id\":");
            out.push_str(table.engine.outcome_id_json(t.rule));
            out.push_str(",\"matched\":");
            out.push_str(if t.matched { "true" } else { "false" });
            out.push_str(",\"reason\":");
            match &t.reason_json {
                Some(escaped) => {
                    out.push('"');
                    out.push_str(escaped);
                    out.push('"');
                }
                None => write_json_string(&t.reason, out),
            }
            out.push('}');
        }
        out.push_str("],\"skipped\":");
        out.push_str(&d.skipped.to_string());
    }
    out.push('}');
}

/// Appends `"rule_id":…,"matched":…,"action":…` of `d`: the outcome fields the response, the
/// batch line and the snapshot record share.
pub fn write_outcome(table: &Table, d: &Decision, out: &mut String) {
    out.push_str("\"rule_id\":");
    write_rule_id(table, d.rule, out);
    out.push_str(",\"matched\":");
    out.push_str(if d.rule.is_some() { "true" } else { "false" });
    out.push_str(",\"action\":");
    out.push_str(table.action_json(d));
}

/// Appends the id of outcome `rule` of `table` as JSON, `null` for none.
pub fn write_rule_id(table: &Table, rule: Option<usize>, out: &mut String) {
    match rule {
        Some(r) => out.push_str(table.engine.outcome_id_json(r)),
        None => out.push_str("null"),
    }
}

/// Appends the warnings of `d` as a JSON array of `{"rule_id":…,"message":…}`; `scratch` holds
/// each message while it is escaped.
pub fn write_warnings(table: &Table, d: &Decision, scratch: &mut String, out: &mut String) {
    use std::fmt::Write as _;
    out.push('[');
    for (i, w) in d.warnings.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"rule_id\":");
        out.push_str(table.engine.outcome_id_json(w.rule));
        out.push_str(",\"message\":");
        scratch.clear();
        let _ = write!(scratch, "{}", w.problem);
        write_json_string(scratch, out);
        out.push('}');
    }
    out.push(']');
}

/// `{"error": {"code", "message"}, "line": N}`: a batch line that got no decision.
pub fn write_line_error(code: &str, message: &str, line: usize, out: &mut String) {
    out.push_str("{\"error\":{\"code\":");
    write_json_string(code, out);
    out.push_str(",\"message\":");
    write_json_string(message, out);
    out.push_str("},\"line\":");
    out.push_str(&line.to_string());
    out.push('}');
}

/// Appends `t` as RFC 3339 UTC with milliseconds (`2026-11-30T08:23:45.123Z`).
/// The part up to the seconds is formatted once per second per thread.
pub fn write_timestamp(t: SystemTime, out: &mut String) {
    write_time(Timestamp::from(t), out);
}

/// [`write_timestamp`] of a time converted already.
fn write_time(t: Timestamp, out: &mut String) {
    use std::cell::RefCell;
    thread_local! {
        static PREFIX: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
    }
    let Timestamp { secs, millis } = t;
    PREFIX.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.0 != secs {
            let whole = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
            let text = humantime::format_rfc3339_seconds(whole).to_string();
            cached.1 = text.trim_end_matches('Z').to_string();
            cached.0 = secs;
        }
        out.push_str(&cached.1);
    });
    out.push('.');
    out.push(char::from(b'0' + (millis / 100) as u8));
    out.push(char::from(b'0' + (millis / 10 % 10) as u8));
    out.push(char::from(b'0' + (millis % 10) as u8));
    out.push('Z');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_match_humantime() {
        for ms in [0u64, 1, 999, 1_000, 1_764_491_025_123, 4_102_444_799_999] {
            let t = SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
            let mut out = String::new();
            write_timestamp(t, &mut out);
            assert_eq!(out, humantime::format_rfc3339_millis(t).to_string());
        }
    }
}
