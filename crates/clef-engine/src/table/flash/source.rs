//! The `.flash.json` front end: the source of a flash table read into a [`FlashSpec`], every
//! problem reported with its line and column and naming the dimension, range, cell or action it
//! is about (values are read as borrowed `RawValue`s, whose addresses give the positions, as the
//! Jev loader does).

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::{
    cfb, field_problem, name_problem, value_problem, DimensionSpec, FlashSpec, FlashTable, RangeSpec, MAX_CELLS,
    MAX_DIMENSIONS,
};
use crate::diagnostic::{quote, Diagnostic};
use crate::suggest::did_you_mean;
use crate::table::jev::{json_error, Loader};
use crate::table::TableMeta;

/// The keys of a flash table's source.
pub const FLASH_KEYS: &[&str] =
    &["dimensions", "actions", "matrix", "cells", "default", "description", "name", "tests"];
/// The keys of a dimension.
pub const DIMENSION_KEYS: &[&str] = &["name", "field", "values", "mapping", "ranges", "description"];
/// The keys of an entry of a dimension's `ranges`.
pub const RANGE_KEYS: &[&str] = &["value", "min", "max"];

/// How many missing cells an error names before it says "and N more".
const NAMED_CELLS: usize = 10;

/// Compiles the bytes of a `.flash.json` file (a UTF-8 BOM is skipped); `path` names it in
/// diagnostics.
pub fn compile(path: &str, bytes: &[u8]) -> Result<FlashTable, Vec<Diagnostic>> {
    let body = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let source = std::str::from_utf8(body).map_err(|e| {
        vec![Diagnostic::whole_file(
            path,
            format!("the file is not UTF-8 (invalid byte at offset {})", e.valid_up_to()),
        )]
    })?;
    load(path, source, crate::table::file_digest(bytes)).map(|(t, _)| t)
}

