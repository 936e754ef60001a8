//! Tuning's endpoints (SPEC §9): `POST /feedback`, `GET /tuning/{table}` and (admin)
//! `POST /tuning/{table}/promote`.

use super::http::Response;
use super::App;

const TUNING_OFF: &str = "tuning is off: list tables in tuning.tables (config.yaml) to tune their parameters";

/// `POST /feedback {"snapshot_id", "reward"}`: counted for the arm that made the decision.
pub(super) fn feedback(app: &App, body: &[u8], rsp: &mut Response) {
    let Some(tuner) = &app.stages.tuner else { return rsp.error(404, "not_tuned", TUNING_OFF) };
    match tuner.feedback(body) {
        Ok(answer) => rsp.body = answer,
        Err(e) => rsp.error(e.status(), e.code(), &e.to_string()),
    }
}

/// `GET /tuning/{table}`: the baseline's and every variant's params, samples, mean reward,
/// probability of beating the baseline, and readiness.
pub(super) fn report(app: &App, name: &str, rsp: &mut Response) {
    let Some(tuner) = &app.stages.tuner else { return rsp.error(404, "not_tuned", TUNING_OFF) };
    match tuner.report(name) {
        Some(report) => rsp.body = report,
        None => {
            let tuned: Vec<&str> = tuner.table_names().collect();
            rsp.error(
                404,
                "not_tuned",
                &format!("table \"{name}\" is not tuned; tuning.tables lists {}", tuned.join(", ")),
            )
        }
    }
}

/// `POST /tuning/{table}/promote` (admin), body empty or `{"variant": "v2"}`: the variant's
/// values become the table's (an overlay in `state_dir`), and the table is loaded again.
pub(super) fn promote(app: &App, name: &str, body: &[u8], rsp: &mut Response) {
    let Some(tuner) = &app.stages.tuner else { return rsp.error(404, "not_tuned", TUNING_OFF) };
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
            Err(e) => {
                return rsp.error(
                    400,
                    "invalid_body",
                    &format!("{e}; send nothing (the ready variant) or {{\"variant\": \"v2\"}}"),
                )
            }
        }
    };
    match tuner.promote(name, asked.as_deref()) {
        Ok(answer) => {
            app.reapply(name);
            rsp.body = answer;
        }
        Err(e) => rsp.error(e.status(), e.code(), &e.to_string()),
    }
}
