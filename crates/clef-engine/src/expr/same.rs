//! The one rule of "the same value" for JSON values outside an evaluation: the condition
//! language's `==`. Shadow agreement, replay, `clef test`, `clef diff` and promoted parameters
//! all compare actions and values with it, so that they cannot disagree about a pair.

use super::value::Value;

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
}
