//! The user documentation (`README.md` and `docs/`) against the code.
//!
//! Every list the docs give is compared both ways with the list the code uses, taken from the
//! code itself: when the code gains a config key, function, operator, error code, response field,
//! metric, table key or flag that the docs lack, or the docs name one the code does not have,
//! a test here fails and says which. The example expressions of `docs/language.md` are evaluated,
//! the example files marked `<!-- file: NAME -->` are loaded and their tests run, and every
//! relative link must resolve inside the repository. The command summaries list every command,
//! and the examples that name a table of `tables/` fit it: a `curl … /decide` sends only fields
//! the table reads and gets a decision, a kill switch names a rule the table has.
//!
//! What the docs must look like for this to work (each page says it in its tables' headers):
//! - `docs/config.md`: tables headed `| key | type | default | meaning |`;
//! - `docs/language.md`: `| level | operators |…`, `| operator |…`, `| function |…` and
//!   `| expression | result |` (examples evaluated against an empty input);
//! - `docs/tables.md`: `| table key |…`, `| rule key |…`, `| parameter key |…`, `| test key |…`,
//!   `| expect key |…`, `| type |…` (schema types), and for rule sets `| rule set key |…`,
//!   `| YAML rule key |…`, `| condition key |…`, `| operator |…`;
//! - `docs/api.md`: `| endpoint | listener |…`, `| status | code |…`, and `| field |…` tables
//!   preceded by `<!-- fields: METHOD /path -->`;
//! - `docs/metrics.md`: `| metric | type | labels |…`;
//! - `docs/cli.md`: a `## clef COMMAND` heading per command and `| flag |…` tables under it.
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value as Json;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

// ---------------------------------------------------------------------------------------------
// Reading the docs

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(rel)).unwrap_or_else(|e| panic!("cannot read {rel}: {e}"))
}

/// `README.md` and every `docs/*.md`, as paths relative to the repository.
fn doc_files() -> Vec<String> {
    let mut out = vec!["README.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .expect("docs/ exists")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    out.extend(docs);
    out
}

/// The lines of a Markdown text with fenced code blocks blanked out (line numbers kept).
fn prose_lines(md: &str) -> Vec<&str> {
    let mut fenced = false;
    md.lines()
        .map(|l| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
                return "";
            }
            if fenced {
                ""
            } else {
                l
            }
        })
        .collect()
}

/// The fenced code blocks of a Markdown text: (the line before the fence, the content).
fn fenced_blocks(md: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = md.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_start().starts_with("```") {
            let before = if i > 0 { lines[i - 1].to_string() } else { String::new() };
            let mut body = String::new();
            i += 1;
            while i < lines.len() && !lines[i].trim_start().starts_with("```") {
                body.push_str(lines[i]);
                body.push('\n');
                i += 1;
            }
            out.push((before, body));
        }
        i += 1;
    }
    out
}

/// The inline code spans of a text (`` `x` `` and ``` `` x `` ```).
fn code_spans(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'`' {
            i += 1;
            continue;
        }
        let n = b[i..].iter().take_while(|&&c| c == b'`').count();
        let start = i + n;
        let mut j = start;
        let mut end = None;
        while j < b.len() {
            if b[j] == b'`' {
                let m = b[j..].iter().take_while(|&&c| c == b'`').count();
                if m == n {
                    end = Some(j);
                    break;
                }
                j += m;
            } else {
                j += 1;
            }
        }
        match end {
            Some(e) => {
                let mut s = &text[start..e];
                if s.len() >= 2 && s.starts_with(' ') && s.ends_with(' ') && !s.trim().is_empty() {
                    s = &s[1..s.len() - 1];
                }
                out.push(s.to_string());
                i = e + n;
            }
            None => i = start,
        }
    }
    out
}

fn first_code(cell: &str) -> Option<String> {
    code_spans(cell).into_iter().next()
}

/// A Markdown table, with the heading it is under and the HTML comment just before it.
#[derive(Debug)]
struct MdTable {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    /// 1-based line of the header
    line: usize,
    comment: Option<String>,
}

impl MdTable {
    fn column(&self, name: &str) -> usize {
        self.header.iter().position(|h| h == name).unwrap_or_else(|| panic!("no column {name:?} in {:?}", self.header))
    }
}

fn split_row(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut cells = Vec::new();
    let mut cur = String::new();
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cur.push('|');
                chars.next();
            }
            '|' => cells.push(std::mem::take(&mut cur).trim().to_string()),
            c => cur.push(c),
        }
    }
    cells.push(cur.trim().to_string());
    cells
}

fn md_tables(md: &str) -> Vec<MdTable> {
    let lines = prose_lines(md);
    let mut out = Vec::new();
    let mut i = 0;
    while i + 1 < lines.len() {
        let is_sep = |l: &str| {
            let t = l.trim();
            t.starts_with('|') && t.chars().all(|c| matches!(c, '|' | '-' | ':' | ' '))
        };
        if lines[i].trim_start().starts_with('|') && is_sep(lines[i + 1]) {
            let header: Vec<String> = split_row(lines[i]).into_iter().map(|h| h.to_lowercase()).collect();
            let comment = lines[..i]
                .iter()
                .rev()
                .find(|l| !l.trim().is_empty())
                .and_then(|l| l.trim().strip_prefix("<!--"))
                .and_then(|l| l.strip_suffix("-->"))
                .map(|c| c.trim().to_string());
            let line = i + 1;
            let mut rows = Vec::new();
            i += 2;
            while i < lines.len() && lines[i].trim_start().starts_with('|') {
                rows.push(split_row(lines[i]));
                i += 1;
            }
            out.push(MdTable { header, rows, line, comment });
        } else {
            i += 1;
        }
    }
    out
}

/// The tables of `rel` whose first column is headed `first`.
fn tables_headed(rel: &str, first: &str) -> Vec<MdTable> {
    let tables: Vec<MdTable> = md_tables(&read(rel)).into_iter().filter(|t| t.header[0] == first).collect();
    assert!(!tables.is_empty(), "{rel} has no table whose first column is headed `{first}`");
    tables
}

/// The first code span of the first cell of every row of the tables of `rel` headed `first`.
fn first_column(rel: &str, first: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for t in tables_headed(rel, first) {
        for row in &t.rows {
            let key =
                first_code(&row[0]).unwrap_or_else(|| panic!("{rel}:{}: a row without a `code` name: {row:?}", t.line));
            assert!(out.insert(key.clone()), "{rel}: `{key}` is listed twice");
        }
    }
    out
}

