//! The rule index ("decision-tree augmented" first-match evaluation).
//!
//! **What it does.** Before any condition is evaluated, the input's fields are looked up in
//! tables built at load time, which give the set of rules that may still match; only those are
//! evaluated, in order. The decision is the one a top-to-bottom scan gives — the same rule, the
//! same action and the same warnings.
//!
//! **Columns.** A condition is read as an `||` of `&&`s: `(A && B) || (C && D)` has two
//! columns, `A && B && C` one, and `!(A && B)` two (`!A`, `!B`: a negation is pushed inwards for
//! this reading only; evaluation is untouched). A rule can be skipped when every one of its
//! columns is false without an error.
//!
//! **Fields and atoms.** A conjunct that tests one field against literals — `f == "x"`,
//! `f in [..]`, `f > 10`, `f != nil`, `!f`, `f`, `(f ?? 0) < 5`, `"key" in f`, and `&&`/`||`/`!`
//! of those — is *indexed*. A field is an input path (`user.tier`, `items[-1].price`,
//! `headers["x-api-key"]`), a sub-expression several rules share and the index computes once
//! (`len(items) * 10 + items_in_cart`, `session.risk_override ?? risk_score`), or the presence
//! of a key (`"x-debug" in headers`). Each field's values are cut into *atoms* — nil, true,
//! false, each literal string, "another string", each literal number and each open interval
//! between them, arrays, objects, a value that could not be read — within which every indexed
//! conjunct on the field has one fixed outcome: true, false, or an error. The outcomes are found
//! by running each conjunct through the real evaluator on one representative value per atom,
//! so the index cannot disagree with evaluation; where no representative exists (two floats with
//! nothing between them) the atom proves nothing.
//!
//! **Why skipping is safe.** In `a && b && c`, a false `c` makes the rule false without an
//! error only if `a` and `b` evaluate to bools without an error. So each column uses its indexed
//! conjuncts up to the first conjunct whose errors cannot be predicted; every conjunct before
//! the last one used must be *safe* on the input: an indexed one whose outcome on the input's
//! atom is not an error, or another one whose fields have the types that `expr::safety` says
//! let it evaluate to a bool without an error (`lower(content) contains "x"` needs a string).
//! Atoms therefore also carry a type class (nil, bool, small number, other number, string,
//! array, object, unreadable).
//!
//! **Pattern groups.** The regex and substring tests of one subject are answered by one literal
//! pass (`expr::patterns`): a test none of whose required literals occurs is false. That pass
//! is a field too: a conjunct of such tests (`content ~ "t\\.me/"`, `(content contains "x" ||
//! content ~ "y")`) is false without an error, on a string, unless one of its tests' literals
//! occurred, so the columns reading only absent literals are ruled out. On a subject that is
//! not a string every test fails, and every column reading the group is kept. A moderation
//! table of 500 regexes then evaluates the few rules whose literals the message holds.
//!
//! **Per decision.** For each field, the input's atom selects two bitsets over the columns:
//! `keep` (no indexed conjunct on the field is false) and `unsafe` (some conjunct that must be
//! safe is not). Candidates = (AND of the keeps) OR (OR of the unsafes) OR the columns nothing
//! indexes. The work is one lookup per field and a few word operations per 64 columns; it does
//! not grow with the number of conjuncts.

use std::cmp::Ordering;

use bumpalo::Bump;
use rustc_hash::FxHashMap;

use crate::expr::eval::{self, Ctx};
use crate::expr::ir::Node;
use crate::expr::ops::{self, BinOp, EvalError, UnOp};
use crate::expr::program::{Program, SlotValue};
use crate::expr::safety::{self, Classes, FieldRef, Requirements, Safety};
use crate::expr::value::{same_bytes, Array, Const, Object, Type, Value};

/// Upper bound on one field's bitsets, in bytes; a field needing more is not indexed.
const MAX_FIELD_BYTES: usize = 4 << 20;
/// At most this many shared tests (`"key" in f`, `f startsWith "x"`) are indexed: each is
/// computed for every decision.
const MAX_TEST_FIELDS: usize = 256;

/// What an index field reads.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Source {
    /// an input path
    Slot(u32),
    /// a shared sub-expression
    Memo(u32),
    /// a test of a field against a literal that several rules share, computed once per
    /// decision: `"key" in f`, `f contains "x"`, `f startsWith "x"`, `f endsWith "x"`
    Test(BinOp, FieldRef, Box<str>),
    /// the literal pass of a pattern group (the regex and substring tests of one subject):
    /// which of its tests may hold
    Group(u32),
}

/// Fixed atoms of slot and memo fields.
const NIL: usize = 0;
const TRUE: usize = 1;
const FALSE: usize = 2;
const OTHER_STRING: usize = 3;
const ARRAY: usize = 4;
const OBJECT: usize = 5;
const READ_ERROR: usize = 6;
const NAN: usize = 7;
const FIXED: usize = 8;

/// An object with one key (and a nil value): what `"key" in f` is tried on.
type MemberObject = [(Box<str>, Const); 1];

/// One indexed field: how to find the input's atom, and the two bitsets of each atom.
#[derive(Debug)]
struct FieldIndex {
    source: Source,
    strings: StringAtoms,
    numbers: Vec<Const>,
    /// the numbers as floats, when every one is exactly a float
    floats: Option<Vec<f64>>,
    /// per atom: the row of `keep` to AND, if it is not all ones
    keep_rows: Vec<u32>,
    keep: Vec<u64>,
    /// per atom: the row of `unsafe_bits` to OR, if it is not all zeros
    unsafe_rows: Vec<u32>,
    unsafe_bits: Vec<u64>,
}

/// A field's literal strings and their atoms. Most fields have a few: those are compared in
/// turn (lengths first, which tell most apart), cheaper than hashing the input's string.
#[derive(Debug)]
enum StringAtoms {
    Few(Vec<(Box<str>, u32)>),
    Many(FxHashMap<Box<str>, u32>),
}

/// Up to this many strings are compared in turn.
const FEW_STRINGS: usize = 8;

impl StringAtoms {
    fn new(strings: Vec<(Box<str>, u32)>) -> StringAtoms {
        if strings.len() <= FEW_STRINGS {
            StringAtoms::Few(strings)
        } else {
            StringAtoms::Many(strings.into_iter().collect())
        }
    }

    #[inline]
    fn get(&self, s: &str) -> Option<u32> {
        match self {
            StringAtoms::Few(all) => all.iter().find(|(k, _)| same_bytes(k.as_bytes(), s.as_bytes())).map(|(_, a)| *a),
            StringAtoms::Many(map) => map.get(s).copied(),
        }
    }

    fn len(&self) -> usize {
        match self {
            StringAtoms::Few(all) => all.len(),
            StringAtoms::Many(map) => map.len(),
        }
    }
}

const NO_ROW: u32 = u32::MAX;
/// Integers up to this magnitude are exactly floats.
const EXACT: u64 = 1 << 53;

