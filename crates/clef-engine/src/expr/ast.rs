//! The syntax tree of a condition, with byte positions.
//!
//! Chains of one operator level (`a + b - c`, `a && b && c`, `a.b[0].c`) are
//! flat lists, so a long chain never makes a deep tree: nothing that walks the
//! tree recurses more than the nesting limit allows.

use super::ops::{BinOp, Func, UnOp};

/// A byte range in the condition text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Span {
    /// first byte
    pub start: usize,
    /// one past the last byte
    pub end: usize,
}

impl Span {
    /// A span from `start` to `end`.
    pub fn new(start: usize, end: usize) -> Span {
        Span { start, end }
    }

    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span::new(self.start.min(other.start), self.end.max(other.end))
    }
}

/// An expression and where it was written.
#[derive(Clone, Debug)]
pub struct Expr {
    /// what it is
    pub kind: ExprKind,
    /// where it is
    pub span: Span,
}

/// One step of a member/index chain.
#[derive(Clone, Debug)]
pub enum Step {
    /// `.name` (also `["name"]` with a literal string)
    Member(String),
    /// `[expr]`
    Index(Expr),
}

/// The kinds of expression.
#[derive(Clone, Debug)]
pub enum ExprKind {
    /// `nil`
    Nil,
    /// `true` / `false`
    Bool(bool),
    /// integer literal
    Int(i64),
    /// float literal
    Float(f64),
    /// string literal
    Str(String),
    /// `[a, b, ...]`
    Array(Vec<Expr>),
    /// an input field at the top level
    Field(String),
    /// `params.NAME`
    Param(String),
    /// `base.x[i]...`: steps applied left to right
    Access(Box<Expr>, Vec<(Step, Span)>),
    /// `f(args)`
    Call(Func, Vec<Expr>),
    /// `!x`, `-x`, `+x`
    Unary(UnOp, Box<Expr>),
    /// a comparison-level operator (non-associative)
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// left-associative chain of one precedence level: `+ -`, `* / %`, `??`
    Chain(Box<Expr>, Vec<(BinOp, Expr)>),
    /// `a ** b ** c`, right-associative
    Power(Vec<Expr>),
    /// `a && b && ...`
    And(Vec<Expr>),
    /// `a || b || ...`
    Or(Vec<Expr>),
    /// `c ? a : b`
    Ternary(Box<Expr>, Box<Expr>, Box<Expr>),
}

impl Expr {
    /// Builds an expression.
    pub fn new(kind: ExprKind, span: Span) -> Expr {
        Expr { kind, span }
    }

    /// The direct sub-expressions, in evaluation order.
    pub fn children(&self) -> Vec<&Expr> {
        let mut out = Vec::new();
        self.for_each_child(|c| out.push(c));
        out
    }

    /// Calls `f` on each direct sub-expression, in source order, without collecting them
    /// (explanations walk every false rule's conjunct).
    pub fn for_each_child<'e>(&'e self, mut f: impl FnMut(&'e Expr)) {
        match &self.kind {
            ExprKind::Nil
            | ExprKind::Bool(_)
            | ExprKind::Int(_)
            | ExprKind::Float(_)
            | ExprKind::Str(_)
            | ExprKind::Field(_)
            | ExprKind::Param(_) => {}
            ExprKind::Array(items)
            | ExprKind::Call(_, items)
            | ExprKind::Power(items)
            | ExprKind::And(items)
            | ExprKind::Or(items) => items.iter().for_each(f),
            ExprKind::Access(base, steps) => {
                f(base);
                for (s, _) in steps {
                    if let Step::Index(e) = s {
                        f(e);
                    }
                }
            }
            ExprKind::Unary(_, e) => f(e),
            ExprKind::Binary(_, a, b) => {
                f(a);
                f(b);
            }
            ExprKind::Chain(first, rest) => {
                f(first);
                rest.iter().for_each(|(_, e)| f(e));
            }
            ExprKind::Ternary(c, a, b) => {
                f(c);
                f(a);
                f(b);
            }
        }
    }
}
