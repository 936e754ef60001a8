//! `GET /snapshots`: the recent decisions the recorder holds in memory, newest first, filtered
//! by table, rule, outcome, action and time.
//!
//! **What is searched.** Exactly what `GET /snapshots/{id}` searches: the recent window (the
//! last `Settings::recent_bytes` of frames as written) and the snapshots not written yet (the
//! workers' queues and the writer's batch in flight). [`RecentQuery`] is the request, read from
//! the query string; [`crate::snapshot::Recorder::recent`] answers it with a [`Listing`].
//!
//! **What it costs.** Every lock is held only to copy: the frames of the window are shared
//! (`Arc`) and cloned out, a worker's queued lines are copied out (at most its share of the
//! queue, as a lookup reads them), and the frames are decompressed and filtered after the
//! locks are let go. The work is bounded by the window: each frame is decompressed at most
//! once, and frames that cannot hold a listed snapshot are skipped by their time range (once
//! `limit` snapshots newer than a frame are found, the frame is only looked at to tell whether
//! the listing is `truncated`, and not at all once that is known). The memory is bounded by the
//! request: at most `limit` (≤ [`MAX_LIMIT`]) lines and at most the byte cap the caller gives,
//! one decompressed frame and one worker's queued lines at a time.
//!
//! **Matching.** A line's id and table are read from its first fields (an id, a timestamp and
//! a table name always start a line, and neither the id nor the timestamp can hold a quote), so
//! the time and table filters cost no parsing; `rule`, `outcome` and `action` parse the line
//! (borrowed, [`RawRecord`]) only when it passed those.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, SystemTime};

use percent_encoding::percent_decode_str;

use super::id::{unix_ms, SnapshotId};
use super::record::{skip_value, RawRecord};
use crate::expr::json::write_json_string;
use crate::render::write_timestamp;

/// How many snapshots a listing returns when the request names no `limit`.
pub const DEFAULT_LIMIT: usize = 100;
/// The largest `limit` a listing accepts (a larger one is refused with 400, not clamped).
pub const MAX_LIMIT: usize = 1000;
/// The query parameters `GET /snapshots` accepts; any other is refused with 400.
pub const PARAMETERS: &[&str] = &["table", "rule", "outcome", "action", "since", "before", "limit"];

/// Whether a decision's table answered with a rule or with its default, as the `outcome` label
/// of `clef_decisions_total` says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// a rule (of a flash table: a cell) matched: the snapshot's `matched` is `true`
    Matched,
    /// no rule matched and the table's default answered: `matched` is `false`, `rule_id` `null`
    Default,
}

/// What a decision's action must hold (`action=KEY:VALUE` or `action=VALUE`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ActionFilter {
    /// the action is an object whose top-level member `key` equals `value`
    Member {
        /// the member's name
        key: String,
        /// its value, as text
        value: String,
    },
    /// the action is `value` itself (a scalar action), or an object with any top-level member
    /// equal to it
    Any(String),
}

impl ActionFilter {
    /// Whether the action (its JSON text) matches. A value equals `text` when it is the string
    /// `text`, or a number, `true`, `false` or `null` written as `text` (numbers compare by
    /// value: `404` matches `404` and `404.0`).
    fn matches(&self, action: &str) -> bool {
        let Ok(action) = serde_json::from_str::<serde_json::Value>(action) else { return false };
        match self {
            ActionFilter::Member { key, value } => {
                action.as_object().and_then(|o| o.get(key)).is_some_and(|v| scalar_is(v, value))
            }
            ActionFilter::Any(value) => match &action {
                serde_json::Value::Object(o) => o.values().any(|v| scalar_is(v, value)),
                other => scalar_is(other, value),
            },
        }
    }
}

/// Whether a JSON scalar is `text` (see [`ActionFilter::matches`]).
fn scalar_is(v: &serde_json::Value, text: &str) -> bool {
    use serde_json::Value;
    match v {
        Value::String(s) => s == text,
        Value::Array(_) | Value::Object(_) => false,
        // a number, true, false or null: the same value as `text` read as JSON, by the one rule
        scalar => serde_json::from_str::<Value>(text).is_ok_and(|t| crate::expr::same_value(scalar, &t)),
    }
}

