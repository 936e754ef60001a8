//! Flash tables: a decision that is a lookup, not a search.
//!
//! A flash table names a few *dimensions* of the input — a categorical field (`device`: desktop,
//! mobile, tablet) or a number cut into half-open ranges (`error_rate`: [0, 0.03) low,
//! [0.03, 0.1) medium, [0.1, ∞) high) — and gives an action for every combination of their
//! buckets: the *cells*, a dense array in row-major order (the last dimension varies fastest).
//! A decision reads each dimension's field, finds its bucket, adds `bucket × stride` up, and
//! reads one cell. There are no conditions to evaluate and nothing to try in order: the cost is
//! a handful of comparisons per dimension whatever the number of cells.
//!
//! **Why it is correct.** Loading checks everything the lookup relies on, once: every dimension
//! has at least one bucket, category names are unique, the ranges of a numeric dimension are
//! sorted, contiguous and non-overlapping (so a number fits at most one of them, found by
//! counting the bounds at or below it), the cell count is the product of the bucket counts (so
//! `Σ bucket × stride` is always inside the array) and every cell and the default name an
//! existing action. An input that fits no bucket — a missing field, a category not listed (they
//! match case-sensitively), a string on a numeric dimension, a number outside every range —
//! names no cell: the decision has no `rule` and answers with the default action.
//!
//! **One table, two files.** The `.flash.json` source ([`source`]) and the compiled `.cfb`
//! ([`cfb`]) both produce a [`FlashSpec`] — plain data — and [`FlashTable::new`] alone turns
//! that into the lookup structures, validating it; so a table decides the same from either file.
//! The outcomes a decision names (its `rule_id`) are the cells, called like
//! `device=mobile,error_rate_level=high`; the answer is the cell's action as written, serialized
//! once at load.
//!
//! **Explain.** With `explain`, the trace has one entry: the cell (or, when some value fits no
//! bucket, an entry whose `rule_id` is `null`), with a reason saying where each value went:
//! `device="mobile" → mobile, error_rate=0.07 → medium`.

pub mod cfb;
pub mod source;

use std::fmt::Write as _;

use rustc_hash::FxHashMap;

use super::rules::{Decision, TraceEntry};
use super::{Engine, LoadError, TableKind, TableMeta};
use crate::expr::json::write_json_string;
use crate::expr::value::Value;

/// At most this many dimensions.
pub const MAX_DIMENSIONS: usize = 32;

/// At most this many cells (what fits a `.cfb` of 64 KiB at two bytes a cell).
pub const MAX_CELLS: usize = cfb::MAX_BYTES / 2;

/// The outcome index of a trace entry that names no cell (some value fit no bucket).
const NO_CELL: usize = usize::MAX;

/// Tables of up to this many dimensions read their fields in one pass over the input's members.
const ONE_PASS: usize = 4;

/// Categories up to this many are found by a linear scan (faster than hashing a short string).
const LINEAR_CATEGORIES: usize = 8;

/// Ranges up to this many are found by counting the bounds at or below the value.
const LINEAR_RANGES: usize = 16;

/// Loads a flash table: a `.flash.json` file's text (`bytes`: the whole file, whose SHA-256
/// `file_digest` the table records), or a `.cfb` file's bytes.
pub(crate) fn load(
    path: &str,
    kind: TableKind,
    text: &str,
    bytes: &[u8],
    file_digest: [u8; 32],
) -> Result<(Engine, TableMeta), LoadError> {
    if kind == TableKind::FlashCompiled {
        let table = cfb::read(bytes).map_err(|e| LoadError::single(path, e.to_string()))?;
        let meta = TableMeta { description: table.spec().description.clone(), ..TableMeta::default() };
        return Ok((Engine::Flash(table), meta));
    }
    let (table, meta) = source::load(path, text, file_digest).map_err(LoadError::from)?;
    Ok((Engine::Flash(table), meta))
}

