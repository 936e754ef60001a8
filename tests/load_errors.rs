//! Load errors of Jev tables and YAML rule sets (SPEC §2, §3, §4.1, §4.2, §10, §11), checked through
//! the real `clef check FILE`: exit 1, the exact `path:line:col: error:` of the
//! offending character (also inside a condition string, through its JSON
//! escapes), a message fragment, and the source line with a caret under it.
//!
//! Lines and columns below are counted by hand: 1-based, columns in characters.
//! In every one-rule case the rule sits on line 2 as
//! `  {"id": "a", "condition": "…", "action": {}}`, so the condition text
//! starts at column 29. The YAML cases are the mistakes YAML makes of what a new user types
//! (tabs, `: ` or ` #` in an unquoted `when:`, a quote missing).
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::Path;
use std::process::{Command, Output};

struct Case {
    /// what the case shows (also the file name)
    name: &'static str,
    /// the table file's text
    text: String,
    /// where the error is
    line: usize,
    col: usize,
    /// a piece of the message
    fragment: &'static str,
}

/// A one-rule bare-array table whose rule is on line 2 (condition text at column 29).
fn rule(condition_json: &str) -> String {
    format!("[\n  {{\"id\": \"a\", \"condition\": \"{condition_json}\", \"action\": {{}}}}\n]\n")
}

fn check(path: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_clef")).arg("check").arg(path).output().expect("run clef check")
}

