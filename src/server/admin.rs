//! The admin side of the registry on the wire: kill switches (`PUT
//! /tables/{name}/rules/{id}/enabled`), and what reloads, rollbacks and `GET /tables/{name}`
//! say about pins and switches. Each handler asks the registry's writer thread and waits for
//! its answer without holding up the worker (see `registry`).

use crate::server::errors::{ErrorAnswer as _, ErrorCode};
use std::fmt::Write as _;

use super::App;
use crate::expr::json::write_json_string;
use crate::http1::Response;
use crate::registry::{Entry, PersistError, Reloaded, SwitchError, WriterError};
use crate::table::Engine;

/// `PUT /tables/{name}/rules/{id}/enabled` with a body of `true` or `false`: a kill switch
/// (SPEC §8.3), in force on every core at once, saved in `state_dir`.
pub fn rule_enabled(app: &App, name: &str, rule: &str, body: &[u8], rsp: &mut Response) {
    let enabled = match std::str::from_utf8(body).map(str::trim) {
        Ok("true") => true,
        Ok("false") => false,
        _ => {
            return rsp.fail(
                ErrorCode::InvalidBody,
                &format!(
                    "the body must be true or false (JSON), to switch rule \"{rule}\" on or off; got {}",
                    shown(body)
                ),
            )
        }
    };
    match app.registry.set_enabled(name, rule, enabled) {
        Ok(switched) => {
            let b = &mut rsp.body;
            b.push_str("{\"table\":");
            write_json_string(name, b);
            b.push_str(",\"rule_id\":");
            write_json_string(rule, b);
            let _ = write!(b, ",\"enabled\":{},\"changed\":{}", switched.enabled, switched.changed);
            if switched.disabled_in_file {
                b.push_str(",\"disabled_in_file\":true");
            }
            b.push_str(",\"switched_off\":");
            write_string_array(&switched.switched_off, b);
            write_persisted(app, switched.persist_error.as_ref(), b);
            b.push('}');
        }
        Err(SwitchError::UnknownTable) => rsp.fail(ErrorCode::UnknownTable, &format!("no table named \"{name}\"")),
        Err(SwitchError::UnknownRule) => {
            rsp.fail(ErrorCode::UnknownRule, &format!("table \"{name}\" has no rule \"{rule}\" (GET /tables/{name} lists them)"))
        }
        Err(SwitchError::Unavailable) => rsp.fail(ErrorCode::TableUnavailable, &format!("table \"{name}\" has never loaded, so its rules are not known; fix its file first (GET /health says why)"),
        ),
        Err(SwitchError::NoRules) => rsp.fail(ErrorCode::NoRules, &format!("table \"{name}\" is a flash table: it has cells, not rules, so there is nothing to switch off"),
        ),
        Err(SwitchError::DisabledInFile) => rsp.fail(ErrorCode::DisabledInFile, &format!(
                "rule \"{rule}\" of table \"{name}\" is disabled in the table file (\"enabled\": false); a kill switch only \
                 switches off what the file enables: edit the file to enable it"
            ),
        ),
        Err(SwitchError::Writer(e)) => writer_failed(e, rsp),
    }
}

/// The answer when the registry's writer could not handle a change.
pub fn writer_failed(e: WriterError, rsp: &mut Response) {
    match e {
        WriterError::Busy => rsp.fail(ErrorCode::RegistryBusy, &e.to_string()),
        WriterError::Failed => rsp.fail(ErrorCode::InternalError, &e.to_string()),
    }
}

/// `,"persisted":…` (and `"persist_error"` when the change could not be saved in `state_dir`).
pub fn write_persisted(app: &App, error: Option<&PersistError>, b: &mut String) {
    let persisted = app.registry.state_dir().is_some() && error.is_none();
    let _ = write!(b, ",\"persisted\":{persisted}");
    write_persist_error(error, b);
}

/// `,"persist_error":…` when a change could not be saved in `state_dir`.
pub fn write_persist_error(error: Option<&PersistError>, b: &mut String) {
    if let Some(e) = error {
        b.push_str(",\"persist_error\":");
        write_json_string(&e.to_string(), b);
    }
}

/// What a reload did to table `name`'s pin and switches: `,"pin_ended":VERSION` when its file
/// changed and ended a rollback pin, `,"switches_without_rule":[…]` for kill switches naming
/// rules it does not have.
pub fn write_reload_notes(reloaded: &Reloaded, name: &str, b: &mut String) {
    if let Some((_, version)) = reloaded.unpinned.iter().find(|(n, _)| n == name) {
        b.push_str(",\"pin_ended\":");
        write_json_string(version, b);
    }
    if let Some((_, ids)) = reloaded.switches_without_rule.iter().find(|(n, _)| n == name) {
        b.push_str(",\"switches_without_rule\":");
        write_string_array(ids, b);
    }
}

/// `,"pinned":…,"switched_off":[…]` of `GET /tables/{name}` (and `"switches_without_rule"`
/// when some switches name rules the table does not have).
pub fn write_switch_state(entry: &Entry, b: &mut String) {
    b.push_str(",\"pinned\":");
    match &entry.pin {
        Some(pin) => {
            b.push_str("{\"version\":");
            write_json_string(&pin.version, b);
            b.push_str(",\"file_version\":");
            write_json_string(pin.file_sha256.get(..12).unwrap_or(""), b);
            b.push_str(",\"since\":");
            write_json_string(&pin.since, b);
            b.push('}');
        }
        None => b.push_str("null"),
    }
    // a flash table has cells, not rules: nothing to switch off
    if let Some(t) = entry.current.as_ref().filter(|t| matches!(&*t.engine, Engine::Rules(_))) {
        b.push_str(",\"switched_off\":");
        write_string_array(t.switched_off_ids(), b);
    }
    if !entry.switches_without_rule.is_empty() {
        b.push_str(",\"switches_without_rule\":");
        write_string_array(&entry.switches_without_rule, b);
    }
}

fn write_string_array(items: &[String], b: &mut String) {
    b.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            b.push(',');
        }
        write_json_string(item, b);
    }
    b.push(']');
}

/// A body, shortened for a message.
fn shown(body: &[u8]) -> String {
    if body.is_empty() {
        return "an empty body".into();
    }
    let text = String::from_utf8_lossy(body);
    let cut: String = text.chars().take(40).collect();
    let more = if cut.len() < text.len() { "…" } else { "" };
    format!("{:?}{more}", cut)
}