/// What a flash table is, as plain data: what the source front end and the `.cfb` reader both
/// produce, what the `.cfb` writer writes, and what [`FlashTable::new`] validates.
#[derive(Clone, Debug, PartialEq)]
pub struct FlashSpec {
    /// the dimensions, in declaration order
    pub dimensions: Vec<DimensionSpec>,
    /// each action's JSON text (an object, compact), in declaration order
    pub actions: Vec<String>,
    /// the action index of each cell, row-major (the last dimension varies fastest)
    pub cells: Vec<u16>,
    /// the action index answered when an input fits no bucket
    pub default: Option<u16>,
    /// the table's `description`
    pub description: Option<String>,
    /// the SHA-256 of the `.flash.json` file the table was compiled from
    pub source_sha256: [u8; 32],
}

/// One dimension, as plain data.
#[derive(Clone, Debug, PartialEq)]
pub struct DimensionSpec {
    /// its name (in cell names)
    pub name: String,
    /// the dotted path of the input field it reads
    pub field: String,
    /// the bucket names, in declaration order (the order of the matrix)
    pub values: Vec<String>,
    /// `None`: the field's string is looked up in `values`; else the field's number is placed in
    /// these ranges, sorted and contiguous
    pub ranges: Option<Vec<RangeSpec>>,
}

/// One half-open range `[min, max)` of a numeric dimension.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RangeSpec {
    /// the lower bound, included (`-inf` for none)
    pub min: f64,
    /// the upper bound, excluded (`+inf` for none)
    pub max: f64,
    /// the bucket (index into the dimension's `values`) it maps to
    pub bucket: u16,
}

impl DimensionSpec {
    /// Whether the dimension buckets numbers by ranges.
    pub fn is_numeric(&self) -> bool {
        self.ranges.is_some()
    }
}

/// A compiled flash table: dimensions with their lookups, the cells, the actions.
#[derive(Debug)]
pub struct FlashTable {
    spec: FlashSpec,
    dims: Box<[Dimension]>,
    /// per action, its JSON text
    actions: Box<[Box<str>]>,
    default_json: Box<str>,
    /// per cell, its name (`device=mobile,error_rate_level=high`) and the name as a JSON string
    cell_names: Box<[String]>,
    cell_ids_json: Box<[Box<str>]>,
}

#[derive(Debug)]
struct Dimension {
    /// the field's path, split at the dots
    path: Box<[Box<str>]>,
    /// its first segment, and the others
    first: Box<str>,
    rest: Box<[Box<str>]>,
    /// the field's path as written, for traces
    field: Box<str>,
    stride: usize,
    lookup: Lookup,
}

#[derive(Debug)]
enum Lookup {
    /// a few categories, in bucket order
    Few(Box<[Box<str>]>),
    /// many categories
    Many(FxHashMap<Box<str>, u16>),
    /// `bounds[i] <= x < bounds[i + 1]` is range `i`, which maps to `buckets[i]`
    Ranges { bounds: Box<[f64]>, buckets: Box<[u16]> },
}

impl Lookup {
    /// The bucket `v` falls in, if any.
    #[inline(always)]
    fn bucket(&self, v: &Value<'_>) -> Option<u16> {
        match (self, v) {
            (Lookup::Few(values), Value::Str(s)) => values.iter().position(|x| same(x, s)).map(|i| i as u16),
            (Lookup::Many(map), Value::Str(s)) => map.get(*s).copied(),
            (Lookup::Ranges { bounds, buckets }, Value::Int(i)) => range_bucket(bounds, buckets, *i as f64),
            (Lookup::Ranges { bounds, buckets }, Value::Float(f)) => range_bucket(bounds, buckets, *f),
            _ => None,
        }
    }
}

/// String equality that rules most unequal strings out before calling `memcmp`: a dimension's
/// first key or category is compared with every member or value, and the call costs more than
/// looking at the lengths and the first and last bytes.
#[inline(always)]
fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.first() == b.first() && a.last() == b.last() && a == b
}

