//! Online tuning of table parameters with Thompson sampling (SPEC §9).
//!
//! **What it does.** For each table in `tuning.tables`, the table's tunable parameters are
//! moved by a step each way to make variants ([`variants`]); each variant is the same table
//! compiled with those values (folded into the conditions like any parameter, so a variant is
//! as fast as the table). A `traffic` share of the table's decisions is served by a variant
//! picked by Thompson sampling ([`bandit`]), the rest by the baseline (the table as it is).
//! Callers report how each decision turned out with `POST /feedback {snapshot_id, reward}`;
//! `GET /tuning/{table}` shows each arm's rewards and how likely it beats the baseline; a
//! variant that beats it with the configured confidence after `min_samples` rewards is
//! *ready*, and promoting it (by hand or `auto_promote`) stores its values as an overlay in
//! `state_dir` that the registry applies to the table — the file is never rewritten;
//! `clef tune export` prints the table with them, to commit.
//!
//! **The request path** reads one published [`Live`] per tuned table (an `ArcSwap`, no lock):
//! the arms' compiled tables and 1,024 pre-drawn Thompson choices. Its `snapshot_id` carries
//! which arm decided ([`tag`]), so feedback needs no per-decision record. What the baseline's
//! decisions (1 − `traffic` of them) need — which table version is tuned, the baseline's tag
//! key, the traffic threshold — is also kept in plain atomics under a sequence lock
//! ([`Tuner::baseline_of`]): finding a table's tuning is then a few loads, with neither a name
//! compared nor the `ArcSwap`'s atomic read-modify-writes; only a variant's decision loads
//! the `Live`. The traffic coin is the 32 random bits of the decision's id, which its tag then
//! replaces (so the coin stays secret, and no second random number is drawn); a variant's
//! decision draws one more, for the choice.
//!
//! **One thread does the rest** (`clef-tuning`, every 100 ms): it rebuilds a table's arms when
//! the registry serves a new version of it (and starts its rewards over: a new generation, so
//! feedback for decisions of the old arms is refused), redraws the choices and the figures of
//! `GET /tuning` after new feedback, saves the state every few seconds, and auto-promotes.
//! Feedback only takes a short lock the decisions never take.
// Indexes here are tuned-table slots (checked against `tables.len()` when a tag is read) and
// arm numbers of arms built together with their statistics; the tuning thread owns both.
#![allow(clippy::indexing_slicing)]

pub mod bandit;
pub mod config;
pub mod metrics;
pub mod state;
pub mod tag;
pub mod variants;

use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwapOption;
use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::per_core::{random_u64, share_threshold};
use crate::registry::overlay;
use crate::render::ArmName;
use crate::snapshot::SnapshotId;
use crate::table::Table;
use bandit::{ArmStats, ChoiceTable, Posterior, RewardModel};
pub use config::{RewardSetting, TuningConfig};
use state::{ArmState, Counted, TableState};
use tag::{ArmKey, Tag, Tagger};
use variants::Arm;

/// How often the tuning thread looks at the tables and the feedback.
pub const TICK: Duration = Duration::from_millis(100);
/// How often changed rewards are saved.
const SAVE_EVERY: Duration = Duration::from_secs(5);

/// Online tuning for every table of `tuning.tables`.
#[derive(Debug)]
pub struct Tuner {
    config: TuningConfig,
    folder: PathBuf,
    tagger: Tagger,
    tables: Vec<Tuned>,
    /// the rewards; taken by feedback and by the tuning thread, never by decisions
    ledger: Mutex<Ledger>,
    /// new feedback since the choices were last drawn
    fed: AtomicBool,
    /// `traffic × 2^64`
    traffic: u64,
}

/// One tuned table: what decisions read, and what `GET /tuning/{table}` answers.
#[derive(Debug)]
struct Tuned {
    name: String,
    live: ArcSwapOption<Live>,
    /// what the baseline's decisions need of `live`, without loading it
    fast: Fast,
    report: ArcSwapOption<String>,
    /// the served version last found to have no tunable parameter: said once, and not looked
    /// at again until another version serves (only the tuning thread takes it)
    untunable: Mutex<Option<Arc<Table>>>,
}

/// The table version a [`Live`] tunes, the baseline's tag key and the traffic threshold, as
/// atomics under a sequence lock: an even `seq` that is the same before and after reading the
/// rest means the rest was read whole. Only the tuning thread writes (under `write`), and it
/// writes this before it publishes the `Live` it describes, so that `table` never holds the
/// address of a table no `Live` keeps alive.
#[derive(Debug, Default)]
struct Fast {
    seq: AtomicU64,
    /// `Arc::as_ptr` of the tuned table as a number (0: none)
    table: AtomicUsize,
    key: [AtomicU64; 4],
    bits: AtomicU64,
    threshold: AtomicU64,
    write: Mutex<()>,
}