/// Fails with every difference between what the code has and what the docs list.
fn same_sets(what: &str, doc: &str, code: &BTreeSet<String>, docs: &BTreeSet<String>) {
    let missing: Vec<&String> = code.difference(docs).collect();
    let extra: Vec<&String> = docs.difference(code).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: {doc} is out of date.\n  in the code but not in {doc}: {missing:?}\n  in {doc} but not in the code: {extra:?}"
    );
}

fn set<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> BTreeSet<String> {
    items.into_iter().map(|s| s.as_ref().to_string()).collect()
}

// ---------------------------------------------------------------------------------------------
// config.md

/// Every key path of a serialized value, with the value at each leaf (objects are walked into).
fn leaves(prefix: &str, v: &Json, out: &mut BTreeMap<String, Json>) {
    match v {
        // a mapping of the user's names (`model.shadow`) is one key, `{}` by default
        Json::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                leaves(&path, v, out);
            }
        }
        other => {
            out.insert(prefix.to_string(), other.clone());
        }
    }
}

/// A YAML value (a config default as the docs write it) as JSON.
fn yaml_value(text: &str) -> Result<Json, String> {
    let options = clef::yaml::Options { max_depth: 8, depth_hint: "", what: "a value" };
    let doc = clef::yaml::parse(text, &options).map_err(|p| p.message)?;
    doc.root.map_or(Ok(Json::Null), |root| root.to_json().map_err(|e| e.1))
}

#[test]
fn config_keys_and_defaults_are_documented() {
    use clef::config::{Config, TOP_KEYS};
    let default = serde_json::to_value(Config::default()).expect("Config serializes");
    let mut code = BTreeMap::new();
    leaves("", &default, &mut code);
    let top: BTreeSet<String> = default.as_object().expect("an object").keys().cloned().collect();
    let unknown_top: Vec<&String> = top.iter().filter(|k| !TOP_KEYS.contains(&k.as_str())).collect();
    assert!(
        unknown_top.is_empty(),
        "config::TOP_KEYS lacks {unknown_top:?}: CLEF_… environment variables would not reach them"
    );
    // Top-level keys that do not serialize by default (the `cors:` alias) default to null.
    for k in TOP_KEYS {
        if !top.contains(k) {
            code.insert(k.to_string(), Json::Null);
        }
    }

    let doc = "docs/config.md";
    let mut documented = BTreeMap::new();
    for t in tables_headed(doc, "key") {
        let (dc, mc) = (t.column("default"), t.column("meaning"));
        for row in &t.rows {
            let key = first_code(&row[0]).unwrap_or_else(|| panic!("{doc}:{}: a key row without a `key`", t.line));
            let default = first_code(&row[dc]).unwrap_or_else(|| panic!("{doc}: `{key}` has no `default`"));
            assert!(documented.insert(key.clone(), (default, row[mc].clone())).is_none(), "{doc}: `{key}` twice");
        }
    }
    same_sets("config keys", doc, &set(code.keys()), &set(documented.keys()));

    let text = read(doc);
    for section in &top {
        if default[section].is_object() {
            assert!(
                text.lines()
                    .any(|l| l.starts_with('#') && l.trim_start_matches('#').trim().trim_matches('`') == section),
                "{doc} has no heading for the section `{section}`"
            );
        }
    }

    for (key, value) in &code {
        let (doc_default, _) = &documented[key];
        let parsed = yaml_value(doc_default)
            .unwrap_or_else(|e| panic!("{doc}: the default of `{key}`, `{doc_default}`, is not YAML: {e}"));
        assert_eq!(&parsed, value, "{doc}: the default of `{key}` is `{doc_default}`, but the code's is {value}");
    }
}

// ---------------------------------------------------------------------------------------------
// language.md

/// Every operator and punctuation token the lexer knows, as written: found by lexing every
/// string of one to three ASCII punctuation characters.
fn symbol_tokens() -> BTreeSet<String> {
    use clef::expr::lexer::{tokenize, Tok};
    let punct: Vec<char> = (33u8..127).map(char::from).filter(|c| c.is_ascii_punctuation()).collect();
    let mut out = BTreeSet::new();
    let mut try_one = |s: &str| {
        if let Ok(tokens) = tokenize(s) {
            let whole = tokens.len() == 2 && tokens[0].span.start == 0 && tokens[0].span.end == s.len();
            if whole && !matches!(tokens[0].tok, Tok::Ident(_) | Tok::Int(_) | Tok::Float(_) | Tok::Str(_) | Tok::Eof) {
                out.insert(s.to_string());
            }
        }
    };
    for a in &punct {
        try_one(&a.to_string());
        for b in &punct {
            try_one(&format!("{a}{b}"));
            for c in &punct {
                try_one(&format!("{a}{b}{c}"));
            }
        }
    }
    out
}

/// The tokens of the code spans in column `col` of the tables of `rel` headed `first`, as written.
fn table_tokens(rel: &str, first: &str, col: &str) -> Vec<(String, clef::expr::lexer::Tok)> {
    let mut out = Vec::new();
    for t in tables_headed(rel, first) {
        let c = t.column(col);
        for row in &t.rows {
            for span in code_spans(&row[c]) {
                let tokens = clef::expr::lexer::tokenize(&span)
                    .unwrap_or_else(|e| panic!("{rel}:{}: `{span}` is not valid in a condition: {e}", t.line));
                for tok in tokens {
                    if tok.tok != clef::expr::lexer::Tok::Eof {
                        out.push((span[tok.span.start..tok.span.end].to_string(), tok.tok));
                    }
                }
            }
        }
    }
    out
}

