//! Compiles checked syntax trees into the shared [`Program`] of a table.

use std::sync::Arc;

use super::alphabet::Alphabet;
use super::matcher::{Matcher, MatcherError};
use bumpalo::Bump;
use memchr::memmem::Finder;
use rustc_hash::{FxHashMap, FxHashSet};

use super::ast::{Expr, ExprKind, Span, Step};
use super::eval::{self, Ctx};
use super::ir::{AccessStep, ConstSet, ListStrings, Node, PathSeg};
use super::json;
use super::ops::{BinOp, Func};
use super::patterns::{PatternGroup, PatternTest};
use super::program::Program;
use super::value::Const;
use super::ExprError;

/// A subject with at least this many substring/regex tests gets one shared pass.
const PATTERN_GROUP_MIN: usize = 4;
/// Default cap on one regex's compiled size (bytes), as the regex crate counts it.
pub const DEFAULT_REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Compiles `exprs` (already checked) into one program. On error, returns
/// the index of the failing expression with its error.
pub fn compile_program(
    exprs: &[&Expr],
    params: &FxHashMap<String, Const>,
    regex_size_limit: usize,
) -> Result<Program, (usize, ExprError)> {
    let mut counts: FxHashMap<String, usize> = FxHashMap::default();
    let mut patterns = Vec::new();
    for e in exprs {
        count_shared(e, &mut counts);
        regex_patterns(e, &mut patterns);
    }
    // the table's patterns in full, once: the alphabet is cut from all of them together
    let hirs: Vec<_> = patterns.iter().filter_map(|p| regex_syntax::Parser::new().parse(p).ok()).collect();
    let alphabet = Alphabet::new(&hirs).map(Arc::new);
    drop(hirs);
    let mut c = Compiler {
        program: Program { alphabet, ..Program::default() },
        params,
        slot_ids: FxHashMap::default(),
        memo_ids: FxHashMap::default(),
        shared: counts.into_iter().filter(|(_, n)| *n >= 2).map(|(k, _)| k).collect(),
        regex_size_limit,
    };
    for (i, e) in exprs.iter().enumerate() {
        let node = c.compile(e).map_err(|err| (i, err))?;
        c.program.exprs.push(node);
    }
    let mut program = c.program;
    build_pattern_groups(&mut program);
    Ok(program)
}

struct Compiler<'p> {
    program: Program,
    params: &'p FxHashMap<String, Const>,
    slot_ids: FxHashMap<Vec<PathSeg>, u32>,
    memo_ids: FxHashMap<String, u32>,
    shared: FxHashSet<String>,
    regex_size_limit: usize,
}

