//! The compiled form of a table's conditions as data: the [`Program`] that the compiler
//! ([`super::compile`]) builds once and the evaluator ([`super::eval`]) runs, and the one pass
//! that reads an input's fields into its slots.
//!
//! A *slot* holds the value of one field path the table reads (`user.tier`, `items[-1].price`,
//! `headers["x-api-key"]`). Every path is resolved to a slot number at load time, so that an
//! expression reads a field with one array access.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::alphabet::Alphabet;
use super::ir::{Node, PathSeg, Step, Target};
use super::ops::{self, EvalError};
use super::patterns::PatternGroup;
use super::value::Value;

/// A slot's content: the field's value, or why reading the path failed
/// (e.g. `x.y` where `x` is a number).
pub type SlotValue<'a> = Result<Value<'a>, EvalError>;

/// `slots` emptied, as a vector that borrows nothing: the same allocation (an emptied vector
/// collected in place into elements of the same layout keeps it) for the next decision's slots.
pub(crate) fn recycle(mut slots: Vec<SlotValue<'_>>) -> Vec<SlotValue<'static>> {
    slots.clear();
    slots.into_iter().map(|_| Ok(Value::Nil)).collect()
}

/// The compiled conditions of one table, sharing slots, memos and pattern groups.
#[derive(Debug, Default)]
pub struct Program {
    /// every input path read, by slot number
    pub paths: Vec<Vec<PathSeg>>,
    /// path → slot: explanations look up every field they show
    pub(crate) by_path: FxHashMap<Vec<PathSeg>, u32>,
    /// top-level key → slot of the one-segment path
    pub roots: KeyTable,
    /// slots with more than one segment: (slot, slot of the first segment)
    pub nested: Vec<(u32, u32)>,
    /// shared sub-expressions
    pub memos: Vec<Node>,
    /// shared pattern passes
    pub groups: Vec<PatternGroup>,
    /// tests several conditions make, answered once per decision ([`super::preds`])
    pub preds: Vec<Node>,
    /// the compiled expressions, in the order given
    pub exprs: Vec<Node>,
    /// by expression: the first step of its branching program in `steps`, or
    /// [`super::ir::NO_PROGRAM`] (see [`super::branching`])
    pub(crate) starts: Vec<Target>,
    /// the branching programs of all expressions, one after another
    pub(crate) steps: Vec<Step>,
    /// the tests of the branching programs, in the order the steps name them
    pub(crate) atoms: Vec<Node>,
    /// the characters the table's regexes tell apart: their automata hold only those, and
    /// run on subjects translated into them ([`super::alphabet`])
    pub(crate) alphabet: Option<Arc<Alphabet>>,
    /// by slot: whether a decision reads it (an expression, the schema check or a template);
    /// the others are only steps towards nested paths, or what an explanation shows
    pub(crate) read: Vec<bool>,
}

/// Top-level keys → slots. Keys are bucketed by length: a lookup is a few
/// short compares, cheaper than hashing every key of every request.
#[derive(Debug, Default)]
pub struct KeyTable {
    by_len: Vec<Vec<(Box<str>, u32)>>,
    long: FxHashMap<Box<str>, u32>,
}

const SHORT_KEY: usize = 48;

impl KeyTable {
    pub(crate) fn insert(&mut self, key: Box<str>, slot: u32) {
        if key.len() < SHORT_KEY {
            if self.by_len.len() <= key.len() {
                self.by_len.resize_with(key.len() + 1, Vec::new);
            }
            if let Some(same_length) = self.by_len.get_mut(key.len()) {
                same_length.push((key, slot));
            }
        } else {
            self.long.insert(key, slot);
        }
    }

    /// The slot of a top-level key.
    #[inline]
    pub fn get(&self, key: &str) -> Option<u32> {
        if key.len() < SHORT_KEY {
            self.by_len.get(key.len())?.iter().find(|(k, _)| **k == *key).map(|(_, s)| *s)
        } else {
            self.long.get(key).copied()
        }
    }
}

impl Program {
    /// Adds a slot for `path`; `root` is the slot of its first segment when it has several.
    pub(crate) fn push_slot(&mut self, path: Vec<PathSeg>, root: Option<u32>) -> u32 {
        let id = self.paths.len() as u32;
        match (root, path.first()) {
            (Some(r), _) => self.nested.push((id, r)),
            (None, Some(PathSeg::Key(k))) => self.roots.insert(k.clone(), id),
            (None, _) => {}
        }
        self.by_path.insert(path.clone(), id);
        self.paths.push(path);
        self.read.push(false);
        id
    }

    /// Marks `slot` as read by decisions.
    pub(crate) fn mark_read(&mut self, slot: u32) {
        if let Some(r) = self.read.get_mut(slot as usize) {
            *r = true;
        }
    }

    /// The slot of `path`, if the program has one.
    pub(crate) fn find_slot(&self, path: &[PathSeg]) -> Option<u32> {
        self.by_path.get(path).copied()
    }

    /// The slot that holds `path`, added when no expression reads it, so that
    /// the one pass of [`Program::fill_slots`] also reads it (the schema check
    /// reads declared fields this way).
    pub fn slot_for(&mut self, path: &[PathSeg]) -> u32 {
        let slot = self.slot_of(path);
        self.mark_read(slot);
        slot
    }

    fn slot_of(&mut self, path: &[PathSeg]) -> u32 {
        if let Some(i) = self.find_slot(path) {
            return i;
        }
        let root = match path {
            [first, _, ..] => Some(self.slot_of(std::slice::from_ref(first))),
            _ => None,
        };
        self.push_slot(path.to_vec(), root)
    }

    /// Reads the input's fields into slots.
    pub fn fill_slots<'a>(&'a self, root: &Value<'a>) -> Vec<SlotValue<'a>> {
        let mut slots: Vec<SlotValue<'a>> = vec![Ok(Value::Nil); self.paths.len()];
        if let Value::Object(o) = root {
            for (k, v) in o.iter() {
                if let Some(s) = self.roots.get(k).and_then(|s| slots.get_mut(s as usize)) {
                    *s = Ok(v);
                }
            }
        }
        for &(slot, root_slot) in &self.nested {
            let start = slots.get(root_slot as usize).copied().unwrap_or(Ok(Value::Nil));
            let below = self.paths.get(slot as usize).and_then(|p| p.get(1..)).unwrap_or_default();
            if let Some(s) = slots.get_mut(slot as usize) {
                *s = start.and_then(|v| descend(v, below));
            }
        }
        slots
    }
}

/// Follows path segments from `v` with the language's member/index rules.
pub fn descend<'a>(mut v: Value<'a>, segs: &[PathSeg]) -> Result<Value<'a>, EvalError> {
    for seg in segs {
        v = match seg {
            PathSeg::Key(k) => match v {
                Value::Array(_) => ops::index(&v, &Value::Str(k))?,
                _ => ops::member(&v, k)?,
            },
            PathSeg::Index(i) => ops::index(&v, &Value::Int(*i))?,
        };
    }
    Ok(v)
}
