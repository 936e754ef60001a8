//! The snapshot recorder's figures for `GET /metrics` (`clef_snapshots_…`): the recorder makes
//! its collector, and the scrape encodes it with the server's families.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use super::Recorder;

/// The snapshot recorder's figures (`clef_snapshots_…`), when snapshots are on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotFigures {
    /// snapshots queued for disk
    pub recorded: u64,
    /// decisions left off disk by `sample_rate`
    pub sampled_out: u64,
    /// snapshots dropped because the queue was full
    pub dropped: u64,
    /// bytes waiting for the writer now
    pub queued_bytes: u64,
    /// memory the recorder's queue and recent window take now
    pub memory_bytes: u64,
    /// bytes written to segment files (after compression)
    pub written_bytes: u64,
    /// failed writes, syncs, opens and deletes
    pub write_errors: u64,
    /// snapshots lost to failed writes
    pub lost: u64,
    /// snapshot bytes the disk refused, kept to be written again
    pub retry_bytes: u64,
    /// 1 while the writer cannot store snapshots (its last attempt failed), else 0
    pub failing: u64,
    /// times the snapshots folder was found missing and made again
    pub folder_recreated: u64,
    /// bytes the segment files take now
    pub disk_bytes: u64,
    /// segment files now
    pub segments: u64,
}

/// The snapshot families of a scrape.
#[derive(Debug)]
pub struct SnapshotCollector(pub SnapshotFigures);

impl Recorder {
    /// Its figures now, as a scrape encodes them.
    pub fn collector(&self) -> SnapshotCollector {
        let s = self.stats();
        SnapshotCollector(SnapshotFigures {
            recorded: s.recorded,
            sampled_out: s.sampled_out,
            dropped: s.dropped,
            queued_bytes: s.queued_bytes,
            memory_bytes: s.queue_memory_bytes + s.recent_bytes,
            written_bytes: s.bytes_written,
            write_errors: s.write_errors,
            lost: s.lost,
            retry_bytes: s.retry_bytes,
            failing: u64::from(self.health().failing_since.is_some()),
            folder_recreated: s.folder_recreated,
            disk_bytes: s.disk_bytes,
            segments: s.segments,
        })
    }
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let s = &self.0;
        let counters = [
            ("clef_snapshots_recorded", "Decision snapshots queued for disk", s.recorded),
            ("clef_snapshots_sampled_out", "Decisions left off disk by snapshots.sample_rate", s.sampled_out),
            ("clef_snapshots_dropped", "Snapshots dropped because the writer could not keep up", s.dropped),
            ("clef_snapshots_written_bytes", "Bytes written to snapshot segment files", s.written_bytes),
            (
                "clef_snapshots_write_errors",
                "Failed writes, syncs, opens and deletes of snapshot segments",
                s.write_errors,
            ),
            ("clef_snapshots_lost", "Snapshots lost to failed writes", s.lost),
            (
                "clef_snapshots_folder_recreated",
                "Times the snapshots folder was found deleted and made again",
                s.folder_recreated,
            ),
        ];
        for (name, help, value) in counters {
            ConstCounter::new(value).encode(encoder.encode_descriptor(name, help, None, MetricType::Counter)?)?;
        }
        let gauges = [
            ("clef_snapshots_queued_bytes", "Snapshot bytes waiting for the writer", s.queued_bytes),
            ("clef_snapshots_memory_bytes", "Memory the snapshot queue and recent window take", s.memory_bytes),
            ("clef_snapshots_disk_bytes", "Bytes the snapshot segment files take", s.disk_bytes),
            ("clef_snapshots_segments", "Snapshot segment files on disk", s.segments),
            ("clef_snapshots_retry_bytes", "Snapshot bytes the disk refused, kept to be written again", s.retry_bytes),
            ("clef_snapshots_failing", "1 while snapshots cannot be stored (the last write failed)", s.failing),
        ];
        for (name, help, value) in gauges {
            ConstGauge::new(value).encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)?;
        }
        Ok(())
    }
}
