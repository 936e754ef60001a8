//! First-match evaluation of an ordered list of rules: the engine that Jev
//! tables (and, through the same types, YAML rule sets) run on.

use bumpalo::Bump;
use rustc_hash::FxHashMap;

use super::explain::{self, Parts, Previews, Reason};
use super::index::{Candidates, RuleIndex};
use super::template::{MissingValue, Template, TemplateError};
use crate::expr::ast::Expr;
use crate::expr::compile::compile_program;
use crate::expr::eval::{self, Ctx};
use crate::expr::ir::Node;
use crate::expr::json::write_json_string;
use crate::expr::ops::{self, EvalError};
use crate::expr::program::{recycle, SlotValue};
use crate::expr::value::{Const, Value};
use crate::expr::{reference, ExprError, Program, Schema};
use crate::input::scan::{self, ReadPlan};
use crate::input::{self, InputError, SchemaCheck};

/// One rule, as loaded and compiled.
#[derive(Debug)]
pub struct Rule {
    /// unique id
    pub id: String,
    /// free text from the table
    pub description: Option<String>,
    /// whether the rule takes part in decisions
    pub enabled: bool,
    /// the condition as written
    pub condition: String,
    /// the parsed condition
    pub ast: Expr,
    /// the action as written
    pub action: serde_json::Value,
    /// the action serialized once at load time (with its placeholders as written)
    pub action_json: Box<str>,
    /// what the caller may do when the action cannot be carried out (YAML rule sets)
    pub fallback: Option<serde_json::Value>,
    /// the fallback serialized once
    pub fallback_json: Option<Box<str>>,
    /// the id as a JSON string, serialized once
    pub id_json: Box<str>,
    /// the action's `{{ path }}` placeholders, when it has any (set when the engine compiles)
    action_template: Option<Template>,
    /// the fallback's placeholders, likewise
    fallback_template: Option<Template>,
}

impl Rule {
    /// Builds a rule from its parts (serializing what responses need).
    pub fn new(
        id: String,
        description: Option<String>,
        enabled: bool,
        condition: String,
        ast: Expr,
        action: serde_json::Value,
        fallback: Option<serde_json::Value>,
    ) -> Rule {
        let action_json = action.to_string().into_boxed_str();
        let fallback_json = fallback.as_ref().map(|f| f.to_string().into_boxed_str());
        let mut id_json = String::new();
        write_json_string(&id, &mut id_json);
        Rule {
            id,
            description,
            enabled,
            condition,
            ast,
            action,
            action_json,
            fallback,
            fallback_json,
            id_json: id_json.into(),
            action_template: None,
            fallback_template: None,
        }
    }

    /// Whether answering with this rule needs the input (its action or fallback has placeholders).
    pub fn has_templates(&self) -> bool {
        self.action_template.is_some() || self.fallback_template.is_some()
    }
}

/// A rule that matched no input this time, and why: its condition failed to evaluate, or its
/// action could not be built.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleWarning {
    /// index of the rule
    pub rule: usize,
    /// what went wrong
    pub problem: Problem,
}

/// What went wrong with a rule on one input.
#[derive(Clone, Debug, PartialEq)]
pub enum Problem {
    /// the condition failed to evaluate: the rule did not match
    Eval(EvalError),
    /// the condition held, but a placeholder of the action has no value in the input; with a
    /// fallback, the fallback answered (`degraded`), else the rule did not match
    Template {
        /// the placeholder's path
        path: Box<str>,
        /// whether the fallback answered instead
        fallback: bool,
    },
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Eval(e) => write!(f, "{e}"),
            Problem::Template { path, fallback: true } => write!(
                f,
                "the action needs {{{{ {path} }}}}, which the input does not have (missing or null); \
                 answered with the rule's fallback"
            ),
            Problem::Template { path, fallback: false } => write!(
                f,
                "the condition held, but the action needs {{{{ {path} }}}}, which the input does not have \
                 (missing or null), and the rule has no fallback: it did not match"
            ),
        }
    }
}

