//! Which input types let a compiled node evaluate without an error.
//!
//! The rule index may skip a rule only when evaluating it would give `false` (or `nil`)
//! *without an error*: a rule whose evaluation fails must be evaluated, so that its warning is
//! reported as a plain top-to-bottom scan would. In `a && b && c`, a false `c` proves the rule
//! false only if `a` and `b` evaluate to bools without an error; this module says when they do,
//! as a requirement on the *type* of each field they read (`lower(content) contains "x"`: content
//! is a string; `len(items) * 10 + n < 19`: items is a string, array or object and `n` a number
//! small enough that nothing overflows). The index classifies each field of an input into one of
//! these types once per decision, and keeps every rule whose requirements the input does not meet.
//!
//! The analysis is conservative: `None` (no guarantee) is always a correct answer, and is the
//! answer for what it does not model (`%`, `/` by a field, `**`, `int("…")`, computed indexes).

use super::ir::Node;
use super::ops::{BinOp, Func, UnOp};
use super::program::Program;
use super::value::Const;

/// A set of value classes, one bit each. A field's value is in exactly one class (or is a
/// read error, which no requirement admits).
pub(crate) type Classes = u8;

/// `nil`
pub(crate) const NIL: Classes = 1;
/// `true` or `false`
pub(crate) const BOOL: Classes = 2;
/// a number of magnitude at most [`SMALL_LIMIT`] (int or float)
pub(crate) const SMALL: Classes = 4;
/// any other number
pub(crate) const BIG: Classes = 8;
/// a string
pub(crate) const STR: Classes = 16;
/// an array
pub(crate) const ARRAY: Classes = 32;
/// an object
pub(crate) const OBJECT: Classes = 64;
/// any number
pub(crate) const NUM: Classes = SMALL | BIG;
/// any value (not a read error)
pub(crate) const ANY: Classes = 127;

/// Numbers up to this magnitude are [`SMALL`]: sums and products of a few of them cannot
/// overflow an i64.
pub(crate) const SMALL_LIMIT: f64 = 2_147_483_648.0;

/// Integer arithmetic whose result may reach this magnitude may overflow.
const OVERFLOW_LIMIT: f64 = 4_611_686_018_427_387_904.0; // 2^62

/// What a node reads: an input field's slot, or a memo the index computes like a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum FieldRef {
    /// an input path
    Slot(u32),
    /// a shared sub-expression
    Memo(u32),
}

/// Fields and the classes each must be in: a conjunction.
pub(crate) type Requirements = Vec<(FieldRef, Classes)>;

/// The class of a number.
pub(crate) fn number_class(x: f64) -> Classes {
    if x.abs() <= SMALL_LIMIT {
        SMALL
    } else {
        BIG
    }
}

/// What evaluating a node gives when its requirements hold.
#[derive(Clone, Debug)]
struct Abs {
    /// the classes the value may have
    classes: Classes,
    /// the largest magnitude a number among them may have
    bound: f64,
    /// what must hold of the fields read
    req: Requirements,
}

impl Abs {
    fn of(classes: Classes, bound: f64) -> Abs {
        Abs { classes, bound, req: Vec::new() }
    }

    /// Adds `other`'s requirements; `None` when a field would have to be in no class.
    fn and(mut self, other: &Abs) -> Option<Abs> {
        merge(&mut self.req, &other.req)?;
        Some(self)
    }
}

/// Adds `more` to `req` (intersecting the classes of a field named twice).
pub(crate) fn merge(req: &mut Requirements, more: &[(FieldRef, Classes)]) -> Option<()> {
    for &(field, classes) in more {
        match req.iter_mut().find(|(f, _)| *f == field) {
            Some((_, c)) => {
                *c &= classes;
                if *c == 0 {
                    return None;
                }
            }
            None => req.push((field, classes)),
        }
    }
    Some(())
}

/// The analysis of one program; `is_field(m)` says which memos the index reads as fields
/// (the others are analyzed through their expression).
pub(crate) struct Safety<'p> {
    program: &'p Program,
    is_field: &'p dyn Fn(u32) -> bool,
}