fn cases() -> Vec<Case> {
    let deep = format!("{}x{}", "(".repeat(65), ")".repeat(65));
    vec![
        Case {
            name: "missing_comma",
            // col 35 is the `"` of "action", where a `,` was expected.
            text: "[\n  {\"id\": \"a\", \"condition\": \"true\" \"action\": {}}\n]\n".into(),
            line: 2,
            col: 35,
            fragment: "a `,` is missing before this: JSON separates the members of an object with commas",
        },
        Case {
            name: "missing_comma_between_rules",
            // the second rule's `{`
            text: "[\n  {\"id\": \"a\", \"condition\": \"true\", \"action\": {}}\n  {\"id\": \"b\", \"condition\": \"true\", \"action\": {}}\n]\n".into(),
            line: 3,
            col: 3,
            fragment: "a `,` is missing before this: JSON separates the items of an array with commas",
        },
        Case {
            name: "closing_quote_missing_at_the_line_end",
            // serde_json says "control character (\u0000-\u001F) found while parsing a string" at
            // the line end; the string begins at col 28
            text: "[\n  {\"id\": \"a\", \"condition\": \"x > 1,\n   \"action\": {}}\n]\n".into(),
            line: 2,
            col: 28,
            fragment: "this string is not closed on its line: a closing `\"` is probably missing",
        },
        Case {
            name: "closing_quote_missing_before_the_next_key",
            // the condition's string runs on to the quote meant to open "action" (col 36)
            text: "[\n  {\"id\": \"a\", \"condition\": \"x > 1, \"action\": {}}\n]\n".into(),
            line: 2,
            col: 28,
            fragment: "a closing `\"` is probably missing in this string: it runs on to the `\"` before `action` (2:37)",
        },
        Case {
            name: "single_quoted_key",
            text: "[\n  {'id': 'a', \"condition\": \"true\", \"action\": {}}\n]\n".into(),
            line: 2,
            col: 4,
            fragment: "JSON strings are written in double quotes",
        },
        Case {
            name: "single_quoted_value",
            text: "[\n  {\"id\": 'a', \"condition\": \"true\", \"action\": {}}\n]\n".into(),
            line: 2,
            col: 10,
            fragment: "JSON strings are written in double quotes",
        },
        Case {
            name: "unquoted_key",
            text: "[\n  {id: \"a\", \"condition\": \"true\", \"action\": {}}\n]\n".into(),
            line: 2,
            col: 4,
            fragment: "a key is a string in double quotes in JSON: write \"id\"",
        },
        Case {
            name: "comment",
            text: "[\n  // the rules\n  {\"id\": \"a\", \"condition\": \"true\", \"action\": {}}\n]\n".into(),
            line: 2,
            col: 3,
            fragment: "JSON has no comments",
        },
        Case {
            name: "tab_in_a_string",
            text: "[\n  {\"id\": \"a\tb\", \"condition\": \"true\", \"action\": {}}\n]\n".into(),
            line: 2,
            col: 12,
            fragment: "a tab inside a string: write it as \\t",
        },
        Case {
            name: "when_in_a_jev_rule",
            // the key "when" at col 15
            text: "[\n  {\"id\": \"a\", \"when\": \"x > 1\", \"action\": {}}\n]\n".into(),
            line: 2,
            col: 15,
            fragment: "writes its expression in \"condition\"",
        },
        Case {
            name: "trailing_comma_in_array",
            // the comma after the last rule, at the end of line 2 (col 49), not the `]` below
            text: "[\n  {\"id\": \"a\", \"condition\": \"true\", \"action\": {}},\n]\n".into(),
            line: 2,
            col: 49,
            fragment: "trailing comma before `]`",
        },
        Case {
            name: "trailing_comma_in_object",
            // serde_json, skipping the rule, says "key must be a string" at the `}` on line 3
            text: "{\"rules\": [\n  {\"id\": \"a\", \"condition\": \"true\", \"action\": {},\n  }\n]}\n".into(),
            line: 2,
            col: 48,
            fragment: "trailing comma before `}`",
        },
        Case {
            name: "truncated_file",
            text: "[\n  {\"id\": \"a\", \"condition\": \"true\", \"action\": {}}\n".into(),
            line: 3,
            col: 1,
            fragment: "ends too early",
        },
        Case {
            name: "rule_without_id",
            // the rule object itself, col 3
            text: "[\n  {\"condition\": \"true\", \"action\": {}}\n]\n".into(),
            line: 2,
            col: 3,
            fragment: "has no \"id\"",
        },
        Case {
            name: "duplicate_id",
            // the second "a" value, line 3 col 10; the message names the earlier rule
            text: "[\n  {\"id\": \"a\", \"condition\": \"true\", \"action\": {}},\n  {\"id\": \"a\", \"condition\": \"false\", \"action\": {}}\n]\n".into(),
            line: 3,
            col: 10,
            fragment: "rule #1",
        },
        Case {
            name: "condition_not_a_string",
            text: "[\n  {\"id\": \"a\", \"condition\": 5, \"action\": {}}\n]\n".into(),
            line: 2,
            col: 28,
            fragment: "\"condition\" must be a string",
        },
        Case {
            name: "action_not_an_object",
            text: "[\n  {\"id\": \"a\", \"condition\": \"true\", \"action\": \"allow\"}\n]\n".into(),
            line: 2,
            col: 46,
            fragment: "\"action\" must be an object",
        },
        Case {
            name: "unknown_rule_key",
            // the key "condtion" at col 15
            text: "[\n  {\"id\": \"a\", \"condtion\": \"true\", \"action\": {}}\n]\n".into(),
            line: 2,
            col: 15,
            fragment: "did you mean \"condition\"",
        },
        Case {
            name: "unknown_table_key",
            text: "{\n  \"rulez\": [],\n  \"rules\": [{\"id\": \"a\", \"condition\": \"true\", \"action\": {}}]\n}\n".into(),
            line: 2,
            col: 3,
            fragment: "did you mean \"rules\"",
        },
        Case {
            name: "unclosed_paren",
            // the condition `(x > 1` (cols 29..34) ends where `)` was expected: col 35
            text: rule("(x > 1"),
            line: 2,
            col: 35,
            fragment: "`)`",
        },
        Case {
            name: "single_equals",
            // `a = 1`: the `=` at col 31
            text: rule("a = 1"),
            line: 2,
            col: 31,
            fragment: "`==`",
        },
        Case {
            name: "unknown_function",
            text: rule("lenght(x) > 1"),
            line: 2,
            col: 29,
            fragment: "did you mean `len`",
        },
        Case {
            name: "wrong_arity",
            text: rule("len(x, y) > 1"),
            line: 2,
            col: 29,
            fragment: "len",
        },
        Case {
            name: "invalid_regex",
            // `x ~ \"(ab\"`: the pattern literal starts at its escaped quote, col 33
            text: rule("x ~ \\\"(ab\\\""),
            line: 2,
            col: 33,
            fragment: "invalid regex",
        },
        Case {
            name: "invalid_regex_in_matches",
            // `y matches \"[z\"`: pattern at col 39
            text: rule("y matches \\\"[z\\\""),
            line: 2,
            col: 39,
            fragment: "invalid regex",
        },
        Case {
            name: "string_gt_int",
            text: rule("\\\"a\\\" > 1"),
            line: 2,
            col: 29,
            fragment: "`>`",
        },
        Case {
            name: "contains_int_literal",
            text: rule("x contains 5"),
            line: 2,
            col: 29,
            fragment: "contains",
        },
        Case {
            name: "len_of_int",
            text: rule("len(5) > 1"),
            line: 2,
            col: 29,
            fragment: "len",
        },
        Case {
            name: "division_by_zero",
            // `x > 1/0`: the folded `1/0` at col 33
            text: rule("x > 1/0"),
            line: 2,
            col: 33,
            fragment: "division by zero",
        },
        Case {
            name: "ternary_not_bool",
            text: rule("x ? \\\"y\\\" : \\\"n\\\""),
            line: 2,
            col: 29,
            fragment: "bool",
        },
        Case {
            name: "nil_condition",
            text: rule("nil"),
            line: 2,
            col: 29,
            fragment: "bool",
        },
        Case {
            name: "unknown_param",
            // `x > params.mx`: `params.mx` at col 33
            text: "{\"params\": {\"max\": {\"value\": 1}}, \"rules\": [\n  {\"id\": \"a\", \"condition\": \"x > params.mx\", \"action\": {}}\n]}\n"
                .into(),
            line: 2,
            col: 33,
            fragment: "unknown parameter",
        },
        Case {
            name: "schema_undeclared_field",
            // `amount > 1 && tier == \"vip\"`: `tier` at col 43
            text: "{\"schema\": {\"amount\": \"number\"}, \"rules\": [\n  {\"id\": \"a\", \"condition\": \"amount > 1 && tier == \\\"vip\\\"\", \"action\": {}}\n]}\n"
                .into(),
            line: 2,
            col: 43,
            fragment: "not declared in the schema",
        },
        Case {
            name: "schema_type_mismatch",
            // `tier` is a string: `tier > 1` can never work
            text: "{\"schema\": {\"tier\": \"string\"}, \"rules\": [\n  {\"id\": \"a\", \"condition\": \"tier > 1\", \"action\": {}}\n]}\n"
                .into(),
            line: 2,
            col: 29,
            fragment: "`>`",
        },
        Case {
            name: "schema_type_mismatch_in_call",
            text: "{\"schema\": {\"amount\": \"number\"}, \"rules\": [\n  {\"id\": \"a\", \"condition\": \"len(amount) > 1\", \"action\": {}}\n]}\n"
                .into(),
            line: 2,
            col: 29,
            fragment: "len",
        },
        Case {
            name: "schema_unknown_type",
            // the type value "numbr" at col 23
            text: "{\"schema\": {\"amount\": \"numbr\"}, \"rules\": [\n  {\"id\": \"a\", \"condition\": \"amount > 1\", \"action\": {}}\n]}\n"
                .into(),
            line: 1,
            col: 23,
            fragment: "amount",
        },
        Case {
            name: "schema_path_inside_a_scalar",
            // the key "a.b" at col 28: `a` is declared a string, so no input has `a.b`
            text: "{\"schema\": {\"a\": \"string\", \"a.b\": \"number\"}, \"rules\": [\n  {\"id\": \"r\", \"condition\": \"a == \\\"x\\\"\", \"action\": {}}\n]}\n"
                .into(),
            line: 1,
            col: 28,
            fragment: "only an object can hold it",
        },
        Case {
            name: "schema_empty_path_segment",
            // the key "a..b" at col 13
            text: "{\"schema\": {\"a..b\": \"number\", \"c\": \"string\"}, \"rules\": [\n  {\"id\": \"r\", \"condition\": \"c == \\\"x\\\"\", \"action\": {}}\n]}\n"
                .into(),
            line: 1,
            col: 13,
            fragment: "empty name between dots",
        },
        Case {
            name: "nesting_over_64",
            // the 65th `(` is where the limit is passed: col 29 + 64 = 93
            text: rule(&deep),
            line: 2,
            col: 93,
            fragment: "nested too deeply",
        },
        Case {
            name: "after_escaped_quote",
            // `name == \"a\\\"b\" && lenght(x) > 1`: in the file, `\"` `a` `\\` `\"` `b` `\"`
            // come before `&&`; `lenght` is at col 51.
            text: rule("name == \\\"a\\\\\\\"b\\\" && lenght(x) > 1"),
            line: 2,
            col: 51,
            fragment: "did you mean `len`",
        },
        Case {
            name: "after_non_ascii_and_unicode_escape",
            // `msg == \"微信\u00e9\" && lenght(x)`: 微 and 信 are one column each,
            // the 6-character escape \u00e9 six; `lenght` is at col 52.
            text: rule("msg == \\\"微信\\u00e9\\\" && lenght(x) > 1"),
            line: 2,
            col: 52,
            fragment: "did you mean `len`",
        },
        Case {
            name: "object_table_later_line",
            text: "{\n  \"default\": {\"d\": 1},\n  \"rules\": [\n    {\"id\": \"ok\", \"condition\": \"true\", \"action\": {}},\n    {\"id\": \"b\",\n     \"condition\": \"a && (b || c\",\n     \"action\": {}}\n  ]\n}\n".into(),
            // line 6 `     "condition": "a && (b || c",`: text starts at col 20, ends at col 32
            line: 6,
            col: 32,
            fragment: "`)`",
        },
        Case {
            name: "bom_and_crlf",
            // The BOM is not a column; CRLF line ends count as one line end.
            text: "\u{feff}[\r\n  {\"id\": \"a\", \"condition\": \"true\", \"action\": {}},\r\n  {\"id\": \"b\", \"condition\": \"lenght(x)\", \"action\": {}}\r\n]\r\n".into(),
            line: 3,
            col: 29,
            fragment: "did you mean `len`",
        },
        Case {
            name: "bom_first_line",
            text: "\u{feff}{\"rulez\": [], \"rules\": []}\r\n".into(),
            line: 1,
            col: 2,
            fragment: "did you mean \"rules\"",
        },
    ]
}