/// Reads a flash table's source text; `source_sha256` is the SHA-256 of the file's bytes.
pub fn load(path: &str, source: &str, source_sha256: [u8; 32]) -> Result<(FlashTable, TableMeta), Vec<Diagnostic>> {
    let mut p = Front { l: Loader::new(path, source), actions: Vec::new() };
    let top: &RawValue = match serde_json::from_str(source) {
        Ok(v) => v,
        Err(e) => return Err(vec![json_error(path, source, &e)]),
    };
    let fields: BTreeMap<String, &RawValue> = match serde_json::from_str(top.get()) {
        Ok(f) if top.get().starts_with('{') => f,
        _ => {
            p.l.at(
                top,
                "a flash table is a JSON object with \"dimensions\", \"actions\" and \"matrix\" or \"cells\"".into(),
            );
            return Err(p.l.diags);
        }
    };
    for (key, value) in &fields {
        if !FLASH_KEYS.contains(&key.as_str()) {
            let hint = did_you_mean(key, FLASH_KEYS.iter().copied())
                .map(|s| format!("; did you mean \"{s}\"?"))
                .unwrap_or_else(|| format!("; a flash table may have {}", FLASH_KEYS.join(", ")));
            p.l.at_key(value, key, format!("unknown key \"{key}\"{hint}"));
        }
    }
    let mut meta = TableMeta {
        name: fields.get("name").and_then(|v| p.string(v, "\"name\"")),
        description: fields.get("description").and_then(|v| p.string(v, "\"description\"")),
        ..TableMeta::default()
    };
    if let Some(v) = fields.get("tests") {
        match serde_json::from_str::<serde_json::Value>(v.get()) {
            Ok(t @ serde_json::Value::Array(_)) => meta.tests = Some(t),
            _ => p.l.at(v, "\"tests\" must be an array of {\"name\", \"input\", \"expect\"} objects".into()),
        }
    }

    match fields.get("actions") {
        Some(v) => p.actions(v),
        None => p.l.at(top, "the table has no \"actions\"; add \"actions\": [{\"id\": 1, …}, …]".into()),
    }
    let dimensions = match fields.get("dimensions") {
        Some(v) => p.dimensions(v),
        None => {
            p.l.at(
                top,
                "the table has no \"dimensions\"; add \"dimensions\": [{\"name\": …, \"values\": […]}, …]".into(),
            );
            None
        }
    };
    let default = match fields.get("default") {
        None => None,
        Some(v) if v.get() == "null" => None,
        Some(v) => p.action_ref(v, "\"default\""),
    };

    let cells = match (&dimensions, fields.get("matrix"), fields.get("cells")) {
        (_, Some(m), Some(c)) => {
            p.l.at_key(c, "cells", "the table has both \"matrix\" and \"cells\"; keep one".into());
            let _ = m;
            None
        }
        (None, _, _) => None,
        (Some(dims), Some(m), None) => p.matrix(m, dims),
        (Some(dims), None, Some(c)) => p.cells(c, dims),
        (Some(_), None, None) => {
            p.l.at(
                top,
                "the table has no \"matrix\" (nested arrays of action ids, one level per dimension) and no \
                 \"cells\" ({\"value,value\": id, …})"
                    .into(),
            );
            None
        }
    };

    if !p.l.diags.is_empty() {
        p.l.diags.sort_by_key(|d| (d.line, d.column));
        return Err(p.l.diags);
    }
    let (Some(dimensions), Some(cells)) = (dimensions, cells) else { return Err(p.l.diags) };
    let spec = FlashSpec {
        dimensions,
        actions: p.actions.iter().map(|(_, a)| a.to_string()).collect(),
        cells,
        default,
        description: meta.description.clone(),
        source_sha256,
    };
    let table = FlashTable::new(spec).map_err(|e| vec![Diagnostic::whole_file(path, e.to_string())])?;
    let size = cfb::write(&table).len();
    if size > cfb::MAX_BYTES {
        p.l.at(
            top,
            format!(
                "the compiled table would take {size} bytes; a flash table takes at most {} (64 KiB): use fewer \
                 cells, or shorter actions, names and values",
                cfb::MAX_BYTES
            ),
        );
        return Err(p.l.diags);
    }
    Ok((table, meta))
}

/// The members of a JSON object in the order written (`cells`: later entries win).
struct Entries<'a>(Vec<(String, &'a RawValue)>);

impl<'de> Deserialize<'de> for Entries<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Entries<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries<'de>, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry::<String, &'de RawValue>()? {
                    out.push(entry);
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// One range as read, before the ranges of its dimension are checked together.
struct Range<'s> {
    min: f64,
    max: f64,
    bucket: u16,
    /// how it was written, for messages: `"0.0-0.03"` or `ranges[1]`
    label: String,
    raw: &'s RawValue,
    key: Option<String>,
}

struct Front<'s> {
    l: Loader<'s>,
    /// (id, action as written)
    actions: Vec<(i64, serde_json::Value)>,
}

impl<'s> Front<'s> {
    fn string(&mut self, raw: &RawValue, what: &str) -> Option<String> {
        match serde_json::from_str::<String>(raw.get()) {
            Ok(s) => Some(s),
            Err(_) => {
                self.l.at(raw, format!("{what} must be a string"));
                None
            }
        }
    }

