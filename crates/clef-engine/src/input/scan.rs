//! Parse only what the table reads.
//!
//! A table knows every field path it reads (its [`Program`]'s slots). This scan walks a request
//! body once, validating it as strictly as simd-json does, and keeps only what is read: the
//! members on a read path are followed, a read value is kept (a string borrowed from the body
//! when it has no escapes, a number parsed, an object or array laid out as tape nodes when a
//! rule reads it whole), and everything else — the values of unread keys — is checked and
//! stepped over without being built. No tape of the whole body, no copy of it.
//!
//! It answers only when it is sure: a body it accepts is one simd-json accepts, with the same
//! values in the read slots as [`Program::fill_slots`] gives from the full parse. Anything else
//! — invalid JSON, nesting beyond the limit, a number simd-json might reject, a lone surrogate,
//! a top level that is not an object — makes it give up, and the caller parses the body fully,
//! which gives the error (with its byte offset) a request always got.
//!
//! Paths into the body follow the language's rules: the last of repeated keys wins; a member of
//! nil is nil; a member of a number is an error (`NotIndexable`), an element of an object or a
//! member of an array too (`BadIndex`); a negative index counts from the end (the elements'
//! offsets are remembered, and the one asked for is read once the length is known).
//!
//! Where SIMD pays (issue 28; `cargo bench --bench scan`, bodies of 300 B to 64 KiB). The
//! scan is faster than the full simd-json parse at every size measured, for bodies whose bulk is
//! unread strings and for bodies whose bulk is unread objects, arrays and numbers: there is no
//! size above which handing the body to simd-json would pay, so every body the scan can vouch
//! for is scanned. What SIMD changed is the strings. With strings stepped over a word (8 bytes)
//! at a time, simd-json's stage 1 (32 or 64 bytes a step) caught up as bodies grew: the two were
//! level at 64 KiB of text — the crossover. Now the whole body's UTF-8 is checked up front by
//! `simdutf8` (SSE/AVX2 on x86_64, NEON on aarch64); a string's first [`SHORT_STRING`] bytes are
//! still read a word at a time (keys, codes and enum values end there, and below about 64 bytes
//! a `memchr` call costs more than it saves), and the rest is searched with `memchr2` for `"`
//! and `\` (AVX2/SSE2, NEON), the runs between checked for control bytes by a loop the compiler
//! vectorises; an escape is checked where it is found. A 64 KiB body of text is scanned in a
//! third of the time the full parse takes. Unread containers are not skipped by a structural
//! SIMD pass: checking them as strictly as simd-json means reading every token, so they are
//! walked token by token (their strings take the path above, and the digit runs of their
//! numbers are measured eight bytes at a time), about 1.4 times as fast as the full parse at
//! every size (1.2 to 1.8 across runs).

use std::cell::RefCell;

use simd_json::{Node, StaticNode};

use crate::expr::ir::PathSeg;
use crate::expr::ops::EvalError;
use crate::expr::program::{descend, recycle, Program, SlotValue};
use crate::expr::value::same_bytes;
use crate::expr::{Type, Value};

/// Paths longer than this make the table use the full parse (the scan recurses along paths).
const MAX_PLAN_DEPTH: usize = 32;
/// simd-json's own nesting limit; the scan is used only below it.
const SIMD_MAX_DEPTH: usize = 1024;

/// What a table reads of its inputs: the slots' paths as a tree.
#[derive(Debug)]
pub(crate) struct ReadPlan {
    nodes: Vec<PlanNode>,
    /// read slots inside a value that is kept whole: (slot, that value's slot, steps from it)
    derived: Vec<(u32, u32, Box<[PathSeg]>)>,
    slots: usize,
}

#[derive(Debug, Default)]
struct PlanNode {
    /// the slot that reads this value whole: the value is kept (nothing below is followed)
    slot: Option<u32>,
    keys: Vec<(Box<str>, u32)>,
    /// bit `n` set when some key of `keys` is `n` bytes long (bit 63: 63 or more), so that most
    /// unread keys are told apart by their length alone, without a comparison
    key_lengths: u64,
    indexes: Vec<(i64, u32)>,
    /// every read slot below this node (not its own), for repeated keys and type errors
    below: Vec<u32>,
}

impl ReadPlan {
    /// The plan of `program`'s read slots; `None` when a path is too long to follow.
    // Load time: every index is a node this function pushed, a slot of `program`, or a
    // position on a trail as long as its (non-empty) path.
    #[allow(clippy::indexing_slicing)]
    pub(crate) fn new(program: &Program) -> Option<ReadPlan> {
        let mut nodes = vec![PlanNode::default()];
        let mut ends: Vec<(u32, Vec<u32>)> = Vec::new(); // slot, nodes on its path
        for (slot, path) in program.paths.iter().enumerate() {
            if !program.read.get(slot).copied().unwrap_or(false) {
                continue;
            }
            if path.is_empty() || path.len() > MAX_PLAN_DEPTH {
                return None;
            }
            let mut at = 0usize;
            let mut trail = Vec::with_capacity(path.len());
            for seg in path {
                let next = match seg {
                    PathSeg::Key(k) => nodes[at].keys.iter().find(|(n, _)| n == k).map(|(_, c)| *c),
                    PathSeg::Index(i) => nodes[at].indexes.iter().find(|(n, _)| n == i).map(|(_, c)| *c),
                };
                let next = match next {
                    Some(n) => n as usize,
                    None => {
                        nodes.push(PlanNode::default());
                        let id = (nodes.len() - 1) as u32;
                        match seg {
                            PathSeg::Key(k) => nodes[at].keys.push((k.clone(), id)),
                            PathSeg::Index(i) => nodes[at].indexes.push((*i, id)),
                        }
                        id as usize
                    }
                };
                trail.push(next as u32);
                at = next;
            }
            nodes[at].slot = Some(slot as u32);
            ends.push((slot as u32, trail));
        }
        // A slot under a value kept whole is read from that value after the scan.
        let mut derived = Vec::new();
        for (slot, trail) in &ends {
            for &n in &trail[..trail.len().saturating_sub(1)] {
                nodes[n as usize].below.push(*slot);
            }
            let kept = trail[..trail.len() - 1].iter().position(|n| nodes[*n as usize].slot.is_some());
            if let Some(k) = kept {
                let ancestor = nodes[trail[k] as usize].slot.unwrap_or(0);
                let path = &program.paths[*slot as usize][k + 1..];
                derived.push((*slot, ancestor, path.into()));
            }
        }
        // Nothing below a kept value is followed by the scan.
        for n in nodes.iter_mut().filter(|n| n.slot.is_some()) {
            n.keys.clear();
            n.indexes.clear();
        }
        for n in &mut nodes {
            n.key_lengths = n.keys.iter().fold(0, |mask, (k, _)| mask | length_bit(k.len()));
        }

        Some(ReadPlan { nodes, derived, slots: program.paths.len() })
    }
}

/// The bit of [`PlanNode::key_lengths`] for a key of `len` bytes.
#[inline(always)]
const fn length_bit(len: usize) -> u64 {
    1 << if len < 63 { len } else { 63 }
}

