//! `clef serve [-c config.yaml] [--port N] [--host H]`

use std::path::Path;

use crate::config::{self, Overrides};
use crate::logging;

pub fn run(config_path: Option<&Path>, port: Option<u16>, host: Option<String>) -> i32 {
    let loaded = match config::load(config_path, &Overrides { port, host }) {
        Ok(l) => l,
        Err(diagnostics) => {
            for d in diagnostics {
                eprintln!("{d}");
            }
            eprintln!("clef: the configuration is invalid; not starting");
            return 2;
        }
    };
    let level = match loaded.config.logging.level {
        config::LogLevel::Error => log::LevelFilter::Error,
        config::LogLevel::Warn => log::LevelFilter::Warn,
        config::LogLevel::Info => log::LevelFilter::Info,
        config::LogLevel::Debug => log::LevelFilter::Debug,
        config::LogLevel::Trace => log::LevelFilter::Trace,
    };
    let format = match loaded.config.logging.format {
        config::LogFormat::Json => logging::Format::Json,
        config::LogFormat::Text => logging::Format::Text,
    };
    logging::init(level, format);
    log::info!("configuration: {}", loaded.path.display());
    crate::server::run(loaded)
}