#[inline]
fn range_bucket(bounds: &[f64], buckets: &[u16], x: f64) -> Option<u16> {
    let (&first, &last) = (bounds.first()?, bounds.last()?);
    // NaN fails both comparisons.
    if !(x >= first && x < last) {
        return None;
    }
    let inner = bounds.get(1..bounds.len() - 1)?;
    let i = if inner.len() < LINEAR_RANGES {
        inner.iter().filter(|&&b| b <= x).count()
    } else {
        inner.partition_point(|&b| b <= x)
    };
    buckets.get(i).copied()
}

/// Why a [`FlashSpec`] does not hold together, as [`FlashTable::new`] finds it: for a `.cfb`
/// made by hand or damaged (the source front end reports its problems with positions first).
#[derive(Clone, Debug, PartialEq)]
pub enum SpecError {
    /// the table has no dimension
    NoDimensions,
    /// more than [`MAX_DIMENSIONS`] dimensions: how many
    TooManyDimensions(usize),
    /// no action, or more than a cell can name: how many
    ActionCount(usize),
    /// a dimension cannot be looked up
    Dimension(DimensionError),
    /// two dimensions have this name
    DuplicateDimension(String),
    /// the dimensions make more than [`MAX_CELLS`] cells
    TooManyCells,
    /// the cells are not as many as the dimensions make
    CellCount {
        /// the cells there are
        cells: usize,
        /// the cells the dimensions make
        expected: usize,
    },
    /// a cell names an action that does not exist
    CellAction {
        /// the cell's index
        cell: usize,
        /// the action it names
        action: u16,
        /// the actions there are
        actions: usize,
    },
    /// the default names an action that does not exist
    DefaultAction {
        /// the action it names
        action: u16,
        /// the actions there are
        actions: usize,
    },
    /// an action is not one an `/authz` answer can take
    Action {
        /// the action's index
        index: usize,
        /// what is wrong with it
        problem: crate::authz::ActionProblem,
    },
    /// an action is not a JSON object: its index
    ActionNotObject(usize),
}

impl std::fmt::Display for SpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpecError::NoDimensions => f.write_str("a flash table needs at least one dimension"),
            SpecError::TooManyDimensions(n) => write!(f, "{n} dimensions; at most {MAX_DIMENSIONS} are allowed"),
            SpecError::ActionCount(n) => write!(f, "{n} actions; a flash table has 1 to {} actions", u16::MAX),
            SpecError::Dimension(e) => e.fmt(f),
            SpecError::DuplicateDimension(name) => write!(f, "two dimensions are named \"{name}\""),
            SpecError::TooManyCells => write!(f, "more than {MAX_CELLS} cells"),
            SpecError::CellCount { cells, expected } => write!(f, "{cells} cells, but the dimensions make {expected}"),
            SpecError::CellAction { cell, action, actions } => {
                write!(f, "cell #{cell} names action #{action}, but there are {actions} actions")
            }
            SpecError::DefaultAction { action, actions } => {
                write!(f, "the default is action #{action}, but there are {actions} actions")
            }
            SpecError::Action { index, problem } => write!(f, "action #{index}: {problem}"),
            SpecError::ActionNotObject(index) => write!(f, "action #{index} is not a JSON object"),
        }
    }
}

impl std::error::Error for SpecError {}

/// Why a dimension of a [`FlashSpec`] cannot be looked up.
#[derive(Clone, Debug, PartialEq)]
pub struct DimensionError {
    /// the dimension's name
    pub dimension: String,
    /// what is wrong with it
    pub problem: DimensionProblem,
}