    fn object(&mut self, raw: &'s RawValue, what: &str) -> Option<BTreeMap<String, &'s RawValue>> {
        match serde_json::from_str(raw.get()) {
            Ok(f) if raw.get().starts_with('{') => Some(f),
            _ => {
                self.l.at(raw, format!("{what} must be a JSON object"));
                None
            }
        }
    }

    fn array(&mut self, raw: &'s RawValue, what: &str) -> Option<Vec<&'s RawValue>> {
        match serde_json::from_str(raw.get()) {
            Ok(a) if raw.get().starts_with('[') => Some(a),
            _ => {
                self.l.at(raw, format!("{what} must be a JSON array"));
                None
            }
        }
    }

    /// Reports keys not in `known`; says whether there were any.
    fn unknown_keys(&mut self, fields: &BTreeMap<String, &'s RawValue>, known: &[&str], label: &str) -> bool {
        let before = self.l.diags.len();
        for (k, v) in fields {
            if !known.contains(&k.as_str()) {
                let hint = did_you_mean(k, known.iter().copied())
                    .map(|s| format!("did you mean \"{s}\"?"))
                    .unwrap_or_else(|| format!("it may have {}", known.join(", ")));
                self.l.at_key(v, k, format!("{label}: unknown key \"{k}\"; {hint}"));
            }
        }
        self.l.diags.len() > before
    }

    fn actions(&mut self, raw: &'s RawValue) {
        let Some(list) = self.array(raw, "\"actions\"") else { return };
        if list.is_empty() {
            self.l.at(raw, "\"actions\" is empty; a flash table needs at least one action".into());
        }
        if list.len() > usize::from(u16::MAX) {
            self.l.at(raw, format!("{} actions; at most {} are allowed", list.len(), u16::MAX));
            return;
        }
        for (i, a) in list.iter().enumerate() {
            let value = match serde_json::from_str::<serde_json::Value>(a.get()) {
                Ok(v @ serde_json::Value::Object(_)) => v,
                _ => {
                    self.l.at(a, format!("action #{} must be a JSON object with an \"id\"", i + 1));
                    continue;
                }
            };
            let Some(fields) = self.object(a, "an action") else { continue };
            let Some(id_raw) = fields.get("id") else {
                self.l.at(a, format!("action #{} has no \"id\" (an integer the matrix refers to)", i + 1));
                continue;
            };
            let Some(id) = value.get("id").and_then(serde_json::Value::as_i64) else {
                self.l.at(id_raw, format!("action #{}: \"id\" must be an integer", i + 1));
                continue;
            };
            if self.actions.iter().any(|(other, _)| *other == id) {
                self.l.at(id_raw, format!("two actions have the id {id}; ids must be unique"));
                continue;
            }
            if let Err(problem) = crate::authz::check_action(&value) {
                self.l.at(a, format!("action {id}: {problem}"));
                continue;
            }
            self.actions.push((id, value));
        }
    }

    /// The index of the action an id refers to.
    fn action_ref(&mut self, raw: &RawValue, what: &str) -> Option<u16> {
        let id = match serde_json::from_str::<serde_json::Value>(raw.get()).ok().and_then(|v| v.as_i64()) {
            Some(id) => id,
            None => {
                self.l.at(raw, format!("{what} must be an action id (an integer), not {}", quote(raw.get())));
                return None;
            }
        };
        match self.actions.iter().position(|(a, _)| *a == id) {
            Some(i) => Some(i as u16),
            None => {
                let ids: Vec<String> = self.actions.iter().map(|(a, _)| a.to_string()).collect();
                let known = if ids.is_empty() {
                    "there are no actions".to_string()
                } else {
                    format!("the actions' ids are {}", ids.join(", "))
                };
                self.l.at(raw, format!("{what}: unknown action id {id}; {known}"));
                None
            }
        }
    }

    fn dimensions(&mut self, raw: &'s RawValue) -> Option<Vec<DimensionSpec>> {
        let list = self.array(raw, "\"dimensions\"")?;
        if list.is_empty() {
            self.l.at(raw, "\"dimensions\" is empty; a flash table needs at least one dimension".into());
            return None;
        }
        if list.len() > MAX_DIMENSIONS {
            self.l.at(raw, format!("{} dimensions; at most {MAX_DIMENSIONS} are allowed", list.len()));
            return None;
        }
        let mut out = Vec::new();
        let mut broken = false;
        for (i, d) in list.iter().enumerate() {
            match self.dimension(i, d) {
                Some(dim) if out.iter().any(|o: &DimensionSpec| o.name == dim.name) => {
                    self.l.at(d, format!("two dimensions are named \"{}\"", dim.name));
                    broken = true;
                }
                Some(dim) => out.push(dim),
                None => broken = true,
            }
        }
        if broken {
            return None;
        }
        let mut cells = 1usize;
        for d in &out {
            cells = cells.saturating_mul(d.values.len());
        }
        if cells > MAX_CELLS {
            let sizes: Vec<String> = out.iter().map(|d| d.values.len().to_string()).collect();
            self.l.at(
                raw,
                format!(
                    "the dimensions make {} cells; at most {MAX_CELLS} fit in a flash table (64 KiB)",
                    if cells == usize::MAX {
                        "too many".to_string()
                    } else {
                        format!("{cells} ({})", sizes.join(" × "))
                    }
                ),
            );
            return None;
        }
        Some(out)
    }

    fn dimension(&mut self, i: usize, raw: &'s RawValue) -> Option<DimensionSpec> {
        let fields = self.object(raw, &format!("dimension #{}", i + 1))?;
        let name = match fields.get("name") {
            Some(v) => self.string(v, &format!("dimension #{}: \"name\"", i + 1)),
            None => {
                self.l.at(raw, format!("dimension #{} has no \"name\"", i + 1));
                None
            }
        };
        let label = match &name {
            Some(n) => format!("dimension \"{n}\""),
            None => format!("dimension #{}", i + 1),
        };
        self.unknown_keys(&fields, DIMENSION_KEYS, &label);
        if let (Some(n), Some(v)) = (&name, fields.get("name")) {
            if let Some(problem) = name_problem(n) {
                self.l.at(v, format!("{label}: {problem}"));
            }
        }
        if let Some(v) = fields.get("description") {
            self.string(v, &format!("{label}: \"description\""));
        }
        let field = match fields.get("field") {
            Some(v) => {
                let f = self.string(v, &format!("{label}: \"field\""));
                if let Some(problem) = f.as_deref().and_then(field_problem) {
                    self.l.at(v, format!("{label}: {problem}"));
                }
                f
            }
            None => name.clone(),
        };
        let values = match fields.get("values") {
            Some(v) => self.values(v, &label),
            None => {
                self.l.at(raw, format!("{label} has no \"values\" (its buckets, in the order of the matrix)"));
                None
            }
        };
        let ranges = match (fields.get("mapping"), fields.get("ranges"), &values) {
            (Some(_), Some(r), _) => {
                self.l.at_key(r, "ranges", format!("{label} has both \"mapping\" and \"ranges\"; keep one"));
                None
            }
            (Some(m), None, Some(values)) => self.mapping(m, values, &label).map(Some),
            (None, Some(r), Some(values)) => self.ranges(r, values, &label).map(Some),
            (None, None, _) => Some(None),
            (_, _, None) => None,
        };
        Some(DimensionSpec { name: name?, field: field?, values: values?, ranges: ranges? })
    }

    fn values(&mut self, raw: &'s RawValue, label: &str) -> Option<Vec<String>> {
        let list = self.array(raw, &format!("{label}: \"values\""))?;
        if list.is_empty() {
            self.l.at(raw, format!("{label}: \"values\" is empty; a dimension needs at least one value"));
            return None;
        }
        if list.len() > usize::from(u16::MAX) {
            self.l.at(raw, format!("{label}: {} values; at most {} are allowed", list.len(), u16::MAX));
            return None;
        }
        let mut out: Vec<String> = Vec::new();
        let mut ok = true;
        for v in list {
            let Some(s) = self.string(v, &format!("{label}: a value")) else {
                ok = false;
                continue;
            };
            if let Some(problem) = value_problem(&s) {
                self.l.at(v, format!("{label}: {problem}"));
                ok = false;
            } else if out.contains(&s) {
                self.l.at(v, format!("{label} lists the value \"{s}\" twice"));
                ok = false;
            }
            out.push(s);
        }
        ok.then_some(out)
    }

    /// The bucket a range maps to, by name.
    fn bucket_of(&mut self, raw: &RawValue, values: &[String], label: &str, range: &str) -> Option<u16> {
        let name = self.string(raw, &format!("{label}: the value of {range}"))?;
        match values.iter().position(|v| *v == name) {
            Some(b) => Some(b as u16),
            None => {
                let hint = did_you_mean(&name, values.iter().map(String::as_str))
                    .map(|s| format!("; did you mean \"{s}\"?"))
                    .unwrap_or_else(|| format!("; the values are {}", values.join(", ")));
                self.l.at(raw, format!("{label}: {range} maps to \"{name}\", which is not one of its values{hint}"));
                None
            }
        }
    }

    /// `"mapping": {"0.0-0.03": "low", "0.1+": "high"}`
    fn mapping(&mut self, raw: &'s RawValue, values: &[String], label: &str) -> Option<Vec<RangeSpec>> {
        let Ok(Entries(entries)) = serde_json::from_str::<Entries<'s>>(raw.get()) else {
            self.l.at(
                raw,
                format!("{label}: \"mapping\" must be an object such as {{\"0-0.03\": \"low\", \"0.03+\": \"high\"}}"),
            );
            return None;
        };
        let mut ranges = Vec::new();
        let mut ok = true;
        for (key, v) in entries {
            let shown = format!("\"{key}\"");
            let bounds = match range_key(&key) {
                Ok(b) => Some(b),
                Err(problem) => {
                    self.l.at_key(v, &key, format!("{label}: {shown} {problem}"));
                    None
                }
            };
            let bucket = self.bucket_of(v, values, label, &format!("range {shown}"));
            match (bounds, bucket) {
                (Some((min, max)), Some(bucket)) => {
                    ranges.push(Range { min, max, bucket, label: format!("range {shown}"), raw: v, key: Some(key) })
                }
                _ => ok = false,
            }
        }
        // Gaps are looked for only among ranges that all read well: a range left out would make one.
        ok.then(|| self.check_ranges(raw, ranges, values, label, "\"mapping\"")).flatten()
    }

    /// `"ranges": [{"value": "low", "min": -1, "max": 0}, …]`
    fn ranges(&mut self, raw: &'s RawValue, values: &[String], label: &str) -> Option<Vec<RangeSpec>> {
        let list = self.array(raw, &format!("{label}: \"ranges\""))?;
        let mut ranges = Vec::new();
        let mut ok = true;
        for (i, r) in list.iter().enumerate() {
            let range = format!("ranges[{i}]");
            let Some(fields) = self.object(r, &format!("{label}: {range}")) else {
                ok = false;
                continue;
            };
            // A misspelt "min" or "max" would make gaps and overlaps that are not there.
            ok &= !self.unknown_keys(&fields, RANGE_KEYS, &format!("{label}: {range}"));
            let bucket = match fields.get("value") {
                Some(v) => self.bucket_of(v, values, label, &range),
                None => {
                    self.l.at(r, format!("{label}: {range} has no \"value\" (the bucket it maps to)"));
                    None
                }
            };
            let mut bound = |key: &str, none: f64| match fields.get(key) {
                None => Some(none),
                Some(v) => match serde_json::from_str::<f64>(v.get()) {
                    Ok(x) if x.is_finite() => Some(x),
                    _ => {
                        self.l.at(v, format!("{label}: {range}: \"{key}\" must be a number"));
                        None
                    }
                },
            };
            let min = bound("min", f64::NEG_INFINITY);
            let max = bound("max", f64::INFINITY);
            match (min, max, bucket) {
                (Some(min), Some(max), Some(bucket)) if min < max => {
                    ranges.push(Range { min, max, bucket, label: range, raw: r, key: None })
                }
                (Some(min), Some(max), _) if min >= max => {
                    self.l.at(r, format!("{label}: {range} is empty: \"min\" ({min}) must be below \"max\" ({max})"));
                    ok = false;
                }
                _ => ok = false,
            }
        }
        ok.then(|| self.check_ranges(raw, ranges, values, label, "\"ranges\"")).flatten()
    }

    /// Sorts the ranges of a dimension and reports gaps, overlaps and values no range maps to.
    fn check_ranges(
        &mut self,
        raw: &'s RawValue,
        mut ranges: Vec<Range<'s>>,
        values: &[String],
        label: &str,
        what: &str,
    ) -> Option<Vec<RangeSpec>> {
        if ranges.is_empty() {
            self.l.at(raw, format!("{label}: {what} has no ranges"));
            return None;
        }
        ranges.sort_by(|a, b| a.min.total_cmp(&b.min).then(a.max.total_cmp(&b.max)));
        let mut ok = true;
        for pair in ranges.windows(2) {
            let [a, b] = pair else { continue };
            let message = if a.max > b.min {
                format!(
                    "{label}: {} and {} overlap on [{}, {}); a number must fit one range",
                    a.label,
                    b.label,
                    show(b.min),
                    show(a.max.min(b.max))
                )
            } else if a.max < b.min {
                format!(
                    "{label}: a gap between {} and {}: numbers in [{}, {}) fit no range; make one range end where \
                     the next begins",
                    a.label,
                    b.label,
                    show(a.max),
                    show(b.min)
                )
            } else {
                continue;
            };
            match &b.key {
                Some(key) => self.l.at_key(b.raw, key, message),
                None => self.l.at(b.raw, message),
            }
            ok = false;
        }
        let unmapped: Vec<&str> = values
            .iter()
            .enumerate()
            .filter(|(i, _)| !ranges.iter().any(|r| usize::from(r.bucket) == *i))
            .map(|(_, v)| v.as_str())
            .collect();
        if !unmapped.is_empty() {
            self.l.at(
                raw,
                format!(
                    "{label}: no range maps to {}: its cells could never be reached; give each value a range",
                    unmapped.iter().map(|v| format!("\"{v}\"")).collect::<Vec<_>>().join(", ")
                ),
            );
            ok = false;
        }
        ok.then(|| ranges.iter().map(|r| RangeSpec { min: r.min, max: r.max, bucket: r.bucket }).collect())
    }

    /// `"matrix"`: one array level per dimension.
    fn matrix(&mut self, raw: &'s RawValue, dims: &[DimensionSpec]) -> Option<Vec<u16>> {
        let mut cells = Vec::new();
        self.matrix_level(raw, dims, 0, "matrix".into(), String::new(), &mut cells);
        let total = dims.iter().map(|d| d.values.len()).product::<usize>();
        (cells.len() == total && self.l.diags.is_empty()).then_some(cells)
    }

    fn matrix_level(
        &mut self,
        raw: &'s RawValue,
        dims: &[DimensionSpec],
        depth: usize,
        at: String,
        cell: String,
        cells: &mut Vec<u16>,
    ) {
        let Some(d) = dims.get(depth) else {
            let what = format!("{at} ({cell})");
            cells.push(self.action_ref(raw, &what).unwrap_or(0));
            return;
        };
        let shown = if cell.is_empty() { at.clone() } else { format!("{at} ({cell})") };
        let Some(list) = serde_json::from_str::<Vec<&RawValue>>(raw.get()).ok().filter(|_| raw.get().starts_with('['))
        else {
            self.l.at(
                raw,
                format!(
                    "{shown} must be an array of {} entries, one per value of dimension \"{}\" ({})",
                    d.values.len(),
                    d.name,
                    d.values.join(", ")
                ),
            );
            return;
        };
        if list.len() != d.values.len() {
            let detail = if list.len() < d.values.len() {
                let sep = if cell.is_empty() { "" } else { "," };
                let deeper = if depth + 1 < dims.len() { ",…" } else { "" };
                let missing: Vec<String> =
                    d.values.iter().skip(list.len()).map(|v| format!("{cell}{sep}{}={v}{deeper}", d.name)).collect();
                format!("missing cell{} {}", if missing.len() == 1 { "" } else { "s" }, missing.join("; "))
            } else {
                "remove the extra entries".to_string()
            };
            self.l.at(
                raw,
                format!(
                    "{shown} has {} entries, but dimension \"{}\" has {} values ({}): {detail}",
                    list.len(),
                    d.name,
                    d.values.len(),
                    d.values.join(", ")
                ),
            );
        }
        // The entries that are there are read even when some are missing: their problems too.
        for (i, (entry, v)) in list.iter().zip(&d.values).enumerate() {
            let sep = if cell.is_empty() { "" } else { "," };
            self.matrix_level(
                entry,
                dims,
                depth + 1,
                format!("{at}[{i}]"),
                format!("{cell}{sep}{}={v}", d.name),
                cells,
            );
        }
    }

    /// `"cells": {"mobile,high": 2, "*,low": 1}`: applied in order, later entries win.
    fn cells(&mut self, raw: &'s RawValue, dims: &[DimensionSpec]) -> Option<Vec<u16>> {
        let Ok(Entries(entries)) = serde_json::from_str::<Entries<'s>>(raw.get()) else {
            self.l.at(raw, "\"cells\" must be an object such as {\"mobile,high\": 2, \"*,low\": 1}".into());
            return None;
        };
        let total: usize = dims.iter().map(|d| d.values.len()).product();
        let mut cells: Vec<Option<u16>> = vec![None; total];
        let mut ok = true;
        for (key, v) in entries {
            let parts: Vec<&str> = key.split(',').collect();
            if parts.len() != dims.len() {
                let names: Vec<&str> = dims.iter().map(|d| d.name.as_str()).collect();
                self.l.at_key(
                    v,
                    &key,
                    format!(
                        "cell \"{key}\" names {} value{}; write one per dimension ({}), `*` for any",
                        parts.len(),
                        if parts.len() == 1 { "" } else { "s" },
                        names.join(",")
                    ),
                );
                ok = false;
                continue;
            }
            // Per dimension, the buckets the key selects.
            let mut selected: Vec<Vec<usize>> = Vec::new();
            for (part, d) in parts.iter().zip(dims) {
                let trimmed = part.trim();
                if trimmed == "*" {
                    selected.push((0..d.values.len()).collect());
                } else if let Some(b) = d.values.iter().position(|x| x == part || x == trimmed) {
                    selected.push(vec![b]);
                } else {
                    let hint = did_you_mean(trimmed, d.values.iter().map(String::as_str))
                        .map(|s| format!("; did you mean \"{s}\"?"))
                        .unwrap_or_else(|| format!("; its values are {}, or `*` for any", d.values.join(", ")));
                    self.l.at_key(
                        v,
                        &key,
                        format!("cell \"{key}\": \"{trimmed}\" is not a value of dimension \"{}\"{hint}", d.name),
                    );
                }
            }
            let Some(action) = self.action_ref(v, &format!("cell \"{key}\"")) else {
                ok = false;
                continue;
            };
            if selected.len() != dims.len() {
                ok = false;
                continue;
            }
            // Every combination of the selected buckets, row-major.
            let mut indexes = vec![0usize];
            for (sel, d) in selected.iter().zip(dims) {
                indexes =
                    indexes.iter().flat_map(|&base| sel.iter().map(move |&b| base * d.values.len() + b)).collect();
            }
            for i in indexes {
                if let Some(c) = cells.get_mut(i) {
                    *c = Some(action);
                }
            }
        }
        if !ok {
            return None;
        }
        let names = super::cell_names(dims);
        let missing: Vec<&str> =
            cells.iter().zip(&names).filter(|(c, _)| c.is_none()).map(|(_, n)| n.as_str()).collect();
        if !missing.is_empty() {
            let listed: Vec<&str> = missing.iter().take(NAMED_CELLS).copied().collect();
            let more = missing.len() - listed.len();
            let and_more = if more > 0 { format!(" and {more} more") } else { String::new() };
            self.l.at(
                raw,
                format!(
                    "{} of {total} cells have no action: {}{and_more}; add entries for them, or a catch-all \"{}\" \
                     first (later entries win)",
                    missing.len(),
                    listed.join("; "),
                    vec!["*"; dims.len()].join(",")
                ),
            );
            return None;
        }
        Some(cells.into_iter().map(|c| c.unwrap_or(0)).collect())
    }
}