impl Compiler<'_> {
    /// The slot an expression reads `path` from.
    fn slot(&mut self, path: Vec<PathSeg>) -> u32 {
        let id = self.slot_id(path);
        self.program.mark_read(id);
        id
    }

    fn slot_id(&mut self, path: Vec<PathSeg>) -> u32 {
        if let Some(id) = self.slot_ids.get(&path) {
            return *id;
        }
        let root = match path.as_slice() {
            [first, _, ..] => Some(self.slot_id(vec![first.clone()])),
            _ => None,
        };
        let id = self.program.push_slot(path.clone(), root);
        self.slot_ids.insert(path, id);
        id
    }

    fn fold(&self, node: Node, span: Span) -> Result<Node, ExprError> {
        let arena = Bump::new();
        let empty = Program::default();
        let mut cx = Ctx::new(&empty, &arena);
        match eval::eval(&node, &mut cx) {
            Ok(v) => Ok(Node::Const(v.to_const())),
            Err(e) => Err(ExprError::new(span, format!("this always fails: {e}"))),
        }
    }

    fn compile(&mut self, e: &Expr) -> Result<Node, ExprError> {
        let node = match &e.kind {
            ExprKind::Nil => Node::Const(Const::Nil),
            ExprKind::Bool(b) => Node::Const(Const::Bool(*b)),
            ExprKind::Int(i) => Node::Const(Const::Int(*i)),
            ExprKind::Float(f) => Node::Const(Const::Float(*f)),
            ExprKind::Str(s) => Node::Const(Const::Str(s.as_str().into())),
            ExprKind::Array(items) => {
                let nodes = self.compile_all(items)?;
                if all_const(&nodes) {
                    Node::Const(Const::Array(nodes.into_iter().map(into_const).collect()))
                } else {
                    Node::Array(nodes)
                }
            }
            ExprKind::Field(name) => Node::Slot(self.slot(vec![PathSeg::Key(name.as_str().into())])),
            ExprKind::Param(name) => match self.params.get(name) {
                Some(c) => Node::Const(c.clone()),
                None => return Err(ExprError::new(e.span, format!("unknown parameter `{name}`"))),
            },
            ExprKind::Access(base, steps) => return self.access(base, steps, e.span),
            ExprKind::Call(func, args) => return self.call(*func, args, e),
            ExprKind::Unary(op, x) => {
                let x = self.compile(x)?;
                let constant = is_const(&x);
                let node = Node::Unary(*op, Box::new(x));
                return if constant { self.fold(node, e.span) } else { Ok(node) };
            }
            ExprKind::Binary(op, l, r) => return self.binary(*op, l, r, e.span),
            ExprKind::Chain(first, rest) => {
                let key = canonical(e);
                if let Some(id) = self.memo_ids.get(&key) {
                    return Ok(Node::Memo(*id));
                }
                let first = self.compile(first)?;
                let mut items = Vec::new();
                for (op, item) in rest {
                    items.push((*op, self.compile(item)?));
                }
                let constant = is_const(&first) && items.iter().all(|(_, n)| is_const(n));
                let node = Node::Chain(Box::new(first), items);
                return if constant { self.fold(node, e.span) } else { Ok(self.share(key, node)) };
            }
            ExprKind::Power(items) => {
                let nodes = self.compile_all(items)?;
                let constant = all_const(&nodes);
                let node = Node::Power(nodes);
                return if constant { self.fold(node, e.span) } else { Ok(node) };
            }
            ExprKind::And(items) | ExprKind::Or(items) => {
                let is_and = matches!(e.kind, ExprKind::And(_));
                // `a && (b && c)` is `a && b && c`, evaluated in the same order and stopping at
                // the same place: one flat list, so that the parenthesised parts a rule set's
                // rule is joined from do not cost a nested call each
                let mut nodes = Vec::with_capacity(items.len());
                for node in self.compile_all(items)? {
                    match node {
                        Node::And(inner) if is_and => nodes.extend(inner),
                        Node::Or(inner) if !is_and => nodes.extend(inner),
                        other => nodes.push(other),
                    }
                }
                // A leading constant that decides the result makes the rest unreachable.
                if let Some(Node::Const(Const::Bool(b))) = nodes.first() {
                    if *b != is_and {
                        return Ok(Node::Const(Const::Bool(*b)));
                    }
                }
                let constant = all_const(&nodes);
                let node = if is_and { Node::And(nodes) } else { Node::Or(nodes) };
                return if constant { self.fold(node, e.span) } else { Ok(node) };
            }
            ExprKind::Ternary(c, a, b) => {
                let cond = self.compile(c)?;
                if let Node::Const(Const::Bool(pick)) = cond {
                    return if pick { self.compile(a) } else { self.compile(b) };
                }
                let (a, b) = (self.compile(a)?, self.compile(b)?);
                let constant = is_const(&cond);
                let node = Node::Ternary(Box::new(cond), Box::new(a), Box::new(b));
                return if constant { self.fold(node, e.span) } else { Ok(node) };
            }
        };
        Ok(node)
    }

    fn compile_all(&mut self, items: &[Expr]) -> Result<Vec<Node>, ExprError> {
        items.iter().map(|i| self.compile(i)).collect()
    }

    fn access(&mut self, base: &Expr, steps: &[(Step, Span)], span: Span) -> Result<Node, ExprError> {
        let mut compiled = Vec::with_capacity(steps.len());
        for (s, _) in steps {
            compiled.push(match s {
                Step::Member(m) => AccessStep::Member(m.as_str().into()),
                Step::Index(e) => AccessStep::Index(self.compile(e)?),
            });
        }
        // The longest constant prefix of a field path becomes one slot.
        if let ExprKind::Field(root) = &base.kind {
            let mut path = vec![PathSeg::Key(root.as_str().into())];
            let mut used = 0;
            for step in &compiled {
                let seg = match step {
                    AccessStep::Member(m) => PathSeg::Key(m.clone()),
                    AccessStep::Index(Node::Const(Const::Int(i))) => PathSeg::Index(*i),
                    AccessStep::Index(Node::Const(Const::Str(s))) => PathSeg::Key(s.clone()),
                    AccessStep::Index(_) => break,
                };
                path.push(seg);
                used += 1;
            }
            let slot = Node::Slot(self.slot(path));
            let rest: Vec<AccessStep> = compiled.into_iter().skip(used).collect();
            return Ok(if rest.is_empty() { slot } else { Node::Access(Box::new(slot), rest) });
        }
        let base = self.compile(base)?;
        let constant = is_const(&base)
            && compiled.iter().all(|s| match s {
                AccessStep::Member(_) => true,
                AccessStep::Index(n) => is_const(n),
            });
        let node = Node::Access(Box::new(base), compiled);
        if constant {
            self.fold(node, span)
        } else {
            Ok(node)
        }
    }

    fn regex(&self, pattern: &Expr) -> Result<Matcher, ExprError> {
        let ExprKind::Str(p) = &pattern.kind else {
            return Err(ExprError::new(pattern.span, "the pattern must be a string literal".into()));
        };
        Matcher::with_alphabet(p, self.regex_size_limit, self.program.alphabet.as_ref()).map_err(|err| {
            let detail = match &err {
                MatcherError::Syntax(s) => s.lines().last().unwrap_or("").trim_start_matches("error: ").to_string(),
                MatcherError::TooBig(_) => err.to_string(),
            };
            ExprError::new(pattern.span, format!("invalid regex {}: {detail}", json::quote(p)))
        })
    }

    fn call(&mut self, func: Func, args: &[Expr], e: &Expr) -> Result<Node, ExprError> {
        if let (Func::Matches, [subject, pattern]) = (func, args) {
            // the checker has made sure `matches` has its two arguments
            let subject = self.compile(subject)?;
            let regex = self.regex(pattern)?;
            return Ok(Node::Regex { operand: Box::new(subject), regex, negate: false });
        }
        let key = canonical(e);
        if let Some(id) = self.memo_ids.get(&key) {
            return Ok(Node::Memo(*id));
        }
        let nodes = self.compile_all(args)?;
        if all_const(&nodes) {
            return self.fold(Node::Call(func, nodes), e.span);
        }
        let string_op = match func {
            Func::Contains => Some(BinOp::Contains),
            Func::StartsWith => Some(BinOp::StartsWith),
            Func::EndsWith => Some(BinOp::EndsWith),
            _ => None,
        };
        let node = match (string_op, <[Node; 2]>::try_from(nodes)) {
            (Some(op), Ok([operand, Node::Const(Const::Str(needle))])) => str_test(op, operand, needle),
            (_, Ok(pair)) => Node::Call(func, pair.into()),
            (_, Err(nodes)) => Node::Call(func, nodes),
        };
        Ok(self.share(key, node))
    }

    /// `node` as a memo when other conditions compute it too (`key` is its canonical form).
    fn share(&mut self, key: String, node: Node) -> Node {
        if !self.shared.contains(&key) {
            return node;
        }
        let id = self.program.memos.len() as u32;
        self.program.memos.push(node);
        self.memo_ids.insert(key, id);
        Node::Memo(id)
    }

    fn binary(&mut self, op: BinOp, l: &Expr, r: &Expr, span: Span) -> Result<Node, ExprError> {
        let left = self.compile(l)?;
        if matches!(op, BinOp::Matches | BinOp::NotMatches) {
            let regex = self.regex(r)?;
            return Ok(Node::Regex { operand: Box::new(left), regex, negate: op == BinOp::NotMatches });
        }
        let right = self.compile(r)?;
        if is_const(&left) && is_const(&right) {
            return self.fold(Node::Compare(op, Box::new(left), Box::new(right)), span);
        }
        Ok(match (op, left, right) {
            (BinOp::Eq | BinOp::Ne, operand, Node::Const(value))
            | (BinOp::Eq | BinOp::Ne, Node::Const(value), operand) => {
                Node::EqConst { operand: Box::new(operand), value, negate: op == BinOp::Ne }
            }
            (BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge, operand, Node::Const(value)) => {
                Node::CmpConst { operand: Box::new(operand), op, value, const_left: false }
            }
            (BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge, Node::Const(value), operand) => {
                Node::CmpConst { operand: Box::new(operand), op, value, const_left: true }
            }
            (BinOp::In | BinOp::NotIn, operand, Node::Const(Const::Array(items))) => Node::InSet {
                operand: Box::new(operand),
                strings: ListStrings::of(&items),
                set: Box::new(ConstSet { items }),
                negate: op == BinOp::NotIn,
            },
            (BinOp::Contains | BinOp::StartsWith | BinOp::EndsWith, operand, Node::Const(Const::Str(needle))) => {
                str_test(op, operand, needle)
            }
            (op, left, right) => Node::Compare(op, Box::new(left), Box::new(right)),
        })
    }
}