/// What is wrong with a dimension (see [`DimensionError`]).
#[derive(Clone, Debug, PartialEq)]
pub enum DimensionProblem {
    /// its name cannot be part of cell names ([`name_problem`])
    Name(&'static str),
    /// its field is not a dotted path ([`field_problem`])
    Field(&'static str),
    /// no value, or more than a cell index can count: how many
    ValueCount(usize),
    /// a value cannot be part of cell names ([`value_problem`])
    Value(&'static str),
    /// this value is listed twice
    DuplicateValue(String),
    /// a numeric dimension with an empty list of ranges
    NoRanges,
    /// a range maps to a value that does not exist
    RangeValue {
        /// the range's index
        range: usize,
        /// the value's index it names
        value: u16,
    },
    /// a range holds no number
    EmptyRange {
        /// the range's index
        range: usize,
        /// its lower bound
        min: f64,
        /// its upper bound
        max: f64,
    },
    /// this range does not start where the one before it ends
    NotContiguous(usize),
}

impl std::fmt::Display for DimensionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "dimension \"{}\"", self.dimension)?;
        match &self.problem {
            DimensionProblem::Name(problem) | DimensionProblem::Field(problem) | DimensionProblem::Value(problem) => {
                write!(f, ": {problem}")
            }
            DimensionProblem::ValueCount(n) => write!(f, " has {n} values; 1 to {} are allowed", u16::MAX),
            DimensionProblem::DuplicateValue(v) => write!(f, " lists the value \"{v}\" twice"),
            DimensionProblem::NoRanges => f.write_str(" has no ranges"),
            DimensionProblem::RangeValue { range, value } => {
                write!(f, ": range #{range} maps to value #{value}, which does not exist")
            }
            DimensionProblem::EmptyRange { range, min, max } => write!(f, ": range #{range} [{min}, {max}) is empty"),
            DimensionProblem::NotContiguous(i) => write!(f, ": ranges #{} and #{i} are not contiguous", i - 1),
        }
    }
}

impl std::error::Error for DimensionError {}

impl FlashTable {
    /// Builds the lookup structures of `spec`, after checking everything the lookup relies on
    /// (see the module comment). The error says what is wrong, for a `.cfb` that does not hold
    /// together; the source front end reports its problems with positions before this.
    pub fn new(mut spec: FlashSpec) -> Result<FlashTable, SpecError> {
        if spec.dimensions.is_empty() {
            return Err(SpecError::NoDimensions);
        }
        if spec.dimensions.len() > MAX_DIMENSIONS {
            return Err(SpecError::TooManyDimensions(spec.dimensions.len()));
        }
        if spec.actions.is_empty() || spec.actions.len() > usize::from(u16::MAX) {
            return Err(SpecError::ActionCount(spec.actions.len()));
        }
        let mut names: Vec<&str> = Vec::new();
        let mut cells = 1usize;
        for d in &spec.dimensions {
            check_dimension(d)
                .map_err(|problem| SpecError::Dimension(DimensionError { dimension: d.name.clone(), problem }))?;
            if names.contains(&d.name.as_str()) {
                return Err(SpecError::DuplicateDimension(d.name.clone()));
            }
            names.push(&d.name);
            cells = cells.checked_mul(d.values.len()).filter(|&c| c <= MAX_CELLS).ok_or(SpecError::TooManyCells)?;
        }
        if spec.cells.len() != cells {
            return Err(SpecError::CellCount { cells: spec.cells.len(), expected: cells });
        }
        let n_actions = spec.actions.len();
        if let Some((i, &a)) = spec.cells.iter().enumerate().find(|(_, &a)| usize::from(a) >= n_actions) {
            return Err(SpecError::CellAction { cell: i, action: a, actions: n_actions });
        }
        if spec.default.is_some_and(|a| usize::from(a) >= n_actions) {
            let a = spec.default.unwrap_or_default();
            return Err(SpecError::DefaultAction { action: a, actions: n_actions });
        }
        let mut actions = Vec::with_capacity(n_actions);
        for (i, a) in spec.actions.iter().enumerate() {
            match serde_json::from_str::<serde_json::Value>(a) {
                Ok(v @ serde_json::Value::Object(_)) => {
                    crate::authz::check_action(&v).map_err(|problem| SpecError::Action { index: i, problem })?;
                    actions.push(v.to_string().into_boxed_str());
                }
                _ => return Err(SpecError::ActionNotObject(i)),
            }
        }
        // As written, compact: what the source gives, and what a .cfb holds unless it was made by hand.
        spec.actions = actions.iter().map(|a| a.to_string()).collect();
        let default_json = match spec.default.and_then(|a| actions.get(usize::from(a))) {
            Some(a) => a.clone(),
            None => "null".into(),
        };

        let mut dims = Vec::with_capacity(spec.dimensions.len());
        let mut stride = cells;
        for d in &spec.dimensions {
            stride /= d.values.len();
            let lookup = match &d.ranges {
                Some(ranges) => {
                    let mut bounds: Vec<f64> = ranges.iter().map(|r| r.min).collect();
                    bounds.extend(ranges.last().map(|r| r.max));
                    Lookup::Ranges { bounds: bounds.into(), buckets: ranges.iter().map(|r| r.bucket).collect() }
                }
                None if d.values.len() <= LINEAR_CATEGORIES => {
                    Lookup::Few(d.values.iter().map(|v| v.as_str().into()).collect())
                }
                None => Lookup::Many(d.values.iter().enumerate().map(|(i, v)| (v.as_str().into(), i as u16)).collect()),
            };
            let path: Box<[Box<str>]> = d.field.split('.').map(Box::from).collect();
            dims.push(Dimension {
                first: path.first().cloned().unwrap_or_default(),
                rest: path.get(1..).unwrap_or_default().into(),
                path,
                field: d.field.as_str().into(),
                stride,
                lookup,
            });
        }

        let cell_names = cell_names(&spec.dimensions);
        let cell_ids_json = cell_names
            .iter()
            .map(|n| {
                let mut s = String::with_capacity(n.len() + 2);
                write_json_string(n, &mut s);
                s.into_boxed_str()
            })
            .collect();
        Ok(FlashTable {
            spec,
            dims: dims.into(),
            actions: actions.into(),
            default_json,
            cell_names: cell_names.into(),
            cell_ids_json,
        })
    }