/// Mistakes in YAML rule sets: how YAML reads what a new user types.
fn yaml_cases() -> Vec<Case> {
    vec![
        Case {
            name: "yaml_tab_indent",
            text: "rules:\n  - id: a\n\twhen: x > 1\n    action: {}\n".into(),
            line: 3,
            col: 1,
            fragment: "a tab; YAML indents with spaces, not tabs",
        },
        Case {
            name: "yaml_colon_in_unquoted_when",
            // the `:` inside the string, col 27
            text: "rules:\n  - id: a\n    when: note contains \"a: b\"\n    action: {}\n".into(),
            line: 3,
            col: 27,
            fragment: "the value of `when` holds `: ` (a colon and a space), which YAML reads as the start of a \
                       mapping; put the whole value in quotes: when: 'note contains \"a: b\"'",
        },
        Case {
            name: "yaml_hash_in_unquoted_when",
            // ` #` began a comment: the expression is `note contains "`; at the `#`, col 27
            text: "rules:\n  - id: a\n    when: note contains \" #tag\"\n    action: {}\n".into(),
            line: 3,
            col: 27,
            fragment: "` #` starts a YAML comment, so this `when:` ends before it, as `note contains \"`",
        },
        Case {
            name: "yaml_when_without_its_opening_quote",
            // where the quote belongs, col 11 (the lexer finds an unclosed string at the line end)
            text: "rules:\n  - id: a\n    when: amount > 5 && tier == \"gold\"'\n    action: {}\n".into(),
            line: 3,
            col: 11,
            fragment: "the opening `'` is probably missing here",
        },
        Case {
            name: "yaml_when_without_its_closing_quote",
            text: "rules:\n  - id: a\n    when: 'amount > 5\n    action: {}\n".into(),
            line: 3,
            col: 11,
            fragment: "this `'` opens a quoted value that is never closed",
        },
        Case {
            name: "yaml_indented_off",
            text: "rules:\n  - id: a\n    when: 'true'\n    action:\n      type: x\n     ttl: 5\n".into(),
            line: 6,
            col: 6,
            fragment: "this line is indented differently from the lines above it",
        },
        Case {
            name: "yaml_condition_for_when",
            text: "rules:\n  - id: a\n    condition: x > 1\n    action: {}\n".into(),
            line: 3,
            col: 5,
            fragment: "write \"when\" for an expression",
        },
    ]
}