#[test]
fn operators_are_documented() {
    use clef::expr::lexer::{Tok, KEYWORDS};
    use clef::expr::parser::WORD_OPERATORS;
    let doc = "docs/language.md";
    let mut code = symbol_tokens();
    for (word, tok) in KEYWORDS {
        if !matches!(tok, Tok::True | Tok::False | Tok::Nil) {
            code.insert(word.to_string());
        }
    }
    code.extend(WORD_OPERATORS.iter().map(|(w, _)| w.to_string()));
    // The precedence table must hold every operator, and nothing else.
    let tokens = table_tokens(doc, "level", "operators");
    let word_ops = set(WORD_OPERATORS.iter().map(|(w, _)| *w));
    let placeholder = |s: &str| s.chars().count() == 1 || s == "name";
    let mut documented = BTreeSet::new();
    for (text, tok) in &tokens {
        match tok {
            Tok::Ident(name) if word_ops.contains(name) => {
                documented.insert(text.clone());
            }
            Tok::Ident(name) => assert!(placeholder(name), "{doc}: `{name}` in the operator table is no operator"),
            Tok::Int(_) | Tok::Float(_) | Tok::Str(_) => {}
            _ => {
                documented.insert(text.clone());
            }
        }
    }
    same_sets("operators", &format!("{doc} (the `level | operators` table)"), &code, &documented);
    // The table of what operators accept may use only real operators.
    for (text, tok) in table_tokens(doc, "operator", "operator") {
        if let Tok::Ident(name) = &tok {
            assert!(
                word_ops.contains(name) || placeholder(name),
                "{doc}: `{text}` in the operator table is no operator"
            );
        }
    }
    // The literal words are described too.
    let spans = set(prose_lines(&read(doc)).iter().flat_map(|l| code_spans(l)));
    for (word, tok) in KEYWORDS {
        if matches!(tok, Tok::True | Tok::False | Tok::Nil) {
            assert!(spans.contains(*word), "{doc} never shows the literal `{word}`");
        }
    }
}

#[test]
fn functions_are_documented_with_their_arity() {
    use clef::expr::ops::{Func, FUNCS};
    let doc = "docs/language.md";
    let mut documented = BTreeSet::new();
    for t in tables_headed(doc, "function") {
        for row in &t.rows {
            let sig =
                first_code(&row[0]).unwrap_or_else(|| panic!("{doc}:{}: a function row without a signature", t.line));
            let (name, args) = sig
                .strip_suffix(')')
                .and_then(|s| s.split_once('('))
                .unwrap_or_else(|| panic!("{doc}: `{sig}` is not written as `name(args)`"));
            let func = Func::from_name(name).unwrap_or_else(|| panic!("{doc}: `{name}` is not a function of the code"));
            let args: Vec<&str> = args.split(',').map(str::trim).filter(|a| !a.is_empty()).collect();
            let variadic = args.last() == Some(&"...");
            let shown = match func.arity() {
                (min, usize::MAX) => variadic && args.len() > min,
                (min, max) => !variadic && min == max && args.len() == min,
            };
            assert!(shown, "{doc}: `{sig}` does not show the arity of {name}(): {}", func.arity_text());
            assert!(documented.insert(name.to_string()), "{doc}: `{name}` is listed twice");
        }
    }
    same_sets("functions", doc, &set(FUNCS.iter().map(|(n, _)| *n)), &documented);
}

#[test]
fn example_expressions_give_what_the_docs_say() {
    use clef::expr::{Env, Expression};
    let doc = "docs/language.md";
    let mut checked = 0;
    for t in md_tables(&read(doc)).into_iter().filter(|t| t.header == ["expression", "result"]) {
        for row in &t.rows {
            let src = first_code(&row[0]).unwrap_or_else(|| panic!("{doc}:{}: an example without `code`", t.line));
            let claim = row[1].trim();
            let (got, shown) = match Expression::compile(&src, &Env::default(), false) {
                Err(e) => (None, format!("a load error ({e})")),
                Ok(expr) => {
                    match clef::input::with_parsed(b"{}", clef::input::DEFAULT_MAX_DEPTH, |root| expr.evaluate(&root))
                        .expect("{} is an object")
                    {
                        Err(e) => (Some(None), format!("an error ({e})")),
                        Ok(v) => (Some(Some(v.clone())), format!("`{v}`")),
                    }
                }
            };
            let ok = match (first_code(claim), claim) {
                (Some(value), _) => {
                    let want: Json = serde_json::from_str(&value)
                        .unwrap_or_else(|e| panic!("{doc}: the result of `{src}`, `{value}`, is not JSON: {e}"));
                    got == Some(Some(want))
                }
                (None, "error") => got == Some(None),
                (None, "load error") => got.is_none(),
                (None, other) => panic!("{doc}: the result of `{src}` is `JSON`, error or load error, not {other:?}"),
            };
            assert!(ok, "{doc}: `{src}` gives {shown}, but the docs say {claim}");
            checked += 1;
        }
    }
    assert!(checked >= 20, "{doc}: the `| expression | result |` examples are gone");
}

// ---------------------------------------------------------------------------------------------
// tables.md

#[test]
fn table_rule_param_and_test_keys_are_documented() {
    use clef::cli::test::{EXPECT_KEYS, TEST_KEYS};
    use clef::table::flash::source::{DIMENSION_KEYS, FLASH_KEYS, RANGE_KEYS};
    use clef::table::jev::{PARAM_KEYS, RULE_KEYS, TABLE_KEYS};
    let doc = "docs/tables.md";
    for (first, code) in [
        ("table key", TABLE_KEYS),
        ("rule key", RULE_KEYS),
        ("parameter key", PARAM_KEYS),
        ("test key", TEST_KEYS),
        ("expect key", EXPECT_KEYS),
        ("flash key", FLASH_KEYS),
        ("dimension key", DIMENSION_KEYS),
        ("range key", RANGE_KEYS),
    ] {
        same_sets(&format!("{first}s"), doc, &set(code), &first_column(doc, first));
    }
}

#[test]
fn rule_set_keys_and_operators_are_documented() {
    use clef::table::ruleset::{CONDITION_KEYS, OPERATORS, RULE_KEYS, TOP_KEYS};
    let doc = "docs/tables.md";
    for (first, code) in [
        ("rule set key", TOP_KEYS),
        ("yaml rule key", RULE_KEYS),
        ("condition key", CONDITION_KEYS),
        ("operator", OPERATORS),
    ] {
        same_sets(&format!("{first}s"), doc, &set(code), &first_column(doc, first));
    }
}

#[test]
fn schema_types_are_documented() {
    use clef::expr::check::{SchemaType, SCHEMA_TYPE_NAMES};
    let doc = "docs/tables.md";
    let documented = first_column(doc, "type");
    for name in &documented {
        assert!(SchemaType::parse(name).is_some(), "{doc}: `{name}` is not a schema type of the code");
    }
    same_sets("schema types", doc, &set(SCHEMA_TYPE_NAMES.split(", ")), &documented);
    // `bool` is an alias of `boolean`, accepted and documented but not in SCHEMA_TYPE_NAMES.
    assert!(SchemaType::parse("bool").is_some() && read(doc).contains("`bool`"), "{doc}: the alias `bool`");
}