    /// What the table is made of.
    pub fn spec(&self) -> &FlashSpec {
        &self.spec
    }

    /// The cell an input falls in: one bucket lookup per dimension and a sum; `None` when some
    /// value fits no bucket.
    #[inline]
    pub fn cell(&self, root: &Value<'_>) -> Option<usize> {
        match root {
            Value::Object(o) if self.dims.len() <= ONE_PASS => {
                // One pass over the top-level members finds every dimension's first segment (the
                // last of repeated keys wins, as `Object::get` has it), instead of a pass each.
                let mut first = [Value::Nil; ONE_PASS];
                for (k, v) in o.iter() {
                    for (slot, d) in first.iter_mut().zip(self.dims.iter()) {
                        if same(&d.first, k) {
                            *slot = v;
                        }
                    }
                }
                let mut cell = 0;
                for (v, d) in first.iter().zip(self.dims.iter()) {
                    let b = d.lookup.bucket(&v.at_path(&d.rest))?;
                    cell += usize::from(b) * d.stride;
                }
                Some(cell)
            }
            _ => {
                let mut cell = 0;
                for d in self.dims.iter() {
                    let b = d.lookup.bucket(&root.at_path(&d.path))?;
                    cell += usize::from(b) * d.stride;
                }
                Some(cell)
            }
        }
    }

    /// Decides one parsed input: the cell it falls in, or none (the default answers).
    #[inline]
    pub fn decide(&self, root: &Value<'_>, explain: bool) -> Decision {
        let rule = self.cell(root);
        let mut d = Decision { rule, evaluated: 1, ..Decision::default() };
        if explain {
            d.trace = Some(vec![TraceEntry {
                rule: rule.unwrap_or(NO_CELL),
                matched: rule.is_some(),
                reason: self.reason(root),
                reason_json: None,
            }]);
        }
        d
    }

    /// The same decision without the lookup structures: each value compared with every
    /// category or range as written (what property tests hold [`FlashTable::decide`] to).
    pub fn decide_reference(&self, root: &Value<'_>) -> Decision {
        let mut cell = Some(0usize);
        let mut stride = self.spec.cells.len();
        for d in &self.spec.dimensions {
            stride /= d.values.len();
            let mut v = *root;
            for seg in d.field.split('.') {
                v = match v {
                    Value::Object(o) => o.get(seg).unwrap_or(Value::Nil),
                    _ => Value::Nil,
                };
            }
            let bucket = match (&d.ranges, v) {
                (None, Value::Str(s)) => d.values.iter().position(|x| x == s),
                (Some(ranges), Value::Int(_) | Value::Float(_)) => {
                    let x = match v {
                        Value::Int(i) => i as f64,
                        Value::Float(f) => f,
                        _ => f64::NAN,
                    };
                    ranges.iter().find(|r| r.min <= x && x < r.max).map(|r| usize::from(r.bucket))
                }
                _ => None,
            };
            cell = match (cell, bucket) {
                (Some(c), Some(b)) => Some(c + b * stride),
                _ => None,
            };
        }
        Decision { rule: cell, evaluated: 1, ..Decision::default() }
    }

