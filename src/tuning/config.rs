//! `tuning:` in `config.yaml` (SPEC §9).
//!
//! ```yaml
//! tuning: {enabled: true, tables: [search_rewrite], traffic: 0.05, variants: 6,
//!          min_samples: 500, confidence: 0.95, auto_promote: false}
//! ```
//!
//! Every key is optional; without `tables` (or with `enabled: false`) nothing is tuned.

use serde::{Deserialize, Serialize};

use super::tag::{MAX_ARMS, MAX_TABLES};

/// The longest `feedback_ttl_s` may be: 30 days.
pub const MAX_FEEDBACK_TTL_S: u64 = 30 * 86_400;
/// The most `max_feedback_ids` may be (about 400 MB of ids).
pub const MAX_FEEDBACK_IDS: usize = 10_000_000;

/// `tuning:` — online tuning of table parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TuningConfig {
    /// tune at all
    pub enabled: bool,
    /// the tables whose tunable parameters are tuned
    pub tables: Vec<String>,
    /// the share of each tuned table's decisions served by a variant, in [0, 1]
    pub traffic: f64,
    /// how many variants (parameter moves) are tried per table
    pub variants: usize,
    /// rewards a variant and the baseline each need before the variant can be ready
    pub min_samples: u64,
    /// how sure tuning must be that a variant beats the baseline to call it ready, in (0.5, 1)
    pub confidence: f64,
    /// promote a ready variant without waiting for `POST /tuning/{table}/promote`
    pub auto_promote: bool,
    /// what the rewards are: `auto` (0/1 until another number arrives), `binary`, `real`
    pub reward: RewardSetting,
    /// feedback is accepted for decisions at most this many seconds old
    pub feedback_ttl_s: u64,
    /// the most ids of counted feedback held to recognise repeats (about 40 bytes each); beyond
    /// it the oldest are forgotten
    pub max_feedback_ids: usize,
}

impl Default for TuningConfig {
    fn default() -> Self {
        TuningConfig {
            enabled: true,
            tables: Vec::new(),
            traffic: 0.05,
            variants: 6,
            min_samples: 500,
            confidence: 0.95,
            auto_promote: false,
            reward: RewardSetting::Auto,
            feedback_ttl_s: 86_400,
            max_feedback_ids: super::state::MAX_COUNTED,
        }
    }
}

/// `tuning.reward`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RewardSetting {
    /// Beta posteriors while every reward is 0 or 1; the Normal model from the first other number
    #[default]
    Auto,
    /// rewards must be 0 or 1 (others are refused)
    Binary,
    /// rewards are real numbers
    Real,
}

impl TuningConfig {
    /// Whether any table is tuned.
    pub fn active(&self) -> bool {
        self.enabled && !self.tables.is_empty()
    }

    /// Values that cannot work, as (key under `tuning`, message) pairs: the caller prefixes
    /// `tuning.` and places them in the file.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if !(0.0..=1.0).contains(&self.traffic) {
            out.push((
                "traffic",
                format!(
                    "{} is not a share: write a number from 0 (variants serve nothing) to 1 (variants serve every decision)",
                    self.traffic
                ),
            ));
        }
        if self.variants == 0 || self.variants >= MAX_ARMS {
            out.push((
                "variants",
                format!("{} cannot work: write at least 1 and at most {}", self.variants, MAX_ARMS - 1),
            ));
        }
        if self.min_samples == 0 {
            out.push(("min_samples", "0 cannot work: a variant needs rewards before it can be judged".into()));
        }
        if !(self.confidence > 0.5 && self.confidence < 1.0) {
            out.push((
                "confidence",
                format!("{} cannot work: write a probability above 0.5 and below 1, such as 0.95", self.confidence),
            ));
        }
        if self.feedback_ttl_s == 0 || self.feedback_ttl_s > MAX_FEEDBACK_TTL_S {
            out.push((
                "feedback_ttl_s",
                format!("{} s cannot work: write at least 1 and at most {MAX_FEEDBACK_TTL_S}", self.feedback_ttl_s),
            ));
        }
        if self.max_feedback_ids == 0 || self.max_feedback_ids > MAX_FEEDBACK_IDS {
            out.push((
                "max_feedback_ids",
                format!(
                    "{} cannot work: write at least 1 and at most {MAX_FEEDBACK_IDS} (each id held takes about 40 bytes)",
                    self.max_feedback_ids
                ),
            ));
        }
        if self.tables.len() > MAX_TABLES {
            out.push(("tables", format!("{} tables: at most {MAX_TABLES} are tuned at once", self.tables.len())));
        }
        let mut seen: Vec<&str> = Vec::new();
        for t in &self.tables {
            if t.is_empty() {
                out.push(("tables", "an empty table name".into()));
            } else if seen.contains(&t.as_str()) {
                out.push(("tables", format!("`{t}` is listed twice")));
            }
            seen.push(t);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> Result<TuningConfig, String> {
        let indented: String = text.lines().map(|l| format!("  {l}\n")).collect();
        crate::config::parse_text("config.yaml", &format!("tuning:\n{indented}"))
            .map(|c| c.tuning)
            .map_err(|d| d.iter().map(|d| d.message.clone()).collect::<Vec<_>>().join("; "))
    }

    #[test]
    fn defaults_and_the_spec_example() {
        let c = yaml(
            "{enabled: true, tables: [search_rewrite], traffic: 0.05, variants: 6,\n min_samples: 500, confidence: 0.95, auto_promote: false}",
        )
        .unwrap();
        assert_eq!(c.tables, ["search_rewrite"]);
        assert!(c.active());
        assert!(c.problems().is_empty());
        assert!(!TuningConfig::default().active());
    }

    #[test]
    fn unknown_keys_and_values_that_cannot_work() {
        let e = yaml("trafic: 0.1").unwrap_err();
        assert!(e.contains("trafic") && e.contains("traffic"), "{e}");
        let c = TuningConfig {
            traffic: 1.5,
            variants: 0,
            min_samples: 0,
            confidence: 1.0,
            feedback_ttl_s: 0,
            max_feedback_ids: 0,
            tables: vec!["a".into(), "a".into()],
            ..TuningConfig::default()
        };
        let keys: Vec<&str> = c.problems().iter().map(|(k, _)| *k).collect();
        assert_eq!(
            keys,
            ["traffic", "variants", "min_samples", "confidence", "feedback_ttl_s", "max_feedback_ids", "tables"]
        );
    }
}