/// A pattern group read by the index: its literal pass proves tests false.
///
/// A conjunct such as `content ~ "t\\.me/"` or `(content contains "x" || content ~ "y")`
/// is false without an error, on a string, when none of its tests' required literals occurred
/// (see `expr::patterns`). One pass over the subject says which literals did; each test none of
/// whose literals occurred rules out the columns that read it. A column may read several tests
/// of one group in different conjuncts (`content contains "x" && content ~ "y"`), each false
/// on its own: the `n`-th such conjunct of every column is level `n`, and a column is kept only
/// if every level keeps it.
#[derive(Debug)]
struct GroupIndex {
    group: u32,
    /// the group's subject (the tests' operand)
    subject: FieldRef,
    levels: Vec<GroupLevel>,
    /// every column some level can rule out: all kept when the subject is not a string
    used: Vec<u64>,
}

#[derive(Debug)]
struct GroupLevel {
    /// the columns whose conjunct at this level the literal pass can prove false
    ruled: Vec<u64>,
    /// by test of the group: the columns whose conjunct at this level holds only if it may
    columns_of: Vec<Vec<u32>>,
}

/// The index of one table's rules.
#[derive(Debug)]
pub struct RuleIndex {
    words: usize,
    /// the rule of each column; a rule's columns are consecutive
    column_rule: Vec<u32>,
    /// columns that nothing can rule out
    always: Vec<u64>,
    fields: Vec<FieldIndex>,
    groups: Vec<GroupIndex>,
}

/// The rules an input leaves possible, as a bitset over columns.
pub struct Candidates {
    bits: Words,
}

impl Candidates {
    /// Room for the candidates of `index`, filled by [`RuleIndex::select`]: made by the caller,
    /// in place, so that a decision does not copy a bitset around.
    pub fn for_index(index: &RuleIndex) -> Candidates {
        Candidates { bits: Words::filled(index.words, u64::MAX) }
    }

    /// How many columns are left possible: no fewer than the rules a decision will try.
    pub fn count(&self) -> usize {
        self.bits.get().iter().map(|w| w.count_ones() as usize).sum()
    }
}

/// A bitset's words: on the stack for tables of up to 1024 columns.
enum Words {
    Inline([u64; INLINE_WORDS], usize),
    Heap(Vec<u64>),
}

const INLINE_WORDS: usize = 16;

impl Words {
    fn filled(n: usize, v: u64) -> Words {
        if n <= INLINE_WORDS {
            Words::Inline([v; INLINE_WORDS], n)
        } else {
            Words::Heap(vec![v; n])
        }
    }

    fn get(&self) -> &[u64] {
        match self {
            Words::Inline(w, n) => w.split_at((*n).min(INLINE_WORDS)).0,
            Words::Heap(v) => v,
        }
    }

    fn get_mut(&mut self) -> &mut [u64] {
        match self {
            Words::Inline(w, n) => w.split_at_mut((*n).min(INLINE_WORDS)).0,
            Words::Heap(v) => v,
        }
    }
}

/// One conjunct of a column, with how its value counts.
struct Conjunct<'n> {
    node: &'n Node,
    /// read through a `!` pushed inwards
    negate: bool,
    /// the whole condition: `nil` does not match, silently
    whole: bool,
}

/// Outcome of a conjunct on an atom.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Outcome {
    True,
    False,
    Error,
    /// no representative: nothing is known
    Unknown,
}

/// The condition as columns (an `||` of `&&`s of conjuncts).
fn columns(cond: &Node) -> Vec<Vec<Conjunct<'_>>> {
    fn and_items<'n>(node: &'n Node, negate: bool, out: &mut Vec<Conjunct<'n>>) {
        match node {
            Node::And(items) if !negate => items.iter().for_each(|i| and_items(i, false, out)),
            Node::Or(items) if negate => items.iter().for_each(|i| and_items(i, true, out)),
            _ => out.push(Conjunct { node, negate, whole: false }),
        }
    }
    fn or_items<'n>(node: &'n Node, negate: bool, out: &mut Vec<Vec<Conjunct<'n>>>) {
        match node {
            Node::Or(items) if !negate => items.iter().for_each(|i| or_items(i, false, out)),
            Node::And(items) if negate => items.iter().for_each(|i| or_items(i, true, out)),
            _ => {
                let mut column = Vec::new();
                and_items(node, negate, &mut column);
                out.push(column);
            }
        }
    }
    match cond {
        Node::Or(_) | Node::And(_) => {
            let mut out = Vec::new();
            or_items(cond, false, &mut out);
            out
        }
        Node::Unary(UnOp::Not, x) if matches!(**x, Node::Or(_) | Node::And(_)) => {
            let mut out = Vec::new();
            or_items(x, true, &mut out);
            out
        }
        _ => vec![vec![Conjunct { node: cond, negate: false, whole: true }]],
    }
}

/// The field an indexed conjunct depends on: its outcome is fixed within each atom of it.
fn term_source(node: &Node) -> Option<Source> {
    fn scalar(c: &Const) -> bool {
        !matches!(c, Const::Array(_) | Const::Object(_))
    }
    fn operand(n: &Node) -> Option<Source> {
        match n {
            Node::Slot(s) => Some(Source::Slot(*s)),
            Node::Memo(m) => Some(Source::Memo(*m)),
            // `f ?? c` is `f` except on nil, which is one atom
            Node::Chain(first, rest) => match (&**first, rest.as_slice()) {
                (Node::Slot(s), [(BinOp::Coalesce, Node::Const(_))]) => Some(Source::Slot(*s)),
                (Node::Memo(m), [(BinOp::Coalesce, Node::Const(_))]) => Some(Source::Memo(*m)),
                _ => None,
            },
            _ => None,
        }
    }
    match node {
        Node::Slot(_) | Node::Memo(_) => operand(node),
        Node::EqConst { operand: x, value, .. } if scalar(value) => operand(x),
        Node::CmpConst { operand: x, value: Const::Int(_) | Const::Float(_), .. } => operand(x),
        Node::InSet { operand: x, set, .. } if set.items.iter().all(scalar) => operand(x),
        Node::Compare(BinOp::In | BinOp::NotIn, key, container) => match (&**key, field_ref(container)) {
            (Node::Const(Const::Str(k)), Some(f)) => Some(Source::Test(BinOp::In, f, k.clone())),
            _ => None,
        },
        Node::StrTest { operand: x, op, needle, .. } => Some(Source::Test(*op, field_ref(x)?, needle.clone())),
        Node::Unary(UnOp::Not, x) => term_source(x),
        Node::And(items) | Node::Or(items) => {
            let (first, rest) = items.split_first()?;
            let first = term_source(first)?;
            rest.iter().all(|i| term_source(i).as_ref() == Some(&first)).then_some(first)
        }
        _ => None,
    }
}

/// The field of one conjunct as the index reads it: a pattern group (when the literal pass can
/// prove the conjunct false), or what [`term_source`] finds.
fn conjunct_source(c: &Conjunct<'_>, program: &Program) -> Option<Source> {
    match pattern_tests(c.node, c.negate, program) {
        Some((group, _)) => Some(Source::Group(group)),
        None => term_source(c.node),
    }
}