/// What a baseline decision of a tuned table needs: its tag key and the traffic threshold.
#[derive(Clone, Copy, Debug)]
pub struct Baseline {
    slot: usize,
    key: ArmKey,
    /// `traffic × 2^64`, 0 when the table has no variants
    threshold: u64,
}

/// The arm that makes one tuned decision, drawn by [`Tuner::draw`], and the decision's id
/// tagged with it. The id is tagged as the arm is drawn, while the arm's key is at hand.
pub struct Drawn {
    /// the decision's id, tagged with the drawn arm (for `/feedback`)
    id: SnapshotId,
    /// a variant, with the arms it is one of (`None`: the baseline, the table as served)
    variant: Option<(arc_swap::Guard<Option<Arc<Live>>>, Choice)>,
}

impl std::fmt::Debug for Drawn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.variant {
            None => f.write_str("Baseline"),
            Some((_, choice)) => write!(f, "Variant({})", choice.arm),
        }
    }
}

/// A tuned table's arms, as decisions use them.
#[derive(Debug)]
pub struct Live {
    /// the table the registry served when the arms were made: the baseline
    pub baseline: Arc<Table>,
    /// the variants' tables (arm `i` is `variants[i - 1]`)
    variants: Vec<Arc<Table>>,
    /// every arm's id and texts, baseline first
    arms: Vec<ArmText>,
    generation: u32,
    choices: ChoiceTable,
    /// `traffic × 2^64`, 0 without variants
    threshold: u64,
}

/// The rewards of every tuned table, and the feedback already counted.
#[derive(Debug, Default)]
struct Ledger {
    tables: Vec<Option<TableLedger>>,
    counted: Counted,
    saved: Option<Instant>,
    dirty: bool,
}

#[derive(Debug, Clone)]
struct TableLedger {
    state: TableState,
    /// a variant was promoted in this generation (auto_promote promotes once)
    promoted: bool,
}

/// The arm chosen for one decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    /// 0: the baseline; `i`: variant `vi`
    pub arm: usize,
}

/// Why feedback was refused.
#[derive(Clone, Debug, PartialEq)]
pub enum FeedbackError {
    /// the body is not JSON
    InvalidJson(crate::input::InputError),
    /// the body is JSON but not `{"snapshot_id", "reward"}`
    InvalidBody(String),
    /// the id is not a UUID
    BadId(String),
    /// the reward is not a number this table takes
    BadReward(String),
    /// no tuned decision of this server has the id (or it expired)
    Unknown(String),
}

impl std::fmt::Display for FeedbackError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FeedbackError::InvalidJson(e) => e.fmt(f),
            FeedbackError::InvalidBody(m)
            | FeedbackError::BadId(m)
            | FeedbackError::BadReward(m)
            | FeedbackError::Unknown(m) => f.write_str(m),
        }
    }
}

/// Why a promotion did not happen.
#[derive(Clone, Debug, PartialEq)]
pub enum PromoteError {
    /// the table is not tuned (or has no tunable parameters)
    NotTuned(String),
    /// no variant is ready, and none was named
    NotReady(String),
    /// the named variant does not exist
    UnknownVariant(String),
    /// the overlay could not be written
    Io(String),
}

impl std::fmt::Display for PromoteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PromoteError::NotTuned(m) | PromoteError::NotReady(m) | PromoteError::UnknownVariant(m) => f.write_str(m),
            PromoteError::Io(m) => write!(f, "cannot store the promoted values: {m}"),
        }
    }
}

