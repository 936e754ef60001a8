//! Precedence-climbing parser for conditions (SPEC §3 operator table).
// Load time (parsing a condition): the token list always ends with `End`, so it is never empty,
// and the lists indexed for a span (items, steps) are non-empty where the grammar built them.
#![allow(clippy::indexing_slicing)]

use super::ast::{Expr, ExprKind, Span, Step};
use super::lexer::{tokenize, Tok, Token};
use super::ops::{BinOp, Func, UnOp, FUNCS};
use super::ExprError;
use crate::suggest::did_you_mean;

/// Default cap on nesting (parentheses, brackets, calls, unary operators, ternaries).
pub(crate) const DEFAULT_MAX_DEPTH: usize = 64;

/// Longest member/index chain accepted (`a.b[0].c` has 3 steps).
pub(crate) const MAX_ACCESS_STEPS: usize = 256;

/// The comparison operators written as names rather than reserved words (`s contains "x"`);
/// the same names also call the built-in functions (`contains(s, "x")`).
pub const WORD_OPERATORS: &[(&str, BinOp)] = &[
    ("contains", BinOp::Contains),
    ("startsWith", BinOp::StartsWith),
    ("endsWith", BinOp::EndsWith),
    ("matches", BinOp::Matches),
];

/// Parses a whole condition.
pub(crate) fn parse(src: &str, max_depth: usize) -> Result<Expr, ExprError> {
    let tokens = tokenize(src)?;
    let mut p = Parser { tokens, pos: 0, depth: 0, max_depth };
    if p.peek() == &Tok::Eof {
        return Err(ExprError::new(Span::new(0, src.len()), "the condition is empty".to_string()));
    }
    let e = p.ternary()?;
    if p.peek() != &Tok::Eof {
        let t = p.current();
        let msg = match &t.tok {
            Tok::RParen => "unmatched `)`".to_string(),
            Tok::RBracket => "unmatched `]`".to_string(),
            other => format!("expected an operator or the end of the condition, found {}", other.describe()),
        };
        return Err(ExprError::new(t.span, msg));
    }
    Ok(e)
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    depth: usize,
    max_depth: usize,
}

impl Parser {
    fn current(&self) -> &Token {
        &self.tokens[self.pos.min(self.tokens.len() - 1)]
    }

    fn peek(&self) -> &Tok {
        &self.current().tok
    }

    fn peek_at(&self, ahead: usize) -> &Tok {
        &self.tokens[(self.pos + ahead).min(self.tokens.len() - 1)].tok
    }

    fn bump(&mut self) -> Token {
        let t = self.current().clone();
        if self.pos < self.tokens.len() - 1 {
            self.pos += 1;
        }
        t
    }

    fn expect(&mut self, tok: Tok, what: &str) -> Result<Token, ExprError> {
        if *self.peek() == tok {
            return Ok(self.bump());
        }
        let t = self.current();
        Err(ExprError::new(t.span, format!("expected {what}, found {}", t.tok.describe())))
    }