/// A request for the recent decisions (`GET /snapshots?…`): its filters, all optional and
/// combined with *and*, and how many to return.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecentQuery {
    /// only this table's decisions (the snapshot's `table`, exactly)
    pub table: Option<String>,
    /// only decisions this rule (of a flash table: this cell) answered (`rule_id`, exactly)
    pub rule: Option<String>,
    /// only decisions a rule answered, or only those the default answered
    pub outcome: Option<Outcome>,
    /// only decisions whose action holds this
    pub action: Option<ActionFilter>,
    /// only decisions made at or after this unix millisecond (by their id's time)
    pub since_ms: Option<u64>,
    /// only decisions older than this one (its id sorts after theirs): the next page
    pub before: Option<SnapshotId>,
    /// at most this many, newest first
    pub limit: usize,
}

impl Default for RecentQuery {
    fn default() -> Self {
        RecentQuery {
            table: None,
            rule: None,
            outcome: None,
            action: None,
            since_ms: None,
            before: None,
            limit: DEFAULT_LIMIT,
        }
    }
}

/// Why a query string was refused: a message for the client that says what is accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryError(pub String);

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for QueryError {}

impl RecentQuery {
    /// Reads a query string (without `?`; `application/x-www-form-urlencoded`: `+` is a space,
    /// `%XX` a byte). `now` is what a relative `since` (`5m`) counts back from. Unknown, repeated
    /// or empty parameters and bad values are refused, with a message that says what is accepted.
    pub fn parse(query: &str, now: SystemTime) -> Result<RecentQuery, QueryError> {
        let mut q = RecentQuery::default();
        let mut seen: Vec<&str> = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (raw_key, raw_value) = pair.split_once('=').unwrap_or((pair, ""));
            let key = decode(raw_key)?;
            let Some(&name) = PARAMETERS.iter().find(|p| **p == key) else {
                return Err(QueryError(format!(
                    "unknown parameter \"{}\"; GET /snapshots takes {}",
                    key.escape_debug(),
                    PARAMETERS.join(", ")
                )));
            };
            if seen.contains(&name) {
                return Err(QueryError(format!("{name} is given twice; give each parameter at most once")));
            }
            seen.push(name);
            let value = decode(raw_value)?;
            if value.is_empty() {
                return Err(QueryError(format!("{name} needs a value ({name}=…); leave it out to not filter by it")));
            }
            match name {
                "table" => q.table = Some(value),
                "rule" => q.rule = Some(value),
                "outcome" => q.outcome = Some(parse_outcome(&value)?),
                "action" => q.action = Some(parse_action(&value)?),
                "since" => q.since_ms = Some(parse_since(&value, now)?),
                "before" => {
                    q.before = Some(SnapshotId::parse(&value).ok_or_else(|| {
                        QueryError(format!(
                            "before=\"{}\" is not a snapshot id: give the id of the last snapshot listed \
                             (a UUID such as 01a230b8-dbd5-7137-bffb-a4cb18ebdb45) to list those older than it",
                            value.escape_debug()
                        ))
                    })?)
                }
                _ => q.limit = parse_limit(&value)?,
            }
        }
        Ok(q)
    }

    /// Whether a line with an id of unix millisecond `ms` can pass the time filters.
    fn in_time(&self, id: SnapshotId) -> bool {
        self.since_ms.is_none_or(|s| id.unix_ms() >= s) && self.before.is_none_or(|b| id < b)
    }

    /// Whether a batch of lines whose ids lie between `first_ms` and `last_ms` (unix ms) may
    /// hold a line that passes the time filters.
    pub(crate) fn may_hold(&self, first_ms: u64, last_ms: u64) -> bool {
        first_ms <= last_ms
            && self.since_ms.is_none_or(|s| last_ms >= s)
            && self.before.is_none_or(|b| first_ms <= b.unix_ms())
    }
}

/// A query string's part, percent-decoded (`+` is a space).
fn decode(raw: &str) -> Result<String, QueryError> {
    let spaced = raw.replace('+', " ");
    percent_decode_str(&spaced)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| QueryError(format!("\"{}\" is not UTF-8 once percent-decoded", raw.escape_debug())))
}

fn parse_limit(value: &str) -> Result<usize, QueryError> {
    match value.parse::<usize>() {
        Ok(n) if n <= MAX_LIMIT => Ok(n),
        Ok(_) | Err(_) => Err(QueryError(format!(
            "limit={} is not accepted: give a whole number from 0 to {MAX_LIMIT} (default {DEFAULT_LIMIT}); \
             to see further back, page with before=<the last id listed>",
            value.escape_debug()
        ))),
    }
}

fn parse_outcome(value: &str) -> Result<Outcome, QueryError> {
    match value {
        "matched" => Ok(Outcome::Matched),
        "default" => Ok(Outcome::Default),
        _ => Err(QueryError(format!(
            "outcome={} is not accepted: outcome is matched (a rule answered) or default (no rule matched and \
             the table's default answered), as in clef_decisions_total; to match what the action says, use \
             action=VALUE or action=KEY:VALUE (action=decision:deny)",
            value.escape_debug()
        ))),
    }
}

