//! The compiled form of conditions: what the evaluator runs.
//!
//! Field paths are slot numbers, constants are folded, `in [literals]` is a set
//! lookup, literal substrings use prebuilt `memchr` finders, regexes are
//! compiled once, sub-expressions repeated across rules are computed once per
//! decision ("memos"), and the string tests of one subject are answered by a
//! single pass over it ("pattern groups"), and the tests rules repeat are each answered at
//! most once per decision ("predicates").

use super::matcher::Matcher;
use memchr::memmem::Finder;
use rustc_hash::FxHashSet;

use super::ops::{BinOp, Func, UnOp};
use super::value::{same_bytes, Const};

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
    /// a test several rules make (`a + 2 <= b`, `lower(x) contains "y"`), its
    /// truth or error computed at most once per decision (see [`super::preds`])
    Pred(u32),
    /// a test of a condition compiled to a branching program, moved to `Program::atoms` (see
    /// [`super::branching`]): the tree keeps this in its place for explanations
    Atom(u32),
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
        /// its string items, as a string needle is looked up among them (kept in the node, not
        /// behind `set`: the test of a string field reads them in place)
        strings: ListStrings,
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
        regex: Matcher,
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

impl Node {
    /// Whether this is a comparison-level test (`==`, `<`, `in`, `contains`, `matches`, … with
    /// any operands): its value is a bool or an error, whatever surrounds it.
    pub(crate) fn is_comparison(&self) -> bool {
        matches!(
            self,
            Node::EqConst { .. }
                | Node::CmpConst { .. }
                | Node::InSet { .. }
                | Node::StrTest { .. }
                | Node::Regex { .. }
                | Node::PatternHit { .. }
                | Node::Compare(..)
        )
    }

    /// Calls `f` on each node directly below this one, in evaluation order.
    pub(crate) fn for_each_child_mut(&mut self, f: &mut dyn FnMut(&mut Node)) {
        match self {
            Node::Const(_) | Node::Slot(_) | Node::Memo(_) | Node::Pred(_) | Node::Atom(_) => {}
            Node::Array(items) | Node::Power(items) | Node::And(items) | Node::Or(items) | Node::Call(_, items) => {
                items.iter_mut().for_each(f)
            }
            Node::Access(base, steps) => {
                f(base);
                for s in steps {
                    if let AccessStep::Index(n) = s {
                        f(n);
                    }
                }
            }
            Node::Unary(_, x)
            | Node::EqConst { operand: x, .. }
            | Node::CmpConst { operand: x, .. }
            | Node::InSet { operand: x, .. }
            | Node::StrTest { operand: x, .. }
            | Node::Regex { operand: x, .. }
            | Node::PatternHit { operand: x, .. } => f(x),
            Node::Compare(_, a, b) => {
                f(a);
                f(b);
            }
            Node::Chain(first, rest) => {
                f(first);
                rest.iter_mut().for_each(|(_, n)| f(n));
            }
            Node::Ternary(c, a, b) => {
                f(c);
                f(a);
                f(b);
            }
        }
    }
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
}

/// Lists at least this long have their strings hashed, shorter ones packed.
const HASHED_LIST_MIN: usize = 12;

/// The string items of an `in` list, as a string needle is looked up among them.
#[derive(Debug)]
pub enum ListStrings {
    /// a short list's, in one block: a few length compares beat hashing the needle
    Packed(PackedStrings),
    /// a long list's, hashed
    Hashed(Box<FxHashSet<Box<str>>>),
}

impl ListStrings {
    /// The string items of `items` (the others never equal a string).
    pub(crate) fn of(items: &[Const]) -> ListStrings {
        if items.len() < HASHED_LIST_MIN {
            return ListStrings::Packed(PackedStrings::of(items));
        }
        let strings = items.iter().filter_map(|c| match c {
            Const::Str(s) => Some(s.clone()),
            _ => None,
        });
        ListStrings::Hashed(Box::new(strings.collect()))
    }

    /// Whether `s` is one of the strings.
    #[inline]
    pub(crate) fn contains(&self, s: &str) -> bool {
        match self {
            ListStrings::Packed(packed) => packed.contains(s),
            ListStrings::Hashed(hashed) => hashed.contains(s),
        }
    }
}

/// The string items of an `in` list in one allocation: their count and lengths (4 bytes each,
/// little-endian), then their bytes one after another. Whether a string is among them then
/// reads one block of memory, the lengths first (most items are told apart by length alone),
/// where the list itself is a vector of constants each pointing to its own string: a cache
/// miss per item once a table's tests no longer fit in the caches.
#[derive(Debug, Default)]
pub struct PackedStrings(Box<[u8]>);

