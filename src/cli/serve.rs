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
    let level = loaded.config.logging.level.to_level_filter();
    let format = match loaded.config.logging.format {
        config::LogFormat::Json => logging::Format::Json,
        config::LogFormat::Text => logging::Format::Text,
    };
    logging::init(level, format);
    log::info!("configuration: {}", loaded.path.display());
    for (calls, file, token) in [
        ("decision", &loaded.config.server.token_file, &loaded.server_token),
        ("admin", &loaded.config.admin.token_file, &loaded.admin_token),
    ] {
        match (file, token) {
            (Some(file), Some(_)) => log::info!("{calls} calls need the bearer token in {}", file.display()),
            _ => log::info!("{calls} calls need no token"),
        }
    }
    crate::server::run(loaded)
}
