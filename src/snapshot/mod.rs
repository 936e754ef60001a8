//! Decision snapshots (SPEC §8.1) and their replay (SPEC §8.2).
//!
//! **What.** With snapshots on, every decision gets a UUIDv7 `snapshot_id` ([`id`]); a sampled
//! share of them (and every decision of the `always_keep` classes) is written, one NDJSON line
//! each ([`record`]), to segment files in `snapshots.dir`: everything needed to replay the
//! decision exactly — the input as received, what decided it (the table's name, kind, served
//! and file versions, the parameter values in force, the tuning arm, the rules switched off at
//! that moment, a rollback pin, a canary's role), the caller's `traceparent`, the outcome and
//! its latency. `clef replay` ([`replay`]) streams them back ([`reader`]) through a table and
//! scores it.
//!
//! **Key idea.** Recording must cost the decision next to nothing and never wait for the disk.
//! A worker encodes the line by hand straight into its own core's buffer ([`writer`]): no
//! allocation, no serde, no channel operation per decision, one uncontended lock. One writer
//! thread takes the buffers every `flush_ms / 2` (or sooner when one is half full), and appends
//! them to the current segment with one write per batch, each batch (up to 1 MiB) one zstd
//! frame. A full buffer refuses the snapshot and counts it; the decision goes on. The batches
//! also form the recent window that `GET /snapshots/{id}` and `GET /snapshots` ([`recent`])
//! answer from.
//!
//! **Why it survives a crash.** A segment is only ever appended to, by one writer, in whole
//! batches; a new process never appends to an old segment (it starts the next sequence
//! number). So after `kill -9` or a power cut, a segment is a run of complete batches possibly
//! followed by one torn batch: a last line without its `\n`, or a zstd frame cut short (its
//! checksum and its end are missing). Every reader skips exactly that torn tail and counts it;
//! everything flushed before it stays readable. Against power loss the writer `fdatasync`s at
//! most every `Settings::sync_interval` (10 s), when a segment closes, on an explicit flush and
//! at shutdown — not at every flush, because an SD card wears with every rewrite of a partly
//! filled page and every journal commit; a process crash loses nothing already written.

pub mod config;
pub mod id;
pub mod metrics;
pub mod reader;
pub mod recent;
pub mod record;
pub mod segment;
pub mod writer;

pub use config::{Compress, KeepClass, KeepDays, SnapshotsConfig};
pub use id::{next_id, next_id_at, IdText, SnapshotId};
pub use reader::{ReadStats, SnapshotReader};
pub use recent::{Listing, RecentQuery};
pub use record::{Event, RawRecord, Redact, Shadow};
pub use writer::{RecordOutcome, Recorder, Settings, Stats, Status};