#[test]
fn example_files_load_and_their_tests_pass() {
    use clef::cli::test::{load_tests, run_test};
    use clef::table::{Limits, Table, TableKind};
    let mut files = 0;
    for rel in doc_files() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut tables = Vec::new();
        for (before, body) in fenced_blocks(&read(&rel)) {
            let Some(name) = before.trim().strip_prefix("<!-- file:").and_then(|s| s.strip_suffix("-->")) else {
                continue;
            };
            let path = dir.path().join(name.trim());
            std::fs::write(&path, body).expect("write the example");
            if TableKind::of_path(&path).is_some() {
                tables.push(path);
            }
            files += 1;
        }
        for path in tables {
            let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
            let table =
                Table::load(&path, &Limits::default()).unwrap_or_else(|e| panic!("{rel}: {name} does not load:\n{e}"));
            let tests = load_tests(&table).unwrap_or_else(|e| panic!("{rel}: the tests of {name}: {e:?}"));
            for test in &tests {
                let outcome = run_test(&table, test);
                assert!(outcome.diffs.is_empty(), "{rel}: test \"{}\" of {name} fails: {:?}", test.name, outcome.diffs);
            }
        }
    }
    assert!(files >= 2, "the example files marked <!-- file: NAME --> are gone");
}

// ---------------------------------------------------------------------------------------------
// api.md: error codes from the source

fn rust_sources(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    for entry in std::fs::read_dir(dir).expect("read src").flatten() {
        let p = entry.path();
        if p.is_dir() {
            rust_sources(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push((p.clone(), std::fs::read_to_string(&p).expect("read a source file")));
        }
    }
}

/// Every `(status, code)` the server can answer: `ErrorCode`'s table, each code of which some
/// code in src/ answers with (`ErrorCode::Name` outside its own definition).
fn error_codes_in_source() -> BTreeSet<(u16, String)> {
    use clef::server::errors::ErrorCode;
    let mut sources = Vec::new();
    rust_sources(&Path::new(ROOT).join("src"), &mut sources);
    for code in ErrorCode::ALL {
        let name = format!("ErrorCode::{code:?}");
        assert!(
            sources.iter().any(|(_, text)| text.contains(&name)),
            "{name} ({}) is in the table but nothing answers with it",
            code.as_str()
        );
    }
    ErrorCode::ALL.iter().map(|c| (c.status(), c.as_str().to_string())).collect()
}

#[test]
fn error_codes_are_documented_with_their_status() {
    let doc = "docs/api.md";
    let code: BTreeSet<String> = error_codes_in_source().into_iter().map(|(s, c)| format!("{s} {c}")).collect();
    let mut documented = BTreeSet::new();
    for t in tables_headed(doc, "status") {
        let cc = t.column("code");
        for row in &t.rows {
            let status = row[0].trim_matches('`').trim().to_string();
            let c = first_code(&row[cc]).unwrap_or_else(|| panic!("{doc}:{}: an error row without a `code`", t.line));
            assert!(documented.insert(format!("{status} {c}")), "{doc}: {status} `{c}` is listed twice");
        }
    }
    same_sets("error codes (status and code)", doc, &code, &documented);
}

// ---------------------------------------------------------------------------------------------
// metrics.md

#[test]
fn metrics_are_documented_with_type_and_labels() {
    use clef::metrics::{encode_format, Format, Gauges, ServerStats, TableList, TableStats};
    let stats = TableStats::new(vec!["r".to_string()]);
    stats.record(Some(0), 1_000, &[0]);
    stats.record(None, 1_000, &[]);
    stats.record_invalid_input();
    let server = ServerStats::new();
    server.record_response(false, 200);
    server.record_response(true, 404);
    server.connection_accepted();
    server.connection_rejected();
    server.request_timed_out();
    server.reload_finished(true, 1.0);
    // A series of every labelled family, so that its labels are seen.
    let tables = TableList {
        served: vec![("t".into(), "v".into(), "jev".into(), std::sync::Arc::new(stats))],
        loads: vec![("t".into(), true, 1)],
    };
    let shadows =
        vec![clef::decide::ShadowCount { table: "t".into(), shadow: "c".into(), agree: 1, disagree: 0, error: 0 }];
    let router = vec![clef::router::InstanceFigures { id: "i".into(), ..Default::default() }];
    let subsystems: clef::metrics::Subsystems = vec![
        Box::new(clef::snapshot::metrics::SnapshotCollector(Default::default())),
        Box::new(clef::tuning::metrics::TuningCollector(Default::default())),
        Box::new(clef::state_file::collector()),
        Box::new(clef::decide::ShadowCollector(shadows)),
        Box::new(clef::router::RouterCollector(router)),
    ];
    let text = encode_format(Format::Prometheus, std::sync::Arc::new(tables), &server, &Gauges::default(), subsystems);
    // The process figures come from /proc/self; the server exports them, so the docs list them.
    assert!(text.contains("# TYPE process_resident_memory_bytes gauge"), "no process metrics:\n{text}");

    // family → (type, label names)
    let mut code: BTreeMap<String, (String, BTreeSet<String>)> = BTreeMap::new();
    let mut current = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name type");
            code.insert(name.to_string(), (kind.to_string(), BTreeSet::new()));
            current = name.to_string();
        } else if !line.starts_with('#') && !line.is_empty() {
            let labels = line.split_once('{').map(|(_, l)| l.split_once('}').map(|x| x.0).unwrap_or("")).unwrap_or("");
            let names = code.get_mut(&current).map(|e| &mut e.1).expect("a sample after # TYPE");
            for pair in labels.split("\",").filter(|p| !p.is_empty()) {
                let name = pair.split_once('=').map(|x| x.0).unwrap_or(pair).trim_start_matches(',');
                if name != "le" {
                    names.insert(name.to_string());
                }
            }
        }
    }

    let doc = "docs/metrics.md";
    let mut documented = BTreeSet::new();
    for t in tables_headed(doc, "metric") {
        let (tc, lc) = (t.column("type"), t.column("labels"));
        for row in &t.rows {
            let name = first_code(&row[0]).unwrap_or_else(|| panic!("{doc}:{}: a metric row without a `name`", t.line));
            if let Some((kind, labels)) = code.get(&name) {
                assert_eq!(&row[tc], kind, "{doc}: `{name}` is a {kind}");
                assert_eq!(&set(code_spans(&row[lc])), labels, "{doc}: the labels of `{name}`");
            }
            assert!(documented.insert(name.clone()), "{doc}: `{name}` is listed twice");
        }
    }
    same_sets("metrics", doc, &set(code.keys()), &documented);
}