impl Tuner {
    /// The tuner of `config`, keeping its files in `state_dir/tuning/` (the tagging key is read
    /// from there, or made and saved).
    pub fn new(config: &TuningConfig, state_dir: &Path) -> std::io::Result<Tuner> {
        let folder = state::folder(state_dir);
        let key_path = folder.join("key.json");
        let key = match state::read_json::<[u64; 2]>(&key_path) {
            Ok(Some(k)) => k,
            other => {
                if let Err(e) = other {
                    log::warn!("tuning: {e}; making a new key (feedback for decisions made before is refused)");
                }
                let k = [random_u64(), random_u64()];
                let text = serde_json::to_vec(&k)?;
                crate::files::write_atomically(&key_path, &text)
                    .map_err(|e| std::io::Error::new(e.kind(), format!("cannot write {}: {e}", key_path.display())))?;
                k
            }
        };
        let tables = config
            .tables
            .iter()
            .map(|name| Tuned {
                name: name.clone(),
                live: ArcSwapOption::empty(),
                fast: Fast::default(),
                report: ArcSwapOption::empty(),
                untunable: Mutex::new(None),
            })
            .collect();
        let ledger = Ledger {
            tables: vec![None; config.tables.len()],
            counted: Counted::new(config.max_feedback_ids),
            ..Ledger::default()
        };
        Ok(Tuner {
            traffic: share_threshold(config.traffic),
            config: config.clone(),
            folder,
            tagger: Tagger::new(key),
            tables,
            ledger: Mutex::new(ledger),
            fed: AtomicBool::new(false),
        })
    }

    /// The names of the tuned tables.
    pub fn table_names(&self) -> impl Iterator<Item = &str> {
        self.tables.iter().map(|t| t.name.as_str())
    }

    /// What a decision by `table` needs to be tuned, when `table` is the version whose arms
    /// are built (see [`Fast`]); `None`: the table is not tuned, or not this version of it.
    #[inline]
    pub fn baseline_of(&self, table: &Arc<Table>) -> Option<Baseline> {
        let addr = Arc::as_ptr(table) as usize;
        let (slot, tuned) =
            self.tables.iter().enumerate().find(|(_, t)| t.fast.table.load(Ordering::Relaxed) == addr)?;
        let f = &tuned.fast;
        let seq = f.seq.load(Ordering::Acquire);
        let read_table = f.table.load(Ordering::Relaxed);
        let key = std::array::from_fn(|i| f.key[i].load(Ordering::Relaxed));
        let bits = f.bits.load(Ordering::Relaxed) as u32;
        let threshold = f.threshold.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        if seq & 1 == 0 && f.seq.load(Ordering::Relaxed) == seq {
            return (read_table == addr).then_some(Baseline { slot, key: ArmKey::from_parts(key, bits), threshold });
        }
        // being rewritten just now: read the published arms instead
        let guard = tuned.live.load();
        let live = guard.as_ref().filter(|l| Arc::ptr_eq(&l.baseline, table))?;
        Some(Baseline { slot, key: live.arms.first()?.key, threshold: live.threshold })
    }

    /// The arm for one decision of `table`, whose (untagged) id is `id`: a variant for the
    /// `traffic` share, by Thompson sampling. The coin is the id's 32 random bits, which the
    /// tag replaces (see the module doc).
    #[inline]
    pub fn draw(&self, table: &Arc<Table>, base: Baseline, id: SnapshotId) -> Drawn {
        self.draw_with(table, base, id, random_u64)
    }

    /// [`Tuner::draw`] with the random number that picks the variant given by `pick` (called
    /// only when a variant decides): seeded simulations drive the request path with it.
    #[inline]
    pub fn draw_with(&self, table: &Arc<Table>, base: Baseline, id: SnapshotId, pick: impl FnOnce() -> u64) -> Drawn {
        let coin = (id.as_u128() as u64) << 32;
        if coin >= base.threshold {
            return Drawn { id: base.key.tag(id), variant: None };
        }
        self.draw_variant(table, base.slot, id, pick()).unwrap_or(Drawn { id: base.key.tag(id), variant: None })
    }

    /// A variant of `table` by Thompson sampling with `pick`, unless its arms have changed
    /// meanwhile.
    #[cold]
    fn draw_variant(&self, table: &Arc<Table>, slot: usize, id: SnapshotId, pick: u64) -> Option<Drawn> {
        let live = self.tables.get(slot)?.live.load();
        let (choice, key) = {
            let l = live.as_ref().filter(|l| Arc::ptr_eq(&l.baseline, table) && !l.variants.is_empty())?;
            let choice = Choice { arm: 1 + l.choices.pick(pick) };
            (choice, l.arms.get(choice.arm)?.key)
        };
        Some(Drawn { id: key.tag(id), variant: Some((live, choice)) })
    }

