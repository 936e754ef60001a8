//! `snapshots:` in `config.yaml` (SPEC §8.1).
//!
//! ```yaml
//! snapshots: {enabled: true, dir: /var/lib/clef/snapshots, sample_rate: 1.0, keep_days: 7,
//!             max_disk_mb: 512, always_keep: [errors, degraded, shadow_disagreement],
//!             redact: ["card_number", "user.email"], flush_ms: 1000, compress: zstd}
//! ```
//!
//! Every key is optional. A relative `dir` is resolved by the caller (against the folder of the
//! config file), as every path of the config is.

use std::fmt;
use std::path::PathBuf;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

/// The most `redact` paths applied.
pub const MAX_REDACT: usize = 64;

/// The most `max_disk_mb` may say: 1 TiB.
pub const MAX_DISK_MB: u64 = 1 << 20;
/// The longest `flush_ms` may be: one minute.
pub const MAX_FLUSH_MS: u64 = 60_000;
/// The longest `keep_days` may be: ten years.
pub const MAX_KEEP_DAYS: f64 = 3650.0;

/// `snapshots:` — decision snapshots.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SnapshotsConfig {
    /// record snapshots at all
    pub enabled: bool,
    /// where segment files are written; empty (the default) = `snapshots/` in `state_dir`
    pub dir: PathBuf,
    /// share of ordinary decisions written to disk, in [0, 1]; `always_keep` classes are always written
    pub sample_rate: f64,
    /// how long segments are kept: days, or tiered `{all, always_keep}`
    pub keep_days: KeepDays,
    /// the most disk the segments may take, in MiB; the oldest are deleted beyond it
    pub max_disk_mb: u64,
    /// classes of decisions written whatever `sample_rate` says (and kept `keep_days.always_keep`)
    pub always_keep: Vec<KeepClass>,
    /// input fields (dotted paths) replaced by `"<redacted>"` before anything is recorded
    pub redact: Vec<String>,
    /// snapshots reach the segment file within this many milliseconds
    pub flush_ms: u64,
    /// `zstd` (each flushed batch one zstd frame) or `none` (plain NDJSON)
    pub compress: Compress,
}

impl Default for SnapshotsConfig {
    fn default() -> Self {
        SnapshotsConfig {
            enabled: false,
            dir: PathBuf::new(),
            sample_rate: 1.0,
            keep_days: KeepDays::default(),
            max_disk_mb: 512,
            always_keep: vec![KeepClass::Errors, KeepClass::Degraded, KeepClass::ShadowDisagreement],
            redact: Vec::new(),
            flush_ms: 1000,
            compress: Compress::Zstd,
        }
    }
}

/// A class of decisions that sampling never leaves off disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeepClass {
    /// a rule failed to evaluate (the decision has `warnings`)
    Errors,
    /// the answer is `degraded` (a fallback answered)
    Degraded,
    /// the shadow table disagreed with the served one
    ShadowDisagreement,
}

impl KeepClass {
    /// The name in `config.yaml`.
    pub fn name(self) -> &'static str {
        match self {
            KeepClass::Errors => "errors",
            KeepClass::Degraded => "degraded",
            KeepClass::ShadowDisagreement => "shadow_disagreement",
        }
    }
}

/// How segments are compressed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compress {
    /// each flushed batch is one zstd frame (`.ndjson.zst`)
    #[default]
    Zstd,
    /// plain NDJSON (`.ndjson`)
    None,
}

/// `keep_days`: one age for every snapshot, or tiered (`{all: 7, always_keep: 30}`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct KeepDays {
    /// days every snapshot is kept
    pub all: f64,
    /// days snapshots of the `always_keep` classes are kept
    pub always_keep: f64,
}

impl Default for KeepDays {
    fn default() -> Self {
        KeepDays { all: 7.0, always_keep: 7.0 }
    }
}

impl<'de> Deserialize<'de> for KeepDays {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<KeepDays, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = KeepDays;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of days (like `7`) or tiered days (like `{all: 7, always_keep: 30}`)")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<KeepDays, E> {
                Ok(KeepDays { all: v as f64, always_keep: v as f64 })
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<KeepDays, E> {
                Ok(KeepDays { all: v as f64, always_keep: v as f64 })
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<KeepDays, E> {
                Ok(KeepDays { all: v, always_keep: v })
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<KeepDays, E> {
                // environment variables arrive as text
                match v.trim().parse::<f64>() {
                    Ok(n) => Ok(KeepDays { all: n, always_keep: n }),
                    Err(_) => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KeepDays, A::Error> {
                let (mut all, mut keep) = (None, None);
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "all" => all = Some(map.next_value::<Days>()?.0),
                        "always_keep" => keep = Some(map.next_value::<Days>()?.0),
                        other => return Err(de::Error::unknown_field(other, &["all", "always_keep"])),
                    }
                }
                let all = all.ok_or_else(|| de::Error::missing_field("all"))?;
                Ok(KeepDays { all, always_keep: keep.unwrap_or(all) })
            }
        }
        d.deserialize_any(V)
    }
}

/// A number of days, also written as text.
struct Days(f64);