fn parse_action(value: &str) -> Result<ActionFilter, QueryError> {
    if value.starts_with(['{', '[']) {
        return Err(QueryError(format!(
            "action={} is not accepted: action matches one member of the action, as KEY:VALUE \
             (action=decision:deny, action=allow:false) or VALUE alone (any top-level member, or a scalar action)",
            value.escape_debug()
        )));
    }
    Ok(match value.split_once(':') {
        Some((key, v)) if !key.is_empty() => ActionFilter::Member { key: key.to_string(), value: v.to_string() },
        _ => ActionFilter::Any(value.to_string()),
    })
}

/// `since`: an RFC 3339 time (`2026-12-01T08:29:10Z`, fractions of a second and a `+HH:MM` or
/// `-HH:MM` offset allowed) or a duration back from `now` (`90s`, `5m`, `1h30m`, `2d`).
fn parse_since(value: &str, now: SystemTime) -> Result<u64, QueryError> {
    let refused = || {
        QueryError(format!(
            "since={} is not accepted: give an RFC 3339 time (2026-12-01T08:29:10Z, 2026-12-01T10:29:10.5%2B02:00: \
             send + as %2B) or how long ago (90s, 5m, 1h30m, 2d)",
            value.escape_debug()
        ))
    };
    if value.as_bytes().first().is_some_and(u8::is_ascii_digit) && value.len() >= 19 && value.contains(['T', 't']) {
        return parse_rfc3339(value).map(unix_ms).ok_or_else(refused);
    }
    let ago = humantime::parse_duration(value).map_err(|_| refused())?;
    Ok(unix_ms(now.checked_sub(ago).unwrap_or(SystemTime::UNIX_EPOCH)))
}

/// An RFC 3339 time with `Z` or a numeric offset (humantime reads only UTC ones). A `+` that
/// arrived unencoded in a query string is a space here; it is read as the `+` it was.
fn parse_rfc3339(value: &str) -> Option<SystemTime> {
    let text = value.to_ascii_uppercase();
    if let Some(utc) = text.strip_suffix('Z') {
        return humantime::parse_rfc3339(&format!("{utc}Z")).ok();
    }
    let split = text.len().checked_sub(6)?;
    let (local, offset) = (text.get(..split)?, text.get(split..)?);
    let sign = match offset.as_bytes().first()? {
        b'+' | b' ' => 1i64,
        b'-' => -1,
        _ => return None,
    };
    let (hours, minutes) = offset.get(1..)?.split_once(':')?;
    if hours.len() != 2 || minutes.len() != 2 {
        return None;
    }
    let (hours, minutes): (u64, u64) = (hours.parse().ok()?, minutes.parse().ok()?);
    if hours > 23 || minutes > 59 {
        return None;
    }
    let shift = Duration::from_secs(hours * 3600 + minutes * 60);
    let t = humantime::parse_rfc3339(&format!("{local}Z")).ok()?;
    // 10:00+02:00 is 08:00 UTC
    if sign > 0 {
        t.checked_sub(shift)
    } else {
        t.checked_add(shift)
    }
}

/// What the recorder holds in memory, as a listing reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    /// snapshots in memory: the recent window and those not written yet (about: a batch the
    /// writer moves while the listing looks may be counted twice or not at all)
    pub snapshots: u64,
    /// the unix millisecond of the oldest of them
    pub oldest_ms: Option<u64>,
    /// the unix millisecond of the newest of them
    pub newest_ms: Option<u64>,
}

impl Window {
    /// Counts a batch of `lines` snapshots whose ids lie between `first_ms` and `last_ms`.
    pub(crate) fn add(&mut self, lines: u64, first_ms: u64, last_ms: u64) {
        if lines == 0 || first_ms > last_ms {
            return;
        }
        self.snapshots += lines;
        self.oldest_ms = Some(self.oldest_ms.map_or(first_ms, |o| o.min(first_ms)));
        self.newest_ms = Some(self.newest_ms.map_or(last_ms, |n| n.max(last_ms)));
    }
}

/// The answer to a [`RecentQuery`]: the matching snapshot lines, newest first.
#[derive(Clone, Debug, Default)]
pub struct Listing {
    /// the snapshot lines as recorded (JSON objects, without their line break), newest first
    pub snapshots: Vec<Box<str>>,
    /// more snapshots in memory match than are listed (`limit`, or the byte cap, was reached):
    /// ask again with `before=` the last id listed
    pub truncated: bool,
    /// what the recorder holds in memory
    pub window: Window,
    /// snapshot lines looked at (for the figures: how much a listing cost)
    pub scanned: u64,
}

