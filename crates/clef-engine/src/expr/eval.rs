//! The optimized evaluator: runs compiled `Node`s against one decision's slots.

use bumpalo::Bump;
use smallvec::SmallVec;

use super::ir::{AccessStep, Node, Target, Test, FAILS, HOLDS, NO_PROGRAM, NO_SLOT};
use super::ops::{self, BinOp, EvalError, EvalResult, Num, UnOp};
use super::patterns::{GroupState, PatternGroup};
use super::program::{Program, SlotValue};
use super::value::{same_bytes, Array, Const, Value};

/// Everything one decision's evaluation needs; cheap to create.
pub struct Ctx<'a> {
    program: &'a Program,
    /// the input's fields, by slot
    pub(crate) slots: Vec<SlotValue<'a>>,
    memos: Vec<Option<EvalResult<'a>>>,
    groups: Vec<Option<GroupState>>,
    /// by predicate, two words a 64: answered this decision, answered `true` (in the arena,
    /// when the decision first reaches a predicate: a plain slice, read at every predicate step)
    pred_bits: &'a mut [u64],
    /// the predicates that failed, with their errors (rare: a malformed input)
    pred_errors: Vec<(u32, EvalError)>,
    /// subjects of regexes translated into the table's alphabet this decision, by address
    /// and length (the text itself when it is ASCII)
    translated: SmallVec<[((usize, usize), &'a str); 4]>,
    /// where computed strings and arrays live until the decision ends
    pub(crate) arena: &'a Bump,
}

impl<'a> Ctx<'a> {
    /// A context with every slot nil (used for folding constants).
    pub(crate) fn new(program: &'a Program, arena: &'a Bump) -> Ctx<'a> {
        Ctx::with_slots(program, arena, vec![Ok(Value::Nil); program.paths.len()])
    }

    /// A context over the slots read from an input.
    pub fn with_slots(program: &'a Program, arena: &'a Bump, slots: Vec<SlotValue<'a>>) -> Ctx<'a> {
        let memos = if program.memos.is_empty() { Vec::new() } else { vec![None; program.memos.len()] };
        let groups = if program.groups.is_empty() { Vec::new() } else { vec![None; program.groups.len()] };
        Ctx {
            program,
            slots,
            memos,
            groups,
            pred_bits: &mut [],
            pred_errors: Vec::new(),
            translated: SmallVec::new(),
            arena,
        }
    }

    /// The input slots, once the decision is done with them.
    pub(crate) fn into_slots(self) -> Vec<SlotValue<'a>> {
        self.slots
    }

    /// The value of memo `id`, computed on first use.
    #[inline(never)]
    pub(crate) fn memo(&mut self, id: u32) -> EvalResult<'a> {
        if let Some(Some(v)) = self.memos.get(id as usize) {
            return *v;
        }
        let program = self.program;
        let r = match program.memos.get(id as usize) {
            Some(node) => match numeric_node(node, self) {
                Some(Numeric::Num(n)) => Ok(n.value()),
                Some(Numeric::Nil) => Ok(Value::Nil),
                None => eval(node, self),
            },
            None => Ok(Value::Nil),
        };
        if let Some(slot) = self.memos.get_mut(id as usize) {
            *slot = Some(r);
        }
        r
    }

    /// The answer of predicate `id` when this decision has computed it.
    #[inline(always)]
    fn known_pred(&self, id: u32) -> Option<Result<bool, EvalError>> {
        let (word, mask) = ((id / 64) as usize * 2, 1u64 << (id % 64));
        if self.pred_bits.get(word)? & mask == 0 {
            return None;
        }
        if self.pred_bits.get(word + 1).is_some_and(|w| w & mask != 0) {
            return Some(Ok(true));
        }
        Some(match self.pred_errors.iter().find(|(p, _)| *p == id) {
            Some((_, e)) => Err(*e),
            None => Ok(false),
        })
    }

    /// How many words of predicate bits this table's decisions need.
    pub(crate) fn pred_words(&self) -> usize {
        self.program.preds.len().div_ceil(64) * 2
    }

    /// Gives the decision `words` (zeroed, at least [`Ctx::pred_words`] long) for its
    /// predicate bits. Without them the first predicate allocates its bits in the arena,
    /// which for a table of a few predicates is most of what they cost a decision that
    /// matches early.
    pub(crate) fn lend_pred_bits(&mut self, words: &'a mut [u64]) {
        if words.len() >= self.pred_words() {
            self.pred_bits = words;
        }
    }

    /// The answer of predicate `id`, computed on first use.
    #[inline(never)]
    fn pred(&mut self, id: u32) -> Result<bool, EvalError> {
        if let Some(answer) = self.known_pred(id) {
            return answer;
        }
        self.compute_pred(id, NO_SLOT)
    }

    /// Computes predicate `id`, which this decision has not answered yet; `slot` is the
    /// slot of the field it tests, or [`NO_SLOT`] (see [`leaf_truth_of`]).
    // After `first_pred`, the in-place judgement here is asked a second time. Taking it out
    // (judging in `pred` instead) saved 1% of instructions and cost 9% of the time of a
    // nested-path decision (two 30-pair `farm-bench` runs): more mispredicted branches.
    #[inline(never)]
    fn compute_pred(&mut self, id: u32, slot: u32) -> Result<bool, EvalError> {
        let program = self.program;
        let answer = match program.preds.get(id as usize) {
            Some(node) => leaf_truth_of(node, slot, self).map_or_else(|| eval_truth(node, self, "?"), Ok),
            None => Ok(false),
        };
        match answer {
            Ok(holds) => self.know_pred(id, holds),
            Err(e) => {
                self.know_pred(id, false);
                self.pred_errors.push((id, e));
            }
        }
        answer
    }

    /// The first answer of predicate `id` in a branching program: a field against a constant
    /// is judged in place, as an atom is (`slot` from the step), without a call; the rest by
    /// [`Ctx::compute_pred`].
    #[inline(always)]
    fn first_pred(&mut self, id: u32, slot: u32) -> Result<bool, EvalError> {
        let program = self.program;
        match program.preds.get(id as usize).and_then(|node| leaf_truth_of(node, slot, self)) {
            Some(holds) => {
                self.know_pred(id, holds);
                Ok(holds)
            }
            None => self.compute_pred(id, slot),
        }
    }

    /// Records that predicate `id` is answered this decision, `holds` or not (an error is
    /// recorded as not holding, beside `pred_errors`).
    #[inline(always)]
    fn know_pred(&mut self, id: u32, holds: bool) {
        if self.pred_bits.is_empty() {
            self.alloc_pred_bits();
        }
        let (word, mask) = ((id / 64) as usize * 2, 1u64 << (id % 64));
        if let Some(w) = self.pred_bits.get_mut(word) {
            *w |= mask;
        }
        if holds {
            if let Some(w) = self.pred_bits.get_mut(word + 1) {
                *w |= mask;
            }
        }
    }

    #[inline(never)]
    #[cold]
    fn alloc_pred_bits(&mut self) {
        self.pred_bits = self.arena.alloc_slice_fill_copy(self.pred_words(), 0);
    }

    /// Sets memo `id` as if it had been computed (the rule index tries representative values).
    pub(crate) fn set_memo(&mut self, id: u32, value: EvalResult<'a>) {
        if let Some(slot) = self.memos.get_mut(id as usize) {
            *slot = Some(value);
        }
    }

    /// `s` as the table's regexes read it: translated into the program's alphabet (see
    /// `alphabet`), once per decision however many patterns run on it.
    fn translated(&mut self, s: &'a str) -> &'a str {
        let Some(alphabet) = &self.program.alphabet else { return s };
        // the strings of one decision all live until it ends: an address names one string
        let key = (s.as_ptr() as usize, s.len());
        if let Some(&(_, t)) = self.translated.iter().find(|(k, _)| *k == key) {
            return t;
        }
        let t = match alphabet.translated(s) {
            Some(out) => &*self.arena.alloc_str(&out),
            None => s,
        };
        self.translated.push((key, t));
        t
    }

    fn pattern_hit(&mut self, group: u32, index: u32, subject: &'a str) -> bool {
        let program = self.program;
        let (Some(pg), Some(state)) = (program.groups.get(group as usize), self.groups.get_mut(group as usize)) else {
            return false;
        };
        let state = state.get_or_insert_with(|| scanned(pg, subject));
        pg.test(index as usize, subject, state)
    }

    /// Group `group`'s literal pass over `subject` (its subject's value), done once per
    /// decision: by test, whether one of its literals occurred. The rule index reads it; the
    /// tests of the group answered later reuse the pass.
    pub(crate) fn group_candidates(&mut self, group: u32, subject: &'a str) -> Option<&[u64]> {
        let program = self.program;
        let pg = program.groups.get(group as usize)?;
        let state = self.groups.get_mut(group as usize)?.get_or_insert_with(|| scanned(pg, subject));
        Some(&state.candidates)
    }
}