    /// Where each value went: `device="mobile" → mobile, error_rate=0.07 → medium`.
    fn reason(&self, root: &Value<'_>) -> String {
        let mut out = String::new();
        for (i, (d, spec)) in self.dims.iter().zip(&self.spec.dimensions).enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            let v = root.at_path(&d.path);
            out.push_str(&d.field);
            match v {
                Value::Nil => out.push_str(" missing"),
                _ => {
                    out.push('=');
                    out.push_str(&crate::diagnostic::quote(&v.to_json()));
                }
            }
            match d.lookup.bucket(&v) {
                Some(b) => {
                    out.push_str(" → ");
                    out.push_str(spec.values.get(usize::from(b)).map_or("?", |v| v));
                }
                None => {
                    out.push_str(" → no bucket");
                    let why = match (&spec.ranges, v) {
                        (_, Value::Nil) => String::new(),
                        (Some(_), Value::Int(_) | Value::Float(_)) => " (outside every range)".into(),
                        (Some(_), _) => " (not a number)".into(),
                        (None, Value::Str(_)) => format!(" (not one of {})", spec.values.join(", ")),
                        (None, _) => " (not a string)".into(),
                    };
                    out.push_str(&why);
                }
            }
        }
        if self.cell(root).is_none() {
            out.push_str(": the default answers");
        }
        out
    }

    /// How many cells (outcomes) the table has.
    pub fn cell_count(&self) -> usize {
        self.cell_names.len()
    }

    /// The name of each cell, in order.
    pub fn cell_names(&self) -> &[String] {
        &self.cell_names
    }

    /// The id of outcome `i` as a JSON string; `null` for the entry of a trace that names no cell.
    pub fn cell_id_json(&self, i: usize) -> &str {
        self.cell_ids_json.get(i).map_or("null", |s| s)
    }

    /// The action JSON of cell `i`, or of the default for `None` (`null` without one).
    pub fn action_json(&self, cell: Option<usize>) -> &str {
        match cell.and_then(|c| self.spec.cells.get(c)).and_then(|&a| self.actions.get(usize::from(a))) {
            Some(action) => action,
            None => &self.default_json,
        }
    }

    /// The JSON text of every action, in order.
    pub fn actions_json(&self) -> &[Box<str>] {
        &self.actions
    }

    /// `2 dimensions, 9 cells, 3 actions`
    pub fn summary(&self) -> String {
        let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
        format!(
            "{}, {}, {}",
            plural(self.spec.dimensions.len(), "dimension"),
            plural(self.cell_count(), "cell"),
            plural(self.actions.len(), "action")
        )
    }

    /// Appends what `GET /tables/{name}` shows of a flash table after its common fields:
    /// `,"dimensions":[…],"actions":[…],"cell_count":N,"source_sha256":"…"`.
    pub fn write_description(&self, out: &mut String) {
        out.push_str(",\"dimensions\":[");
        for (i, d) in self.spec.dimensions.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str("{\"name\":");
            write_json_string(&d.name, out);
            out.push_str(",\"field\":");
            write_json_string(&d.field, out);
            out.push_str(",\"type\":");
            out.push_str(if d.is_numeric() { "\"range\"" } else { "\"category\"" });
            out.push_str(",\"buckets\":[");
            for (j, v) in d.values.iter().enumerate() {
                if j > 0 {
                    out.push(',');
                }
                write_json_string(v, out);
            }
            out.push(']');
            if let Some(ranges) = &d.ranges {
                out.push_str(",\"ranges\":[");
                for (j, r) in ranges.iter().enumerate() {
                    if j > 0 {
                        out.push(',');
                    }
                    out.push_str("{\"value\":");
                    write_json_string(d.values.get(usize::from(r.bucket)).map_or("", |v| v), out);
                    let _ = write!(out, ",\"min\":{},\"max\":{}}}", json_bound(r.min), json_bound(r.max));
                }
                out.push(']');
            }
            out.push('}');
        }
        out.push_str("],\"actions\":[");
        for (i, a) in self.actions.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(a);
        }
        let _ = write!(
            out,
            "],\"cell_count\":{},\"source_sha256\":\"{}\"",
            self.cell_count(),
            crate::table::digest_hex(&self.spec.source_sha256)
        );
    }
}