fn str_test(op: BinOp, operand: Node, needle: Box<str>) -> Node {
    let finder = Box::new(Finder::new(needle.as_bytes()).into_owned());
    Node::StrTest { operand: Box::new(operand), op, needle, finder }
}

fn is_const(n: &Node) -> bool {
    matches!(n, Node::Const(_))
}

fn all_const(nodes: &[Node]) -> bool {
    nodes.iter().all(is_const)
}

fn into_const(n: Node) -> Const {
    match n {
        Node::Const(c) => c,
        _ => Const::Nil,
    }
}

/// A span-free rendering of an expression, equal for equal sub-expressions.
fn canonical(e: &Expr) -> String {
    format!("{:?}", StripSpans(e))
}

struct StripSpans<'e>(&'e Expr);

impl std::fmt::Debug for StripSpans<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let e = self.0;
        match &e.kind {
            ExprKind::Access(base, steps) => {
                write!(f, "Access({:?}", StripSpans(base))?;
                for (s, _) in steps {
                    match s {
                        Step::Member(m) => write!(f, ".{m:?}")?,
                        Step::Index(i) => write!(f, "[{:?}]", StripSpans(i))?,
                    }
                }
                write!(f, ")")
            }
            ExprKind::Chain(first, rest) => {
                write!(f, "Chain({:?}", StripSpans(first))?;
                for (op, i) in rest {
                    write!(f, " {op:?} {:?}", StripSpans(i))?;
                }
                write!(f, ")")
            }
            ExprKind::Call(func, args) => {
                write!(f, "{func:?}(")?;
                for a in args {
                    write!(f, "{:?},", StripSpans(a))?;
                }
                write!(f, ")")
            }
            ExprKind::Unary(op, x) => write!(f, "{op:?}({:?})", StripSpans(x)),
            ExprKind::Binary(op, a, b) => write!(f, "{op:?}({:?},{:?})", StripSpans(a), StripSpans(b)),
            ExprKind::Ternary(c, a, b) => {
                write!(f, "If({:?},{:?},{:?})", StripSpans(c), StripSpans(a), StripSpans(b))
            }
            ExprKind::Array(items) | ExprKind::Power(items) | ExprKind::And(items) | ExprKind::Or(items) => {
                let tag = match &e.kind {
                    ExprKind::Array(_) => "Arr",
                    ExprKind::Power(_) => "Pow",
                    ExprKind::And(_) => "And",
                    _ => "Or",
                };
                write!(f, "{tag}[")?;
                for i in items {
                    write!(f, "{:?},", StripSpans(i))?;
                }
                write!(f, "]")
            }
            other => write!(f, "{other:?}"),
        }
    }
}