/// The group and the tests of it that `node` (read through `negate` negations) reads, when it
/// is false — without an error, on a string subject — unless one of those tests holds: a test
/// with required literals (`matches`, `~`, `contains`, or `!~` under a negation), an `||` of
/// such tests, an `&&` of tests of the group with one such among them.
fn pattern_tests(node: &Node, negate: bool, program: &Program) -> Option<(u32, Vec<u32>)> {
    match node {
        Node::PatternHit { group, index, op, .. } => {
            let positive = (*op != BinOp::NotMatches) != negate;
            let prefiltered = program.groups.get(*group as usize).is_some_and(|g| g.prefiltered(*index as usize));
            (positive && prefiltered).then(|| (*group, vec![*index]))
        }
        Node::Unary(UnOp::Not, x) => pattern_tests(x, !negate, program),
        // false only when every item is
        Node::Or(items) | Node::And(items) if matches!(node, Node::Or(_)) != negate => {
            let mut found: Option<(u32, Vec<u32>)> = None;
            for item in items {
                let (group, tests) = pattern_tests(item, negate, program)?;
                match &mut found {
                    Some((g, all)) if *g == group => all.extend(tests),
                    Some(_) => return None,
                    None => found = Some((group, tests)),
                }
            }
            found
        }
        // false when any item is, provided none before it can fail: all are tests of the group
        Node::Or(items) | Node::And(items) => {
            let (group, tests) = items.iter().find_map(|i| pattern_tests(i, negate, program))?;
            items.iter().all(|i| only_tests_of(i, group)).then_some((group, tests))
        }
        _ => None,
    }
}

/// Whether `node` is made of tests of pattern group `group` alone (with `!`, `&&`, `||`):
/// on a string subject it never fails.
fn only_tests_of(node: &Node, group: u32) -> bool {
    match node {
        Node::PatternHit { group: g, .. } => *g == group,
        Node::Unary(UnOp::Not, x) => only_tests_of(x, group),
        Node::And(items) | Node::Or(items) => items.iter().all(|i| only_tests_of(i, group)),
        _ => false,
    }
}

/// The subject of the pattern tests in `node`.
fn pattern_subject(node: &Node) -> Option<FieldRef> {
    match node {
        Node::PatternHit { operand, .. } => field_ref(operand),
        Node::Unary(_, x) => pattern_subject(x),
        Node::And(items) | Node::Or(items) => items.iter().find_map(pattern_subject),
        _ => None,
    }
}

fn field_ref(n: &Node) -> Option<FieldRef> {
    match n {
        Node::Slot(s) => Some(FieldRef::Slot(*s)),
        Node::Memo(m) => Some(FieldRef::Memo(*m)),
        _ => None,
    }
}

/// Literals an indexed conjunct compares its field with.
fn literals<'n>(node: &'n Node, out: &mut Vec<&'n Const>) {
    match node {
        Node::EqConst { value, .. } | Node::CmpConst { value, .. } => out.push(value),
        Node::InSet { set, .. } => out.extend(set.items.iter()),
        Node::Unary(_, x) => literals(x, out),
        Node::And(items) | Node::Or(items) => items.iter().for_each(|i| literals(i, out)),
        _ => {}
    }
}

/// How a column uses its conjuncts, before the fields are built.
struct ColumnPlan<'n> {
    /// indexed conjuncts: (field, conjunct, must be safe: it comes before the last one used)
    indexed: Vec<(usize, Conjunct<'n>, bool)>,
    /// what the other conjuncts before the last indexed one need
    requirements: Requirements,
    /// nothing can rule this column out
    always: bool,
}

/// A field's literals and the atoms they make.
struct AtomTable<'a> {
    strings: Vec<&'a str>,
    numbers: Vec<Const>,
    /// representative value of each atom (`None`: nothing represents it)
    reps: Vec<Option<SlotValue<'a>>>,
    /// type class of each atom (0: unreadable)
    classes: Vec<Classes>,
    number_base: usize,
}

impl RuleIndex {
    /// Builds the index for `program.exprs` (one condition per rule).
    // Load time: every index is a position in a vector sized here (columns, atoms, words) or
    // a key this function inserted.
    #[allow(clippy::indexing_slicing)]
    pub fn build(program: &Program) -> RuleIndex {
        let all_columns: Vec<Vec<Vec<Conjunct<'_>>>> = program.exprs.iter().map(columns).collect();
        let columns_count: usize = all_columns.iter().map(Vec::len).sum();
        let words = columns_count.div_ceil(64).max(1);

        // Fields of indexed conjuncts, with their literals.
        let mut sources: Vec<Source> = Vec::new();
        let mut lits: FxHashMap<Source, Vec<&Const>> = FxHashMap::default();
        let mut uses: FxHashMap<Source, usize> = FxHashMap::default();
        for col in all_columns.iter().flatten() {
            for c in col {
                if let Some(src) = conjunct_source(c, program) {
                    *uses.entry(src.clone()).or_default() += 1;
                    let entry = lits.entry(src.clone()).or_insert_with(|| {
                        sources.push(src);
                        Vec::new()
                    });
                    literals(c.node, entry);
                }
            }
        }
        // Keep what fits: memory per field, and a bounded number of shared tests (each is
        // computed for every decision; a test only one rule has is cheaper left in the rule).
        let mut tests = 0;
        sources.retain(|src| {
            // a group's index takes a few bytes per column that reads it
            if matches!(src, Source::Group(_)) {
                return true;
            }
            if matches!(src, Source::Test(..)) {
                if uses[src] < 2 {
                    return false;
                }
                tests += 1;
                return tests <= MAX_TEST_FIELDS;
            }
            // Atoms come from distinct literals: 10,000 rules testing `tier == "t3"` among ten
            // tiers make a dozen atoms, not 20,000.
            let atoms = FIXED + 2 * distinct_literals(&lits[src]) + 8;
            atoms.saturating_mul(words).saturating_mul(8) <= MAX_FIELD_BYTES
        });
        let field_of: FxHashMap<Source, usize> = sources.iter().cloned().enumerate().map(|(i, s)| (s, i)).collect();
        let memo_fields: Vec<u32> = sources
            .iter()
            .filter_map(|s| match s {
                Source::Memo(m) => Some(*m),
                _ => None,
            })
            .collect();
        let is_field = |m: u32| memo_fields.contains(&m);
        let safety = Safety::new(program, &is_field);

        // Each column: which conjuncts it uses, and what must be safe.
        let mut plans: Vec<ColumnPlan<'_>> = Vec::with_capacity(columns_count);
        let mut column_rule = Vec::with_capacity(columns_count);
        for (rule, cols) in all_columns.into_iter().enumerate() {
            for col in cols {
                column_rule.push(rule as u32);
                plans.push(plan_column(col, program, &field_of, &safety));
            }
        }

        // Fields that only requirements name get atoms too (their type is what matters).
        let mut in_requirements: Vec<Source> = Vec::new();
        for plan in &plans {
            for (f, _) in &plan.requirements {
                let src = match f {
                    FieldRef::Slot(s) => Source::Slot(*s),
                    FieldRef::Memo(m) => Source::Memo(*m),
                };
                if !in_requirements.contains(&src) {
                    in_requirements.push(src);
                }
            }
        }
        for src in &in_requirements {
            if !sources.contains(src) {
                sources.push(src.clone());
            }
        }
        let field_of: FxHashMap<Source, usize> = sources.iter().cloned().enumerate().map(|(i, s)| (s, i)).collect();

        let arena = Bump::new();
        // `"key" in f` is tried on an object with the key, one without it, and a number
        let member_objects: Vec<(Source, MemberObject)> = sources
            .iter()
            .filter_map(|s| match s {
                Source::Test(BinOp::In, _, key) => Some((s.clone(), [(key.clone(), Const::Nil)])),
                _ => None,
            })
            .collect();
        let mut always = vec![0u64; words];
        for (c, plan) in plans.iter().enumerate() {
            if plan.always {
                always[c / 64] |= 1 << (c % 64);
            }
        }
        let empty: Vec<&Const> = Vec::new();
        let mut fields = Vec::new();
        let mut groups = Vec::new();
        for (id, src) in sources.iter().enumerate() {
            let table = match src {
                Source::Group(g) => {
                    groups.extend(build_group(program, *g, id, &plans, words));
                    continue;
                }
                Source::Test(op, _, literal) => {
                    let member = member_objects.iter().find(|(s, _)| s == src).map(|(_, o)| &o[..]);
                    test_atoms(*op, literal, member)
                }
                _ => atom_table(lits.get(src).unwrap_or(&empty), in_requirements.contains(src), &arena),
            };
            // A field that rules nothing out and finds nothing unsafe changes no candidate.
            if let Some(f) = build_field(program, src, id, &table, &plans, &field_of, words) {
                fields.push(f);
            }
        }
        RuleIndex { words, column_rule, always, fields, groups }
    }

