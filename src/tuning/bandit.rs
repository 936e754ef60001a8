//! Thompson sampling over a table's arms: the baseline and its variants.
//!
//! **What it does.** Each arm keeps the count, sum and sum of squares of the rewards fed back
//! for its decisions ([`ArmStats`]). From those it gets a posterior belief about its mean reward
//! ([`Posterior`]): a Beta distribution when rewards are 0 or 1, a Student-t around the sample
//! mean when they are real numbers. A tuned decision is served by the variant whose draw from
//! its posterior is highest (Thompson sampling): a variant that looks good is tried more, one
//! that is uncertain still gets tried, one that is clearly worse fades out.
//!
//! **Why draws are made ahead.** A decision must not pay for sampling a Beta distribution per
//! variant (tens of nanoseconds each). Each Thompson draw is independent of the decision it
//! serves, so [`ChoiceTable`] makes 1,024 of them whenever the posteriors change (off the
//! request path) and a decision picks one of them at random: the distribution of choices is
//! exactly Thompson sampling's, at the cost of one random number and one read.
//!
//! **When a variant is ready.** `P(variant's mean > baseline's mean)` is estimated from the two
//! posteriors by Monte Carlo with a fixed seed ([`p_better`]): the same figures give the same
//! answer. A variant is judged when it and the baseline each have `min_samples` rewards, and
//! again at twice, four times, eight times as many ([`look`]); it is ready when that probability
//! reaches the configured confidence corrected for the number of variants and of looks
//! (Bonferroni: 6 variants, 8 looks and confidence 0.95 ask for 1 − 0.05 / 48). Both corrections
//! are there because every extra comparison is another chance for a variant no better than the
//! baseline to look better by luck; without them a tuner that watched its figures after every
//! reward promoted an equal variant in about a third of simulated runs.
// Indexes are arm numbers below the posteriors' length, which the caller built.
#![allow(clippy::indexing_slicing)]

use crate::state_file::CheckFailed;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Beta, Distribution, Normal, StudentT};
use serde::{Deserialize, Serialize};

/// How many Thompson draws a [`ChoiceTable`] holds (a power of two).
pub const CHOICES: usize = 1024;

/// Monte Carlo draws behind one [`p_better`] estimate: its standard error at 0.95 is 0.002.
const P_BETTER_DRAWS: usize = 12_000;

/// What the rewards are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RewardModel {
    /// every reward is 0 or 1 (a click, a conversion): Beta posteriors
    Binary,
    /// rewards are real numbers (revenue, latency saved): Normal model, Student-t posteriors
    Real,
}

/// The rewards fed back for one arm's decisions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ArmStats {
    /// rewards counted
    pub samples: u64,
    /// their sum
    pub sum: f64,
    /// the sum of their squares
    pub sum_sq: f64,
}

impl ArmStats {
    /// Counts one reward.
    pub fn add(&mut self, reward: f64) {
        self.samples += 1;
        self.sum += reward;
        self.sum_sq += reward * reward;
    }

    /// Whether these sums can come from `samples` rewards of `model`: finite, a sum of squares
    /// that is not negative and not below what the sum forces (Cauchy–Schwarz), and for 0/1
    /// rewards a whole number of successes, at most `samples`, equal to its sum of squares.
    pub fn check(&self, model: RewardModel) -> Result<(), CheckFailed> {
        let n = self.samples as f64;
        let (sum, sum_sq) = (self.sum, self.sum_sq);
        let slack = 1e-9 * (1.0 + sum_sq.abs() * n.max(1.0));
        let possible = sum.is_finite()
            && sum_sq.is_finite()
            && sum_sq >= 0.0
            && (self.samples > 0 || (sum == 0.0 && sum_sq == 0.0))
            && sum * sum <= n * sum_sq + slack;
        let binary_ok = model != RewardModel::Binary
            || (sum.fract() == 0.0 && (0.0..=n).contains(&sum) && (sum - sum_sq).abs() <= 1e-9 * n.max(1.0));
        if possible && binary_ok {
            Ok(())
        } else {
            Err(CheckFailed(format!(
                "{} rewards cannot add up to a sum of {sum} and a sum of squares of {sum_sq}{}",
                self.samples,
                if model == RewardModel::Binary { " (each 0 or 1)" } else { "" }
            )))
        }
    }

    /// The mean reward, once there is one.
    pub fn mean(&self) -> Option<f64> {
        (self.samples > 0).then(|| self.sum / self.samples as f64)
    }

    /// The sample variance, once there are two rewards (never negative).
    fn variance(&self) -> Option<f64> {
        if self.samples < 2 {
            return None;
        }
        let n = self.samples as f64;
        let mean = self.sum / n;
        Some(((self.sum_sq - n * mean * mean) / (n - 1.0)).max(0.0))
    }
}