/// A bound as JSON: a number, or `null` for an infinite one.
fn json_bound(x: f64) -> String {
    if x.is_finite() {
        serde_json::Number::from_f64(x).map(|n| n.to_string()).unwrap_or_else(|| "null".into())
    } else {
        "null".into()
    }
}

/// What a dimension needs to be looked up, as an error for a `.cfb` that breaks it.
fn check_dimension(d: &DimensionSpec) -> Result<(), DimensionProblem> {
    if let Some(problem) = name_problem(&d.name) {
        return Err(DimensionProblem::Name(problem));
    }
    if let Some(problem) = field_problem(&d.field) {
        return Err(DimensionProblem::Field(problem));
    }
    if d.values.is_empty() || d.values.len() > usize::from(u16::MAX) {
        return Err(DimensionProblem::ValueCount(d.values.len()));
    }
    for (i, v) in d.values.iter().enumerate() {
        if let Some(problem) = value_problem(v) {
            return Err(DimensionProblem::Value(problem));
        }
        if d.values.iter().take(i).any(|w| w == v) {
            return Err(DimensionProblem::DuplicateValue(v.clone()));
        }
    }
    if let Some(ranges) = &d.ranges {
        if ranges.is_empty() {
            return Err(DimensionProblem::NoRanges);
        }
        let mut previous_max = None;
        for (i, r) in ranges.iter().enumerate() {
            if usize::from(r.bucket) >= d.values.len() {
                return Err(DimensionProblem::RangeValue { range: i, value: r.bucket });
            }
            if r.min.is_nan()
                || r.max.is_nan()
                || r.min >= r.max
                || r.min == f64::INFINITY
                || r.max == f64::NEG_INFINITY
            {
                return Err(DimensionProblem::EmptyRange { range: i, min: r.min, max: r.max });
            }
            if previous_max.is_some_and(|max| max != r.min) {
                return Err(DimensionProblem::NotContiguous(i));
            }
            previous_max = Some(r.max);
        }
    }
    Ok(())
}

/// What is wrong with a dimension's name, if anything: it is part of cell names.
pub fn name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("the name is empty")
    } else if name.contains([',', '=']) {
        Some("a dimension's name may not contain `,` or `=` (cell names are `name=value,name=value`)")
    } else {
        None
    }
}

/// What is wrong with a field path, if anything.
pub fn field_problem(field: &str) -> Option<&'static str> {
    if field.split('.').any(str::is_empty) {
        Some("the field is a dotted path of non-empty names, like `client.device`")
    } else {
        None
    }
}

/// What is wrong with a bucket's name, if anything: it is part of cell names and `cells` keys.
pub fn value_problem(value: &str) -> Option<&'static str> {
    if value.is_empty() {
        Some("a value may not be empty")
    } else if value.contains(',') {
        Some("a value may not contain `,` (cells are written `value,value`)")
    } else if value == "*" {
        Some("a value may not be `*`, which stands for every value in `cells`")
    } else {
        None
    }
}

