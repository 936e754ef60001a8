//! Writing JSON text: values, strings and floats, the way every response, log line and
//! message of clef writes them. The one place that knows JSON's escapes.

use std::fmt::Write as _;

use super::value::Value;

/// Appends the compact JSON text of `v` to `out` (what `string(x)` gives for non-strings).
///
/// Iterative over arrays and objects: request data can be 128 levels deep
/// and this may run on a small coroutine stack.
pub fn write_value(v: &Value<'_>, out: &mut String) {
    write_value_bounded(v, out, usize::MAX);
}

/// [`write_value`] that stops once it has written more than `budget` bytes: the text then ends
/// somewhere inside the value (not valid JSON), and is at least `budget / 4` characters long.
/// For previews of values that may be large (an explanation shows a 4 KB message's first
/// characters), at a cost that does not grow with the value.
pub fn write_value_bounded(v: &Value<'_>, out: &mut String, budget: usize) {
    let start = out.len();
    enum Step<'a> {
        Value(Value<'a>),
        Key(&'a str),
        Text(&'static str),
    }
    let mut stack = vec![Step::Value(*v)];
    while let Some(step) = stack.pop() {
        let written = out.len() - start;
        if written > budget {
            return;
        }
        match step {
            Step::Text(t) => out.push_str(t),
            Step::Key(k) => {
                write_json_string(k, out);
                out.push(':');
            }
            Step::Value(v) => match v {
                Value::Nil => out.push_str("null"),
                Value::Bool(b) => out.push_str(if b { "true" } else { "false" }),
                Value::Int(i) => {
                    let _ = write!(out, "{i}");
                }
                Value::Float(f) => write_json_float(f, out),
                Value::Str(s) => {
                    let shown = prefix(s, budget - written);
                    if shown.len() == s.len() {
                        write_json_string(s, out);
                    } else {
                        // cut: no closing quote, the text goes on
                        out.push('"');
                        write_escaped(shown, out);
                        return;
                    }
                }
                Value::Array(a) => {
                    out.push('[');
                    stack.push(Step::Text("]"));
                    let items: Vec<Value<'_>> = a.iter().collect();
                    for (i, item) in items.into_iter().enumerate().rev() {
                        stack.push(Step::Value(item));
                        if i > 0 {
                            stack.push(Step::Text(","));
                        }
                    }
                }
                Value::Object(o) => {
                    out.push('{');
                    stack.push(Step::Text("}"));
                    let members: Vec<(&str, Value<'_>)> = o.iter().collect();
                    for (i, (k, item)) in members.into_iter().enumerate().rev() {
                        stack.push(Step::Value(item));
                        stack.push(Step::Key(k));
                        if i > 0 {
                            stack.push(Step::Text(","));
                        }
                    }
                }
            },
        }
    }
}

/// `s` when it has at most `max` bytes, else its shortest start of more than `max` bytes that
/// ends on a character boundary (so that a bounded writer is past its budget after it).
fn prefix(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max + 1;
    while !s.is_char_boundary(end) {
        end += 1;
    }
    s.get(..end).unwrap_or(s)
}

/// Writes a float the way JSON writers do: `2.0`, `0.5`, `1e21`; non-finite as `null`.
pub fn write_json_float(f: f64, out: &mut String) {
    if f.is_finite() {
        match serde_json::Number::from_f64(f) {
            Some(n) => {
                let _ = write!(out, "{n}");
            }
            None => out.push_str("null"),
        }
    } else {
        out.push_str("null");
    }
}

/// Writes `s` as a JSON string literal with the escapes JSON requires.
pub fn write_json_string(s: &str, out: &mut String) {
    out.reserve(s.len() + 2);
    out.push('"');
    write_escaped(s, out);
    out.push('"');
}

/// The inside of a JSON string literal: `s` with the escapes JSON requires.
fn write_escaped(s: &str, out: &mut String) {
    let mut rest = s;
    // most strings (ids, names, actions) need no escape: one scan, one copy
    while let Some(at) = rest.bytes().position(|b| b == b'"' || b == b'\\' || b < 0x20) {
        let (plain, tail) = rest.split_at(at);
        out.push_str(plain);
        let mut chars = tail.chars();
        match chars.next() {
            Some('"') => out.push_str("\\\""),
            Some('\\') => out.push_str("\\\\"),
            Some('\n') => out.push_str("\\n"),
            Some('\r') => out.push_str("\\r"),
            Some('\t') => out.push_str("\\t"),
            Some(c) => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            None => {}
        }
        rest = chars.as_str();
    }
    out.push_str(rest);
}

/// Writes `pairs` as a JSON object of strings (`{"a":"b",...}`).
pub fn write_string_map(pairs: &[(String, String)], out: &mut String) {
    out.push('{');
    for (i, (key, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_json_string(key, out);
        out.push(':');
        write_json_string(value, out);
    }
    out.push('}');
}

/// `s` as a JSON string literal, for messages (`invalid regex "a("`).
pub fn quote(s: &str) -> String {
    let mut out = String::new();
    write_json_string(s, &mut out);
    out
}

/// Converts a value to a `serde_json::Value` (int and float kept apart).
pub fn to_serde(v: &Value<'_>) -> serde_json::Value {
    serde_json::from_str(&v.to_json()).unwrap_or(serde_json::Value::Null)
}

/// Whether two JSON values are the same value, as the condition language's `==` says: numbers
/// by value (`1` is `1.0`; an integer and a float are compared exactly), arrays element by
/// element, objects key by key in any order. The one rule of "the same action" or "the same
/// value" that shadow agreement, replay, `clef test`, `clef diff` and promoted parameters share,
/// so that they cannot disagree about a pair of values.
pub fn same_value(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value as Json;
    // Iterative: a value read from a file may be nested as deep as serde_json allows.
    let mut pending = vec![(a, b)];
    while let Some(pair) = pending.pop() {
        let same = match pair {
            (Json::Number(x), Json::Number(y)) => super::ops::equals(&engine_number(x), &engine_number(y)),
            (Json::Array(x), Json::Array(y)) => {
                pending.extend(x.iter().zip(y));
                x.len() == y.len()
            }
            (Json::Object(x), Json::Object(y)) => {
                x.len() == y.len()
                    && x.iter().all(|(k, v)| match y.get(k) {
                        Some(w) => {
                            pending.push((v, w));
                            true
                        }
                        None => false,
                    })
            }
            (x, y) => x == y,
        };
        if !same {
            return false;
        }
    }
    true
}

/// [`same_value`] of two JSON texts; texts that are not JSON are the same only when identical.
pub fn same_json_text(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    match (serde_json::from_str::<serde_json::Value>(a), serde_json::from_str::<serde_json::Value>(b)) {
        (Ok(x), Ok(y)) => same_value(&x, &y),
        _ => false,
    }
}

/// A JSON number as the input parser reads it: an integer that fits `i64`, else a float.
fn engine_number(n: &serde_json::Number) -> Value<'static> {
    match n.as_i64() {
        Some(i) => Value::Int(i),
        None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_same_value_is_the_languages_equality() {
        let same = |a: &str, b: &str| same_json_text(a, b);
        assert!(same(r#"{"a":1,"b":[2.0]}"#, r#"{"b": [2], "a": 1.0}"#));
        assert!(same("1", "1.0") && same("-0.0", "0") && same("1e2", "100"));
        assert!(!same(r#"{"a":1}"#, r#"{"a":1,"b":null}"#));
        assert!(!same("null", r#"{"a":1}"#) && !same("[1,2]", "[2,1]") && !same("\"1\"", "1"));
        // an integer and a float are compared exactly, not through a rounded float
        assert!(!same("9007199254740993", "9007199254740992.0"));
        assert!(same("9007199254740992", "9007199254740992.0"));
        assert!(!same("{", "{ ") && same("{", "{"));
    }

    /// JSON for the property test: scalars of every kind (integers that are and are not exact
    /// as floats), nested in arrays and objects.
    fn json() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::{json, Value as Json};
        let leaf = prop_oneof![
            Just(Json::Null),
            any::<bool>().prop_map(Json::Bool),
            (-3i64..3).prop_map(|i| json!(i)),
            (-3i64..3).prop_map(|i| json!(i as f64)),
            prop_oneof![Just(9_007_199_254_740_993i64), Just(i64::MAX), Just(i64::MIN)].prop_map(|i| json!(i)),
            prop_oneof![Just(9_007_199_254_740_992.0f64), Just(0.5), Just(-0.0)].prop_map(|f| json!(f)),
            "[ab]{0,2}".prop_map(Json::String),
        ];
        leaf.prop_recursive(3, 16, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Json::Array),
                prop::collection::btree_map("[ab]", inner, 0..3).prop_map(|m| Json::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// `same_value` says what `==` says of the same two values read as input.
        #[test]
        fn same_value_agrees_with_the_languages_equals(a in json(), b in json()) {
            let body = serde_json::json!({"a": a, "b": b}).to_string();
            let by_language = crate::input::with_parsed(body.as_bytes(), 64, |root| {
                let Value::Object(o) = root else { return None };
                Some(super::super::ops::equals(&o.get("a")?, &o.get("b")?))
            });
            prop_assert_eq!(by_language.ok().flatten(), Some(same_value(&a, &b)), "{}", body);
        }
    }

    fn full(v: &Value<'_>) -> String {
        let mut s = String::new();
        write_value(v, &mut s);
        s
    }

    proptest! {
        /// A bounded write is the start of the full text: all of it within the budget, else
        /// more than the budget's bytes and at least a quarter as many characters.
        #[test]
        fn a_bounded_write_is_a_prefix_of_the_full_text(text in "(?s).{0,300}", budget in 0usize..400) {
            let items = [Value::Int(1), Value::Str(&text), Value::Str(&text)];
            let values = [Value::Str(&text), Value::Array(crate::expr::value::Array::Values(&items))];
            for v in values {
                let whole = full(&v);
                let mut cut = String::from("x");
                write_value_bounded(&v, &mut cut, budget);
                let cut = &cut[1..];
                prop_assert!(whole.starts_with(cut), "{cut:?} is not a start of {whole:?}");
                if cut.len() < whole.len() {
                    prop_assert!(cut.len() > budget && cut.chars().count() >= budget / 4, "{budget}: {cut:?}");
                }
            }
        }
    }
}