/// The belief about one arm's mean reward, to draw from.
#[derive(Clone, Debug)]
pub enum Posterior {
    /// 0/1 rewards: Beta(1 + successes, 1 + failures)
    Beta(Beta<f64>),
    /// real rewards: `mean + scale × t` with `t` Student-t distributed
    StudentT {
        /// the sample mean
        mean: f64,
        /// the standard error of the mean
        scale: f64,
        /// `t`'s distribution (n − 1 degrees of freedom)
        t: StudentT<f64>,
    },
    /// real rewards, too few for a variance of its own: around the pooled mean of every arm,
    /// as wide as one reward's spread
    Wide(Normal<f64>),
    /// nothing is known at all: every draw ties
    Flat,
}

impl Posterior {
    /// The posterior of `stats` under `model`; `pooled` (every arm's rewards together) stands in
    /// for an arm with too few real-valued rewards of its own.
    pub fn of(stats: &ArmStats, model: RewardModel, pooled: &ArmStats) -> Posterior {
        match model {
            RewardModel::Binary => {
                let successes = stats.sum.clamp(0.0, stats.samples as f64);
                let failures = stats.samples as f64 - successes;
                Beta::new(1.0 + successes, 1.0 + failures).map_or(Posterior::Flat, Posterior::Beta)
            }
            RewardModel::Real => match (stats.mean(), stats.variance()) {
                (Some(mean), Some(var)) => {
                    let dof = (stats.samples - 1) as f64;
                    // a spread of zero (every reward equal) would make the arm certain
                    let scale = var.max(pooled.variance().unwrap_or(0.0) * 1e-6).sqrt() / (stats.samples as f64).sqrt();
                    match StudentT::new(dof) {
                        Ok(t) if scale > 0.0 && scale.is_finite() => Posterior::StudentT { mean, scale, t },
                        _ => Posterior::Flat,
                    }
                }
                _ => match (pooled.mean(), pooled.variance()) {
                    (Some(m), Some(v)) if v > 0.0 && v.is_finite() => {
                        Normal::new(m, v.sqrt()).map_or(Posterior::Flat, Posterior::Wide)
                    }
                    _ => Posterior::Flat,
                },
            },
        }
    }

    /// One draw of the arm's mean reward.
    pub fn draw(&self, rng: &mut SmallRng) -> f64 {
        match self {
            Posterior::Beta(b) => b.sample(rng),
            Posterior::StudentT { mean, scale, t } => mean + scale * t.sample(rng),
            Posterior::Wide(n) => n.sample(rng),
            Posterior::Flat => 0.0,
        }
    }
}

/// Pre-drawn Thompson choices among the variants: entry `i` is the variant (0-based) whose
/// posterior draw was highest in the i-th round. Ties go to a random one of the tied.
#[derive(Clone, Debug)]
pub struct ChoiceTable {
    choices: Box<[u8]>,
}

impl ChoiceTable {
    /// [`CHOICES`] Thompson rounds over `posteriors` (at most 255 of them).
    pub fn draw(posteriors: &[Posterior], rng: &mut SmallRng) -> ChoiceTable {
        let mut choices = vec![0u8; CHOICES];
        if posteriors.len() > 1 {
            for choice in choices.iter_mut() {
                let mut best = f64::NEG_INFINITY;
                let mut tied = 0u32;
                for (i, p) in posteriors.iter().enumerate().take(255) {
                    let x = p.draw(rng);
                    if x > best {
                        best = x;
                        tied = 1;
                        *choice = i as u8;
                    } else if x == best {
                        // reservoir choice among equal draws
                        tied += 1;
                        if rng.random_range(0..tied) == 0 {
                            *choice = i as u8;
                        }
                    }
                }
            }
        }
        ChoiceTable { choices: choices.into_boxed_slice() }
    }

    /// The variant a random number picks.
    #[inline]
    pub fn pick(&self, random: u64) -> usize {
        usize::from(self.choices[(random as usize) & (CHOICES - 1)])
    }
}

/// The probability that the variant's mean reward is above the baseline's, estimated from the
/// two posteriors with a fixed seed (the same figures always give the same estimate).
pub fn p_better(variant: &Posterior, baseline: &Posterior) -> f64 {
    if matches!((variant, baseline), (Posterior::Flat, _) | (_, Posterior::Flat)) {
        return 0.5;
    }
    let mut rng = SmallRng::seed_from_u64(0x5eed_c1ef);
    let mut better = 0usize;
    let mut ties = 0usize;
    for _ in 0..P_BETTER_DRAWS {
        let (v, b) = (variant.draw(&mut rng), baseline.draw(&mut rng));
        if v > b {
            better += 1;
        } else if v == b {
            ties += 1;
        }
    }
    (better as f64 + ties as f64 / 2.0) / P_BETTER_DRAWS as f64
}

/// How many looks at a variant the readiness threshold is corrected for.
pub const LOOKS: usize = 8;

/// The probability a variant must reach to be ready: `confidence`, corrected for comparing
/// `variants` variants with one baseline at [`LOOKS`] looks each.
pub fn ready_threshold(confidence: f64, variants: usize) -> f64 {
    1.0 - (1.0 - confidence) / (variants.max(1) * LOOKS) as f64
}

