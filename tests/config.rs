//! `config.yaml` loading (SPEC §5): layering, positions of problems, Windows tolerance.
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};

use clef::config::{check_file, load_with_env, Config, LogLevel, Overrides};
use clef::diagnostic::{Diagnostic, Severity};

fn no_env() -> Vec<(String, String)> {
    Vec::new()
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Writes `config.yaml` (raw bytes) into a fresh folder, next to an empty `tables/` (the default
/// `model.tables_dir`, which must exist).
fn write(bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("tables")).unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, bytes).unwrap();
    (dir, path)
}

fn load_ok(path: &Path) -> clef::config::Loaded {
    match load_with_env(Some(path), &Overrides::default(), &no_env()) {
        Ok(l) => l,
        Err(d) => panic!("{}", d.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")),
    }
}

fn load_err(path: &Path, env: &[(String, String)]) -> Vec<Diagnostic> {
    match load_with_env(Some(path), &Overrides::default(), env) {
        Ok(l) => panic!("expected an error, got {:?}", l.config),
        Err(d) => d,
    }
}

/// Makes a FIFO (named pipe) at `path`: opening it for reading blocks until someone writes.
fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo").arg(path).status().expect("run mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

fn base(dir: &tempfile::TempDir) -> PathBuf {
    std::path::absolute(dir.path()).unwrap()
}

#[test]
fn the_repository_config_loads_and_serves_the_tables_folder() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let loaded = load_ok(&root.join("config.yaml"));
    assert_eq!(loaded.tables_dir, std::path::absolute(root.join("tables")).unwrap());
    assert_eq!(loaded.default_table.as_deref(), Some("risk"));
    assert_eq!(loaded.config.server.port, 8080);
    assert_eq!(loaded.state_dir, loaded.base_dir.join("state"));
    assert!(check_file(&root.join("config.yaml")).is_empty());
}

#[test]
fn defaults_fill_every_missing_key() {
    let (dir, path) = write(b"# nothing but a comment\n");
    let loaded = load_ok(&path);
    let c = &loaded.config;
    assert_eq!((c.server.host.as_str(), c.server.port, c.server.workers), ("0.0.0.0", 8080, 0));
    assert_eq!((c.server.max_body_bytes, c.server.max_connections), (65536, 4096));
    assert_eq!((c.server.idle_timeout_ms, c.server.read_timeout_ms, c.server.write_timeout_ms), (60000, 5000, 5000));
    assert_eq!((c.server.max_headers, c.server.max_header_bytes), (64, 16384));
    assert!(!c.server.cors.enabled);
    assert_eq!(c.server.cors.origins, vec!["*".to_string()]);
    assert_eq!(c.admin.listen, "127.0.0.1:9901");
    assert_eq!(c.logging.level, LogLevel::Info);
    assert_eq!(c.limits.max_rules, 100_000);
    assert!(c.model.watch_file);
    assert_eq!(loaded.tables_dir, base(&dir).join("tables"));
    assert_eq!(loaded.default_table, None);
    assert_eq!((loaded.server_token.clone(), loaded.admin_token.clone()), (None, None));
    // an empty section is its defaults
    let (_d, path) = write(b"server:\n  # port: 1\nlogging:\n");
    assert_eq!(load_ok(&path).config.server.port, 8080);
}

#[test]
fn the_seed_form_keeps_working() {
    let (dir, path) = write(
        b"server: {port: 8080, host: 0.0.0.0}\nmodel: {decision_table_path: ./decision_table.json, watch_file: true}\n\
          logging: {level: info}\ncors: {enabled: true}\n",
    );
    let loaded = load_ok(&path);
    assert!(loaded.config.server.cors.enabled, "top-level cors is an alias of server.cors");
    assert_eq!(loaded.config.cors, None);
    assert_eq!(loaded.default_table.as_deref(), Some("decision_table"));
    assert_eq!(loaded.decision_table_path, Some(base(&dir).join("decision_table.json")));
    assert_eq!(loaded.config.server.host, "0.0.0.0");
}

#[test]
fn default_table_drops_every_extension() {
    let (_dir, path) = write(b"model:\n  decision_table_path: tables/net.flash.json\n");
    assert_eq!(load_ok(&path).default_table.as_deref(), Some("net"));
    let (_dir, path) = write(b"model:\n  decision_table_path: tables/net.flash.json\n  default_table: risk\n");
    assert_eq!(load_ok(&path).default_table.as_deref(), Some("risk"));
}

