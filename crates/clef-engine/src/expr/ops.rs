//! The semantics of every operator and built-in function (SPEC §3, §11).
//!
//! Both evaluators — the optimized one in [`super::eval`] and the plain
//! reference in `reference` — call these functions, so an operator
//! means the same thing wherever it runs. Nothing here panics.

use std::cmp::Ordering;
use std::fmt;

use bumpalo::Bump;

use super::value::{same_bytes, Array, Type, Value};

/// Why an evaluation failed. The rule does not match and the message becomes a
/// warning; `Copy` and allocation-free so that failing rules stay cheap.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EvalError {
    /// A binary operator got operands it does not accept.
    Operands {
        /// the operator as written, e.g. `<`
        op: &'static str,
        /// type of the left operand
        left: Type,
        /// type of the right operand
        right: Type,
    },
    /// A unary operator got an operand it does not accept.
    Operand {
        /// the operator as written
        op: &'static str,
        /// type of the operand
        operand: Type,
    },
    /// A function argument has the wrong type.
    Argument {
        /// function name
        func: &'static str,
        /// what the function wanted
        expected: &'static str,
        /// what it got
        got: Type,
    },
    /// Integer overflow in an operator or function.
    Overflow {
        /// the operator or function
        op: &'static str,
    },
    /// Division or modulo by zero.
    DivisionByZero {
        /// `/` or `%`
        op: &'static str,
    },
    /// `.name` or `[index]` on a value that has no members.
    NotIndexable {
        /// the type that was indexed
        ty: Type,
    },
    /// `[index]` with an index of the wrong type.
    BadIndex {
        /// the indexed container's type
        container: Type,
        /// the index's type
        index: Type,
    },
    /// `int("x")` / `float("x")`: the string is not a number.
    NotANumber {
        /// `int` or `float`
        func: &'static str,
    },
    /// `min([])` / `max([])`.
    Empty {
        /// `min` or `max`
        func: &'static str,
    },
    /// A rule's condition produced something other than a bool or nil.
    ConditionNotBool {
        /// what it produced
        got: Type,
    },
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EvalError::Operands { op, left, right } => {
                write!(f, "`{op}` cannot be applied to {left} and {right}")
            }
            EvalError::Operand { op, operand } => write!(f, "`{op}` cannot be applied to {operand}"),
            EvalError::Argument { func, expected, got } => {
                write!(f, "{func}() expects {expected}, got {got}")
            }
            EvalError::Overflow { op } => write!(f, "integer overflow in `{op}`"),
            EvalError::DivisionByZero { op } => write!(f, "division by zero in `{op}`"),
            EvalError::NotIndexable { ty } => write!(f, "cannot access a member of {ty}"),
            EvalError::BadIndex { container, index } => write!(f, "cannot index {container} with {index}"),
            EvalError::NotANumber { func } => write!(f, "{func}() got a string that is not a number"),
            EvalError::Empty { func } => write!(f, "{func}() of an empty array"),
            EvalError::ConditionNotBool { got } => write!(f, "condition evaluated to {got}, not a bool"),
        }
    }
}

impl std::error::Error for EvalError {}

/// Result of evaluating anything.
pub type EvalResult<'a> = Result<Value<'a>, EvalError>;

/// Binary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `in`
    In,
    /// `not in`
    NotIn,
    /// `contains`
    Contains,
    /// `startsWith`
    StartsWith,
    /// `endsWith`
    EndsWith,
    /// `matches` / `~`
    Matches,
    /// `!~`
    NotMatches,
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Rem,
    /// `**`
    Pow,
    /// `??`
    Coalesce,
}

impl BinOp {
    /// The operator as written in conditions.
    pub(crate) fn symbol(self) -> &'static str {
        match self {
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::In => "in",
            BinOp::NotIn => "not in",
            BinOp::Contains => "contains",
            BinOp::StartsWith => "startsWith",
            BinOp::EndsWith => "endsWith",
            BinOp::Matches => "matches",
            BinOp::NotMatches => "!~",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::Pow => "**",
            BinOp::Coalesce => "??",
        }
    }
}

