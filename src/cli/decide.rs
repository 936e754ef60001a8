//! `clef decide TABLE [INPUT|-] [--explain]`

use crate::decide as pipeline;
use crate::server::errors::ApiError as _;
use crate::table::{Limits, Table};
use std::io::Read;
use std::path::Path;

pub fn run(table_path: &Path, input: Option<&Path>, explain: bool) -> i32 {
    let table = match Table::load(table_path, &Limits::default()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    let body = match read_input(input) {
        Ok(b) => b,
        Err((what, e)) => {
            eprintln!("error: cannot read {what}: {e}");
            return 2;
        }
    };
    let mut out = String::new();
    let options = pipeline::Options { explain, ..pipeline::Options::default() };
    match pipeline::decide(&table, &body, &options, &mut out) {
        Ok(_) => {
            outln!("{out}");
            0
        }
        Err(e) => {
            let from = input.map(|p| p.display().to_string()).unwrap_or_else(|| "stdin".into());
            eprintln!("error: {}: {from}: {e}", e.error_code().as_str());
            2
        }
    }
}

/// The input of `clef decide`: the file named, or standard input. `Err` names what could not be
/// read (`stdin` or the file) and why.
fn read_input(input: Option<&Path>) -> Result<Vec<u8>, (String, std::io::Error)> {
    match input {
        Some(p) if p != Path::new("-") => std::fs::read(p).map_err(|e| (p.display().to_string(), e)),
        _ => {
            let mut buf = Vec::new();
            std::io::stdin().read_to_end(&mut buf).map_err(|e| ("stdin".to_string(), e))?;
            Ok(buf)
        }
    }
}