/// Counts calls and arithmetic/`??` chains by canonical form, to find those worth computing
/// once per decision (`lower(content)`, `session.risk_override ?? risk_score`,
/// `len(items) * 10 + items_in_cart`): a memo is computed at most once, and the rule index can
/// read it like a field.
fn count_shared(e: &Expr, counts: &mut FxHashMap<String, usize>) {
    let counted = match &e.kind {
        ExprKind::Call(func, _) => *func != Func::Matches,
        ExprKind::Chain(..) => true,
        _ => false,
    };
    if counted {
        *counts.entry(canonical(e)).or_default() += 1;
    }
    for c in e.children() {
        count_shared(c, counts);
    }
}

/// Adds the pattern of each regex test in `e` (`s matches "re"`, `s ~ "re"`, `s !~ "re"`).
fn regex_patterns<'e>(e: &'e Expr, out: &mut Vec<&'e str>) {
    match &e.kind {
        ExprKind::Call(Func::Matches, args) => {
            if let Some(Expr { kind: ExprKind::Str(p), .. }) = args.get(1) {
                out.push(p);
            }
        }
        ExprKind::Binary(BinOp::Matches | BinOp::NotMatches, _, pattern) => {
            if let ExprKind::Str(p) = &pattern.kind {
                out.push(p);
            }
        }
        _ => {}
    }
    for c in e.children() {
        regex_patterns(c, out);
    }
}

