//! Runtime values of the expression language.
//!
//! A [`Value`] is `Copy`: strings, arrays and objects borrow either from the
//! parsed request (the simd-json tape), from the compiled table's constants, or
//! from the per-decision arena. Nothing on the evaluation path clones a string.

use simd_json::{Node, StaticNode};

/// One value seen by an expression while it evaluates.
#[derive(Clone, Copy, Debug)]
pub enum Value<'a> {
    /// `nil` / `null`, also what a missing field reads as.
    Nil,
    /// `true` / `false`.
    Bool(bool),
    /// A signed 64-bit integer.
    Int(i64),
    /// A 64-bit float.
    Float(f64),
    /// A UTF-8 string.
    Str(&'a str),
    /// An array.
    Array(Array<'a>),
    /// A JSON object (only input data produces objects).
    Object(Object<'a>),
}

/// The type of a [`Value`], used in messages and in load-time type checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    /// `nil`
    Nil,
    /// `bool`
    Bool,
    /// `int`
    Int,
    /// `float`
    Float,
    /// `string`
    Str,
    /// `array`
    Array,
    /// `object`
    Object,
}

impl Type {
    /// The name used in diagnostics and warnings.
    pub fn name(self) -> &'static str {
        match self {
            Type::Nil => "nil",
            Type::Bool => "bool",
            Type::Int => "int",
            Type::Float => "float",
            Type::Str => "string",
            Type::Array => "array",
            Type::Object => "object",
        }
    }
}

impl std::fmt::Display for Type {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A constant known at load time: literals, folded sub-expressions and
/// parameter values. Owned, so a compiled table can be shared across threads.
#[derive(Clone, Debug, PartialEq)]
pub enum Const {
    /// `nil`
    Nil,
    /// a bool
    Bool(bool),
    /// an int
    Int(i64),
    /// a float
    Float(f64),
    /// a string
    Str(Box<str>),
    /// an array of constants
    Array(Vec<Const>),
    /// an object (only parameter values can be objects)
    Object(Vec<(Box<str>, Const)>),
}

/// An array value: a slice of the request's tape, constants, or values built
/// during evaluation.
#[derive(Clone, Copy, Debug)]
pub enum Array<'a> {
    /// Elements in the parsed request: `len` values spread over `nodes`.
    Tape {
        /// number of elements
        len: usize,
        /// the nodes of all elements, nested ones included
        nodes: &'a [Node<'a>],
    },
    /// A constant array of the compiled table.
    Const(&'a [Const]),
    /// An array built while evaluating (e.g. `[x, y]`).
    Values(&'a [Value<'a>]),
}

/// An object value: a slice of the request's tape, or a constant (parameter) object.
#[derive(Clone, Copy, Debug)]
pub enum Object<'a> {
    /// `len` key/value pairs spread over `nodes`.
    Tape {
        /// number of members
        len: usize,
        /// key and value nodes, nested ones included
        nodes: &'a [Node<'a>],
    },
    /// A constant object of the compiled table.
    Const(&'a [(Box<str>, Const)]),
}

/// Byte equality, without a library call for the short strings keys and literals are: one
/// or two overlapping word compares (a call to `memcmp` costs more than the comparison).
#[inline(always)]
pub(crate) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let n = a.len();
    if n > 16 {
        return a == b;
    }
    if n >= 8 {
        return a.first_chunk::<8>() == b.first_chunk::<8>() && a.last_chunk::<8>() == b.last_chunk::<8>();
    }
    if n >= 4 {
        return a.first_chunk::<4>() == b.first_chunk::<4>() && a.last_chunk::<4>() == b.last_chunk::<4>();
    }
    a.iter().zip(b).all(|(x, y)| x == y)
}

/// How many tape nodes the value starting at `nodes[0]` spans.
fn node_span(node: &Node<'_>) -> usize {
    match node {
        Node::Array { count, .. } | Node::Object { count, .. } => 1 + count,
        _ => 1,
    }
}