impl Listing {
    /// The bytes of the lines listed.
    pub fn bytes(&self) -> usize {
        self.snapshots.iter().map(|s| s.len()).sum()
    }

    /// Writes the listing as the JSON `GET /snapshots` answers:
    /// `{"count":N,"truncated":B,"window":{…},"snapshots":[…]}`, each snapshot as recorded.
    pub fn write_json(&self, out: &mut dyn fmt::Write) -> fmt::Result {
        let mut head = String::with_capacity(160);
        head.push_str("{\"count\":");
        head.push_str(&self.snapshots.len().to_string());
        head.push_str(",\"truncated\":");
        head.push_str(if self.truncated { "true" } else { "false" });
        head.push_str(",\"window\":{\"snapshots\":");
        head.push_str(&self.window.snapshots.to_string());
        for (name, ms) in [("oldest", self.window.oldest_ms), ("newest", self.window.newest_ms)] {
            head.push_str(",\"");
            head.push_str(name);
            head.push_str("\":");
            match ms {
                Some(ms) => {
                    let mut t = String::with_capacity(24);
                    write_timestamp(SystemTime::UNIX_EPOCH + Duration::from_millis(ms), &mut t);
                    write_json_string(&t, &mut head);
                }
                None => head.push_str("null"),
            }
        }
        head.push_str("},\"snapshots\":[");
        out.write_str(&head)?;
        for (i, line) in self.snapshots.iter().enumerate() {
            if i > 0 {
                out.write_str(",\n")?;
            } else {
                out.write_str("\n")?;
            }
            out.write_str(line)?;
        }
        out.write_str("]}\n")
    }
}

/// Collects the matching lines of the batches it is shown, keeping the newest `limit` (and at
/// most `max_bytes` of them).
pub(crate) struct Collector<'q> {
    q: &'q RecentQuery,
    /// `,"table":"NAME",` as a line spells it
    table_field: Option<String>,
    kept: BTreeMap<SnapshotId, Box<str>>,
    kept_bytes: usize,
    max_bytes: usize,
    /// a matching line was left out
    more: bool,
    scanned: u64,
}