/// Which pattern test a node is, keyed by its subject.
fn pattern_of(node: &Node) -> Option<((u8, u32), String)> {
    let (operand, pattern) = match node {
        Node::Regex { operand, regex, .. } => (operand, format!("re:{}", regex.as_str())),
        Node::StrTest { operand, op: BinOp::Contains, needle, .. } => (operand, format!("in:{needle}")),
        _ => return None,
    };
    let subject = match **operand {
        Node::Slot(s) => (0, s),
        Node::Memo(m) => (1, m),
        _ => return None,
    };
    Some((subject, pattern))
}

/// Puts back in place each memo that only one node reads and that `kept` does not name (the
/// rule index reads its own memos by number).
///
/// A sub-expression is made a memo when several conditions write it, before the tests that
/// repeat become predicates ([`super::preds`]); a memo inside a test that became one
/// predicate is then read from one place only, and is computed at most once per decision
/// anyway, by that predicate. Kept a memo, each computation would also pay for the memo's
/// bookkeeping: a call, a check, a stored result (`x + 17 <= y` shared by ten rules made
/// `x + 17` a memo that only the predicate reads). Evaluation is pure, so the values and
/// errors are the same. The memo's number stays (a constant in its place) so that no other
/// number changes.
pub(crate) fn inline_single_use_memos(program: &mut Program, kept: &dyn Fn(u32) -> bool) {
    let mut uses = vec![0u32; program.memos.len()];
    let mut count = |n: &mut Node| {
        if let Node::Memo(m) = n {
            if let Some(u) = uses.get_mut(*m as usize) {
                *u += 1;
            }
        }
    };
    for n in program.exprs.iter_mut().chain(program.preds.iter_mut()).chain(program.memos.iter_mut()) {
        visit_mut(n, &mut count);
    }
    let inline: Vec<bool> = uses.iter().enumerate().map(|(m, &u)| u == 1 && !kept(m as u32)).collect();
    if !inline.contains(&true) {
        return;
    }
    let mut memos = std::mem::take(&mut program.memos);
    // `visit_mut` visits a replaced node's children afterwards: a memo inside an inlined
    // memo is inlined too
    let put_back = |memos: &mut Vec<Node>, n: &mut Node| {
        if let Node::Memo(m) = *n {
            if inline.get(m as usize).copied().unwrap_or(false) {
                if let Some(memo) = memos.get_mut(m as usize) {
                    *n = std::mem::replace(memo, Node::Const(Const::Nil));
                }
            }
        }
    };
    for n in program.exprs.iter_mut().chain(program.preds.iter_mut()) {
        visit_mut(n, &mut |n| put_back(&mut memos, n));
    }
    for m in 0..memos.len() {
        if inline.get(m).copied().unwrap_or(true) {
            continue;
        }
        let Some(slot) = memos.get_mut(m) else { continue };
        let mut node = std::mem::replace(slot, Node::Const(Const::Nil));
        visit_mut(&mut node, &mut |n| put_back(&mut memos, n));
        if let Some(slot) = memos.get_mut(m) {
            *slot = node;
        }
    }
    program.memos = memos;
}

/// Calls `f` on `node` and then on each node below it.
pub(crate) fn visit_mut(node: &mut Node, f: &mut dyn FnMut(&mut Node)) {
    f(node);
    node.for_each_child_mut(&mut |c| visit_mut(c, f));
}

