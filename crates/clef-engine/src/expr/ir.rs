//! The compiled form of conditions: what the evaluator runs.
//!
//! Field paths are slot numbers, constants are folded, `in [literals]` is a set
//! lookup, literal substrings use prebuilt `memchr` finders, regexes are
//! compiled once, sub-expressions repeated across rules are computed once per
//! decision ("memos"), and the string tests of one subject are answered by a
//! single pass over it ("pattern groups").

use memchr::memmem::Finder;
use regex::Regex;
use rustc_hash::FxHashSet;

use super::ops::{BinOp, Func, UnOp};
use super::value::Const;

/// A path into the input: `headers["user-agent"]` is `[Key("headers"), Key("user-agent")]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PathSeg {
    /// an object member
    Key(Box<str>),
    /// an array element (negative from the end)
    Index(i64),
}

/// A compiled expression node.
#[derive(Debug)]
pub enum Node {
    /// a constant
    Const(Const),
    /// an input field path, resolved when the input is read
    Slot(u32),
    /// a shared sub-expression, computed at most once per decision
    Memo(u32),
    /// `[a, b]` with non-constant items
    Array(Vec<Node>),
    /// member/index steps on a computed value
    Access(Box<Node>, Vec<AccessStep>),
    /// `!x`, `-x`, `+x`
    Unary(UnOp, Box<Node>),
    /// any comparison-level operator on two computed operands
    Compare(BinOp, Box<Node>, Box<Node>),
    /// `x == c` / `x != c`
    EqConst {
        /// left side
        operand: Box<Node>,
        /// the constant
        value: Const,
        /// `!=`
        negate: bool,
    },
    /// `x < c` or `c < x` with a constant `c`
    CmpConst {
        /// the computed side
        operand: Box<Node>,
        /// the operator as written
        op: BinOp,
        /// the constant
        value: Const,
        /// whether the constant is written on the left (`c < x`)
        const_left: bool,
    },
    /// `x in [literals]` / `x not in [literals]`
    InSet {
        /// the needle
        operand: Box<Node>,
        /// the literal list
        set: Box<ConstSet>,
        /// `not in`
        negate: bool,
    },
    /// `contains` / `startsWith` / `endsWith` with a literal
    StrTest {
        /// the haystack
        operand: Box<Node>,
        /// which test
        op: BinOp,
        /// the literal
        needle: Box<str>,
        /// prebuilt finder for `contains`
        finder: Box<Finder<'static>>,
    },
    /// `matches` / `~` / `!~` against a regex compiled once
    Regex {
        /// the subject
        operand: Box<Node>,
        /// compiled pattern
        regex: Regex,
        /// `!~`
        negate: bool,
    },
    /// one test answered by its subject's pattern group
    PatternHit {
        /// the subject (evaluated to know whether it is a string)
        operand: Box<Node>,
        /// which group
        group: u32,
        /// which pattern of the group
        index: u32,
        /// the operator, for negation and error messages
        op: BinOp,
    },
    /// left-associative arithmetic / `??` chain
    Chain(Box<Node>, Vec<(BinOp, Node)>),
    /// `a ** b ** c`
    Power(Vec<Node>),
    /// `a && b && ...`
    And(Vec<Node>),
    /// `a || b || ...`
    Or(Vec<Node>),
    /// `c ? a : b`
    Ternary(Box<Node>, Box<Node>, Box<Node>),
    /// a built-in function
    Call(Func, Vec<Node>),
}

/// One step of a runtime access chain.
#[derive(Debug)]
pub enum AccessStep {
    /// `.name`
    Member(Box<str>),
    /// `[expr]`
    Index(Node),
}

/// The literal list of `in [..]`.
#[derive(Debug)]
pub struct ConstSet {
    /// all items, in order
    pub items: Vec<Const>,
    /// string items, hashed (only for long lists)
    pub strings: Option<FxHashSet<Box<str>>>,
}