fn scanned(group: &PatternGroup, subject: &str) -> GroupState {
    let mut state = group.state();
    group.scan(subject, &mut state);
    state
}

/// Evaluates an operand, reading slots, memos and constants without a recursive call.
#[inline(always)]
fn operand<'a>(node: &'a Node, cx: &mut Ctx<'a>) -> EvalResult<'a> {
    match node {
        Node::Slot(s) => cx.slots.get(*s as usize).copied().unwrap_or(Ok(Value::Nil)),
        Node::Const(c) => Ok(Value::from_const(c)),
        Node::Memo(m) => match cx.memos.get(*m as usize) {
            Some(Some(v)) => *v,
            _ => cx.memo(*m),
        },
        _ => eval(node, cx),
    }
}

/// Whether a node always yields a bool when it succeeds.
pub(crate) fn is_predicate(node: &Node) -> bool {
    node.is_comparison() || matches!(node, Node::Pred(_) | Node::And(_) | Node::Or(_) | Node::Unary(UnOp::Not, _))
}

/// Evaluates a rule's condition: true matches; false and nil do not; anything else is an error.
pub fn eval_condition<'a>(node: &'a Node, cx: &mut Ctx<'a>) -> Result<bool, EvalError> {
    if let Some(holds) = leaf_truth(node, cx) {
        return Ok(holds);
    }
    if is_predicate(node) {
        eval_truth(node, cx, "?")
    } else {
        ops::condition_outcome(&eval(node, cx)?)
    }
}

