//! Load-time type checks: operations that can never succeed, judged from the
//! literals and the optional input schema (SPEC §3 "Load-time checks").
//!
//! Rather than keep a second copy of the typing rules, the checker runs the
//! real operators of [`super::ops`] on one representative value per possible
//! type: an operation is rejected when every combination fails.
// Load time (checking a condition): `combine` hands its closure one value per operand it was
// given, so `v[0]` and `v[1]` exist; the odometer's `idx` has one position per list in `lists`;
// `path[..n]` takes at most the path.
#![allow(clippy::indexing_slicing)]

use bumpalo::Bump;
use rustc_hash::FxHashMap;

use super::ast::{Expr, ExprKind, Span, Step};
use super::ops::{self, BinOp, EvalError, Func};
use super::value::{Array, Const, Object, Type, Value};
use super::{Env, ExprError};

/// A set of possible types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TypeSet(u8);

const ALL_TYPES: [Type; 7] = [Type::Nil, Type::Bool, Type::Int, Type::Float, Type::Str, Type::Array, Type::Object];

impl TypeSet {
    /// Every type.
    pub const ANY: TypeSet = TypeSet(0x7f);
    /// No type at all (an expression that always fails).
    pub const NONE: TypeSet = TypeSet(0);

    /// The set holding only `t`.
    pub fn of(t: Type) -> TypeSet {
        TypeSet(1 << (t as u8))
    }

    /// Union.
    pub fn with(self, other: TypeSet) -> TypeSet {
        TypeSet(self.0 | other.0)
    }

    /// Whether `t` is possible.
    pub fn has(self, t: Type) -> bool {
        self.0 & (1 << (t as u8)) != 0
    }

    /// The types in the set.
    pub fn types(self) -> impl Iterator<Item = Type> {
        ALL_TYPES.into_iter().filter(move |t| self.has(*t))
    }
}

/// The schema type names accepted, for messages.
pub const SCHEMA_TYPE_NAMES: &str = "string, number, integer, boolean, array, object, any";

/// A type a table's `schema` declares for an input field (SPEC §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchemaType {
    /// `string`
    String,
    /// `number`: any JSON number
    Number,
    /// `integer`: a number clef reads as an int — written without a fraction or an
    /// exponent and within the 64-bit range, so `2.0`, `1e3` and `9223372036854775808` are not
    /// integers (as in conditions, where `%` needs ints)
    Integer,
    /// `boolean` (alias `bool`)
    Boolean,
    /// `array`
    Array,
    /// `object`
    Object,
    /// `any`: whatever the input holds
    Any,
}

impl SchemaType {
    /// Parses a schema type name; `bool` is an alias of `boolean`.
    pub fn parse(name: &str) -> Option<SchemaType> {
        Some(match name {
            "string" => SchemaType::String,
            "number" => SchemaType::Number,
            "integer" => SchemaType::Integer,
            "boolean" | "bool" => SchemaType::Boolean,
            "array" => SchemaType::Array,
            "object" => SchemaType::Object,
            "any" => SchemaType::Any,
            _ => return None,
        })
    }

    /// The name as messages show it (`boolean` for `bool`).
    pub fn name(self) -> &'static str {
        match self {
            SchemaType::String => "string",
            SchemaType::Number => "number",
            SchemaType::Integer => "integer",
            SchemaType::Boolean => "boolean",
            SchemaType::Array => "array",
            SchemaType::Object => "object",
            SchemaType::Any => "any",
        }
    }

    /// The value types a field of this type holds when present (nil aside).
    pub fn types(self) -> TypeSet {
        let t = |ts: &[Type]| ts.iter().fold(TypeSet::NONE, |acc, t| acc.with(TypeSet::of(*t)));
        match self {
            SchemaType::String => t(&[Type::Str]),
            SchemaType::Number => t(&[Type::Int, Type::Float]),
            SchemaType::Integer => t(&[Type::Int]),
            SchemaType::Boolean => t(&[Type::Bool]),
            SchemaType::Array => t(&[Type::Array]),
            SchemaType::Object => t(&[Type::Object]),
            SchemaType::Any => TypeSet::ANY,
        }
    }

    /// Whether an input value is allowed: missing and null fields (nil) always are.
    pub fn admits(self, v: &Value<'_>) -> bool {
        matches!(v, Value::Nil) || self.types().has(v.type_of())
    }
}