/// A read value, by position (the body and the buffers are only borrowed once the scan is done).
#[derive(Clone, Copy, Debug)]
enum Raw {
    Nil,
    Static(StaticNode),
    Str(StrRef),
    /// nodes `start..end` of the tape
    Tape(u32, u32),
    Err(EvalError),
}

/// A string: a range of the body (no escapes) or of the unescaped buffer.
#[derive(Clone, Copy, Debug)]
enum StrRef {
    Body(u32, u32),
    Buf(u32, u32),
}

#[derive(Clone, Copy, Debug)]
enum RawNode {
    Str(StrRef),
    Static(StaticNode),
    Array { len: usize, count: usize },
    Object { len: usize, count: usize },
}

/// Why the scan gave up: the body needs the full parse.
#[derive(Debug)]
struct GiveUp;

type Scan<T> = Result<T, GiveUp>;

/// Per-thread buffers, reused across decisions.
#[derive(Default)]
struct Scratch {
    raw: Vec<Raw>,
    visited: Vec<bool>,
    tape: Vec<RawNode>,
    buf: String,
    key: String,
    offsets: Vec<u32>,
    /// open containers while a value is laid out: (tape index, values so far)
    open: Vec<(usize, usize)>,
    /// the slot vector of the last decision, empty: its allocation is the next one's
    slots: Vec<SlotValue<'static>>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Scans `bytes` for the slots `plan` reads and calls `f` with them. `None`: the body needs
/// the full parse (it may be invalid, or unusual in a way the scan does not handle).
pub(crate) fn with_scanned<R>(
    bytes: &[u8],
    plan: &ReadPlan,
    max_depth: usize,
    f: impl FnOnce(&mut Vec<SlotValue<'_>>) -> R,
) -> Option<R> {
    if max_depth >= SIMD_MAX_DEPTH {
        return None;
    }
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => scan_into(&mut scratch, bytes, plan, max_depth, f),
        Err(_) => scan_into(&mut Scratch::default(), bytes, plan, max_depth, f),
    })
}

fn scan_into<R>(
    scratch: &mut Scratch,
    bytes: &[u8],
    plan: &ReadPlan,
    max_depth: usize,
    f: impl FnOnce(&mut Vec<SlotValue<'_>>) -> R,
) -> Option<R> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let text = simdutf8::basic::from_utf8(bytes).ok()?;
    if bytes.len() >= u32::MAX as usize {
        return None;
    }
    scratch.raw.clear();
    scratch.raw.resize(plan.slots, Raw::Nil);
    scratch.visited.clear();
    scratch.visited.resize(plan.nodes.len(), false);
    scratch.tape.clear();
    scratch.buf.clear();
    let mut s = Scanner { b: bytes, t: text, pos: 0, plan, max_depth, sc: scratch };
    s.document().ok()?;
    let mut slots = std::mem::take(&mut scratch.slots);
    let Scratch { raw, tape, buf, .. } = &*scratch;
    let text_of = |r: StrRef| -> &str {
        match r {
            StrRef::Body(a, b) => text.get(a as usize..b as usize).unwrap_or(""),
            StrRef::Buf(a, b) => buf.get(a as usize..b as usize).unwrap_or(""),
        }
    };
    let nodes: Vec<Node<'_>> = tape
        .iter()
        .map(|n| match *n {
            RawNode::Str(r) => Node::String(text_of(r)),
            RawNode::Static(v) => Node::Static(v),
            RawNode::Array { len, count } => Node::Array { len, count },
            RawNode::Object { len, count } => Node::Object { len, count },
        })
        .collect();
    slots.clear();
    slots.extend(raw.iter().map(|r| match *r {
        Raw::Nil => Ok(Value::Nil),
        Raw::Static(v) => Ok(scalar(v)),
        Raw::Str(r) => Ok(Value::Str(text_of(r))),
        Raw::Tape(a, b) => Ok(Value::from_tape(nodes.get(a as usize..b as usize).unwrap_or(&[]))),
        Raw::Err(e) => Err(e),
    }));
    for (slot, ancestor, path) in &plan.derived {
        let v = slots.get(*ancestor as usize).copied().unwrap_or(Ok(Value::Nil)).and_then(|v| descend(v, path));
        if let Some(s) = slots.get_mut(*slot as usize) {
            *s = v;
        }
    }
    let answer = f(&mut slots);
    scratch.slots = recycle(slots);
    Some(answer)
}

/// A scalar as [`Value::from_tape`] reads it.
fn scalar(v: StaticNode) -> Value<'static> {
    match v {
        StaticNode::Null => Value::Nil,
        StaticNode::Bool(b) => Value::Bool(b),
        StaticNode::I64(i) => Value::Int(i),
        StaticNode::U64(u) => i64::try_from(u).map_or(Value::Float(u as f64), Value::Int),
        StaticNode::F64(f) => Value::Float(f),
    }
}

struct Scanner<'s> {
    b: &'s [u8],
    /// the same bytes, checked UTF-8
    t: &'s str,
    pos: usize,
    plan: &'s ReadPlan,
    max_depth: usize,
    sc: &'s mut Scratch,
}

const fn is_ws(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r')
}

/// The kind of a JSON value from its first byte.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Object,
    Array,
    Str,
    Num,
    True,
    False,
    Null,
}

