//! Table parameters that online tuning may move (SPEC §9).
//!
//! A parameter is a named constant (`{"value": 0.05}`); with `"tunable": true` it also says how
//! far tuning may move it: `{"value": 0.05, "min": 0.0, "max": 0.2, "step": 0.01, "tunable": true}`.
//! Both front ends (Jev JSON and YAML rule sets) read the declarations into JSON and check each
//! with [`Tunable::read`], so the rules about them live here once.

use std::collections::BTreeMap;

/// A parameter tuning may move, within `[min, max]` by multiples of `step`.
#[derive(Clone, Debug, PartialEq)]
pub struct Tunable {
    /// the parameter's name (`params.NAME`)
    pub name: String,
    /// its value in the file (or the promoted value)
    pub value: f64,
    /// the lowest value tuning may try (`None`: no bound)
    pub min: Option<f64>,
    /// the highest value tuning may try (`None`: no bound)
    pub max: Option<f64>,
    /// how far one move goes
    pub step: f64,
    /// value, step and bounds are all integers: the moved values are integers too
    pub integer: bool,
}

/// What is wrong with the declaration of a parameter: its `min`, `max`, `step`, `tunable` or,
/// for a tunable one, its `value`. The message names the parameter; the loaders place it on the
/// declaration, and the tuning and promotion checks report it for their files.
#[derive(Clone, Debug, PartialEq)]
pub enum DeclarationError {
    /// `min`, `max` or `step` is not a finite number
    NotANumber {
        /// the parameter
        name: String,
        /// `min`, `max` or `step`
        key: &'static str,
        /// what is written instead
        written: serde_json::Value,
    },
    /// `tunable` is not true or false
    TunableNotBool {
        /// the parameter
        name: String,
        /// what is written instead
        written: serde_json::Value,
    },
    /// `min` is above `max`
    MinAboveMax {
        /// the parameter
        name: String,
        /// the lower bound as written
        min: f64,
        /// the upper bound as written
        max: f64,
    },
    /// `step` is 0 or below
    StepNotPositive {
        /// the parameter
        name: String,
        /// the step as written
        step: f64,
    },
    /// a tunable parameter's `value` is not a finite number
    ValueNotANumber {
        /// the parameter
        name: String,
    },
    /// a tunable parameter has no `step`
    NoStep {
        /// the parameter
        name: String,
    },
    /// a tunable parameter's `value` is outside `[min, max]`
    OutsideBounds {
        /// the parameter
        name: String,
        /// the value
        value: f64,
        /// the lower bound (`None`: no bound)
        min: Option<f64>,
        /// the upper bound (`None`: no bound)
        max: Option<f64>,
    },
}

impl std::fmt::Display for DeclarationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeclarationError::NotANumber { name, key, written } => {
                write!(f, "parameter \"{name}\": \"{key}\" must be a number, not {written}")
            }
            DeclarationError::TunableNotBool { name, written } => {
                write!(f, "parameter \"{name}\": \"tunable\" must be true or false, not {written}")
            }
            DeclarationError::MinAboveMax { name, min, max } => {
                write!(f, "parameter \"{name}\": \"min\" ({min}) is above \"max\" ({max})")
            }
            DeclarationError::StepNotPositive { name, step } => {
                write!(f, "parameter \"{name}\": \"step\" must be above 0, not {step}")
            }
            DeclarationError::ValueNotANumber { name } => write!(
                f,
                "parameter \"{name}\" is tunable, so its \"value\" must be a number (tuning moves it by \"step\")"
            ),
            DeclarationError::NoStep { name } => write!(
                f,
                "parameter \"{name}\" is tunable but has no \"step\": say how far one move goes, such as \"step\": 0.01"
            ),
            DeclarationError::OutsideBounds { name, value, min, max } => write!(
                f,
                "parameter \"{name}\": \"value\" {value} is outside [min, max] = [{}, {}]",
                min.map_or("-∞".into(), |v| v.to_string()),
                max.map_or("∞".into(), |v| v.to_string())
            ),
        }
    }
}

impl std::error::Error for DeclarationError {}