    /// Takes `POST /feedback`'s body: `{"snapshot_id": "…", "reward": 1}`. Answers the JSON to
    /// send back, or why the feedback is refused.
    pub fn feedback(&self, body: &[u8]) -> Result<String, FeedbackError> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Body {
            snapshot_id: String,
            reward: serde_json::Value,
        }
        let body: Body = serde_json::from_slice(body).map_err(|e| match e.classify() {
            serde_json::error::Category::Data => FeedbackError::InvalidBody(format!(
                "{e}; send {{\"snapshot_id\": \"<the decision's snapshot_id>\", \"reward\": 1}}"
            )),
            _ => FeedbackError::InvalidJson(crate::input::InputError::from_serde_syntax(body, &e)),
        })?;
        let id = SnapshotId::parse(&body.snapshot_id).ok_or_else(|| {
            FeedbackError::BadId(format!(
                "\"{}\" is not a snapshot id: ids are UUIDs such as 01a230b8-dbd5-7137-bffb-a4cb18ebdb45",
                body.snapshot_id.escape_debug()
            ))
        })?;
        let reward = match &body.reward {
            serde_json::Value::Bool(b) => f64::from(u8::from(*b)),
            v => v.as_f64().filter(|r| r.is_finite()).ok_or_else(|| {
                FeedbackError::BadReward(format!("\"reward\" must be a number (0 or 1, or any real number), not {v}"))
            })?,
        };
        let now_ms = crate::snapshot::id::unix_ms(SystemTime::now());
        let oldest = now_ms.saturating_sub(self.config.feedback_ttl_s.saturating_mul(1000));
        let unknown = || {
            FeedbackError::Unknown(format!(
                "no tuned decision has the id {}: it was not made by a tuned table of this server, or the table's \
                     tuning started over since (a new version, a promotion)",
                body.snapshot_id
            ))
        };
        let mut ledger = self.ledger.lock();
        let tag = self
            .tagger
            .read(id, |slot| ledger.tables.get(slot).and_then(Option::as_ref).map(|t| t.state.generation))
            .ok_or_else(unknown)?;
        if id.unix_ms() < oldest {
            return Err(FeedbackError::Unknown(format!(
                "the decision {} is older than tuning.feedback_ttl_s ({} s): its feedback is no longer counted",
                body.snapshot_id, self.config.feedback_ttl_s
            )));
        }
        let setting = self.config.reward;
        let binary = reward == 0.0 || reward == 1.0;
        if setting == RewardSetting::Binary && !binary {
            return Err(FeedbackError::BadReward(format!("tuning.reward is binary: a reward is 0 or 1, not {reward}")));
        }
        ledger.counted.expire(oldest);
        let first = ledger.counted.insert(id);
        let name = &self.tables[tag.slot].name;
        let Some(table) = ledger.tables.get_mut(tag.slot).and_then(Option::as_mut) else { return Err(unknown()) };
        let Some(arm) = table.state.arms.get_mut(tag.arm) else { return Err(unknown()) };
        let arm_id = arm.id.clone();
        if first {
            arm.stats.add(reward);
            if !binary && table.state.model == RewardModel::Binary && setting == RewardSetting::Auto {
                log::info!("tuning {name}: a reward of {reward} is not 0 or 1; rewards are real numbers from now on");
                table.state.model = RewardModel::Real;
            }
            ledger.dirty = true;
            self.fed.store(true, Ordering::Release);
        }
        let mut out = String::from("{\"counted\":");
        out.push_str(if first { "true" } else { "false" });
        if !first {
            out.push_str(",\"duplicate\":true");
        }
        out.push_str(",\"table\":");
        crate::expr::json::write_json_string(name, &mut out);
        out.push_str(",\"variant\":");
        crate::expr::json::write_json_string(&arm_id, &mut out);
        out.push('}');
        Ok(out)
    }

    /// The ids of counted feedback held to recognise repeats, and how many were forgotten
    /// (oldest first) to stay within `tuning.max_feedback_ids`.
    pub fn feedback_ids(&self) -> (usize, u64) {
        let ledger = self.ledger.lock();
        (ledger.counted.len(), ledger.counted.evicted())
    }

    /// `GET /tuning/{table}`'s answer, `None` when the table is not tuned.
    pub fn report(&self, name: &str) -> Option<String> {
        let t = self.tables.iter().find(|t| t.name == name)?;
        Some(t.report.load().as_deref().cloned().unwrap_or_else(|| {
            let mut out = String::from("{\"table\":");
            crate::expr::json::write_json_string(name, &mut out);
            out.push_str(",\"status\":\"waiting\",\"message\":\"the table is not loaded, or has no tunable parameters\",\"baseline\":null,\"variants\":[]}");
            out
        }))
    }

    /// One round of the tuning thread: arms rebuilt for tables whose served version changed,
    /// choices and reports redrawn after feedback, state saved, ready variants auto-promoted.
    /// Returns the tables it promoted (the registry must load them again with their overlay).
    /// `serving` gives the table the registry serves under a name.
    pub fn tick(&self, serving: impl Fn(&str) -> Option<Arc<Table>>, rng: &mut SmallRng) -> Vec<String> {
        let fed = self.fed.swap(false, Ordering::AcqRel);
        let mut promoted = Vec::new();
        for (slot, tuned) in self.tables.iter().enumerate() {
            let current = serving(&tuned.name);
            let live = tuned.live.load_full();
            let stale = match (&current, &live) {
                (Some(c), Some(l)) => !Arc::ptr_eq(c, &l.baseline),
                (Some(c), None) => !tuned.untunable.lock().as_ref().is_some_and(|u| Arc::ptr_eq(u, c)),
                (None, _) => false,
            };
            if stale {
                if let Some(c) = &current {
                    self.rebuild(slot, c, rng);
                }
            } else if fed {
                self.redraw(slot, rng);
            }
            if self.config.auto_promote && self.promote_ready(slot) {
                promoted.push(tuned.name.clone());
            }
        }
        self.save_if_due(false);
        promoted
    }

    /// Saves every table's rewards (at shutdown, and every few seconds from `tick`).
    pub fn save(&self) {
        self.save_if_due(true);
    }

    fn save_if_due(&self, now: bool) {
        let mut ledger = self.ledger.lock();
        if !ledger.dirty || (!now && ledger.saved.is_some_and(|t| t.elapsed() < SAVE_EVERY)) {
            return;
        }
        let states: Vec<TableState> = ledger.tables.iter().flatten().map(|t| t.state.clone()).collect();
        ledger.dirty = false;
        ledger.saved = Some(Instant::now());
        drop(ledger);
        for s in states {
            let path = self.rewards_path(&s.table);
            let good =
                |old: &[u8]| serde_json::from_slice::<TableState>(old).is_ok_and(|o| o.check(&s.table, None).is_ok());
            let written = serde_json::to_vec_pretty(&s).map_err(|e| e.to_string()).and_then(|bytes| {
                crate::state_file::save(&path, &bytes, state::MAX_STATE_BYTES, good)
                    .map_err(|e| format!("cannot write {}: {e}", path.display()))
            });
            if let Err(e) = written {
                log::error!("tuning {}: {e}", s.table);
                self.ledger.lock().dirty = true;
            }
        }
    }

    /// Where a tuned table's rewards are saved.
    fn rewards_path(&self, table: &str) -> PathBuf {
        self.folder.join(format!("{table}.json"))
    }

    /// Makes the arms of `table` (newly served) and publishes them; the rewards saved for the
    /// same arms of the same table carry over, anything else starts afresh.
    fn rebuild(&self, slot: usize, table: &Arc<Table>, rng: &mut SmallRng) {
        let tuned = &self.tables[slot];
        let tunables = crate::table::params::tunables(table.params.as_ref());
        *tuned.untunable.lock() = tunables.is_empty().then(|| table.clone());
        if tunables.is_empty() {
            let problems = crate::table::params::problems(table.params.as_ref());
            if problems.is_empty() {
                log::warn!(
                    "tuning {}: the table declares no tunable parameter (\"tunable\": true with a \"step\"); it is not tuned",
                    tuned.name
                );
            } else {
                let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
                log::error!("tuning {}: it is not tuned: {}", tuned.name, problems.join("; "));
            }
            tuned.fast.publish(None);
            tuned.live.store(None);
            tuned.report.store(None);
            self.ledger.lock().tables[slot] = None;
            return;
        }
        let arms = variants::arms(&tunables, self.config.variants);
        let mut built: Vec<Arc<Table>> = Vec::new();
        let mut kept: Vec<Arm> = vec![arms[0].clone()];
        for arm in &arms[1..] {
            match table.with_params(&arm.params) {
                Ok(t) => {
                    built.push(Arc::new(t));
                    kept.push(Arm { id: format!("v{}", kept.len()), params: arm.params.clone() });
                }
                Err(e) => log::warn!("tuning {}: variant with {:?} left out: {e}", tuned.name, arm.params),
            }
        }
        let basis = basis_of(table);
        let path = self.rewards_path(&tuned.name);
        let loaded = crate::state_file::load(&path, state::MAX_STATE_BYTES, |s: &TableState| {
            s.check(&tuned.name, table.params.as_ref())
        });
        match &loaded.problem {
            Some(why) => {
                let afresh = if loaded.value.is_some() { "" } else { "; its rewards start afresh" };
                let (detail, summary) = (&why.detail, &why.summary);
                log::error!("tuning {}: the file of its rewards ({}) {detail}{afresh}", tuned.name, path.display());
                let message = format!("the file of its rewards {summary}{afresh}");
                crate::state_file::report("tuning", &tuned.name, "rewards", message);
            }
            None => crate::state_file::resolve("tuning", &tuned.name, "rewards"),
        }
        let saved = loaded.value;
        let same = |s: &TableState| {
            s.table == tuned.name
                && s.basis == basis
                && s.arms.len() == kept.len()
                && s.arms.iter().zip(&kept).all(|(a, k)| a.id == k.id && a.params.iter().eq(k.params.iter()))
        };
        let restored = self.ledger.lock().tables[slot].as_ref().map(|t| t.state.clone()).filter(same);
        let state = match restored.or_else(|| saved.filter(same)) {
            Some(s) => {
                log::info!("tuning {}: {} arms, rewards carried over", tuned.name, kept.len());
                s
            }
            None => {
                log::info!(
                    "tuning {}: {} variants of {} ({}), rewards start afresh",
                    tuned.name,
                    kept.len() - 1,
                    tunables.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", "),
                    table.version
                );
                TableState {
                    table: tuned.name.clone(),
                    basis,
                    generation: (random_u64() >> 32) as u32,
                    model: if self.config.reward == RewardSetting::Real {
                        RewardModel::Real
                    } else {
                        RewardModel::Binary
                    },
                    arms: kept
                        .iter()
                        .map(|a| ArmState {
                            id: a.id.clone(),
                            params: a.params.clone().into_iter().collect(),
                            stats: ArmStats::default(),
                            judged_at: 0,
                            ready: false,
                        })
                        .collect(),
                }
            }
        };
        let generation = state.generation;
        let arms_json: Vec<ArmText> = kept
            .iter()
            .enumerate()
            .map(|(arm, a)| ArmText {
                id: a.id.clone(),
                params_json: serde_json::to_string(&a.params).unwrap_or_default().into_boxed_str(),
                id_json: crate::expr::json::quote(&a.id).into_boxed_str(),
                key: self.tagger.arm_key(Tag { slot, arm }, generation),
            })
            .collect();
        {
            let mut ledger = self.ledger.lock();
            ledger.tables[slot] = Some(TableLedger { state, promoted: false });
            ledger.dirty = true;
        }
        let choices = self.draw_choices(slot, rng);
        let threshold = if built.is_empty() { 0 } else { self.traffic };
        tuned.fast.publish(Some((table, arms_json[0].key, threshold)));
        tuned.live.store(Some(Arc::new(Live {
            baseline: table.clone(),
            variants: built,
            arms: arms_json,
            generation,
            choices,
            threshold,
        })));
        self.publish_report(slot);
    }

    /// New choices and a new report for `slot` after feedback.
    fn redraw(&self, slot: usize, rng: &mut SmallRng) {
        let tuned = &self.tables[slot];
        let Some(live) = tuned.live.load_full() else { return };
        let choices = self.draw_choices(slot, rng);
        tuned.live.store(Some(Arc::new(Live {
            baseline: live.baseline.clone(),
            variants: live.variants.clone(),
            arms: live.arms.clone(),
            generation: live.generation,
            choices,
            threshold: live.threshold,
        })));
        self.publish_report(slot);
    }

    fn draw_choices(&self, slot: usize, rng: &mut SmallRng) -> ChoiceTable {
        let posteriors = {
            let ledger = self.ledger.lock();
            match ledger.tables.get(slot).and_then(Option::as_ref) {
                Some(t) => posteriors(&t.state),
                None => Vec::new(),
            }
        };
        ChoiceTable::draw(posteriors.get(1..).unwrap_or(&[]), rng)
    }

    /// Each variant's probability of beating the baseline, and whether it is ready: judged
    /// anew when the comparison reaches its next look (see [`bandit::look`]), else as at the
    /// last look. The Monte Carlo runs outside the lock feedback takes.
    fn figures(&self, slot: usize) -> Option<(TableState, Vec<(f64, bool)>)> {
        let mut state = self.ledger.lock().tables.get(slot)?.as_ref()?.state.clone();
        let posts = posteriors(&state);
        let variants = state.arms.len().saturating_sub(1);
        let threshold = bandit::ready_threshold(self.config.confidence, variants);
        let base_samples = state.arms[0].stats.samples;
        let mut judged = Vec::with_capacity(variants);
        let mut verdicts = Vec::new();
        for (i, (a, p)) in state.arms.iter_mut().zip(&posts).enumerate().skip(1) {
            let p_better = bandit::p_better(p, &posts[0]);
            let look = bandit::look(a.stats.samples.min(base_samples), self.config.min_samples);
            if look > a.judged_at {
                a.judged_at = look;
                a.ready = p_better >= threshold;
                verdicts.push((i, look, a.ready));
            }
            judged.push((p_better, a.ready));
        }
        if !verdicts.is_empty() {
            let mut ledger = self.ledger.lock();
            if let Some(t) = ledger.tables.get_mut(slot).and_then(Option::as_mut) {
                if t.state.generation == state.generation {
                    for (i, look, ready) in verdicts {
                        t.state.arms[i].judged_at = look;
                        t.state.arms[i].ready = ready;
                    }
                    ledger.dirty = true;
                }
            }
        }
        Some((state, judged))
    }

    fn publish_report(&self, slot: usize) {
        let tuned = &self.tables[slot];
        let Some((state, judged)) = self.figures(slot) else {
            tuned.report.store(None);
            return;
        };
        let arm_json = |a: &ArmState| {
            serde_json::json!({
                "params": a.params,
                "samples": a.stats.samples,
                "mean_reward": a.stats.mean(),
            })
        };
        let variants: Vec<serde_json::Value> = state.arms[1..]
            .iter()
            .zip(&judged)
            .map(|(a, (p, ready))| {
                let mut v = arm_json(a);
                v["id"] = a.id.clone().into();
                v["p_better"] = serde_json::json!((p * 1e4).round() / 1e4);
                v["ready"] = (*ready).into();
                v
            })
            .collect();
        let report = serde_json::json!({
            "table": tuned.name,
            "status": "tuning",
            "reward": state.model,
            "traffic": self.config.traffic,
            "min_samples": self.config.min_samples,
            "confidence": self.config.confidence,
            "baseline": arm_json(&state.arms[0]),
            "variants": variants,
        });
        tuned.report.store(Some(Arc::new(report.to_string())));
    }

    /// Promotes `variant` (or, without one, the ready variant most likely to beat the baseline)
    /// of `table`: stores its values as the table's overlay. The caller reloads the table.
    /// Answers the promoted values as JSON.
    pub fn promote(&self, table: &str, variant: Option<&str>) -> Result<String, PromoteError> {
        let Some(slot) = self.tables.iter().position(|t| t.name == table) else {
            return Err(PromoteError::NotTuned(format!("table \"{table}\" is not tuned (tuning.tables)")));
        };
        let Some((state, judged)) = self.figures(slot) else {
            return Err(PromoteError::NotTuned(format!(
                "table \"{table}\" is not loaded or has no tunable parameters: nothing to promote"
            )));
        };
        let chosen = match variant {
            Some(v) => state.arms[1..].iter().position(|a| a.id == v).ok_or_else(|| {
                let ids: Vec<&str> = state.arms[1..].iter().map(|a| a.id.as_str()).collect();
                PromoteError::UnknownVariant(format!(
                    "table \"{table}\" has no variant \"{v}\"; its variants are {}",
                    ids.join(", ")
                ))
            })?,
            None => judged
                .iter()
                .enumerate()
                .filter(|(_, (_, ready))| *ready)
                .max_by(|a, b| a.1 .0.total_cmp(&b.1 .0))
                .map(|(i, _)| i)
                .ok_or_else(|| {
                    PromoteError::NotReady(format!(
                        "no variant of \"{table}\" is ready yet (GET /tuning/{table}); name one to promote it anyway: \
                         {{\"variant\": \"v1\"}}"
                    ))
                })?,
        };
        let arm = &state.arms[chosen + 1];
        let live = self.tables[slot].live.load_full();
        let Some(live) = live else { return Err(PromoteError::NotTuned(format!("table \"{table}\" is not loaded"))) };
        overlay::promote(&overlay_folder(&self.folder), &live.baseline, &arm.params)
            .map_err(|e| PromoteError::Io(e.to_string()))?;
        if let Some(t) = self.ledger.lock().tables[slot].as_mut() {
            t.promoted = true;
        }
        log::info!("tuning {table}: promoted {} {}", arm.id, serde_json::Value::Object(arm.params.clone()));
        Ok(serde_json::json!({"table": table, "promoted": arm.id, "params": arm.params}).to_string())
    }

    fn promote_ready(&self, slot: usize) -> bool {
        let already = self.ledger.lock().tables.get(slot).and_then(Option::as_ref).is_none_or(|t| t.promoted);
        if already {
            return false;
        }
        match self.promote(&self.tables[slot].name, None) {
            Ok(_) => true,
            Err(PromoteError::NotReady(_)) => false,
            Err(e) => {
                log::error!("tuning {}: auto_promote: {e}", self.tables[slot].name);
                if let Some(t) = self.ledger.lock().tables[slot].as_mut() {
                    t.promoted = true;
                }
                false
            }
        }
    }

    /// The folder of promoted values (overlays) under `state_dir`, which the registry applies
    /// to the tables it loads.
    pub fn overlay_folder(state_dir: &Path) -> PathBuf {
        overlay_folder(&state::folder(state_dir))
    }
}