    /// Number of fields the index uses (pattern groups included).
    pub fn indexed_fields(&self) -> usize {
        self.fields.iter().filter(|f| !f.keep.is_empty()).count() + self.groups.len()
    }

    /// Whether the index reads memo `m` (as a field, the field of a shared test, or a pattern
    /// group's subject): such a memo must stay a memo, computed once for the index and the rules.
    pub fn reads_memo(&self, m: u32) -> bool {
        let memo = |f: &FieldRef| matches!(f, FieldRef::Memo(x) if *x == m);
        self.fields.iter().any(|f| match &f.source {
            Source::Memo(x) => *x == m,
            Source::Test(_, field, _) => memo(field),
            Source::Slot(_) | Source::Group(_) => false,
        }) || self.groups.iter().any(|g| memo(&g.subject))
    }

    /// Looks up the input's atoms: the columns (hence rules) still possible, into `candidates`
    /// (made by [`Candidates::for_index`]). Shared sub-expressions the index reads are computed
    /// (once) into `cx`.
    pub fn select(&self, cx: &mut Ctx<'_>, candidates: &mut Candidates) {
        let mut extra = Words::filled(self.words, 0);
        {
            let (keep, extra) = (candidates.bits.get_mut(), extra.get_mut());
            keep.iter_mut().for_each(|k| *k = u64::MAX);
            for f in &self.fields {
                let atom = f.atom(cx);
                let row = f.keep_rows.get(atom).copied().unwrap_or(NO_ROW);
                if row != NO_ROW {
                    let start = row as usize * self.words;
                    if let Some(bits) = f.keep.get(start..start + self.words) {
                        keep.iter_mut().zip(bits).for_each(|(k, b)| *k &= b);
                    }
                }
                let row = f.unsafe_rows.get(atom).copied().unwrap_or(NO_ROW);
                if row != NO_ROW {
                    let start = row as usize * self.words;
                    if let Some(bits) = f.unsafe_bits.get(start..start + self.words) {
                        extra.iter_mut().zip(bits).for_each(|(e, b)| *e |= b);
                    }
                }
            }
            for g in &self.groups {
                g.select(cx, keep, extra, self.words);
            }
            for ((k, e), a) in keep.iter_mut().zip(extra.iter()).zip(&self.always) {
                *k |= e | a;
            }
        }
    }

    /// Calls `visit` with each rule that may match, in rule order, among those set in
    /// `enabled`, until it returns `true`.
    pub fn for_each(&self, candidates: &Candidates, enabled: &[u64], mut visit: impl FnMut(usize) -> bool) {
        let mut last = usize::MAX;
        for (w, &word) in candidates.bits.get().iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let c = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let Some(&r) = self.column_rule.get(c) else { return };
                let r = r as usize;
                if r == last {
                    continue;
                }
                last = r;
                if enabled.get(r / 64).is_some_and(|e| e & (1 << (r % 64)) != 0) && visit(r) {
                    return;
                }
            }
        }
    }
}

fn source_of(f: FieldRef) -> Source {
    match f {
        FieldRef::Slot(s) => Source::Slot(s),
        FieldRef::Memo(m) => Source::Memo(m),
    }
}

// Load time: every index is a position in a vector sized here (columns, atoms, words) or
// a key this function inserted.
#[allow(clippy::indexing_slicing)]
fn plan_column<'n>(
    col: Vec<Conjunct<'n>>,
    program: &Program,
    field_of: &FxHashMap<Source, usize>,
    safety: &Safety<'_>,
) -> ColumnPlan<'n> {
    enum Kind {
        Indexed(usize),
        Other(Requirements),
        Opaque,
    }
    let kinds: Vec<Kind> = col
        .iter()
        .map(|c| match conjunct_source(c, program).and_then(|s| field_of.get(&s).copied()) {
            Some(f) => Kind::Indexed(f),
            None => match safety.bool_requirements(c.node) {
                Some(req) => Kind::Other(req),
                None => Kind::Opaque,
            },
        })
        .collect();
    let cut = kinds.iter().position(|k| matches!(k, Kind::Opaque)).unwrap_or(kinds.len());
    let last = kinds[..cut].iter().rposition(|k| matches!(k, Kind::Indexed(_)));
    let mut plan = ColumnPlan { indexed: Vec::new(), requirements: Vec::new(), always: false };
    let Some(last) = last else {
        plan.always = true;
        return plan;
    };
    for (i, (kind, c)) in kinds.into_iter().zip(col).enumerate().take(last + 1) {
        match kind {
            Kind::Indexed(f) => plan.indexed.push((f, c, i < last)),
            Kind::Other(req) => {
                if safety::merge(&mut plan.requirements, &req).is_none() {
                    // never safe: nothing after it can rule the column out
                    plan.always = true;
                    plan.indexed.clear();
                    plan.requirements.clear();
                    return plan;
                }
            }
            Kind::Opaque => {}
        }
    }
    plan
}