// ---------------------------------------------------------------------------------------------
// cli.md: commands and flags from the binary's help

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_clef")).args(args).output().expect("run clef --help");
    assert!(out.status.success(), "clef {args:?} failed");
    String::from_utf8(out.stdout).expect("UTF-8 help")
}

/// The commands a help text lists (not `help`): under `Commands:`, or under each group heading
/// of `clef --help` (`Serve:`, `Tables:` …: every heading before `Options:` but `Arguments:`).
fn subcommands(text: &str) -> Vec<String> {
    let body = text.split("\nOptions:").next().unwrap_or("");
    let mut listing = false;
    let mut out = Vec::new();
    for line in body.lines() {
        if !line.starts_with(' ') {
            listing = line.ends_with(':') && line != "Arguments:";
        } else if let Some(name) = line.split_whitespace().next().filter(|n| listing && *n != "help") {
            out.push(name.to_string());
        }
    }
    out
}

/// The commands of `clef --help`, and the flags of each (`-c`, `--config`; not `--help`). A
/// command with subcommands (`clef flash`) stands for them: `flash compile`, `flash inspect`.
fn commands_and_flags() -> BTreeMap<String, BTreeSet<String>> {
    let top = help(&["--help"]);
    let mut names: Vec<String> = Vec::new();
    for name in subcommands(&top) {
        let subs = subcommands(&help(&[&name, "--help"]));
        if subs.is_empty() {
            names.push(name);
        } else {
            names.extend(subs.into_iter().map(|sub| format!("{name} {sub}")));
        }
    }
    let mut out = BTreeMap::new();
    for name in &names {
        let mut args: Vec<&str> = name.split(' ').collect();
        args.push("--help");
        let text = help(&args);
        let options = text.split("Options:").nth(1).unwrap_or("");
        let mut flags = BTreeSet::new();
        for opt in options.lines() {
            let spec = opt.trim_start();
            if !spec.starts_with('-') {
                continue;
            }
            let spec = spec.split("  ").next().unwrap_or("");
            for part in spec.split(", ") {
                let flag = part.split([' ', '=']).next().unwrap_or("");
                if !matches!(flag, "-h" | "--help" | "-V" | "--version") {
                    flags.insert(flag.to_string());
                }
            }
        }
        out.insert(name.to_string(), flags);
    }
    assert!(out.len() >= 5, "no commands found in clef --help:\n{top}");
    out
}

#[test]
fn commands_and_flags_are_documented() {
    let doc = "docs/cli.md";
    let text = read(doc);
    let code = commands_and_flags();
    // Each `## clef COMMAND` section, and the flags of its `| flag |` tables.
    let mut documented: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for chunk in text.split("\n## ").skip(1) {
        let heading = chunk.lines().next().unwrap_or("");
        let name = heading.trim().strip_prefix("clef ").unwrap_or_else(|| panic!("{doc}: a section `## {heading}`"));
        let mut flags = BTreeSet::new();
        for t in md_tables(chunk).into_iter().filter(|t| t.header[0] == "flag") {
            for row in &t.rows {
                for span in code_spans(&row[0]) {
                    flags.insert(span.split(' ').next().unwrap_or("").to_string());
                }
            }
        }
        documented.insert(name.to_string(), flags);
    }
    assert!(!documented.is_empty(), "{doc} has no `## clef COMMAND` sections");
    same_sets("commands", doc, &set(code.keys()), &set(documented.keys()));
    for (command, flags) in &code {
        same_sets(&format!("flags of clef {command}"), doc, flags, &documented[command]);
    }

    // Anywhere in the docs, `clef WORD` in code names a real command.
    let mention = regex::Regex::new(r"(?:^|[\s`$(])clef ([a-z]+)\b").expect("regex");
    for rel in doc_files() {
        let md = read(&rel);
        let mut code_text: Vec<String> = fenced_blocks(&md).into_iter().map(|b| b.1).collect();
        code_text.extend(prose_lines(&md).iter().flat_map(|l| code_spans(l)));
        for chunk in &code_text {
            for c in mention.captures_iter(chunk) {
                assert!(
                    code.keys().any(|k| k.split(' ').next() == Some(&c[1])) || &c[1] == "help",
                    "{rel}: `clef {}` is not a command of this version",
                    &c[1]
                );
            }
        }
    }
}

#[test]
fn command_summaries_list_every_command() {
    let commands = commands_and_flags();
    // the summary block opening docs/cli.md, and README's under `## Commands`
    let cli = read("docs/cli.md");
    let readme = read("README.md");
    let readme_commands = &readme[readme.find("## Commands").expect("README.md has `## Commands`")..];
    for (doc, text) in [("docs/cli.md", cli.as_str()), ("README.md", readme_commands)] {
        let (_, block) = fenced_blocks(text).into_iter().next().unwrap_or_else(|| panic!("{doc}: no summary block"));
        for command in commands.keys() {
            let listed = block.lines().any(|l| {
                l.strip_prefix("clef ")
                    .and_then(|rest| rest.trim_start().strip_prefix(command.as_str()))
                    .is_some_and(|after| after.is_empty() || after.starts_with(' '))
            });
            assert!(listed, "{doc}: the command summary lacks `clef {command}`:\n{block}");
        }
    }
}

/// The `curl … /decide[/TABLE] -d '{…}'` examples of the docs: (file, table, input).
fn curl_decisions() -> Vec<(String, String, String)> {
    let call =
        regex::Regex::new(r"curl [^\n]*?/decide(?:/([A-Za-z0-9_]+))?['?\s][^\n]*?-d '(\{[^']*\})'").expect("regex");
    let mut out = Vec::new();
    for rel in doc_files() {
        for (_, block) in fenced_blocks(&read(&rel)) {
            for c in call.captures_iter(&block) {
                let table = c.get(1).map_or("risk", |m| m.as_str()).to_string();
                out.push((rel.clone(), table, c[2].to_string()));
            }
        }
    }
    out
}

