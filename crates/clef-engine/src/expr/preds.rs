//! Each distinct test a table repeats, answered once per decision.
//!
//! Tables that grow for years write the same tests in many rules: `account.seats + 2 <=
//! account.paid`, `lower(ua) contains "bot"`, `(risk.override ?? risk.score) < 0.4`, in other
//! combinations.
//! After the rule index is built, every comparison-level node (`==`, `<`, `in`, `contains`,
//! `startsWith`, `matches`, … with any operands) that occurs in two places or more of the
//! table's conditions becomes a `Node::Pred`: the node moves into `Program::preds`, and a
//! decision computes it the first time a rule reaches it and reads its answer afterwards from
//! two bitsets (known, true) and, for the rare failure, its error. A rule is then mostly a
//! combination of bits, and its nodes, touched once, stay out of the cache.
//!
//! That includes a field against a constant (`method == "PUT"`, `score < 0.4`, `kind in
//! [..]`), although the evaluator judges one in place in a few instructions: the node and its
//! constant (a string, a list) are memory a decision would read again at every rule repeating
//! the test, where a bit of the predicates' bitsets, a few hundred bytes for the whole table,
//! stays in the first-level cache. On the nested-path policy table (`benches/policy_workload.py
//! --shape nested`, field tests repeated across rules) it takes 30% off a decision at 500 and
//! at 5,000 rules (`clef bench`, alternated runs).
//!
//! The answers are the same: a comparison's outcome — a bool or an error — depends on its
//! operands only, not on where it stands (unlike `?:`, whose error names the operator around
//! it), and evaluation is pure, so computing it once gives what each place computing it would,
//! warnings included. Evaluation order is untouched: a test is computed only where a plain scan
//! computes it first.

use rustc_hash::FxHashMap;

use super::compile::visit_mut;
use super::ir::Node;
use super::program::Program;

/// Turns the tests that `program.exprs` make more than once into `Node::Pred`s.
pub(crate) fn intern(program: &mut Program) {
    let mut counts: FxHashMap<String, u32> = FxHashMap::default();
    for e in &mut program.exprs {
        visit_mut(e, &mut |n| {
            if worth_sharing(n) {
                *counts.entry(key(n)).or_default() += 1;
            }
        });
    }
    counts.retain(|_, n| *n >= 2);
    if counts.is_empty() {
        return;
    }
    let mut ids: FxHashMap<String, u32> = FxHashMap::default();
    let mut preds = std::mem::take(&mut program.preds);
    for e in &mut program.exprs {
        rewrite(e, &counts, &mut ids, &mut preds);
    }
    program.preds = preds;
}

/// Whether `node` is worth answering once: any test whose value is a bool or an error,
/// whatever surrounds it.
fn worth_sharing(node: &Node) -> bool {
    node.is_comparison()
}

/// The canonical text of a node: two nodes with the same text compute the same thing.
fn key(node: &Node) -> String {
    format!("{node:?}")
}

fn rewrite(node: &mut Node, counts: &FxHashMap<String, u32>, ids: &mut FxHashMap<String, u32>, preds: &mut Vec<Node>) {
    // the key of the node as written, before its own tests become predicates
    let k = worth_sharing(node).then(|| key(node)).filter(|k| counts.contains_key(k));
    node.for_each_child_mut(&mut |c| rewrite(c, counts, ids, preds));
    let Some(k) = k else { return };
    let id = match ids.get(&k) {
        Some(id) => *id,
        None => {
            let id = preds.len() as u32;
            preds.push(std::mem::replace(node, Node::Pred(id)));
            ids.insert(k, id);
            return;
        }
    };
    *node = Node::Pred(id);
}