/// The atoms of a field: fixed ones, one per literal string, and the numbers and the
/// intervals between them. `by_class` adds the bounds of small numbers, so that each atom has
/// one type class.
// Load time: every index is a position in a vector sized here (columns, atoms, words) or
// a key this function inserted.
#[allow(clippy::indexing_slicing)]
fn atom_table<'a>(lits: &[&Const], by_class: bool, arena: &'a Bump) -> AtomTable<'a> {
    let mut strings: Vec<&'a str> = Vec::new();
    let mut numbers: Vec<Const> = Vec::new();
    for c in lits {
        match c {
            Const::Str(s) => strings.push(arena.alloc_str(s)),
            Const::Float(f) if f.is_nan() => {}
            Const::Int(_) | Const::Float(_) => numbers.push((*c).clone()),
            _ => {}
        }
    }
    if by_class {
        numbers.push(Const::Float(-safety::SMALL_LIMIT));
        numbers.push(Const::Float(safety::SMALL_LIMIT));
    }
    strings.sort_unstable();
    strings.dedup();
    let cmp = |a: &Const, b: &Const| ops::compare_numbers(&Value::from_const(a), &Value::from_const(b));
    numbers.sort_by(|a, b| cmp(a, b).unwrap_or(Ordering::Equal));
    numbers.dedup_by(|a, b| cmp(a, b) == Some(Ordering::Equal));

    let other = unused_string(&strings, arena);
    let read_error = Err(EvalError::NotIndexable { ty: Type::Int });
    let mut reps: Vec<Option<SlotValue<'a>>> = vec![
        Some(Ok(Value::Nil)),
        Some(Ok(Value::Bool(true))),
        Some(Ok(Value::Bool(false))),
        Some(Ok(Value::Str(other))),
        Some(Ok(Value::Array(Array::Const(&[])))),
        Some(Ok(Value::Object(Object::Const(&[])))),
        Some(read_error),
        Some(Ok(Value::Float(f64::NAN))),
    ];
    let mut classes: Vec<Classes> =
        vec![safety::NIL, safety::BOOL, safety::BOOL, safety::STR, safety::ARRAY, safety::OBJECT, 0, safety::BIG];
    for s in &strings {
        reps.push(Some(Ok(Value::Str(s))));
        classes.push(safety::STR);
    }
    let number_base = reps.len();
    let values: Vec<f64> = numbers.iter().map(as_f64).collect();
    let small = |lo: Option<f64>, hi: Option<f64>| match (lo, hi) {
        (Some(l), Some(h)) if l >= -safety::SMALL_LIMIT && h <= safety::SMALL_LIMIT => safety::SMALL,
        _ => safety::BIG,
    };
    for (i, n) in numbers.iter().enumerate() {
        let below = if i == 0 { None } else { Some(&numbers[i - 1]) };
        reps.push(between(below, Some(n)).map(Ok));
        classes.push(small(if i == 0 { None } else { Some(values[i - 1]) }, Some(values[i])));
        reps.push(Some(Ok(Value::from_const(arena.alloc(n.clone())))));
        classes.push(safety::number_class(values[i]));
    }
    reps.push(between(numbers.last(), None).map(Ok));
    classes.push(small(values.last().copied(), None));
    AtomTable { strings, numbers, reps, classes, number_base }
}

/// The atoms of a shared test: it holds, it does not, it fails. Representatives are values of
/// the tested field: for `"key" in f` an object with the key, one without, and a number; for
/// `f startsWith "x"` (and `contains`, `endsWith`) `"x"`, `""` and a number.
fn test_atoms<'a>(op: BinOp, literal: &'a str, with_key: Option<&'a [(Box<str>, Const)]>) -> AtomTable<'a> {
    let reps = match (op, with_key) {
        (BinOp::In, Some(with_key)) => vec![
            Some(Ok(Value::Object(Object::Const(with_key)))),
            Some(Ok(Value::Object(Object::Const(&[])))),
            Some(Ok(Value::Int(0))),
        ],
        // every string contains, starts and ends with ""
        _ => vec![
            Some(Ok(Value::Str(literal))),
            (!literal.is_empty()).then_some(Ok(Value::Str(""))),
            Some(Ok(Value::Int(0))),
        ],
    };
    AtomTable {
        strings: Vec::new(),
        numbers: Vec::new(),
        reps,
        classes: vec![safety::BOOL, safety::BOOL, 0],
        number_base: 3,
    }
}

/// How many different literals `lits` holds (numbers by their value as floats, which can only
/// count two equal numbers twice, never two different ones once): the atoms they make.
fn distinct_literals(lits: &[&Const]) -> usize {
    let mut strings: rustc_hash::FxHashSet<&str> = Default::default();
    let mut numbers: rustc_hash::FxHashSet<u64> = Default::default();
    for c in lits {
        match c {
            Const::Str(s) => {
                strings.insert(s);
            }
            Const::Int(_) | Const::Float(_) => {
                numbers.insert(as_f64(c).to_bits());
            }
            _ => {}
        }
    }
    strings.len() + numbers.len()
}

fn as_f64(c: &Const) -> f64 {
    match c {
        Const::Int(i) => *i as f64,
        Const::Float(f) => *f,
        _ => 0.0,
    }
}

/// The outcome of one conjunct on a representative.
fn outcome<'a>(c: &Conjunct<'a>, cx: &mut Ctx<'a>) -> Outcome {
    match eval::eval(c.node, cx) {
        Ok(Value::Bool(b)) if b != c.negate => Outcome::True,
        Ok(Value::Bool(_)) => Outcome::False,
        Ok(Value::Nil) if c.whole => Outcome::False,
        _ => Outcome::Error,
    }
}

