//! The `.cfb` file: a compiled flash table, read into memory whole (at most 64 KiB) when it loads.
//!
//! # Layout (format version 1)
//!
//! Every integer is little-endian. Offsets count bytes from the start of the file. A *string* is
//! a reference into the string area: `u32` offset from the area's start, then `u32` length; the
//! bytes are UTF-8.
//!
//! ```text
//! header, 84 bytes
//!    0   4  magic "CFB1"
//!    4   2  format version (1)
//!    6   2  flags (0; no flags are defined)
//!    8   4  file length in bytes, checksum included
//!   12  32  SHA-256 of the .flash.json file the table was compiled from
//!   44   2  dimension count D (1 to 32)
//!   46   2  action count A (at least 1)
//!   48   2  default action index, or 0xFFFF for no default
//!   50   2  reserved (0)
//!   52   4  cell count C (the product of the dimensions' bucket counts)
//!   56   4  offset of the dimension table
//!   60   4  offset of the cells
//!   64   4  offset of the action table
//!   68   4  offset of the string area
//!   72   4  length of the string area
//!   76   8  description: a string, or offset 0xFFFFFFFF (length 0) for none
//! dimension table: D records of 32 bytes, in declaration order
//!    0   8  name (string)
//!    8   8  field, a dotted path (string)
//!   16   2  bucket count B (at least 1)
//!   18   1  kind: 0 = categories (the field's string is looked up), 1 = ranges (its number)
//!   19   1  reserved (0)
//!   20   4  range count R (0 for categories, at least 1 for ranges)
//!   24   4  offset of the dimension's buckets
//!   28   4  reserved (0)
//! buckets of one dimension, at its offset
//!          B strings: the bucket names, in declaration order
//!          ranges only: R + 1 f64 bounds, increasing (the first may be -inf, the last +inf);
//!          range i is [bound i, bound i+1)
//!          ranges only: R u16 bucket indexes, one per range
//! cells: C u16 action indexes, row-major (the last dimension varies fastest)
//! action table: A strings, each an action's JSON object
//! string area: the bytes the strings refer to
//! checksum, 32 bytes: SHA-256 of every byte before it
//! ```
//!
//! The writer puts the parts in this order; the reader follows the offsets, so it does not
//! depend on the order. The reader never trusts a number it has not checked: it verifies the
//! length, magic, version and flags, then the checksum over the whole file, then every offset,
//! count and string against the file's bounds (reading with `get`, never indexing), and finally
//! hands the parts to [`FlashTable::new`], which checks that they hold together (unique names,
//! contiguous ranges, cell count, action indexes). Any byte sequence gives a table or an error.

use std::fmt;

use sha2::{Digest, Sha256};

use super::{DimensionSpec, FlashSpec, FlashTable, RangeSpec, MAX_DIMENSIONS};

/// The largest `.cfb` file: 64 KiB.
pub const MAX_BYTES: usize = 64 * 1024;
/// The first four bytes.
pub const MAGIC: &[u8; 4] = b"CFB1";
/// The format version this code writes and reads.
pub const VERSION: u16 = 1;

const HEADER_LEN: usize = 84;
const DIMENSION_LEN: usize = 32;
const CHECKSUM_LEN: usize = 32;
const NO_DEFAULT: u16 = 0xFFFF;
const NO_STRING: u32 = 0xFFFF_FFFF;

/// Why a `.cfb` file cannot be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CfbError(pub String);

impl fmt::Display for CfbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CfbError {}

fn bad<T>(message: impl Into<String>) -> Result<T, CfbError> {
    Err(CfbError(message.into()))
}

// ---------------------------------------------------------------------------------------------
// writing

/// Appends the string area and records references into it.
struct Strings {
    bytes: Vec<u8>,
}

impl Strings {
    fn add(&mut self, s: &str) -> (u32, u32) {
        let at = self.bytes.len() as u32;
        self.bytes.extend_from_slice(s.as_bytes());
        (at, s.len() as u32)
    }
}

fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, (at, len): (u32, u32)) {
    put_u32(out, at);
    put_u32(out, len);
}