/// Why a rule could not be compiled into an engine.
#[derive(Clone, Debug)]
pub enum BuildError {
    /// its condition
    Condition(ExprError),
    /// a placeholder of its action
    Action(TemplateError),
    /// a placeholder of its fallback
    Fallback(TemplateError),
}

/// Why a table cannot take other parameter values.
#[derive(Debug)]
pub enum ParamsError {
    /// the table has no parameters (a flash table): its name
    NoParameters {
        /// the table
        table: String,
        /// its kind
        kind: &'static str,
    },
    /// the table declares no parameter of this name
    Undeclared(String),
    /// a rule does not compile with the values
    Rule {
        /// the rule's id
        rule: String,
        /// what does not compile
        error: BuildError,
    },
}

impl std::fmt::Display for ParamsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParamsError::NoParameters { table, kind } => {
                write!(f, "table \"{table}\" is a {kind} table: it has no parameters")
            }
            ParamsError::Undeclared(name) => write!(f, "the table declares no parameter \"{name}\""),
            ParamsError::Rule { rule, error } => match error {
                BuildError::Condition(e) => write!(f, "rule \"{rule}\": {}", e.message),
                BuildError::Action(e) | BuildError::Fallback(e) => write!(f, "rule \"{rule}\": {e}"),
            },
        }
    }
}

impl std::error::Error for ParamsError {}

/// One line of `trace`: a rule that was evaluated.
#[derive(Clone, Debug)]
pub struct TraceEntry {
    /// index of the rule
    pub rule: usize,
    /// whether it matched
    pub matched: bool,
    /// why (the failing sub-expression and the values it saw, or the match line)
    pub reason: String,
    /// `reason` escaped for a JSON string, when the engine wrote it so (from each rule's text
    /// escaped once, not per response): what a response copies rather than escaping `reason`
    pub reason_json: Option<String>,
}

/// Entries are equal when they say the same: `reason_json` is only `reason` written for JSON.
impl PartialEq for TraceEntry {
    fn eq(&self, other: &TraceEntry) -> bool {
        self.rule == other.rule && self.matched == other.matched && self.reason == other.reason
    }
}

/// The outcome of evaluating one input.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    /// the matching rule's index
    pub rule: Option<usize>,
    /// rules that failed to evaluate
    pub warnings: Vec<RuleWarning>,
    /// with explain: the evaluated rules in order
    pub trace: Option<Vec<TraceEntry>>,
    /// how many conditions were evaluated
    pub evaluated: usize,
    /// with explain: enabled rules before the match (or all, without one) that the index ruled out
    pub skipped: usize,
    /// the action as built for this input, when it differs from the rule's action as written
    /// (placeholders filled, or the fallback answering)
    pub action: Option<String>,
    /// the matching rule's fallback (filled in), offered to the caller beside the action
    pub fallback: Option<String>,
    /// why the answer is degraded (`"template"`: the fallback answered), if it is
    pub degraded_reason: Option<&'static str>,
}

/// What an engine is built with besides its rules.
pub struct EngineParts<'a> {
    /// the action when no rule matches
    pub default_action: Option<serde_json::Value>,
    /// parameter values, folded into the conditions
    pub params: FxHashMap<String, Const>,
    /// the input schema checked before each decision
    pub schema: Option<&'a Schema>,
    /// the largest compiled regex
    pub regex_size_limit: usize,
    /// whether `{{ path }}` in actions and fallbacks are placeholders (else plain text)
    pub templates: bool,
}

/// The kill switches in force on one rule engine (SPEC §8.3): which rules are switched off at
/// run time, held as the bitset of the rules that still take part — the file's `enabled` minus
/// the switched-off ones. A decision reads it exactly where it reads the file's `enabled`, so a
/// switched-off rule behaves as `"enabled": false` in the file: the index never offers it, it is
/// never evaluated, and no warning of it can appear.
#[derive(Clone, Debug, PartialEq)]
pub struct SwitchedOff {
    enabled: Box<[u64]>,
    /// the switched-off rules' indexes, in rule order
    rules: Vec<usize>,
    /// their ids, in the same order
    ids: Vec<String>,
}

