//! The router's admin endpoints (SPEC §7): `GET /router`, `POST /router/failover`,
//! `DELETE /router/failover/{table}`, and what the log says of the router at start.

use crate::server::errors::{ErrorAnswer as _, ErrorCode};
use std::fmt::Write as _;
use std::time::Instant;

use super::App;
use crate::expr::json::{write_json_float, write_json_string, write_string_map};
use crate::http1::Response;
use crate::registry::Tables;
use crate::router::Router;

/// Logs the router's instances, and a fallback table that is not loaded.
pub(super) fn announce(router: &Router, tables: &Tables) {
    let c = router.config();
    log::info!(
        "router: {} instances, policy {}, region {:?}, local decides below load {}",
        c.instances.len(),
        c.policy.name(),
        c.region,
        c.local_max_load
    );
    if let Some(t) = &c.fallback_table {
        if tables.get(t).is_none_or(|s| s.current.is_none()) {
            log::warn!(
                "router.fallback_table \"{t}\" is not loaded: when no instance can answer, requests get 503/502"
            );
        }
    }
}

/// `GET /router`: each instance's state, load, last probe and ejections.
pub(super) fn status(app: &App, rsp: &mut Response) {
    let b = &mut rsp.body;
    let Some(router) = app.router.as_deref() else {
        b.push_str("{\"enabled\":false,\"instances\":[],\"failovers\":{}}");
        return;
    };
    let table = router.table();
    let figures = router.figures();
    let now = Instant::now();
    let c = router.config();
    b.push_str("{\"enabled\":true,\"region\":");
    write_json_string(&c.region, b);
    let _ = write!(b, ",\"policy\":\"{}\",\"generation\":{},\"instances\":[", c.policy.name(), table.generation());
    let ms_ago = |at: Instant| now.saturating_duration_since(at).as_millis();
    for (i, (spec, status)) in c.instances.iter().zip(table.status.iter()).enumerate() {
        if i > 0 {
            b.push(',');
        }
        b.push_str("{\"id\":");
        write_json_string(&spec.id, b);
        b.push_str(",\"addr\":");
        match &spec.addr {
            Some(a) => write_json_string(a, b),
            None => b.push_str("null"),
        }
        let _ = write!(b, ",\"state\":\"{}\",\"load\":", status.state.name());
        match status.load {
            Some(load) => write_json_float(load, b),
            None if status.state == crate::router::InstanceState::Local => write_json_float(app.load(), b),
            None => b.push_str("null"),
        }
        b.push_str(",\"score\":");
        match status.score {
            Some(score) => write_json_float((score * 1000.0).round() / 1000.0, b),
            None => b.push_str("null"),
        }
        b.push_str(",\"inflight\":");
        match status.inflight {
            Some(n) => b.push_str(&n.to_string()),
            None => b.push_str("null"),
        }
        let f = &figures[i];
        let _ = write!(
            b,
            ",\"routed\":{},\"forwarded\":{},\"retried\":{},\"failed\":{},\"ejections\":{},\"probes_ok\":{},\"probes_failed\":{}",
            f.routed, f.forwarded, f.retried, f.failed, status.ejections, status.probes_ok, status.probes_failed
        );
        b.push_str(",\"last_probe_ms_ago\":");
        match status.last_probe {
            Some(at) => b.push_str(&ms_ago(at).to_string()),
            None => b.push_str("null"),
        }
        b.push_str(",\"last_ok_ms_ago\":");
        match status.last_ok {
            Some(at) => b.push_str(&ms_ago(at).to_string()),
            None => b.push_str("null"),
        }
        b.push_str(",\"probe_ms\":");
        match status.probe_latency {
            Some(d) => write_json_float(d.as_secs_f64() * 1000.0, b),
            None => b.push_str("null"),
        }
        b.push_str(",\"ejected_for_ms\":");
        match status.ejected_until {
            Some(until) => b.push_str(&until.saturating_duration_since(now).as_millis().to_string()),
            None => b.push_str("null"),
        }
        b.push_str(",\"last_error\":");
        match &status.last_error {
            Some(e) => write_json_string(e, b),
            None => b.push_str("null"),
        }
        b.push_str(",\"tables\":");
        write_string_map(&status.tables, b);
        b.push('}');
    }
    b.push_str("],\"failovers\":");
    write_string_map(&table.failovers, b);
    b.push('}');
}

/// `POST /router/failover` `{"table": "risk", "to": "backup_rules"}`.
pub(super) fn failover(app: &App, body: &[u8], rsp: &mut Response) {
    let Some(router) = app.router.as_deref() else {
        return rsp.fail(ErrorCode::RouterOff, "the router is off (config.yaml has no router: instances)");
    };
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Ask {
        table: String,
        to: String,
    }
    let ask: Ask = match serde_json::from_slice(body) {
        Ok(a) => a,
        Err(e) => {
            return rsp.fail(
                ErrorCode::InvalidBody,
                &format!("the body must be {{\"table\": \"risk\", \"to\": \"backup_rules\"}}: {e}"),
            )
        }
    };
    if ask.table.is_empty() || ask.table == ask.to {
        return rsp.fail(ErrorCode::InvalidBody, "`table` must name a table, and `to` another one");
    }
    let tables = app.registry.served();
    if tables.get(&ask.to).is_none_or(|s| s.current.is_none()) {
        return rsp.fail(
            ErrorCode::UnknownTable,
            &format!("no table \"{}\" is loaded here to answer for \"{}\"", ask.to, ask.table),
        );
    }
    router.set_failover(&ask.table, &ask.to);
    log::warn!("router: table {} switched to {} by hand (POST /router/failover)", ask.table, ask.to);
    let b = &mut rsp.body;
    b.push_str("{\"table\":");
    write_json_string(&ask.table, b);
    b.push_str(",\"to\":");
    write_json_string(&ask.to, b);
    b.push('}');
}

/// `DELETE /router/failover/{table}`.
pub(super) fn clear_failover(app: &App, table: &str, rsp: &mut Response) {
    let cleared = app.router.as_deref().is_some_and(|r| r.clear_failover(table));
    if !cleared {
        return rsp
            .fail(ErrorCode::UnknownFailover, &format!("table \"{table}\" is not switched to a fallback by hand"));
    }
    log::info!("router: table {table} served as routed again (DELETE /router/failover)");
    let b = &mut rsp.body;
    b.push_str("{\"table\":");
    write_json_string(table, b);
    b.push_str(",\"cleared\":true}");
}