/// A `schema` entry whose type is not one the language knows (the path it declares).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownSchemaType {
    /// the declared path
    pub path: String,
}

impl std::fmt::Display for UnknownSchemaType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "schema type of \"{}\" must be one of {SCHEMA_TYPE_NAMES}", self.path)
    }
}

impl std::error::Error for UnknownSchemaType {}

/// A table's declared input fields: dotted path → type.
#[derive(Clone, Debug, Default)]
pub struct Schema {
    /// declared paths (`"headers.user-agent"`)
    pub fields: FxHashMap<String, SchemaType>,
}

impl Schema {
    /// Declares `path` as the type named `type_name`. On an unknown name,
    /// returns the message and declares the path `any`, so that conditions
    /// reading it add no second error about it.
    pub fn declare(&mut self, path: &str, type_name: &str) -> Result<(), UnknownSchemaType> {
        let parsed = SchemaType::parse(type_name);
        self.fields.insert(path.to_string(), parsed.unwrap_or(SchemaType::Any));
        match parsed {
            Some(_) => Ok(()),
            None => Err(UnknownSchemaType { path: path.to_string() }),
        }
    }

    /// Declared paths that name nothing or that no input can hold: an empty
    /// name between dots, or `a.b` where `a` is declared as something other
    /// than an object. Each with its message, sorted by path.
    pub fn path_problems(&self) -> Vec<(&str, String)> {
        let mut out = Vec::new();
        for path in self.fields.keys() {
            if path.split('.').any(str::is_empty) {
                out.push((path.as_str(), format!("schema key \"{path}\" has an empty name between dots")));
                continue;
            }
            let mut end = 0;
            while let Some(dot) = path[end..].find('.') {
                let parent = &path[..end + dot];
                end += dot + 1;
                if let Some(t) = self.fields.get(parent).filter(|t| !t.types().has(Type::Object)) {
                    out.push((
                        path.as_str(),
                        format!(
                            "schema: \"{path}\" is inside \"{parent}\", which is declared as {}; only an object can hold it",
                            with_article(t.name())
                        ),
                    ));
                    break;
                }
            }
        }
        out.sort();
        out
    }
}

/// `a string`, `an integer`: a type name as a message reads it.
pub(crate) fn with_article(name: &str) -> String {
    let article = if name.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
    format!("{article} {name}")
}

/// What the checker knows of an expression: its possible types, and its value
/// when it is a literal.
#[derive(Clone, Debug)]
struct Abstract {
    types: TypeSet,
    value: Option<Const>,
}

impl Abstract {
    fn any() -> Abstract {
        Abstract { types: TypeSet::ANY, value: None }
    }
    fn of(types: TypeSet) -> Abstract {
        Abstract { types, value: None }
    }
}

const OBJ_REP: [(Box<str>, Const); 0] = [];
const ARR_REP: [Const; 1] = [Const::Int(1)];

/// One value of type `t` that no operator rejects for value-specific reasons
/// (no zero, a string that parses as a number, a non-empty array).
fn representative(t: Type) -> Value<'static> {
    match t {
        Type::Nil => Value::Nil,
        Type::Bool => Value::Bool(true),
        Type::Int => Value::Int(1),
        Type::Float => Value::Float(1.5),
        Type::Str => Value::Str("1"),
        Type::Array => Value::Array(Array::Const(&ARR_REP)),
        Type::Object => Value::Object(Object::Const(&OBJ_REP)),
    }
}

/// Candidate values of an abstract operand: its literal value, or one per type.
fn candidates<'a>(a: &'a Abstract) -> Vec<Value<'a>> {
    match &a.value {
        Some(c) => vec![Value::from_const(c)],
        None => a.types.types().map(representative).collect(),
    }
}

/// Checks `expr` against the parameters and schema of `env`; returns its possible types.
pub(crate) fn check_expr(expr: &Expr, env: &Env) -> Result<TypeSet, ExprError> {
    let checker = Checker { env };
    checker.check(expr).map(|a| a.types)
}