impl SwitchedOff {
    /// The rules that take part in decisions, one bit per rule.
    pub fn enabled(&self) -> &[u64] {
        &self.enabled
    }

    /// The ids of the switched-off rules, in rule order.
    pub fn ids(&self) -> &[String] {
        &self.ids
    }

    /// Whether rule `i` is switched off.
    pub fn contains(&self, i: usize) -> bool {
        self.rules.binary_search(&i).is_ok()
    }
}

/// An ordered list of rules compiled together.
#[derive(Debug)]
pub struct RuleEngine {
    /// the rules in order
    pub rules: Vec<Rule>,
    /// the compiled conditions
    pub program: Program,
    index: RuleIndex,
    enabled: Vec<u64>,
    /// parameter values the conditions saw
    pub params: FxHashMap<String, Const>,
    /// the action when nothing matches
    pub default_action: Option<serde_json::Value>,
    /// the default action serialized (`null` without one)
    pub default_json: Box<str>,
    schema: SchemaCheck,
    /// what decisions read of a body, for the scan (`None`: always the full parse)
    plan: Option<ReadPlan>,
    /// what the engine was built with besides its rules and params, to build it again with
    /// other parameter values ([`RuleEngine::with_params`])
    rebuild: Rebuild,
    /// what explanations need of each rule, found when one first does
    explained: Parts,
}

/// The parts of [`EngineParts`] an engine keeps to be built again.
#[derive(Debug)]
struct Rebuild {
    schema: Option<Schema>,
    regex_size_limit: usize,
    templates: bool,
}

impl RuleEngine {
    /// Compiles `rules` together, with the request-time check of the schema and (when
    /// `parts.templates`) the rules' placeholders. On error, returns the failing rule's index
    /// and the error.
    pub fn new(mut rules: Vec<Rule>, parts: EngineParts<'_>) -> Result<RuleEngine, (usize, BuildError)> {
        let EngineParts { default_action, params, schema, regex_size_limit, templates } = parts;
        let schema_spec = schema.cloned();
        let asts: Vec<&Expr> = rules.iter().map(|r| &r.ast).collect();
        let mut program =
            compile_program(&asts, &params, regex_size_limit).map_err(|(i, e)| (i, BuildError::Condition(e)))?;
        let schema = schema.map(|s| SchemaCheck::new(s, &mut program)).unwrap_or_default();
        for (i, rule) in rules.iter_mut().enumerate().filter(|_| templates) {
            rule.action_template = Template::new(&rule.action, &mut program).map_err(|e| (i, BuildError::Action(e)))?;
            if let Some(fallback) = &rule.fallback {
                rule.fallback_template =
                    Template::new(fallback, &mut program).map_err(|e| (i, BuildError::Fallback(e)))?;
            }
        }
        let index = RuleIndex::build(&program);
        // after the index, which reads the tests themselves; evaluation answers each once
        crate::expr::preds::intern(&mut program);
        crate::expr::compile::inline_single_use_memos(&mut program, &|m| index.reads_memo(m));
        crate::expr::ir::lay_out_in_order(&mut program.exprs);
        let plan = ReadPlan::new(&program);
        // last: it moves the tests out of the trees the steps before read
        crate::expr::branching::compile(&mut program);
        let mut enabled = vec![0u64; rules.len().div_ceil(64).max(1)];
        for (i, r) in rules.iter().enumerate() {
            if let (true, Some(word)) = (r.enabled, enabled.get_mut(i / 64)) {
                *word |= 1 << (i % 64);
            }
        }
        let default_json = default_action.as_ref().map(|a| a.to_string()).unwrap_or_else(|| "null".into());
        let rebuild = Rebuild { schema: schema_spec, regex_size_limit, templates };
        let rules_len = rules.len();
        Ok(RuleEngine {
            rules,
            program,
            index,
            plan,
            enabled,
            params,
            default_action,
            default_json: default_json.into(),
            schema,
            rebuild,
            explained: Parts::new(rules_len),
        })
    }

