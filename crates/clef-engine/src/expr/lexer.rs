//! Turns condition text into tokens with byte positions.

use super::ast::Span;
use super::ExprError;

/// One token of a condition.
#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    /// an unsigned integer literal
    Int(i64),
    /// a float literal
    Float(f64),
    /// a string literal, escapes resolved
    Str(String),
    /// a name (field, function, or word operator such as `contains`)
    Ident(String),
    /// `true`
    True,
    /// `false`
    False,
    /// `nil` / `null`
    Nil,
    /// `and` / `&&`
    And,
    /// `or` / `||`
    Or,
    /// `not` / `!`
    Not,
    /// `in`
    In,
    /// `(`
    LParen,
    /// `)`
    RParen,
    /// `[`
    LBracket,
    /// `]`
    RBracket,
    /// `,`
    Comma,
    /// `.`
    Dot,
    /// `?`
    Question,
    /// `:`
    Colon,
    /// `??`
    Coalesce,
    /// `==`
    EqEq,
    /// `!=`
    NotEq,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `+`
    Plus,
    /// `-`
    Minus,
    /// `*`
    Star,
    /// `/`
    Slash,
    /// `%`
    Percent,
    /// `**`
    StarStar,
    /// `~`
    Tilde,
    /// `!~`
    BangTilde,
    /// end of input
    Eof,
}

impl Tok {
    /// How the token reads in "expected …, found …" messages.
    pub fn describe(&self) -> String {
        match self {
            Tok::Int(i) => format!("number `{i}`"),
            Tok::Float(f) => format!("number `{f}`"),
            Tok::Str(_) => "a string".to_string(),
            Tok::Ident(n) => format!("`{n}`"),
            Tok::Eof => "the end of the condition".to_string(),
            other => format!("`{}`", other.text()),
        }
    }

    fn text(&self) -> &'static str {
        match self {
            Tok::True => "true",
            Tok::False => "false",
            Tok::Nil => "nil",
            Tok::And => "&&",
            Tok::Or => "||",
            Tok::Not => "!",
            Tok::In => "in",
            Tok::LParen => "(",
            Tok::RParen => ")",
            Tok::LBracket => "[",
            Tok::RBracket => "]",
            Tok::Comma => ",",
            Tok::Dot => ".",
            Tok::Question => "?",
            Tok::Colon => ":",
            Tok::Coalesce => "??",
            Tok::EqEq => "==",
            Tok::NotEq => "!=",
            Tok::Lt => "<",
            Tok::Le => "<=",
            Tok::Gt => ">",
            Tok::Ge => ">=",
            Tok::Plus => "+",
            Tok::Minus => "-",
            Tok::Star => "*",
            Tok::Slash => "/",
            Tok::Percent => "%",
            Tok::StarStar => "**",
            Tok::Tilde => "~",
            Tok::BangTilde => "!~",
            _ => "?",
        }
    }
}

/// The reserved words: literals and the operators written as words. Any other word is a name
/// (a field, a function, or one of the parser's [`super::parser::WORD_OPERATORS`]).
pub const KEYWORDS: &[(&str, Tok)] = &[
    ("true", Tok::True),
    ("false", Tok::False),
    ("nil", Tok::Nil),
    ("null", Tok::Nil),
    ("and", Tok::And),
    ("or", Tok::Or),
    ("not", Tok::Not),
    ("in", Tok::In),
];

/// A token and where it stands in the condition.
#[derive(Clone, Debug)]
pub struct Token {
    /// the token
    pub tok: Tok,
    /// its byte range
    pub span: Span,
}

/// Splits `src` into tokens, ending with [`Tok::Eof`].
pub fn tokenize(src: &str) -> Result<Vec<Token>, ExprError> {
    let mut lexer = Lexer { src, pos: 0, tokens: Vec::new() };
    lexer.run()?;
    Ok(lexer.tokens)
}

struct Lexer<'s> {
    src: &'s str,
    pos: usize,
    tokens: Vec<Token>,
}