#[test]
fn a_bom_and_crlf_line_ends_work() {
    let (dir, path) = write(b"\xEF\xBB\xBFserver:\r\n  port: 9000\r\nmodel:\r\n  tables_dir: ./rules\r\n");
    std::fs::create_dir(dir.path().join("rules")).unwrap();
    let loaded = load_ok(&path);
    assert_eq!(loaded.config.server.port, 9000);
    assert_eq!(loaded.tables_dir, base(&dir).join("rules"));
}

#[test]
fn backslashes_in_relative_paths_work() {
    for line in [r"decision_table_path: .\tables\risk.json", r"decision_table_path: '.\tables\risk.json'"] {
        let (dir, path) = write(format!("model:\n  {line}\n").as_bytes());
        let loaded = load_ok(&path);
        assert_eq!(loaded.decision_table_path, Some(base(&dir).join("tables/risk.json")), "{line}");
        assert_eq!(loaded.default_table.as_deref(), Some("risk"));
    }
}

#[test]
fn double_quoted_paths_with_backslashes_are_read_raw() {
    // YAML would read "\r" as a carriage return and "\n" as a line feed
    let (dir, path) = write(b"model:\n  tables_dir: \"tables\\new\"\n  decision_table_path: \"tables\\risk.json\"\n");
    std::fs::create_dir(dir.path().join("tables/new")).unwrap();
    let loaded = load_ok(&path);
    assert_eq!(loaded.tables_dir, base(&dir).join("tables/new"));
    assert_eq!(loaded.decision_table_path, Some(base(&dir).join("tables/risk.json")));
    // flow style too, and positions after it stay right
    let (_dir, path) = write(b"model: {decision_table_path: \"tables\\risk.json\", bogus: 1}\n");
    let d = load_err(&path, &no_env());
    assert_eq!((d[0].line, d[0].column), (1, 50), "{}", d[0]);
}