/// Unary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    /// `!` / `not`
    Not,
    /// `-`
    Neg,
    /// `+`
    Plus,
}

impl UnOp {
    /// The operator as written.
    pub(crate) fn symbol(self) -> &'static str {
        match self {
            UnOp::Not => "!",
            UnOp::Neg => "-",
            UnOp::Plus => "+",
        }
    }
}

/// Built-in functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Func {
    /// `len(x)`
    Len,
    /// `abs(x)`
    Abs,
    /// `min(...)`
    Min,
    /// `max(...)`
    Max,
    /// `round(x)`
    Round,
    /// `floor(x)`
    Floor,
    /// `ceil(x)`
    Ceil,
    /// `int(x)`
    Int,
    /// `float(x)`
    Float,
    /// `string(x)`
    String,
    /// `lower(s)`
    Lower,
    /// `upper(s)`
    Upper,
    /// `trim(s)`
    Trim,
    /// `contains(s, sub)`
    Contains,
    /// `startsWith(s, p)`
    StartsWith,
    /// `endsWith(s, p)`
    EndsWith,
    /// `matches(s, re)`
    Matches,
}

/// Every built-in, for lookups and "did you mean" suggestions.
pub const FUNCS: &[(&str, Func)] = &[
    ("len", Func::Len),
    ("abs", Func::Abs),
    ("min", Func::Min),
    ("max", Func::Max),
    ("round", Func::Round),
    ("floor", Func::Floor),
    ("ceil", Func::Ceil),
    ("int", Func::Int),
    ("float", Func::Float),
    ("string", Func::String),
    ("lower", Func::Lower),
    ("upper", Func::Upper),
    ("trim", Func::Trim),
    ("contains", Func::Contains),
    ("startsWith", Func::StartsWith),
    ("endsWith", Func::EndsWith),
    ("matches", Func::Matches),
];

impl Func {
    /// Looks a function up by name.
    pub fn from_name(name: &str) -> Option<Func> {
        FUNCS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
    }

    /// The function's name.
    pub fn name(self) -> &'static str {
        FUNCS.iter().find(|(_, f)| *f == self).map(|(n, _)| *n).unwrap_or("?")
    }

    /// Accepted argument counts: (min, max).
    pub fn arity(self) -> (usize, usize) {
        match self {
            Func::Min | Func::Max => (1, usize::MAX),
            Func::Contains | Func::StartsWith | Func::EndsWith | Func::Matches => (2, 2),
            _ => (1, 1),
        }
    }

    /// The arity as words, for diagnostics.
    pub fn arity_text(self) -> &'static str {
        match self.arity() {
            (1, usize::MAX) => "one or more arguments",
            (2, 2) => "2 arguments",
            _ => "1 argument",
        }
    }
}

/// Numeric view of a value.
#[derive(Clone, Copy)]
pub(crate) enum Num {
    /// an int
    Int(i64),
    /// a float
    Float(f64),
}

impl Num {
    /// The number as a value.
    pub(crate) fn value<'a>(self) -> Value<'a> {
        match self {
            Num::Int(i) => Value::Int(i),
            Num::Float(f) => Value::Float(f),
        }
    }
}

/// The number a value is, if it is one.
pub(crate) fn num(v: &Value<'_>) -> Option<Num> {
    match *v {
        Value::Int(i) => Some(Num::Int(i)),
        Value::Float(f) => Some(Num::Float(f)),
        _ => None,
    }
}

fn as_f64(n: Num) -> f64 {
    match n {
        Num::Int(i) => i as f64,
        Num::Float(f) => f,
    }
}