    /// The same rules compiled with other values for some parameters (a tuning variant, a
    /// promoted value): `overrides` maps declared parameter names to their new values. The
    /// values are folded into the conditions as the declared ones were, so the result is as
    /// fast. An undeclared name, or a value a condition cannot be compiled with, is an error.
    pub fn with_params(&self, overrides: &FxHashMap<String, Const>) -> Result<RuleEngine, ParamsError> {
        let mut params = self.params.clone();
        for (name, value) in overrides {
            match params.get_mut(name) {
                Some(v) => *v = value.clone(),
                None => return Err(ParamsError::Undeclared(name.clone())),
            }
        }
        let rules = self
            .rules
            .iter()
            .map(|r| {
                Rule::new(
                    r.id.clone(),
                    r.description.clone(),
                    r.enabled,
                    r.condition.clone(),
                    r.ast.clone(),
                    r.action.clone(),
                    r.fallback.clone(),
                )
            })
            .collect();
        let parts = EngineParts {
            default_action: self.default_action.clone(),
            params,
            schema: self.rebuild.schema.as_ref(),
            regex_size_limit: self.rebuild.regex_size_limit,
            templates: self.rebuild.templates,
        };
        RuleEngine::new(rules, parts).map_err(|(i, error)| ParamsError::Rule {
            rule: self.rules.get(i).map_or_else(|| "?".to_string(), |r| r.id.clone()),
            error,
        })
    }

    /// The rules named by `ids` switched off (kill switches), and the ids no rule of this
    /// engine has. `None` when no rule is switched off.
    pub fn switch_off(&self, ids: &std::collections::BTreeSet<String>) -> (Option<SwitchedOff>, Vec<String>) {
        let mut enabled = self.enabled.clone().into_boxed_slice();
        let (mut rules, mut found) = (Vec::new(), Vec::new());
        if !ids.is_empty() {
            for (i, rule) in self.rules.iter().enumerate() {
                if ids.contains(&rule.id) {
                    if let Some(word) = enabled.get_mut(i / 64) {
                        *word &= !(1 << (i % 64));
                    }
                    rules.push(i);
                    found.push(rule.id.clone());
                }
            }
        }
        let had: std::collections::BTreeSet<&String> = found.iter().collect();
        let missing = ids.iter().filter(|id| !had.contains(id)).cloned().collect();
        let switched = (!rules.is_empty()).then_some(SwitchedOff { enabled, rules, ids: found });
        (switched, missing)
    }

    /// The input schema the table declares, when it declares one (`clef diff` compares them).
    pub fn schema(&self) -> Option<&Schema> {
        self.rebuild.schema.as_ref()
    }

    /// How many fields the rule index uses.
    pub fn indexed_fields(&self) -> usize {
        self.index.indexed_fields()
    }

    /// Decides one request body with the rules the file enables.
    pub fn decide_body(&self, body: &[u8], explain: bool, max_depth: usize) -> Result<Decision, InputError> {
        self.decide_body_with(body, explain, max_depth, None)
    }

    /// Decides one request body with the rules the file enables less those `switched` off (kill
    /// switches). Without explain, the body is scanned for what the table reads (see
    /// `input::scan`); a body the scan does not vouch for, and explain, take the full parse —
    /// which also gives every error a body can have.
    pub fn decide_body_with(
        &self,
        body: &[u8],
        explain: bool,
        max_depth: usize,
        switched: Option<&SwitchedOff>,
    ) -> Result<Decision, InputError> {
        let enabled = switched.map_or(&self.enabled[..], SwitchedOff::enabled);
        // One result, returned on every path, is the caller's: the decision is written where
        // it is read (it is large, and a move through the closures would copy it).
        let mut out = Ok(Decision::default());
        let mut decided = false;
        if let (false, Some(plan), Ok(decision)) = (explain, &self.plan, &mut out) {
            scan::with_scanned(body, plan, max_depth, |slots| {
                // a schema mismatch is answered by the full path, which names the field
                if self.schema.passes(slots) {
                    *slots = self.evaluate(std::mem::take(slots), &Value::Nil, false, enabled, decision);
                    decided = true;
                }
            });
        }
        if !decided {
            out = input::with_parsed(body, max_depth, |root| self.decide_with(&root, explain, enabled)).and_then(|d| d);
        }
        out
    }

