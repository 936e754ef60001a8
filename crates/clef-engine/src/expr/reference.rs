//! The reference evaluator: a plain walk of the syntax tree, reading fields
//! straight from the input, with no slots, folding, sets, memos or indexes.
//!
//! It exists to be obviously right. Property tests check that the optimized
//! path ([`super::compile`], [`super::eval`], the rule index) agrees with it.

use bumpalo::Bump;
use regex::Regex;
use rustc_hash::FxHashMap;

use super::ast::{Expr, ExprKind, Step};
use super::ops::{self, BinOp, EvalError, EvalResult, Func};
use super::value::{Array, Const, Value};

/// Evaluates `expr` against the input object `root`.
pub fn evaluate<'a>(
    expr: &'a Expr,
    root: &Value<'a>,
    params: &'a FxHashMap<String, Const>,
    arena: &'a Bump,
) -> EvalResult<'a> {
    Reference { root: *root, params, arena }.eval(expr)
}

struct Reference<'a> {
    root: Value<'a>,
    params: &'a FxHashMap<String, Const>,
    arena: &'a Bump,
}

fn pattern(e: &Expr) -> Result<Regex, EvalError> {
    match &e.kind {
        ExprKind::Str(p) => Regex::new(p).map_err(|_| EvalError::Argument {
            func: "matches",
            expected: "a valid regex",
            got: super::value::Type::Str,
        }),
        _ => Err(EvalError::Argument { func: "matches", expected: "a literal pattern", got: super::value::Type::Nil }),
    }
}

impl<'a> Reference<'a> {
    fn eval(&self, e: &'a Expr) -> EvalResult<'a> {
        match &e.kind {
            ExprKind::Nil => Ok(Value::Nil),
            ExprKind::Bool(b) => Ok(Value::Bool(*b)),
            ExprKind::Int(i) => Ok(Value::Int(*i)),
            ExprKind::Float(f) => Ok(Value::Float(*f)),
            ExprKind::Str(s) => Ok(Value::Str(s)),
            ExprKind::Array(items) => {
                let mut values = Vec::new();
                for i in items {
                    values.push(self.eval(i)?);
                }
                Ok(Value::Array(Array::Values(self.arena.alloc_slice_copy(&values))))
            }
            ExprKind::Field(name) => ops::member(&self.root, name),
            ExprKind::Param(name) => Ok(self.params.get(name).map(Value::from_const).unwrap_or(Value::Nil)),
            ExprKind::Access(base, steps) => {
                let mut v = self.eval(base)?;
                for (step, _) in steps {
                    v = match step {
                        Step::Member(name) => match v {
                            Value::Array(_) => ops::index(&v, &Value::Str(name))?,
                            _ => ops::member(&v, name)?,
                        },
                        Step::Index(i) => ops::index(&v, &self.eval(i)?)?,
                    };
                }
                Ok(v)
            }
            ExprKind::Call(Func::Matches, args) => {
                // the checker gives `matches` its two arguments
                let [subject, re] = args.as_slice() else {
                    return Err(EvalError::Argument {
                        func: "matches",
                        expected: "two arguments",
                        got: super::value::Type::Nil,
                    });
                };
                let s = self.eval(subject)?;
                let re = pattern(re)?;
                ops::regex_test(BinOp::Matches, &s, |s| re.is_match(s)).map(Value::Bool)
            }
            ExprKind::Call(func, args) => {
                let mut values = Vec::new();
                for a in args {
                    values.push(self.eval(a)?);
                }
                ops::call(*func, &values, self.arena)
            }
            ExprKind::Unary(op, x) => ops::unary(*op, &self.eval(x)?),
            ExprKind::Binary(op @ (BinOp::Matches | BinOp::NotMatches), l, r) => {
                let s = self.eval(l)?;
                let re = pattern(r)?;
                ops::regex_test(*op, &s, |s| re.is_match(s)).map(Value::Bool)
            }
            ExprKind::Binary(op, l, r) => {
                let x = self.eval(l)?;
                let y = self.eval(r)?;
                ops::compare_values(*op, &x, &y)
            }
            ExprKind::Chain(first, rest) => {
                let mut acc = self.eval(first)?;
                for (op, item) in rest {
                    acc = match op {
                        BinOp::Coalesce if matches!(acc, Value::Nil) => self.eval(item)?,
                        BinOp::Coalesce => acc,
                        _ => ops::arithmetic(*op, &acc, &self.eval(item)?, self.arena)?,
                    };
                }
                Ok(acc)
            }
            ExprKind::Power(items) => {
                let mut values = Vec::new();
                for i in items {
                    values.push(self.eval(i)?);
                }
                let mut acc = values.pop().unwrap_or(Value::Nil);
                while let Some(base) = values.pop() {
                    acc = ops::arithmetic(BinOp::Pow, &base, &acc, self.arena)?;
                }
                Ok(acc)
            }
            ExprKind::And(items) => {
                for i in items {
                    if !ops::truth(&self.eval(i)?, "&&")? {
                        return Ok(Value::Bool(false));
                    }
                }
                Ok(Value::Bool(true))
            }
            ExprKind::Or(items) => {
                for i in items {
                    if ops::truth(&self.eval(i)?, "||")? {
                        return Ok(Value::Bool(true));
                    }
                }
                Ok(Value::Bool(false))
            }
            ExprKind::Ternary(c, a, b) => {
                if ops::truth(&self.eval(c)?, "?:")? {
                    self.eval(a)
                } else {
                    self.eval(b)
                }
            }
        }
    }
}