/// Exact comparison of an int with a float (no rounding of large ints).
fn cmp_int_float(i: i64, f: f64) -> Option<Ordering> {
    // Ints up to 2^53 convert to f64 exactly, and comparing floats is exact.
    const EXACT: i64 = 1 << 53;
    if (-EXACT..=EXACT).contains(&i) {
        return (i as f64).partial_cmp(&f);
    }
    if f.is_nan() {
        return None;
    }
    if f >= 9_223_372_036_854_775_808.0 {
        return Some(Ordering::Less);
    }
    if f < -9_223_372_036_854_775_808.0 {
        return Some(Ordering::Greater);
    }
    let t = f.trunc();
    match i.cmp(&(t as i64)) {
        Ordering::Equal => f.partial_cmp(&t).map(Ordering::reverse),
        o => Some(o),
    }
}

pub(crate) fn cmp_num(a: Num, b: Num) -> Option<Ordering> {
    match (a, b) {
        (Num::Int(x), Num::Int(y)) => Some(x.cmp(&y)),
        (Num::Float(x), Num::Float(y)) => x.partial_cmp(&y),
        (Num::Int(x), Num::Float(y)) => cmp_int_float(x, y),
        (Num::Float(x), Num::Int(y)) => cmp_int_float(y, x).map(Ordering::reverse),
    }
}

/// Numeric order of two values when both are numbers (used by the rule index too).
pub(crate) fn compare_numbers(a: &Value<'_>, b: &Value<'_>) -> Option<Ordering> {
    cmp_num(num(a)?, num(b)?)
}

/// `==`: numbers numerically, arrays and objects deeply, other types unequal.
pub(crate) fn equals(a: &Value<'_>, b: &Value<'_>) -> bool {
    match (a, b) {
        (Value::Str(p), Value::Str(q)) => same_bytes(p.as_bytes(), q.as_bytes()),
        (Value::Array(_), Value::Array(_)) | (Value::Object(_), Value::Object(_)) => deep_equals(a, b),
        (Value::Nil, Value::Nil) => true,
        (Value::Bool(p), Value::Bool(q)) => p == q,
        _ => match (num(a), num(b)) {
            (Some(p), Some(q)) => cmp_num(p, q) == Some(Ordering::Equal),
            _ => false,
        },
    }
}

/// Equality of arrays and objects, element by element.
fn deep_equals(a: &Value<'_>, b: &Value<'_>) -> bool {
    // Iterative so that deeply nested request data cannot exhaust a coroutine stack.
    let mut pending = vec![(*a, *b)];
    while let Some((x, y)) = pending.pop() {
        let same = match (x, y) {
            (Value::Nil, Value::Nil) => true,
            (Value::Bool(p), Value::Bool(q)) => p == q,
            (Value::Str(p), Value::Str(q)) => p == q,
            (Value::Array(p), Value::Array(q)) => {
                if p.len() != q.len() {
                    false
                } else {
                    pending.extend(p.iter().zip(q.iter()));
                    true
                }
            }
            (Value::Object(p), Value::Object(q)) => {
                if p.len() != q.len() {
                    false
                } else {
                    let mut ok = true;
                    for (k, v) in p.iter() {
                        match q.get(k) {
                            Some(w) => pending.push((v, w)),
                            None => {
                                ok = false;
                                break;
                            }
                        }
                    }
                    ok
                }
            }
            _ => match (num(&x), num(&y)) {
                (Some(p), Some(q)) => cmp_num(p, q) == Some(Ordering::Equal),
                _ => false,
            },
        };
        if !same {
            return false;
        }
    }
    true
}

/// `< <= > >=`: numbers numerically, strings by bytes, anything else an error.
pub(crate) fn compare(op: BinOp, a: &Value<'_>, b: &Value<'_>) -> Result<bool, EvalError> {
    let ord = match (a, b) {
        (Value::Str(x), Value::Str(y)) => Some(x.as_bytes().cmp(y.as_bytes())),
        _ => match (num(a), num(b)) {
            (Some(x), Some(y)) => cmp_num(x, y),
            _ => return Err(operands(op, a, b)),
        },
    };
    order_holds(op, ord).ok_or_else(|| operands(op, a, b))
}