/// The `.cfb` bytes of a table. The result may be longer than [`MAX_BYTES`]: the caller says
/// what to do then (the source front end makes it a load error).
pub fn write(table: &FlashTable) -> Vec<u8> {
    let spec = table.spec();
    let mut strings = Strings { bytes: Vec::new() };
    let description = spec.description.as_deref().map(|d| strings.add(d));

    // The parts after the header, each built on its own, then laid out in order.
    let mut dimension_table = Vec::new();
    let mut buckets = Vec::new();
    let buckets_at = HEADER_LEN + DIMENSION_LEN * spec.dimensions.len();
    for d in &spec.dimensions {
        put_str(&mut dimension_table, strings.add(&d.name));
        put_str(&mut dimension_table, strings.add(&d.field));
        put_u16(&mut dimension_table, d.values.len() as u16);
        dimension_table.push(u8::from(d.is_numeric()));
        dimension_table.push(0);
        put_u32(&mut dimension_table, d.ranges.as_ref().map_or(0, |r| r.len() as u32));
        put_u32(&mut dimension_table, (buckets_at + buckets.len()) as u32);
        put_u32(&mut dimension_table, 0);
        for v in &d.values {
            put_str(&mut buckets, strings.add(v));
        }
        if let Some(ranges) = &d.ranges {
            for r in ranges {
                buckets.extend_from_slice(&r.min.to_le_bytes());
            }
            if let Some(last) = ranges.last() {
                buckets.extend_from_slice(&last.max.to_le_bytes());
            }
            for r in ranges {
                put_u16(&mut buckets, r.bucket);
            }
        }
    }
    let cells_at = buckets_at + buckets.len();
    let actions_at = cells_at + 2 * spec.cells.len();
    let strings_at = actions_at + 8 * spec.actions.len();
    let mut action_table = Vec::new();
    for a in table.actions_json() {
        put_str(&mut action_table, strings.add(a));
    }
    let total = strings_at + strings.bytes.len() + CHECKSUM_LEN;

    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(MAGIC);
    put_u16(&mut out, VERSION);
    put_u16(&mut out, 0);
    put_u32(&mut out, total as u32);
    out.extend_from_slice(&spec.source_sha256);
    put_u16(&mut out, spec.dimensions.len() as u16);
    put_u16(&mut out, spec.actions.len() as u16);
    put_u16(&mut out, spec.default.unwrap_or(NO_DEFAULT));
    put_u16(&mut out, 0);
    put_u32(&mut out, spec.cells.len() as u32);
    put_u32(&mut out, HEADER_LEN as u32);
    put_u32(&mut out, cells_at as u32);
    put_u32(&mut out, actions_at as u32);
    put_u32(&mut out, strings_at as u32);
    put_u32(&mut out, strings.bytes.len() as u32);
    put_str(&mut out, description.unwrap_or((NO_STRING, 0)));
    debug_assert_eq!(out.len(), HEADER_LEN);
    out.extend_from_slice(&dimension_table);
    out.extend_from_slice(&buckets);
    for &c in &spec.cells {
        put_u16(&mut out, c);
    }
    out.extend_from_slice(&action_table);
    out.extend_from_slice(&strings.bytes);
    let checksum = Sha256::digest(&out);
    out.extend_from_slice(&checksum);
    debug_assert_eq!(out.len(), total);
    out
}

// ---------------------------------------------------------------------------------------------
// reading

/// Bounds-checked little-endian reads of the file's body (header to checksum).
struct Reader<'b> {
    /// the file without its checksum
    body: &'b [u8],
    strings: &'b [u8],
}

impl<'b> Reader<'b> {
    fn bytes(&self, at: usize, len: usize, what: &str) -> Result<&'b [u8], CfbError> {
        at.checked_add(len).and_then(|end| self.body.get(at..end)).ok_or_else(|| {
            CfbError(format!("{what} at byte {at} ({len} bytes) lies outside the file ({} bytes)", self.body.len()))
        })
    }

    fn u8(&self, at: usize, what: &str) -> Result<u8, CfbError> {
        Ok(self.bytes(at, 1, what)?.first().copied().unwrap_or(0))
    }

    fn u16(&self, at: usize, what: &str) -> Result<u16, CfbError> {
        let b = self.bytes(at, 2, what)?;
        Ok(u16::from_le_bytes(b.try_into().unwrap_or([0; 2])))
    }

    fn u32(&self, at: usize, what: &str) -> Result<u32, CfbError> {
        let b = self.bytes(at, 4, what)?;
        Ok(u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
    }

    fn offset(&self, at: usize, what: &str) -> Result<usize, CfbError> {
        Ok(self.u32(at, what)? as usize)
    }

    fn f64(&self, at: usize, what: &str) -> Result<f64, CfbError> {
        let b = self.bytes(at, 8, what)?;
        Ok(f64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }

    /// The string whose reference is at `at`.
    fn string(&self, at: usize, what: &str) -> Result<String, CfbError> {
        let start = self.u32(at, what)? as usize;
        let len = self.u32(at + 4, what)? as usize;
        let bytes = start.checked_add(len).and_then(|end| self.strings.get(start..end)).ok_or_else(|| {
            CfbError(format!(
                "{what}: the string at {start} ({len} bytes) lies outside the string area ({} bytes)",
                self.strings.len()
            ))
        })?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => bad(format!("{what} is not UTF-8")),
        }
    }
}