/// Groups the substring and regex tests of each subject (a field, or a shared
/// `lower(content)`) to be answered together: see [`super::patterns`].
fn build_pattern_groups(program: &mut Program) {
    type Tests = (Vec<String>, Vec<PatternTest>);
    let mut by_subject: FxHashMap<(u8, u32), Tests> = FxHashMap::default();
    let mut order: Vec<(u8, u32)> = Vec::new();
    let mut collect = |n: &mut Node| {
        let Some((subject, key)) = pattern_of(n) else { return };
        let (keys, tests) = by_subject.entry(subject).or_insert_with(|| {
            order.push(subject);
            (Vec::new(), Vec::new())
        });
        if keys.contains(&key) {
            return;
        }
        keys.push(key);
        tests.push(match n {
            Node::Regex { regex, .. } => PatternTest::Regex(regex.clone()),
            Node::StrTest { finder, .. } => PatternTest::Substring(finder.clone()),
            _ => return,
        });
    };
    for n in program.exprs.iter_mut().chain(program.memos.iter_mut()) {
        visit_mut(n, &mut collect);
    }
    let mut groups: FxHashMap<(u8, u32), (u32, FxHashMap<String, u32>)> = FxHashMap::default();
    for subject in order {
        let Some((keys, tests)) = by_subject.remove(&subject) else { continue };
        if keys.len() < PATTERN_GROUP_MIN {
            continue;
        }
        let id = program.groups.len() as u32;
        let group = PatternGroup::new(tests, program.alphabet.as_ref());
        program.groups.push(group);
        groups.insert(subject, (id, keys.into_iter().enumerate().map(|(i, k)| (k, i as u32)).collect()));
    }
    if groups.is_empty() {
        return;
    }
    let mut rewrite = |n: &mut Node| {
        let Some((subject, key)) = pattern_of(n) else { return };
        let Some((group, index)) = groups.get(&subject).and_then(|(g, keys)| Some((*g, *keys.get(&key)?))) else {
            return;
        };
        let old = std::mem::replace(n, Node::Const(Const::Nil));
        let (operand, op) = match old {
            Node::Regex { operand, negate, .. } => (operand, if negate { BinOp::NotMatches } else { BinOp::Matches }),
            Node::StrTest { operand, .. } => (operand, BinOp::Contains),
            other => {
                *n = other;
                return;
            }
        };
        *n = Node::PatternHit { operand, group, index, op };
    };
    for n in program.exprs.iter_mut().chain(program.memos.iter_mut()) {
        visit_mut(n, &mut rewrite);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::{parse_checked, Env};

    /// `srcs` compiled as one table's conditions, their repeated tests made predicates, then
    /// the single-use memos put back (but those `kept` names).
    fn compiled(srcs: &[&str], kept: &dyn Fn(u32) -> bool) -> Program {
        let env = Env::default();
        let asts: Vec<_> =
            srcs.iter().map(|s| parse_checked(s, &env, true).unwrap_or_else(|e| panic!("{s}: {e:?}"))).collect();
        let refs: Vec<&Expr> = asts.iter().collect();
        let mut program = compile_program(&refs, &env.params, env.regex_size_limit).unwrap_or_else(|e| panic!("{e:?}"));
        crate::expr::preds::intern(&mut program);
        inline_single_use_memos(&mut program, kept);
        program
    }

    fn memo_reads(program: &mut Program) -> usize {
        let mut n = 0;
        for node in program.exprs.iter_mut().chain(program.preds.iter_mut()).chain(program.memos.iter_mut()) {
            visit_mut(node, &mut |x| n += usize::from(matches!(x, Node::Memo(_))));
        }
        n
    }

    #[test]
    fn a_memo_only_its_predicate_reads_is_put_back_in_it() {
        // `a + 17` is written twice, so it became a memo; the test around it, written twice
        // too, became one predicate, the memo's only reader
        let mut program = compiled(&["a + 17 <= b && c", "a + 17 <= b || d == 1"], &|_| false);
        assert_eq!(program.preds.len(), 1);
        assert_eq!(memo_reads(&mut program), 0, "{:?}", program.preds);
        assert!(format!("{:?}", program.preds).contains("Slot(0)"), "{:?}", program.preds);
        // numbering stays: the memo's place holds a constant
        assert_eq!(program.memos.len(), 1);
    }

    #[test]
    fn memos_inside_memos_are_put_back_all_the_way_down() {
        let mut program = compiled(&["(a + 17) * 2 <= b && c", "(a + 17) * 2 <= b || d == 1"], &|_| false);
        assert_eq!(program.memos.len(), 2, "{:?}", program.memos);
        assert_eq!(memo_reads(&mut program), 0, "{:?}", program.preds);
    }

    #[test]
    fn memos_read_twice_or_kept_stay_memos() {
        let mut twice = compiled(&["a + 17 <= b && c", "a + 17 <= b || d == 1", "a + 17 > 100"], &|_| false);
        assert_eq!(memo_reads(&mut twice), 2, "{:?} {:?}", twice.preds, twice.exprs);
        let mut kept = compiled(&["a + 17 <= b && c", "a + 17 <= b || d == 1"], &|m| m == 0);
        assert_eq!(memo_reads(&mut kept), 1, "{:?}", kept.preds);
        assert!(!matches!(kept.memos.first(), Some(Node::Const(_))), "{:?}", kept.memos);
    }
}
