//! The rule index ("decision-tree augmented" first-match evaluation).
//!
//! Every top-level conjunct of a rule that tests a single input field against
//! literals (`f == "x"`, `f in [..]`, `f > 10`, `!f`, `f`, and `&&`/`||`/`!`
//! of those) can rule the rule out from that field's value alone. For each such
//! field the value domain is cut into *atoms* — nil, true, false, each literal
//! string, "another string", each literal number and each open interval
//! between them, arrays, objects — within which every such conjunct has one
//! fixed truth. Each atom gets a bitset of the rules still possible; at request
//! time the input's atoms are looked up and their bitsets intersected, and only
//! the surviving rules are evaluated, in order.
//!
//! The bitsets are computed by running each conjunct through the real
//! evaluator on one representative value per atom, so the index can never
//! disagree with evaluation; when a representative cannot be found (two floats
//! with nothing between them) the atom prunes nothing.

use std::cmp::Ordering;

use bumpalo::Bump;
use rustc_hash::FxHashMap;

use crate::expr::eval::{self, Ctx};
use crate::expr::ir::Node;
use crate::expr::ops::{self, UnOp};
use crate::expr::program::SlotValue;
use crate::expr::value::{Array, Const, Object, Value};
use crate::expr::Program;

/// Upper bound on one field's bitsets, in bytes; a field needing more is not indexed.
const MAX_FIELD_BYTES: usize = 4 << 20;

/// Bitsets of rules, one per atom, for one indexed field.
#[derive(Debug)]
struct FieldIndex {
    slot: u32,
    strings: FxHashMap<Box<str>, u32>,
    numbers: Vec<Const>,
    /// atom of: nil, true, false, other string, array, object, read error, NaN
    fixed: [u32; 8],
    /// first number atom: below numbers[0]; then point, interval, point, ... above the last
    number_base: u32,
    bits: Vec<u64>,
    /// per atom, the words of its bitset that are not zero: `nonzero[starts[a]..starts[a + 1]]`
    nonzero: Vec<u32>,
    starts: Vec<u32>,
}

const NIL: usize = 0;
const TRUE: usize = 1;
const FALSE: usize = 2;
const OTHER_STRING: usize = 3;
const ARRAY: usize = 4;
const OBJECT: usize = 5;
const READ_ERROR: usize = 6;
const NAN: usize = 7;

/// The index of one table's rules.
#[derive(Debug)]
pub struct RuleIndex {
    words: usize,
    rules: usize,
    fields: Vec<FieldIndex>,
}

/// The field a conjunct depends on, if it is one the index understands.
fn term_slot(node: &Node) -> Option<u32> {
    fn scalar(c: &Const) -> bool {
        !matches!(c, Const::Array(_) | Const::Object(_))
    }
    fn direct(operand: &Node) -> Option<u32> {
        match operand {
            Node::Slot(s) => Some(*s),
            _ => None,
        }
    }
    match node {
        Node::Slot(s) => Some(*s),
        Node::EqConst { operand, value, .. } if scalar(value) => direct(operand),
        Node::CmpConst { operand, value: Const::Int(_) | Const::Float(_), .. } => direct(operand),
        Node::InSet { operand, set, .. } if set.items.iter().all(scalar) => direct(operand),
        Node::Unary(UnOp::Not, x) => term_slot(x),
        Node::And(items) | Node::Or(items) => {
            let first = term_slot(items.first()?)?;
            items.iter().skip(1).all(|i| term_slot(i) == Some(first)).then_some(first)
        }
        _ => None,
    }
}

/// Literals a conjunct compares its field with.
fn literals<'n>(node: &'n Node, out: &mut Vec<&'n Const>) {
    match node {
        Node::EqConst { value, .. } | Node::CmpConst { value, .. } => out.push(value),
        Node::InSet { set, .. } => out.extend(set.items.iter()),
        Node::Unary(_, x) => literals(x, out),
        Node::And(items) | Node::Or(items) => items.iter().for_each(|i| literals(i, out)),
        _ => {}
    }
}

fn conjuncts(node: &Node) -> Vec<&Node> {
    match node {
        Node::And(items) => items.iter().collect(),
        other => vec![other],
    }
}

impl RuleIndex {
    /// Builds the index for `program.exprs` (one condition per rule).
    pub fn build(program: &Program) -> RuleIndex {
        let rules = program.exprs.len();
        let words = rules.div_ceil(64).max(1);
        let mut by_slot: FxHashMap<u32, Vec<(usize, &Node)>> = FxHashMap::default();
        for (r, cond) in program.exprs.iter().enumerate() {
            for term in conjuncts(cond) {
                if let Some(s) = term_slot(term) {
                    by_slot.entry(s).or_default().push((r, term));
                }
            }
        }
        let mut slots: Vec<u32> = by_slot.keys().copied().collect();
        slots.sort_unstable();
        let mut fields = Vec::new();
        for slot in slots {
            if let Some(f) = build_field(program, slot, &by_slot[&slot], rules, words) {
                fields.push(f);
            }
        }
        RuleIndex { words, rules, fields }
    }