#[test]
fn windows_absolute_paths_are_reported_with_what_to_write() {
    for (value, col) in [(r"C:\clef\tables", 15), (r"'D:/clef/tables'", 15), (r#""c:\clef\tables""#, 15)] {
        let (_dir, path) = write(format!("model:\n  tables_dir: {value}\n").as_bytes());
        let d = load_err(&path, &no_env());
        assert_eq!(d.len(), 1);
        let text = d[0].to_string();
        assert_eq!((d[0].line, d[0].column), (2, col), "{text}");
        assert!(text.contains("Windows path"), "{text}");
        assert!(text.contains("relative to the folder of this config file"), "{text}");
        assert!(text.contains("/etc/clef/tables"), "{text}");
        assert!(check_file(&path).iter().any(|d| d.message.contains("Windows path")));
    }
    let (_dir, path) = write(b"state_dir: E:\\clef\\state\n");
    assert!(load_err(&path, &no_env())[0].message.contains("Windows path"));
}

#[test]
fn unknown_keys_are_errors_with_position_and_suggestion() {
    let (_dir, path) = write(b"server:\n  host: 0.0.0.0\n  prot: 9000\n");
    let d = load_err(&path, &no_env());
    assert_eq!(d.len(), 1);
    assert_eq!((d[0].line, d[0].column, d[0].width), (3, 3, 4));
    let text = d[0].to_string();
    assert!(text.contains(":3:3: error: unknown key `prot` in `server`, did you mean `port`?"), "{text}");

    let (_dir, path) = write(b"server:\n  port: 1\nlogging: {level: info}\nmodle:\n  tables_dir: x\n");
    let d = load_err(&path, &no_env());
    assert_eq!((d[0].line, d[0].column), (4, 1), "{}", d[0]);
    assert!(d[0].message.contains("unknown key `modle` at the top level, did you mean `model`?"), "{}", d[0]);

    // flow style, nested deeper
    let (_dir, path) = write(b"server: {port: 1, cors: {enabled: true, origin: [x]}}\n");
    let d = load_err(&path, &no_env());
    assert_eq!((d[0].line, d[0].column), (1, 41), "{}", d[0]);
    assert!(d[0].message.contains("did you mean `origins`?"), "{}", d[0]);
}

#[test]
fn check_reports_every_problem() {
    let (_dir, path) = write(
        b"server:\n  prot: 1\n  hots: x\n  max_body_bytes: lots\nmodel:\n  tables_dir: C:\\t\nlogging: {level: verbose}\nbogus: 1\n",
    );
    let d = check_file(&path);
    let lines: Vec<(usize, usize)> = d.iter().map(|d| (d.line, d.column)).collect();
    let all = d.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n");
    assert_eq!(lines, vec![(2, 3), (3, 3), (4, 19), (6, 15), (7, 18), (8, 1)], "{all}");
    assert!(all.contains("did you mean `port`?") && all.contains("did you mean `host`?"), "{all}");
    assert!(all.contains("`server.max_body_bytes` must be a whole number"), "{all}");
    assert!(all.contains("`logging.level` cannot be `verbose`"), "{all}");
    assert!(d.iter().all(|d| d.severity == Severity::Error));
}

#[test]
fn check_says_that_a_tuning_key_is_unknown_then_that_tables_dir_does_not_exist() {
    // keys and types first (all of them at once); what they name is checked once they are right
    let (dir, path) = write(b"model:\n  tables_dir: ./nowhere\ntuning:\n  region: eu\n");
    let d = check_file(&path);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!((d[0].line, d[0].column, d[0].severity), (4, 3, Severity::Error), "{d:?}");
    assert!(d[0].message.contains("region") && d[0].message.contains("traffic"), "{}", d[0].message);
    std::fs::write(&path, b"model:\n  tables_dir: ./nowhere\ntuning:\n  traffic: 0.1\n").unwrap();
    let d = check_file(&path);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!((d[0].line, d[0].column, d[0].severity), (2, 15, Severity::Error));
    assert!(d[0].message.contains("does not exist"), "{}", d[0].message);
    std::fs::create_dir(dir.path().join("nowhere")).unwrap();
    assert!(check_file(&path).is_empty(), "{:?}", check_file(&path));
}

#[test]
fn syntax_errors_have_positions() {
    let (_dir, path) = write(b"server:\n  port: 1\n bad: 2\n");
    let d = load_err(&path, &no_env());
    assert_eq!(d[0].line, 3, "{}", d[0]);
    assert!(d[0].message.starts_with("this is not valid YAML"), "{}", d[0]);
}

#[test]
fn wrong_types_are_errors_at_the_value() {
    let (_dir, path) = write(b"server:\n  port: \"abc\"\n");
    let d = load_err(&path, &no_env());
    let text = d[0].to_string();
    assert_eq!((d[0].line, d[0].column, d[0].width), (2, 9, 5), "{text}");
    assert!(text.contains("`server.port` must be a port number (0 to 65535)"), "{text}");
    let (_dir, path) = write(b"server:\n  port: 70000\n");
    assert!(load_err(&path, &no_env())[0].message.contains("port number"));
    let (_dir, path) = write(b"model:\n  watch_file: sometimes\n");
    assert!(load_err(&path, &no_env())[0].message.contains("true or false"));
}

#[test]
fn environment_overrides_the_file_and_flags_override_both() {
    let (dir, path) = write(b"server:\n  port: 8000\n  host: 10.0.0.1\n");
    let vars = env(&[
        ("CLEF_SERVER__PORT", "9090"),
        ("CLEF_MODEL__DEFAULT_TABLE", "risk"),
        ("CLEF_STATE_DIR", "/x"),
        ("CLEF_SERVER__CORS__ENABLED", "true"),
        ("CLEF_WORKLOAD_PY", "/usr/bin/python3"),
        ("PATH", "/bin"),
    ]);
    let loaded = load_with_env(Some(&path), &Overrides::default(), &vars).unwrap();
    assert_eq!(loaded.config.server.port, 9090);
    assert_eq!(loaded.config.server.host, "10.0.0.1");
    assert!(loaded.config.server.cors.enabled);
    assert_eq!(loaded.default_table.as_deref(), Some("risk"));
    assert_eq!(loaded.state_dir, PathBuf::from("/x"));
    assert_eq!(loaded.tables_dir, base(&dir).join("tables"));

    let flags = Overrides { port: Some(7000), host: Some("127.0.0.1".into()) };
    let loaded = load_with_env(Some(&path), &flags, &vars).unwrap();
    assert_eq!((loaded.config.server.port, loaded.config.server.host.as_str()), (7000, "127.0.0.1"));

    // numbers are fine where text is expected
    let loaded = load_with_env(Some(&path), &Overrides::default(), &env(&[("CLEF_MODEL__DEFAULT_TABLE", "2024")]));
    assert_eq!(loaded.unwrap().default_table.as_deref(), Some("2024"));
}

#[test]
fn environment_errors_name_the_variable() {
    let (_dir, path) = write(b"server:\n  port: 8000\n");
    let d = load_err(&path, &env(&[("CLEF_SERVER__PORT", "abc")]));
    let text = d[0].to_string();
    assert!(text.contains("CLEF_SERVER__PORT") && text.contains("port number"), "{text}");
    let d = load_err(&path, &env(&[("CLEF_SERVER__PROT", "1")]));
    assert!(
        d[0].to_string().contains("CLEF_SERVER__PROT") && d[0].message.contains("did you mean `port`?"),
        "{}",
        d[0]
    );
    let d = load_err(&path, &env(&[("CLEF_SERVR__PORT", "1")]));
    assert!(d[0].message.contains("did you mean `server`"), "{}", d[0]);
    let d = load_err(&path, &env(&[("CLEF_STATE_DIR", "C:\\state")]));
    assert!(d[0].message.contains("Windows path") && d[0].to_string().contains("CLEF_STATE_DIR"), "{}", d[0]);
}

#[test]
fn state_dir_falls_back_to_systemd_then_next_to_the_config() {
    let (dir, path) = write(b"logging: {level: debug, format: json}\n");
    let loaded = load_with_env(Some(&path), &Overrides::default(), &env(&[("STATE_DIRECTORY", "/var/lib/clef")]));
    assert_eq!(loaded.unwrap().state_dir, PathBuf::from("/var/lib/clef"));
    assert_eq!(load_ok(&path).state_dir, base(&dir).join("state"));
    let (dir, path) = write(b"state_dir: ../shared/state\n");
    let parent = base(&dir).parent().unwrap().to_path_buf();
    assert_eq!(load_ok(&path).state_dir, parent.join("shared/state"));
}

#[test]
fn relative_paths_resolve_against_the_config_folder_not_the_working_directory() {
    let (dir, _) = write(b"");
    let sub = dir.path().join("etc");
    std::fs::create_dir_all(sub.join("tables")).unwrap();
    let path = sub.join("config.yaml");
    std::fs::write(&path, "model:\n  tables_dir: tables\n  decision_table_path: ../risk.json\n").unwrap();
    // the test process's working directory is the crate root: it must not matter
    let loaded = load_ok(&path);
    assert_eq!(loaded.base_dir, base(&dir).join("etc"));
    assert_eq!(loaded.tables_dir, base(&dir).join("etc/tables"));
    assert_eq!(loaded.decision_table_path, Some(base(&dir).join("risk.json")));
    assert_eq!(loaded.config.model.tables_dir, Some(base(&dir).join("etc/tables")));
}

#[test]
fn token_files_are_read_and_trimmed() {
    let (dir, path) = write(b"server:\n  token_file: ./server.token\nadmin:\n  token_file: admin.token\n");
    std::fs::write(dir.path().join("server.token"), "  s3cret\r\n\n").unwrap();
    std::fs::write(dir.path().join("admin.token"), "adm1n\n").unwrap();
    let loaded = load_ok(&path);
    assert_eq!(loaded.server_token.as_deref(), Some("s3cret"));
    assert_eq!(loaded.admin_token.as_deref(), Some("adm1n"));

    std::fs::write(dir.path().join("admin.token"), " \n").unwrap();
    let d = load_err(&path, &no_env());
    assert_eq!((d[0].line, d[0].column), (4, 15), "{}", d[0]);
    assert!(d[0].message.contains("admin.token") && d[0].message.contains("is empty"), "{}", d[0]);

    std::fs::remove_file(dir.path().join("server.token")).unwrap();
    let d = load_err(&path, &no_env());
    assert_eq!(d.len(), 2);
    assert!(d[0].message.contains("server.token") && d[0].message.contains("no such file"), "{}", d[0]);
}

#[test]
fn a_missing_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = load_err(&dir.path().join("nope.yaml"), &no_env());
    assert!(d[0].to_string().contains("cannot read the configuration file"), "{}", d[0]);
}