    /// Decides one input object: the first enabled rule whose condition is
    /// true. An input the table's schema rejects gets no decision.
    pub fn decide(&self, root: &Value<'_>, explain: bool) -> Result<Decision, InputError> {
        self.decide_with(root, explain, &self.enabled)
    }

    /// [`RuleEngine::decide`] with the rules `switched` off left out too: an input parsed once
    /// for several readers (the caller's other stages) is decided without parsing it again.
    pub fn decide_parsed_with(
        &self,
        root: &Value<'_>,
        explain: bool,
        switched: Option<&SwitchedOff>,
    ) -> Result<Decision, InputError> {
        self.decide_with(root, explain, switched.map_or(&self.enabled[..], SwitchedOff::enabled))
    }

    fn decide_with(&self, root: &Value<'_>, explain: bool, enabled: &[u64]) -> Result<Decision, InputError> {
        let slots = self.program.fill_slots(root);
        self.schema.check(&slots, root)?;
        let mut decision = Decision::default();
        self.evaluate(slots, root, explain, enabled, &mut decision);
        Ok(decision)
    }

    /// The first enabled rule whose condition holds on `slots` (read from `root`), into
    /// `decision` (a fresh one). Gives the slots' vector back, emptied, for its allocation.
    fn evaluate<'a>(
        &'a self,
        slots: Vec<SlotValue<'a>>,
        root: &Value<'_>,
        explain: bool,
        enabled: &[u64],
        decision: &mut Decision,
    ) -> Vec<SlotValue<'static>> {
        // the predicate bits of a table of up to 512 predicates, without an allocation
        let mut pred_words = [0u64; 16];
        let arena = Bump::new();
        let mut cx = Ctx::with_slots(&self.program, &arena, slots);
        cx.lend_pred_bits(&mut pred_words);
        let mut candidates = Candidates::for_index(&self.index);
        // what the trace shows of each field, by slot: written once per decision, however
        // many false rules read the field
        let mut previews: Previews = Vec::new();
        self.index.select(&mut cx, &mut candidates);
        if explain {
            // a line for each rule tried, hundreds on a large table: not grown line by line
            decision.trace = Some(Vec::with_capacity(candidates.count().min(self.rules.len())));
        }
        self.index.for_each(&candidates, enabled, |r| {
            decision.evaluated += 1;
            let outcome = eval::eval_rule(r, &mut cx);
            // most rules tried do not hold: without a trace there is nothing to record
            if !explain && matches!(outcome, Ok(false)) {
                return false;
            }
            let why = (explain && matches!(outcome, Ok(false))).then(|| self.why_not(r, &mut cx, root, &mut previews));
            self.record(decision, r, outcome, &cx.slots, why);
            decision.rule.is_some()
        });
        if explain {
            decision.skipped = enabled_before(enabled, self.rules.len(), decision.rule) - decision.evaluated;
        }
        recycle(cx.into_slots())
    }

    /// The same decision by the reference evaluator: the schema walked path by
    /// path, then every enabled rule in order, conditions walked from the
    /// syntax tree, no index. Its trace lists every rule tried, each reason found by the
    /// reference evaluator too.
    pub fn decide_reference(&self, root: &Value<'_>) -> Result<Decision, InputError> {
        self.decide_reference_with(root, None)
    }

    /// [`RuleEngine::decide_reference`] with the rules `switched` off left out too.
    pub fn decide_reference_with(
        &self,
        root: &Value<'_>,
        switched: Option<&SwitchedOff>,
    ) -> Result<Decision, InputError> {
        let enabled = switched.map_or(&self.enabled[..], SwitchedOff::enabled);
        self.schema.check_reference(root)?;
        let arena = Bump::new();
        // placeholders are filled the same way on both paths: they are not what this checks
        let slots = if self.rules.iter().any(Rule::has_templates) { self.program.fill_slots(root) } else { Vec::new() };
        let mut decision = Decision { trace: Some(Vec::new()), ..Decision::default() };
        for (r, rule) in self.rules.iter().enumerate() {
            if !bit(enabled, r) {
                continue;
            }
            decision.evaluated += 1;
            let outcome =
                reference::evaluate(&rule.ast, root, &self.params, &arena).and_then(|v| ops::condition_outcome(&v));
            let why = (outcome == Ok(false)).then(|| Reason::plain(self.why_not_reference(r, root)));
            self.record(&mut decision, r, outcome, &slots, why);
            if decision.rule.is_some() {
                break;
            }
        }
        Ok(decision)
    }

    /// Records one evaluated rule: its warning, the match (with its action built when it has
    /// placeholders), and the trace line (`why`: the reason of a false condition).
    fn record(
        &self,
        decision: &mut Decision,
        r: usize,
        outcome: Result<bool, EvalError>,
        slots: &[SlotValue<'_>],
        why: Option<Reason>,
    ) {
        let Some(rule) = self.rules.get(r) else { return };
        let mut matched = matches!(outcome, Ok(true));
        let mut reason = None;
        match outcome {
            Err(error) => decision.warnings.push(RuleWarning { rule: r, problem: Problem::Eval(error) }),
            Ok(true) if rule.has_templates() => match self.build_answer(rule, slots, decision) {
                Ok(()) => {}
                Err(problem) => {
                    matched = matches!(problem, Problem::Template { fallback: true, .. });
                    if decision.trace.is_some() {
                        reason = Some(if matched {
                            format!(
                                "Rule {} matched: {} → fallback {} ({problem})",
                                rule.id,
                                rule.condition,
                                decision.action.as_deref().unwrap_or("null")
                            )
                        } else {
                            format!("{problem}")
                        });
                    }
                    decision.warnings.push(RuleWarning { rule: r, problem });
                }
            },
            Ok(_) => {}
        }
        if matched {
            decision.rule = Some(r);
        }
        if let Some(trace) = decision.trace.as_mut() {
            let reason = match (reason, outcome) {
                (Some(reason), _) => Reason::plain(reason),
                (None, Ok(true)) => Reason::plain(format!(
                    "Rule {} matched: {} → {}",
                    rule.id,
                    rule.condition,
                    decision.action.as_deref().unwrap_or(&rule.action_json)
                )),
                (None, Ok(false)) => why.unwrap_or_default(),
                (None, Err(e)) => Reason::plain(format!("error: {e}")),
            };
            trace.push(TraceEntry { rule: r, matched, reason: reason.text, reason_json: reason.json });
        }
    }

    /// Builds the answer of a matching rule whose action or fallback has placeholders: the
    /// action filled in (and the fallback beside it), or the fallback when the action cannot
    /// be built. `Err` is the problem to report; with `fallback: true` the rule still answers.
    fn build_answer(&self, rule: &Rule, slots: &[SlotValue<'_>], decision: &mut Decision) -> Result<(), Problem> {
        let fallback = |out: &mut String| -> Result<(), MissingValue> {
            match (&rule.fallback_template, &rule.fallback_json) {
                (Some(t), _) => {
                    out.reserve(t.capacity_hint());
                    t.render(slots, out)
                }
                (None, Some(json)) => {
                    out.push_str(json);
                    Ok(())
                }
                (None, None) => Err(MissingValue { path: "".into() }),
            }
        };
        let mut action = String::with_capacity(rule.action_template.as_ref().map_or(0, |t| t.capacity_hint()));
        let built = match &rule.action_template {
            Some(t) => t.render(slots, &mut action),
            None => {
                action.push_str(&rule.action_json);
                Ok(())
            }
        };
        match built {
            Ok(()) => {
                if rule.action_template.is_some() {
                    decision.action = Some(action);
                }
                if rule.fallback.is_some() {
                    let mut filled = String::new();
                    // a fallback that cannot be built is not offered; the action stands
                    if fallback(&mut filled).is_ok() {
                        decision.fallback = Some(filled);
                    }
                }
                Ok(())
            }
            Err(missing) => {
                let mut filled = String::new();
                if rule.fallback.is_some() && fallback(&mut filled).is_ok() {
                    decision.action = Some(filled);
                    decision.degraded_reason = Some("template");
                    Err(Problem::Template { path: missing.path, fallback: true })
                } else {
                    Err(Problem::Template { path: missing.path, fallback: false })
                }
            }
        }
    }

    /// The first top-level conjunct that did not hold in rule `r`, whose condition came out
    /// false, with the values it read: the conjuncts run compiled, in the decision's context
    /// (memos and pattern passes reused, no regex built), and the fields are read from their
    /// slots.
    fn why_not<'a>(&'a self, r: usize, cx: &mut Ctx<'a>, root: &Value<'_>, previews: &mut Previews) -> Reason {
        let Some(rule) = self.rules.get(r) else { return Reason::default() };
        let parts = self.explained.of(r, &rule.ast, &rule.condition, &self.program);
        // `a && b && …` compiles to as many nodes, anything else to one
        let nodes: &[Node] = match self.program.exprs.get(r) {
            Some(Node::And(nodes)) if parts.len() > 1 && nodes.len() == parts.len() => nodes,
            Some(node) if parts.len() == 1 => std::slice::from_ref(node),
            // folded: the reference evaluator knows the conjuncts
            _ => return Reason::plain(self.why_not_reference(r, root)),
        };
        for (i, (part, node)) in parts.iter().zip(nodes).enumerate() {
            // the condition was false: a whole condition that can only be a bool was `false`
            // (a large table's rules are often one `||`, which need not run again)
            let v = if nodes.len() == 1 && eval::is_predicate(node) {
                Ok(Value::Bool(false))
            } else {
                eval::eval(node, cx)
            };
            if matches!(v, Ok(Value::Bool(true))) {
                continue;
            }
            if let Some(reason) = explain::reason_from_slots(&rule.condition, part, &v, &cx.slots, previews) {
                return reason;
            }
            // a field without a slot (every path a condition reads has one: a fallback)
            let arena = Bump::new();
            let Some(expr) = explain::conjuncts(&rule.ast).get(i).copied() else { break };
            let text = explain::part_reason(&rule.condition, expr, &v, |e| {
                let slot = explain::path_of(e).and_then(|p| self.program.find_slot(&p));
                match slot.and_then(|s| cx.slots.get(s as usize)) {
                    Some(value) => explain::preview(*value),
                    None => explain::preview(reference::evaluate(e, root, &self.params, &arena)),
                }
            });
            return Reason::plain(text);
        }
        Reason::plain(format!("{} was false", rule.condition))
    }

    /// [`RuleEngine::why_not`] by the reference evaluator (the trace of
    /// [`RuleEngine::decide_reference`]).
    fn why_not_reference(&self, r: usize, root: &Value<'_>) -> String {
        let Some(rule) = self.rules.get(r) else { return String::new() };
        let arena = Bump::new();
        let parts = explain::conjuncts(&rule.ast);
        let params = &self.params;
        explain::first_false(
            &rule.condition,
            &parts,
            &mut (),
            |i, _| parts.get(i).map_or(Ok(Value::Nil), |part| reference::evaluate(part, root, params, &arena)),
            |e, _| explain::preview(reference::evaluate(e, root, params, &arena)),
        )
    }
}

/// Whether bit `i` of a rule bitset is set.
fn bit(bits: &[u64], i: usize) -> bool {
    bits.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
}

/// How many rules of `enabled` (of `count` rules) come before `rule` and `rule` itself, or all
/// of them without one.
fn enabled_before(enabled: &[u64], count: usize, rule: Option<usize>) -> usize {
    let end = rule.map(|r| r + 1).unwrap_or(count);
    let mut n = 0;
    for (w, word) in enabled.iter().enumerate() {
        let start = w * 64;
        if start >= end {
            break;
        }
        let take = (end - start).min(64);
        let mask = if take == 64 { u64::MAX } else { (1u64 << take) - 1 };
        n += (word & mask).count_ones() as usize;
    }
    n
}