impl PackedStrings {
    /// The strings of `items`, in order (items of other types are left out: they never equal
    /// a string).
    pub(crate) fn of(items: &[Const]) -> PackedStrings {
        let strings: Vec<&[u8]> = items
            .iter()
            .filter_map(|c| match c {
                Const::Str(s) if u32::try_from(s.len()).is_ok() => Some(s.as_bytes()),
                _ => None,
            })
            .collect();
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&(strings.len() as u32).to_le_bytes());
        for s in &strings {
            bytes.extend_from_slice(&(s.len() as u32).to_le_bytes());
        }
        for s in &strings {
            bytes.extend_from_slice(s);
        }
        PackedStrings(bytes.into_boxed_slice())
    }

    /// Whether `s` is one of the strings.
    #[inline]
    pub(crate) fn contains(&self, s: &str) -> bool {
        let Some((count, rest)) = self.0.split_first_chunk::<4>() else { return false };
        let count = u32::from_le_bytes(*count) as usize;
        let Some((lengths, bytes)) = rest.split_at_checked(count.saturating_mul(4)) else { return false };
        let mut at = 0usize;
        for len in lengths.chunks_exact(4) {
            let len = len.first_chunk::<4>().map_or(0, |l| u32::from_le_bytes(*l) as usize);
            if len == s.len() && bytes.get(at..at + len).is_some_and(|item| same_bytes(item, s.as_bytes())) {
                return true;
            }
            at += len;
        }
        false
    }

    /// The same strings in a fresh allocation (see [`lay_out_in_order`]); the old one is
    /// returned to be kept until the relayout is done.
    fn reallocate(&mut self) -> Box<[u8]> {
        let fresh = self.0.clone();
        std::mem::replace(&mut self.0, fresh)
    }
}

/// Moves the nodes of `roots` into fresh allocations made in the order a decision reaches them
/// (each tree depth first, the trees in order), so that evaluating rules one after another reads
/// memory front to back. Compiling leaves a table's nodes wherever the allocator had room among
/// what parsing and rewriting freed; with thousands of rules they no longer fit in the caches,
/// and scattered they cost a miss each, where in order the prefetcher brings them ahead.
/// The old allocations are freed only at the end, so the fresh ones cannot fall back into them.
pub(crate) fn lay_out_in_order(roots: &mut [Node]) {
    let mut old = Vacated::default();
    for root in roots {
        lay_out(root, &mut old);
    }
}

/// The allocations a relayout moved out of, kept until it is done.
#[derive(Default)]
struct Vacated {
    // the boxes themselves are what is kept: their memory must not be handed out again yet
    #[allow(clippy::vec_box)]
    boxes: Vec<Box<Node>>,
    lists: Vec<Vec<Node>>,
    chains: Vec<Vec<(BinOp, Node)>>,
    bytes: Vec<Box<[u8]>>,
}

fn rebox(slot: &mut Box<Node>, old: &mut Vacated) {
    let node = std::mem::replace(&mut **slot, Node::Const(Const::Nil));
    old.boxes.push(std::mem::replace(slot, Box::new(node)));
    lay_out(slot, old);
}

/// Moves `list`'s items into a fresh buffer; the old one, emptied, is returned to be kept.
fn rebuffer<T>(list: &mut Vec<T>) -> Vec<T> {
    let mut vacated = std::mem::replace(list, Vec::with_capacity(list.len()));
    list.append(&mut vacated);
    vacated
}

fn relist(list: &mut Vec<Node>, old: &mut Vacated) {
    old.lists.push(rebuffer(list));
    for item in list.iter_mut() {
        lay_out(item, old);
    }
}