/// Whether ordering operator `op` holds for two operands ordered `ord` (`None`: unordered, as
/// NaN, which compares false to everything); `None` when `op` is not an ordering operator.
#[inline]
pub(crate) fn order_holds(op: BinOp, ord: Option<Ordering>) -> Option<bool> {
    let holds = match op {
        BinOp::Lt => ord == Some(Ordering::Less),
        BinOp::Le => matches!(ord, Some(Ordering::Less | Ordering::Equal)),
        BinOp::Gt => ord == Some(Ordering::Greater),
        BinOp::Ge => matches!(ord, Some(Ordering::Greater | Ordering::Equal)),
        _ => return None,
    };
    Some(holds)
}

fn operands(op: BinOp, a: &Value<'_>, b: &Value<'_>) -> EvalError {
    EvalError::Operands { op: op.symbol(), left: a.type_of(), right: b.type_of() }
}

/// Comparison-level operators on two computed values.
pub(crate) fn compare_values<'a>(op: BinOp, x: &Value<'a>, y: &Value<'a>) -> EvalResult<'a> {
    let b = match op {
        BinOp::Eq => equals(x, y),
        BinOp::Ne => !equals(x, y),
        BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => compare(op, x, y)?,
        BinOp::In => contains_member(x, y)?,
        BinOp::NotIn => !contains_member(x, y)?,
        BinOp::Contains | BinOp::StartsWith | BinOp::EndsWith => string_test(op, x, y)?,
        _ => return Err(EvalError::Operands { op: op.symbol(), left: x.type_of(), right: y.type_of() }),
    };
    Ok(Value::Bool(b))
}

/// `x in y`: membership in an array, a key of an object; anything `in nil` is false.
pub(crate) fn contains_member(needle: &Value<'_>, haystack: &Value<'_>) -> Result<bool, EvalError> {
    match haystack {
        Value::Nil => Ok(false),
        Value::Array(a) => Ok(a.iter().any(|v| equals(needle, &v))),
        Value::Object(o) => match needle {
            Value::Str(k) => Ok(o.has_key(k)),
            _ => Err(operands(BinOp::In, needle, haystack)),
        },
        _ => Err(operands(BinOp::In, needle, haystack)),
    }
}

/// The string operators and functions: `contains`, `startsWith`, `endsWith`.
pub(crate) fn string_test(op: BinOp, a: &Value<'_>, b: &Value<'_>) -> Result<bool, EvalError> {
    match (a, b) {
        (Value::Str(s), Value::Str(p)) => Ok(match op {
            BinOp::Contains => memchr::memmem::find(s.as_bytes(), p.as_bytes()).is_some(),
            BinOp::StartsWith => s.starts_with(p),
            BinOp::EndsWith => s.ends_with(p),
            _ => return Err(operands(op, a, b)),
        }),
        _ => Err(operands(op, a, b)),
    }
}

/// `s matches re`: unanchored search, `is_match` being the compiled pattern's (the engine's
/// forward-only matcher, or the regex crate's in the reference evaluator).
pub(crate) fn regex_test(op: BinOp, a: &Value<'_>, is_match: impl FnOnce(&str) -> bool) -> Result<bool, EvalError> {
    match a {
        Value::Str(s) => Ok(is_match(s) == (op != BinOp::NotMatches)),
        _ => Err(EvalError::Operands { op: op.symbol(), left: a.type_of(), right: Type::Str }),
    }
}

/// `!x`: bools only.
pub(crate) fn not(a: &Value<'_>) -> EvalResult<'static> {
    match a {
        Value::Bool(b) => Ok(Value::Bool(!b)),
        _ => Err(EvalError::Operand { op: "!", operand: a.type_of() }),
    }
}

/// Unary `-` and `+`.
pub(crate) fn unary<'a>(op: UnOp, a: &Value<'a>) -> EvalResult<'a> {
    match (op, *a) {
        (UnOp::Not, _) => not(a),
        (UnOp::Neg, Value::Int(i)) => i.checked_neg().map(Value::Int).ok_or(EvalError::Overflow { op: "-" }),
        (UnOp::Neg, Value::Float(f)) => Ok(Value::Float(-f)),
        (UnOp::Plus, Value::Int(_) | Value::Float(_)) => Ok(*a),
        _ => Err(EvalError::Operand { op: op.symbol(), operand: a.type_of() }),
    }
}

