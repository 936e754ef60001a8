//! What an explanation says of a rule that did not hold: the first top-level conjunct that
//! was not true, with the values of the fields it reads (`amount > 100 was false (amount = 42)`).
//!
//! An explained decision writes one such line per rule it tried: hundreds on a large table. So
//! what a line needs of its rule (the conjuncts' text, the fields each reads and their slots)
//! is found once per rule, the first time a decision explains it ([`Parts`]), and a field's
//! value is written once per decision however many rules show it. Both are kept escaped for
//! JSON too, and each line is written in both forms ([`Reason`]): a response then copies the
//! line rather than escaping it again, which on paths like `a["b"]` is a quote every few bytes.

use std::sync::OnceLock;

use smallvec::SmallVec;

use crate::expr::ast::{Expr, ExprKind, Step};
use crate::expr::ir::PathSeg;
use crate::expr::json;
use crate::expr::program::SlotValue;
use crate::expr::value::Value;
use crate::expr::Program;

/// A span of a rule's condition text.
type Span = (u32, u32);

/// One top-level conjunct of a rule, as its reason line needs it.
#[derive(Debug)]
pub(crate) struct Part {
    /// its text in the condition
    text: Span,
    /// the same, escaped for a JSON string
    text_json: Box<str>,
    /// the fields it reads, in order; `None` when one has no slot (its value is then found
    /// from the syntax tree)
    fields: Option<Box<[Field]>>,
}

/// A field a conjunct reads, as its reason line shows it.
#[derive(Debug)]
struct Field {
    /// as written in the condition
    path: Span,
    /// the same, escaped for a JSON string
    path_json: Box<str>,
    slot: u32,
}

/// A reason line, as written and escaped for a JSON string.
#[derive(Debug, Default)]
pub(crate) struct Reason {
    pub(crate) text: String,
    pub(crate) json: Option<String>,
}

impl Reason {
    /// A line written only as text (a response escapes it).
    pub(crate) fn plain(text: String) -> Reason {
        Reason { text, json: None }
    }
}

/// By slot: what a decision's reason lines show of a field, written once per decision, as
/// written and escaped for a JSON string.
pub(crate) type Previews = Vec<Option<(String, String)>>;

fn escaped(text: &str) -> Box<str> {
    let mut out = String::with_capacity(text.len() + 8);
    json::write_escaped(text, &mut out);
    out.into()
}

/// By rule: its [`Part`]s, found the first time a decision explains the rule. Slots are the
/// engine's: an engine built again starts afresh.
#[derive(Debug, Default)]
pub(crate) struct Parts(Box<[OnceLock<Box<[Part]>>]>);

fn span_of(e: &Expr) -> Span {
    (e.span.start as u32, e.span.end as u32)
}

fn text_of(condition: &str, (start, end): Span) -> Option<&str> {
    condition.get(start as usize..end as usize)
}

impl Parts {
    /// Room for `rules` rules, none found yet.
    pub(crate) fn new(rules: usize) -> Parts {
        Parts((0..rules).map(|_| OnceLock::new()).collect())
    }

    /// The parts of rule `r` (its condition `ast`, written `condition`), found now if no
    /// decision has needed them yet.
    pub(crate) fn of(&self, r: usize, ast: &Expr, condition: &str, program: &Program) -> &[Part] {
        let Some(cell) = self.0.get(r) else { return &[] };
        cell.get_or_init(|| {
            conjuncts(ast)
                .into_iter()
                .map(|part| {
                    let mut seen: SmallVec<[(&str, &Expr); 4]> = SmallVec::new();
                    field_paths(part, condition, &mut seen);
                    let fields = seen
                        .iter()
                        .map(|(path, e)| {
                            let slot = program.find_slot(&path_of(e)?)?;
                            Some(Field { path: span_of(e), path_json: escaped(path), slot })
                        })
                        .collect::<Option<Box<[_]>>>();
                    let text = span_of(part);
                    let text_json = escaped(text_of(condition, text).unwrap_or(condition));
                    Part { text, text_json, fields }
                })
                .collect()
        })
    }
}