/// Evaluates the condition of rule `r` (`program.exprs[r]`): by its branching program when it
/// has one, else as [`eval_condition`] does.
pub fn eval_rule(r: usize, cx: &mut Ctx<'_>) -> Result<bool, EvalError> {
    let program = cx.program;
    match program.starts.get(r) {
        Some(&start) if start != NO_PROGRAM => run_branching(start, cx),
        _ => match program.exprs.get(r) {
            Some(condition) => eval_condition(condition, cx),
            None => Ok(false),
        },
    }
}

/// Runs the branching program whose first step is `start` (see [`super::branching`]): the
/// truth of its condition, or the error of the test that failed it.
fn run_branching(start: Target, cx: &mut Ctx<'_>) -> Result<bool, EvalError> {
    let program = cx.program;
    let mut at = start;
    loop {
        let Some(step) = program.steps.get(at as usize) else { return Ok(false) };
        let holds = match step.test {
            Test::Pred { id, slot } => match cx.known_pred(id) {
                Some(answer) => answer?,
                None => cx.first_pred(id, slot)?,
            },
            Test::Atom { atom, within, slot } => match program.atoms.get(atom as usize) {
                Some(test) => match leaf_truth_of(test, slot, cx) {
                    Some(holds) => holds,
                    None => eval_truth(test, cx, within.symbol())?,
                },
                None => false,
            },
        };
        at = if holds { step.if_true } else { step.if_false };
        if at >= FAILS {
            return Ok(at == HOLDS);
        }
    }
}

/// Calls `f` with an operand's value; a slot is read in place, not copied.
#[inline(always)]
fn with_value<'a, R>(
    node: &'a Node,
    cx: &mut Ctx<'a>,
    f: impl FnOnce(&Value<'a>) -> Result<R, EvalError>,
) -> Result<R, EvalError> {
    if let Node::Slot(s) = node {
        return match cx.slots.get(*s as usize) {
            Some(Ok(v)) => f(v),
            Some(Err(e)) => Err(*e),
            None => f(&Value::Nil),
        };
    }
    let v = operand(node, cx)?;
    f(&v)
}