#[test]
fn the_config_round_trips_through_yaml() {
    // JSON is YAML (flow style): the serialized defaults read back as the defaults
    let c = Config::default();
    let text = serde_json::to_string_pretty(&c).unwrap();
    assert_eq!(clef::config::parse_text("config.yaml", &text).unwrap(), c);
}

/// Found by fuzzing: a duplicate key after a multi-byte character used to panic.
#[test]
fn duplicate_keys_after_non_ascii_text_are_diagnosed_not_panicked() {
    for text in ["é: 1\né: 2\n", "ä: 1\nb: 1\nb: 2\n", "\u{FEE5}:\rml:\nml:"] {
        let (_dir, path) = write(text.as_bytes());
        let d = check_file(&path);
        assert!(d.iter().any(|d| d.severity == Severity::Error), "{text:?}: {d:?}");
        assert!(!load_err(&path, &no_env()).is_empty());
    }
}

#[test]
fn only_the_start_of_a_token_file_is_read() {
    let (dir, path) = write(b"server:\n  token_file: big.token\n");
    std::fs::write(dir.path().join("big.token"), "t".repeat(100_000)).unwrap();
    let loaded = load_with_env(Some(&path), &Overrides::default(), &no_env()).expect("loads");
    assert_eq!(loaded.server_token.map(|t| t.len()), Some(4096));
}