impl<'a> Value<'a> {
    /// The value at a path of member names: objects only; anything else on the way (and a
    /// missing member) is `Nil`. For readers of a few fixed paths (flash dimensions, a canary
    /// key) that need no expression.
    #[inline]
    pub fn at_path<S: AsRef<str>>(&self, path: &[S]) -> Value<'a> {
        let mut v = *self;
        for seg in path {
            v = match v {
                Value::Object(o) => match o.get(seg.as_ref()) {
                    Some(x) => x,
                    None => return Value::Nil,
                },
                _ => return Value::Nil,
            };
        }
        v
    }

    /// The value of the tape node at `nodes[0]` (with its children after it).
    pub fn from_tape(nodes: &'a [Node<'a>]) -> Value<'a> {
        match nodes.first() {
            None => Value::Nil,
            Some(Node::String(s)) => Value::Str(s),
            Some(Node::Static(s)) => match *s {
                StaticNode::Null => Value::Nil,
                StaticNode::Bool(b) => Value::Bool(b),
                StaticNode::I64(i) => Value::Int(i),
                StaticNode::U64(u) => match i64::try_from(u) {
                    Ok(i) => Value::Int(i),
                    Err(_) => Value::Float(u as f64),
                },
                StaticNode::F64(f) => Value::Float(f),
            },
            Some(Node::Array { len, count }) => {
                Value::Array(Array::Tape { len: *len, nodes: nodes.get(1..1 + count).unwrap_or(&[]) })
            }
            Some(Node::Object { len, count }) => {
                Value::Object(Object::Tape { len: *len, nodes: nodes.get(1..1 + count).unwrap_or(&[]) })
            }
        }
    }

    /// The value of a constant.
    pub fn from_const(c: &'a Const) -> Value<'a> {
        match c {
            Const::Nil => Value::Nil,
            Const::Bool(b) => Value::Bool(*b),
            Const::Int(i) => Value::Int(*i),
            Const::Float(f) => Value::Float(*f),
            Const::Str(s) => Value::Str(s),
            Const::Array(a) => Value::Array(Array::Const(a)),
            Const::Object(o) => Value::Object(Object::Const(o)),
        }
    }

    /// This value's type.
    pub fn type_of(&self) -> Type {
        match self {
            Value::Nil => Type::Nil,
            Value::Bool(_) => Type::Bool,
            Value::Int(_) => Type::Int,
            Value::Float(_) => Type::Float,
            Value::Str(_) => Type::Str,
            Value::Array(_) => Type::Array,
            Value::Object(_) => Type::Object,
        }
    }

    /// An owned copy, e.g. to keep a folded constant.
    pub fn to_const(&self) -> Const {
        match *self {
            Value::Nil => Const::Nil,
            Value::Bool(b) => Const::Bool(b),
            Value::Int(i) => Const::Int(i),
            Value::Float(f) => Const::Float(f),
            Value::Str(s) => Const::Str(s.into()),
            Value::Array(a) => Const::Array(a.iter().map(|v| v.to_const()).collect()),
            Value::Object(o) => Const::Object(o.iter().map(|(k, v)| (k.into(), v.to_const())).collect()),
        }
    }
}

impl<'a> Array<'a> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Array::Tape { len, .. } => *len,
            Array::Const(c) => c.len(),
            Array::Values(v) => v.len(),
        }
    }

    /// True when the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` (0-based), if present.
    pub fn get(&self, i: usize) -> Option<Value<'a>> {
        match self {
            Array::Tape { .. } => self.iter().nth(i),
            Array::Const(c) => c.get(i).map(Value::from_const),
            Array::Values(v) => v.get(i).copied(),
        }
    }

    /// The elements in order.
    pub fn iter(&self) -> ArrayIter<'a> {
        ArrayIter { array: *self, index: 0, offset: 0 }
    }
}

/// Iterator over an [`Array`]'s elements.
pub struct ArrayIter<'a> {
    array: Array<'a>,
    index: usize,
    offset: usize,
}

impl<'a> Iterator for ArrayIter<'a> {
    type Item = Value<'a>;
    fn next(&mut self) -> Option<Value<'a>> {
        if self.index >= self.array.len() {
            return None;
        }
        let i = self.index;
        self.index += 1;
        match self.array {
            Array::Tape { nodes, .. } => {
                let rest = nodes.get(self.offset..)?;
                let node = rest.first()?;
                self.offset += node_span(node);
                Some(Value::from_tape(rest))
            }
            Array::Const(c) => c.get(i).map(Value::from_const),
            Array::Values(v) => v.get(i).copied(),
        }
    }
}