impl Lexer<'_> {
    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn peek2(&self) -> Option<char> {
        let mut it = self.src[self.pos..].chars();
        it.next();
        it.next()
    }

    fn push(&mut self, tok: Tok, start: usize) {
        self.tokens.push(Token { tok, span: Span::new(start, self.pos) });
    }

    fn run(&mut self) -> Result<(), ExprError> {
        while let Some(c) = self.peek() {
            let start = self.pos;
            if c.is_whitespace() {
                self.pos += c.len_utf8();
                continue;
            }
            if c.is_ascii_digit() {
                self.number()?;
                continue;
            }
            if c == '"' || c == '\'' {
                let s = self.string(c)?;
                self.push(Tok::Str(s), start);
                continue;
            }
            if c.is_alphabetic() || c == '_' || c == '$' {
                while let Some(c) = self.peek() {
                    if c.is_alphanumeric() || c == '_' || c == '$' {
                        self.pos += c.len_utf8();
                    } else {
                        break;
                    }
                }
                let word = &self.src[start..self.pos];
                let tok = match KEYWORDS.iter().find(|(w, _)| *w == word) {
                    Some((_, tok)) => tok.clone(),
                    None => Tok::Ident(word.to_string()),
                };
                self.push(tok, start);
                continue;
            }
            let two: Option<Tok> = match (c, self.peek2()) {
                ('&', Some('&')) => Some(Tok::And),
                ('|', Some('|')) => Some(Tok::Or),
                ('=', Some('=')) => Some(Tok::EqEq),
                ('!', Some('=')) => Some(Tok::NotEq),
                ('!', Some('~')) => Some(Tok::BangTilde),
                ('<', Some('=')) => Some(Tok::Le),
                ('>', Some('=')) => Some(Tok::Ge),
                ('*', Some('*')) => Some(Tok::StarStar),
                ('?', Some('?')) => Some(Tok::Coalesce),
                _ => None,
            };
            if let Some(tok) = two {
                self.pos += 2;
                self.push(tok, start);
                continue;
            }
            let one = match c {
                '(' => Tok::LParen,
                ')' => Tok::RParen,
                '[' => Tok::LBracket,
                ']' => Tok::RBracket,
                ',' => Tok::Comma,
                '.' => Tok::Dot,
                '?' => Tok::Question,
                ':' => Tok::Colon,
                '<' => Tok::Lt,
                '>' => Tok::Gt,
                '+' => Tok::Plus,
                '-' => Tok::Minus,
                '*' => Tok::Star,
                '/' => Tok::Slash,
                '%' => Tok::Percent,
                '~' => Tok::Tilde,
                '!' => Tok::Not,
                '=' => {
                    return Err(ExprError::new(
                        Span::new(start, start + 1),
                        "unexpected `=`; use `==` to compare".to_string(),
                    ))
                }
                '&' | '|' => {
                    return Err(ExprError::new(
                        Span::new(start, start + 1),
                        format!("unexpected `{c}`; use `{c}{c}` for the logical operator"),
                    ))
                }
                _ => {
                    return Err(ExprError::new(
                        Span::new(start, start + c.len_utf8()),
                        format!("unexpected character `{c}`"),
                    ))
                }
            };
            self.pos += 1;
            self.push(one, start);
        }
        let end = self.src.len();
        self.tokens.push(Token { tok: Tok::Eof, span: Span::new(end, end) });
        Ok(())
    }

    fn digits(&mut self) {
        while let Some(c) = self.peek() {
            if c.is_ascii_digit() || c == '_' {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    fn number(&mut self) -> Result<(), ExprError> {
        let start = self.pos;
        self.digits();
        let mut is_float = false;
        if self.peek() == Some('.') && self.peek2().is_some_and(|c| c.is_ascii_digit()) {
            is_float = true;
            self.pos += 1;
            self.digits();
        }
        if matches!(self.peek(), Some('e' | 'E')) {
            let save = self.pos;
            self.pos += 1;
            if matches!(self.peek(), Some('+' | '-')) {
                self.pos += 1;
            }
            if self.peek().is_some_and(|c| c.is_ascii_digit()) {
                is_float = true;
                self.digits();
            } else {
                self.pos = save;
            }
        }
        let text: String = self.src[start..self.pos].chars().filter(|&c| c != '_').collect();
        let span = Span::new(start, self.pos);
        if self.src[start..self.pos].ends_with('_') {
            return Err(ExprError::new(span, "a number cannot end with `_`".to_string()));
        }
        let tok = if is_float {
            match text.parse::<f64>() {
                Ok(f) if f.is_finite() => Tok::Float(f),
                _ => return Err(ExprError::new(span, format!("number `{text}` is out of range"))),
            }
        } else {
            match text.parse::<i64>() {
                Ok(i) => Tok::Int(i),
                Err(_) => {
                    return Err(ExprError::new(
                        span,
                        format!("integer `{text}` does not fit in 64 bits; write it as a float (`{text}.0`)"),
                    ))
                }
            }
        };
        self.push(tok, start);
        Ok(())
    }

    fn string(&mut self, quote: char) -> Result<String, ExprError> {
        let start = self.pos;
        self.pos += 1;
        let mut out = String::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(ExprError::new(
                    Span::new(start, self.pos),
                    format!("string is not closed; add a `{quote}`"),
                ));
            };
            self.pos += c.len_utf8();
            if c == quote {
                return Ok(out);
            }
            if c != '\\' {
                out.push(c);
                continue;
            }
            let esc_start = self.pos - 1;
            let Some(e) = self.peek() else { continue };
            self.pos += e.len_utf8();
            match e {
                '"' => out.push('"'),
                '\'' => out.push('\''),
                '\\' => out.push('\\'),
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                'u' => out.push(self.unicode_escape(esc_start)?),
                // Anything else stays as written, so regexes read naturally: "\d+", "\.com".
                other => {
                    out.push('\\');
                    out.push(other);
                }
            }
        }
    }

    fn hex4(&mut self, esc_start: usize) -> Result<u32, ExprError> {
        let hex = self.src.get(self.pos..self.pos + 4).filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
        match hex {
            Some(h) => {
                self.pos += 4;
                Ok(u32::from_str_radix(h, 16).unwrap_or(0))
            }
            None => Err(ExprError::new(
                Span::new(esc_start, (self.pos + 4).min(self.src.len())),
                "`\\u` must be followed by 4 hex digits".to_string(),
            )),
        }
    }

    fn unicode_escape(&mut self, esc_start: usize) -> Result<char, ExprError> {
        let hi = self.hex4(esc_start)?;
        let code = if (0xD800..0xDC00).contains(&hi) {
            if self.src[self.pos..].starts_with("\\u") {
                self.pos += 2;
                let lo = self.hex4(esc_start)?;
                if !(0xDC00..0xE000).contains(&lo) {
                    return Err(ExprError::new(
                        Span::new(esc_start, self.pos),
                        "invalid surrogate pair in `\\u` escape".to_string(),
                    ));
                }
                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
            } else {
                hi
            }
        } else {
            hi
        };
        char::from_u32(code).ok_or_else(|| {
            ExprError::new(Span::new(esc_start, self.pos), "`\\u` escape is not a valid character".to_string())
        })
    }
}