#[test]
fn a_token_file_that_is_not_a_regular_file_is_refused() {
    // /dev/zero never ends and a FIFO blocks whoever opens it until someone writes: both refused
    let (dir, path) = write(b"server:\n  token_file: /dev/zero\nadmin:\n  token_file: ./fifo\n");
    mkfifo(&dir.path().join("fifo"));
    let d = within(SECONDS(5), move || load_err(&path, &no_env()));
    assert_eq!(d.len(), 2, "{d:?}");
    assert_eq!((d[0].line, d[0].column), (2, 15), "{}", d[0]);
    assert!(d[0].message.contains("it is a character device, not a regular file"), "{}", d[0]);
    assert_eq!((d[1].line, d[1].column), (4, 15), "{}", d[1]);
    assert!(d[1].message.contains("it is a FIFO (named pipe), not a regular file"), "{}", d[1]);
}

// ---------------------------------------------------------------------------------------------
// Values that cannot work (SPEC §5)

/// `(line, column, message)` of every error.
fn errors_of(d: &[Diagnostic]) -> Vec<(usize, usize, String)> {
    d.iter().filter(|d| d.severity == Severity::Error).map(|d| (d.line, d.column, d.message.clone())).collect()
}

#[test]
fn values_that_cannot_work_stop_serve_and_check_alike() {
    let (_dir, path) = write(
        b"server:\n  workers: 12000\n  max_connections: 0\n  idle_timeout_ms: 0\n  read_timeout_ms: 0\n  \
          write_timeout_ms: 0\n  max_headers: 100000000\n  max_header_bytes: 0\n  max_body_bytes: 1000000000000\n\
          admin:\n  listen: nowhere\n",
    );
    let served = errors_of(&load_err(&path, &no_env()));
    let checked = errors_of(&check_file(&path));
    assert_eq!(served, checked, "clef check and clef serve must report the same errors");
    let keys = [
        (2, 12, "`server.workers` is 12000"),
        (3, 20, "`server.max_connections` is 0"),
        (4, 20, "`server.idle_timeout_ms` is 0"),
        (5, 20, "`server.read_timeout_ms` is 0"),
        (6, 21, "`server.write_timeout_ms` is 0"),
        (7, 16, "`server.max_headers` is 100000000"),
        (8, 21, "`server.max_header_bytes` is 0"),
        (9, 19, "`server.max_body_bytes` is 1000000000000"),
        (11, 11, "`admin.listen` is `nowhere`"),
    ];
    let all = served.iter().map(|(l, c, m)| format!("{l}:{c}: {m}")).collect::<Vec<_>>().join("\n");
    assert_eq!(served.len(), keys.len(), "{all}");
    for ((line, column, message), (want_line, want_column, key)) in served.iter().zip(keys) {
        assert_eq!((*line, *column), (want_line, want_column), "{all}");
        assert!(message.starts_with(key), "{message} should start with {key}");
    }
}

#[test]
fn write_timeout_ms_is_read_and_defaults_to_5000() {
    let (_dir, path) = write(b"");
    assert_eq!(load_ok(&path).config.server.write_timeout_ms, 5000);
    let (_dir, path) = write(b"server:\n  write_timeout_ms: 750\n");
    assert_eq!(load_ok(&path).config.server.write_timeout_ms, 750);
    let d = load_err(&path, &env(&[("CLEF_SERVER__WRITE_TIMEOUT_MS", "0")]));
    assert!(d[0].to_string().contains("environment variable CLEF_SERVER__WRITE_TIMEOUT_MS"), "{}", d[0]);
}