    /// Number of fields the index uses.
    pub fn indexed_fields(&self) -> usize {
        self.fields.len()
    }

    /// Looks up the input's atoms: the bitsets of the rules each field still allows.
    pub fn select(&self, slots: &[SlotValue<'_>]) -> Selection<'_> {
        let mut sel = Selection { index: self, chosen: [&[]; 16], n: 0, extra: Vec::new(), driver: None };
        for f in &self.fields {
            let atom = f.classify(slots.get(f.slot as usize).copied().unwrap_or(Ok(Value::Nil))) as usize;
            let start = atom * self.words;
            let bits = f.bits.get(start..start + self.words).unwrap_or(&[]);
            let words = match (f.starts.get(atom), f.starts.get(atom + 1)) {
                (Some(&a), Some(&b)) => f.nonzero.get(a as usize..b as usize).unwrap_or(&[]),
                _ => &[],
            };
            // Walk only the non-zero words of the most selective field.
            if sel.driver.is_none_or(|d: &[u32]| words.len() < d.len()) {
                sel.driver = Some(words);
            }
            if sel.n < sel.chosen.len() {
                sel.chosen[sel.n] = bits;
                sel.n += 1;
            } else {
                sel.extra.push(bits);
            }
        }
        sel
    }
}

/// The rule bitsets chosen by one input's field values.
pub struct Selection<'i> {
    index: &'i RuleIndex,
    chosen: [&'i [u64]; 16],
    n: usize,
    extra: Vec<&'i [u64]>,
    driver: Option<&'i [u32]>,
}

impl Selection<'_> {
    /// Calls `visit` with each rule that may match, in rule order, among those
    /// set in `enabled`, until it returns `true`.
    pub fn for_each(&self, enabled: &[u64], mut visit: impl FnMut(usize) -> bool) {
        match self.driver {
            Some(words) => {
                for &w in words {
                    if self.word(w as usize, enabled, &mut visit) {
                        return;
                    }
                }
            }
            None => {
                for w in 0..self.index.words {
                    if self.word(w, enabled, &mut visit) {
                        return;
                    }
                }
            }
        }
    }

    fn word(&self, w: usize, enabled: &[u64], visit: &mut impl FnMut(usize) -> bool) -> bool {
        let mut bits = enabled.get(w).copied().unwrap_or(0);
        for b in self.chosen[..self.n].iter().chain(self.extra.iter()) {
            bits &= b.get(w).copied().unwrap_or(0);
            if bits == 0 {
                return false;
            }
        }
        while bits != 0 {
            let r = w * 64 + bits.trailing_zeros() as usize;
            if r < self.index.rules && visit(r) {
                return true;
            }
            bits &= bits - 1;
        }
        false
    }
}

impl FieldIndex {
    fn classify(&self, v: SlotValue<'_>) -> u32 {
        match v {
            Err(_) => self.fixed[READ_ERROR],
            Ok(Value::Nil) => self.fixed[NIL],
            Ok(Value::Bool(true)) => self.fixed[TRUE],
            Ok(Value::Bool(false)) => self.fixed[FALSE],
            Ok(Value::Str(s)) => self.strings.get(s).copied().unwrap_or(self.fixed[OTHER_STRING]),
            Ok(Value::Array(_)) => self.fixed[ARRAY],
            Ok(Value::Object(_)) => self.fixed[OBJECT],
            Ok(n @ (Value::Int(_) | Value::Float(_))) => {
                if matches!(n, Value::Float(f) if f.is_nan()) {
                    return self.fixed[NAN];
                }
                let p = self
                    .numbers
                    .partition_point(|t| ops::compare_numbers(&Value::from_const(t), &n) == Some(Ordering::Less));
                let exact = self
                    .numbers
                    .get(p)
                    .is_some_and(|t| ops::compare_numbers(&Value::from_const(t), &n) == Some(Ordering::Equal));
                self.number_base + 2 * p as u32 + u32::from(exact)
            }
        }
    }
}

fn num_value(c: &Const) -> Value<'_> {
    Value::from_const(c)
}