/// The arithmetic operators `+ - * / % **` (`+` also concatenates strings).
pub(crate) fn arithmetic<'a>(op: BinOp, a: &Value<'a>, b: &Value<'a>, arena: &'a Bump) -> EvalResult<'a> {
    if let (BinOp::Add, Value::Str(x), Value::Str(y)) = (op, a, b) {
        let mut s = bumpalo::collections::String::with_capacity_in(x.len() + y.len(), arena);
        s.push_str(x);
        s.push_str(y);
        return Ok(Value::Str(s.into_bump_str()));
    }
    let (Some(x), Some(y)) = (num(a), num(b)) else {
        return Err(operands(op, a, b));
    };
    numeric(op, x, y).map(Num::value).map_err(|e| e.unwrap_or_else(|| operands(op, a, b)))
}

/// The arithmetic operators on two numbers: the one definition both evaluators' arithmetic and
/// the optimized evaluator's number-only path use. `Err(None)` when `op` does not take these
/// operands (a float `%`, an operator that is not arithmetic).
#[inline]
pub(crate) fn numeric(op: BinOp, x: Num, y: Num) -> Result<Num, Option<EvalError>> {
    let overflow = || Some(EvalError::Overflow { op: op.symbol() });
    match op {
        BinOp::Add | BinOp::Sub | BinOp::Mul => match (x, y) {
            (Num::Int(p), Num::Int(q)) => {
                let r = match op {
                    BinOp::Add => p.checked_add(q),
                    BinOp::Sub => p.checked_sub(q),
                    _ => p.checked_mul(q),
                };
                r.map(Num::Int).ok_or_else(overflow)
            }
            _ => {
                let (p, q) = (as_f64(x), as_f64(y));
                Ok(Num::Float(match op {
                    BinOp::Add => p + q,
                    BinOp::Sub => p - q,
                    _ => p * q,
                }))
            }
        },
        BinOp::Div => {
            let q = as_f64(y);
            if q == 0.0 {
                return Err(Some(EvalError::DivisionByZero { op: "/" }));
            }
            Ok(Num::Float(as_f64(x) / q))
        }
        BinOp::Rem => match (x, y) {
            (Num::Int(_), Num::Int(0)) => Err(Some(EvalError::DivisionByZero { op: "%" })),
            (Num::Int(p), Num::Int(q)) => p.checked_rem(q).map(Num::Int).ok_or_else(overflow),
            _ => Err(None),
        },
        BinOp::Pow => Ok(Num::Float(as_f64(x).powf(as_f64(y)))),
        _ => Err(None),
    }
}

/// `.name` on a value: members of objects; nil stays nil; anything else is an error.
pub(crate) fn member<'a>(object: &Value<'a>, name: &str) -> EvalResult<'a> {
    match object {
        Value::Nil => Ok(Value::Nil),
        Value::Object(o) => Ok(o.get(name).unwrap_or(Value::Nil)),
        _ => Err(EvalError::NotIndexable { ty: object.type_of() }),
    }
}

/// `[index]`: arrays by int (negative counts from the end, out of range is nil),
/// objects by string; nil stays nil.
pub(crate) fn index<'a>(container: &Value<'a>, idx: &Value<'_>) -> EvalResult<'a> {
    match (container, idx) {
        (Value::Nil, _) => Ok(Value::Nil),
        (Value::Array(a), Value::Int(i)) => Ok(array_at(a, *i).unwrap_or(Value::Nil)),
        (Value::Object(o), Value::Str(k)) => Ok(o.get(k).unwrap_or(Value::Nil)),
        (Value::Array(_) | Value::Object(_), _) => {
            Err(EvalError::BadIndex { container: container.type_of(), index: idx.type_of() })
        }
        _ => Err(EvalError::NotIndexable { ty: container.type_of() }),
    }
}

