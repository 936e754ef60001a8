//! Tuning's figures for `GET /metrics` (`clef_tuning_…`): the tuner makes its collector, and the
//! scrape encodes it with the server's families.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use super::Tuner;

/// Tuning's figures (`clef_tuning_…`), when tuning is on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TuningFigures {
    /// ids of counted feedback held to recognise repeats
    pub feedback_ids: u64,
    /// ids forgotten (oldest first) to stay within `tuning.max_feedback_ids`
    pub feedback_ids_forgotten: u64,
}

/// The tuning families of a scrape.
#[derive(Debug)]
pub struct TuningCollector(pub TuningFigures);

impl Tuner {
    /// Its figures now, as a scrape encodes them.
    pub fn collector(&self) -> TuningCollector {
        let (held, forgotten) = self.feedback_ids();
        TuningCollector(TuningFigures { feedback_ids: held as u64, feedback_ids_forgotten: forgotten })
    }
}

impl Collector for TuningCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let t = &self.0;
        let help = "Ids of counted feedback held to recognise a repeat";
        ConstGauge::new(t.feedback_ids).encode(encoder.encode_descriptor(
            "clef_tuning_feedback_ids",
            help,
            None,
            MetricType::Gauge,
        )?)?;
        let help = "Ids of counted feedback forgotten, oldest first, to stay within tuning.max_feedback_ids";
        ConstCounter::new(t.feedback_ids_forgotten).encode(encoder.encode_descriptor(
            "clef_tuning_feedback_ids_forgotten",
            help,
            None,
            MetricType::Counter,
        )?)?;
        Ok(())
    }
}
