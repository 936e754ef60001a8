//! The command line's conventions: `clef completions SHELL` and `clef man`, generated from the
//! clap definitions, name every command and flag; bash completes with the script (run in a real
//! bash); the man pages render with groff when it is installed; `clef --help` lists every
//! command once, in the groups of docs/cli.md.
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::collections::BTreeSet;
use std::process::Command;

fn clef(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_clef")).args(args).output().expect("run clef");
    assert!(out.status.success(), "clef {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// Every command path (`serve`, `flash compile` …) with its long flags, from the definitions.
fn commands() -> Vec<(Vec<String>, BTreeSet<String>)> {
    fn walk(cmd: &clap::Command, path: &mut Vec<String>, out: &mut Vec<(Vec<String>, BTreeSet<String>)>) {
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            path.push(sub.get_name().to_string());
            let flags = sub.get_arguments().filter_map(|a| a.get_long()).map(|l| format!("--{l}")).collect();
            out.push((path.clone(), flags));
            walk(sub, path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(&clef::cli::command(), &mut Vec::new(), &mut out);
    assert!(out.len() >= 12, "{out:?}");
    out
}

#[test]
fn completions_name_every_command_and_flag() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = clef(&["completions", shell]);
        for (path, flags) in commands() {
            let name = path.last().unwrap();
            assert!(script.contains(name.as_str()), "{shell}: no `{}`", path.join(" "));
            for flag in flags {
                let bare = flag.trim_start_matches('-');
                assert!(script.contains(bare), "{shell}: no {flag} of `{}`", path.join(" "));
            }
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_clef")).args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "an unknown shell is refused");
}

/// What bash completes after `words` with clef's script loaded.
fn bash_completes(words: &[&str]) -> Vec<String> {
    let script = clef(&["completions", "bash"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("clef.bash");
    std::fs::write(&file, script).unwrap();
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let program = format!(
        "source '{}'; COMP_WORDS=({}); COMP_CWORD={}; COMP_LINE='{}'; COMP_POINT=${{#COMP_LINE}}; \
         _clef clef \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        file.display(),
        quoted.join(" "),
        words.len() - 1,
        words.join(" ")
    );
    let out = Command::new("bash").args(["--norc", "--noprofile", "-c", &program]).output().expect("run bash");
    assert!(out.status.success(), "bash: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(String::from).collect()
}

#[test]
fn bash_completes_commands_and_flags() {
    assert_eq!(bash_completes(&["clef", "fl"]), ["flash"]);
    assert_eq!(bash_completes(&["clef", "comp"]), ["completions"]);
    let subs = bash_completes(&["clef", "flash", ""]);
    assert!(subs.contains(&"compile".to_string()) && subs.contains(&"inspect".to_string()), "{subs:?}");
    let flags = bash_completes(&["clef", "replay", "--ag"]);
    assert_eq!(flags, ["--against"]);
    let shells = bash_completes(&["clef", "completions", ""]);
    for shell in ["bash", "zsh", "fish"] {
        assert!(shells.contains(&shell.to_string()), "{shells:?}");
    }
}

#[test]
fn man_pages_cover_every_command() {
    let page = clef(&["man"]);
    assert!(page.contains(".TH clef 1"), "{page}");
    for (path, _) in commands().iter().filter(|(p, _)| p.len() == 1) {
        assert!(page.contains(&path[0]), "clef(1) does not name `{}`", path[0]);
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man1");
    clef(&["man", "--dir", out.to_str().unwrap()]);
    for (path, flags) in commands() {
        let file = out.join(format!("clef-{}.1", path.join("-")));
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for flag in flags {
            // roff escapes each `-` of a flag as `\-`
            let escaped = flag.replace('-', "\\-");
            assert!(text.contains(&escaped), "{}: no {flag}", file.display());
        }
    }
    assert!(out.join("clef.1").is_file());
    // rendered by groff, when it is here, without a warning
    if let Ok(rendered) = Command::new("groff").args(["-man", "-Tutf8", "-ww", "-z"]).arg(out.join("clef.1")).output() {
        assert!(
            rendered.status.success() && rendered.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&rendered.stderr)
        );
    }
}

#[test]
fn help_lists_every_command_once_in_groups() {
    let help = clef(&["--help"]);
    for heading in ["Serve:", "Tables:", "Recorded decisions and tuning:", "Shell:", "Options:"] {
        assert!(help.lines().any(|l| l == heading), "no {heading} in\n{help}");
    }
    for (path, _) in commands().iter().filter(|(p, _)| p.len() == 1) {
        let listed = help.lines().filter(|l| l.split_whitespace().next() == Some(path[0].as_str())).count();
        assert_eq!(listed, 1, "`{}` is listed {listed} times in\n{help}", path[0]);
    }
}
