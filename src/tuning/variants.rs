//! The variants tuning tries: the table's tunable parameters moved by a step or more.
//!
//! Variant `v1` moves the first tunable parameter (by name) one step up, `v2` one step down,
//! then the next parameter, and so on; when one step each is not enough variants, two steps,
//! then three. Moves that leave `[min, max]` are left out. Each variant moves exactly one
//! parameter, so a variant that wins says which parameter to change, and which way.

use std::collections::BTreeMap;

use crate::table::params::Tunable;

/// The most steps a variant moves a parameter from its value.
const MAX_MOVES: i64 = 64;

/// One arm of a tuned table: the baseline (the table's values) or a variant.
#[derive(Clone, Debug, PartialEq)]
pub struct Arm {
    /// `baseline`, `v1`, `v2`, …
    pub id: String,
    /// the value of every tunable parameter in this arm
    pub params: BTreeMap<String, serde_json::Value>,
}

/// The baseline followed by up to `count` variants of `tunables`.
pub fn arms(tunables: &[Tunable], count: usize) -> Vec<Arm> {
    let baseline: BTreeMap<String, serde_json::Value> =
        tunables.iter().map(|t| (t.name.clone(), t.json(t.value))).collect();
    let mut out = vec![Arm { id: "baseline".into(), params: baseline.clone() }];
    'moves: for distance in 1..=MAX_MOVES {
        for t in tunables {
            for moves in [distance, -distance] {
                if out.len() > count {
                    break 'moves;
                }
                if let Some(v) = t.moved(moves) {
                    let mut params = baseline.clone();
                    params.insert(t.name.clone(), t.json(v));
                    out.push(Arm { id: format!("v{}", out.len()), params });
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tunable(name: &str, decl: serde_json::Value) -> Tunable {
        Tunable::read(name, &decl).unwrap().unwrap()
    }

    #[test]
    fn one_parameter_moved_each_way_then_further() {
        let t = [tunable("rate", json!({"value": 0.05, "min": 0.0, "max": 0.2, "step": 0.01, "tunable": true}))];
        let arms = arms(&t, 6);
        let ids: Vec<&str> = arms.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(ids, ["baseline", "v1", "v2", "v3", "v4", "v5", "v6"]);
        let rates: Vec<f64> = arms.iter().map(|a| a.params["rate"].as_f64().unwrap()).collect();
        assert_eq!(rates, [0.05, 0.06, 0.04, 0.07, 0.03, 0.08, 0.02]);
    }

    #[test]
    fn bounds_and_several_parameters() {
        let t = [
            tunable("a", json!({"value": 0, "min": 0, "max": 1, "step": 1, "tunable": true})),
            tunable("b", json!({"value": 10, "step": 5, "tunable": true})),
        ];
        let arms = arms(&t, 4);
        let moved: Vec<(i64, i64)> =
            arms.iter().map(|a| (a.params["a"].as_i64().unwrap(), a.params["b"].as_i64().unwrap())).collect();
        // a cannot go below 0 nor above 1
        assert_eq!(moved, [(0, 10), (1, 10), (0, 15), (0, 5), (0, 20)]);
        // fewer variants than asked when the bounds allow no more
        let tight = [tunable("a", json!({"value": 0, "min": 0, "max": 1, "step": 1, "tunable": true}))];
        assert_eq!(super::arms(&tight, 6).len(), 2);
        assert_eq!(super::arms(&[], 6).len(), 1);
    }
}
