//! The conformance table of SPEC §3/§11: every operator and semantic rule,
//! checked through both the optimized compiler/evaluator and the reference evaluator.
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use clef::expr::check::Schema;
use clef::expr::{Const, Env, EvalError, Expression, Value};
use clef::input::{with_parsed, DEFAULT_MAX_DEPTH};
use serde_json::Value as Json;

#[derive(Debug)]
enum Outcome {
    Value(Json),
    RuntimeError,
    LoadError,
}

/// The case's parameters and schema, or the load error they make by themselves
/// (an unknown schema type): declared through the library, as a table's are.
fn env_for(case: &Json) -> Result<Env, String> {
    let mut env = Env::default();
    if let Some(params) = case.get("params").and_then(Json::as_object) {
        for (name, decl) in params {
            let value = decl.get("value").cloned().unwrap_or(Json::Null);
            env.params.insert(name.clone(), Const::from_json(&value));
        }
    }
    if let Some(schema) = case.get("schema").and_then(Json::as_object) {
        let mut s = Schema::default();
        for (field, t) in schema {
            // A type that is not a string is an unknown type name, as in a table file.
            s.declare(field, t.as_str().unwrap_or_default()).map_err(|e| e.to_string())?;
        }
        if let Some((_, problem)) = s.path_problems().into_iter().next() {
            return Err(problem);
        }
        env.schema = Some(s);
    }
    Ok(env)
}

fn run_case(case: &Json) -> (Outcome, Option<Outcome>) {
    let src = case["expr"].as_str().expect("expr");
    let as_condition = case.get("condition").and_then(Json::as_bool).unwrap_or(false);
    let compiled = env_for(case).ok().and_then(|env| Expression::compile(src, &env, as_condition).ok());
    let Some(expr) = compiled else { return (Outcome::LoadError, None) };
    let input = case.get("input").cloned().unwrap_or(Json::Object(Default::default())).to_string();
    let parsed = |evaluate: &dyn Fn(&Value<'_>) -> Result<Json, EvalError>| {
        with_parsed(input.as_bytes(), DEFAULT_MAX_DEPTH, |root| evaluate(&root)).expect("input is an object")
    };
    let fast = match parsed(&|root| expr.evaluate(root)) {
        Ok(v) => Outcome::Value(v),
        Err(_) => Outcome::RuntimeError,
    };
    let reference = match parsed(&|root| expr.evaluate_reference(root)) {
        Ok(v) => Outcome::Value(v),
        Err(_) => Outcome::RuntimeError,
    };
    // A rule condition that yields neither a bool nor nil is an evaluation error.
    let as_rule = |o: Outcome| match o {
        Outcome::Value(v) if as_condition && !(v.is_boolean() || v.is_null()) => Outcome::RuntimeError,
        other => other,
    };
    (as_rule(fast), Some(as_rule(reference)))
}

fn same(a: &Outcome, b: &Outcome) -> bool {
    match (a, b) {
        (Outcome::Value(x), Outcome::Value(y)) => x == y,
        (Outcome::RuntimeError, Outcome::RuntimeError) | (Outcome::LoadError, Outcome::LoadError) => true,
        _ => false,
    }
}

#[test]
fn every_conformance_case_holds() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/conformance/cases.json")).unwrap();
    let cases: Vec<Json> = serde_json::from_str(&text).unwrap();
    assert!(cases.len() > 300, "the conformance table lost cases");
    let mut failures = Vec::new();
    for case in &cases {
        let expected = if case.get("load_error").and_then(Json::as_bool) == Some(true) {
            Outcome::LoadError
        } else if case.get("error").and_then(Json::as_bool) == Some(true) {
            Outcome::RuntimeError
        } else {
            Outcome::Value(case.get("expect").cloned().expect("a case needs expect, error or load_error"))
        };
        let (fast, reference) = run_case(case);
        if !same(&fast, &expected) {
            failures.push(format!("{}: expected {:?}, optimized gave {:?}", case["expr"], expected, fast));
        }
        if let Some(r) = reference {
            if !same(&r, &fast) {
                failures.push(format!("{}: optimized {:?} but reference {:?}", case["expr"], fast, r));
            }
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
}