/// The reason line of `part`, a conjunct of the rule written `condition` that came out as
/// `v`, in both forms: the fields' values from `slots`, each [`preview`]ed once per decision
/// into `previews`. `None` when a field has no slot: [`part_reason`] then writes it from the
/// tree.
pub(crate) fn reason_from_slots(
    condition: &str,
    part: &Part,
    v: &SlotValue<'_>,
    slots: &[SlotValue<'_>],
    previews: &mut Previews,
) -> Option<Reason> {
    let fields = part.fields.as_deref()?;
    for field in fields {
        let slot = field.slot as usize;
        if previews.len() <= slot {
            previews.resize(slot + 1, None);
        }
        if let Some(kept @ None) = previews.get_mut(slot) {
            let shown = preview(slots.get(slot).copied().unwrap_or(Ok(Value::Nil)));
            let shown_json = escaped(&shown).into();
            *kept = Some((shown, shown_json));
        }
    }
    let shown = |field: &Field| previews.get(field.slot as usize).and_then(Option::as_ref);
    let text = text_of(condition, part.text).unwrap_or(condition);
    // the fields' `path = value` pieces, measured first: a reason is written into one string
    // of its exact size, not grown (a trace writes two per false rule)
    let (mut plain_bytes, mut json_bytes) = (0, 0);
    for field in fields {
        let (plain, json) = shown(field).map_or(("nil", "nil"), |(plain, json)| (plain.as_str(), json.as_str()));
        plain_bytes += text_of(condition, field.path).map_or(1, str::len) + " = ".len() + plain.len();
        json_bytes += field.path_json.len() + " = ".len() + json.len();
    }
    let plain = write_reason(text, v, fields.len(), plain_bytes, |i, out| {
        if let Some(field) = fields.get(i) {
            out.push_str(text_of(condition, field.path).unwrap_or("?"));
            out.push_str(" = ");
            out.push_str(shown(field).map_or("nil", |(plain, _)| plain));
        }
    });
    // what joins the pieces (` was false (`, ` = `, `, `) needs no escape
    let json = write_reason(&part.text_json, v, fields.len(), json_bytes, |i, out| {
        if let Some(field) = fields.get(i) {
            out.push_str(&field.path_json);
            out.push_str(" = ");
            out.push_str(shown(field).map_or("nil", |(_, json)| json));
        }
    });
    Some(Reason { text: plain, json: Some(json) })
}

/// The top-level conjuncts of a condition (itself when it is not an `&&`), through
/// parentheses: `a && (b && c)` has three, as it compiles to three nodes.
pub(crate) fn conjuncts(e: &Expr) -> SmallVec<[&Expr; 8]> {
    fn add<'e>(e: &'e Expr, out: &mut SmallVec<[&'e Expr; 8]>) {
        match &e.kind {
            ExprKind::And(items) => items.iter().for_each(|i| add(i, out)),
            _ => out.push(e),
        }
    }
    let mut out = SmallVec::new();
    add(e, &mut out);
    out
}

/// The reason of a false condition: the first of `parts` whose value (`value(i)`) is not
/// `true`, with the values of the fields it reads (`field`: their [`preview`]). What
/// [`Parts`] does from a rule's found fields, this does from the syntax tree: the reference
/// evaluator's explanations, and a conjunct reading a field with no slot.
pub(crate) fn first_false<'e, 'v, C: ?Sized>(
    condition: &'e str,
    parts: &[&'e Expr],
    cx: &mut C,
    mut value: impl FnMut(usize, &mut C) -> SlotValue<'v>,
    mut field: impl FnMut(&'e Expr, &mut C) -> String,
) -> String {
    for (i, part) in parts.iter().enumerate() {
        let v = value(i, cx);
        if !matches!(v, Ok(Value::Bool(true))) {
            return part_reason(condition, part, &v, |e| field(e, cx));
        }
    }
    format!("{condition} was false")
}

/// The reason line of `part`, a conjunct of the rule written `condition` that came out as `v`
/// rather than true.
pub(crate) fn part_reason<'e>(
    condition: &'e str,
    part: &'e Expr,
    v: &SlotValue<'_>,
    mut field: impl FnMut(&'e Expr) -> String,
) -> String {
    let mut seen: SmallVec<[(&str, &Expr); 4]> = SmallVec::new();
    field_paths(part, condition, &mut seen);
    let text = condition.get(part.span.start..part.span.end).unwrap_or(condition);
    // the values are written as they are asked for: a guess of their size
    write_reason(text, v, seen.len(), seen.len() * 48, |i, out| {
        if let Some((path, e)) = seen.get(i) {
            out.push_str(path);
            out.push_str(" = ");
            out.push_str(&field(e));
        }
    })
}

/// `text was false (a = 1, b = "x")`: a conjunct that came out as `v`, then `fields` fields,
/// each written by `field(i, out)` as `path = value`, which take about `field_bytes` together.
fn write_reason(
    text: &str,
    v: &SlotValue<'_>,
    fields: usize,
    field_bytes: usize,
    mut field: impl FnMut(usize, &mut String),
) -> String {
    let outcome = match v {
        Ok(Value::Nil) => "was nil",
        _ => "was false",
    };
    // one string, written once: an explanation writes one of these per false rule
    // ` (` or `, ` before each field, and `)`
    let mut reason = String::with_capacity(text.len() + 1 + outcome.len() + 2 * fields + 1 + field_bytes);
    reason.push_str(text);
    reason.push(' ');
    reason.push_str(outcome);
    for i in 0..fields {
        reason.push_str(if i == 0 { " (" } else { ", " });
        field(i, &mut reason);
    }
    if fields > 0 {
        reason.push(')');
    }
    reason
}

/// What an explanation shows of a field's value: [`shorten`]ed, or the error reading it.
pub(crate) fn preview(v: SlotValue<'_>) -> String {
    match v {
        Ok(v) => shorten(&v),
        Err(e) => format!("<{e}>"),
    }
}

/// A value as JSON, cut to 80 characters (77 and `...`): what an explanation shows of a field.
/// Only the start of a large value is written.
fn shorten(v: &Value<'_>) -> String {
    const SHOWN: usize = 80;
    let mut s = String::new();
    // each character takes at most 4 bytes: 4 × 80 bytes hold the 80 characters shown
    json::write_value_bounded(v, &mut s, 4 * SHOWN);
    if s.chars().count() > SHOWN {
        s = s.chars().take(SHOWN - 3).collect::<String>() + "...";
    }
    s
}

/// Field paths read by an expression, as written, each with its expression.
fn field_paths<'e>(e: &'e Expr, src: &'e str, out: &mut SmallVec<[(&'e str, &'e Expr); 4]>) {
    match &e.kind {
        ExprKind::Field(_) => push_path(e, src, out),
        ExprKind::Access(base, steps) if matches!(base.kind, ExprKind::Field(_)) => {
            if steps.iter().all(|(s, _)| matches!(s, Step::Member(_))) {
                push_path(e, src, out);
            } else {
                e.for_each_child(|c| field_paths(c, src, out));
            }
        }
        _ => e.for_each_child(|c| field_paths(c, src, out)),
    }
}

/// The input path of a field expression that [`field_paths`] collects (`a`, `a.b.c`).
pub(crate) fn path_of(e: &Expr) -> Option<Vec<PathSeg>> {
    match &e.kind {
        ExprKind::Field(name) => Some(vec![PathSeg::Key(name.as_str().into())]),
        ExprKind::Access(base, steps) => {
            let ExprKind::Field(root) = &base.kind else { return None };
            let mut path = vec![PathSeg::Key(root.as_str().into())];
            for (step, _) in steps {
                match step {
                    Step::Member(m) => path.push(PathSeg::Key(m.as_str().into())),
                    Step::Index(_) => return None,
                }
            }
            Some(path)
        }
        _ => None,
    }
}

fn push_path<'e>(e: &'e Expr, src: &'e str, out: &mut SmallVec<[(&'e str, &'e Expr); 4]>) {
    let text = src.get(e.span.start..e.span.end).unwrap_or("?");
    if !out.iter().any(|(t, _)| *t == text) {
        out.push((text, e));
    }
}