/// The line of the file (1-based), without its line end.
fn source_line(text: &str, line: usize) -> &str {
    let l = text.split('\n').nth(line - 1).expect("line exists");
    let l = l.trim_end_matches('\r');
    l.strip_prefix('\u{feff}').unwrap_or(l)
}

/// Every case, with the extension of its file.
fn all_cases() -> impl Iterator<Item = (Case, &'static str)> {
    cases().into_iter().map(|c| (c, "json")).chain(yaml_cases().into_iter().map(|c| (c, "yaml")))
}

#[test]
fn bad_tables_are_reported_at_the_offending_character() {
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (case, ext) in all_cases() {
        let path = dir.path().join(format!("{}.{ext}", case.name));
        std::fs::write(&path, &case.text).unwrap();
        let o = check(&path);
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        let shown = path.display().to_string();
        let prefix = format!("{shown}:{}:{}: error: ", case.line, case.col);
        if o.status.code() != Some(1) {
            failures.push(format!("{}: exit {:?}, expected 1\n{stdout}{stderr}", case.name, o.status.code()));
            continue;
        }
        let lines: Vec<&str> = stderr.lines().collect();
        let Some(at) = lines.iter().position(|l| l.starts_with(&prefix) && l.contains(case.fragment)) else {
            failures.push(format!(
                "{}: no diagnostic starting with `{prefix}` and containing `{}`\n{stderr}",
                case.name, case.fragment
            ));
            continue;
        };
        // Under it: a gutter line, `N | <source line>`, then the caret under the column.
        let src = source_line(&case.text, case.line);
        let gutter = " ".repeat(case.line.to_string().len());
        let want_src = format!("{} | {src}", case.line);
        let shown_src = lines.get(at + 2).copied().unwrap_or("");
        if lines.get(at + 1).map(|l| l.trim_end()) != Some(&format!("{gutter} |")) || shown_src != want_src {
            failures.push(format!("{}: source line not shown under the diagnostic\n{stderr}", case.name));
            continue;
        }
        let caret = lines.get(at + 3).copied().unwrap_or("");
        let want_caret = format!("{gutter} | {}^", " ".repeat(case.col - 1));
        if !caret.starts_with(&want_caret) || !caret[want_caret.len()..].chars().all(|c| c == '^') {
            failures.push(format!("{}: caret not under column {}\n{stderr}", case.name, case.col));
        }
    }
    assert!(failures.is_empty(), "{} case(s) failed:\n\n{}", failures.len(), failures.join("\n\n"));
}