impl<'s> Scanner<'s> {
    /// Plan node `i` (plans only name their own nodes: a miss gives up rather than panics).
    #[inline(always)]
    fn node(&self, i: usize) -> Scan<&'s PlanNode> {
        self.plan.nodes.get(i).ok_or(GiveUp)
    }

    /// The body's bytes `a..b`.
    #[inline(always)]
    fn bytes(&self, a: usize, b: usize) -> Scan<&'s [u8]> {
        self.b.get(a..b).ok_or(GiveUp)
    }

    #[inline(always)]
    fn set_raw(&mut self, slot: u32, raw: Raw) {
        if let Some(r) = self.sc.raw.get_mut(slot as usize) {
            *r = raw;
        }
    }

    #[inline(always)]
    fn set_visited(&mut self, node: usize, visited: bool) {
        if let Some(v) = self.sc.visited.get_mut(node) {
            *v = visited;
        }
    }

    #[inline(always)]
    fn ws(&mut self) {
        while let Some(&c) = self.b.get(self.pos) {
            // every byte above the space ends it: one comparison in the common case
            if c > b' ' || !is_ws(c) {
                break;
            }
            self.pos += 1;
        }
    }

    #[inline]
    fn peek(&self) -> Scan<u8> {
        self.b.get(self.pos).copied().ok_or(GiveUp)
    }

    #[inline]
    fn expect(&mut self, c: u8) -> Scan<()> {
        self.ws();
        if self.peek()? == c {
            self.pos += 1;
            Ok(())
        } else {
            Err(GiveUp)
        }
    }

    fn kind(&self) -> Scan<Kind> {
        Ok(match self.peek()? {
            b'{' => Kind::Object,
            b'[' => Kind::Array,
            b'"' => Kind::Str,
            b'-' | b'0'..=b'9' => Kind::Num,
            b't' => Kind::True,
            b'f' => Kind::False,
            b'n' => Kind::Null,
            _ => return Err(GiveUp),
        })
    }

    fn document(&mut self) -> Scan<()> {
        self.ws();
        if self.peek()? != b'{' {
            return Err(GiveUp);
        }
        self.object(0, 1)?;
        self.ws();
        if self.pos == self.b.len() {
            Ok(())
        } else {
            Err(GiveUp)
        }
    }

    /// The object at the cursor (`{`), following the members of plan node `node`.
    fn object(&mut self, node: usize, depth: usize) -> Scan<()> {
        if depth > self.max_depth {
            return Err(GiveUp);
        }
        self.pos += 1; // `{`
        self.ws();
        if self.peek()? == b'}' {
            self.pos += 1;
            return Ok(());
        }
        loop {
            self.ws();
            if self.peek()? != b'"' {
                return Err(GiveUp);
            }
            let child = self.key(node)?;
            self.expect(b':')?;
            self.ws();
            match child {
                Some(c) => {
                    let c = c as usize;
                    if self.sc.visited.get(c).copied().unwrap_or(false) {
                        // a repeated key: the last one wins
                        self.reset(c)?;
                    }
                    self.set_visited(c, true);
                    self.value(c, depth + 1)?;
                }
                None => self.skip(depth + 1)?,
            }
            self.ws();
            match self.peek()? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(GiveUp),
            }
        }
    }

    /// Reads the key at the cursor; the plan child it names, if any.
    fn key(&mut self, node: usize) -> Scan<Option<u32>> {
        let start = self.pos + 1;
        let (end, escaped) = self.string_end()?;
        self.pos = end + 1;
        let n = self.node(node)?;
        let text = self.bytes(start, end)?;
        if n.keys.is_empty() {
            return Ok(None);
        }
        let child = |k: &[u8]| n.keys.iter().find(|(name, _)| same_bytes(name.as_bytes(), k)).map(|(_, c)| *c);
        if !escaped {
            // (an escaped key's length in the body is not its length: it is compared below)
            if n.key_lengths & length_bit(text.len()) == 0 {
                return Ok(None);
            }
            return Ok(child(text));
        }
        let mut key = std::mem::take(&mut self.sc.key);
        key.clear();
        unescape(text, &mut key)?;
        let found = child(key.as_bytes());
        self.sc.key = key;
        Ok(found)
    }

    /// Forgets what an earlier member with the same key set.
    fn reset(&mut self, node: usize) -> Scan<()> {
        let n = self.node(node)?;
        for &s in n.slot.iter().chain(&n.below) {
            self.set_raw(s, Raw::Nil);
        }
        for &(_, c) in &n.keys {
            self.set_visited(c as usize, false);
        }
        for &(_, c) in &n.indexes {
            self.set_visited(c as usize, false);
        }
        Ok(())
    }

    /// The value at the cursor, for plan node `node`: kept whole, or followed.
    fn value(&mut self, node: usize, depth: usize) -> Scan<()> {
        let n = self.node(node)?;
        if let Some(slot) = n.slot {
            let raw = self.keep(depth)?;
            self.set_raw(slot, raw);
            return Ok(());
        }
        match self.kind()? {
            Kind::Object => {
                for &(_, c) in &n.indexes {
                    self.fail_below(c as usize, EvalError::BadIndex { container: Type::Object, index: Type::Int });
                }
                self.object(node, depth)
            }
            Kind::Array => {
                for &(_, c) in &n.keys {
                    self.fail_below(c as usize, EvalError::BadIndex { container: Type::Array, index: Type::Str });
                }
                self.array(node, depth)
            }
            Kind::Null => self.literal(b"null"),
            other => {
                let ty = match other {
                    Kind::Str => Type::Str,
                    Kind::True | Kind::False => Type::Bool,
                    _ => match self.number()? {
                        Number::Int(_) => Type::Int,
                        Number::Other(..) => Type::Float,
                    },
                };
                if ty == Type::Str {
                    self.skip_string()?;
                } else if ty == Type::Bool {
                    self.literal(if other == Kind::True { b"true" } else { b"false" })?;
                }
                for &s in &n.below {
                    self.set_raw(s, Raw::Err(EvalError::NotIndexable { ty }));
                }
                Ok(())
            }
        }
    }

    /// Every read slot at or below `node` fails with `e`.
    fn fail_below(&mut self, node: usize, e: EvalError) {
        let Ok(n) = self.node(node) else { return };
        for &s in n.slot.iter().chain(&n.below) {
            self.set_raw(s, Raw::Err(e));
        }
    }

    /// The array at the cursor (`[`), reading the elements plan node `node` asks for.
    fn array(&mut self, node: usize, depth: usize) -> Scan<()> {
        if depth > self.max_depth {
            return Err(GiveUp);
        }
        let wanted = &self.node(node)?.indexes;
        let from_end = wanted.iter().any(|(i, _)| *i < 0);
        let first_offset = self.sc.offsets.len();
        self.pos += 1; // `[`
        self.ws();
        let mut len: i64 = 0;
        if self.peek()? == b']' {
            self.pos += 1;
        } else {
            loop {
                self.ws();
                if from_end {
                    self.sc.offsets.push(self.pos as u32);
                }
                match wanted.iter().find(|(i, _)| *i == len) {
                    Some(&(_, c)) => self.value(c as usize, depth + 1)?,
                    None => self.skip(depth + 1)?,
                }
                len += 1;
                self.ws();
                match self.peek()? {
                    b',' => self.pos += 1,
                    b']' => {
                        self.pos += 1;
                        break;
                    }
                    _ => return Err(GiveUp),
                }
            }
        }
        if from_end {
            let end = self.pos;
            for &(i, c) in wanted.iter().filter(|(i, _)| *i < 0) {
                let at = len + i;
                if at >= 0 {
                    let offset = self.sc.offsets.get(first_offset + at as usize).copied().ok_or(GiveUp)?;
                    self.pos = offset as usize;
                    self.value(c as usize, depth + 1)?;
                }
            }
            self.pos = end;
            self.sc.offsets.truncate(first_offset);
        }
        Ok(())
    }

    /// Keeps the value at the cursor whole.
    fn keep(&mut self, depth: usize) -> Scan<Raw> {
        match self.kind()? {
            Kind::Str => Ok(Raw::Str(self.string()?)),
            Kind::Num => Ok(Raw::Static(self.number_value()?)),
            Kind::True => self.literal(b"true").map(|_| Raw::Static(StaticNode::Bool(true))),
            Kind::False => self.literal(b"false").map(|_| Raw::Static(StaticNode::Bool(false))),
            Kind::Null => self.literal(b"null").map(|_| Raw::Nil),
            Kind::Object | Kind::Array => {
                let start = self.sc.tape.len();
                self.tape(depth)?;
                Ok(Raw::Tape(start as u32, self.sc.tape.len() as u32))
            }
        }
    }

    /// Lays the container at the cursor out as tape nodes (iteratively: nesting is deep).
    fn tape(&mut self, depth: usize) -> Scan<()> {
        let base = self.sc.open.len();
        loop {
            // a value at the cursor
            self.ws();
            match self.kind()? {
                kind @ (Kind::Object | Kind::Array) => {
                    if depth + (self.sc.open.len() - base) > self.max_depth {
                        return Err(GiveUp);
                    }
                    let object = kind == Kind::Object;
                    self.sc.open.push((self.sc.tape.len(), 0));
                    self.sc.tape.push(if object {
                        RawNode::Object { len: 0, count: 0 }
                    } else {
                        RawNode::Array { len: 0, count: 0 }
                    });
                    self.pos += 1;
                    self.ws();
                    if self.peek()? == if object { b'}' } else { b']' } {
                        self.pos += 1;
                        self.close_container();
                    } else {
                        if object {
                            self.tape_key()?;
                        }
                        continue;
                    }
                }
                Kind::Str => {
                    let r = self.string()?;
                    self.sc.tape.push(RawNode::Str(r));
                }
                Kind::Num => {
                    let v = self.number_value()?;
                    self.sc.tape.push(RawNode::Static(v));
                }
                Kind::True => {
                    self.literal(b"true")?;
                    self.sc.tape.push(RawNode::Static(StaticNode::Bool(true)));
                }
                Kind::False => {
                    self.literal(b"false")?;
                    self.sc.tape.push(RawNode::Static(StaticNode::Bool(false)));
                }
                Kind::Null => {
                    self.literal(b"null")?;
                    self.sc.tape.push(RawNode::Static(StaticNode::Null));
                }
            }
            // a value is complete: count it in its container, then `,` or closing brackets
            loop {
                if self.sc.open.len() == base {
                    return Ok(());
                }
                let Some(top) = self.sc.open.last_mut() else { return Err(GiveUp) };
                top.1 += 1;
                let object = matches!(self.sc.tape.get(top.0), Some(RawNode::Object { .. }));
                self.ws();
                match self.peek()? {
                    b',' => {
                        self.pos += 1;
                        if object {
                            self.tape_key()?;
                        }
                        break;
                    }
                    b'}' if object => {}
                    b']' if !object => {}
                    _ => return Err(GiveUp),
                }
                self.pos += 1;
                self.close_container();
            }
        }
    }

    /// An object member's key and `:` (in tape mode).
    fn tape_key(&mut self) -> Scan<()> {
        self.ws();
        if self.peek()? != b'"' {
            return Err(GiveUp);
        }
        let r = self.string()?;
        self.sc.tape.push(RawNode::Str(r));
        self.expect(b':')
    }

    /// Closes the innermost open container: its `len` (members or elements) and `count` (nodes).
    fn close_container(&mut self) {
        let Some((start, len)) = self.sc.open.pop() else { return };
        let count = self.sc.tape.len() - start - 1;
        if let Some(node) = self.sc.tape.get_mut(start) {
            *node = match node {
                RawNode::Object { .. } => RawNode::Object { len, count },
                _ => RawNode::Array { len, count },
            };
        }
    }

    /// Steps over the value at the cursor, checking it (iteratively: nesting is deep).
    fn skip(&mut self, depth: usize) -> Scan<()> {
        match self.kind()? {
            Kind::Str => self.skip_string(),
            Kind::Num => self.skip_number(),
            Kind::True => self.literal(b"true"),
            Kind::False => self.literal(b"false"),
            Kind::Null => self.literal(b"null"),
            Kind::Object | Kind::Array => self.skip_container(depth),
        }
    }

    fn skip_container(&mut self, depth: usize) -> Scan<()> {
        // open containers, innermost last: true for an object
        let mut open: u128 = 0;
        let mut n: usize = 0;
        let mut base: Vec<bool> = Vec::new(); // beyond 128 levels
        let push = |open: &mut u128, n: &mut usize, base: &mut Vec<bool>, object: bool| {
            if *n < 128 {
                *open = (*open << 1) | u128::from(object);
            } else {
                base.push(object);
            }
            *n += 1;
        };
        loop {
            // a value at the cursor
            self.ws();
            match self.kind()? {
                kind @ (Kind::Object | Kind::Array) => {
                    if depth + n > self.max_depth {
                        return Err(GiveUp);
                    }
                    let object = kind == Kind::Object;
                    push(&mut open, &mut n, &mut base, object);
                    self.pos += 1;
                    self.ws();
                    let close = if object { b'}' } else { b']' };
                    if self.peek()? != close {
                        if object {
                            self.skip_key()?;
                        }
                        continue;
                    }
                    self.pos += 1;
                    n -= 1;
                    if n >= 128 {
                        base.pop();
                    } else {
                        open >>= 1;
                    }
                }
                Kind::Str => self.skip_string()?,
                Kind::Num => self.skip_number()?,
                Kind::True => self.literal(b"true")?,
                Kind::False => self.literal(b"false")?,
                Kind::Null => self.literal(b"null")?,
            }
            // after a value: `,` or closing brackets
            loop {
                if n == 0 {
                    return Ok(());
                }
                let object = if n > 128 { base.last().copied().unwrap_or(false) } else { open & 1 == 1 };
                self.ws();
                match self.peek()? {
                    b',' => {
                        self.pos += 1;
                        if object {
                            self.skip_key()?;
                        }
                        break;
                    }
                    b'}' if object => {}
                    b']' if !object => {}
                    _ => return Err(GiveUp),
                }
                self.pos += 1;
                n -= 1;
                if n >= 128 {
                    base.pop();
                } else {
                    open >>= 1;
                }
            }
        }
    }

    fn skip_key(&mut self) -> Scan<()> {
        self.ws();
        if self.peek()? != b'"' {
            return Err(GiveUp);
        }
        self.skip_string()?;
        self.expect(b':')
    }

    fn literal(&mut self, word: &[u8]) -> Scan<()> {
        if self.b.get(self.pos..self.pos + word.len()) == Some(word) {
            self.pos += word.len();
            self.delimited()
        } else {
            Err(GiveUp)
        }
    }

    /// After a number or a literal: the end, whitespace or a structural byte.
    fn delimited(&self) -> Scan<()> {
        match self.b.get(self.pos) {
            None => Ok(()),
            Some(&c) if is_ws(c) || matches!(c, b',' | b'}' | b']' | b':' | b'[' | b'{' | b'"') => Ok(()),
            Some(_) => Err(GiveUp),
        }
    }

    /// Steps over a string (cursor on its `"`), checking escapes and control bytes.
    fn skip_string(&mut self) -> Scan<()> {
        let (end, _) = self.string_end()?;
        self.pos = end + 1;
        Ok(())
    }

    /// The string at the cursor, kept.
    fn string(&mut self) -> Scan<StrRef> {
        let start = self.pos + 1;
        let (end, escaped) = self.string_end()?;
        self.pos = end + 1;
        if !escaped {
            return Ok(StrRef::Body(start as u32, end as u32));
        }
        let from = self.sc.buf.len();
        unescape(self.bytes(start, end)?, &mut self.sc.buf)?;
        Ok(StrRef::Buf(from as u32, self.sc.buf.len() as u32))
    }

    /// The closing quote of the string at the cursor, and whether it holds a `\`. Control
    /// bytes and invalid escapes give up.
    ///
    /// The first [`SHORT_STRING`] bytes are read eight at a time in a register: keys, codes and
    /// enum values end there, before a call would pay off. Past them the string is long (a
    /// message, a user agent, a base64 blob), and it is searched with SIMD: `memchr2` (AVX2 or
    /// SSE2 on x86_64, NEON on aarch64) finds the next `"` or `\`, and the run before it is
    /// checked for control bytes in one vectorised pass ([`has_control`]). Inlined into its
    /// three callers: as a call, it cost short strings half again what reading them does.
    #[inline(always)]
    fn string_end(&self) -> Scan<(usize, bool)> {
        const LO: u64 = 0x0101_0101_0101_0101;
        const HI: u64 = 0x8080_8080_8080_8080;
        let b = self.b;
        let mut i = self.pos + 1;
        let short_end = i + SHORT_STRING;
        let mut escaped = false;
        while i < short_end {
            if let Some(Ok(chunk)) = b.get(i..i + 8).map(<[u8; 8]>::try_from) {
                let w = u64::from_le_bytes(chunk);
                let q = w ^ (LO * u64::from(b'"'));
                let s = w ^ (LO * u64::from(b'\\'));
                let special = (q.wrapping_sub(LO) & !q) | (s.wrapping_sub(LO) & !s) | (w.wrapping_sub(LO * 0x20) & !w);
                let special = special & HI;
                if special == 0 {
                    i += 8;
                    continue;
                }
                // the first flagged byte is a real one (later flags may be borrows)
                i += (special.trailing_zeros() / 8) as usize;
            }
            match b.get(i) {
                None => return Err(GiveUp),
                Some(b'"') => return Ok((i, escaped)),
                Some(b'\\') => {
                    escaped = true;
                    i += escape_len(b, i)?;
                }
                Some(&c) if c < 0x20 => return Err(GiveUp),
                Some(_) => i += 1,
            }
        }
        long_string_end(b, i, escaped)
    }

    /// Checks the number at the cursor and moves past it. Gives up on what simd-json might
    /// read differently or reject (a float that overflows).
    fn number(&mut self) -> Scan<Number> {
        let b = self.b;
        let start = self.pos;
        let mut i = start;
        let negative = b.get(i) == Some(&b'-');
        if negative {
            i += 1;
        }
        let digits_start = i;
        let mut value: u64 = 0;
        match b.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => {
                while let Some(&d) = b.get(i).filter(|d| d.is_ascii_digit()) {
                    value = value.wrapping_mul(10).wrapping_add(u64::from(d - b'0'));
                    i += 1;
                }
            }
            _ => return Err(GiveUp),
        }
        let int_digits = i - digits_start;
        let mut float = false;
        // every digit, as one integer (exact while there are at most 15 of them)
        let mut mantissa = value;
        let mut fraction_digits = 0;
        if b.get(i) == Some(&b'.') {
            float = true;
            i += 1;
            let f = i;
            while let Some(&d) = b.get(i).filter(|d| d.is_ascii_digit()) {
                mantissa = mantissa.wrapping_mul(10).wrapping_add(u64::from(d - b'0'));
                i += 1;
            }
            fraction_digits = i - f;
            if fraction_digits == 0 {
                return Err(GiveUp);
            }
        }
        let (i, exponent) = self.number_end(start, i, int_digits)?;
        float |= exponent;
        Ok(if float {
            let exact = !exponent && int_digits + fraction_digits <= MAX_EXACT_DIGITS;
            Number::Other(
                start as u32,
                i as u32,
                exact.then(|| short_decimal(mantissa, fraction_digits, negative)).flatten(),
            )
        } else if int_digits <= 18 {
            // exact: at most 18 digits fit, with the sign, in an i64
            Number::Int(if negative { -(value as i64) } else { value as i64 })
        } else {
            match self.text(start, i)?.parse::<i64>() {
                Ok(v) => Number::Int(v),
                Err(_) => Number::Other(start as u32, i as u32, None),
            }
        })
    }

    /// Checks the number at the cursor and moves past it, as [`Scanner::number`] does, without
    /// reading it: its digit runs are measured eight bytes at a time ([`digits_end`]).
    fn skip_number(&mut self) -> Scan<()> {
        let b = self.b;
        let start = self.pos;
        let digits_start = start + usize::from(b.get(start) == Some(&b'-'));
        let mut i = match b.get(digits_start) {
            Some(b'0') => digits_start + 1,
            Some(b'1'..=b'9') => digits_end(b, digits_start + 1),
            _ => return Err(GiveUp),
        };
        let int_digits = i - digits_start;
        if b.get(i) == Some(&b'.') {
            let f = i + 1;
            i = digits_end(b, f);
            if i == f {
                return Err(GiveUp);
            }
        }
        self.number_end(start, i, int_digits).map(|_| ())
    }

    /// The rest of the number at `start` from `b[i]`, its exponent if any, and the cursor past
    /// it: its end, and whether it has an exponent. Gives up on a float simd-json would reject.
    fn number_end(&mut self, start: usize, mut i: usize, int_digits: usize) -> Scan<(usize, bool)> {
        let b = self.b;
        let exponent = matches!(b.get(i), Some(b'e' | b'E'));
        if exponent {
            i += 1;
            if matches!(b.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            let e = i;
            i = digits_end(b, e);
            if i == e {
                return Err(GiveUp);
            }
        }
        self.pos = i;
        self.delimited()?;
        // simd-json rejects numbers that overflow a float: check those that could
        if (exponent || int_digits > 300) && !self.text(start, i)?.parse::<f64>().map_err(|_| GiveUp)?.is_finite() {
            return Err(GiveUp);
        }
        Ok((i, exponent))
    }

    /// The body's text from `a` to `b` (ASCII here: always on character boundaries).
    fn text(&self, a: usize, b: usize) -> Scan<&'s str> {
        self.t.get(a..b).ok_or(GiveUp)
    }

    /// The number at the cursor, as the full parse gives it.
    fn number_value(&mut self) -> Scan<StaticNode> {
        match self.number()? {
            Number::Int(v) => Ok(StaticNode::I64(v)),
            // floats, and integers beyond 64 bits (read as the nearest float, as simd-json does)
            Number::Other(_, _, Some(f)) => Ok(StaticNode::F64(f)),
            Number::Other(a, b, None) => {
                let f: f64 = self.text(a as usize, b as usize)?.parse().map_err(|_| GiveUp)?;
                if f.is_finite() {
                    Ok(StaticNode::F64(f))
                } else {
                    Err(GiveUp)
                }
            }
        }
    }
}