impl Tunable {
    /// Reads the declaration of parameter `name`: `Ok(None)` when it is not tunable, the
    /// tunable parameter when it is, or what is wrong with its `min`, `max`, `step` or
    /// `tunable` (a message that names the parameter).
    pub fn read(name: &str, decl: &serde_json::Value) -> Result<Option<Tunable>, DeclarationError> {
        let number = |key: &'static str| -> Result<Option<f64>, DeclarationError> {
            match decl.get(key) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(v) => match v.as_f64() {
                    Some(n) if n.is_finite() => Ok(Some(n)),
                    _ => Err(DeclarationError::NotANumber { name: name.to_string(), key, written: v.clone() }),
                },
            }
        };
        let (min, max, step) = (number("min")?, number("max")?, number("step")?);
        let tunable = match decl.get("tunable") {
            None | Some(serde_json::Value::Null) => false,
            Some(serde_json::Value::Bool(b)) => *b,
            Some(v) => return Err(DeclarationError::TunableNotBool { name: name.to_string(), written: v.clone() }),
        };
        if let (Some(lo), Some(hi)) = (min, max) {
            if lo > hi {
                return Err(DeclarationError::MinAboveMax { name: name.to_string(), min: lo, max: hi });
            }
        }
        if let Some(s) = step {
            if s <= 0.0 {
                return Err(DeclarationError::StepNotPositive { name: name.to_string(), step: s });
            }
        }
        let value = decl.get("value");
        if !tunable {
            return Ok(None);
        }
        let Some(value_n) = value.and_then(serde_json::Value::as_f64).filter(|v| v.is_finite()) else {
            return Err(DeclarationError::ValueNotANumber { name: name.to_string() });
        };
        let Some(step) = step else {
            return Err(DeclarationError::NoStep { name: name.to_string() });
        };
        if min.is_some_and(|lo| value_n < lo) || max.is_some_and(|hi| value_n > hi) {
            return Err(DeclarationError::OutsideBounds { name: name.to_string(), value: value_n, min, max });
        }
        let whole = |v: Option<f64>| v.is_none_or(|x| x.fract() == 0.0);
        let integer = value.is_some_and(|v| v.is_i64() || v.is_u64()) && whole(Some(step)) && whole(min) && whole(max);
        Ok(Some(Tunable { name: name.to_string(), value: value_n, min, max, step, integer }))
    }

    /// The value `moves` steps away (negative: down), when it is within the bounds.
    pub fn moved(&self, moves: i64) -> Option<f64> {
        let v = self.value + moves as f64 * self.step;
        // 0.05 + 0.01 is 0.060000000000000005 in floats: keep the digits a person wrote
        let v = if self.integer { v.round() } else { (v * 1e12).round() / 1e12 };
        let inside = self.min.is_none_or(|lo| v >= lo) && self.max.is_none_or(|hi| v <= hi);
        inside.then_some(v)
    }

    /// `v` as the JSON value the conditions see: an integer for integer parameters.
    pub fn json(&self, v: f64) -> serde_json::Value {
        if self.integer && v.abs() < 9.0e15 {
            serde_json::Value::from(v as i64)
        } else {
            serde_json::Number::from_f64(v).map_or(serde_json::Value::Null, serde_json::Value::Number)
        }
    }
}

/// The tunable parameters among `declared` (a table's `params` as written), by name; those whose
/// declaration is wrong are left out (loading the table reports them; [`problems`] says why).
pub fn tunables(declared: Option<&serde_json::Value>) -> Vec<Tunable> {
    read_all(declared).filter_map(|(_, read)| read.ok().flatten()).collect()
}

/// What is wrong with the declarations among `declared` that [`tunables`] leaves out, by name.
pub fn problems(declared: Option<&serde_json::Value>) -> Vec<DeclarationError> {
    read_all(declared).filter_map(|(_, read)| read.err()).collect()
}

fn read_all(
    declared: Option<&serde_json::Value>,
) -> impl Iterator<Item = (&String, Result<Option<Tunable>, DeclarationError>)> + '_ {
    let sorted: BTreeMap<&String, &serde_json::Value> = match declared {
        Some(serde_json::Value::Object(decls)) => decls.iter().collect(),
        _ => BTreeMap::new(),
    };
    sorted.into_iter().map(|(name, decl)| (name, Tunable::read(name, decl)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn declarations() {
        assert_eq!(Tunable::read("p", &json!({"value": 5})), Ok(None));
        let t = Tunable::read("p", &json!({"value": 0.05, "min": 0.0, "max": 0.2, "step": 0.01, "tunable": true}))
            .unwrap()
            .unwrap();
        assert_eq!((t.value, t.min, t.max, t.step, t.integer), (0.05, Some(0.0), Some(0.2), 0.01, false));
        assert_eq!(t.moved(1), Some(0.06));
        assert_eq!(t.moved(-5), Some(0.0));
        assert_eq!(t.moved(-6), None);
        assert_eq!(t.moved(15), Some(0.2));
        assert_eq!(t.moved(16), None);
        let n = Tunable::read("n", &json!({"value": 10, "step": 2, "min": 0, "tunable": true})).unwrap().unwrap();
        assert!(n.integer);
        assert_eq!(n.json(n.moved(1).unwrap()), json!(12));
        assert_eq!(n.moved(-6), None);
    }

    #[test]
    fn declarations_that_cannot_work() {
        let err = |d: serde_json::Value| Tunable::read("p", &d).unwrap_err().to_string();
        assert!(err(json!({"value": "x", "step": 1, "tunable": true})).contains("must be a number"));
        assert!(err(json!({"value": 1, "tunable": true})).contains("no \"step\""));
        assert!(err(json!({"value": 1, "step": 0, "tunable": true})).contains("above 0"));
        assert!(err(json!({"value": 1, "step": 1, "min": 2, "max": 1, "tunable": true})).contains("above \"max\""));
        assert!(err(json!({"value": 5, "step": 1, "max": 1, "tunable": true})).contains("outside"));
        assert!(err(json!({"value": 1, "step": 1, "tunable": "yes"})).contains("true or false"));
        assert!(err(json!({"value": 1, "min": "low"})).contains("\"min\" must be a number"));
    }

    #[test]
    fn tunables_are_read_in_name_order() {
        let declared = json!({
            "b": {"value": 1, "step": 1, "tunable": true},
            "a": {"value": 0.5, "step": 0.1, "tunable": true},
            "fixed": {"value": 3},
            "broken": {"value": "x", "tunable": true}
        });
        let names: Vec<String> = tunables(Some(&declared)).into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["a", "b"]);
        let why = problems(Some(&declared));
        assert_eq!(why.len(), 1);
        assert_eq!(why[0], DeclarationError::ValueNotANumber { name: "broken".into() });
        assert!(why[0].to_string().contains("\"broken\" is tunable"), "{why:?}");
    }
}