impl<'a> Object<'a> {
    /// Number of members.
    pub fn len(&self) -> usize {
        match self {
            Object::Tape { len, .. } => *len,
            Object::Const(c) => c.len(),
        }
    }

    /// True when the object has no members.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value of `key`; when a key repeats, the last one wins (as in most JSON readers).
    pub fn get(&self, key: &str) -> Option<Value<'a>> {
        match self {
            // Keys are compared where they lie and values stepped over by their node count:
            // only the member found is turned into a value.
            Object::Tape { len, nodes } => {
                let mut at = 0;
                let mut found = None;
                for _ in 0..*len {
                    let Some(Node::String(k)) = nodes.get(at) else { break };
                    let value_at = at + 1;
                    let Some(value) = nodes.get(value_at) else { break };
                    if same_bytes(k.as_bytes(), key.as_bytes()) {
                        found = Some(value_at);
                    }
                    at = value_at + node_span(value);
                }
                found.map(|i| Value::from_tape(nodes.get(i..).unwrap_or(&[])))
            }
            Object::Const(c) => c.iter().rev().find(|(k, _)| **k == *key).map(|(_, v)| Value::from_const(v)),
        }
    }

    /// Whether `key` is a member (what `"key" in object` asks), without reading any value.
    pub fn has_key(&self, key: &str) -> bool {
        match self {
            Object::Tape { len, nodes } => {
                let mut at = 0;
                for _ in 0..*len {
                    let Some(Node::String(k)) = nodes.get(at) else { return false };
                    if same_bytes(k.as_bytes(), key.as_bytes()) {
                        return true;
                    }
                    let Some(value) = nodes.get(at + 1) else { return false };
                    at += 1 + node_span(value);
                }
                false
            }
            Object::Const(c) => c.iter().any(|(k, _)| **k == *key),
        }
    }

    /// The members in document order.
    pub fn iter(&self) -> ObjectIter<'a> {
        ObjectIter { object: *self, index: 0, offset: 0 }
    }
}

/// Iterator over an [`Object`]'s members.
pub struct ObjectIter<'a> {
    object: Object<'a>,
    index: usize,
    offset: usize,
}

impl<'a> Iterator for ObjectIter<'a> {
    type Item = (&'a str, Value<'a>);
    fn next(&mut self) -> Option<(&'a str, Value<'a>)> {
        if self.index >= self.object.len() {
            return None;
        }
        let i = self.index;
        self.index += 1;
        match self.object {
            Object::Tape { nodes, .. } => {
                let rest = nodes.get(self.offset..)?;
                let key = match rest.first()? {
                    Node::String(s) => *s,
                    _ => return None,
                };
                let value_nodes = rest.get(1..)?;
                self.offset += 1 + node_span(value_nodes.first()?);
                Some((key, Value::from_tape(value_nodes)))
            }
            Object::Const(c) => c.get(i).map(|(k, v)| (&**k, Value::from_const(v))),
        }
    }
}

impl Const {
    /// Converts a JSON value (e.g. a parameter's value) to a constant.
    pub fn from_json(v: &serde_json::Value) -> Const {
        match v {
            serde_json::Value::Null => Const::Nil,
            serde_json::Value::Bool(b) => Const::Bool(*b),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Const::Int(i),
                None => Const::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            serde_json::Value::String(s) => Const::Str(s.as_str().into()),
            serde_json::Value::Array(a) => Const::Array(a.iter().map(Const::from_json).collect()),
            serde_json::Value::Object(o) => {
                Const::Object(o.iter().map(|(k, v)| (k.as_str().into(), Const::from_json(v))).collect())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::same_bytes;

    /// The word compares agree with `==` at every length and wherever two strings differ.
    #[test]
    fn same_bytes_is_byte_equality() {
        for n in 0..40usize {
            let a: Vec<u8> = (0..n as u8).map(|i| b'a' + i % 26).collect();
            assert!(same_bytes(&a, &a.clone()));
            for at in 0..n {
                let mut b = a.clone();
                b[at] ^= 0x20;
                assert!(!same_bytes(&a, &b), "{n} {at}");
            }
            let mut longer = a.clone();
            longer.push(b'x');
            assert!(!same_bytes(&a, &longer));
        }
    }
}