impl<'q> Collector<'q> {
    /// A collector for `q`, keeping at most `max_bytes` of lines.
    pub(crate) fn new(q: &'q RecentQuery, max_bytes: usize) -> Collector<'q> {
        let table_field = q.table.as_ref().map(|t| {
            let mut f = String::from(",\"table\":");
            write_json_string(t, &mut f);
            f.push(',');
            f
        });
        Collector { q, table_field, kept: BTreeMap::new(), kept_bytes: 0, max_bytes, more: false, scanned: 0 }
    }

    /// Whether a batch whose ids lie between `first_ms` and `last_ms` is worth reading: it may
    /// hold a line to list, or (while that is not known) tell that the listing is truncated.
    pub(crate) fn wants(&self, first_ms: u64, last_ms: u64) -> bool {
        self.q.may_hold(first_ms, last_ms) && !(self.more && self.hopeless(last_ms))
    }

    /// No line of a batch whose newest id is of `last_ms` can be listed: `limit` newer ones are.
    fn hopeless(&self, last_ms: u64) -> bool {
        self.kept.len() >= self.q.limit
            && self.kept.first_key_value().is_none_or(|(oldest, _)| last_ms < oldest.unix_ms())
    }

    /// Offers every line of `buf` (lines ending in `\n`; a last one without is taken too),
    /// a batch whose ids lie between `first_ms` and `last_ms`.
    pub(crate) fn scan(&mut self, buf: &[u8], first_ms: u64, last_ms: u64) {
        if !self.wants(first_ms, last_ms) {
            return;
        }
        let mut at = 0;
        while at < buf.len() {
            let end = memchr::memchr(b'\n', buf.get(at..).unwrap_or_default()).map_or(buf.len(), |i| at + i);
            if let Some(line) = buf.get(at..end) {
                self.offer(line);
            }
            at = end + 1;
            if self.more && self.hopeless(last_ms) {
                return;
            }
        }
    }

    fn offer(&mut self, line: &[u8]) {
        self.scanned += 1;
        let Some(id) = line_id(line) else { return };
        if !self.q.in_time(id) {
            return;
        }
        if let Some(field) = &self.table_field {
            // the first `,"table":` is the field: the id and the timestamp before it hold no quote
            let at = memchr::memmem::find(line, b",\"table\":");
            if at.and_then(|at| line.get(at..)).is_none_or(|rest| !rest.starts_with(field.as_bytes())) {
                return;
            }
        }
        if self.q.rule.is_some() || self.q.outcome.is_some() || self.q.action.is_some() {
            let fields =
                Decided::read(line).or_else(|| RawRecord::parse(line).ok().and_then(|r| Decided::from_record(&r)));
            if !fields.is_some_and(|f| self.fields_match(&f)) {
                return;
            }
        }
        if self.kept.len() >= self.q.limit
            && self.kept.first_key_value().is_none_or(|(oldest, _)| id < *oldest)
            && !self.kept.contains_key(&id)
        {
            self.more = true;
            return;
        }
        let Ok(text) = std::str::from_utf8(line) else { return };
        if let Some(old) = self.kept.insert(id, text.into()) {
            // the same snapshot seen twice (its batch moved on while the listing looked)
            self.kept_bytes -= old.len();
        }
        self.kept_bytes += line.len();
        while self.kept.len() > self.q.limit || self.kept_bytes > self.max_bytes {
            let Some((_, oldest)) = self.kept.pop_first() else { break };
            self.kept_bytes -= oldest.len();
            self.more = true;
        }
    }

    fn fields_match(&self, f: &Decided<'_>) -> bool {
        if let Some(rule) = &self.q.rule {
            if f.rule_id().as_deref() != Some(rule.as_str()) {
                return false;
            }
        }
        if let Some(outcome) = self.q.outcome {
            if f.matched != (outcome == Outcome::Matched) {
                return false;
            }
        }
        if let Some(action) = &self.q.action {
            if !action.matches(f.action) {
                return false;
            }
        }
        true
    }

    /// The listing, newest first.
    pub(crate) fn finish(self, window: Window) -> Listing {
        Listing {
            snapshots: self.kept.into_values().rev().collect(),
            truncated: self.more,
            window,
            scanned: self.scanned,
        }
    }
}

/// What a line says was decided: the fields `rule`, `outcome` and `action` look at, as raw JSON.
struct Decided<'l> {
    /// `rule_id`: a JSON string, or `null`
    rule_id: &'l str,
    matched: bool,
    action: &'l str,
}

impl<'l> Decided<'l> {
    /// The fields read where the recorder writes them: after the input (stepped over, not
    /// parsed), `,"tried":N,"rule_id":…,"matched":…,"action":…` (see [`super::record`]). `None`
    /// for a line not laid out so (written by another version, or edited); it is then parsed.
    fn read(line: &'l [u8]) -> Option<Decided<'l>> {
        // the first `,"input":` is the field: the strings before it (id, timestamp, names,
        // versions, kind, instance) are JSON strings, whose quotes are escaped
        let mut at = memchr::memmem::find(line, b",\"input\":")? + 9;
        at = skip_value(line, at)?;
        if let Some(rest) = line.get(at..).and_then(|r| r.strip_prefix(b",\"redacted\":true".as_slice())) {
            at = line.len() - rest.len();
        }
        at += line.get(at..)?.strip_prefix(b",\"tried\":".as_slice()).map(|_| 9)?;
        at += line.get(at..)?.iter().take_while(|b| b.is_ascii_digit()).count();
        at += line.get(at..)?.strip_prefix(b",\"rule_id\":".as_slice()).map(|_| 11)?;
        let rule_end = skip_value(line, at)?;
        let rule_id = std::str::from_utf8(line.get(at..rule_end)?).ok()?;
        at = rule_end;
        let rest = line.get(at..)?;
        let (matched, skip) = if rest.starts_with(b",\"matched\":true") {
            (true, 15)
        } else if rest.starts_with(b",\"matched\":false") {
            (false, 16)
        } else {
            return None;
        };
        at += skip;
        at += line.get(at..)?.strip_prefix(b",\"action\":".as_slice()).map(|_| 10)?;
        let action_end = skip_value(line, at)?;
        let action = std::str::from_utf8(line.get(at..action_end)?).ok()?;
        Some(Decided { rule_id, matched, action })
    }

    /// The same fields from a parsed line.
    fn from_record(r: &RawRecord<'l>) -> Option<Decided<'l>> {
        let rule_id = r.rule_id.map_or("null", |v| v.get());
        let matched = match r.matched.map(|m| m.get()) {
            Some("true") => true,
            Some("false") => false,
            _ => rule_id != "null",
        };
        Some(Decided { rule_id, matched, action: r.action?.get() })
    }

    /// The rule's id, unquoted; `None` for `null`.
    fn rule_id(&self) -> Option<std::borrow::Cow<'l, str>> {
        if self.rule_id == "null" {
            return None;
        }
        if let Some(plain) = self.rule_id.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
            if !plain.contains('\\') {
                return Some(std::borrow::Cow::Borrowed(plain));
            }
        }
        serde_json::from_str::<String>(self.rule_id).ok().map(std::borrow::Cow::Owned)
    }
}