/// The end of the run of ASCII digits from `b[i]`, eight bytes at a time.
#[inline]
fn digits_end(b: &[u8], mut i: usize) -> usize {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    const HIGH_NIBBLES: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    while let Some(Ok(chunk)) = b.get(i..i + 8).map(<[u8; 8]>::try_from) {
        let w = u64::from_le_bytes(chunk);
        // a digit's high nibble is 3 and its low nibble below 10: each byte of `x` is zero
        // exactly when that byte is a digit (no carry crosses a byte)
        let x = ((w & HIGH_NIBBLES) ^ (LO * 0x30)) | (((w & !HIGH_NIBBLES) + LO * 6) & HIGH_NIBBLES);
        // the high bit of each non-zero byte
        let other = (((x & !HI) + !HI) | x) & HI;
        if other != 0 {
            return i + (other.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while b.get(i).is_some_and(u8::is_ascii_digit) {
        i += 1;
    }
    i
}

/// The rest of a long string from `b[i]`, for [`Scanner::string_end`]: `memchr2` to the next
/// `"` or `\`, and the run before it checked for control bytes. Not inlined: the short strings'
/// path stays small.
#[inline(never)]
fn long_string_end(b: &[u8], mut i: usize, mut escaped: bool) -> Scan<(usize, bool)> {
    loop {
        let rest = b.get(i..).ok_or(GiveUp)?;
        let run = memchr::memchr2(b'"', b'\\', rest).ok_or(GiveUp)?;
        if has_control(rest.get(..run).ok_or(GiveUp)?) {
            return Err(GiveUp);
        }
        i += run;
        if b.get(i) == Some(&b'"') {
            return Ok((i, escaped));
        }
        escaped = true;
        i += escape_len(b, i)?;
    }
}

/// How far into a string [`Scanner::string_end`] reads a word at a time before it searches
/// with SIMD.
const SHORT_STRING: usize = 64;

/// Whether `s` holds a control byte (below the space), which a JSON string may not. No early
/// exit: the loop is vectorised (SSE2 on x86_64, NEON on aarch64), 16 bytes or more a step.
#[inline]
fn has_control(s: &[u8]) -> bool {
    s.iter().fold(false, |found, &c| found | (c < 0x20))
}

/// Powers of ten that are exact floats.
const EXACT_POWERS_OF_TEN: [f64; 16] =
    [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15];

/// The most digits a decimal may have for [`short_decimal`]: below 2^53, every integer of 15
/// digits is an exact float.
const MAX_EXACT_DIGITS: usize = 15;

/// A decimal without an exponent and of at most [`MAX_EXACT_DIGITS`] digits (`1200.5`, `-0.42`),
/// given as its digits read as one integer and how many of them follow the point, as the
/// nearest float: the integer and the power of ten dividing it are exact floats, so one division
/// is correctly rounded (Clinger's fast path), as a full parse is.
fn short_decimal(mantissa: u64, fraction_digits: usize, negative: bool) -> Option<f64> {
    let value = mantissa as f64 / EXACT_POWERS_OF_TEN.get(fraction_digits)?;
    Some(if negative { -value } else { value })
}

/// A number as the scan sees it: an int that fits 64 bits, or the text of anything else (with
/// its value when it is a short decimal).
#[derive(Clone, Copy)]
enum Number {
    Int(i64),
    Other(u32, u32, Option<f64>),
}

/// The length of the valid escape at `s[i]` (a `\`); a surrogate pair is one escape of 12
/// bytes, and a lone surrogate gives up. Not inlined: escapes are rare, and the short strings'
/// path stays small.
#[inline(never)]
fn escape_len(s: &[u8], i: usize) -> Scan<usize> {
    match s.get(i + 1) {
        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok(2),
        Some(b'u') => escaped_char(s, i).map(|(_, used)| used),
        _ => Err(GiveUp),
    }
}

/// The character of the `\u` escape at `s[i]` and how many bytes it spans (a surrogate pair
/// spans two escapes). A lone surrogate gives up.
fn escaped_char(s: &[u8], i: usize) -> Scan<(char, usize)> {
    let hex = |at: usize| -> Scan<u32> {
        let d = s.get(at..at + 4).ok_or(GiveUp)?;
        let mut v = 0u32;
        for &c in d {
            v = v * 16 + (c as char).to_digit(16).ok_or(GiveUp)?;
        }
        Ok(v)
    };
    let code = hex(i + 2)?;
    if (0xD800..0xDC00).contains(&code) {
        if s.get(i + 6..i + 8) != Some(b"\\u") {
            return Err(GiveUp);
        }
        let low = hex(i + 8)?;
        if !(0xDC00..0xE000).contains(&low) {
            return Err(GiveUp);
        }
        let c = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
        return Ok((char::from_u32(c).ok_or(GiveUp)?, 12));
    }
    Ok((char::from_u32(code).ok_or(GiveUp)?, 6))
}

/// Appends the decoded content of a string (between its quotes) to `out`.
fn unescape(s: &[u8], out: &mut String) -> Scan<()> {
    let mut i = 0;
    let mut run = 0;
    let text = |a: usize, b: usize| s.get(a..b).and_then(|t| std::str::from_utf8(t).ok()).ok_or(GiveUp);
    while let Some(&c) = s.get(i) {
        if c != b'\\' {
            i += 1;
            continue;
        }
        out.push_str(text(run, i)?);
        let (c, used) = match s.get(i + 1) {
            Some(b'"') => ('"', 2),
            Some(b'\\') => ('\\', 2),
            Some(b'/') => ('/', 2),
            Some(b'b') => ('\u{8}', 2),
            Some(b'f') => ('\u{c}', 2),
            Some(b'n') => ('\n', 2),
            Some(b'r') => ('\r', 2),
            Some(b't') => ('\t', 2),
            Some(b'u') => escaped_char(s, i)?,
            _ => return Err(GiveUp),
        };
        out.push(c);
        i += used;
        run = i;
    }
    out.push_str(text(run, s.len())?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::compile::compile_program;
    use crate::expr::json::write_value;
    use crate::expr::parser::parse;
    use proptest::prelude::*;
    use rustc_hash::FxHashMap;

    fn program(conditions: &[&str]) -> Program {
        let exprs: Vec<_> = conditions.iter().map(|c| parse(c, 64).unwrap()).collect();
        let refs: Vec<_> = exprs.iter().collect();
        compile_program(&refs, &FxHashMap::default(), 1 << 20).unwrap()
    }

    fn show(v: &SlotValue<'_>) -> String {
        match v {
            Ok(v) => {
                let mut s = String::new();
                write_value(v, &mut s);
                format!("{s} {:?}", v.type_of())
            }
            Err(e) => format!("error {e}"),
        }
    }

    /// The read slots, by the scan and by the full parse.
    fn both(p: &Program, body: &str) -> (Option<Vec<String>>, Option<Vec<String>>) {
        both_bytes(p, body.as_bytes())
    }

    fn both_bytes(p: &Program, body: &[u8]) -> (Option<Vec<String>>, Option<Vec<String>>) {
        let plan = ReadPlan::new(p).unwrap();
        let read = |slots: &[SlotValue<'_>]| -> Vec<String> {
            slots.iter().enumerate().filter(|(i, _)| p.read[*i]).map(|(_, v)| show(v)).collect()
        };
        let scanned = with_scanned(body, &plan, 128, |slots| read(slots));
        let full = crate::input::with_parsed(body, 128, |root| read(&p.fill_slots(&root))).ok();
        (scanned, full)
    }

    const CONDITIONS: &[&str] = &[
        "a == 1",
        "b.c.d == 1",
        "items[0].sku == 1",
        "items[-1].price == 1",
        "items[-2] == 1",
        "h[\"x-k\"] == 1",
        "len(items) > 0",
        "len(o) == 1 && o.k == 1",
        "s == 1",
        "n[1] == 1 && n.k == 1",
    ];

    #[test]
    fn the_scan_reads_what_the_full_parse_reads() {
        let p = program(CONDITIONS);
        for body in [
            r#"{}"#,
            r#"{"a": 1, "zz": [1, {"q": "\u00e9\n"}], "s": "plain"}"#,
            r#"{"a": "x\"y\\u00e9\ud83d\ude00", "b": {"c": {"d": [1, 2.5e3, -0, -0.0, 1e-400]}}}"#,
            r#"{"b": {"c": 5}, "items": [{"sku": "A"}, {"price": 12.5}, 3]}"#,
            r#"{"b": [1], "items": {"sku": "A"}, "h": {"x-k": null, "x\u002dk": "later"}}"#,
            r#"{"a": 1, "a": {"x": 2}, "b": {"c": {"d": 1}}, "b": {"c": 7}}"#,
            r#"{"b": {"c": {"d": 1}}, "b": {}, "items": [{"sku": 1}], "items": [{}, 2]}"#,
            r#"{"b": {"c": {"d": 1}, "c": {"e": 1}}, "h": {"x-k": 1}, "h": null}"#,
            r#"{"items": [], "o": {"k": [1, [2, {"z": null}]], "k": true}, "n": "text"}"#,
            r#"{"items": [1], "n": [1, 2], "s": 9223372036854775807}"#,
            r#"{"s": 9223372036854775808, "a": -9223372036854775809, "b": 18446744073709551616}"#,
            r#"{"s": 123456789012345678901234567890.5, "a": 1.7976931348623157e308}"#,
            " \u{feff}{\"a\": 1}",
            "\u{feff}{\"a\": 1}",
            r#"{"a": 1} "#,
            r#"{"a": [[[[]]]], "s": {"deep": {"er": [{}]}}}"#,
            r#"{"n": [true, false, null], "items": [null, {"price": 1}]}"#,
        ] {
            let (scanned, full) = both(&p, body);
            if let Some(s) = &scanned {
                assert_eq!(Some(s), full.as_ref(), "{body}");
            }
            assert!(scanned.is_some() || !body.starts_with('{'), "the scan gave up on {body}");
        }
    }

    /// Keys are told apart by their length first: keys as long as a read one, longer than 63
    /// bytes (which share one length bit), and escaped keys (whose length in the body is not
    /// their length) still find their slots, and only theirs.
    #[test]
    fn keys_are_found_whatever_their_length() {
        let long = "k".repeat(70);
        let longer = "k".repeat(80);
        let read = [format!("{long} == 1"), "abc == 1".into(), "h.xy == 1".into()];
        let p = program(&read.iter().map(String::as_str).collect::<Vec<_>>());
        for body in [
            format!(r#"{{"{longer}": 5, "{long}": 7, "abd": 2, "abc": 3, "h": {{"xz": 1, "xy": 2}}}}"#),
            format!(r#"{{"{long}": 7, "{longer}": 5, "ab\u0063": 4, "h": {{"x\u0079": 8}}}}"#),
            r#"{"ab": 1, "abcd": 2, "h": {"x": 1, "xyz": 2}}"#.into(),
        ] {
            let (scanned, full) = both(&p, &body);
            assert!(scanned.is_some(), "the scan gave up on {body}");
            assert_eq!(scanned, full, "{body}");
        }
        let (scanned, _) = both(&p, &format!(r#"{{"{long}": 7, "ab\u0063": 4, "h": {{"xy": 2}}}}"#));
        assert_eq!(scanned, Some(vec!["7 Int".into(), "4 Int".into(), "2 Int".into()]));
    }

    /// Short decimals read by the fast path are the floats a full parse gives.
    #[test]
    fn short_decimals_are_read_as_the_full_parse_reads_them() {
        let mut texts: Vec<String> = [
            "0.0",
            "-0.0",
            "1200.5",
            "0.1",
            "0.2",
            "0.3",
            "0.30000000000000004",
            "123456789012345",
            "1.23456789012345",
            "999999999999999.9",
            "9007199254740993.0",
            "0.000000000000001",
            "00.5",
            "1.",
            "1.5e3",
            "-",
            ".5",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let digits = (x % 999_999_999_999_999).to_string();
            let point = (x >> 50) as usize % (digits.len() + 1);
            texts.push(format!("{}.{}", &digits[..point], &digits[point..]).trim_start_matches('.').to_string());
        }
        let p = program(CONDITIONS);
        for t in &texts {
            let (scanned, full) = both(&p, &format!("{{\"a\": {t}}}"));
            if scanned.is_some() {
                assert_eq!(scanned, full, "{t}");
            }
            for negative in [false, true] {
                let Some(fast) = t.strip_prefix('-').map_or(Some(t.as_str()), |_| None).and_then(|t| {
                    let (int, fraction) = t.split_once('.')?;
                    let digits = format!("{int}{fraction}");
                    let exact = !int.is_empty() && !fraction.is_empty() && digits.len() <= MAX_EXACT_DIGITS;
                    short_decimal(digits.parse().ok().filter(|_| exact)?, fraction.len(), negative)
                }) else {
                    continue;
                };
                let want = format!("{}{t}", if negative { "-" } else { "" }).parse::<f64>().map(f64::to_bits);
                assert_eq!(Ok(fast.to_bits()), want, "{t}");
            }
        }
    }

    #[test]
    fn the_scan_gives_up_on_what_it_cannot_vouch_for() {
        let p = program(CONDITIONS);
        for body in [
            "",
            "[]",
            "{",
            r#"{"a": 1,}"#,
            r#"{"a": 01}"#,
            r#"{"a": 1e999}"#,
            r#"{"a": "\ud800"}"#,
            r#"{"zz": "\q"}"#,
            "{\"zz\": \"a\tb\"}",
            r#"{"a": tru}"#,
            r#"{"a": 1}x"#,
            r#"{"a": [1 2]}"#,
            r#"{"zz": {"k" 1}}"#,
        ] {
            let (scanned, _) = both(&p, body);
            assert!(scanned.is_none(), "the scan accepted {body:?}");
        }
        let deep = format!("{{\"zz\": {}{}}}", "[".repeat(127), "]".repeat(127));
        assert!(both(&p, &deep).0.is_some(), "128 levels are accepted");
        let deeper = format!("{{\"zz\": {}{}}}", "[".repeat(128), "]".repeat(128));
        assert!(both(&p, &deeper).0.is_none(), "129 levels are not");
        let kept = format!("{{\"items\": {}{}}}", "[".repeat(128), "]".repeat(128));
        assert!(both(&p, &kept).0.is_none(), "nor 129 in a kept value");
    }

    /// The word-at-a-time digit run and the vectorised control-byte test agree with a byte loop,
    /// wherever the run ends in an eight-byte word and whatever follows it.
    #[test]
    fn digit_runs_and_control_bytes_are_found_where_a_byte_loop_finds_them() {
        let tails: [&[u8]; 9] = [b"", b",", b"}", b"/", b":", b".5", b"e", b"\xc3\xa9", b"\x00"];
        for len in 0..40 {
            for tail in tails {
                for lead in 0..3 {
                    let mut b = b"-".repeat(lead);
                    b.extend((0..len).map(|i| b'0' + (i * 7 % 10) as u8));
                    b.extend_from_slice(tail);
                    b.extend_from_slice(b"9]");
                    let want = lead + b[lead..].iter().take_while(|c| c.is_ascii_digit()).count();
                    assert_eq!(digits_end(&b, lead), want, "{:?}", String::from_utf8_lossy(&b));
                }
            }
        }
        for c in 0..=255u8 {
            let b = [c; 1];
            assert_eq!(digits_end(&b.repeat(9), 0), if c.is_ascii_digit() { 9 } else { 0 }, "{c}");
            for at in [0, 7, 15, 16, 31, 32, 63, 64, 100] {
                let mut s = vec![b'a'; 101];
                s[at] = c;
                assert_eq!(has_control(&s), c < 0x20, "{c} at {at}");
            }
        }
    }

    /// A JSON string's content: long plain runs (of every length, so that what follows lands
    /// anywhere in a word or a vector), escapes, raw UTF-8 and, when `invalid`, what no string
    /// may hold — control bytes, bad escapes, lone surrogates, invalid UTF-8.
    fn string_content(invalid: bool) -> impl Strategy<Value = Vec<u8>> {
        let valid = prop_oneof![
            8 => "[a-zA-Z0-9 ,.!?+/=-]{0,90}".prop_map(String::into_bytes),
            1 => "[A-Za-z0-9+/]{200,3000}".prop_map(String::into_bytes),
            3 => prop::sample::select(vec![
                "\\n", "\\\"", "\\\\", "\\/", "\\b", "\\f", "\\r", "\\t", "\\u00e9", "\\u0000", "\\u001f",
                "\\ud83d\\ude00", "\\uD83D\\uDE00", "\\u20AC", "\u{7f}",
            ])
            .prop_map(|e| e.as_bytes().to_vec()),
            2 => prop::sample::select(vec!["é", "東京", "😀", "ü"]).prop_map(|e| e.as_bytes().to_vec()),
        ];
        let bad = prop_oneof![
            prop_oneof![0u8..0x20, Just(0x1f), Just(0)].prop_map(|c| vec![c]),
            prop::sample::select(vec![
                &b"\\q"[..],
                b"\\u12",
                b"\\u12G4",
                b"\\ud800",
                b"\\udc00",
                b"\\ud83d\\u0041",
                b"\\ud83d\\n",
                b"\\",
                b"\\x",
                b"\\U0041",
                b"\xff",
                b"\xe6\x9d",
                b"\xc0\x80",
                b"\xed\xa0\x80",
                b"\xf8\x88\x80\x80",
            ])
            .prop_map(<[u8]>::to_vec),
        ];
        let piece = if invalid { prop_oneof![12 => valid, 1 => bad].boxed() } else { valid.boxed() };
        prop::collection::vec(piece, 0..12).prop_map(|pieces| pieces.concat())
    }

    /// A number's text: valid ones of every digit count (runs that end anywhere in a word), and
    /// with `invalid`, the ones simd-json rejects too.
    fn number_text(invalid: bool) -> impl Strategy<Value = String> {
        let valid = "-?(0|[1-9][0-9]{0,24})(\\.[0-9]{1,20})?([eE][+-]?[0-9]{1,2})?";
        let bad = prop::sample::select(vec![
            "-", "01", "-01", "1.", "1.e5", ".5", "1e", "1e+", "--1", "1e400", "-1e400", "1x", "1.5.2", "2e308",
            "1e-400", "1E308", "0e0", "-0.0e-0",
        ])
        .prop_map(str::to_string);
        if invalid {
            prop_oneof![6 => valid, 1 => bad].boxed()
        } else {
            valid.boxed()
        }
    }

    /// A JSON value (or, with `invalid`, something close to one) with containers deep and wide.
    fn json_value(invalid: bool) -> impl Strategy<Value = Vec<u8>> {
        let ws = prop::sample::select(vec!["", "", "", " ", "\n  ", "\t"]);
        let leaf = prop_oneof![
            4 => number_text(invalid).prop_map(String::into_bytes),
            3 => string_content(invalid).prop_map(|s| [&b"\""[..], &s, b"\""].concat()),
            1 => prop::sample::select(vec!["true", "false", "null"]).prop_map(|s| s.as_bytes().to_vec()),
        ];
        let leaf = if invalid {
            prop_oneof![
                30 => leaf,
                1 => prop::sample::select(vec!["tru", "nul", "nulll", "'x'", "[1,]", "{\"k\"}", "]", "\"open"])
                    .prop_map(|s| s.as_bytes().to_vec()),
            ]
            .boxed()
        } else {
            leaf.boxed()
        };
        leaf.prop_recursive(4, 200, 24, move |inner| {
            let member = (string_content(invalid), ws.clone(), inner.clone())
                .prop_map(|(k, ws, v)| [&b"\""[..], &k, b"\":", ws.as_bytes(), &v].concat());
            prop_oneof![
                prop::collection::vec(inner, 0..30).prop_map(|vs| [&b"["[..], &vs.join(&b", "[..]), b"]"].concat()),
                prop::collection::vec(member, 0..20).prop_map(|ms| [&b"{"[..], &ms.join(&b","[..]), b"}"].concat()),
            ]
        })
    }

    /// Bodies whose strings, keys and unread containers are read by the scan's fast paths: the
    /// scan and the full parse agree, and a body the scan accepts is one simd-json accepts.
    fn scan_agrees(invalid: bool, value: &[u8], text: &[u8], key: &[u8]) -> Result<(), TestCaseError> {
        let p = program(CONDITIONS);
        let q = |s: &[u8]| [&b"\""[..], s, b"\""].concat();
        let bodies = [
            // an unread value, a kept string, an unread key, a read field after them
            [&b"{\"zz\": "[..], value, b", \"s\": ", &q(text), b", ", &q(key), b": 1, \"a\": 2}"].concat(),
            // an unread string, a read array and a kept object
            [&b"{\"zz\": "[..], &q(text), b", \"items\": ", value, b", \"o\": ", value, b", \"a\": 3}"].concat(),
            // strings inside a kept value (the tape) and an object member read by name
            [
                &b"{\"s\": ["[..],
                &q(text),
                b", ",
                value,
                b"], \"b\": {",
                &q(key),
                b": ",
                value,
                b", \"c\": {\"d\": 4}}}",
            ]
            .concat(),
        ];
        for body in &bodies {
            let (scanned, full) = both_bytes(&p, body);
            if let Some(s) = &scanned {
                prop_assert_eq!(Some(s), full.as_ref(), "{:?}", String::from_utf8_lossy(body));
            }
            if !invalid {
                prop_assert!(scanned.is_some(), "the scan gave up on {:?}", String::from_utf8_lossy(body));
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

        /// Valid long strings and big containers: the scan accepts them and reads what the full
        /// parse reads.
        #[test]
        fn long_strings_and_big_containers_scan_as_the_full_parse(
            value in json_value(false),
            text in string_content(false),
            key in string_content(false),
        ) {
            scan_agrees(false, &value, &text, &key)?;
        }

        /// With a flaw somewhere (a control byte, a bad escape, invalid UTF-8, a bad number or
        /// a broken container), wherever it falls: the scan gives up, or agrees with the full
        /// parse.
        #[test]
        fn flawed_strings_and_containers_never_scan_differently(
            value in json_value(true),
            text in string_content(true),
            key in string_content(true),
        ) {
            scan_agrees(true, &value, &text, &key)?;
        }
    }
}
