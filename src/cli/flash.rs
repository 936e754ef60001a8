//! `clef flash compile SOURCE [-o OUT.cfb]` and `clef flash inspect FILE.cfb`.
// `clef flash inspect`: positions come from a table that loaded, whose cells, ranges and default
// name actions and values that exist.
#![allow(clippy::indexing_slicing)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::table::digest_hex as hex;
use crate::table::flash::{cfb, source, FlashTable};
use crate::table::{table_name, MAX_TABLE_BYTES};

/// Compiles a `.flash.json` into a `.cfb`; exit 1 on any problem (as `clef check`).
pub fn compile(source_path: &Path, output: Option<&Path>) -> i32 {
    let shown = source_path.display().to_string();
    let bytes = match crate::files::read_limited(source_path, MAX_TABLE_BYTES) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{shown}:1:1: error: cannot read the file: {e}");
            return 1;
        }
    };
    let table = match source::compile(&shown, &bytes) {
        Ok(t) => t,
        Err(diagnostics) => {
            for d in &diagnostics {
                eprintln!("{d}");
            }
            return 1;
        }
    };
    let out = output.map(Path::to_path_buf).unwrap_or_else(|| compiled_path(source_path));
    if same_file(&out, source_path) {
        eprintln!("error: the output {} is the source itself; name a .cfb file with -o", out.display());
        return 1;
    }
    let compiled = cfb::write(&table);
    if let Err(e) = crate::files::write_atomically(&out, &compiled) {
        eprintln!("error: cannot write {}: {e}", out.display());
        return 1;
    }
    outln!(
        "{}: flash table \"{}\" ({}), {} bytes, from {shown} (SHA-256 {})",
        out.display(),
        table_name(source_path),
        table.summary(),
        compiled.len(),
        &hex(&table.spec().source_sha256)[..12]
    );
    0
}

/// `dir/NAME.flash.json` → `dir/NAME.cfb`: beside its source, which the server pairs it with.
fn compiled_path(source: &Path) -> PathBuf {
    source.with_file_name(format!("{}.cfb", table_name(source)))
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// Prints what a `.cfb` holds; exit 1 when it cannot be read.
pub fn inspect(path: &Path) -> i32 {
    let shown = path.display().to_string();
    // Read up to the limit of any table, so that a file too big for a .cfb is named as such.
    let bytes = match crate::files::read_limited(path, MAX_TABLE_BYTES) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: {shown}: cannot read the file: {e}");
            return 1;
        }
    };
    match cfb::read(&bytes) {
        Ok(table) => {
            out!("{}", describe(path, &bytes, &table));
            0
        }
        Err(e) => {
            eprintln!("error: {shown}: {e}");
            1
        }
    }
}

/// The readable dump of `clef flash inspect`.
pub fn describe(path: &Path, bytes: &[u8], table: &FlashTable) -> String {
    let spec = table.spec();
    let mut o = String::new();
    let checksum = bytes.len().checked_sub(32).and_then(|at| bytes.get(at..)).unwrap_or_default();
    let _ =
        writeln!(o, "file:        {} ({} bytes, .cfb format version {})", path.display(), bytes.len(), cfb::VERSION);
    let _ = writeln!(o, "table:       {} ({})", table_name(path), table.summary());
    let _ = writeln!(o, "checksum:    SHA-256 {} (verified)", hex(checksum));
    let source = path.with_file_name(format!("{}.flash.json", table_name(path)));
    let beside = match std::fs::read(&source) {
        Ok(s) if crate::table::file_digest(&s) == spec.source_sha256 => format!(" = {} (served)", source.display()),
        Ok(_) => format!(" ≠ {} now: the two files are a load error until this is compiled again", source.display()),
        Err(_) => String::new(),
    };
    let _ = writeln!(o, "source:      SHA-256 {}{beside}", hex(&spec.source_sha256));
    if let Some(d) = &spec.description {
        let _ = writeln!(o, "description: {}", d);
    }
    let _ = writeln!(o, "dimensions:  {}", spec.dimensions.len());
    for (i, d) in spec.dimensions.iter().enumerate() {
        let _ = write!(o, "  {} {} (field {}): ", i + 1, d.name, d.field);
        match &d.ranges {
            None => {
                let _ = writeln!(o, "{} categories: {}", d.values.len(), d.values.join(", "));
            }
            Some(ranges) => {
                let shown: Vec<String> = ranges
                    .iter()
                    .map(|r| format!("[{}, {}) → {}", bound(r.min), bound(r.max), d.values[usize::from(r.bucket)]))
                    .collect();
                let _ = writeln!(o, "{} ranges: {}", ranges.len(), shown.join(", "));
            }
        }
    }
    let ids: Vec<String> = table.actions_json().iter().enumerate().map(|(i, a)| action_id(a, i)).collect();
    let _ = writeln!(o, "actions:     {}", ids.len());
    for (id, a) in ids.iter().zip(table.actions_json()) {
        let _ = writeln!(o, "  {id:>4}  {a}");
    }
    let default = spec.default.map_or("none (action null)".to_string(), |a| ids[usize::from(a)].clone());
    let _ = writeln!(o, "default:     {default}");
    let _ = writeln!(o, "cells:       {} (action ids)", table.cell_count());
    let cell_id = |c: usize| spec.cells.get(c).map_or("?".to_string(), |&a| ids[usize::from(a)].clone());
    match spec.dimensions.as_slice() {
        [rows, cols] => {
            let _ = writeln!(o, "  rows: {}, columns: {}", rows.name, cols.name);
            let first = rows.values.iter().map(|v| v.chars().count()).max().unwrap_or(0);
            let widths: Vec<usize> = cols
                .values
                .iter()
                .enumerate()
                .map(|(j, v)| {
                    let ids = (0..rows.values.len()).map(|i| cell_id(i * cols.values.len() + j).chars().count());
                    ids.max().unwrap_or(0).max(v.chars().count())
                })
                .collect();
            let _ = write!(o, "  {:first$}", "");
            for (v, w) in cols.values.iter().zip(&widths) {
                let _ = write!(o, "  {v:>w$}");
            }
            o.push('\n');
            for (i, r) in rows.values.iter().enumerate() {
                let _ = write!(o, "  {r:first$}");
                for (j, w) in widths.iter().enumerate() {
                    let _ = write!(o, "  {:>w$}", cell_id(i * cols.values.len() + j));
                }
                o.push('\n');
            }
        }
        _ => {
            let width = table.cell_names().iter().map(|n| n.chars().count()).max().unwrap_or(0);
            for (c, name) in table.cell_names().iter().enumerate() {
                let _ = writeln!(o, "  {name:width$}  {}", cell_id(c));
            }
        }
    }
    o
}

/// An action as the dump names it: its `id` as written, else `#N`.
fn action_id(json: &str, index: usize) -> String {
    serde_json::from_str::<serde_json::Value>(json)
        .ok()
        .and_then(|v| v.get("id").map(|id| id.to_string()))
        .unwrap_or_else(|| format!("#{}", index + 1))
}

fn bound(x: f64) -> String {
    if x == f64::INFINITY {
        "∞".into()
    } else if x == f64::NEG_INFINITY {
        "-∞".into()
    } else {
        x.to_string()
    }
}
