#![no_main]
use std::io::Write;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    {
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(data).unwrap();
    }
    let _ = clef::config::check_file(&path);
    let _ = clef::config::load_with_env(Some(&path), &clef::config::Overrides::default(), &[]);
    let env = vec![("CLEF_SERVER__PORT".to_string(), "8080".to_string())];
    let _ = clef::config::load_with_env(Some(&path), &clef::config::Overrides::default(), &env);
});