/// Why a key of `"mapping"` is not a range; the loader writes the message after the key.
#[derive(Debug, PartialEq, Eq)]
enum RangeKeyError {
    /// a bound below 0
    Negative,
    /// the lower bound is not below the upper one
    Empty,
    /// neither `"LO-HI"` nor `"LO+"`
    NotARange,
}

impl std::fmt::Display for RangeKeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RangeKeyError::Negative => {
                "has a negative bound: range keys take non-negative bounds; for negative ones write \
                 \"ranges\": [{\"value\": …, \"min\": -1, \"max\": 0}, …] instead of \"mapping\""
            }
            RangeKeyError::Empty => "is empty: the lower bound must be below the upper one",
            RangeKeyError::NotARange => {
                "is not a range: write \"LO-HI\" for [LO, HI) or \"LO+\" for LO and above, like \"0.03-0.1\""
            }
        })
    }
}

impl std::error::Error for RangeKeyError {}

/// A range key: `"LO-HI"` is [LO, HI), `"LO+"` is [LO, ∞); bounds are non-negative numbers.
fn range_key(key: &str) -> Result<(f64, f64), RangeKeyError> {
    let k = key.trim();
    if k.starts_with('-') || k.contains("--") {
        return Err(RangeKeyError::Negative);
    }
    let (min, max) = if let Some(lo) = k.strip_suffix('+') {
        (number(lo), Some(f64::INFINITY))
    } else {
        // The `-` between the bounds (an exponent may hold one too: `1e-3-2e-3`).
        k.match_indices('-')
            .map(|(i, _)| (number(&k[..i]), number(&k[i + 1..])))
            .find(|(a, b)| a.is_some() && b.is_some())
            .unwrap_or((None, None))
    };
    match (min, max) {
        (Some(min), Some(max)) if min < max => Ok((min, max)),
        (Some(_), Some(_)) => Err(RangeKeyError::Empty),
        _ => Err(RangeKeyError::NotARange),
    }
}