impl Live {
    /// The table arm `choice` decides with.
    #[inline]
    pub fn table(&self, choice: Choice) -> &Table {
        match choice.arm {
            0 => &self.baseline,
            i => self.variants.get(i - 1).map_or(&*self.baseline, |t| &**t),
        }
    }

    /// The arm's id (`baseline`, `v1`, …) and its parameter values as JSON.
    pub fn arm(&self, choice: Choice) -> (&str, &str) {
        self.arms.get(choice.arm).map_or(("baseline", "{}"), |a| (a.id.as_str(), &*a.params_json))
    }

    /// The arm's id as a JSON string (`"v1"`).
    pub fn arm_id_json(&self, choice: Choice) -> &str {
        self.arms.get(choice.arm).map_or("\"baseline\"", |a| &*a.id_json)
    }
}

/// What decisions write about an arm, made once when the arms are built.
#[derive(Debug, Clone)]
struct ArmText {
    /// `baseline`, `v1`, …
    id: String,
    /// its parameter values as a JSON object
    params_json: Box<str>,
    /// `id` as a JSON string, for the response
    id_json: Box<str>,
    /// the key its decisions' ids are tagged with
    key: ArmKey,
}

impl Fast {
    /// Describes the `Live` about to be published: its baseline table, the baseline's key and
    /// the traffic threshold (`None`: no arms).
    fn publish(&self, arms: Option<(&Arc<Table>, ArmKey, u64)>) {
        let _only = self.write.lock();
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        let (table, key, threshold) =
            arms.map_or((0, ArmKey::default(), 0), |(t, k, th)| (Arc::as_ptr(t) as usize, k, th));
        let (words, bits) = key.parts();
        self.table.store(table, Ordering::Relaxed);
        for (a, w) in self.key.iter().zip(words) {
            a.store(w, Ordering::Relaxed);
        }
        self.bits.store(u64::from(bits), Ordering::Relaxed);
        self.threshold.store(threshold, Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(2), Ordering::Release);
    }
}