/// The id a snapshot line starts with (`{"id":"…"`).
fn line_id(line: &[u8]) -> Option<SnapshotId> {
    let text = line.strip_prefix(b"{\"id\":\"")?.get(..36)?;
    SnapshotId::parse(std::str::from_utf8(text).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> SystemTime {
        humantime::parse_rfc3339(text).unwrap()
    }

    #[test]
    fn a_query_string_is_read_with_every_parameter() {
        let now = at("2026-12-01T08:30:00Z");
        let q = RecentQuery::parse(
            "table=risk&rule=big+one&outcome=matched&action=decision%3Adeny&since=5m&limit=7\
             &before=01a230b8-dbd5-7137-bffb-a4cb18ebdb45",
            now,
        )
        .unwrap();
        assert_eq!(q.table.as_deref(), Some("risk"));
        assert_eq!(q.rule.as_deref(), Some("big one"));
        assert_eq!(q.outcome, Some(Outcome::Matched));
        assert_eq!(q.action, Some(ActionFilter::Member { key: "decision".into(), value: "deny".into() }));
        assert_eq!(q.since_ms, Some(unix_ms(at("2026-12-01T08:25:00Z"))));
        assert_eq!(q.limit, 7);
        assert!(q.before.is_some());
        assert_eq!(RecentQuery::parse("", now).unwrap(), RecentQuery::default());
        assert_eq!(RecentQuery::parse("&&", now).unwrap().limit, DEFAULT_LIMIT);
        assert_eq!(RecentQuery::parse("limit=0", now).unwrap().limit, 0);
        assert_eq!(RecentQuery::parse("limit=1000", now).unwrap().limit, 1000);
        assert_eq!(RecentQuery::parse("action=deny", now).unwrap().action, Some(ActionFilter::Any("deny".into())));
    }

    #[test]
    fn since_reads_utc_offset_and_relative_times() {
        let now = at("2026-12-01T08:30:00Z");
        let ms = |s: &str| RecentQuery::parse(&format!("since={s}"), now).map(|q| q.since_ms.unwrap());
        let utc = unix_ms(at("2026-12-01T08:00:00Z"));
        assert_eq!(ms("2026-12-01T08:00:00Z"), Ok(utc));
        assert_eq!(ms("2026-12-01t08:00:00z"), Ok(utc));
        assert_eq!(ms("2026-12-01T10:00:00%2B02:00"), Ok(utc));
        // a `+` sent unencoded arrives as a space
        assert_eq!(ms("2026-12-01T10:00:00+02:00"), Ok(utc));
        assert_eq!(ms("2026-12-01T05:30:00-02:30"), Ok(utc));
        assert_eq!(ms("2026-12-01T08:00:00.250Z"), Ok(utc + 250));
        assert_eq!(ms("30m"), Ok(utc));
        assert_eq!(ms("1h30m"), Ok(unix_ms(at("2026-12-01T07:00:00Z"))));
        assert_eq!(ms("90s"), Ok(unix_ms(at("2026-12-01T08:28:30Z"))));
        for bad in ["yesterday", "60", "2026-12-01", "2026-12-01T08:00:00", "2026-12-01T08:00:00+25:00", "-5m"] {
            let e = ms(bad).unwrap_err();
            assert!(e.0.contains("RFC 3339") && e.0.contains("5m"), "{bad}: {e}");
        }
    }

    #[test]
    fn bad_queries_say_what_is_accepted() {
        let now = SystemTime::now();
        let e = |q: &str| RecentQuery::parse(q, now).unwrap_err().0;
        assert!(
            e("tabel=risk").contains("unknown parameter \"tabel\"; GET /snapshots takes table, rule"),
            "{}",
            e("tabel=risk")
        );
        assert!(e("limit=1001").contains("from 0 to 1000"));
        assert!(e("limit=-1").contains("from 0 to 1000"));
        assert!(e("limit=ten").contains("from 0 to 1000"));
        assert!(e("table=a&table=b").contains("given twice"));
        assert!(e("table=").contains("needs a value"));
        assert!(e("outcome=deny").contains("action=VALUE"));
        assert!(e("action=%7B%7D").contains("KEY:VALUE"));
        assert!(e("before=nope").contains("not a snapshot id"));
        assert!(e("table=%FF").contains("UTF-8"));
    }

    #[test]
    fn actions_match_by_member_or_any_member() {
        let member = |k: &str, v: &str| ActionFilter::Member { key: k.into(), value: v.into() };
        let any = |v: &str| ActionFilter::Any(v.into());
        let action = r#"{"decision":"deny","status":404,"allow":false,"why":null}"#;
        assert!(member("decision", "deny").matches(action));
        assert!(!member("decision", "allow").matches(action));
        assert!(!member("reason", "deny").matches(action));
        assert!(member("status", "404").matches(action));
        assert!(member("status", "404.0").matches(action));
        assert!(member("allow", "false").matches(action));
        assert!(member("why", "null").matches(action));
        assert!(any("deny").matches(action));
        assert!(any("404").matches(action));
        assert!(!any("decision").matches(action));
        assert!(any("3").matches("3"));
        assert!(any("cache").matches("\"cache\""));
        assert!(!any("cache").matches("null"));
    }

    fn line(ms: u64, n: u64, table: &str, rule: Option<&str>, action: &str) -> String {
        let id = SnapshotId::from_u128((u128::from(ms) << 80) | (7 << 76) | u128::from(n));
        let rule_json = rule.map_or("null".to_string(), |r| format!("\"{r}\""));
        format!(
            "{{\"id\":\"{}\",\"timestamp\":\"x\",\"table\":\"{table}\",\"version\":\"v\",\"input\":{{\"table\":\"{table}x\"}},\
             \"rule_id\":{rule_json},\"matched\":{},\"action\":{action}}}\n",
            id.text().as_str(),
            rule.is_some()
        )
    }

    fn ids(l: &Listing) -> Vec<u64> {
        l.snapshots.iter().map(|s| line_id(s.as_bytes()).unwrap().unix_ms()).collect()
    }

    #[test]
    fn the_newest_matching_lines_are_kept_and_truncation_is_told() {
        let mut batch_a = String::new();
        let mut batch_b = String::new();
        for ms in 1..=10u64 {
            let (table, rule) = if ms % 2 == 0 { ("risk", Some("big")) } else { ("gate", None) };
            let l = line(ms, ms, table, rule, r#"{"a":"x"}"#);
            if ms <= 5 {
                batch_a.push_str(&l);
            } else {
                batch_b.push_str(&l);
            }
        }
        let run = |q: &RecentQuery, max_bytes: usize| {
            let mut c = Collector::new(q, max_bytes);
            c.scan(batch_b.as_bytes(), 6, 10);
            c.scan(batch_a.as_bytes(), 1, 5);
            c.finish(Window::default())
        };
        let all = run(&RecentQuery::default(), usize::MAX);
        assert_eq!(ids(&all), (1..=10).rev().collect::<Vec<_>>());
        assert!(!all.truncated);
        let three = run(&RecentQuery { limit: 3, ..RecentQuery::default() }, usize::MAX);
        assert_eq!(ids(&three), [10, 9, 8]);
        assert!(three.truncated);
        // batch a was hopeless and only read until it told the listing is truncated: not at all
        assert_eq!(three.scanned, 5);
        let risk = run(&RecentQuery { table: Some("risk".into()), ..RecentQuery::default() }, usize::MAX);
        assert_eq!(ids(&risk), [10, 8, 6, 4, 2]);
        // the input's `"table":"riskx"` is not the table
        let riskx = run(&RecentQuery { table: Some("riskx".into()), ..RecentQuery::default() }, usize::MAX);
        assert!(riskx.snapshots.is_empty());
        let default = run(&RecentQuery { outcome: Some(Outcome::Default), ..RecentQuery::default() }, usize::MAX);
        assert_eq!(ids(&default), [9, 7, 5, 3, 1]);
        let big = run(&RecentQuery { rule: Some("big".into()), limit: 2, ..RecentQuery::default() }, usize::MAX);
        assert_eq!(ids(&big), [10, 8]);
        assert!(big.truncated);
        let since = run(&RecentQuery { since_ms: Some(7), ..RecentQuery::default() }, usize::MAX);
        assert_eq!(ids(&since), [10, 9, 8, 7]);
        assert!(!since.truncated);
        let before_id = line_id(line(4, 4, "", None, "").as_bytes()).unwrap();
        let before = run(&RecentQuery { before: Some(before_id), ..RecentQuery::default() }, usize::MAX);
        assert_eq!(ids(&before), [3, 2, 1]);
        let none = run(&RecentQuery { limit: 0, ..RecentQuery::default() }, usize::MAX);
        assert!(none.snapshots.is_empty() && none.truncated);
        let nothing = run(&RecentQuery { limit: 0, rule: Some("nope".into()), ..RecentQuery::default() }, usize::MAX);
        assert!(nothing.snapshots.is_empty() && !nothing.truncated);
        // the byte cap keeps the newest that fit
        let one_line = all.snapshots[0].len();
        let capped = run(&RecentQuery::default(), one_line * 2 + 1);
        assert_eq!(ids(&capped), [10, 9]);
        assert!(capped.truncated);
        // a line seen twice is listed once
        let q = RecentQuery::default();
        let mut c = Collector::new(&q, usize::MAX);
        c.scan(batch_b.as_bytes(), 6, 10);
        c.scan(batch_b.as_bytes(), 6, 10);
        assert_eq!(ids(&c.finish(Window::default())), [10, 9, 8, 7, 6]);
    }

    /// Real lines, as the recorder encodes them: the fields after the input are read where they
    /// are, whatever the input holds, and agree with a parse.
    #[test]
    fn the_decided_fields_are_read_past_any_input() {
        use crate::snapshot::record::{encode, Event, Redact};
        use crate::table::{Limits, Table};
        let table = Table::from_bytes(
            std::path::Path::new("t.json"),
            br#"{"default": {"decision": "ask"}, "rules": [
              {"id": "r\"q", "condition": "x > 10", "action": {"decision": "deny", "n": [1, {"a": "}"}]}}]}"#,
            &Limits::default(),
        )
        .unwrap();
        let inputs: [&[u8]; 4] = [
            br#"{"x": 50}"#,
            br#"{"x": 1, "rule_id": "fake", "tried": 3, "matched": true, "action": {"decision": "deny"}}"#,
            b"{\"x\": 50,\n \"s\": \",\\\"tried\\\":1,\\\"rule_id\\\":\\\"no\\\"\", \"card\": \"4111\"}",
            br#"{"x": 2, "card": "4111", "deep": [[[{"}": "{"}]]]}"#,
        ];
        for redact in [vec![], vec!["card".to_string()]] {
            let redact = Redact::new(&redact);
            for input in inputs {
                let decision = table.decide(input, false).unwrap();
                let ev = Event::new(&table, &decision, input);
                let (mut msg, mut out, mut redacted) = (String::new(), String::new(), String::new());
                let red = (!redact.is_empty()).then(|| {
                    redact.write(input, &mut redacted);
                    redacted.as_str()
                });
                encode(crate::snapshot::next_id(), &ev, red, &mut msg, &mut out);
                let line = out.trim_end().as_bytes();
                let fast = Decided::read(line).unwrap_or_else(|| panic!("not read: {}", out));
                let parsed = RawRecord::parse(line).unwrap();
                let slow = Decided::from_record(&parsed).unwrap();
                assert_eq!(
                    (fast.rule_id, fast.matched, fast.action),
                    (slow.rule_id, slow.matched, slow.action),
                    "{out}"
                );
                let x_big = input.starts_with(br#"{"x": 50"#);
                assert_eq!(fast.matched, x_big, "{out}");
                assert_eq!(fast.rule_id().as_deref(), x_big.then_some("r\"q"), "{out}");
            }
        }
    }

    #[test]
    fn a_listing_is_json_with_each_snapshot_as_recorded() {
        let l = Listing {
            snapshots: vec![line(2, 2, "risk", Some("big"), "{\"a\":1}").trim_end().into()],
            truncated: true,
            window: Window { snapshots: 5, oldest_ms: Some(1_764_577_750_000), newest_ms: Some(1_764_577_750_123) },
            scanned: 5,
        };
        let mut out = String::new();
        l.write_json(&mut out).unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["count"], 1);
        assert_eq!(v["truncated"], true);
        assert_eq!(v["window"]["snapshots"], 5);
        assert_eq!(v["window"]["oldest"], "2025-12-01T08:29:10.000Z");
        assert_eq!(v["window"]["newest"], "2025-12-01T08:29:10.123Z");
        assert_eq!(v["snapshots"][0]["rule_id"], "big");
        let mut empty = String::new();
        Listing::default().write_json(&mut empty).unwrap();
        let v: serde_json::Value = serde_json::from_str(&empty).unwrap();
        assert_eq!(v["window"]["oldest"], serde_json::Value::Null);
        assert_eq!(v["snapshots"], serde_json::json!([]));
    }
}