fn build_field(
    program: &Program,
    slot: u32,
    terms: &[(usize, &Node)],
    rules: usize,
    words: usize,
) -> Option<FieldIndex> {
    let mut lits = Vec::new();
    for (_, t) in terms {
        literals(t, &mut lits);
    }
    let mut strings: Vec<&str> = Vec::new();
    let mut numbers: Vec<Const> = Vec::new();
    for c in lits {
        match c {
            Const::Str(s) => strings.push(s),
            Const::Float(f) if f.is_nan() => {}
            Const::Int(_) | Const::Float(_) => numbers.push(c.clone()),
            _ => {}
        }
    }
    strings.sort_unstable();
    strings.dedup();
    numbers.sort_by(|a, b| ops::compare_numbers(&num_value(a), &num_value(b)).unwrap_or(Ordering::Equal));
    numbers.dedup_by(|a, b| ops::compare_numbers(&num_value(a), &num_value(b)) == Some(Ordering::Equal));

    // Representatives: None means "cannot represent: prune nothing".
    let arena = Bump::new();
    let other = unused_string(&strings, &arena);
    let empty_array: &[Const] = &[];
    let empty_object: &[(Box<str>, Const)] = &[];
    let mut reps: Vec<Option<Value<'_>>> = vec![
        Some(Value::Nil),
        Some(Value::Bool(true)),
        Some(Value::Bool(false)),
        Some(Value::Str(other)),
        Some(Value::Array(Array::Const(empty_array))),
        Some(Value::Object(Object::Const(empty_object))),
        None, // read error: handled below (no conjunct on the field holds)
        Some(Value::Float(f64::NAN)),
    ];
    let mut string_atoms = FxHashMap::default();
    for s in &strings {
        string_atoms.insert(Box::<str>::from(*s), reps.len() as u32);
        reps.push(Some(Value::Str(s)));
    }
    let number_base = reps.len() as u32;
    let values: Vec<Value<'_>> = numbers.iter().map(num_value).collect();
    for (i, v) in values.iter().enumerate() {
        let below = if i == 0 { None } else { Some(values[i - 1]) };
        reps.push(between(below, Some(*v)));
        reps.push(Some(*v));
    }
    reps.push(between(values.last().copied(), None));

    let atoms = reps.len();
    if atoms.saturating_mul(words).saturating_mul(8) > MAX_FIELD_BYTES {
        return None;
    }
    let mut bits = vec![u64::MAX; atoms * words];
    let mut useful = false;
    let mut slots: Vec<SlotValue<'_>> = vec![Ok(Value::Nil); program.paths.len()];
    for (atom, rep) in reps.iter().enumerate() {
        if atom == READ_ERROR {
            for (r, _) in terms {
                bits[atom * words + r / 64] &= !(1u64 << (r % 64));
                useful = true;
            }
            continue;
        }
        let Some(rep) = rep else { continue };
        slots[slot as usize] = Ok(*rep);
        let mut cx = Ctx::with_slots(program, &arena, slots.clone());
        for (r, term) in terms {
            let holds = matches!(eval::eval(term, &mut cx), Ok(Value::Bool(true)));
            if !holds {
                bits[atom * words + r / 64] &= !(1u64 << (r % 64));
                useful = true;
            }
        }
    }
    // Clear the bits past the last rule so iteration never reports them.
    if !rules.is_multiple_of(64) {
        let mask = (1u64 << (rules % 64)) - 1;
        for a in 0..atoms {
            bits[a * words + words - 1] &= mask;
        }
    }
    if !useful {
        return None;
    }
    let fixed = [0, 1, 2, 3, 4, 5, 6, 7];
    let mut nonzero = Vec::new();
    let mut starts = vec![0u32];
    for a in 0..atoms {
        nonzero.extend((0..words).filter(|w| bits[a * words + w] != 0).map(|w| w as u32));
        starts.push(nonzero.len() as u32);
    }
    Some(FieldIndex { slot, strings: string_atoms, numbers, fixed, number_base, bits, nonzero, starts })
}

/// A number strictly between `lo` and `hi` (either may be unbounded), or None
/// when floats leave no room.
fn between<'a>(lo: Option<Value<'a>>, hi: Option<Value<'a>>) -> Option<Value<'a>> {
    let f = |v: Value<'_>| match v {
        Value::Int(i) => i as f64,
        Value::Float(x) => x,
        _ => 0.0,
    };
    let candidate = match (lo, hi) {
        (None, None) => 0.0,
        (None, Some(h)) => f(h) - 1.0,
        (Some(l), None) => f(l) + 1.0,
        (Some(l), Some(h)) => f(l) / 2.0 + f(h) / 2.0,
    };
    let v = Value::Float(candidate);
    let above_lo = lo.is_none_or(|l| ops::compare_numbers(&v, &l) == Some(Ordering::Greater));
    let below_hi = hi.is_none_or(|h| ops::compare_numbers(&v, &h) == Some(Ordering::Less));
    // Strictly inside by exact comparison, so it stands for every value of the interval.
    (above_lo && below_hi).then_some(v)
}

fn unused_string<'a>(taken: &[&str], arena: &'a Bump) -> &'a str {
    let mut n = 0u64;
    loop {
        let s = format!("\u{10FFFF}clef-other-{n}");
        if !taken.contains(&s.as_str()) {
            return arena.alloc_str(&s);
        }
        n += 1;
    }
}