fn lay_out(node: &mut Node, old: &mut Vacated) {
    match node {
        Node::Const(_) | Node::Slot(_) | Node::Memo(_) | Node::Pred(_) | Node::Atom(_) => {}
        Node::Array(items) | Node::Power(items) | Node::And(items) | Node::Or(items) | Node::Call(_, items) => {
            relist(items, old)
        }
        Node::Access(base, steps) => {
            rebox(base, old);
            for step in steps {
                if let AccessStep::Index(n) = step {
                    lay_out(n, old);
                }
            }
        }
        Node::InSet { operand, strings, .. } => {
            rebox(operand, old);
            if let ListStrings::Packed(packed) = strings {
                old.bytes.push(packed.reallocate());
            }
        }
        Node::Unary(_, x)
        | Node::EqConst { operand: x, .. }
        | Node::CmpConst { operand: x, .. }
        | Node::StrTest { operand: x, .. }
        | Node::Regex { operand: x, .. }
        | Node::PatternHit { operand: x, .. } => rebox(x, old),
        Node::Compare(_, a, b) => {
            rebox(a, old);
            rebox(b, old);
        }
        Node::Chain(first, rest) => {
            rebox(first, old);
            old.chains.push(rebuffer(rest));
            for (_, item) in rest.iter_mut() {
                lay_out(item, old);
            }
        }
        Node::Ternary(c, a, b) => {
            rebox(c, old);
            rebox(a, old);
            rebox(b, old);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// branching programs (compiled by `super::branching`)

/// Where a step goes next: another step, or the condition's outcome.
pub(crate) type Target = u32;
/// The condition holds.
pub(crate) const HOLDS: Target = u32::MAX;
/// The condition does not hold.
pub(crate) const FAILS: Target = u32::MAX - 1;

/// One test of a branching program and where to go after it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Step {
    /// what to test
    pub test: Test,
    /// next when the test holds
    pub if_true: Target,
    /// next when it does not
    pub if_false: Target,
}

/// The test of a [`Step`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Test {
    /// predicate `id`, answered once per decision
    Pred {
        /// which predicate
        id: u32,
        /// the slot of the field it reads, as for an atom's `slot`: its first answer in a
        /// decision is then found as an atom's is
        slot: u32,
    },
    /// the node `Program::atoms[atom]`, judged as an item of `within`
    Atom {
        /// which node
        atom: u32,
        /// the operator it stands in, named by an error of its value
        within: Within,
        /// the slot of the field the test reads (`f == "x"`, `f < 3`, `f in [...]`, `f`,
        /// `!f`), or [`NO_SLOT`]: read without loading the operand's node, which in a table of
        /// tens of thousands of rules is a cache miss per test, nor a side table
        slot: u32,
    },
}

/// The operator a test stands in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Within {
    /// `a && b`
    And,
    /// `a || b`
    Or,
    /// `!a`
    Not,
    /// `c ? a : b`, for its condition `c` (the branches are judged by what holds the `?:`)
    Choice,
}

impl Within {
    /// The operator as the evaluator's errors name it.
    pub(crate) fn symbol(self) -> &'static str {
        match self {
            Within::And => "&&",
            Within::Or => "||",
            Within::Not => "!",
            Within::Choice => "?:",
        }
    }
}

/// An atom whose test does not read one field (see [`Test::Atom`]).
pub(crate) const NO_SLOT: u32 = u32::MAX;

/// The slot a leaf test reads when it tests one field, else [`NO_SLOT`].
pub(crate) fn operand_slot(leaf: &Node) -> u32 {
    let of = |n: &Node| match n {
        Node::Slot(s) => *s,
        _ => NO_SLOT,
    };
    match leaf {
        Node::EqConst { operand, .. } | Node::CmpConst { operand, .. } | Node::InSet { operand, .. } => of(operand),
        Node::Unary(super::ops::UnOp::Not, x) => of(x),
        Node::Slot(s) => *s,
        _ => NO_SLOT,
    }
}

/// The start of a condition that has no branching program (a single test).
pub(crate) const NO_PROGRAM: Target = u32::MAX;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A packed list holds exactly the strings of the list: lengths shared by several
        /// items, the empty string, items of other types left out.
        #[test]
        fn packed_strings_hold_the_list_strings(
            items in prop::collection::vec(prop_oneof!["[ab]{0,3}", ".{0,20}"], 0..12),
            others in prop::collection::vec(-3i64..3, 0..3),
            probe in prop_oneof!["[ab]{0,4}", ".{0,20}"],
        ) {
            let mut list: Vec<Const> = items.iter().map(|s| Const::Str(s.as_str().into())).collect();
            list.extend(others.into_iter().map(Const::Int));
            let packed = PackedStrings::of(&list);
            for s in &items {
                prop_assert!(packed.contains(s));
            }
            prop_assert_eq!(packed.contains(&probe), items.contains(&probe));
            prop_assert!(!packed.contains("-1") || items.iter().any(|s| s == "-1"));
        }

        /// A list's strings, packed when it is short and hashed when it is long, hold exactly
        /// its string items.
        #[test]
        fn list_strings_hold_the_list_strings(
            items in prop::collection::vec("[ab]{0,3}", 0..30),
            others in prop::collection::vec(-3i64..3, 0..3),
            probe in "[ab]{0,4}",
        ) {
            let mut list: Vec<Const> = items.iter().map(|s| Const::Str(s.as_str().into())).collect();
            list.extend(others.into_iter().map(Const::Int));
            let strings = ListStrings::of(&list);
            prop_assert_eq!(matches!(strings, ListStrings::Hashed(_)), list.len() >= HASHED_LIST_MIN);
            prop_assert_eq!(strings.contains(&probe), items.contains(&probe));
            prop_assert!(!strings.contains("-1"));
        }
    }
}