#[test]
fn curl_examples_send_what_their_table_reads() {
    let examples = curl_decisions();
    assert!(examples.len() >= 5, "hardly any curl examples were found: {examples:?}");
    let mut checked = 0;
    for (rel, table, input) in examples {
        // the repository's tables (`risk` is config.yaml's default table); others are the doc's own
        let path = Path::new(ROOT).join("tables").join(format!("{table}.json"));
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        let fields: Json = serde_json::from_str(&input).unwrap_or_else(|e| panic!("{rel}: {input} is not JSON: {e}"));
        let file: Json = serde_json::from_str(&text).expect("a table");
        if let Some(schema) = file.get("schema").and_then(Json::as_object) {
            let declared: BTreeSet<&str> = schema.keys().map(|k| k.split('.').next().unwrap_or(k)).collect();
            for key in fields.as_object().expect("an object").keys() {
                assert!(
                    declared.contains(key.as_str()),
                    "{rel}: `{input}` sends `{key}`, which table {table} does not read"
                );
            }
        }
        let loaded = clef::table::Table::load(&path, &clef::table::Limits::default()).expect("the table loads");
        if let Err(e) = loaded.decide(input.as_bytes(), false) {
            panic!("{rel}: `{input}` to table {table}: {e}");
        }
        checked += 1;
    }
    assert!(checked >= 3, "hardly any curl example names a table of the repository");
}

#[test]
fn kill_switch_examples_name_rules_their_table_has() {
    let switch = regex::Regex::new(r"/tables/([A-Za-z0-9_]+)/rules/([A-Za-z0-9_]+)/enabled").expect("regex");
    let mut checked = 0;
    for rel in doc_files() {
        for c in switch.captures_iter(&read(&rel)) {
            let path = Path::new(ROOT).join("tables").join(format!("{}.json", &c[1]));
            let Ok(text) = std::fs::read_to_string(&path) else { continue };
            let file: Json = serde_json::from_str(&text).expect("a table");
            let rules = file.get("rules").unwrap_or(&file).as_array().expect("rules");
            let ids: Vec<&str> = rules.iter().filter_map(|r| r["id"].as_str()).collect();
            assert!(ids.contains(&&c[2]), "{rel}: {} names a rule table {} does not have: {ids:?}", &c[0], &c[1]);
            checked += 1;
        }
    }
    assert!(checked >= 3, "hardly any kill switch example names a table of the repository");
}

// ---------------------------------------------------------------------------------------------
// api.md: endpoints and response fields, from a running server

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

struct Server {
    child: Child,
    dir: tempfile::TempDir,
    main: u16,
    admin: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default();
            eprintln!("----- server log -----\n{log}");
        }
    }
}

const T_V1: &str = r#"{"description": "docs test", "params": {"p": {"value": 1}}, "default": {"d": true},
  "rules": [
    {"id": "warns", "condition": "x + 0 > 10", "action": {"a": 1}, "description": "fails on a string x"},
    {"id": "skipped", "condition": "y == 2", "action": {"a": 2}},
    {"id": "hits", "condition": "y == params.p", "action": {"a": 3}},
    {"id": "off", "condition": "true", "action": {"a": 4}, "enabled": false}
  ]}"#;

/// A tuned table: its decisions name their variant.
const TUNED: &str = r#"{"params": {"limit": {"value": 5, "step": 1, "tunable": true}},
  "rules": [{"id": "under", "condition": "n < params.limit", "action": {"a": 1}}]}"#;

/// A flash table with a categorical and a numeric dimension (both kinds of bucket).
const FLASH: &str = r#"{"description": "docs test", "default": 2,
  "dimensions": [{"name": "device", "values": ["desktop", "mobile"]},
                 {"name": "level", "field": "m.rate", "values": ["low", "high"], "mapping": {"0-0.1": "low", "0.1+": "high"}}],
  "actions": [{"id": 1, "type": "proxy"}, {"id": 2, "type": "cache"}],
  "matrix": [[1, 2], [2, 2]]}"#;