#[test]
fn a_missing_or_unreadable_tables_dir_is_an_error_with_its_position() {
    let (dir, path) = write(b"model:\n  tables_dir: ./nowhere\n  default_table: risk\n");
    let d = load_err(&path, &no_env());
    assert_eq!((d.len(), d[0].line, d[0].column), (1, 2, 15), "{d:?}");
    assert!(d[0].message.contains("nowhere") && d[0].message.contains("does not exist"), "{}", d[0]);
    assert_eq!(errors_of(&d), errors_of(&check_file(&path)));
    // a file where the folder should be
    std::fs::write(dir.path().join("nowhere"), "").unwrap();
    assert!(load_err(&path, &no_env())[0].message.contains("is not a folder"));
    // set in the environment: named
    let d = load_err(&path, &env(&[("CLEF_MODEL__TABLES_DIR", "/no/such/folder")]));
    assert!(d[0].to_string().contains("environment variable CLEF_MODEL__TABLES_DIR"), "{}", d[0]);
    // the default `tables` next to the config, when there is nothing else to serve
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, "server:\n  port: 8080\n").unwrap();
    let d = load_err(&path, &no_env());
    assert!(d[0].message.contains("(the default: `tables` next to the config file) does not exist"), "{}", d[0]);
}

#[test]
fn the_seed_form_needs_no_tables_folder_unless_it_names_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, "model: {decision_table_path: ./decision_table.json}\n").unwrap();
    assert!(!dir.path().join("tables").exists());
    assert_eq!(load_ok(&path).decision_table_path, Some(base(&dir).join("decision_table.json")));
    assert!(errors_of(&check_file(&path)).is_empty());
    std::fs::write(&path, "model: {decision_table_path: ./decision_table.json, tables_dir: ./more}\n").unwrap();
    let d = load_err(&path, &no_env());
    assert_eq!((d[0].line, d[0].column), (1, 65), "{}", d[0]);
}

#[test]
fn an_admin_listener_off_loopback_without_a_token_is_a_loud_warning() {
    let (_dir, path) = write(b"admin:\n  listen: 0.0.0.0:9901\n");
    let loaded = load_ok(&path);
    let warning = loaded.warnings.iter().find(|w| w.contains("admin.listen")).expect("a warning");
    assert!(warning.starts_with("SECURITY:"), "{warning}");
    assert!(warning.contains("anyone who can reach that address can reload tables"), "{warning}");
    let d = check_file(&path);
    assert_eq!((d[0].line, d[0].column, d[0].severity), (2, 11, Severity::Warning), "{d:?}");
}

/// Runs `f` on another thread; fails if it takes longer than `limit` (a blocked read, a quadratic
/// loop) instead of hanging the test run.
fn within<T: Send + 'static>(limit: std::time::Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(f()));
    rx.recv_timeout(limit).unwrap_or_else(|_| panic!("took longer than {limit:?}"))
}

const SECONDS: fn(u64) -> std::time::Duration = std::time::Duration::from_secs;

#[test]
fn the_config_file_must_be_a_regular_file_of_at_most_1_mib() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("config.yaml");
    mkfifo(&fifo);
    for (path, why) in [
        (fifo, "it is a FIFO (named pipe), not a regular file"),
        (PathBuf::from("/dev/zero"), "it is a character device, not a regular file"),
        (dir.path().to_path_buf(), "it is a folder, not a regular file"),
    ] {
        let (d, checked) = within(SECONDS(5), move || (load_err(&path, &no_env()), check_file(&path)));
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].message, format!("cannot read the configuration file: {why}"));
        assert_eq!(checked, d);
    }
    let (_dir, path) = write(format!("# {}\n", "x".repeat(1 << 20)).as_bytes());
    let d = load_err(&path, &no_env());
    assert!(d[0].message.contains("larger than 1 MiB (1048576 bytes)"), "{}", d[0]);
    // just under the cap is read
    let (_dir, path) = write(format!("# {}\n", "x".repeat((1 << 20) - 4)).as_bytes());
    load_ok(&path);
}