impl Drawn {
    /// The table the drawn arm decides with (`baseline` for the baseline).
    #[inline]
    pub fn table<'a>(&'a self, baseline: &'a Table) -> &'a Table {
        match &self.variant {
            None => baseline,
            Some((live, choice)) => live.as_ref().map_or(baseline, |l| l.table(*choice)),
        }
    }

    /// The decision's id, tagged with the drawn arm: what `/feedback` names it by.
    #[inline]
    pub fn id(&self) -> SnapshotId {
        self.id
    }

    /// The arm as the response names it.
    #[inline]
    pub fn arm_name(&self) -> ArmName<'_> {
        match &self.variant {
            None => ArmName::Baseline,
            Some((live, choice)) => {
                live.as_ref().map_or(ArmName::Baseline, |l| ArmName::Variant(l.arm_id_json(*choice)))
            }
        }
    }

    /// A variant's id and parameter values as JSON, for its snapshot (`None`: the baseline).
    pub fn variant(&self) -> Option<(&str, &str)> {
        let (live, choice) = self.variant.as_ref()?;
        live.as_ref().map(|l| l.arm(*choice))
    }
}

fn overlay_folder(tuning_folder: &Path) -> PathBuf {
    tuning_folder.join("overlays")
}

fn posteriors(state: &TableState) -> Vec<Posterior> {
    let mut pooled = ArmStats::default();
    for a in &state.arms {
        pooled.samples += a.stats.samples;
        pooled.sum += a.stats.sum;
        pooled.sum_sq += a.stats.sum_sq;
    }
    state.arms.iter().map(|a| Posterior::of(&a.stats, state.model, &pooled)).collect()
}

/// What the arms of a table are made from: its file's version and its parameters' values (a
/// promotion changes the values, not the file).
fn basis_of(table: &Table) -> String {
    format!("{}:{}", table.file_version, table.params.as_ref().map(|p| p.to_string()).unwrap_or_default())
}

/// A generator for the tuning thread's draws.
pub fn thread_rng() -> SmallRng {
    SmallRng::seed_from_u64(random_u64())
}