impl<'de> Deserialize<'de> for Days {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Days, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Days;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of days")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Days, E> {
                Ok(Days(v as f64))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Days, E> {
                Ok(Days(v as f64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Days, E> {
                Ok(Days(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Days, E> {
                v.trim().parse().map(Days).map_err(|_| E::invalid_value(de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_any(V)
    }
}

impl SnapshotsConfig {
    /// Values that cannot work, as (key under `snapshots`, message) pairs: the caller prefixes
    /// `snapshots.` and places them in the file.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if !(0.0..=1.0).contains(&self.sample_rate) {
            out.push((
                "sample_rate",
                format!(
                    "{} is not a share: write a number from 0 (keep none but always_keep) to 1 (keep every decision)",
                    self.sample_rate
                ),
            ));
        }
        for (key, days) in [("keep_days", self.keep_days.all), ("keep_days.always_keep", self.keep_days.always_keep)] {
            if !(days > 0.0 && days <= MAX_KEEP_DAYS) {
                out.push((
                    key,
                    format!("{days} days cannot work: write a number of days above 0, at most {MAX_KEEP_DAYS}"),
                ));
            }
        }
        if self.max_disk_mb == 0 || self.max_disk_mb > MAX_DISK_MB {
            out.push((
                "max_disk_mb",
                format!(
                    "{} MiB cannot work: write at least 1 and at most {MAX_DISK_MB} (snapshots: {{enabled: false}} turns them off)",
                    self.max_disk_mb
                ),
            ));
        }
        if self.flush_ms == 0 || self.flush_ms > MAX_FLUSH_MS {
            out.push((
                "flush_ms",
                format!(
                    "{} ms cannot work: write at least 1 and at most {MAX_FLUSH_MS} (snapshots reach disk within it)",
                    self.flush_ms
                ),
            ));
        }
        for path in &self.redact {
            if path.is_empty() || path.split('.').any(str::is_empty) {
                out.push((
                    "redact",
                    format!("`{path}` is not a field path: write names joined by dots, like `user.email`"),
                ));
            }
        }
        if self.redact.len() > MAX_REDACT {
            out.push(("redact", format!("{} paths: at most {} are applied", self.redact.len(), MAX_REDACT)));
        }
        let mut seen = Vec::new();
        for class in &self.always_keep {
            if seen.contains(class) {
                out.push(("always_keep", format!("`{}` is listed twice", class.name())));
            }
            seen.push(*class);
        }
        out
    }

    /// Whether `keep_days` keeps the `always_keep` classes longer than the rest.
    pub fn tiered(&self) -> bool {
        self.keep_days.always_keep != self.keep_days.all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `text` as the `snapshots:` section of a config file.
    fn yaml(text: &str) -> Result<SnapshotsConfig, String> {
        let indented: String = text.lines().map(|l| format!("  {l}\n")).collect();
        crate::config::parse_text("config.yaml", &format!("snapshots:\n{indented}"))
            .map(|c| c.snapshots)
            .map_err(|d| d.iter().map(|d| d.message.clone()).collect::<Vec<_>>().join("; "))
    }

    #[test]
    fn defaults_and_the_spec_example() {
        assert_eq!(yaml("{}").unwrap(), SnapshotsConfig::default());
        let c = yaml(
            "{enabled: true, dir: /var/lib/clef/snapshots, sample_rate: 1.0, keep_days: 7, max_disk_mb: 512, \
             always_keep: [errors, degraded, shadow_disagreement], redact: [card_number, user.email], \
             flush_ms: 1000, compress: none}",
        )
        .unwrap();
        assert!(c.enabled);
        assert_eq!(c.compress, Compress::None);
        assert_eq!(c.redact, ["card_number", "user.email"]);
        assert!(c.problems().is_empty());
        assert!(!c.tiered());
    }

    #[test]
    fn tiered_keep_days() {
        let c = yaml("keep_days: {all: 7, always_keep: 30}").unwrap();
        assert_eq!(c.keep_days, KeepDays { all: 7.0, always_keep: 30.0 });
        assert!(c.tiered());
        assert_eq!(yaml("keep_days: {all: 2}").unwrap().keep_days, KeepDays { all: 2.0, always_keep: 2.0 });
        assert_eq!(yaml("keep_days: 0.5").unwrap().keep_days.all, 0.5);
        assert!(yaml("keep_days: {all: 7, forever: 1}").unwrap_err().contains("forever"));
        assert!(yaml("keep_days: {always_keep: 30}").unwrap_err().contains("all"));
        assert!(yaml("keep_days: soon").is_err());
    }

    #[test]
    fn unknown_keys_and_classes_are_errors() {
        assert!(yaml("sample_rat: 1").unwrap_err().contains("sample_rat"));
        assert!(yaml("always_keep: [warnings]").unwrap_err().contains("warnings"));
        assert!(yaml("compress: gzip").unwrap_err().contains("gzip"));
    }

    #[test]
    fn values_that_cannot_work() {
        let c = SnapshotsConfig {
            sample_rate: 1.5,
            keep_days: KeepDays { all: 0.0, always_keep: 30.0 },
            max_disk_mb: 0,
            flush_ms: 0,
            redact: vec!["user..email".into()],
            always_keep: vec![KeepClass::Errors, KeepClass::Errors],
            ..SnapshotsConfig::default()
        };
        let keys: Vec<&str> = c.problems().iter().map(|p| p.0).collect();
        assert_eq!(keys, ["sample_rate", "keep_days", "max_disk_mb", "flush_ms", "redact", "always_keep"]);
    }
}