#[test]
fn a_file_of_unknown_keys_stops_after_ten_errors_at_once() {
    // 90,000 unknown keys at the top level, in a section, in a flow mapping (just under 1 MiB)
    let top: String = (0..90_000).map(|i| format!("k{i}: 1\n")).collect();
    let inside = format!("server:\n{}", (0..80_000).map(|i| format!("  k{i}: 1\n")).collect::<String>());
    let flow = format!("server: {{{}}}\n", (0..80_000).map(|i| format!("k{i}: 1")).collect::<Vec<_>>().join(", "));
    for (text, line, column) in [(top, 1, 1), (inside, 2, 3), (flow, 1, 10)] {
        let (_dir, path) = write(text.as_bytes());
        let d = within(SECONDS(10), move || load_err(&path, &no_env()));
        assert_eq!(d.len(), 11, "{d:?}");
        assert_eq!((d[0].line, d[0].column), (line, column), "{}", d[0]);
        assert!(d[0].message.starts_with("unknown key `k0`"), "{}", d[0]);
        assert!(d[9].message.starts_with("unknown key `k9`"), "{}", d[9]);
        assert_eq!(d[10].message, "stopping after 10 errors; fix these and check again for more");
    }
}

#[test]
fn a_file_of_nested_brackets_is_refused_at_once() {
    // 200 KB of `[`: libyaml took minutes over it
    let (_dir, path) = write(format!("server: {}", "[".repeat(200_000)).as_bytes());
    let d = within(SECONDS(10), move || load_err(&path, &no_env()));
    assert_eq!((d.len(), d[0].line, d[0].column), (1, 1, 41), "{d:?}");
    assert!(d[0].message.contains("nested more than 32 levels deep"), "{}", d[0]);
}

#[test]
fn a_long_value_is_quoted_in_part() {
    // a 1 MB scalar (the most a config holds) was echoed whole, three times over
    let long = "a".repeat(1_000_000);
    for text in [
        format!("server:\n  port: {long}\n"),
        format!("server:\n  {long}: 1\n"),
        format!("logging:\n  level: {long}\n"),
        format!("model:\n  tables_dir: C:\\{long}\n"),
        format!("admin:\n  listen: {long}\n"),
    ] {
        let (_dir, path) = write(text.as_bytes());
        let shown: String = load_err(&path, &no_env()).iter().map(ToString::to_string).collect();
        assert!(shown.len() < 2000, "{} bytes: {}", shown.len(), &shown[..300]);
    }
}

#[test]
fn a_systemd_credential_closes_the_listeners_unless_the_config_names_a_token_file() {
    let (dir, path) = write(b"");
    let creds = dir.path().join("credentials");
    std::fs::create_dir_all(&creds).unwrap();
    let with_creds = env(&[("CREDENTIALS_DIRECTORY", creds.to_str().unwrap())]);
    // an empty credentials folder (the unit loads none) leaves both listeners open
    let loaded = load_with_env(Some(&path), &Overrides::default(), &with_creds).unwrap();
    assert_eq!((loaded.server_token, loaded.admin_token), (None, None));

    std::fs::write(creds.join("server-token"), "s3cret-from-systemd\n").unwrap();
    let loaded = load_with_env(Some(&path), &Overrides::default(), &with_creds).unwrap();
    assert_eq!(loaded.server_token.as_deref(), Some("s3cret-from-systemd"));
    assert_eq!(loaded.config.server.token_file, Some(creds.join("server-token")));
    assert_eq!(loaded.admin_token, None);
    std::fs::write(creds.join("admin-token"), "admin-secret").unwrap();
    let loaded = load_with_env(Some(&path), &Overrides::default(), &with_creds).unwrap();
    assert_eq!(loaded.admin_token.as_deref(), Some("admin-secret"));
    // without the variable the credential is not looked for
    assert_eq!(load_ok(&path).server_token, None);

    // a token file the config names wins over the credential
    std::fs::write(base(&dir).join("mine.token"), "from-the-config").unwrap();
    std::fs::write(&path, "server: {token_file: mine.token}\n").unwrap();
    let loaded = load_with_env(Some(&path), &Overrides::default(), &with_creds).unwrap();
    assert_eq!(loaded.server_token.as_deref(), Some("from-the-config"));

    // an empty credential is an error naming its file, not an open listener
    std::fs::write(&path, "").unwrap();
    std::fs::write(creds.join("server-token"), "  \n").unwrap();
    let d = load_err(&path, &with_creds);
    assert!(d.iter().any(|d| d.to_string().contains("server-token") && d.to_string().contains("empty")), "{d:?}");
}