/// Checks a rule condition: it must be able to produce a bool.
pub(crate) fn check_condition(expr: &Expr, env: &Env) -> Result<(), ExprError> {
    let types = check_expr(expr, env)?;
    if !types.has(Type::Bool) {
        let got: Vec<&str> = types.types().map(Type::name).collect();
        let got = if got.is_empty() { "nothing".to_string() } else { got.join(" or ") };
        return Err(ExprError::new(
            expr.span,
            format!("a condition must evaluate to a bool, but this always gives {got}"),
        ));
    }
    Ok(())
}

struct Checker<'e> {
    env: &'e Env,
}

impl Checker<'_> {
    fn check(&self, e: &Expr) -> Result<Abstract, ExprError> {
        Ok(match &e.kind {
            ExprKind::Nil => lit(Const::Nil),
            ExprKind::Bool(b) => lit(Const::Bool(*b)),
            ExprKind::Int(i) => lit(Const::Int(*i)),
            ExprKind::Float(f) => lit(Const::Float(*f)),
            ExprKind::Str(s) => lit(Const::Str(s.as_str().into())),
            ExprKind::Array(items) => {
                let mut consts = Vec::new();
                for item in items {
                    let a = self.check(item)?;
                    consts.push(a.value);
                }
                match consts.into_iter().collect::<Option<Vec<Const>>>() {
                    Some(v) => lit(Const::Array(v)),
                    None => Abstract::of(TypeSet::of(Type::Array)),
                }
            }
            ExprKind::Field(name) => Abstract::of(self.field_types(std::slice::from_ref(name), e.span)?),
            ExprKind::Param(name) => match self.env.params.get(name) {
                Some(c) => lit(c.clone()),
                // Its declaration is wrong and reported: say nothing more here.
                None if self.env.broken_params.contains(name) => Abstract::any(),
                None => return Err(self.unknown_param(name, e.span)),
            },
            ExprKind::Access(base, steps) => self.access(base, steps)?,
            ExprKind::Call(func, args) => self.call(*func, args, e.span)?,
            ExprKind::Unary(op, x) => {
                let a = self.check(x)?;
                self.combine(e.span, &[&a], |v, _ar| ops::unary(*op, &v[0]))?
            }
            ExprKind::Binary(op, l, r) => {
                let (a, b) = (self.check(l)?, self.check(r)?);
                match op {
                    BinOp::Matches | BinOp::NotMatches => {
                        regex_literal(&b, r.span)?;
                        self.combine(e.span, &[&a], |v, _ar| {
                            ops::string_test(BinOp::Contains, &v[0], &Value::Str("")).map(Value::Bool)
                        })?
                        .map_types(|_| TypeSet::of(Type::Bool))
                    }
                    _ => self.combine(e.span, &[&a, &b], |v, _| ops::compare_values(*op, &v[0], &v[1]))?,
                }
            }
            ExprKind::Chain(first, rest) => {
                let mut acc = self.check(first)?;
                for (op, item) in rest {
                    let b = self.check(item)?;
                    let span = first.span.to(item.span);
                    acc = if *op == BinOp::Coalesce {
                        coalesce(&acc, &b)
                    } else {
                        self.combine(span, &[&acc, &b], |v, arena| ops::arithmetic(*op, &v[0], &v[1], arena))?
                    };
                }
                acc
            }
            ExprKind::Power(items) => {
                let mut all = Vec::new();
                for item in items {
                    all.push(self.check(item)?);
                }
                let mut acc = all.pop().unwrap_or_else(Abstract::any);
                for a in all.iter().rev() {
                    acc =
                        self.combine(e.span, &[a, &acc], |v, arena| ops::arithmetic(BinOp::Pow, &v[0], &v[1], arena))?;
                }
                acc
            }
            ExprKind::And(items) | ExprKind::Or(items) => {
                let op = if matches!(e.kind, ExprKind::And(_)) { "&&" } else { "||" };
                for item in items {
                    let a = self.check(item)?;
                    self.combine(item.span, &[&a], |v, _ar| ops::truth(&v[0], op).map(Value::Bool))?;
                }
                Abstract::of(TypeSet::of(Type::Bool))
            }
            ExprKind::Ternary(c, a, b) => {
                let cond = self.check(c)?;
                self.combine(c.span, &[&cond], |v, _ar| ops::truth(&v[0], "?:").map(Value::Bool))?;
                let (x, y) = (self.check(a)?, self.check(b)?);
                match cond.value {
                    Some(Const::Bool(true)) => x,
                    Some(Const::Bool(false)) => y,
                    _ => Abstract::of(x.types.with(y.types)),
                }
            }
        })
    }

    fn unknown_param(&self, name: &str, span: Span) -> ExprError {
        let hint = crate::suggest::did_you_mean(name, self.env.params.keys().map(String::as_str))
            .map(|s| format!("; did you mean `params.{s}`?"))
            .unwrap_or_else(|| "; declare it under \"params\"".to_string());
        ExprError::new(span, format!("unknown parameter `{name}`{hint}"))
    }

    /// Runs `op` over every combination of candidate operand values; fails
    /// when all combinations fail, else returns the union of result types.
    fn combine(
        &self,
        span: Span,
        operands: &[&Abstract],
        op: impl for<'v> Fn(&[Value<'v>], &'v Bump) -> Result<Value<'v>, EvalError>,
    ) -> Result<Abstract, ExprError> {
        let arena = Bump::new();
        let all_literal = operands.iter().all(|a| a.value.is_some());
        let lists: Vec<Vec<Value<'_>>> = operands.iter().map(|a| candidates(a)).collect();
        let mut types = TypeSet::NONE;
        let mut first_error = None;
        let mut value = None;
        let mut combos = 0usize;
        let mut idx = vec![0usize; lists.len()];
        if lists.iter().any(Vec::is_empty) {
            return Ok(Abstract::any());
        }
        loop {
            let args: Vec<Value<'_>> = idx.iter().zip(&lists).map(|(i, l)| l[*i]).collect();
            combos += 1;
            match op(&args, &arena) {
                Ok(v) => {
                    types = types.with(TypeSet::of(v.type_of()));
                    value = Some(v.to_const());
                }
                Err(e) if is_value_error(&e) && !all_literal => types = TypeSet::ANY,
                Err(e) => {
                    // Prefer a message about real types over one about a missing (nil) value.
                    let has_nil = args.iter().any(|v| matches!(v, Value::Nil));
                    match first_error {
                        None => first_error = Some((e, has_nil)),
                        Some((_, true)) if !has_nil => first_error = Some((e, false)),
                        _ => {}
                    }
                }
            }
            // next combination
            let mut k = 0;
            loop {
                if k == idx.len() {
                    break;
                }
                idx[k] += 1;
                if idx[k] < lists[k].len() {
                    break;
                }
                idx[k] = 0;
                k += 1;
            }
            if k == idx.len() {
                break;
            }
        }
        if types == TypeSet::NONE {
            if let Some((e, _)) = first_error {
                let msg =
                    if all_literal { format!("this always fails: {e}") } else { format!("{e}, whatever the input") };
                return Err(ExprError::new(span, msg));
            }
        }
        Ok(Abstract { types, value: if all_literal && combos == 1 { value } else { None } })
    }

    fn field_types(&self, path: &[String], span: Span) -> Result<TypeSet, ExprError> {
        let Some(schema) = &self.env.schema else { return Ok(TypeSet::ANY) };
        let full = path.join(".");
        if let Some(t) = schema.fields.get(&full) {
            return Ok(t.types().with(TypeSet::of(Type::Nil)));
        }
        // A declared container above the path makes its inside free-form.
        for n in (1..path.len()).rev() {
            if let Some(t) = schema.fields.get(&path[..n].join(".")).map(|t| t.types()) {
                if t.has(Type::Object) || t.has(Type::Array) {
                    return Ok(TypeSet::ANY);
                }
                return Err(ExprError::new(
                    span,
                    format!(
                        "`{}` is declared as a scalar in the schema, so `{full}` cannot exist",
                        path[..n].join(".")
                    ),
                ));
            }
        }
        let hint = crate::suggest::did_you_mean(&full, schema.fields.keys().map(String::as_str))
            .map(|s| format!("; did you mean `{s}`?"))
            .unwrap_or_else(|| "; add it to the table's \"schema\"".to_string());
        Err(ExprError::new(span, format!("field `{full}` is not declared in the schema{hint}")))
    }

    fn access(&self, base: &Expr, steps: &[(Step, Span)]) -> Result<Abstract, ExprError> {
        // A field path with constant steps is typed by the schema as a whole.
        if let ExprKind::Field(root) = &base.kind {
            let mut path = vec![root.clone()];
            let mut constant = true;
            for (s, _) in steps {
                match s {
                    Step::Member(m) => path.push(m.clone()),
                    Step::Index(_) => {
                        constant = false;
                        break;
                    }
                }
            }
            for (s, _) in steps {
                if let Step::Index(e) = s {
                    self.check(e)?;
                }
            }
            let span = base.span.to(steps.last().map(|s| s.1).unwrap_or(base.span));
            if constant {
                return Ok(Abstract::of(self.field_types(&path, span)?));
            }
            self.field_types(&path[..1], base.span)?;
            return Ok(Abstract::any());
        }
        let mut acc = self.check(base)?;
        for (step, span) in steps {
            acc = match step {
                Step::Member(name) => {
                    let r = self.combine(*span, &[&acc], |v, _ar| ops::member(&v[0], name))?;
                    if acc.value.is_some() {
                        r
                    } else {
                        Abstract::any()
                    }
                }
                Step::Index(e) => {
                    let i = self.check(e)?;
                    let r = self.combine(*span, &[&acc, &i], |v, _ar| ops::index(&v[0], &v[1]))?;
                    if acc.value.is_some() && i.value.is_some() {
                        r
                    } else {
                        Abstract::any()
                    }
                }
            };
        }
        Ok(acc)
    }

    fn call(&self, func: Func, args: &[Expr], span: Span) -> Result<Abstract, ExprError> {
        let mut abs = Vec::new();
        for a in args {
            abs.push(self.check(a)?);
        }
        if func == Func::Matches {
            if let (Some(_), Some(pattern)) = (args.first(), abs.get(1)) {
                regex_literal(pattern, args[1].span)?;
                return self
                    .combine(span, &[&abs[0]], |v, _ar| {
                        ops::string_test(BinOp::Contains, &v[0], &Value::Str("")).map(Value::Bool)
                    })
                    .map(|a| a.map_types(|_| TypeSet::of(Type::Bool)));
            }
        }
        if matches!(func, Func::Min | Func::Max) && abs.len() > 2 {
            // Check each argument alone instead of every combination.
            for (a, e) in abs.iter().zip(args) {
                self.combine(e.span, &[a], |v, arena| ops::call(func, v, arena))?;
            }
            return Ok(Abstract::of(TypeSet::of(Type::Int).with(TypeSet::of(Type::Float))));
        }
        let refs: Vec<&Abstract> = abs.iter().collect();
        self.combine(span, &refs, |v, arena| ops::call(func, v, arena))
    }
}