/// The truth of the conjuncts most rules are made of — a field compared with a constant, a
/// bool field, its negation — in place, without a call: `None` for any other node, and for an
/// input value the general path must judge (an error, a type the test does not take, NaN),
/// which then gives the same answer.
#[inline(always)]
fn leaf_truth<'a>(node: &'a Node, cx: &Ctx<'a>) -> Option<bool> {
    leaf_truth_of(node, NO_SLOT, cx)
}

/// [`leaf_truth`] of a test whose field's slot is known (from its step), or
/// [`NO_SLOT`] to find it in the node.
#[inline(always)]
fn leaf_truth_of<'a>(node: &'a Node, known_slot: u32, cx: &Ctx<'a>) -> Option<bool> {
    let read = |s: u32| match cx.slots.get(s as usize) {
        Some(Ok(v)) => Some(*v),
        Some(Err(_)) => None,
        None => Some(Value::Nil),
    };
    let slot = |n: &Node| {
        if known_slot != NO_SLOT {
            return read(known_slot);
        }
        match n {
            Node::Slot(s) => read(*s),
            _ => None,
        }
    };
    match node {
        Node::EqConst { operand, value, negate } => {
            let v = slot(operand)?;
            let same = match (&v, value) {
                (Value::Str(a), Const::Str(b)) => same_bytes(a.as_bytes(), b.as_bytes()),
                (Value::Int(a), Const::Int(b)) => a == b,
                (Value::Bool(a), Const::Bool(b)) => a == b,
                // `x != nil`, the guard of fields a caller may leave out: only nil is nil
                (v, Const::Nil) => matches!(v, Value::Nil),
                (Value::Str(_) | Value::Bool(_) | Value::Nil, Const::Int(_) | Const::Float(_))
                | (Value::Int(_) | Value::Float(_) | Value::Bool(_) | Value::Nil, Const::Str(_)) => false,
                _ => return None,
            };
            Some(same != *negate)
        }
        Node::CmpConst { operand, op, value, const_left } => {
            let v = slot(operand)?;
            let ord = match (v, value) {
                (Value::Int(a), Const::Int(b)) => a.cmp(b),
                (Value::Float(a), Const::Float(b)) => a.partial_cmp(b)?,
                // ints up to 2^53 are exact floats
                (Value::Float(a), Const::Int(b)) if b.unsigned_abs() <= EXACT_INT => a.partial_cmp(&(*b as f64))?,
                (Value::Int(a), Const::Float(b)) if a.unsigned_abs() <= EXACT_INT => (a as f64).partial_cmp(b)?,
                _ => return None,
            };
            let ord = if *const_left { ord.reverse() } else { ord };
            Some(match op {
                BinOp::Lt => ord.is_lt(),
                BinOp::Le => ord.is_le(),
                BinOp::Gt => ord.is_gt(),
                BinOp::Ge => ord.is_ge(),
                _ => return None,
            })
        }
        Node::InSet { operand, strings, negate, .. } => {
            // an item of another type is never equal to a string
            let Value::Str(s) = slot(operand)? else { return None };
            Some(strings.contains(s) != *negate)
        }
        Node::Pred(id) => cx.known_pred(*id)?.ok(),
        Node::Slot(_) => match slot(node)? {
            Value::Bool(b) => Some(b),
            _ => None,
        },
        Node::Unary(UnOp::Not, x) => match slot(x)? {
            Value::Bool(b) => Some(!b),
            _ => None,
        },
        _ => None,
    }
}

/// A value on the number-only path: a number, or nil (which `??` replaces).
#[derive(Clone, Copy)]
enum Numeric {
    Num(Num),
    Nil,
}