impl Server {
    fn start() -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        let (main, admin) = (free_port(), free_port());
        std::fs::create_dir(dir.path().join("tables")).expect("tables/");
        for (name, text) in [
            ("t.json", T_V1),
            ("f.flash.json", FLASH),
            ("u.json", r#"[{"id": "r", "condition": "true", "action": {}}]"#),
            ("gone.json", r#"[{"id": "r", "condition": "true", "action": {}}]"#),
            ("broken.json", r#"[{"id": "r", "condition": "nope(", "action": {}}]"#),
            ("tu.json", TUNED),
        ] {
            std::fs::write(dir.path().join("tables").join(name), text).expect("write a table");
        }
        // saved state that fails its checks, so that `/health` reports it: a kill switch for a
        // rule with no name, and a promoted value that is not a number
        std::fs::create_dir_all(dir.path().join("state/tuning/overlays")).expect("state/");
        std::fs::write(dir.path().join("state/registry.json"), r#"{"format": 1, "switches": {"t": [""]}}"#)
            .expect("write registry.json");
        std::fs::write(
            dir.path().join("state/tuning/overlays/tu.json"),
            r#"{"table": "tu", "params": {"limit": {"file": 5, "value": "six"}}}"#,
        )
        .expect("write an overlay");
        let config = format!(
            "server: {{host: 127.0.0.1, port: {main}}}\nadmin: {{listen: \"127.0.0.1:{admin}\"}}\n\
             model: {{default_table: t, watch_file: false}}\n\
             snapshots: {{enabled: true, dir: snaps, sample_rate: 0}}\n\
             tuning: {{tables: [tu], traffic: 1.0}}\n"
        );
        std::fs::write(dir.path().join("config.yaml"), config).expect("write the config");
        let log = std::fs::File::create(dir.path().join("log")).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_clef"))
            .args(["serve", "-c"])
            .arg(dir.path().join("config.yaml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start clef serve");
        let server = Server { child, dir, main, admin };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", main)).is_err() || TcpStream::connect(("127.0.0.1", admin)).is_err() {
            assert!(Instant::now() < deadline, "clef serve did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    /// Sends one request; returns the status and the body.
    fn call(&self, admin: bool, method: &str, path: &str, body: &str) -> (u16, String) {
        let port = if admin { self.admin } else { self.main };
        let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).expect("send");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("read the answer");
        let status = out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
        let chunked = head.lines().any(|l| l.eq_ignore_ascii_case("transfer-encoding: chunked"));
        (status, if chunked { dechunk(body) } else { body.to_string() })
    }

    fn json(&self, admin: bool, method: &str, path: &str, body: &str) -> Json {
        let (status, text) = self.call(admin, method, path, body);
        assert!(status < 500, "{method} {path}: {status} {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {text}"))
    }
}

/// A chunked body (a streamed answer: `GET /snapshots`, `GET /metrics`) put together.
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or_else(|_| panic!("a chunk size: {size:?}"));
        if size == 0 {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].strip_prefix("\r\n").expect("CRLF after a chunk");
    }
    out
}

/// Every key path of a JSON answer: `a`, `a.b` inside objects, `a[].b` inside arrays of objects.
fn key_paths(prefix: &str, v: &Json, out: &mut BTreeSet<String>) {
    match v {
        Json::Object(map) => {
            for (k, v) in map {
                let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                out.insert(path.clone());
                key_paths(&path, v, out);
            }
        }
        Json::Array(items) => {
            for item in items {
                key_paths(&format!("{prefix}[]"), item, out);
            }
        }
        _ => {}
    }
}

/// The endpoint of a row or comment: `POST /decide/{table}` → ("POST", "/decide/{table}").
fn endpoint(text: &str) -> (String, String) {
    let (method, path) = text.trim().split_once(' ').unwrap_or_else(|| panic!("`{text}` is not `METHOD /path`"));
    (method.to_string(), path.trim().to_string())
}

fn fill(path: &str) -> String {
    path.replace("{table}", "t").replace("{name}", "t").replace("{id}", "skipped")
}

#[test]
fn endpoints_and_response_fields_are_documented() {
    let doc = "docs/api.md";
    let server = Server::start();

    // Every endpoint listed answers on the listeners the docs say, and only there.
    let mut listed = 0;
    for t in tables_headed(doc, "endpoint") {
        let lc = t.column("listener");
        for row in &t.rows {
            let (method, path) = endpoint(&first_code(&row[0]).expect("an endpoint in `code`"));
            let on: &[bool] = match row[lc].as_str() {
                "decision" => &[false],
                "admin" => &[true],
                "both" => &[false, true],
                other => panic!("{doc}: listener `{other}` is not decision, admin or both"),
            };
            for admin in [false, true] {
                let (status, body) = server.call(admin, &method, &fill(&path), "{}");
                let missing = status == 405 || (status == 404 && body.contains("\"not_found\""));
                let listener = if admin { "admin" } else { "decision" };
                assert_eq!(
                    missing,
                    !on.contains(&admin),
                    "{doc}: {method} {path} on the {listener} listener answers {status} {body}"
                );
            }
            listed += 1;
        }
    }
    assert!(listed >= 6, "{doc}: the endpoint table is gone");

    // The answers whose fields the docs describe: every variant of each (a failed table, a
    // warning and a trace, each reload result, a rollback).
    let mut answers: BTreeMap<(String, String), Vec<Json>> = BTreeMap::new();
    let mut record =
        |method: &str, path: &str, v: Json| answers.entry((method.into(), path.into())).or_default().push(v);
    let decide = server.json(false, "POST", "/decide/t?explain=true", r#"{"x": "s", "y": 1}"#);
    assert!(decide.get("warnings").is_some() && decide.get("trace").is_some(), "{decide}");
    record("POST", "/decide/{table}?explain=true", decide);
    let flash = server.json(false, "POST", "/decide/f?explain=true", r#"{"device": "mobile", "m": {"rate": 0.5}}"#);
    assert_eq!(flash["rule_id"], "device=mobile,level=high", "{flash}");
    record("POST", "/decide/{table}?explain=true", flash);
    let deadline = Instant::now() + Duration::from_secs(10);
    let tuned = loop {
        let d = server.json(false, "POST", "/decide/tu?explain=true", r#"{"n": 1}"#);
        if d.get("variant").is_some() {
            break d;
        }
        assert!(Instant::now() < deadline, "the tuned table's decisions never named a variant: {d}");
        std::thread::sleep(Duration::from_millis(50));
    };
    record("POST", "/decide/{table}?explain=true", tuned);
    record("GET", "/health", server.json(false, "GET", "/health", ""));
    record("GET", "/tables", server.json(false, "GET", "/tables", ""));
    // the decision with a warning above is recorded (an `always_keep` class), so one is listed
    let listed = server.json(true, "GET", "/snapshots", "");
    assert!(listed["count"].as_u64().is_some_and(|n| n >= 1), "{listed}");
    record("GET", "/snapshots", listed);
    // the decisions above (a match, a warning) are the status page's figures
    let activity = server.json(true, "GET", "/activity", "");
    assert!(activity["tables"].as_array().is_some_and(|t| !t.is_empty()), "{activity}");
    record("GET", "/activity", activity);
    for name in ["t", "f", "broken"] {
        for admin in [false, true] {
            record("GET", "/tables/{name}", server.json(admin, "GET", &format!("/tables/{name}"), ""));
        }
    }
    // a kill switch, then a reload that removes its rule, a rollback (a pin) that brings it
    // back, a reload that keeps the pin and one that ends it
    let switched = server.json(true, "PUT", "/tables/t/rules/skipped/enabled", "false");
    assert_eq!(switched["switched_off"], serde_json::json!(["skipped"]), "{switched}");
    record("PUT", "/tables/{name}/rules/{id}/enabled", switched);
    let in_file = server.json(true, "PUT", "/tables/t/rules/off/enabled", "false");
    assert_eq!(in_file["disabled_in_file"], true, "{in_file}");
    record("PUT", "/tables/{name}/rules/{id}/enabled", in_file);
    record("GET", "/tables/{name}", server.json(true, "GET", "/tables/t", ""));
    let tables = server.dir.path().join("tables");
    let without_skipped = T_V1
        .replace("docs test", "docs test 2")
        .replace(r#"{"id": "skipped", "condition": "y == 2", "action": {"a": 2}},"#, "");
    std::fs::write(tables.join("t.json"), &without_skipped).expect("edit t.json");
    std::fs::remove_file(tables.join("gone.json")).expect("remove gone.json");
    let reload = server.json(true, "POST", "/reload", "");
    let results = set(reload["tables"].as_array().expect("tables").iter().filter_map(|t| t["result"].as_str()));
    assert_eq!(results, set(["failed", "loaded", "missing", "unchanged"]), "{reload}");
    record("POST", "/reload", reload);
    // the table whose file is gone is removed after a grace; /health lists it then
    let deadline = Instant::now() + Duration::from_secs(5);
    let removed = loop {
        let health = server.json(false, "GET", "/health", "");
        if health.get("removed").is_some() {
            break health;
        }
        assert!(Instant::now() < deadline, "gone.json's table was never removed: {health}");
        std::thread::sleep(Duration::from_millis(50));
    };
    record("GET", "/health", removed);
    record("GET", "/tables/{name}", server.json(true, "GET", "/tables/t", ""));
    record("POST", "/tables/{name}/rollback", server.json(true, "POST", "/tables/t/rollback", ""));
    record("GET", "/tables/{name}", server.json(true, "GET", "/tables/t", ""));
    let pinned = server.json(true, "POST", "/reload", "");
    assert!(pinned.to_string().contains(r#""result":"pinned""#), "{pinned}");
    record("POST", "/reload", pinned);
    std::fs::write(tables.join("t.json"), without_skipped.replace("docs test 2", "docs test 3")).expect("edit t.json");
    let unpinned = server.json(true, "POST", "/reload", "");
    assert!(unpinned.to_string().contains(r#""pin_ended""#), "{unpinned}");
    record("POST", "/reload", unpinned);
    // snapshots that cannot be stored: a file where their folder was; a decision with a warning
    // is always kept
    let snaps = server.dir.path().join("snaps");
    std::fs::rename(&snaps, server.dir.path().join("snaps.away")).expect("move snaps/");
    std::fs::write(&snaps, "not a folder").expect("a file in its place");
    server.json(false, "POST", "/decide/t", r#"{"x": "s", "y": 1}"#);
    let deadline = Instant::now() + Duration::from_secs(10);
    let failing = loop {
        let h = server.json(false, "GET", "/health", "");
        if h["snapshots"]["failing"] == true {
            break h;
        }
        assert!(Instant::now() < deadline, "snapshots never failed: {h}");
        std::thread::sleep(Duration::from_millis(50));
    };
    for part in ["tables", "snapshots", "registry", "tuning"] {
        assert!(failing["degraded"].as_array().is_some_and(|d| d.contains(&part.into())), "{part}: {failing}");
    }
    record("GET", "/health", failing);

    let text = read(doc);
    let mut described = BTreeSet::new();
    for t in md_tables(&text).into_iter().filter(|t| t.header[0] == "field") {
        let comment = t.comment.as_deref().unwrap_or("");
        let target = comment
            .strip_prefix("fields:")
            .unwrap_or_else(|| panic!("{doc}:{}: a field table needs <!-- fields: METHOD /path --> before it", t.line));
        let target = target.trim();
        let key = endpoint(target);
        let seen = answers
            .get(&key)
            .unwrap_or_else(|| panic!("{doc}:{}: tests/docs.rs does not know how to call {target}", t.line));
        let mut code = BTreeSet::new();
        for v in seen {
            key_paths("", v, &mut code);
        }
        let documented: BTreeSet<String> = t.rows.iter().filter_map(|r| first_code(&r[0])).collect();
        // A documented field must exist; a field must be documented when the docs describe its
        // parent (top-level fields always; `trace[].reason` once the docs list `trace[].…`).
        let described_parent = |path: &str| match path.rfind(['.', '[']) {
            None => true,
            Some(i) => {
                let parent = &path[..i];
                documented
                    .iter()
                    .any(|d| d.starts_with(&format!("{parent}.")) || d.starts_with(&format!("{parent}[].")))
            }
        };
        let code: BTreeSet<String> = code.into_iter().filter(|p| described_parent(p)).collect();
        same_sets(&format!("the fields of {target}"), doc, &code, &documented);
        described.insert(key);
    }
    let undocumented: Vec<_> = answers.keys().filter(|k| !described.contains(*k)).collect();
    assert!(undocumented.is_empty(), "{doc}: no field table for {undocumented:?}");
}

// ---------------------------------------------------------------------------------------------
// Links, and the README

/// GitHub's anchor for a heading.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(md: &str) -> BTreeSet<String> {
    prose_lines(md).iter().filter(|l| l.starts_with('#')).map(|l| slug(l.trim_start_matches('#'))).collect()
}

#[test]
fn links_resolve_inside_the_repository() {
    let link = regex::Regex::new(r"\]\(([^)\s]+)\)").expect("regex");
    let root = Path::new(ROOT).canonicalize().expect("root");
    let mut checked = 0;
    for rel in doc_files() {
        let md = read(&rel);
        for forbidden in ["../shared", "SPEC.md", "SPEC §"] {
            assert!(
                !md.contains(forbidden),
                "{rel} mentions {forbidden}, which a clone of the repository does not have"
            );
        }
        let base = Path::new(ROOT).join(&rel);
        let dir = base.parent().expect("a folder");
        for line in prose_lines(&md) {
            for c in link.captures_iter(line) {
                let target = &c[1];
                if target.starts_with("http://") || target.starts_with("https://") || target.starts_with("mailto:") {
                    continue;
                }
                let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
                let path = if file.is_empty() { base.clone() } else { dir.join(file) };
                let resolved =
                    path.canonicalize().unwrap_or_else(|_| panic!("{rel}: the link `{target}` leads nowhere"));
                assert!(
                    resolved.starts_with(&root) && !resolved.starts_with(root.join("target")),
                    "{rel}: the link `{target}` leaves the repository"
                );
                if !anchor.is_empty() {
                    let text = std::fs::read_to_string(&resolved).unwrap_or_default();
                    assert!(anchors(&text).contains(anchor), "{rel}: the link `{target}`: no heading #{anchor}");
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 20, "hardly any links were found");
}

#[test]
fn readme_links_the_docs_and_keeps_its_commands() {
    let readme = read("README.md");
    assert!(readme.contains("](docs/README.md)"), "README.md must link docs/README.md");
    for command in ["cargo build --release && ./target/release/clef serve", "cargo test --release"] {
        assert!(readme.contains(&format!("```sh\n{command}\n```")), "README.md lost the command `{command}`");
    }
}
