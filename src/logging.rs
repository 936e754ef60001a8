//! Logs to stderr (journald picks them up), as text or one JSON object per line.

use std::io::Write;
use std::time::SystemTime;

use crate::expr::json::write_json_string;

/// Line format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `2026-11-30T08:23:45.123Z INFO message`
    Text,
    /// `{"ts":"…","level":"info","msg":"…"}`
    Json,
}

struct Logger {
    level: log::LevelFilter,
    format: Format,
}

impl log::Log for Logger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= self.level && metadata.target().starts_with("clef")
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let ts = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        let msg = record.args().to_string();
        let line = match self.format {
            Format::Text => format!("{ts} {:<5} {msg}\n", record.level()),
            Format::Json => {
                let mut s = String::with_capacity(msg.len() + 64);
                s.push_str("{\"ts\":\"");
                s.push_str(&ts);
                s.push_str("\",\"level\":\"");
                s.push_str(&record.level().as_str().to_ascii_lowercase());
                s.push_str("\",\"msg\":");
                write_json_string(&msg, &mut s);
                s.push_str("}\n");
                s
            }
        };
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {}
}

/// Installs the logger once; later calls only change nothing.
pub fn init(level: log::LevelFilter, format: Format) {
    if log::set_boxed_logger(Box::new(Logger { level, format })).is_ok() {
        log::set_max_level(level);
    }
}