    fn enter(&mut self, span: Span) -> Result<(), ExprError> {
        self.depth += 1;
        if self.depth > self.max_depth {
            return Err(ExprError::new(
                span,
                format!("expression is nested too deeply (more than {} levels)", self.max_depth),
            ));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    fn ternary(&mut self) -> Result<Expr, ExprError> {
        let cond = self.or()?;
        if *self.peek() != Tok::Question {
            return Ok(cond);
        }
        let q = self.bump();
        self.enter(q.span)?;
        let then = self.ternary()?;
        self.expect(Tok::Colon, "`:` of the `? :` operator")?;
        let otherwise = self.ternary()?;
        self.leave();
        let span = cond.span.to(otherwise.span);
        Ok(Expr::new(ExprKind::Ternary(Box::new(cond), Box::new(then), Box::new(otherwise)), span))
    }

    fn or(&mut self) -> Result<Expr, ExprError> {
        self.logical(Tok::Or, Parser::and, ExprKind::Or)
    }

    fn and(&mut self) -> Result<Expr, ExprError> {
        self.logical(Tok::And, Parser::comparison, ExprKind::And)
    }

    /// `a op b op c …` as one flat list (`&&` / `||`).
    fn logical(
        &mut self,
        op: Tok,
        operand: fn(&mut Parser) -> Result<Expr, ExprError>,
        kind: fn(Vec<Expr>) -> ExprKind,
    ) -> Result<Expr, ExprError> {
        let first = operand(self)?;
        if *self.peek() != op {
            return Ok(first);
        }
        let mut items = vec![first];
        while *self.peek() == op {
            self.bump();
            items.push(operand(self)?);
        }
        items.shrink_to_fit();
        let span = items[0].span.to(items[items.len() - 1].span);
        Ok(Expr::new(kind(items), span))
    }

    /// The comparison operator at the cursor and how many tokens it takes.
    fn comparison_op(&self) -> Option<(BinOp, usize)> {
        Some(match self.peek() {
            Tok::EqEq => (BinOp::Eq, 1),
            Tok::NotEq => (BinOp::Ne, 1),
            Tok::Lt => (BinOp::Lt, 1),
            Tok::Le => (BinOp::Le, 1),
            Tok::Gt => (BinOp::Gt, 1),
            Tok::Ge => (BinOp::Ge, 1),
            Tok::In => (BinOp::In, 1),
            Tok::Not if *self.peek_at(1) == Tok::In => (BinOp::NotIn, 2),
            Tok::Tilde => (BinOp::Matches, 1),
            Tok::BangTilde => (BinOp::NotMatches, 1),
            Tok::Ident(w) => (WORD_OPERATORS.iter().find(|(name, _)| name == w)?.1, 1),
            _ => return None,
        })
    }

    fn comparison(&mut self) -> Result<Expr, ExprError> {
        let left = self.additive()?;
        let Some((op, n)) = self.comparison_op() else { return Ok(left) };
        for _ in 0..n {
            self.bump();
        }
        let right = self.additive()?;
        if self.comparison_op().is_some() {
            let t = self.current();
            return Err(ExprError::new(
                t.span,
                format!(
                    "comparison operators cannot be chained; combine the two comparisons with `&&` (found {} after `{}`)",
                    t.tok.describe(),
                    op.symbol()
                ),
            ));
        }
        let span = left.span.to(right.span);
        Ok(Expr::new(ExprKind::Binary(op, Box::new(left), Box::new(right)), span))
    }

    fn chain(
        &mut self,
        operand: fn(&mut Parser) -> Result<Expr, ExprError>,
        op_of: fn(&Tok) -> Option<BinOp>,
    ) -> Result<Expr, ExprError> {
        let first = operand(self)?;
        let mut rest = Vec::new();
        while let Some(op) = op_of(self.peek()) {
            self.bump();
            rest.push((op, operand(self)?));
        }
        if rest.is_empty() {
            return Ok(first);
        }
        rest.shrink_to_fit();
        let span = first.span.to(rest[rest.len() - 1].1.span);
        Ok(Expr::new(ExprKind::Chain(Box::new(first), rest), span))
    }

    fn additive(&mut self) -> Result<Expr, ExprError> {
        self.chain(Parser::multiplicative, |t| match t {
            Tok::Plus => Some(BinOp::Add),
            Tok::Minus => Some(BinOp::Sub),
            _ => None,
        })
    }

    fn multiplicative(&mut self) -> Result<Expr, ExprError> {
        self.chain(Parser::unary, |t| match t {
            Tok::Star => Some(BinOp::Mul),
            Tok::Slash => Some(BinOp::Div),
            Tok::Percent => Some(BinOp::Rem),
            _ => None,
        })
    }

    fn unary_op(&self) -> Option<UnOp> {
        match self.peek() {
            Tok::Not if *self.peek_at(1) != Tok::In => Some(UnOp::Not),
            Tok::Minus => Some(UnOp::Neg),
            Tok::Plus => Some(UnOp::Plus),
            _ => None,
        }
    }

    fn unary(&mut self) -> Result<Expr, ExprError> {
        let Some(op) = self.unary_op() else { return self.power() };
        let t = self.bump();
        self.enter(t.span)?;
        let operand = self.unary()?;
        self.leave();
        let span = t.span.to(operand.span);
        Ok(Expr::new(ExprKind::Unary(op, Box::new(operand)), span))
    }

    fn power(&mut self) -> Result<Expr, ExprError> {
        let mut items = vec![self.coalesce()?];
        while *self.peek() == Tok::StarStar {
            self.bump();
            if self.unary_op().is_some() {
                // `2 ** -x ** 2`: the unary operand takes the rest of the chain.
                items.push(self.unary()?);
                break;
            }
            items.push(self.coalesce()?);
        }
        if items.len() == 1 {
            return Ok(items.pop().unwrap_or_else(|| Expr::new(ExprKind::Nil, Span::default())));
        }
        let span = items[0].span.to(items[items.len() - 1].span);
        Ok(Expr::new(ExprKind::Power(items), span))
    }

    fn coalesce(&mut self) -> Result<Expr, ExprError> {
        self.chain(Parser::postfix, |t| match t {
            Tok::Coalesce => Some(BinOp::Coalesce),
            _ => None,
        })
    }

    fn postfix(&mut self) -> Result<Expr, ExprError> {
        let base = self.primary()?;
        let mut steps: Vec<(Step, Span)> = Vec::new();
        loop {
            match self.peek() {
                Tok::Dot => {
                    let dot = self.bump();
                    let t = self.bump();
                    let name = match t.tok {
                        Tok::Ident(n) => n,
                        Tok::True => "true".into(),
                        Tok::False => "false".into(),
                        Tok::Nil => "nil".into(),
                        Tok::In => "in".into(),
                        Tok::And => "and".into(),
                        Tok::Or => "or".into(),
                        Tok::Not => "not".into(),
                        other => {
                            return Err(ExprError::new(
                                t.span,
                                format!("expected a field name after `.`, found {}", other.describe()),
                            ))
                        }
                    };
                    steps.push((Step::Member(name), dot.span.to(t.span)));
                }
                Tok::LBracket => {
                    let open = self.bump();
                    self.enter(open.span)?;
                    let index = self.ternary()?;
                    let close = self.expect(Tok::RBracket, "`]`")?;
                    self.leave();
                    let step = match index.kind {
                        ExprKind::Str(s) => Step::Member(s),
                        _ => Step::Index(index),
                    };
                    steps.push((step, open.span.to(close.span)));
                }
                Tok::LParen => {
                    let t = self.current();
                    return Err(ExprError::new(t.span, "only built-in functions can be called".to_string()));
                }
                _ => break,
            }
            if steps.len() > MAX_ACCESS_STEPS {
                let span = steps[steps.len() - 1].1;
                return Err(ExprError::new(span, format!("field path is longer than {MAX_ACCESS_STEPS} steps")));
            }
        }
        if let ExprKind::Field(name) = &base.kind {
            if name == "params" {
                return self.param(base.span, steps);
            }
        }
        if steps.is_empty() {
            return Ok(base);
        }
        // a table keeps its rules' trees (for explanations): a path of two steps should not
        // hold room for four, nor a chain or a list more than its items
        steps.shrink_to_fit();
        let span = base.span.to(steps[steps.len() - 1].1);
        Ok(Expr::new(ExprKind::Access(Box::new(base), steps), span))
    }

    fn param(&mut self, span: Span, mut steps: Vec<(Step, Span)>) -> Result<Expr, ExprError> {
        if steps.is_empty() {
            return Err(ExprError::new(span, "`params` must be followed by a parameter name: `params.NAME`".into()));
        }
        let (first, first_span) = steps.remove(0);
        let Step::Member(name) = first else {
            return Err(ExprError::new(first_span, "a parameter is named with `params.NAME`".into()));
        };
        let param = Expr::new(ExprKind::Param(name), span.to(first_span));
        if steps.is_empty() {
            return Ok(param);
        }
        let full = span.to(steps[steps.len() - 1].1);
        Ok(Expr::new(ExprKind::Access(Box::new(param), steps), full))
    }

    fn primary(&mut self) -> Result<Expr, ExprError> {
        let t = self.bump();
        let span = t.span;
        let kind = match t.tok {
            Tok::Int(i) => ExprKind::Int(i),
            Tok::Float(f) => ExprKind::Float(f),
            Tok::Str(s) => ExprKind::Str(s),
            Tok::True => ExprKind::Bool(true),
            Tok::False => ExprKind::Bool(false),
            Tok::Nil => ExprKind::Nil,
            Tok::Ident(name) => {
                if *self.peek() == Tok::LParen {
                    return self.call(name, span);
                }
                ExprKind::Field(name)
            }
            Tok::LParen => {
                self.enter(span)?;
                let mut inner = self.ternary()?;
                let close = self.expect(Tok::RParen, "`)`")?;
                self.leave();
                // The parentheses belong to the expression: messages quote it whole.
                inner.span = span.to(close.span);
                return Ok(inner);
            }
            Tok::LBracket => return self.array(span),
            Tok::Eof => return Err(ExprError::new(span, "the condition ends where a value was expected".to_string())),
            other => {
                return Err(ExprError::new(span, format!("expected a value, found {}", other.describe())));
            }
        };
        Ok(Expr::new(kind, span))
    }

    fn array(&mut self, open: Span) -> Result<Expr, ExprError> {
        self.enter(open)?;
        let mut items = Vec::new();
        if *self.peek() != Tok::RBracket {
            loop {
                items.push(self.ternary()?);
                if *self.peek() == Tok::Comma {
                    self.bump();
                    if *self.peek() == Tok::RBracket {
                        break;
                    }
                    continue;
                }
                break;
            }
        }
        let close = self.expect(Tok::RBracket, "`,` or `]`")?;
        self.leave();
        items.shrink_to_fit();
        Ok(Expr::new(ExprKind::Array(items), open.to(close.span)))
    }

    fn call(&mut self, name: String, name_span: Span) -> Result<Expr, ExprError> {
        let Some(func) = Func::from_name(&name) else {
            let names: Vec<&str> = FUNCS.iter().map(|(n, _)| *n).collect();
            let hint = did_you_mean(&name, names.iter().copied())
                .map(|s| format!("; did you mean `{s}`?"))
                .unwrap_or_else(|| format!("; the functions are {}", names.join(", ")));
            return Err(ExprError::new(name_span, format!("unknown function `{name}`{hint}")));
        };
        let open = self.bump();
        self.enter(open.span)?;
        let mut args = Vec::new();
        if *self.peek() != Tok::RParen {
            loop {
                args.push(self.ternary()?);
                if *self.peek() == Tok::Comma {
                    self.bump();
                    continue;
                }
                break;
            }
        }
        let close = self.expect(Tok::RParen, "`,` or `)`")?;
        self.leave();
        let span = name_span.to(close.span);
        let (min, max) = func.arity();
        if args.len() < min || args.len() > max {
            return Err(ExprError::new(span, format!("{name}() takes {}, got {}", func.arity_text(), args.len())));
        }
        args.shrink_to_fit();
        Ok(Expr::new(ExprKind::Call(func, args), span))
    }
}