/// The SHA-256 of the source a `.cfb` records, read from its header without checking anything
/// else (`None` when the bytes are too short or not a `.cfb`): to tell cheaply whether a `.cfb`
/// was compiled from the `.flash.json` beside it.
pub fn recorded_source(bytes: &[u8]) -> Option<[u8; 32]> {
    if bytes.get(..4)? != MAGIC {
        return None;
    }
    bytes.get(12..44)?.try_into().ok()
}

/// Reads a `.cfb` file into a table; any bytes give a table or an error that says what is wrong.
pub fn read(bytes: &[u8]) -> Result<FlashTable, CfbError> {
    FlashTable::new(read_spec(bytes)?).map_err(|e| CfbError(format!("the table does not hold together: {e}")))
}

/// Reads a `.cfb` file into plain data, checking its frame and every offset.
pub fn read_spec(bytes: &[u8]) -> Result<FlashSpec, CfbError> {
    if bytes.len() > MAX_BYTES {
        return bad(format!("the file has {} bytes; a .cfb file has at most {MAX_BYTES} (64 KiB)", bytes.len()));
    }
    if bytes.get(..4) != Some(MAGIC.as_slice()) {
        return bad("not a compiled flash table (.cfb): the file does not start with \"CFB1\"");
    }
    if bytes.len() < HEADER_LEN + CHECKSUM_LEN {
        return bad(format!("the .cfb file is truncated: {} bytes, shorter than a header and checksum", bytes.len()));
    }
    let whole = Reader { body: bytes, strings: &[] };
    let version = whole.u16(4, "header")?;
    if version != VERSION {
        return bad(format!(
            "format version {version}; this clef reads version {VERSION}: compile the table again with this clef"
        ));
    }
    let length = whole.u32(8, "header")? as usize;
    if length != bytes.len() {
        let how = if bytes.len() < length { "truncated" } else { "longer than it says" };
        return bad(format!("the .cfb file is {how}: its header says {length} bytes, it has {}", bytes.len()));
    }
    let (body, checksum) = bytes.split_at(bytes.len() - CHECKSUM_LEN);
    if Sha256::digest(body).as_slice() != checksum {
        return bad("the .cfb file's checksum does not match: it was altered or damaged after it was compiled");
    }
    let flags = whole.u16(6, "header")?;
    if flags != 0 {
        return bad(format!("unknown flags {flags:#06x}"));
    }

    let head = Reader { body, strings: &[] };
    let mut source_sha256 = [0u8; 32];
    source_sha256.copy_from_slice(head.bytes(12, 32, "header")?);
    let n_dims = usize::from(head.u16(44, "header")?);
    let n_actions = usize::from(head.u16(46, "header")?);
    let default = head.u16(48, "header")?;
    let n_cells = head.u32(52, "header")? as usize;
    if head.u16(50, "header")? != 0 {
        return bad("reserved header bytes are not zero");
    }
    if n_dims == 0 || n_dims > MAX_DIMENSIONS {
        return bad(format!("{n_dims} dimensions; a table has 1 to {MAX_DIMENSIONS}"));
    }
    let dims_at = head.offset(56, "header")?;
    let cells_at = head.offset(60, "header")?;
    let actions_at = head.offset(64, "header")?;
    let strings_at = head.offset(68, "header")?;
    let strings_len = head.offset(72, "header")?;
    let strings = head.bytes(strings_at, strings_len, "the string area")?;
    let r = Reader { body, strings };
    let description = match head.u32(76, "header")? {
        NO_STRING => None,
        _ => Some(r.string(76, "the description")?),
    };

    r.bytes(dims_at, DIMENSION_LEN * n_dims, "the dimension table")?;
    let mut dimensions = Vec::with_capacity(n_dims);
    for i in 0..n_dims {
        let at = dims_at + DIMENSION_LEN * i;
        let what = format!("dimension #{i}");
        let name = r.string(at, &what)?;
        let field = r.string(at + 8, &what)?;
        let n_buckets = usize::from(r.u16(at + 16, &what)?);
        let kind = r.u8(at + 18, &what)?;
        let n_ranges = r.offset(at + 20, &what)?;
        let buckets_at = r.offset(at + 24, &what)?;
        if r.u8(at + 19, &what)? != 0 || r.u32(at + 28, &what)? != 0 {
            return bad(format!("{what}: reserved bytes are not zero"));
        }
        r.bytes(buckets_at, 8 * n_buckets, &format!("the buckets of {what}"))?;
        let values = (0..n_buckets)
            .map(|b| r.string(buckets_at + 8 * b, &format!("{what}, bucket #{b}")))
            .collect::<Result<_, _>>()?;
        let ranges = match (kind, n_ranges) {
            (0, 0) => None,
            (0, _) => return bad(format!("{what} has categories and {n_ranges} ranges")),
            (1, 0) => return bad(format!("{what} has ranges, but none")),
            (1, n) => {
                let bounds_at = buckets_at + 8 * n_buckets;
                // Checked as a whole first, so that a huge count fails before anything is allocated.
                r.bytes(bounds_at, n.saturating_mul(10).saturating_add(8), &format!("the ranges of {what}"))?;
                let index_at = bounds_at + 8 * (n + 1);
                let mut ranges = Vec::with_capacity(n);
                for j in 0..n {
                    ranges.push(RangeSpec {
                        min: r.f64(bounds_at + 8 * j, &what)?,
                        max: r.f64(bounds_at + 8 * (j + 1), &what)?,
                        bucket: r.u16(index_at + 2 * j, &what)?,
                    });
                }
                Some(ranges)
            }
            (k, _) => return bad(format!("{what} is of unknown kind {k}")),
        };
        dimensions.push(DimensionSpec { name, field, values, ranges });
    }

    let product = dimensions.iter().try_fold(1usize, |acc, d| acc.checked_mul(d.values.len()));
    if product != Some(n_cells) {
        let made = product.map_or("too many".to_string(), |p| p.to_string());
        return bad(format!("the header says {n_cells} cells, but the dimensions make {made}"));
    }
    let cell_bytes = r.bytes(cells_at, n_cells.saturating_mul(2), "the cells")?;
    let cells = cell_bytes.chunks_exact(2).map(|c| u16::from_le_bytes(c.try_into().unwrap_or([0; 2]))).collect();

    r.bytes(actions_at, n_actions.saturating_mul(8), "the action table")?;
    let actions =
        (0..n_actions).map(|a| r.string(actions_at + 8 * a, &format!("action #{a}"))).collect::<Result<_, _>>()?;

    Ok(FlashSpec {
        dimensions,
        actions,
        cells,
        default: (default != NO_DEFAULT).then_some(default),
        description,
        source_sha256,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> FlashTable {
        let source = br#"{"description": "d", "dimensions": [
            {"name": "device", "values": ["desktop", "mobile"]},
            {"name": "level", "field": "m.rate", "values": ["low", "high"],
             "ranges": [{"value": "low", "min": -1, "max": 0.5}, {"value": "high", "min": 0.5}]}],
          "actions": [{"id": 1, "type": "proxy"}, {"id": 2}],
          "cells": {"*,*": 1, "mobile,high": 2}, "default": 2}"#;
        super::super::source::compile("t.flash.json", source).map_err(|d| format!("{d:?}")).unwrap()
    }

    #[test]
    fn a_written_table_reads_back_the_same() {
        let t = table();
        let bytes = write(&t);
        assert_eq!(&bytes[..4], MAGIC);
        let back = read(&bytes).unwrap();
        assert_eq!(back.spec(), t.spec());
        assert_eq!(recorded_source(&bytes), Some(t.spec().source_sha256));
    }

    #[test]
    fn damage_is_caught_and_named() {
        let bytes = write(&table());
        let err = |b: &[u8]| read(b).unwrap_err().0;
        assert!(err(&bytes[..bytes.len() - 1]).contains("truncated"));
        assert!(err(&bytes[..10]).contains("truncated"));
        assert!(err(b"PK\x03\x04").contains("CFB1"));
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(err(&longer).contains("longer"));
        let mut flipped = bytes.clone();
        flipped[100] ^= 1;
        assert!(err(&flipped).contains("checksum"));
        let mut version = bytes.clone();
        version[4] = 2;
        assert!(err(&version).contains("version 2"));
    }
}