// Load time: every index is a position in a vector sized here (columns, atoms, words) or
// a key this function inserted.
#[allow(clippy::indexing_slicing)]
fn build_field(
    program: &Program,
    src: &Source,
    id: usize,
    table: &AtomTable<'_>,
    plans: &[ColumnPlan<'_>],
    field_of: &FxHashMap<Source, usize>,
    words: usize,
) -> Option<FieldIndex> {
    let atoms = table.reps.len();
    let terms: Vec<(usize, &Conjunct<'_>, bool)> = plans
        .iter()
        .enumerate()
        .flat_map(|(c, plan)| {
            plan.indexed
                .iter()
                .filter(|(f, _, _)| *f == id)
                .map(move |(_, conj, must_be_safe)| (c, conj, *must_be_safe))
        })
        .collect();
    let required: Vec<(usize, Classes)> = plans
        .iter()
        .enumerate()
        .flat_map(|(c, plan)| {
            plan.requirements
                .iter()
                .filter(|(f, _)| field_of.get(&source_of(*f)) == Some(&id))
                .map(move |(_, classes)| (c, *classes))
        })
        .collect();
    if terms.is_empty() && required.is_empty() {
        return None;
    }
    let mut keep = vec![u64::MAX; if terms.is_empty() { 0 } else { atoms * words }];
    let mut unsafe_bits = vec![0u64; atoms * words];
    let arena = Bump::new();
    for (atom, rep) in table.reps.iter().enumerate() {
        let u = &mut unsafe_bits[atom * words..(atom + 1) * words];
        for &(c, classes) in &required {
            if table.classes[atom] & classes == 0 {
                u[c / 64] |= 1 << (c % 64);
            }
        }
        if terms.is_empty() {
            continue;
        }
        let mut cx = Ctx::new(program, &arena);
        match (src, rep) {
            (Source::Slot(s) | Source::Test(_, FieldRef::Slot(s), _), Some(v)) => {
                if let Some(slot) = cx.slots.get_mut(*s as usize) {
                    *slot = *v;
                }
            }
            (Source::Memo(m) | Source::Test(_, FieldRef::Memo(m), _), Some(v)) => cx.set_memo(*m, *v),
            (Source::Group(_), _) | (_, None) => {}
        }
        for &(c, conj, must_be_safe) in &terms {
            let o = if rep.is_some() { outcome(conj, &mut cx) } else { Outcome::Unknown };
            let bit = 1u64 << (c % 64);
            match o {
                Outcome::True => {}
                Outcome::False => keep[atom * words + c / 64] &= !bit,
                Outcome::Error if must_be_safe => u[c / 64] |= bit,
                Outcome::Error => {}
                Outcome::Unknown => u[c / 64] |= bit,
            }
        }
    }
    // Rows: only those that change anything are kept.
    let mut keep_rows = vec![NO_ROW; atoms];
    let mut keep_out = Vec::new();
    let mut unsafe_rows = vec![NO_ROW; atoms];
    let mut unsafe_out = Vec::new();
    let columns = plans.len();
    for atom in 0..atoms {
        if !keep.is_empty() {
            let row = &mut keep[atom * words..(atom + 1) * words];
            // bits past the last column stay set: they never name a rule
            if row.iter().enumerate().any(|(w, b)| *b != u64::MAX && w * 64 < columns) {
                keep_rows[atom] = (keep_out.len() / words) as u32;
                keep_out.extend_from_slice(row);
            }
        }
        let row = &unsafe_bits[atom * words..(atom + 1) * words];
        if row.iter().any(|b| *b != 0) {
            unsafe_rows[atom] = (unsafe_out.len() / words) as u32;
            unsafe_out.extend_from_slice(row);
        }
    }
    if keep_out.is_empty() && unsafe_out.is_empty() {
        return None;
    }
    let strings = StringAtoms::new(
        table.strings.iter().enumerate().map(|(i, s)| (Box::<str>::from(*s), (FIXED + i) as u32)).collect(),
    );
    debug_assert!(matches!(src, Source::Test(..)) || table.number_base == FIXED + table.strings.len());
    let floats = table
        .numbers
        .iter()
        .map(|c| match c {
            Const::Float(f) => Some(*f),
            Const::Int(i) if i.unsigned_abs() <= EXACT => Some(*i as f64),
            _ => None,
        })
        .collect();
    Some(FieldIndex {
        source: src.clone(),
        strings,
        floats,
        numbers: table.numbers.clone(),
        keep_rows,
        keep: keep_out,
        unsafe_rows,
        unsafe_bits: unsafe_out,
    })
}

impl FieldIndex {
    /// The input's atom for this field.
    fn atom(&self, cx: &mut Ctx<'_>) -> usize {
        let v = match &self.source {
            Source::Slot(s) => read(cx, FieldRef::Slot(*s)),
            Source::Memo(m) => read(cx, FieldRef::Memo(*m)),
            // not a field of atoms
            Source::Group(_) => return READ_ERROR,
            Source::Test(op, field, literal) => {
                let v = read(cx, *field);
                let held = v.and_then(|v| match op {
                    BinOp::In => ops::contains_member(&Value::Str(literal), &v),
                    _ => ops::string_test(*op, &v, &Value::Str(literal)),
                });
                return match held {
                    Ok(true) => 0,
                    Ok(false) => 1,
                    Err(_) => 2,
                };
            }
        };
        self.classify(v)
    }

    fn classify(&self, v: SlotValue<'_>) -> usize {
        match v {
            Err(_) => READ_ERROR,
            Ok(Value::Nil) => NIL,
            Ok(Value::Bool(true)) => TRUE,
            Ok(Value::Bool(false)) => FALSE,
            Ok(Value::Str(s)) => self.strings.get(s).map_or(OTHER_STRING, |a| a as usize),
            Ok(Value::Array(_)) => ARRAY,
            Ok(Value::Object(_)) => OBJECT,
            Ok(n @ (Value::Int(_) | Value::Float(_))) => {
                let x = match n {
                    Value::Float(f) if f.is_nan() => return NAN,
                    Value::Float(f) => Some(f),
                    Value::Int(i) if i.unsigned_abs() <= EXACT => Some(i as f64),
                    _ => None,
                };
                // floats compare exactly: when the literals are exact floats too, compare as floats
                if let (Some(x), Some(floats)) = (x, &self.floats) {
                    let p = floats.partition_point(|t| *t < x);
                    let exact = floats.get(p).is_some_and(|t| *t == x);
                    return FIXED + self.strings.len() + 2 * p + usize::from(exact);
                }
                let p = self
                    .numbers
                    .partition_point(|t| ops::compare_numbers(&Value::from_const(t), &n) == Some(Ordering::Less));
                let exact = self
                    .numbers
                    .get(p)
                    .is_some_and(|t| ops::compare_numbers(&Value::from_const(t), &n) == Some(Ordering::Equal));
                FIXED + self.strings.len() + 2 * p + usize::from(exact)
            }
        }
    }
}

/// The value of a field for this decision (a memo is computed once).
fn read<'a>(cx: &mut Ctx<'a>, field: FieldRef) -> SlotValue<'a> {
    match field {
        FieldRef::Slot(s) => cx.slots.get(s as usize).copied().unwrap_or(Ok(Value::Nil)),
        FieldRef::Memo(m) => cx.memo(m),
    }
}

impl GroupIndex {
    /// ANDs into `keep` what the literal pass rules out; on a subject that is not a string
    /// (where the tests fail), every column that reads the group goes into `extra`.
    fn select(&self, cx: &mut Ctx<'_>, keep: &mut [u64], extra: &mut [u64], words: usize) {
        let candidates = match read(cx, self.subject) {
            Ok(Value::Str(s)) => cx.group_candidates(self.group, s),
            _ => None,
        };
        let Some(candidates) = candidates else {
            extra.iter_mut().zip(&self.used).for_each(|(e, u)| *e |= u);
            return;
        };
        let mut possible = Words::filled(words, 0);
        let possible = possible.get_mut();
        for level in &self.levels {
            possible.iter_mut().for_each(|p| *p = 0);
            for (w, &word) in candidates.iter().enumerate() {
                let mut bits = word;
                while bits != 0 {
                    let test = w * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    for &c in level.columns_of.get(test).map(Vec::as_slice).unwrap_or_default() {
                        if let Some(p) = possible.get_mut(c as usize / 64) {
                            *p |= 1 << (c % 64);
                        }
                    }
                }
            }
            for ((k, r), p) in keep.iter_mut().zip(&level.ruled).zip(possible.iter()) {
                *k &= !r | p;
            }
        }
    }
}