/// Element `i` of an array, negative from the end.
pub(crate) fn array_at<'a>(a: &Array<'a>, i: i64) -> Option<Value<'a>> {
    let len = a.len() as i64;
    let pos = if i < 0 { len.checked_add(i)? } else { i };
    if pos < 0 || pos >= len {
        return None;
    }
    a.get(pos as usize)
}

/// `&&`, `||`, `?:` and conditions need bools.
pub(crate) fn truth(v: &Value<'_>, op: &'static str) -> Result<bool, EvalError> {
    match v {
        Value::Bool(b) => Ok(*b),
        _ => Err(EvalError::Operand { op, operand: v.type_of() }),
    }
}

/// Whether a rule's condition result means "matched".
pub(crate) fn condition_outcome(v: &Value<'_>) -> Result<bool, EvalError> {
    match v {
        Value::Bool(b) => Ok(*b),
        Value::Nil => Ok(false),
        _ => Err(EvalError::ConditionNotBool { got: v.type_of() }),
    }
}

fn arg_str<'a>(func: Func, v: &Value<'a>) -> Result<&'a str, EvalError> {
    match v {
        Value::Str(s) => Ok(s),
        _ => Err(EvalError::Argument { func: func.name(), expected: "a string", got: v.type_of() }),
    }
}

fn arg_num(func: Func, v: &Value<'_>) -> Result<Num, EvalError> {
    num(v).ok_or(EvalError::Argument { func: func.name(), expected: "a number", got: v.type_of() })
}

/// Float to int, truncating toward zero; out of range is an overflow.
fn float_to_int(f: f64, func: Func) -> EvalResult<'static> {
    let t = f.trunc();
    if !t.is_finite() || !(-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&t) {
        return Err(EvalError::Overflow { op: func.name() });
    }
    Ok(Value::Int(t as i64))
}

/// A whole-string number in JSON-like syntax (no spaces, no `inf`/`nan`).
fn looks_numeric(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'+' | b'-' | b'.' | b'e' | b'E'))
}

/// Calls a built-in function (except `matches`, which needs its compiled regex).
pub(crate) fn call<'a>(func: Func, args: &[Value<'a>], arena: &'a Bump) -> EvalResult<'a> {
    let first = args.first().copied().unwrap_or(Value::Nil);
    match func {
        Func::Len => match first {
            Value::Str(s) => Ok(Value::Int(s.chars().count() as i64)),
            Value::Array(a) => Ok(Value::Int(a.len() as i64)),
            Value::Object(o) => Ok(Value::Int(o.len() as i64)),
            other => {
                Err(EvalError::Argument { func: "len", expected: "a string, array or object", got: other.type_of() })
            }
        },
        Func::Abs => match arg_num(func, &first)? {
            Num::Int(i) => i.checked_abs().map(Value::Int).ok_or(EvalError::Overflow { op: "abs" }),
            Num::Float(f) => Ok(Value::Float(f.abs())),
        },
        Func::Min | Func::Max => min_max(func, args),
        Func::Round | Func::Floor | Func::Ceil => {
            let f = as_f64(arg_num(func, &first)?);
            Ok(Value::Float(match func {
                Func::Round => f.round(),
                Func::Floor => f.floor(),
                _ => f.ceil(),
            }))
        }
        Func::Int => match first {
            Value::Int(_) => Ok(first),
            Value::Float(f) => float_to_int(f, func),
            Value::Str(s) => s.parse::<i64>().map(Value::Int).map_err(|_| EvalError::NotANumber { func: "int" }),
            other => Err(EvalError::Argument { func: "int", expected: "a number or string", got: other.type_of() }),
        },
        Func::Float => match first {
            Value::Int(i) => Ok(Value::Float(i as f64)),
            Value::Float(_) => Ok(first),
            Value::Str(s) if looks_numeric(s) => {
                s.parse::<f64>().map(Value::Float).map_err(|_| EvalError::NotANumber { func: "float" })
            }
            Value::Str(_) => Err(EvalError::NotANumber { func: "float" }),
            other => Err(EvalError::Argument { func: "float", expected: "a number or string", got: other.type_of() }),
        },
        Func::String => match first {
            Value::Str(_) => Ok(first),
            other => Ok(Value::Str(arena.alloc_str(&other.to_json()))),
        },
        Func::Lower => {
            let s = arg_str(func, &first)?;
            Ok(Value::Str(if s.bytes().any(|b| b.is_ascii_uppercase() || b >= 0x80) {
                arena.alloc_str(&s.to_lowercase())
            } else {
                s
            }))
        }
        Func::Upper => {
            let s = arg_str(func, &first)?;
            Ok(Value::Str(if s.bytes().any(|b| b.is_ascii_lowercase() || b >= 0x80) {
                arena.alloc_str(&s.to_uppercase())
            } else {
                s
            }))
        }
        Func::Trim => Ok(Value::Str(arg_str(func, &first)?.trim())),
        Func::Contains | Func::StartsWith | Func::EndsWith => {
            let op = match func {
                Func::Contains => BinOp::Contains,
                Func::StartsWith => BinOp::StartsWith,
                _ => BinOp::EndsWith,
            };
            let second = args.get(1).copied().unwrap_or(Value::Nil);
            string_test(op, &first, &second).map(Value::Bool)
        }
        Func::Matches => Err(EvalError::Argument { func: "matches", expected: "a literal pattern", got: Type::Nil }),
    }
}