/// The value of an arithmetic operand — fields and constants joined by `+ - * / % **` and `??`,
/// most computed comparisons' operands — without building a [`Value`] at each step. `None`
/// whenever the general path must judge: a part that is not a number or nil, nil in arithmetic,
/// an overflow, a division by zero, any other node. Evaluation is pure, so the general path
/// then computes the same parts again and gives the answer, or the error, it always gave.
#[inline(always)]
fn numeric<'a>(node: &'a Node, cx: &mut Ctx<'a>) -> Option<Numeric> {
    // fields, constants and computed memos in place; the rest with a call
    match node {
        Node::Slot(s) => match cx.slots.get(*s as usize) {
            Some(Ok(v)) => numeric_value(v),
            Some(Err(_)) => None,
            None => Some(Numeric::Nil),
        },
        Node::Const(Const::Int(i)) => Some(Numeric::Num(Num::Int(*i))),
        Node::Const(Const::Float(f)) => Some(Numeric::Num(Num::Float(*f))),
        Node::Memo(m) => match cx.memos.get(*m as usize) {
            Some(Some(r)) => numeric_value(r.as_ref().ok()?),
            _ => numeric_node(node, cx),
        },
        _ => numeric_node(node, cx),
    }
}

#[inline(always)]
fn numeric_value(v: &Value<'_>) -> Option<Numeric> {
    match v {
        Value::Nil => Some(Numeric::Nil),
        v => ops::num(v).map(Numeric::Num),
    }
}

/// [`numeric`] of the nodes that take a call: a chain, a memo computed now.
#[inline(never)]
fn numeric_node<'a>(node: &'a Node, cx: &mut Ctx<'a>) -> Option<Numeric> {
    match node {
        Node::Memo(m) => numeric_value(&cx.memo(*m).ok()?),
        Node::Chain(first, rest) => {
            let mut acc = numeric(first, cx)?;
            for (op, item) in rest {
                acc = match (op, acc) {
                    (BinOp::Coalesce, Numeric::Nil) => numeric(item, cx)?,
                    (BinOp::Coalesce, number) => number,
                    (_, Numeric::Num(x)) => match numeric(item, cx)? {
                        Numeric::Num(y) => Numeric::Num(ops::numeric(*op, x, y).ok()?),
                        Numeric::Nil => return None,
                    },
                    (_, Numeric::Nil) => return None,
                };
            }
            Some(acc)
        }
        _ => None,
    }
}

/// A comparison of two numbers on the number-only path (`None`: the general path judges).
#[inline]
fn numeric_compare<'a>(op: BinOp, a: &'a Node, b: &'a Node, cx: &mut Ctx<'a>) -> Option<bool> {
    let Numeric::Num(x) = numeric(a, cx)? else { return None };
    let Numeric::Num(y) = numeric(b, cx)? else { return None };
    let ord = ops::cmp_num(x, y);
    match op {
        BinOp::Eq => Some(ord == Some(std::cmp::Ordering::Equal)),
        BinOp::Ne => Some(ord != Some(std::cmp::Ordering::Equal)),
        _ => ops::order_holds(op, ord),
    }
}

/// `x < c` with a computed `x` on the number-only path (a field's test was judged in place by
/// [`leaf_truth`]; `None`: the general path judges).
#[inline]
fn numeric_compare_const<'a>(
    node: &'a Node,
    op: BinOp,
    value: &Const,
    const_left: bool,
    cx: &mut Ctx<'a>,
) -> Option<bool> {
    let c = match (node, value) {
        (Node::Slot(_), _) => return None,
        (_, Const::Int(i)) => Num::Int(*i),
        (_, Const::Float(f)) => Num::Float(*f),
        _ => return None,
    };
    let Numeric::Num(x) = numeric(node, cx)? else { return None };
    ops::order_holds(op, if const_left { ops::cmp_num(c, x) } else { ops::cmp_num(x, c) })
}

/// Ints of at most this magnitude are exactly floats.
const EXACT_INT: u64 = 1 << 53;