/// Which look a comparison with `samples` rewards on each side is at: 0 before `min_samples`,
/// then 1 at `min_samples`, 2 at twice as many, 3 at four times, and so on. A variant is
/// judged once per look, not after every reward: judging after every reward would give a
/// variant no better than the baseline many chances to look better by luck.
pub fn look(samples: u64, min_samples: u64) -> u32 {
    if samples < min_samples.max(1) {
        return 0;
    }
    1 + (samples / min_samples.max(1)).ilog2()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(rewards: &[f64]) -> ArmStats {
        let mut s = ArmStats::default();
        rewards.iter().for_each(|r| s.add(*r));
        s
    }

    fn binary(successes: u64, n: u64) -> ArmStats {
        ArmStats { samples: n, sum: successes as f64, sum_sq: successes as f64 }
    }

    #[test]
    fn stats_mean_and_variance() {
        let s = stats(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(s.mean(), Some(2.5));
        assert!((s.variance().unwrap() - 5.0 / 3.0).abs() < 1e-12);
        assert_eq!(ArmStats::default().mean(), None);
        assert_eq!(stats(&[7.0]).variance(), None);
    }

    #[test]
    fn a_clearly_better_binary_arm_is_better_with_high_probability() {
        let pooled = ArmStats::default();
        let good = Posterior::of(&binary(600, 1000), RewardModel::Binary, &pooled);
        let base = Posterior::of(&binary(500, 1000), RewardModel::Binary, &pooled);
        assert!(p_better(&good, &base) > 0.99);
        assert!(p_better(&base, &good) < 0.01);
        let same = Posterior::of(&binary(500, 1000), RewardModel::Binary, &pooled);
        let p = p_better(&same, &base);
        assert!((0.45..0.55).contains(&p), "{p}");
    }

    #[test]
    fn real_rewards_use_the_sample_spread() {
        let a = stats(&[10.0, 11.0, 9.0, 10.5, 9.5, 10.0, 10.2, 9.8]);
        let b = stats(&[8.0, 9.0, 7.0, 8.5, 7.5, 8.0, 8.2, 7.8]);
        let pooled = ArmStats { samples: 16, sum: a.sum + b.sum, sum_sq: a.sum_sq + b.sum_sq };
        let pa = Posterior::of(&a, RewardModel::Real, &pooled);
        let pb = Posterior::of(&b, RewardModel::Real, &pooled);
        assert!(p_better(&pa, &pb) > 0.99);
        // one reward: as wide as the pooled spread, centred on the pooled mean
        assert!(matches!(Posterior::of(&stats(&[3.0]), RewardModel::Real, &pooled), Posterior::Wide(_)));
        assert!(matches!(
            Posterior::of(&ArmStats::default(), RewardModel::Real, &ArmStats::default()),
            Posterior::Flat
        ));
        // equal rewards do not make an arm certain (and do not panic)
        let flat = stats(&[5.0; 10]);
        let _ = Posterior::of(&flat, RewardModel::Real, &pooled).draw(&mut SmallRng::seed_from_u64(1));
    }

    #[test]
    fn choices_follow_the_posteriors() {
        let pooled = ArmStats::default();
        let arms = [binary(10, 100), binary(90, 100), binary(50, 100)];
        let posteriors: Vec<Posterior> = arms.iter().map(|s| Posterior::of(s, RewardModel::Binary, &pooled)).collect();
        let table = ChoiceTable::draw(&posteriors, &mut SmallRng::seed_from_u64(7));
        let mut counts = [0usize; 3];
        for i in 0..CHOICES as u64 {
            counts[table.pick(i)] += 1;
        }
        assert!(counts[1] > CHOICES * 95 / 100, "{counts:?}");
        // no information: ties spread evenly
        let flat = vec![Posterior::Flat, Posterior::Flat, Posterior::Flat, Posterior::Flat];
        let table = ChoiceTable::draw(&flat, &mut SmallRng::seed_from_u64(7));
        let mut counts = [0usize; 4];
        for i in 0..CHOICES as u64 {
            counts[table.pick(i)] += 1;
        }
        assert!(counts.iter().all(|&c| c > CHOICES / 8), "{counts:?}");
    }

    #[test]
    fn the_threshold_corrects_for_variants_and_looks() {
        assert!((ready_threshold(0.95, 1) - (1.0 - 0.05 / 8.0)).abs() < 1e-12);
        assert!((ready_threshold(0.95, 5) - (1.0 - 0.05 / 40.0)).abs() < 1e-12);
        assert!((ready_threshold(0.95, 0) - ready_threshold(0.95, 1)).abs() < 1e-12);
        let looks: Vec<u32> =
            [0, 499, 500, 999, 1000, 1999, 2000, 4000, 64_000].iter().map(|&n| look(n, 500)).collect();
        assert_eq!(looks, [0, 0, 1, 1, 2, 2, 3, 4, 8]);
    }
}
