//! The layers the compiler cannot see: the engine crate (`crates/clef-engine`) stays an engine.
//! Its crate boundary already stops an import of the serving modules (they are in `clef`,
//! which depends on it); these tests stop the other ways in: a dependency on `clef` itself, on
//! `clef-sys`, or on the crates that serving is built from.

use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The crates the engine may use: parsing, matching, hashing, and `http`'s header rules for
/// what a table asks forward-auth to answer. Anything else needs a reason and a change here.
const ENGINE_MAY_USE: &[&str] = &[
    "simd-json",
    "memchr",
    "aho-corasick",
    "simdutf8",
    "regex",
    "regex-syntax",
    "regex-automata",
    "serde",
    "serde_json",
    "sha2",
    "rustc-hash",
    "bumpalo",
    "smallvec",
    "strsim",
    "granit-parser",
    "http",
    "libc",
];

/// The names under `[dependencies]` (and target-specific dependencies) of a Cargo.toml.
fn dependencies(manifest: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]" || (line.starts_with("[target.") && line.ends_with(".dependencies]"));
            continue;
        }
        if in_deps && !line.is_empty() && !line.starts_with('#') {
            if let Some((name, _)) = line.split_once('=') {
                names.push(name.trim().trim_matches('"').to_string());
            }
        }
    }
    names
}

#[test]
fn the_engine_depends_on_no_serving_crate() {
    let manifest = std::fs::read_to_string(Path::new(ROOT).join("crates/clef-engine/Cargo.toml")).expect("manifest");
    let deps = dependencies(&manifest);
    assert!(deps.len() >= 10, "the engine's dependencies were not read: {deps:?}");
    let foreign: Vec<_> = deps.iter().filter(|d| !ENGINE_MAY_USE.contains(&d.as_str())).collect();
    assert!(
        foreign.is_empty(),
        "crates/clef-engine depends on {foreign:?}: the engine knows nothing of serving (server, router, snapshots, \
         metrics, config); put serving code in the clef crate, or add a parsing/matching crate to ENGINE_MAY_USE"
    );
}

#[test]
fn the_engine_sources_name_no_serving_module() {
    let mut stack = vec![Path::new(ROOT).join("crates/clef-engine/src")];
    let mut files = 0;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("engine sources") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            files += 1;
            let text = std::fs::read_to_string(&path).expect("source");
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or_default();
                for serving in
                    ["clef::", "clef_sys", "crate::server", "crate::router", "crate::snapshot", "crate::metrics"]
                {
                    assert!(!code.contains(serving), "{}:{}: `{serving}` in the engine: {line}", path.display(), n + 1);
                }
            }
        }
    }
    assert!(files > 20, "the engine's sources were not found ({files} files)");
}

#[test]
fn a_dependency_outside_the_list_is_found() {
    let manifest = "[package]\nname = \"x\"\n\n[dependencies]\nregex = \"1\"\n# a note\nmay = { version = \"0.3\" }\n\n[dev-dependencies]\nproptest = \"1\"\n";
    assert_eq!(dependencies(manifest), ["regex", "may"]);
}
