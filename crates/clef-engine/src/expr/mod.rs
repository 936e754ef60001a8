//! The expression language of conditions: lexer, parser, load-time checks,
//! compiler, evaluators and diagnostics.
//!
//! A condition goes `text → tokens → Expr (positions) → check → Node (slots,
//! folded constants, sets, finders, regexes) → eval`. Everything before
//! `eval` runs once when a table loads.
//!
//! The modules read one way, as data, a builder and runners:
//! - [`ops`]: what every operator and function means; both evaluators call it;
//! - `ast` (syntax, with positions), `ir` (compiled nodes) and `program` (the compiled table:
//!   slots, memos, pattern groups, predicates, and the pass that reads an input into slots) are data;
//! - `compile` builds a `Program` from checked syntax trees; `preds` then turns the tests a
//!   table repeats into predicates answered once per decision;
//! - [`eval`] runs a `Program` (it never imports the compiler); `reference` walks the syntax
//!   tree with no slots, folding or index: the test oracle, not used to answer requests;
//! - `json` writes JSON text, for every part of clef that does.
//! - `same` is the language's `==` on JSON values: the one rule of "the same value".

pub mod alphabet;
pub(crate) mod ast;
pub(crate) mod branching;
pub mod check;
pub(crate) mod compile;
pub mod eval;
pub(crate) mod ir;
pub mod json;
pub mod lexer;
pub mod matcher;
pub mod ops;
pub mod parser;
pub(crate) mod patterns;
pub(crate) mod preds;
pub(crate) mod program;
pub(crate) mod reference;
pub(crate) mod safety;
pub(crate) mod same;
pub mod value;

use std::fmt;

use bumpalo::Bump;
use rustc_hash::{FxHashMap, FxHashSet};

pub use ast::{Expr, Span};
pub use check::{Schema, SchemaType, TypeSet};
pub use ops::EvalError;
pub use program::Program;
pub use same::{same_json_text, same_value};
pub use value::{Const, Type, Value};

/// A load-time problem in one condition, with its byte range in the condition text.
#[derive(Clone, Debug, PartialEq)]
pub struct ExprError {
    /// where in the condition
    pub span: Span,
    /// what is wrong and, where possible, how to fix it
    pub message: String,
}

impl ExprError {
    /// A new error.
    pub fn new(span: Span, message: String) -> ExprError {
        ExprError { span, message }
    }
}

impl fmt::Display for ExprError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ExprError {}

/// What conditions may refer to, and the load-time limits.
#[derive(Clone, Debug)]
pub struct Env {
    /// `params.NAME` values
    pub params: FxHashMap<String, Const>,
    /// parameters whose declaration is wrong (and already reported): conditions
    /// may name them without a second, misleading "unknown parameter"
    pub broken_params: FxHashSet<String>,
    /// declared input fields, if the table has a schema
    pub schema: Option<Schema>,
    /// maximum nesting depth
    pub max_depth: usize,
    /// maximum compiled size of one regex
    pub regex_size_limit: usize,
}

impl Default for Env {
    fn default() -> Env {
        Env {
            params: FxHashMap::default(),
            broken_params: FxHashSet::default(),
            schema: None,
            max_depth: parser::DEFAULT_MAX_DEPTH,
            regex_size_limit: compile::DEFAULT_REGEX_SIZE_LIMIT,
        }
    }
}

/// Parses and checks one condition (or, with `as_condition = false`, any expression).
pub fn parse_checked(src: &str, env: &Env, as_condition: bool) -> Result<Expr, ExprError> {
    let expr = parser::parse(src, env.max_depth)?;
    if as_condition {
        check::check_condition(&expr, env)?;
    } else {
        check::check_expr(&expr, env)?;
    }
    Ok(expr)
}

/// One standalone compiled expression: handy for tools and tests. Tables
/// compile all their conditions together into one [`Program`] instead.
#[derive(Debug)]
pub struct Expression {
    ast: Expr,
    program: Program,
    params: FxHashMap<String, Const>,
}

impl Expression {
    /// Parses, checks and compiles `src`.
    pub fn compile(src: &str, env: &Env, as_condition: bool) -> Result<Expression, ExprError> {
        let ast = parse_checked(src, env, as_condition)?;
        let program = compile::compile_program(&[&ast], &env.params, env.regex_size_limit).map_err(|(_, e)| e)?;
        Ok(Expression { ast, program, params: env.params.clone() })
    }

    /// Evaluates with the optimized evaluator against a parsed input object (JSON text:
    /// `crate::input::with_parsed`, which the expression language does not depend on).
    pub fn evaluate(&self, root: &Value<'_>) -> Result<serde_json::Value, EvalError> {
        let arena = Bump::new();
        let slots = self.program.fill_slots(root);
        let mut cx = eval::Ctx::with_slots(&self.program, &arena, slots);
        // one expression was compiled
        let node = self.program.exprs.first().ok_or(EvalError::ConditionNotBool { got: Type::Nil })?;
        eval::eval(node, &mut cx).map(|v| json::to_serde(&v))
    }

    /// Evaluates with the reference evaluator against a parsed input object.
    pub fn evaluate_reference(&self, root: &Value<'_>) -> Result<serde_json::Value, EvalError> {
        let arena = Bump::new();
        reference::evaluate(&self.ast, root, &self.params, &arena).map(|v| json::to_serde(&v))
    }

    /// The compiled program (one expression).
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The syntax tree.
    pub fn ast(&self) -> &Expr {
        &self.ast
    }
}