/// A non-negative finite decimal number, as written in a range key.
fn number(s: &str) -> Option<f64> {
    let s = s.trim();
    if !s.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return None;
    }
    s.parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0)
}

/// A bound in a message.
fn show(x: f64) -> String {
    if x == f64::INFINITY {
        "∞".into()
    } else if x == f64::NEG_INFINITY {
        "-∞".into()
    } else {
        x.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_keys() {
        assert_eq!(range_key("0.0-0.03"), Ok((0.0, 0.03)));
        assert_eq!(range_key("0.1+"), Ok((0.1, f64::INFINITY)));
        assert_eq!(range_key("1e-3-2e-3"), Ok((0.001, 0.002)));
        assert_eq!(range_key(" 5 - 10 "), Ok((5.0, 10.0)));
        assert_eq!(range_key("-1-0"), Err(RangeKeyError::Negative));
        assert_eq!(range_key("0--1"), Err(RangeKeyError::Negative));
        assert_eq!(range_key("0.1-0.1"), Err(RangeKeyError::Empty));
        assert_eq!(range_key("low"), Err(RangeKeyError::NotARange));
        assert_eq!(range_key("inf+"), Err(RangeKeyError::NotARange));
        assert_eq!(range_key("1-inf"), Err(RangeKeyError::NotARange));
        assert!(RangeKeyError::Negative.to_string().contains("negative"));
        assert!(RangeKeyError::Empty.to_string().contains("empty"));
        assert!(RangeKeyError::NotARange.to_string().contains("not a range"));
    }
}