impl<'p> Safety<'p> {
    pub(crate) fn new(program: &'p Program, is_field: &'p dyn Fn(u32) -> bool) -> Safety<'p> {
        Safety { program, is_field }
    }

    /// The requirements under which `node` evaluates to a bool without an error (what `&&`,
    /// `||` and `!` need of their operands), or `None` when there are none this analysis knows.
    pub(crate) fn bool_requirements(&self, node: &Node) -> Option<Requirements> {
        let abs = self.value(node, BOOL, 0)?;
        (abs.classes & !BOOL == 0).then_some(abs.req)
    }

    /// `node` evaluates without an error to a value in `abs.classes` when `abs.req` holds.
    /// `want` is what the consumer accepts; a field read directly is required to be in it.
    fn value(&self, node: &Node, want: Classes, depth: usize) -> Option<Abs> {
        if depth > 64 {
            return None;
        }
        let d = depth + 1;
        match node {
            Node::Const(c) => Some(constant(c)),
            Node::Slot(s) => Some(field(FieldRef::Slot(*s), want)),
            Node::Memo(m) => {
                if (self.is_field)(*m) {
                    Some(field(FieldRef::Memo(*m), want))
                } else {
                    self.value(self.program.memos.get(*m as usize)?, want, d)
                }
            }
            Node::Pred(p) => self.value(self.program.preds.get(*p as usize)?, want, d),
            Node::Atom(a) => self.value(self.program.atoms.get(*a as usize)?, want, d),
            Node::Unary(UnOp::Not, x) => {
                let x = self.value(x, BOOL, d)?;
                (x.classes & !BOOL == 0).then_some(Abs { classes: BOOL, bound: 0.0, req: x.req })
            }
            Node::Unary(_, x) => {
                let x = self.value(x, SMALL, d)?;
                (x.classes & !NUM == 0).then_some(x)
            }
            Node::EqConst { operand, .. } | Node::InSet { operand, .. } => {
                let x = self.value(operand, ANY, d)?;
                Some(Abs { classes: BOOL, bound: 0.0, req: x.req })
            }
            Node::CmpConst { operand, value, .. } => {
                let need = match value {
                    Const::Int(_) | Const::Float(_) => NUM,
                    Const::Str(_) => STR,
                    _ => return None,
                };
                let x = self.value(operand, need, d)?;
                (x.classes & !need == 0).then_some(Abs { classes: BOOL, bound: 0.0, req: x.req })
            }
            Node::StrTest { operand, .. } | Node::Regex { operand, .. } | Node::PatternHit { operand, .. } => {
                let x = self.value(operand, STR, d)?;
                (x.classes & !STR == 0).then_some(Abs { classes: BOOL, bound: 0.0, req: x.req })
            }
            Node::Compare(op, a, b) => self.compare(*op, a, b, d),
            Node::And(items) | Node::Or(items) => {
                let mut out = Abs::of(BOOL, 0.0);
                for item in items {
                    let x = self.value(item, BOOL, d)?;
                    if x.classes & !BOOL != 0 {
                        return None;
                    }
                    out = out.and(&x)?;
                }
                Some(out)
            }
            Node::Ternary(c, a, b) => {
                let c = self.value(c, BOOL, d)?;
                if c.classes & !BOOL != 0 {
                    return None;
                }
                let a = self.value(a, want, d)?;
                let b = self.value(b, want, d)?;
                let out = Abs::of(a.classes | b.classes, a.bound.max(b.bound));
                out.and(&c)?.and(&a)?.and(&b)
            }
            Node::Chain(first, rest) => self.chain(first, rest, want, d),
            Node::Call(func, args) => self.call(*func, args, d),
            Node::Array(items) => {
                let mut out = Abs::of(ARRAY, 0.0);
                for item in items {
                    out = out.and(&self.value(item, ANY, d)?)?;
                }
                Some(out)
            }
            Node::Access(..) | Node::Power(_) => None,
        }
    }

    fn compare(&self, op: BinOp, a: &Node, b: &Node, d: usize) -> Option<Abs> {
        let both = |wa: Classes, wb: Classes| -> Option<Abs> {
            let x = self.value(a, wa, d)?;
            let y = self.value(b, wb, d)?;
            if x.classes & !wa != 0 || y.classes & !wb != 0 {
                return None;
            }
            Abs::of(BOOL, 0.0).and(&x)?.and(&y)
        };
        match op {
            BinOp::Eq | BinOp::Ne => both(ANY, ANY),
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => both(NUM, NUM).or_else(|| both(STR, STR)),
            // a key of an object must be a string; a member of an array may be anything
            BinOp::In | BinOp::NotIn if matches!(a, Node::Const(Const::Str(_))) => both(STR, NIL | ARRAY | OBJECT),
            BinOp::In | BinOp::NotIn => both(ANY, NIL | ARRAY),
            BinOp::Contains | BinOp::StartsWith | BinOp::EndsWith => both(STR, STR),
            _ => None,
        }
    }

    /// `a op b op c …`, left to right; `??` evaluates its right side only on nil.
    fn chain(&self, first: &Node, rest: &[(BinOp, Node)], want: Classes, d: usize) -> Option<Abs> {
        // What the value after each step must be: the left operand of the next operator.
        let left_want = |i: usize| -> Classes {
            // the result after step i (0: `first`) feeds operator i (0-based in `rest`)
            let mut w = want;
            for (op, _) in rest.iter().skip(i).rev() {
                w = if *op == BinOp::Coalesce { w | NIL } else { SMALL };
            }
            w
        };
        let mut acc = self.value(first, left_want(0), d)?;
        for (i, (op, item)) in rest.iter().enumerate() {
            // what the result of this step must be
            let result_want = left_want(i + 1);
            acc = match op {
                BinOp::Coalesce => {
                    if acc.classes & NIL == 0 {
                        acc
                    } else {
                        let y = self.value(item, result_want, d)?;
                        let out = Abs::of((acc.classes & !NIL) | y.classes, acc.bound.max(y.bound));
                        out.and(&acc)?.and(&y)?
                    }
                }
                BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div => {
                    let y = self.value(item, SMALL, d)?;
                    if acc.classes & !NUM != 0 || y.classes & !NUM != 0 {
                        return None;
                    }
                    let bound = match op {
                        BinOp::Add | BinOp::Sub => acc.bound + y.bound,
                        BinOp::Mul => acc.bound * y.bound,
                        // only by a constant that is not zero: always a float, never an overflow
                        _ => match item {
                            Node::Const(Const::Int(c)) if *c != 0 => acc.bound / (*c as f64).abs(),
                            Node::Const(Const::Float(c)) if *c != 0.0 && c.is_finite() => acc.bound / c.abs(),
                            _ => return None,
                        },
                    };
                    if bound.is_nan() || bound >= OVERFLOW_LIMIT {
                        return None;
                    }
                    let classes = if bound <= SMALL_LIMIT { SMALL } else { NUM };
                    Abs::of(classes, bound).and(&acc)?.and(&y)?
                }
                _ => return None,
            };
        }
        Some(acc)
    }

    fn call(&self, func: Func, args: &[Node], d: usize) -> Option<Abs> {
        let arg = |i: usize, want: Classes| -> Option<Abs> {
            let x = self.value(args.get(i)?, want, d)?;
            (x.classes & !want == 0).then_some(x)
        };
        match func {
            Func::Len => {
                // at most the input's length, far below any overflow
                let x = arg(0, STR | ARRAY | OBJECT)?;
                Abs::of(SMALL | BIG, 4_294_967_296.0).and(&x)
            }
            Func::Lower | Func::Upper | Func::Trim => Abs::of(STR, 0.0).and(&arg(0, STR)?),
            Func::String => Abs::of(STR, 0.0).and(&arg(0, ANY)?),
            Func::Abs | Func::Round | Func::Floor | Func::Ceil => {
                let x = arg(0, SMALL)?;
                let bound = x.bound;
                Abs::of(x.classes, bound).and(&x)
            }
            Func::Min | Func::Max if args.len() >= 2 => {
                let mut out = Abs::of(0, 0.0);
                for i in 0..args.len() {
                    let x = arg(i, NUM)?;
                    out.classes |= x.classes;
                    out.bound = out.bound.max(x.bound);
                    out = out.and(&x)?;
                }
                Some(out)
            }
            Func::Contains | Func::StartsWith | Func::EndsWith => {
                Abs::of(BOOL, 0.0).and(&arg(0, STR)?)?.and(&arg(1, STR)?)
            }
            _ => None,
        }
    }
}

fn field(f: FieldRef, want: Classes) -> Abs {
    let bound = if want & BIG != 0 { f64::INFINITY } else { SMALL_LIMIT };
    Abs { classes: want, bound, req: vec![(f, want)] }
}

fn constant(c: &Const) -> Abs {
    match c {
        Const::Nil => Abs::of(NIL, 0.0),
        Const::Bool(_) => Abs::of(BOOL, 0.0),
        Const::Int(i) => Abs::of(number_class(*i as f64), (*i as f64).abs()),
        Const::Float(f) if f.is_finite() => Abs::of(number_class(*f), f.abs()),
        Const::Float(_) => Abs::of(BIG, f64::INFINITY),
        Const::Str(_) => Abs::of(STR, 0.0),
        Const::Array(_) => Abs::of(ARRAY, 0.0),
        Const::Object(_) => Abs::of(OBJECT, 0.0),
    }
}