fn min_max<'a>(func: Func, args: &[Value<'a>]) -> EvalResult<'a> {
    let pick = |best: Num, n: Num| -> Num {
        let ord = cmp_num(n, best);
        let better = match func {
            Func::Min => ord == Some(Ordering::Less),
            _ => ord == Some(Ordering::Greater),
        };
        if better || as_f64(n).is_nan() {
            n
        } else {
            best
        }
    };
    let mut all_int = true;
    let mut best: Option<Num> = None;
    let mut visit = |v: &Value<'_>| -> Result<(), EvalError> {
        let n = num(v).ok_or(EvalError::Argument { func: func.name(), expected: "numbers", got: v.type_of() })?;
        all_int &= matches!(n, Num::Int(_));
        best = Some(match best {
            None => n,
            Some(b) => pick(b, n),
        });
        Ok(())
    };
    match args {
        [Value::Array(a)] => {
            for v in a.iter() {
                visit(&v)?;
            }
        }
        _ => {
            for v in args {
                visit(v)?;
            }
        }
    }
    match best {
        None => Err(EvalError::Empty { func: func.name() }),
        Some(Num::Int(i)) if all_int => Ok(Value::Int(i)),
        Some(n) => Ok(Value::Float(as_f64(n))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ints_and_floats_compare_exactly_at_every_magnitude() {
        let cmp = |i: i64, f: f64| compare_numbers(&Value::Int(i), &Value::Float(f));
        assert_eq!(cmp(1000, 1200.5), Some(Ordering::Less));
        assert_eq!(cmp(3, 3.0), Some(Ordering::Equal));
        assert_eq!(cmp(-3, -3.5), Some(Ordering::Greater));
        // 2^53 + 1 is not a float: it lies between 2^53 and 2^53 + 2.
        assert_eq!(cmp((1 << 53) + 1, 9_007_199_254_740_992.0), Some(Ordering::Greater));
        assert_eq!(cmp((1 << 53) + 1, 9_007_199_254_740_994.0), Some(Ordering::Less));
        // i64::MAX is below 2^63, which is the float nearest to it.
        assert_eq!(cmp(i64::MAX, 9_223_372_036_854_775_808.0), Some(Ordering::Less));
        assert_eq!(cmp(i64::MIN, -9_223_372_036_854_775_808.0), Some(Ordering::Equal));
        assert_eq!(cmp(0, f64::NAN), None);
    }
}