#[test]
fn the_same_tables_are_refused_by_decide() {
    let dir = tempfile::tempdir().unwrap();
    for (case, ext) in all_cases() {
        let path = dir.path().join(format!("{}.{ext}", case.name));
        std::fs::write(&path, &case.text).unwrap();
        let input = dir.path().join("input.json");
        std::fs::write(&input, "{}").unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_clef")).arg("decide").arg(&path).arg(&input).output().unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{}: {stderr}", case.name);
        assert!(o.stdout.is_empty(), "{}", case.name);
        let prefix = format!("{}:{}:{}: error: ", path.display(), case.line, case.col);
        assert!(stderr.contains(&prefix), "{}: `{prefix}` not in\n{stderr}", case.name);
    }
}

#[test]
fn nesting_of_64_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let cond = format!("{}x{} == 1", "(".repeat(64), ")".repeat(64));
    let path = dir.path().join("deep64.json");
    std::fs::write(&path, rule(&cond)).unwrap();
    let o = check(&path);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn a_long_chain_of_binary_operators_is_not_nesting() {
    // SPEC §11: `a && b && c …` does not add depth.
    let dir = tempfile::tempdir().unwrap();
    let cond = (0..200).map(|i| format!("f{i} == {i}")).collect::<Vec<_>>().join(" && ");
    let path = dir.path().join("chain.json");
    std::fs::write(&path, rule(&cond)).unwrap();
    let o = check(&path);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn every_problem_of_a_file_is_reported() {
    // SPEC §2, "print every problem": invalid regexes are found with the other
    // load-time checks, so both are reported next to the other errors of the file.
    let dir = tempfile::tempdir().unwrap();
    let text = "[\n  {\"id\": \"a\", \"condition\": \"x ~ \\\"(ab\\\"\", \"action\": {}},\n  {\"id\": \"b\", \"condition\": \"y matches \\\"[z\\\"\", \"action\": {}},\n  {\"id\": \"c\", \"condition\": \"lenght(y)\", \"action\": {}},\n  {\"condition\": \"true\", \"action\": {}}\n]\n";
    let path = dir.path().join("many.json");
    std::fs::write(&path, text).unwrap();
    let o = check(&path);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    let p = path.display().to_string();
    for at in ["2:33", "3:39", "4:29", "5:3"] {
        assert!(stderr.contains(&format!("{p}:{at}: error: ")), "{at} missing:\n{stderr}");
    }
}

#[test]
fn schema_mismatch_message_names_the_declared_type() {
    // For `tier > 1` with `"tier": "string"` in the schema, the message names the
    // declared type, not the nil a missing field reads as (SPEC §2 diagnostics).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("schema.json");
    std::fs::write(
        &path,
        "{\"schema\": {\"tier\": \"string\"}, \"rules\": [\n  {\"id\": \"a\", \"condition\": \"tier > 1\", \"action\": {}}\n]}\n",
    )
    .unwrap();
    let o = check(&path);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    let first = stderr.lines().next().unwrap_or("");
    assert!(first.contains("string"), "the message should name tier's declared type: {first}");
}

#[test]
fn a_broken_declaration_is_reported_once() {
    // Each table has one mistake; the conditions that use what it declares must
    // not add a second error ("unknown parameter", "not declared in the schema").
    let dir = tempfile::tempdir().unwrap();
    for (name, text, fragment) in [
        (
            "misspelt_value",
            "{\"params\": {\"max\": {\"valeu\": 3}},\n \"rules\": [{\"id\": \"a\", \"condition\": \"x > params.max\", \"action\": {}}]}\n",
            "did you mean \"value\"",
        ),
        (
            "bare_value",
            "{\"params\": {\"max\": 3},\n \"rules\": [{\"id\": \"a\", \"condition\": \"x > params.max\", \"action\": {}}]}\n",
            "must be an object such as {\"value\": 0.05}",
        ),
        (
            "no_value",
            "{\"params\": {\"max\": {\"min\": 1}},\n \"rules\": [{\"id\": \"a\", \"condition\": \"x > params.max\", \"action\": {}}]}\n",
            "has no \"value\"",
        ),
        (
            "schema_type",
            "{\"schema\": {\"x\": \"numbr\"},\n \"rules\": [{\"id\": \"a\", \"condition\": \"x > 1\", \"action\": {}}]}\n",
            "must be one of",
        ),
    ] {
        let path = dir.path().join(format!("{name}.json"));
        std::fs::write(&path, text).unwrap();
        let o = check(&path);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{name}: {stderr}");
        let errors: Vec<&str> = stderr.lines().filter(|l| l.contains(": error: ")).collect();
        assert_eq!(errors.len(), 1, "{name}: one problem, one error:\n{stderr}");
        assert!(errors[0].contains(fragment), "{name}: {stderr}");
    }
    // A parameter nobody declared is still an error.
    let path = dir.path().join("undeclared.json");
    std::fs::write(&path, "{\"params\": {\"max\": {\"valeu\": 3}},\n \"rules\": [{\"id\": \"a\", \"condition\": \"x > params.min\", \"action\": {}}]}\n").unwrap();
    let stderr = String::from_utf8_lossy(&check(&path).stderr).into_owned();
    assert!(stderr.contains("unknown parameter `min`"), "{stderr}");
}

/// `clef check PATH`, killed when it takes longer than `limit`: its exit code, stderr and time.
fn check_within(path: &Path, limit: std::time::Duration) -> (Option<i32>, String, std::time::Duration) {
    let dir = tempfile::tempdir().unwrap();
    let err = dir.path().join("stderr");
    let started = std::time::Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_clef"))
        .arg("check")
        .arg(path)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("run clef check");
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("clef check {} took more than {limit:?}", path.display());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    (status.code(), std::fs::read_to_string(&err).unwrap(), started.elapsed())
}

#[test]
fn a_generated_table_broken_in_every_rule_is_checked_in_linear_time_with_a_bounded_report() {
    // 100,000 rules, each with a problem: positioning each diagnostic by counting the lines
    // before it took minutes (quadratic), and the report was 30 MB. Now the time grows with
    // the file and the report lists the first problems and counts the rest.
    let dir = tempfile::tempdir().unwrap();
    let rules: Vec<String> = (0..100_000)
        .map(|i| match i % 3 {
            0 => format!(r#"{{"id": "r{i}", "condition": "bogus(x) >", "action": {{}}}}"#),
            1 => format!(r#"{{"id": "r{i}", "condition": "x > 1", "action": "not an object"}}"#),
            _ => format!(r#"{{"id": "r{i}", "condition": "x >", "action": {{}}}}"#),
        })
        .collect();
    let path = dir.path().join("generated.json");
    std::fs::write(&path, format!("[\n{}\n]\n", rules.join(",\n"))).unwrap();
    // a debug build is several times slower; either way far below the minutes it took
    let limit = std::time::Duration::from_secs(if cfg!(debug_assertions) { 90 } else { 10 });
    let (code, stderr, took) = check_within(&path, limit);
    eprintln!("clef check of 100,000 broken rules: {took:?}, {} bytes of report", stderr.len());
    assert_eq!(code, Some(1), "{}", &stderr[..stderr.len().min(2000)]);
    let p = path.display().to_string();
    let errors = stderr.lines().filter(|l| l.starts_with(&format!("{p}:")) && l.contains(": error: ")).count();
    assert_eq!(errors, 50, "{}", &stderr[..stderr.len().min(2000)]);
    assert!(stderr.contains(&format!("{p}:2:")), "the first problem is listed: {stderr}");
    assert!(stderr.contains(&format!("{p}: 99950 more problems are not listed")), "{stderr}");
    assert!(stderr.len() < 64 * 1024, "{} bytes of report", stderr.len());
}

#[test]
fn a_key_written_for_another_format_is_one_error() {
    // `when` in a JSON rule: the unknown key says what to write; "has no condition" would be the
    // same mistake said twice
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("when.json");
    std::fs::write(&path, "[\n  {\"id\": \"a\", \"when\": \"x > 1\", \"action\": {}}\n]\n").unwrap();
    let o = check(&path);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains(": error: ")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
}