/// The name of every cell, in row-major order: `device=mobile,error_rate_level=high`.
fn cell_names(dims: &[DimensionSpec]) -> Vec<String> {
    let mut names = vec![String::new()];
    for d in dims {
        let mut next = Vec::with_capacity(names.len() * d.values.len());
        for prefix in &names {
            for v in &d.values {
                let sep = if prefix.is_empty() { "" } else { "," };
                next.push(format!("{prefix}{sep}{}={v}", d.name));
            }
        }
        names = next;
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> FlashSpec {
        FlashSpec {
            dimensions: vec![
                DimensionSpec {
                    name: "device".into(),
                    field: "device".into(),
                    values: vec!["desktop".into(), "mobile".into(), "tablet".into()],
                    ranges: None,
                },
                DimensionSpec {
                    name: "level".into(),
                    field: "m.rate".into(),
                    values: vec!["low".into(), "high".into()],
                    ranges: Some(vec![
                        RangeSpec { min: 0.0, max: 0.1, bucket: 0 },
                        RangeSpec { min: 0.1, max: f64::INFINITY, bucket: 1 },
                    ]),
                },
            ],
            actions: vec![r#"{"id":1}"#.into(), r#"{"id":2}"#.into()],
            cells: vec![0, 1, 0, 1, 1, 1],
            default: Some(1),
            description: None,
            source_sha256: [0; 32],
        }
    }

    fn decide(t: &FlashTable, input: &str) -> (Option<String>, String) {
        crate::input::with_parsed(input.as_bytes(), 128, |root| {
            let d = t.decide(&root, true);
            assert_eq!(d.rule, t.decide_reference(&root).rule, "{input}");
            let reason = d.trace.as_ref().map(|t| t[0].reason.clone()).unwrap_or_default();
            (d.rule.map(|c| t.cell_names()[c].clone()), reason)
        })
        .unwrap()
    }

    #[test]
    fn buckets_every_dimension_and_reads_one_cell() {
        let t = FlashTable::new(spec()).unwrap();
        assert_eq!(t.cell_names()[3], "device=mobile,level=high");
        let (cell, reason) = decide(&t, r#"{"device": "mobile", "m": {"rate": 0.5}}"#);
        assert_eq!(cell.as_deref(), Some("device=mobile,level=high"));
        assert_eq!(reason, "device=\"mobile\" → mobile, m.rate=0.5 → high");
        assert_eq!(
            decide(&t, r#"{"device": "tablet", "m": {"rate": 0}}"#).0.as_deref(),
            Some("device=tablet,level=low")
        );
        for input in [
            r#"{"device": "Mobile", "m": {"rate": 0.5}}"#,
            r#"{"device": "mobile", "m": {"rate": "0.5"}}"#,
            r#"{"device": "mobile", "m": {"rate": -1}}"#,
            r#"{"device": "mobile"}"#,
            r#"{"device": 1, "m": {"rate": 1}}"#,
        ] {
            assert_eq!(decide(&t, input).0, None, "{input}");
        }
        let (_, reason) = decide(&t, r#"{"device": "phone"}"#);
        assert_eq!(
            reason,
            "device=\"phone\" → no bucket (not one of desktop, mobile, tablet), m.rate missing → no bucket: the default answers"
        );
    }

    #[test]
    fn a_spec_that_does_not_hold_together_is_refused() {
        let mut s = spec();
        s.cells.pop();
        assert_eq!(FlashTable::new(s).unwrap_err().to_string(), "5 cells, but the dimensions make 6");
        let mut s = spec();
        s.cells[2] = 2;
        assert!(FlashTable::new(s).is_err());
        let mut s = spec();
        s.dimensions[1].ranges.as_mut().unwrap()[1].min = 0.2;
        let e = FlashTable::new(s).unwrap_err();
        assert!(matches!(&e, SpecError::Dimension(d) if d.problem == DimensionProblem::NotContiguous(1)), "{e:?}");
        assert!(e.to_string().contains("ranges #0 and #1 are not contiguous"), "{e}");
        let mut s = spec();
        s.dimensions[0].values[2] = "desktop".into();
        assert_eq!(
            FlashTable::new(s).unwrap_err().to_string(),
            format!("dimension \"{}\" lists the value \"desktop\" twice", spec().dimensions[0].name)
        );
    }
}