/// Evaluates a node whose value must be a bool (an operand of `&&`, `||`, `!`),
/// without building a [`Value`] for the common predicates. `op` names the
/// operator in the error when the value is not a bool.
fn eval_truth<'a>(node: &'a Node, cx: &mut Ctx<'a>, op: &'static str) -> Result<bool, EvalError> {
    match node {
        Node::EqConst { operand: operand_node, value, negate } => {
            with_value(operand_node, cx, |v| Ok(ops::equals(v, &Value::from_const(value)) != *negate))
        }
        Node::CmpConst { operand: operand_node, op, value, const_left } => {
            if let Some(holds) = numeric_compare_const(operand_node, *op, value, *const_left, cx) {
                return Ok(holds);
            }
            with_value(operand_node, cx, |v| {
                let c = Value::from_const(value);
                let (x, y) = if *const_left { (&c, v) } else { (v, &c) };
                ops::compare(*op, x, y)
            })
        }
        Node::InSet { operand: operand_node, set, strings, negate } => with_value(operand_node, cx, |v| {
            let found = match v {
                Value::Str(s) => strings.contains(s),
                _ => set.items.iter().any(|c| ops::equals(v, &Value::from_const(c))),
            };
            Ok(found != *negate)
        }),
        Node::StrTest { operand: operand_node, op, needle, finder } => {
            let v = operand(operand_node, cx)?;
            match (v, op) {
                (Value::Str(s), BinOp::Contains) => Ok(finder.find(s.as_bytes()).is_some()),
                _ => ops::string_test(*op, &v, &Value::Str(needle)),
            }
        }
        Node::Regex { operand: operand_node, regex, negate } => {
            let v = operand(operand_node, cx)?;
            let op = if *negate { BinOp::NotMatches } else { BinOp::Matches };
            let translated = match v {
                Value::Str(s) if regex.alphabet().is_some() => Some(cx.translated(s)),
                _ => None,
            };
            ops::regex_test(op, &v, |s| match translated {
                Some(t) => regex.is_match_translated(t),
                None => regex.is_match(s),
            })
        }
        Node::PatternHit { operand: operand_node, group, index, op } => match operand(operand_node, cx)? {
            Value::Str(s) => Ok(cx.pattern_hit(*group, *index, s) != (*op == BinOp::NotMatches)),
            other => {
                Err(EvalError::Operands { op: op.symbol(), left: other.type_of(), right: super::value::Type::Str })
            }
        },
        Node::And(items) => {
            for item in items {
                let holds = match leaf_truth(item, cx) {
                    Some(b) => b,
                    None => match item {
                        Node::Pred(id) => cx.pred(*id)?,
                        _ => eval_truth(item, cx, "&&")?,
                    },
                };
                if !holds {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        Node::Or(items) => {
            for item in items {
                let holds = match leaf_truth(item, cx) {
                    Some(b) => b,
                    None => match item {
                        Node::Pred(id) => cx.pred(*id)?,
                        _ => eval_truth(item, cx, "||")?,
                    },
                };
                if holds {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        Node::Pred(id) => cx.pred(*id),
        Node::Atom(atom) => match cx.program.atoms.get(*atom as usize) {
            Some(test) => leaf_truth(test, cx).map_or_else(|| eval_truth(test, cx, op), Ok),
            None => Ok(false),
        },
        Node::Unary(UnOp::Not, x) => eval_truth(x, cx, "!").map(|b| !b),
        // comparisons always give a bool
        Node::Compare(cmp, a, b) => {
            // `"x-debug" in headers`, the presence test policies repeat: the container is
            // read in place and the key not built into a value first
            if let (BinOp::In | BinOp::NotIn, Node::Const(Const::Str(key))) = (cmp, &**a) {
                let negate = *cmp == BinOp::NotIn;
                return with_value(b, cx, |v| ops::contains_member(&Value::Str(key), v).map(|found| found != negate));
            }
            if let Some(holds) = numeric_compare(*cmp, a, b, cx) {
                return Ok(holds);
            }
            let x = operand(a, cx)?;
            let y = operand(b, cx)?;
            ops::compare_values(*cmp, &x, &y).and_then(|v| ops::truth(&v, op))
        }
        // the branch taken must be a bool, as the value of the whole would have to be
        Node::Ternary(c, a, b) => {
            let branch = if leaf_truth(c, cx).map_or_else(|| eval_truth(c, cx, "?:"), Ok)? { a } else { b };
            leaf_truth(branch, cx).map_or_else(|| eval_truth(branch, cx, op), Ok)
        }
        _ => with_value(node, cx, |v| ops::truth(v, op)),
    }
}

/// Evaluates a node. Never panics; failures are [`EvalError`]s.
pub(crate) fn eval<'a>(node: &'a Node, cx: &mut Ctx<'a>) -> EvalResult<'a> {
    match node {
        Node::Const(c) => Ok(Value::from_const(c)),
        Node::Slot(s) => cx.slots.get(*s as usize).copied().unwrap_or(Ok(Value::Nil)),
        Node::Memo(m) => cx.memo(*m),
        Node::Atom(atom) => match cx.program.atoms.get(*atom as usize) {
            Some(test) => eval(test, cx),
            None => Ok(Value::Nil),
        },
        Node::Unary(op @ (UnOp::Neg | UnOp::Plus), x) => {
            let v = eval(x, cx)?;
            ops::unary(*op, &v)
        }
        Node::Compare(op, a, b) => {
            let x = operand(a, cx)?;
            let y = operand(b, cx)?;
            ops::compare_values(*op, &x, &y)
        }
        Node::Chain(first, rest) => {
            let mut acc = operand(first, cx)?;
            for (op, item) in rest {
                acc = if *op == BinOp::Coalesce {
                    if matches!(acc, Value::Nil) {
                        operand(item, cx)?
                    } else {
                        acc
                    }
                } else {
                    let y = operand(item, cx)?;
                    ops::arithmetic(*op, &acc, &y, cx.arena)?
                };
            }
            Ok(acc)
        }
        Node::Power(items) => {
            let mut values = Vec::with_capacity(items.len());
            for item in items {
                values.push(eval(item, cx)?);
            }
            let mut acc = values.pop().unwrap_or(Value::Nil);
            while let Some(base) = values.pop() {
                acc = ops::arithmetic(BinOp::Pow, &base, &acc, cx.arena)?;
            }
            Ok(acc)
        }
        Node::Ternary(c, a, b) => {
            if eval_truth(c, cx, "?:")? {
                operand(a, cx)
            } else {
                operand(b, cx)
            }
        }
        Node::Array(items) => {
            let mut values = bumpalo::collections::Vec::with_capacity_in(items.len(), cx.arena);
            for item in items {
                values.push(eval(item, cx)?);
            }
            Ok(Value::Array(Array::Values(values.into_bump_slice())))
        }
        Node::Access(base, steps) => {
            let mut v = eval(base, cx)?;
            for step in steps {
                v = match step {
                    AccessStep::Member(name) => match v {
                        Value::Array(_) => ops::index(&v, &Value::Str(name))?,
                        _ => ops::member(&v, name)?,
                    },
                    AccessStep::Index(i) => {
                        let i = eval(i, cx)?;
                        ops::index(&v, &i)?
                    }
                };
            }
            Ok(v)
        }
        Node::Call(func, args) => call(*func, args, cx),
        // The predicates of `is_predicate`: `==`/`<` with constants, `in`, string and regex tests, `&&`, `||`, `!`.
        _ => eval_truth(node, cx, "?").map(Value::Bool),
    }
}

#[inline(never)]
fn call<'a>(func: ops::Func, args: &'a [Node], cx: &mut Ctx<'a>) -> EvalResult<'a> {
    let mut values: smallvec_args::Args<'a> = smallvec_args::Args::new();
    for a in args {
        values.push(operand(a, cx)?);
    }
    ops::call(func, values.as_slice(), cx.arena)
}

/// Function arguments without a heap allocation for the common short lists.
mod smallvec_args {
    use super::Value;

    pub struct Args<'a> {
        inline: [Value<'a>; 3],
        len: usize,
        spill: Vec<Value<'a>>,
    }

    impl<'a> Args<'a> {
        pub fn new() -> Args<'a> {
            Args { inline: [Value::Nil; 3], len: 0, spill: Vec::new() }
        }

        pub fn push(&mut self, v: Value<'a>) {
            match self.inline.get_mut(self.len).filter(|_| self.spill.is_empty()) {
                Some(slot) => {
                    *slot = v;
                    self.len += 1;
                }
                None => {
                    if self.spill.is_empty() {
                        let used = self.inline.split_at(self.len.min(3)).0;
                        self.spill.extend_from_slice(used);
                    }
                    self.spill.push(v);
                }
            }
        }

        fn inline_used(&self) -> &[Value<'a>] {
            self.inline.split_at(self.len.min(3)).0
        }

        pub fn as_slice(&self) -> &[Value<'a>] {
            if self.spill.is_empty() {
                self.inline_used()
            } else {
                &self.spill
            }
        }
    }
}
