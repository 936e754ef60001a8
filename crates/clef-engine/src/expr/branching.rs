//! Rule conditions as branching programs: the `&&`, `||` and `!` of a condition compiled away
//! into jumps between its tests.
//!
//! A condition such as `(a || b) && !c` is, to the evaluator, a walk down a tree: a call per
//! operator, a loop over its items, a dispatch per node. With thousands of rules that walk, not
//! the tests, is most of a decision. Compiled here, the same condition is a short run of
//! [`Step`]s in one array shared by all rules: each step answers one test (a predicate's bit,
//! or a test node of [`Program::atoms`]) and names where to go when it holds and when it does
//! not: another step or the outcome. `(a || b) && !c` is three steps: `a` (true → `c`,
//! false → `b`), `b` (true → `c`, false → fails), `c` (true → fails, false → holds). `!` costs
//! nothing: it swaps the two targets.
//!
//! A `c ? a : b` among them is a jump too: `c`, then `a` or `b` with the same two targets.
//!
//! The answers are the same as the tree's: tests run in the same order and only where the
//! tree's short-circuits would run them, a failing test fails the condition there (as `?`
//! does in the tree), and each test is judged with the operator that holds it (`&&`, `||`, `!`,
//! `?:`) so that an error names what the tree's would. The tree stays for explanations: its tests
//! become `Node::Atom`s that point at the same nodes.

use super::ir::{operand_slot, Node, Step, Target, Test, Within, FAILS, HOLDS, NO_PROGRAM, NO_SLOT};
use super::ops::UnOp;
use super::program::Program;

/// Compiles every condition of `program.exprs` made of `&&`, `||` and `!` into steps of
/// `program.steps`, its first step in `program.starts`; the others (a single test) keep
/// [`super::eval::eval_condition`]. Runs last: the tests move into `program.atoms`, where the
/// index, the predicates and the read plan no longer look.
pub(crate) fn compile(program: &mut Program) {
    let mut exprs = std::mem::take(&mut program.exprs);
    program.starts = Vec::with_capacity(exprs.len());
    for condition in &mut exprs {
        let start = if is_connective(condition) {
            let base = program.steps.len() as Target;
            let mut builder = Builder {
                atoms: &mut program.atoms,
                preds: &program.preds,
                base,
                steps: Vec::new(),
                labels: Vec::new(),
            };
            builder.emit(condition, None, Goto::Outcome(HOLDS), Goto::Outcome(FAILS));
            let steps = builder.finish();
            program.steps.extend(steps);
            base
        } else {
            NO_PROGRAM
        };
        program.starts.push(start);
    }
    program.exprs = exprs;
}

fn is_connective(node: &Node) -> bool {
    matches!(node, Node::And(_) | Node::Or(_) | Node::Unary(UnOp::Not, _))
}

/// A jump while it is being compiled: to a label bound later, or to an outcome.
#[derive(Debug, Clone, Copy)]
enum Goto {
    Label(u32),
    Outcome(Target),
}

/// One condition's steps while its labels are not all bound.
struct Builder<'p> {
    atoms: &'p mut Vec<Node>,
    preds: &'p [Node],
    /// where this condition's first step goes in `Program::steps`
    base: Target,
    steps: Vec<(Test, Goto, Goto)>,
    /// by label: the step it was bound to
    labels: Vec<Target>,
}