impl Abstract {
    fn map_types(self, f: impl Fn(TypeSet) -> TypeSet) -> Abstract {
        Abstract { types: f(self.types), value: None }
    }
}

fn lit(c: Const) -> Abstract {
    let types = TypeSet::of(Value::from_const(&c).type_of());
    Abstract { types, value: Some(c) }
}

fn coalesce(a: &Abstract, b: &Abstract) -> Abstract {
    match &a.value {
        Some(Const::Nil) => b.clone(),
        Some(_) => a.clone(),
        None => {
            let mut t = TypeSet(a.types.0 & !TypeSet::of(Type::Nil).0);
            if a.types.has(Type::Nil) {
                t = t.with(b.types);
            }
            Abstract::of(t)
        }
    }
}

/// Errors that depend on the value, not the type (the checker cannot know them).
fn is_value_error(e: &EvalError) -> bool {
    matches!(
        e,
        EvalError::Overflow { .. }
            | EvalError::DivisionByZero { .. }
            | EvalError::NotANumber { .. }
            | EvalError::Empty { .. }
    )
}

/// The pattern of `matches` / `~` / `!~` must be a string literal.
fn regex_literal(pattern: &Abstract, span: Span) -> Result<(), ExprError> {
    match &pattern.value {
        Some(Const::Str(p)) => match regex_syntax::Parser::new().parse(p) {
            Ok(_) => Ok(()),
            Err(e) => {
                let text = e.to_string();
                let detail = text.lines().last().unwrap_or("").trim_start_matches("error: ").to_string();
                Err(ExprError::new(span, format!("invalid regex {}: {detail}", super::json::quote(p))))
            }
        },
        _ => Err(ExprError::new(
            span,
            "the pattern of `matches`/`~`/`!~` must be a string literal, compiled once when the table loads".into(),
        )),
    }
}