/// The index of pattern group `group` (field `id`): each column's conjuncts that read it, by level.
// Load time: every index is a position in a vector sized here (columns, atoms, words) or
// a key this function inserted.
#[allow(clippy::indexing_slicing)]
fn build_group(program: &Program, group: u32, id: usize, plans: &[ColumnPlan<'_>], words: usize) -> Option<GroupIndex> {
    let tests = program.groups.get(group as usize)?.len();
    let mut levels: Vec<GroupLevel> = Vec::new();
    let mut used = vec![0u64; words];
    let mut subject = None;
    for (c, plan) in plans.iter().enumerate() {
        let mut level = 0;
        for (_, conj, _) in plan.indexed.iter().filter(|(f, _, _)| *f == id) {
            let Some((_, reads)) = pattern_tests(conj.node, conj.negate, program) else { continue };
            subject = subject.or_else(|| pattern_subject(conj.node));
            if levels.len() <= level {
                levels.push(GroupLevel { ruled: vec![0; words], columns_of: vec![Vec::new(); tests] });
            }
            let at = &mut levels[level];
            at.ruled[c / 64] |= 1 << (c % 64);
            used[c / 64] |= 1 << (c % 64);
            for t in reads {
                if let Some(cols) = at.columns_of.get_mut(t as usize) {
                    if cols.last() != Some(&(c as u32)) {
                        cols.push(c as u32);
                    }
                }
            }
            level += 1;
        }
    }
    Some(GroupIndex { group, subject: subject?, levels, used })
}

/// A number strictly between `lo` and `hi` (either may be unbounded), or None
/// when floats leave no room.
fn between<'a>(lo: Option<&Const>, hi: Option<&Const>) -> Option<Value<'a>> {
    let candidate = match (lo.map(as_f64), hi.map(as_f64)) {
        (None, None) => 0.0,
        (None, Some(h)) => h - 1.0,
        (Some(l), None) => l + 1.0,
        (Some(l), Some(h)) => l / 2.0 + h / 2.0,
    };
    let v = Value::Float(candidate);
    let above_lo = lo.is_none_or(|l| ops::compare_numbers(&v, &Value::from_const(l)) == Some(Ordering::Greater));
    let below_hi = hi.is_none_or(|h| ops::compare_numbers(&v, &Value::from_const(h)) == Some(Ordering::Less));
    // Strictly inside by exact comparison, so it stands for every value of the interval.
    (above_lo && below_hi).then_some(v)
}

fn unused_string<'a>(taken: &[&str], arena: &'a Bump) -> &'a str {
    let mut n = 0u64;
    loop {
        let s = format!("\u{10FFFF}clef-other-{n}");
        if !taken.contains(&s.as_str()) {
            return arena.alloc_str(&s);
        }
        n += 1;
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::table::{Limits, Table};

    /// Each input decided by the index and by a plain scan: the same rule and the same warnings.
    fn agree(conditions: &[&str], inputs: &[&str]) {
        let rules: Vec<serde_json::Value> = conditions
            .iter()
            .enumerate()
            .map(|(i, c)| serde_json::json!({"id": format!("r{i}"), "condition": c, "action": {"n": i}}))
            .collect();
        let text = serde_json::json!({"rules": rules}).to_string();
        let table = Table::from_bytes(Path::new("t.json"), text.as_bytes(), &Limits::default()).unwrap();
        for input in inputs {
            let slow = table.decide_reference(input.as_bytes()).unwrap();
            for explain in [false, true] {
                let fast = table.decide(input.as_bytes(), explain).unwrap();
                assert_eq!(fast.rule, slow.rule, "{conditions:?} on {input}");
                assert_eq!(fast.warnings, slow.warnings, "{conditions:?} on {input}");
            }
        }
    }

    fn numbers() -> Vec<String> {
        let values = [
            "0",
            "1",
            "-1",
            "0.1",
            "0.10000000000000002",
            "0.09999999999999999",
            "9007199254740991",
            "9007199254740992",
            "9007199254740993",
            "9007199254740992.0",
            "9007199254740994.0",
            "-9007199254740992",
            "-9007199254740993",
            "-9007199254740992.0",
            "2147483647",
            "2147483648",
            "2147483649",
            "-2147483648",
            "-2147483649",
            "2147483648.5",
            "9223372036854775807",
            "-9223372036854775808",
            "9223372036854775808",
            "9223372036854775807.0",
            "18446744073709551616",
            "1e308",
            "-1e308",
            "\"9\"",
            "null",
            "true",
            "[]",
            "{}",
        ];
        let mut inputs: Vec<String> =
            values.iter().map(|v| format!("{{\"x\": {v}, \"y\": {v}, \"f\": false}}")).collect();
        inputs.push("{}".into());
        inputs
    }

    /// Atom boundaries where floats and ints meet: adjacent floats (no number between them to
    /// stand for the interval), ±2^53 (where ints stop being exact floats), the bounds of the
    /// small numbers arithmetic is safe on, and i64::MAX.
    #[test]
    fn number_atoms_at_their_boundaries() {
        let inputs = numbers();
        let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        for literal in [
            "0.1",
            "0.10000000000000002",
            "9007199254740992",
            "9007199254740993",
            "9007199254740992.0",
            "-9007199254740993",
            "2147483648",
            "2147483648.0",
            "9223372036854775807",
            "9.223372036854775807e18",
            "1e308",
        ] {
            agree(
                &[
                    &format!("x > {literal} && f"),
                    &format!("x == {literal} && f"),
                    &format!("x < {literal}"),
                    &format!("x >= {literal} && x <= {literal}"),
                    &format!("x in [{literal}, 1] || y == {literal}"),
                    &format!("(x ?? 0) <= {literal}"),
                    &format!("x > 0.1 && x < 0.10000000000000002 || x != {literal}"),
                ],
                &inputs,
            );
        }
    }

    /// Arithmetic the index must not skip past: it can overflow on large ints.
    #[test]
    fn arithmetic_that_may_overflow_keeps_its_rule() {
        let inputs = numbers();
        let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        agree(
            &[
                "x * 2 > 1 && f",
                "x + y > 1 && f",
                "x - y * 3 > -39 && f",
                "len(\"ab\") * x + y < 19 && f",
                "abs(x) > 1 && f",
                "-x > 1 && f",
                "x / 2 > 1 && f",
                "x / y > 1 && f",
                "x % 2 == 0 && f",
                "(x ?? y) * 2 < 0.38 && f",
                "min(x, y) * 2 > 0 && f",
                "round(x) + 1 > 0 && f",
                "(f ? x : y) + 1 > 0 && f",
            ],
            &inputs,
        );
    }

    /// The examples: a malformed input gets the rule's warning, not silence.
    #[test]
    fn malformed_inputs_are_warned_about() {
        agree(
            &["x < 5", "x < 5 && y == 1", "!x", "!x && y == 1", "a && b", "x.y == 1", "x.y == 1 && y == 2", "y == 1"],
            &[
                "{}",
                "{\"x\": \"s\"}",
                "{\"x\": 1}",
                "{\"a\": true, \"b\": 1}",
                "{\"a\": false, \"b\": 1}",
                "{\"x\": 5, \"y\": 2}",
                "{\"x\": {\"y\": 1}, \"y\": 1}",
                "{\"x\": [1], \"y\": 2}",
            ],
        );
    }

    /// `||` of conjunctions, negations, presence, nested paths and shared tests.
    #[test]
    fn the_shapes_of_real_tables() {
        agree(
            &[
                "(u.tier == \"gold\" && o.amount > 100) || (u.vpn && risk > 0.5)",
                "!(u.tier == \"gold\" && o.amount > 100) && \"x-debug\" in headers",
                "\"x-debug\" in headers && headers[\"x-debug\"] != nil",
                "\"x-debug\" not in headers && path startsWith \"/admin\"",
                "path startsWith \"/admin\" || path endsWith \".php\"",
                "items[-1].price > 10 && items[0].sku == \"A\"",
                "(session.risk_override ?? risk) < 0.38 && u.tier == \"gold\"",
                "(session.risk_override ?? risk) < 0.2 && path startsWith \"/admin\"",
                "(coupon ?? \"\") == \"SAVE10\" && path endsWith \".php\"",
                "len(items) * 10 + n < 19 && u.tier == \"silver\"",
                "len(items) * 10 + n < 29 && u.tier == \"gold\"",
            ],
            &[
                "{}",
                "{\"u\": {\"tier\": \"gold\", \"vpn\": true}, \"o\": {\"amount\": 50}, \"risk\": 0.7}",
                "{\"u\": {\"tier\": \"gold\", \"vpn\": 1}, \"o\": {\"amount\": 50}, \"risk\": 0.7}",
                "{\"u\": \"gold\", \"headers\": {\"x-debug\": null}, \"path\": \"/admin/x\"}",
                "{\"headers\": [\"x-debug\"], \"path\": 5}",
                "{\"headers\": \"x-debug\", \"path\": \"/a.php\", \"coupon\": \"SAVE10\"}",
                "{\"items\": [{\"sku\": \"A\"}, {\"price\": 11}], \"session\": {\"risk_override\": null}, \"risk\": 0.1}",
                "{\"items\": {\"sku\": \"A\"}, \"n\": 9223372036854775807, \"u\": {\"tier\": \"silver\"}}",
                "{\"items\": [1, 2], \"n\": 9223372036854775807, \"u\": {\"tier\": \"gold\"}}",
                "{\"items\": [1, 2], \"n\": -5, \"u\": {\"tier\": \"silver\"}, \"session\": 3}",
            ],
        );
    }

    /// The literal pass of a pattern group as an index field: tests none of whose literals
    /// occur rule their columns out — alone, in `||` and `&&`, twice in one column, under `!`,
    /// beside tests without literals — and a subject that is not a string (where every test
    /// fails) rules nothing out.
    #[test]
    fn pattern_groups_rule_out_what_their_literals_cannot_match() {
        let conditions = [
            "s ~ \"t\\\\.me/[a-z]+\"",
            "s contains \"bitcoin\" || s ~ \"(微信|wechat)[0-9]+\"",
            "n > 1 && (s ~ \"casino\" || s contains \"元\")",
            "s contains \"hello\" && s ~ \"(?i)free\\\\s+coins\"",
            "!(s contains \"hello\") && s ~ \"(?i)\\\\bgold\\\\b\"",
            "(s ~ \"casino\" && s !~ \"[A-Z]{5,}\") || s contains \"x y\"",
            "s !~ \"casino\" && n == 2",
            "!(s ~ \"bitcoin\" || s contains \"hello\")",
            "s ~ \"[A-Z]{5,}\" && n == 3",
            "lower(s) contains \"free\" || lower(s) contains \"gold\" || lower(s) ~ \"t\\\\.me\"",
            "lower(s) contains \"casino\" && n < 3",
            "s contains \"hello\" && n.x == 1",
            "n == 9",
        ];
        agree(
            &conditions,
            &[
                "{}",
                "{\"s\": \"hello there\", \"n\": 2}",
                "{\"s\": \"see t.me/abc\", \"n\": 3}",
                "{\"s\": \"FREE   Coins, hello\", \"n\": 1}",
                "{\"s\": \"加wechat123 casino\", \"n\": 2}",
                "{\"s\": \"Gold CASINO\", \"n\": {\"x\": 1}}",
                "{\"s\": \"SHOUT LOUDLY\", \"n\": 3}",
                "{\"s\": 5, \"n\": 2}",
                "{\"s\": [\"hello\"], \"n\": 9}",
                "{\"s\": null, \"n\": 9}",
                "{\"s\": \"x y\", \"n\": 9}",
                "{\"s\": \"价格 3 元\", \"n\": \"2\"}",
            ],
        );
        let rules: Vec<serde_json::Value> = conditions
            .iter()
            .enumerate()
            .map(|(i, c)| serde_json::json!({"id": format!("r{i}"), "condition": c, "action": {}}))
            .collect();
        let text = serde_json::json!({"rules": rules}).to_string();
        let table = Table::from_bytes(Path::new("t.json"), text.as_bytes(), &Limits::default()).unwrap();
        // a message none of the literals occur in: every rule before the negated one is ruled out
        let d = table.decide(b"{\"s\": \"nothing to see\", \"n\": 7}", false).unwrap();
        assert_eq!((d.rule, d.evaluated), (Some(7), 1));
    }

    /// A field's memory budget counts distinct literals: 10,000 rules over ten tiers and a few
    /// hundred amounts index both fields, as 100 rules do (it once counted every occurrence,
    /// and tables past a few thousand rules lost their index).
    #[test]
    fn large_tables_repeating_literals_keep_their_index() {
        let build = |n: usize| {
            let rules: Vec<serde_json::Value> = (0..n)
                .map(|i| {
                    let condition = format!("tier == \"t{}\" && amount > {}", i % 10, i % 300);
                    serde_json::json!({"id": format!("r{i}"), "condition": condition, "action": {}})
                })
                .collect();
            let text = serde_json::json!({"rules": rules}).to_string();
            Table::from_bytes(Path::new("t.json"), text.as_bytes(), &Limits::default()).unwrap()
        };
        let indexed = |t: &Table| match &*t.engine {
            crate::table::Engine::Rules(e) => e.indexed_fields(),
            _ => unreachable!("a Jev table has rules"),
        };
        assert_eq!(indexed(&build(100)), 2);
        assert_eq!(indexed(&build(10_000)), 2);
    }
}