impl Builder<'_> {
    /// Emits `node`, whose truth sends evaluation to `if_true` or `if_false`; `within` is the
    /// operator holding it (`None` at the top, which is always a connective).
    fn emit(&mut self, node: &mut Node, within: Option<Within>, if_true: Goto, if_false: Goto) {
        let and = matches!(node, Node::And(_));
        match node {
            Node::And(items) | Node::Or(items) if !items.is_empty() => {
                let within = Some(if and { Within::And } else { Within::Or });
                let last = items.len() - 1;
                for (i, item) in items.iter_mut().enumerate() {
                    if i == last {
                        self.emit(item, within, if_true, if_false);
                        continue;
                    }
                    // the label is bound to the step after this item's
                    let next = self.label();
                    if and {
                        self.emit(item, within, Goto::Label(next), if_false);
                    } else {
                        self.emit(item, within, if_true, Goto::Label(next));
                    }
                    self.bind(next);
                }
            }
            Node::Unary(UnOp::Not, x) => self.emit(x, Some(Within::Not), if_false, if_true),
            // as the tree judges it: the condition with `?:`, then the branch it picks with
            // the operator around the whole
            Node::Ternary(c, a, b) if within.is_some() => {
                let (on_true, on_false) = (self.label(), self.label());
                self.emit(c, Some(Within::Choice), Goto::Label(on_true), Goto::Label(on_false));
                self.bind(on_true);
                self.emit(a, within, if_true, if_false);
                self.bind(on_false);
                self.emit(b, within, if_true, if_false);
            }
            Node::Pred(id) => {
                let slot = self.preds.get(*id as usize).map_or(NO_SLOT, operand_slot);
                self.steps.push((Test::Pred { id: *id, slot }, if_true, if_false))
            }
            leaf => {
                let atom = self.atoms.len() as u32;
                let slot = operand_slot(leaf);
                self.atoms.push(std::mem::replace(leaf, Node::Atom(atom)));
                // an empty `&&`/`||` (the parser makes none) is judged as the tree judges it
                let within = within.unwrap_or(Within::And);
                self.steps.push((Test::Atom { atom, within, slot }, if_true, if_false));
            }
        }
    }

    /// A new label, bound later by [`Builder::bind`].
    fn label(&mut self) -> u32 {
        self.labels.push(FAILS);
        self.labels.len() as u32 - 1
    }

    /// Binds `label` to the next step emitted.
    fn bind(&mut self, label: u32) {
        let next = self.base + self.steps.len() as Target;
        if let Some(at) = self.labels.get_mut(label as usize) {
            *at = next;
        }
    }

    /// The steps, every label replaced by the step it was bound to.
    fn finish(self) -> impl Iterator<Item = Step> {
        let labels = self.labels;
        let resolve = move |g: Goto| match g {
            Goto::Outcome(t) => t,
            Goto::Label(l) => labels.get(l as usize).copied().unwrap_or(FAILS),
        };
        self.steps.into_iter().map(move |(test, t, f)| Step { test, if_true: resolve(t), if_false: resolve(f) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::ir::NO_SLOT;
    use crate::expr::{compile::compile_program, parse_checked, Env};

    /// The steps of `src`, each as (test, if true, if false), targets as step numbers or
    /// "holds"/"fails"; tests name the atom's node kind, or the predicate.
    fn steps(src: &str) -> Vec<(String, String, String)> {
        let env = Env::default();
        let ast = parse_checked(src, &env, true).unwrap_or_else(|e| panic!("{src}: {e:?}"));
        let mut program =
            compile_program(&[&ast], &env.params, env.regex_size_limit).unwrap_or_else(|e| panic!("{e:?}"));
        compile(&mut program);
        let target = |t: Target| match t {
            HOLDS => "holds".to_string(),
            FAILS => "fails".to_string(),
            n => n.to_string(),
        };
        program
            .steps
            .iter()
            .map(|s| {
                let test = match s.test {
                    Test::Pred { id, .. } => format!("pred {id}"),
                    Test::Atom { atom, within, slot } => {
                        let node = format!("{:?}", program.atoms.get(atom as usize));
                        let in_node =
                            node.split("Slot(").nth(1).and_then(|r| r.split(')').next()).unwrap_or("?").to_string();
                        if slot != NO_SLOT {
                            assert_eq!(slot.to_string(), in_node, "the atom's slot is its field's: {node}");
                            format!("slot {slot} in {}", within.symbol())
                        } else {
                            format!("computed in {}", within.symbol())
                        }
                    }
                };
                (test, target(s.if_true), target(s.if_false))
            })
            .collect()
    }

    fn row(test: &str, t: &str, f: &str) -> (String, String, String) {
        (test.to_string(), t.to_string(), f.to_string())
    }

    #[test]
    fn a_choice_among_connectives_is_a_jump_to_the_branch_it_picks() {
        // the condition is judged with `?:`, each branch with the operator around the whole
        assert_eq!(
            steps("a == 1 && (vip ? b < 1000 : b < 100)"),
            vec![
                row("slot 0 in &&", "1", "fails"),
                row("slot 1 in ?:", "2", "3"),
                row("slot 2 in &&", "holds", "fails"),
                row("slot 2 in &&", "holds", "fails")
            ]
        );
        // `!` around it swaps both branches' targets; a connective in a branch keeps its own
        assert_eq!(
            steps("a == 1 || !(vip || x == 2 ? b < 1000 : b < 100 && c == 3)"),
            vec![
                row("slot 0 in ||", "holds", "1"),
                row("slot 1 in ||", "3", "2"),
                row("slot 2 in ||", "3", "4"),
                row("slot 3 in !", "fails", "holds"),
                row("slot 3 in &&", "5", "holds"),
                row("slot 4 in &&", "fails", "holds")
            ]
        );
        // a choice on its own is a single test, judged as before
        assert_eq!(steps("vip ? b < 1000 : b < 100"), vec![]);
    }

    #[test]
    fn connectives_become_jumps_and_not_swaps_them() {
        assert_eq!(
            steps("(a == 1 || b == 2) && !(c == 3)"),
            vec![
                row("slot 0 in ||", "2", "1"),
                row("slot 1 in ||", "2", "fails"),
                row("slot 2 in !", "fails", "holds")
            ]
        );
        assert_eq!(
            steps("!(a == 1 && b == 2) || c == 3"),
            vec![
                row("slot 0 in &&", "1", "holds"),
                row("slot 1 in &&", "2", "holds"),
                row("slot 2 in ||", "holds", "fails")
            ]
        );
    }

    #[test]
    fn field_tests_name_their_slot_and_computed_tests_do_not() {
        assert_eq!(
            steps("a in [\"x\", \"y\"] && !b && a + 1 > 2 && c < 5"),
            vec![
                row("slot 0 in &&", "1", "fails"),
                row("slot 1 in !", "fails", "2"),
                row("computed in &&", "3", "fails"),
                row("slot 2 in &&", "holds", "fails")
            ]
        );
    }

    #[test]
    fn a_single_test_has_no_program() {
        let env = Env::default();
        let ast = parse_checked("a == 1", &env, true).unwrap_or_else(|e| panic!("{e:?}"));
        let mut program =
            compile_program(&[&ast], &env.params, env.regex_size_limit).unwrap_or_else(|e| panic!("{e:?}"));
        compile(&mut program);
        assert_eq!((program.starts.as_slice(), program.steps.len()), (&[NO_PROGRAM][..], 0));
        assert!(matches!(program.exprs.first(), Some(Node::EqConst { .. })));
    }
}
