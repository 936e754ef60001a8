//! Tuning's endpoints (SPEC §9): `POST /feedback`, `GET /tuning/{table}` and (admin)
//! `POST /tuning/{table}/promote`.

use super::App;
use crate::decide::unknown_table;
use crate::http1::Response;
use crate::server::errors::{ErrorAnswer as _, ErrorCode};

const TUNING_OFF: &str = "tuning is off: list tables in tuning.tables (config.yaml) to tune their parameters";

/// `POST /feedback {"snapshot_id", "reward"}`: counted for the arm that made the decision.
pub(super) fn feedback(app: &App, body: &[u8], rsp: &mut Response) {
    let Some(tuner) = &app.stages.tuner else { return rsp.fail(ErrorCode::NotTuned, TUNING_OFF) };
    match tuner.feedback(body) {
        Ok(answer) => rsp.body = answer,
        Err(e) => rsp.refuse(&e),
    }
}

/// Answers 404 `unknown_table` when `name` is neither a table nor listed in `tuning.tables`
/// (a listed table not loaded yet has a report that says so); whether it answered.
fn refused_unknown(app: &App, name: &str, rsp: &mut Response) -> bool {
    let listed = app.stages.tuner.as_ref().is_some_and(|t| t.table_names().any(|n| n == name));
    let tables = app.registry.served();
    if listed || tables.get(name).is_some() {
        return false;
    }
    let refusal = unknown_table(&tables, name);
    rsp.refuse(&refusal);
    true
}

/// `GET /tuning/{table}`: the baseline's and every variant's params, samples, mean reward,
/// probability of beating the baseline, and readiness.
pub(super) fn report(app: &App, name: &str, rsp: &mut Response) {
    if refused_unknown(app, name, rsp) {
        return;
    }
    let Some(tuner) = &app.stages.tuner else { return rsp.fail(ErrorCode::NotTuned, TUNING_OFF) };
    match tuner.report(name) {
        Some(report) => rsp.body = report,
        None => {
            let tuned: Vec<&str> = tuner.table_names().collect();
            rsp.fail(
                ErrorCode::NotTuned,
                &format!("table \"{name}\" is not tuned; tuning.tables lists {}", tuned.join(", ")),
            )
        }
    }
}

/// `POST /tuning/{table}/promote` (admin), body empty or `{"variant": "v2"}`: the variant's
/// values become the table's (an overlay in `state_dir`), and the table is loaded again.
pub(super) fn promote(app: &App, name: &str, body: &[u8], rsp: &mut Response) {
    if refused_unknown(app, name, rsp) {
        return;
    }
    let Some(tuner) = &app.stages.tuner else { return rsp.fail(ErrorCode::NotTuned, TUNING_OFF) };
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Body {
        variant: Option<String>,
    }
    let asked = if body.trim_ascii().is_empty() {
        None
    } else {
        match serde_json::from_slice::<Body>(body) {
            Ok(b) => b.variant,
            Err(e) if e.classify() == serde_json::error::Category::Data => {
                return rsp.fail(
                    ErrorCode::InvalidBody,
                    &format!("{e}; send nothing (the ready variant) or {{\"variant\": \"v2\"}}"),
                )
            }
            Err(e) => {
                let e = crate::input::InputError::from_serde_syntax(body, &e);
                return rsp.refuse(&e);
            }
        }
    };
    match tuner.promote(name, asked.as_deref()) {
        Ok(answer) => {
            app.reapply(name);
            rsp.body = answer;
        }
        Err(e) => rsp.refuse(&e),
    }
}
