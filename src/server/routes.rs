//! The endpoints of SPEC §6: routing, authorization, and each handler.

use crate::server::errors::{ApiError as _, ErrorAnswer as _, ErrorCode};
use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::Arc;

use percent_encoding::percent_decode_str;

use super::admin;
use super::App;
use crate::authz::{header_safe, Proxy, Verdict};
use crate::decide::{self as pipeline, Prepared, Refusal, Routed};
use crate::expr::json::{write_json_float, write_json_string, write_string_map};
use crate::http1::{BodySink, Request, Response};
use crate::input::batch::BatchInputs;
use crate::metrics::{self, Gauges, TableLoad, TableSource, TableView};
use crate::registry::{Entry, Outcome, Reloaded, RollbackError, Tables};
use crate::render::{self, write_timestamp};
use crate::router::forward::{Answer, Endpoint, Outgoing};
use crate::table::Table;

/// Which listener a request came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listener {
    /// the decision port
    Main,
    /// the admin port (loopback by default)
    Admin,
}

/// The routes, for 404 vs 405 answers. Names are percent-decoded path segments (borrowed
/// from the path unless they hold an escape).
enum Route<'p> {
    Decide(Option<Cow<'p, str>>),
    /// many decisions in one request, with the named table or the default one
    Batch(Option<Cow<'p, str>>),
    Health,
    Metrics,
    Tables,
    Table(Cow<'p, str>),
    Reload,
    Rollback(Cow<'p, str>),
    /// a kill switch: `/tables/{name}/rules/{id}/enabled` (admin)
    RuleEnabled(Cow<'p, str>, Cow<'p, str>),
    /// a recent decision snapshot (admin)
    Snapshot(Cow<'p, str>),
    /// the recent decision snapshots, newest first, filtered by the query (admin)
    Snapshots,
    /// forward-auth with a table; the path after `/authz/{table}` is the one being authorized
    Authz(Cow<'p, str>, &'p str),
    /// the router's instances (admin)
    RouterStatus,
    /// switch a table to another by hand (admin)
    Failover,
    /// end a table's hand-set failover (admin)
    FailoverClear(Cow<'p, str>),
    /// the outcome of a tuned decision
    Feedback,
    /// a tuned table's arms and rewards
    Tuning(Cow<'p, str>),
    /// store a tuned table's winning values (admin)
    Promote(Cow<'p, str>),
    /// the status page (admin)
    Page,
    /// each table's decisions over the last minutes (admin)
    Activity,
    NotFound,
}

/// An endpoint of SPEC §6, without the names in its path: what a row of a route table serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndpointKind {
    /// `POST /decide`, `POST /decide/{table}`
    Decide,
    /// `POST /decide/batch`, `POST /decide/{table}/batch`
    Batch,
    /// forward-auth: `/authz/{table}/…` with any method
    Authz,
    /// `GET /health`
    Health,
    /// `GET /metrics`
    Metrics,
    /// `GET /tables`
    Tables,
    /// `GET /tables/{name}`
    Table,
    /// `POST /reload`
    Reload,
    /// `POST /tables/{name}/rollback`
    Rollback,
    /// `PUT /tables/{name}/rules/{id}/enabled`: a kill switch
    RuleEnabled,
    /// `GET /snapshots/{id}`
    Snapshot,
    /// `GET /snapshots`
    Snapshots,
    /// `GET /router`
    RouterStatus,
    /// `POST /router/failover`
    Failover,
    /// `DELETE /router/failover/{table}`
    FailoverClear,
    /// `POST /feedback`
    Feedback,
    /// `GET /tuning/{table}`
    Tuning,
    /// `POST /tuning/{table}/promote`
    Promote,
    /// `GET /`: the status page
    Page,
    /// `GET /activity`
    Activity,
}

/// Which token a route asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Token {
    /// none: health and metrics on the main listener
    None,
    /// the decision token (`server.token_file`) as `Authorization: Bearer`
    Server,
    /// the decision token in `X-Clef-Token`: forward-auth keeps `Authorization` for the input
    ServerInHeader,
    /// the admin token (`admin.token_file`) as `Authorization: Bearer`
    Admin,
}

/// One endpoint on one listener: what is served where, and behind which token.
#[derive(Clone, Copy, Debug)]
pub struct RouteRow {
    /// the endpoint
    pub kind: EndpointKind,
    /// the method it answers (`GET` answers `HEAD` too); `*` for any method
    pub method: &'static str,
    /// the path, with `{…}` for names (each path also answers under `/v1`)
    pub path: &'static str,
    /// the token it needs when one is configured
    pub token: Token,
}

impl RouteRow {
    const fn new(kind: EndpointKind, method: &'static str, path: &'static str, token: Token) -> RouteRow {
        RouteRow { kind, method, path, token }
    }

    /// Whether a request with `method` is served by this row.
    pub fn allows(&self, method: &str) -> bool {
        self.method == "*" || method == self.method || (self.method == "GET" && method == "HEAD")
    }
}

use EndpointKind as E;

/// The decision listener (`server.listen`): decisions, forward-auth, feedback, and the read-only
/// views that clients and load balancers use.
pub const MAIN_ROUTES: &[RouteRow] = &[
    RouteRow::new(E::Decide, "POST", "/decide", Token::Server),
    RouteRow::new(E::Decide, "POST", "/decide/{table}", Token::Server),
    RouteRow::new(E::Batch, "POST", "/decide/batch", Token::Server),
    RouteRow::new(E::Batch, "POST", "/decide/{table}/batch", Token::Server),
    RouteRow::new(E::Authz, "*", "/authz/{table}/{path}", Token::ServerInHeader),
    RouteRow::new(E::Health, "GET", "/health", Token::None),
    RouteRow::new(E::Metrics, "GET", "/metrics", Token::None),
    RouteRow::new(E::Tables, "GET", "/tables", Token::Server),
    RouteRow::new(E::Table, "GET", "/tables/{table}", Token::Server),
    RouteRow::new(E::Feedback, "POST", "/feedback", Token::Server),
    RouteRow::new(E::Tuning, "GET", "/tuning/{table}", Token::Server),
];

/// The admin listener (`admin.listen`, loopback by default): every change to what is served, the
/// recorded decisions and the router's controls, all behind the admin token but the status page
/// (`GET /`), which holds no data.
pub const ADMIN_ROUTES: &[RouteRow] = &[
    RouteRow::new(E::Health, "GET", "/health", Token::Admin),
    RouteRow::new(E::Metrics, "GET", "/metrics", Token::Admin),
    RouteRow::new(E::Tables, "GET", "/tables", Token::Admin),
    RouteRow::new(E::Table, "GET", "/tables/{table}", Token::Admin),
    RouteRow::new(E::Reload, "POST", "/reload", Token::Admin),
    RouteRow::new(E::Rollback, "POST", "/tables/{table}/rollback", Token::Admin),
    RouteRow::new(E::RuleEnabled, "PUT", "/tables/{table}/rules/{rule}/enabled", Token::Admin),
    RouteRow::new(E::Snapshots, "GET", "/snapshots", Token::Admin),
    RouteRow::new(E::Snapshot, "GET", "/snapshots/{id}", Token::Admin),
    RouteRow::new(E::RouterStatus, "GET", "/router", Token::Admin),
    RouteRow::new(E::Failover, "POST", "/router/failover", Token::Admin),
    RouteRow::new(E::FailoverClear, "DELETE", "/router/failover/{table}", Token::Admin),
    RouteRow::new(E::Tuning, "GET", "/tuning/{table}", Token::Admin),
    RouteRow::new(E::Promote, "POST", "/tuning/{table}/promote", Token::Admin),
    // The page is the same bytes for everyone and holds no data: a browser cannot send a token
    // with a plain visit, so the page asks for the token and sends it with every request it makes.
    RouteRow::new(E::Page, "GET", "/", Token::None),
    RouteRow::new(E::Activity, "GET", "/activity", Token::Admin),
];

/// The route table of a listener.
pub fn routes(listener: Listener) -> &'static [RouteRow] {
    match listener {
        Listener::Main => MAIN_ROUTES,
        Listener::Admin => ADMIN_ROUTES,
    }
}

impl Route<'_> {
    /// The endpoint, or `None` for a path that names none.
    fn kind(&self) -> Option<EndpointKind> {
        Some(match self {
            Route::Decide(_) => E::Decide,
            Route::Batch(_) => E::Batch,
            Route::Health => E::Health,
            Route::Metrics => E::Metrics,
            Route::Tables => E::Tables,
            Route::Table(_) => E::Table,
            Route::Reload => E::Reload,
            Route::Rollback(_) => E::Rollback,
            Route::RuleEnabled(..) => E::RuleEnabled,
            Route::Snapshot(_) => E::Snapshot,
            Route::Snapshots => E::Snapshots,
            Route::Authz(..) => E::Authz,
            Route::RouterStatus => E::RouterStatus,
            Route::Failover => E::Failover,
            Route::FailoverClear(_) => E::FailoverClear,
            Route::Feedback => E::Feedback,
            Route::Tuning(_) => E::Tuning,
            Route::Promote(_) => E::Promote,
            Route::Page => E::Page,
            Route::Activity => E::Activity,
            Route::NotFound => return None,
        })
    }
}

fn route(path: &str) -> Route<'_> {
    let path = path.strip_prefix("/v1").filter(|p| p.starts_with('/')).unwrap_or(path);
    if let Some(rest) = path.strip_prefix("/authz/") {
        // `/authz/{table}/original/path`: a proxy (Envoy's `path_prefix`, nginx's
        // `proxy_pass …/authz/t$request_uri`) appends the path it asks about.
        let (name, asked) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        return match percent_decode_str(name).decode_utf8() {
            Ok(name) if !name.is_empty() => Route::Authz(name, asked),
            _ => Route::NotFound,
        };
    }
    let path = if path.len() > 1 { path.trim_end_matches('/') } else { path };
    if let Some(r) = rule_enabled_route(path) {
        return r;
    }
    let mut segments = path.split('/').skip(1);
    let parts = [segments.next(), segments.next(), segments.next()];
    if segments.next().is_some() {
        return Route::NotFound;
    }
    // Each segment is decoded on its own, so `%2F` stays inside a name rather than making a new segment.
    fn named<'p>(raw: &'p str, make: fn(Cow<'p, str>) -> Route<'p>) -> Route<'p> {
        match percent_decode_str(raw).decode_utf8() {
            Ok(name) if !name.is_empty() => make(name),
            _ => Route::NotFound,
        }
    }
    match parts {
        [Some(""), None, None] => Route::Page,
        [Some("activity"), None, None] => Route::Activity,
        [Some("decide"), None, None] => Route::Decide(None),
        [Some("decide"), Some("batch"), None] => Route::Batch(None),
        [Some("decide"), Some(name), Some("batch")] => named(name, |n| Route::Batch(Some(n))),
        [Some("decide"), Some(name), None] => named(name, |n| Route::Decide(Some(n))),
        [Some("health"), None, None] => Route::Health,
        [Some("metrics"), None, None] => Route::Metrics,
        [Some("tables"), None, None] => Route::Tables,
        [Some("tables"), Some(name), None] => named(name, Route::Table),
        [Some("tables"), Some(name), Some("rollback")] => named(name, Route::Rollback),
        [Some("reload"), None, None] => Route::Reload,
        [Some("snapshots"), None, None] => Route::Snapshots,
        [Some("snapshots"), Some(id), None] => named(id, Route::Snapshot),
        [Some("router"), None, None] => Route::RouterStatus,
        [Some("router"), Some("failover"), None] => Route::Failover,
        [Some("router"), Some("failover"), Some(name)] => named(name, Route::FailoverClear),
        [Some("feedback"), None, None] => Route::Feedback,
        [Some("tuning"), Some(name), None] => named(name, Route::Tuning),
        [Some("tuning"), Some(name), Some("promote")] => named(name, Route::Promote),
        _ => Route::NotFound,
    }
}

/// `/tables/{name}/rules/{id}/enabled`, each name percent-decoded on its own.
fn rule_enabled_route(path: &str) -> Option<Route<'_>> {
    let rest = path.strip_prefix("/tables/")?.strip_suffix("/enabled")?;
    let (name, id) = rest.split_once("/rules/")?;
    if name.contains('/') || id.contains('/') {
        return None;
    }
    let decode = |raw| percent_decode_str(raw).decode_utf8().ok().filter(|n| !n.is_empty());
    Some(match (decode(name), decode(id)) {
        (Some(name), Some(id)) => Route::RuleEnabled(name, id),
        _ => Route::NotFound,
    })
}

/// Answers one request (a streamed answer's producer may borrow `app`).
pub fn handle<'a>(app: &'a App, listener: Listener, req: &Request<'_>, rsp: &mut Response<'a>) {
    let cors = listener == Listener::Main && app.cors_enabled;
    if cors {
        add_cors_headers(app, req, rsp);
        if req.method == "OPTIONS" {
            rsp.status = 204;
            rsp.add_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
            rsp.add_header("Access-Control-Allow-Headers", "Content-Type, Authorization, X-Clef-Token");
            rsp.add_header("Access-Control-Max-Age", "600");
            return;
        }
    }
    let admin = listener == Listener::Admin;
    if app.is_draining() {
        // Every request read during the drain is answered, and the connection closes after it,
        // so that clients and load balancers move on instead of reusing it until the exit.
        rsp.close = true;
        if matches!(route(req.path), Route::Health) {
            health(app, admin, rsp);
        } else {
            rsp.fail(ErrorCode::Draining, "the server is shutting down; retry on another instance");
        }
        return;
    }
    let r = route(req.path);
    let Some(kind) = r.kind() else {
        rsp.fail(ErrorCode::NotFound, &format!("no endpoint {} {}", req.method, req.path));
        return;
    };
    let Some(row) = routes(listener).iter().find(|row| row.kind == kind) else {
        let elsewhere = if admin { "the main listener" } else { "the admin listener" };
        rsp.fail(ErrorCode::NotFound, &format!("no endpoint {} here; it is served on {elsewhere}", req.path));
        return;
    };
    if !row.allows(req.method) {
        rsp.add_header("Allow", row.method);
        rsp.fail(
            ErrorCode::MethodNotAllowed,
            &format!("{} {} is not allowed; use {}", req.method, req.path, row.method),
        );
        return;
    }
    match row.token {
        Token::Admin if !authorized(app.admin_token.as_deref(), req) => {
            rsp.add_header("WWW-Authenticate", "Bearer");
            rsp.fail(ErrorCode::Unauthorized, "admin endpoints need Authorization: Bearer <admin token>");
            return;
        }
        Token::Server if !authorized(app.server_token.as_deref(), req) => {
            rsp.add_header("WWW-Authenticate", "Bearer");
            rsp.fail(
                ErrorCode::Unauthorized,
                "this endpoint needs Authorization: Bearer <token> (server.token_file, or the server-token credential)",
            );
            return;
        }
        // The request's own `Authorization` belongs to the input: clef's token travels in
        // `X-Clef-Token` here.
        Token::ServerInHeader if !token_matches(app.server_token.as_deref(), req.header("x-clef-token")) => {
            rsp.fail(ErrorCode::Unauthorized, "/authz needs the token of server.token_file in X-Clef-Token");
            return;
        }
        _ => {}
    }
    match r {
        Route::Decide(name) => decide(app, name.as_deref(), req, rsp),
        Route::Batch(name) => batch(app, name.as_deref(), req, rsp),
        Route::Authz(name, asked) => authz(app, &name, asked, req, rsp),
        Route::Health => health(app, admin, rsp),
        Route::Metrics => metrics_text(app, req, rsp),
        Route::Tables => tables(app, admin, rsp),
        Route::Table(name) => table(app, &name, admin, rsp),
        Route::Reload => reload(app, rsp),
        Route::Rollback(name) => rollback(app, &name, rsp),
        Route::RuleEnabled(name, id) => admin::rule_enabled(app, &name, &id, req.body, rsp),
        Route::Snapshot(id) => snapshot(app, &id, rsp),
        Route::Snapshots => super::recent::list(app, req, rsp),
        Route::RouterStatus => super::router_admin::status(app, rsp),
        Route::Failover => super::router_admin::failover(app, req.body, rsp),
        Route::FailoverClear(name) => super::router_admin::clear_failover(app, &name, rsp),
        Route::Feedback => super::tuning_routes::feedback(app, req.body, rsp),
        Route::Tuning(name) => super::tuning_routes::report(app, &name, rsp),
        Route::Promote(name) => super::tuning_routes::promote(app, &name, req.body, rsp),
        Route::Page => super::page::serve(rsp),
        Route::Activity => super::activity::report(app, rsp),
        Route::NotFound => {}
    }
}

/// Answers a request that gets no decision.
fn refuse(refusal: &Refusal, rsp: &mut Response) {
    rsp.refuse(&refusal);
}

fn authorized(expected: Option<&str>, req: &Request<'_>) -> bool {
    token_matches(expected, req.bearer_token())
}

/// Whether `given` is the expected token (anything is, when none is expected).
fn token_matches(expected: Option<&str>, given: Option<&[u8]>) -> bool {
    let Some(expected) = expected else { return true };
    let Some(given) = given.map(<[u8]>::trim_ascii) else { return false };
    // Compare without an early exit on the first differing byte.
    given.len() == expected.len() && given.iter().zip(expected.as_bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

fn add_cors_headers(app: &App, req: &Request<'_>, rsp: &mut Response) {
    let origin = req.header("origin").and_then(|o| std::str::from_utf8(o).ok());
    let allow = if app.cors_origins.iter().any(|o| o == "*") {
        Some("*".to_string())
    } else {
        origin.filter(|o| app.cors_origins.iter().any(|a| a == o)).map(str::to_string)
    };
    if let Some(a) = allow {
        rsp.add_header("Access-Control-Allow-Origin", a);
        rsp.add_header("Vary", "Origin");
    }
}

fn decide(app: &App, name: Option<&str>, req: &Request<'_>, rsp: &mut Response) {
    with_prepared(app, req.body, &mut |input| decide_prepared(app, name, input, req, rsp));
}

/// [`decide`] with the body prepared.
fn decide_prepared(app: &App, name: Option<&str>, input: &Prepared<'_, '_, '_>, req: &Request<'_>, rsp: &mut Response) {
    let tables = app.registry.served();
    let (name, degraded_reason) = match routed(app, &tables, name, Endpoint::Decide, input, req, rsp) {
        Step::Here(name, degraded_reason) => (name, degraded_reason),
        Step::Forwarded(answer) => return answer.write(rsp),
        Step::Answered => return,
    };
    let resolved = match pipeline::resolve(&tables, name.as_deref(), app.default_table.as_deref()) {
        Ok(found) => found,
        Err(refusal) => return refuse(&refusal, rsp),
    };
    let options = pipeline::Options { degraded_reason, ..decision_options(req) };
    let _inflight = app.enter(); // counted in flight until answered
    let decided = pipeline::decide_staged(&app.stages, &tables, resolved, input, &options, &mut rsp.body);
    count(&decided);
    if let Err(e) = &decided.result {
        rsp.body.clear();
        rsp.refuse(&e);
    }
}

/// How a decision request asks to be answered: `?explain=true`, its `traceparent`.
fn decision_options<'r>(req: &'r Request<'_>) -> pipeline::Options<'r> {
    pipeline::Options {
        explain: req.query_flag("explain"),
        traceparent: req.header("traceparent"),
        ..pipeline::Options::default()
    }
}

/// Counts a decision in its table's figures.
/// Counts a decision in its table's statistics, with the pipeline's latency
/// ([`pipeline::Decided::latency_ns`]: the one definition of every decision endpoint).
fn count(decided: &pipeline::Decided<'_>) {
    let latency_ns = decided.latency_ns;
    match &decided.result {
        Ok(decision) => {
            let warned: Vec<usize> = decision.warnings.iter().map(|w| w.rule).collect();
            decided.entry.stats.record(decision.rule, latency_ns, &warned);
        }
        Err(_) => decided.entry.stats.record_invalid_input(),
    }
}

/// `POST /decide[/{table}]/batch`: one NDJSON line per input, in input order, each what
/// `POST /decide` answers for it (snapshots, canary and shadow included). The answer is
/// streamed: decided as the client reads it, from the body where the connection keeps it.
fn batch<'a>(app: &'a App, name: Option<&str>, req: &Request<'_>, rsp: &mut Response<'a>) {
    let tables = app.registry.served();
    let (name, degraded_reason) =
        match routed(app, &tables, name, Endpoint::Batch, &Prepared::bytes(req.body), req, rsp) {
            Step::Here(name, degraded_reason) => (name, degraded_reason),
            Step::Forwarded(answer) => return answer.write(rsp),
            Step::Answered => return,
        };
    if let Err(refusal) = pipeline::resolve(&tables, name.as_deref(), app.default_table.as_deref()) {
        return refuse(&refusal, rsp);
    }
    let inputs = match BatchInputs::check(req.body) {
        Ok(inputs) => inputs,
        Err(e) => return rsp.refuse(&e),
    };
    if inputs.count() > app.max_batch_lines {
        return rsp.fail(
            ErrorCode::BatchTooLarge,
            &format!(
                "the batch holds {} inputs; at most {} are decided in one request (server.max_batch_lines): \
                 split it",
                inputs.count(),
                app.max_batch_lines
            ),
        );
    }
    rsp.content_type = "application/x-ndjson";
    if req.header("x-clef-forwarded").is_some() {
        // a clef router forwarded it: its client reads answers with a Content-Length only
        rsp.chunked = false;
    }
    let tables = arc_swap::Guard::into_inner(tables);
    let name = name.map(Cow::into_owned);
    let explain = req.query_flag("explain");
    let traceparent = req.header("traceparent").map(<[u8]>::to_vec);
    rsp.stream(move |body, out| {
        let options = pipeline::Options { explain, traceparent: traceparent.as_deref(), degraded_reason };
        decide_batch(app, &tables, name.as_deref(), inputs, body, &options, out);
    });
}

/// Answer bytes of a batch decided at a time, counted in flight, before they are handed to
/// the connection (which may wait for the client to read).
const BATCH_GROUP_BYTES: usize = 8192;

/// Decides the inputs of a batch `body` with table `name` (the default when `None`), writing one
/// line each to `out`, until the last or until the client is gone.
fn decide_batch(
    app: &App,
    tables: &Tables,
    name: Option<&str>,
    mut inputs: BatchInputs,
    body: &[u8],
    options: &pipeline::Options<'_>,
    out: &mut dyn BodySink,
) {
    let mut lines = String::new();
    let resolved = match pipeline::resolve(tables, name, app.default_table.as_deref()) {
        Ok(found) => found,
        // the handler resolved it in this same snapshot: never, but said if it were
        Err(refusal) => {
            render::write_line_error(refusal.error_code().as_str(), &refusal.to_string(), 0, &mut lines);
            lines.push('\n');
            let _ = out.write_str(&lines);
            return;
        }
    };
    while !out.gone() {
        let inflight = app.enter();
        while lines.len() < BATCH_GROUP_BYTES {
            let Some((line, bytes)) = inputs.next(body) else { break };
            let decided =
                pipeline::decide_staged(&app.stages, tables, resolved, &Prepared::bytes(bytes), options, &mut lines);
            count(&decided);
            if let Err(e) = &decided.result {
                render::write_line_error(e.error_code().as_str(), &e.to_string(), line, &mut lines);
            }
            lines.push('\n');
        }
        drop(inflight);
        if lines.is_empty() || out.write_str(&lines).is_err() {
            return;
        }
        lines.clear();
    }
}

/// `/authz/{table}`: decides on the request itself — `method`, `path` (what follows
/// `/authz/{table}`), `query` and `headers` (names in lower case) — and answers with the status
/// and headers the action asks for ([`crate::authz`]: 200 when it says `"allow": true`, else
/// 403 by default); `X-Clef-Status` says that status, `X-Clef-Rule` names the rule and
/// `X-Clef-Snapshot` the snapshot.
fn authz(app: &App, name: &str, asked: &str, req: &Request<'_>, rsp: &mut Response) {
    let proxy = match Proxy::from_header(req.header("x-clef-proxy")) {
        Ok(proxy) => proxy,
        Err(unknown) => return rsp.refuse(&unknown),
    };
    let input = authz_input(asked, req);
    with_prepared(app, input.as_bytes(), &mut |input| authz_prepared(app, name, proxy, input, req, rsp));
}

/// [`authz`] with its input prepared.
fn authz_prepared(
    app: &App,
    name: &str,
    proxy: Proxy,
    input: &Prepared<'_, '_, '_>,
    req: &Request<'_>,
    rsp: &mut Response,
) {
    let tables = app.registry.served();
    let (name, degraded_reason) = match routed(app, &tables, Some(name), Endpoint::Decide, input, req, rsp) {
        Step::Here(name, degraded_reason) => (name, degraded_reason),
        Step::Forwarded(answer) => return authz_forwarded(answer, proxy, rsp),
        Step::Answered => return,
    };
    let resolved = match pipeline::resolve(&tables, name.as_deref(), None) {
        Ok(found) => found,
        Err(refusal) => return refuse(&refusal, rsp),
    };
    let options = pipeline::Options { degraded_reason, ..decision_options(req) };
    let _inflight = app.enter(); // counted in flight until answered
    let decided = pipeline::decide_staged(&app.stages, &tables, resolved, input, &options, &mut rsp.body);
    count(&decided);
    match &decided.result {
        Ok(decision) => {
            let table = decided.table;
            answer_verdict(&table.verdict(decision), proxy, rsp);
            if let Some(rule) = table.outcome_id(decision) {
                rsp.add_header("X-Clef-Rule", header_safe(&rule));
            }
            if let Some(id) = decided.snapshot {
                rsp.add_header("X-Clef-Snapshot", id.text().as_str().to_string());
            }
        }
        Err(e) => {
            rsp.body.clear();
            rsp.refuse(&e);
        }
    }
}

/// The status and headers of a forward-auth answer, for `proxy`.
fn answer_verdict(verdict: &Verdict, proxy: Proxy, rsp: &mut Response) {
    rsp.status = verdict.answer_status(proxy);
    rsp.add_header("X-Clef-Status", verdict.status.to_string());
    for (name, value) in &verdict.headers {
        rsp.add_header(name.clone(), value.clone());
    }
}

/// What the route step left to do.
enum Step<'n> {
    /// decide here with this table (the default when `None`), degraded for this reason
    Here(Option<Cow<'n, str>>, Option<&'static str>),
    /// another instance answered
    Forwarded(Answer),
    /// the answer is written (an error)
    Answered,
}

/// Runs `then` with a decision body prepared for the pipeline: parsed once up front when the
/// router hashes a field of it (the routing key and every stage that decides then read the
/// same parse), else as bytes (the table reads what it needs with its own scan). A body that
/// does not parse goes as bytes: the table answers why.
fn with_prepared(app: &App, body: &[u8], then: &mut dyn FnMut(&Prepared<'_, '_, '_>)) {
    if app.router.as_deref().is_some_and(|r| r.hash_path().is_some()) {
        let started = std::time::Instant::now();
        let depth = app.registry.sources().limits.max_input_depth;
        let parsed = crate::input::with_parsed(body, depth, |root| {
            then(&Prepared::parsed(body, &root, depth, started.elapsed().as_nanos() as u64));
        });
        if parsed.is_ok() {
            return;
        }
    }
    then(&Prepared::bytes(body));
}

/// The route step of a decision request (SPEC §7): without a router, decide here.
fn routed<'n>(
    app: &App,
    tables: &Tables,
    name: Option<&'n str>,
    endpoint: Endpoint,
    input: &Prepared<'_, '_, '_>,
    req: &Request<'_>,
    rsp: &mut Response,
) -> Step<'n> {
    let Some(router) = app.router.as_deref() else { return Step::Here(name.map(Cow::Borrowed), None) };
    // On /authz the caller's `Authorization` is part of the input; clef's token is X-Clef-Token.
    let authz_token =
        req.header("x-clef-token").filter(|_| endpoint == Endpoint::Decide && req.path.contains("/authz/"));
    let bearer = authz_token.map(|t| [b"Bearer ".as_slice(), t.trim_ascii()].concat());
    let authorization = if authz_token.is_some() { bearer.as_deref() } else { req.header("authorization") };
    let out = Outgoing {
        table: "",
        endpoint,
        body: input.body(),
        explain: req.query_flag("explain"),
        authorization,
        traceparent: req.header("traceparent"),
    };
    let forwarded = req.header("x-clef-forwarded").is_some();
    let local_load = app.load();
    let table = name.or(app.default_table.as_deref());
    match pipeline::route(Some(router), tables, table, local_load, forwarded, input, out) {
        Routed::Local => Step::Here(name.map(Cow::Borrowed), None),
        Routed::Fallback(table) => Step::Here(Some(Cow::Owned(table)), Some("router_fallback")),
        Routed::Forwarded(answer) => Step::Forwarded(answer),
        Routed::NoHealthy(message) => {
            rsp.fail(ErrorCode::NoHealthyInstance, &message);
            Step::Answered
        }
        Routed::UpstreamFailed(message) => {
            rsp.fail(ErrorCode::UpstreamFailed, &message);
            Step::Answered
        }
    }
}

/// `/authz` answered by another instance: its decision's action answered as a local one is,
/// with the rule and snapshot headers; its 4xx errors as they are.
fn authz_forwarded(answer: Answer, proxy: Proxy, rsp: &mut Response) {
    if answer.status != 200 {
        return answer.write(rsp);
    }
    let (action, rule, snapshot) = crate::router::forward::authz_parts(&answer.body);
    answer.write(rsp);
    answer_verdict(&Verdict::of_action(&action), proxy, rsp);
    if let Some(rule) = rule {
        rsp.add_header("X-Clef-Rule", header_safe(&rule));
    }
    if let Some(id) = snapshot {
        rsp.add_header("X-Clef-Snapshot", header_safe(&id));
    }
}

/// `GET /snapshots/{id}` (admin): a recent snapshot from the recorder's memory.
fn snapshot(app: &App, id: &str, rsp: &mut Response) {
    let Some(parsed) = crate::snapshot::SnapshotId::parse(id) else {
        return rsp.fail(
            ErrorCode::InvalidSnapshotId,
            &format!(
                "\"{}\" is not a snapshot id: ids are UUIDs such as 01a230b8-dbd5-7137-bffb-a4cb18ebdb45",
                id.escape_debug()
            ),
        );
    };
    let Some(recorder) = &app.stages.recorder else {
        return rsp
            .fail(ErrorCode::UnknownSnapshot, "snapshots are off (snapshots.enabled: false); nothing is recorded");
    };
    match recorder.lookup(parsed) {
        Some(line) => rsp.body.push_str(line.trim_end()),
        None => rsp.fail(ErrorCode::UnknownSnapshot, &format!(
                "no snapshot {id} in memory: it is older than the recent window, was sampled out or dropped, or never made; \
                 older snapshots are in the segment files of {}",
                recorder.dir().display()
            ),
        ),
    }
}

/// The input `/authz` decides on, as JSON. Proxies that cannot ask with the original method
/// or path send them in the headers forward-auth setups use (nginx's `X-Original-*`, Traefik's
/// and Caddy's `X-Forwarded-*`); they stand in for what the `/authz` request itself carries.
fn authz_input(asked: &str, req: &Request<'_>) -> String {
    let first_header = |names: [&str; 2]| {
        names.iter().find_map(|n| req.header(n)).and_then(|v| std::str::from_utf8(v).ok()).map(str::trim)
    };
    let method = first_header(["x-original-method", "x-forwarded-method"]).unwrap_or(req.method);
    let asked = match first_header(["x-original-uri", "x-forwarded-uri"]) {
        Some(uri) if asked == "/" && uri.starts_with('/') => uri,
        _ => asked,
    };
    let (path, query) = match asked.split_once('?') {
        // nginx's `$request_uri` carries the query inside the path
        Some((p, q)) => (p, q),
        None => (asked, req.query),
    };
    // names in lower case, in the order they first came; a repeated header is one value,
    // comma-separated (RFC 9110 §5.3)
    let mut headers: Vec<(String, String)> = Vec::with_capacity(req.headers.len());
    for h in req.headers {
        let name = h.name.to_ascii_lowercase();
        let value = String::from_utf8_lossy(h.value);
        match headers.iter_mut().find(|(n, _)| *n == name) {
            Some((_, first)) => {
                first.push_str(", ");
                first.push_str(&value);
            }
            None => headers.push((name, value.into_owned())),
        }
    }
    // written here rather than built as a JSON value: the text is the input snapshots record and
    // the router forwards, and the table's scan reads it once, as it reads a /decide body
    let mut input =
        String::with_capacity(64 + asked.len() + headers.iter().map(|(n, v)| n.len() + v.len() + 6).sum::<usize>());
    input.push_str("{\"method\":");
    write_json_string(method, &mut input);
    input.push_str(",\"path\":");
    write_json_string(path, &mut input);
    input.push_str(",\"query\":");
    write_json_string(query, &mut input);
    input.push_str(",\"headers\":");
    write_string_map(&headers, &mut input);
    input.push('}');
    input
}

/// One thing that makes `/health` `degraded`: what it concerns (a table's name) and what is
/// wrong, said twice: for the decision port, naming no path and quoting nothing of a file (a
/// table may be a link to any file the service can read), and in full for the admin listener.
struct HealthProblem {
    subject: String,
    public: String,
    detail: String,
}

/// What makes `/health` `degraded`: tables whose latest file failed to load, and a default table
/// that is not being served (`POST /decide` would answer 404 or 503).
fn health_problems(app: &App, tables: &Tables) -> Vec<HealthProblem> {
    let mut problems: Vec<HealthProblem> = tables
        .errors()
        .map(|(name, entry, e)| HealthProblem {
            subject: name.to_string(),
            public: e.public(entry.current.is_some()),
            detail: e.summary.clone(),
        })
        .collect();
    if let Some(default) = app.default_table.as_deref() {
        let serving = tables.get(default).is_some_and(|entry| entry.current.is_some());
        let reported = problems.iter().any(|p| p.subject == default);
        if !serving && !reported {
            let message = format!(
                "the default table \"{default}\" (model.default_table) is not loaded: no table file of that name in \
                 the tables folder; POST /decide answers 404 until one appears"
            );
            problems.push(HealthProblem { subject: default.to_string(), public: message.clone(), detail: message });
        }
    }
    problems
}

/// `GET /health`; on the decision port, problems are named without paths or file content.
fn health(app: &App, admin: bool, rsp: &mut Response) {
    let tables = app.registry.served();
    let draining = app.is_draining();
    let problems = health_problems(app, &tables);
    let others = OtherHealth::of(app, !problems.is_empty());
    let degraded = !others.degraded.is_empty();
    let status = if draining {
        "draining"
    } else if degraded {
        "degraded"
    } else {
        "ok"
    };
    if draining {
        rsp.status = 503;
    }
    let b = &mut rsp.body;
    b.push_str("{\"status\":\"");
    b.push_str(status);
    let _ = write!(b, "\",\"uptime_seconds\":{}", app.started.elapsed().as_secs());
    b.push_str(",\"version\":");
    write_json_string(env!("CARGO_PKG_VERSION"), b);
    b.push_str(",\"tables\":{");
    let mut first = true;
    for (name, entry) in &tables.entries {
        if let Some(t) = &entry.current {
            if !first {
                b.push(',');
            }
            first = false;
            write_json_string(name, b);
            b.push(':');
            write_json_string(&t.version, b);
        }
    }
    let _ = write!(b, "}},\"inflight\":{},\"load\":", app.inflight());
    write_json_float(app.load(), b);
    if !problems.is_empty() {
        let said: Vec<(String, String)> =
            problems.into_iter().map(|p| (p.subject, if admin { p.detail } else { p.public })).collect();
        b.push_str(",\"errors\":");
        write_string_map(&said, b);
    }
    if !tables.removed.is_empty() {
        // tables whose file went away, and when they stopped serving
        b.push_str(",\"removed\":{");
        for (i, (name, at)) in tables.removed.iter().enumerate() {
            if i > 0 {
                b.push(',');
            }
            write_json_string(name, b);
            b.push_str(":\"");
            write_timestamp(*at, b);
            b.push('"');
        }
        b.push('}');
    }
    others.write(b);
    b.push('}');
}

/// What `/health` says besides the tables: which parts are degraded, how snapshots are being
/// stored, and the state files that failed their checks. Nothing in it names a path (the
/// decision listener serves it too).
struct OtherHealth {
    /// `tables`, `snapshots`, then the subsystems whose state files failed
    degraded: Vec<&'static str>,
    /// the recorder's health and figures, once it has failed at all
    snapshots: Option<(crate::snapshot::writer::Health, crate::snapshot::Stats)>,
    /// subsystem → item → why its state file was not used, and what was
    state: std::collections::BTreeMap<&'static str, std::collections::BTreeMap<String, String>>,
}

impl OtherHealth {
    fn of(app: &App, tables_failing: bool) -> OtherHealth {
        let mut degraded = Vec::new();
        if tables_failing {
            degraded.push("tables");
        }
        let snapshots =
            app.stages.recorder.as_ref().map(|r| (r.health(), r.stats())).filter(|(h, _)| h.last_error.is_some());
        if snapshots.as_ref().is_some_and(|(h, _)| h.failing_since.is_some()) {
            degraded.push("snapshots");
        }
        let state = crate::state_file::problems();
        degraded.extend(state.keys().copied());
        OtherHealth { degraded, snapshots, state }
    }

    /// `,"degraded":[…]`, `,"snapshots":{…}` and a key per subsystem with state problems.
    fn write(&self, b: &mut String) {
        if !self.degraded.is_empty() {
            b.push_str(",\"degraded\":[");
            for (i, d) in self.degraded.iter().enumerate() {
                if i > 0 {
                    b.push(',');
                }
                write_json_string(d, b);
            }
            b.push(']');
        }
        if let Some((h, stats)) = &self.snapshots {
            let _ = write!(b, ",\"snapshots\":{{\"failing\":{}", h.failing_since.is_some());
            b.push_str(",\"since\":");
            match h.failing_since {
                Some(t) => {
                    b.push('"');
                    write_timestamp(t, b);
                    b.push('"');
                }
                None => b.push_str("null"),
            }
            if let Some((at, message)) = &h.last_error {
                b.push_str(",\"last_error\":");
                write_json_string(message, b);
                b.push_str(",\"last_error_at\":\"");
                write_timestamp(*at, b);
                b.push('"');
            }
            let _ = write!(
                b,
                ",\"write_errors\":{},\"lost\":{},\"retry_bytes\":{}}}",
                stats.write_errors, stats.lost, stats.retry_bytes
            );
        }
        for (subsystem, items) in &self.state {
            b.push(',');
            write_json_string(subsystem, b);
            b.push(':');
            let pairs: Vec<(String, String)> = items.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            write_string_map(&pairs, b);
        }
    }
}

/// `GET /metrics`: encoded table by table into the answer as the client reads it.
fn metrics_text<'a>(app: &'a App, req: &Request<'_>, rsp: &mut Response<'a>) {
    let tables: Arc<Tables> = arc_swap::Guard::into_inner(app.registry.served());
    // each subsystem that is on makes its own families (SPEC §10); the scrape composes them
    let mut subsystems: metrics::Subsystems = Vec::new();
    if let Some(recorder) = &app.stages.recorder {
        subsystems.push(Box::new(recorder.collector()));
    }
    if let Some(tuner) = &app.stages.tuner {
        subsystems.push(Box::new(tuner.collector()));
    }
    subsystems.push(Box::new(crate::state_file::collector()));
    if let Some(shadows) = app.stages.shadow_collector() {
        subsystems.push(Box::new(shadows));
    }
    if let Some(router) = &app.router {
        subsystems.push(Box::new(router.collector()));
    }
    let format = metrics::Format::from_accept(req.header("accept").and_then(|a| std::str::from_utf8(a).ok()));
    rsp.content_type = format.content_type();
    rsp.stream(move |_, out| {
        let gauges = Gauges {
            uptime_seconds: app.started.elapsed().as_secs_f64(),
            inflight: app.inflight(),
            load: app.load(),
            open_connections: app.open_connections() as u64,
            request_memory: app.request_memory_held() as u64,
        };
        // an error is the client gone: nothing more to say to it
        let _ = metrics::write_format(out, format, tables, &app.stats, &gauges, subsystems);
    });
}

/// The registry's tables as a scrape reports them: every name (served or not: a file that
/// never loaded is the one most in need of a look), the served ones with their counters.
impl TableSource for Tables {
    fn each_table(&self, f: &mut dyn FnMut(TableView<'_>) -> std::fmt::Result) -> std::fmt::Result {
        for (name, entry) in &self.entries {
            if let Some(t) = &entry.current {
                f(TableView { name, version: &t.version, kind: t.kind.name(), stats: &entry.stats })?;
            }
        }
        Ok(())
    }

    fn each_load(&self, f: &mut dyn FnMut(TableLoad<'_>) -> std::fmt::Result) -> std::fmt::Result {
        for (name, entry) in &self.entries {
            f(TableLoad { name, failing: entry.error.is_some(), failures: entry.load_failures })?;
        }
        Ok(())
    }
}

/// `,"kind":…,"version":…,"file_version":…,"rule_count":…,"loaded_at":…` of a loaded table:
/// the served version (what its decisions say) and its file's (they differ while promoted
/// parameter values serve, SPEC §9).
fn write_table_summary(t: &Table, b: &mut String) {
    let _ = write!(
        b,
        ",\"kind\":\"{}\",\"version\":\"{}\",\"file_version\":\"{}\",\"rule_count\":{}",
        t.kind.name(),
        t.version,
        t.file_version,
        t.engine.outcome_count()
    );
    b.push_str(",\"loaded_at\":\"");
    write_timestamp(t.loaded_at, b);
    b.push('"');
}

/// `GET /tables`; load errors in full (paths, lines of the file) only on the admin listener.
fn tables(app: &App, admin: bool, rsp: &mut Response) {
    let tables = app.registry.served();
    let b = &mut rsp.body;
    b.push_str("{\"tables\":[");
    for (i, (name, entry)) in tables.entries.iter().enumerate() {
        if i > 0 {
            b.push(',');
        }
        b.push_str("{\"name\":");
        write_json_string(name, b);
        match &entry.current {
            Some(t) => {
                write_table_summary(t, b);
                b.push_str(",\"default\":");
                b.push_str(if app.default_table.as_deref() == Some(name.as_str()) { "true" } else { "false" });
            }
            None => b.push_str(",\"version\":null"),
        }
        write_table_error(entry, admin, b);
        b.push('}');
    }
    b.push_str("]}");
}

/// `GET /tables/{name}`; file paths (which tell where the box keeps its files) only on the
/// admin listener.
fn table(app: &App, name: &str, admin: bool, rsp: &mut Response) {
    let tables = app.registry.served();
    let Some(entry) = tables.get(name) else {
        return refuse(&pipeline::unknown_table(&tables, name), rsp);
    };
    let b = &mut rsp.body;
    b.push_str("{\"name\":");
    write_json_string(name, b);
    if admin {
        b.push_str(",\"files\":[");
        for (i, f) in entry.files.iter().enumerate() {
            if i > 0 {
                b.push(',');
            }
            write_json_string(&f.display().to_string(), b);
        }
        b.push(']');
    }
    write_table_error(entry, admin, b);
    let versions: Vec<&str> = entry.previous.iter().map(|t| t.version.as_str()).collect();
    b.push_str(",\"previous_versions\":[");
    for (i, v) in versions.iter().rev().enumerate() {
        if i > 0 {
            b.push(',');
        }
        write_json_string(v, b);
    }
    b.push(']');
    admin::write_switch_state(entry, b);
    if let Some(t) = &entry.current {
        write_table_summary(t, b);
        if let Some(d) = &t.description {
            b.push_str(",\"description\":");
            write_json_string(d, b);
        }
        b.push_str(",\"default_action\":");
        b.push_str(t.engine.default_json());
        if let Some(params) = &t.params {
            b.push_str(",\"params\":");
            b.push_str(&params.to_string());
        }
        if let crate::table::Engine::Flash(flash) = &*t.engine {
            // Instead of rules: the dimensions with their buckets, the actions, the cells.
            let from = if t.kind == crate::table::TableKind::FlashCompiled { "cfb" } else { "source" };
            let _ = write!(b, ",\"served_from\":\"{from}\"");
            flash.write_description(b);
            b.push('}');
            return;
        }
        b.push_str(",\"rules\":[");
        for (i, r) in t.engine.rules().iter().enumerate() {
            if i > 0 {
                b.push(',');
            }
            b.push_str("{\"id\":");
            b.push_str(&r.id_json);
            let _ = write!(b, ",\"enabled\":{}", t.outcome_enabled(i));
            if t.rule_switched_off(i) {
                b.push_str(",\"switched_off\":true");
            }
            b.push_str(",\"condition\":");
            write_json_string(&r.condition, b);
            b.push_str(",\"action\":");
            b.push_str(&r.action_json);
            if let Some(d) = &r.description {
                b.push_str(",\"description\":");
                write_json_string(d, b);
            }
            b.push('}');
        }
        b.push(']');
    }
    b.push('}');
}

/// `,"error":…` of a table whose latest file does not serve: in full on the admin listener.
fn write_table_error(entry: &Entry, admin: bool, b: &mut String) {
    if let Some(e) = &entry.error {
        b.push_str(",\"error\":");
        let said = if admin { e.summary.clone() } else { e.public(entry.current.is_some()) };
        write_json_string(&said, b);
    }
}

/// Writes what a reload did as JSON.
fn write_outcomes(reloaded: &Reloaded, b: &mut String) {
    b.push_str("{\"tables\":[");
    for (i, (name, outcome)) in reloaded.outcomes.iter().enumerate() {
        if i > 0 {
            b.push(',');
        }
        b.push_str("{\"table\":");
        write_json_string(name, b);
        match outcome {
            Outcome::Loaded { version, .. } => {
                let _ = write!(b, ",\"result\":\"loaded\",\"version\":\"{version}\"");
            }
            Outcome::Unchanged { version, .. } => {
                let _ = write!(b, ",\"result\":\"unchanged\",\"version\":\"{version}\"");
            }
            Outcome::Pinned { version, file_version } => {
                let _ =
                    write!(b, ",\"result\":\"pinned\",\"version\":\"{version}\",\"file_version\":\"{file_version}\"");
            }
            Outcome::Failed { error, serving, .. } => {
                b.push_str(",\"result\":\"failed\",\"error\":");
                write_json_string(error, b);
                b.push_str(",\"serving\":");
                match serving {
                    Some(v) => write_json_string(v, b),
                    None => b.push_str("null"),
                }
            }
            Outcome::Missing { serving } => {
                let _ = write!(b, ",\"result\":\"missing\",\"serving\":\"{serving}\"");
            }
            Outcome::Removed => b.push_str(",\"result\":\"removed\""),
        }
        admin::write_reload_notes(reloaded, name, b);
        b.push('}');
    }
    b.push(']');
    admin::write_persist_error(reloaded.persist_error.as_ref(), b);
    b.push('}');
}

fn reload(app: &App, rsp: &mut Response) {
    match app.reload("POST /reload") {
        Ok(reloaded) => write_outcomes(&reloaded, &mut rsp.body),
        Err(e) => admin::writer_failed(e, rsp),
    }
}

fn rollback(app: &App, name: &str, rsp: &mut Response) {
    match app.registry.rollback(name) {
        Ok(rolled) => {
            let b = &mut rsp.body;
            b.push_str("{\"table\":");
            write_json_string(name, b);
            let _ = write!(b, ",\"version\":\"{}\",\"pinned\":true", rolled.table.version);
            admin::write_persisted(app, rolled.persist_error.as_ref(), b);
            b.push('}');
        }
        Err(RollbackError::UnknownTable) => rsp.fail(ErrorCode::UnknownTable, &format!("no table named \"{name}\"")),
        Err(RollbackError::NoPreviousVersion) => rsp.fail(
            ErrorCode::NoPreviousVersion,
            &format!("table \"{name}\" has no earlier good version kept in memory"),
        ),
        Err(RollbackError::Writer(e)) => admin::writer_failed(e, rsp),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::indexing_slicing, clippy::panic)]
    use super::*;

    /// A path of the row with each `{…}` filled in, as a client would send it.
    fn example_path(row: &RouteRow) -> String {
        row.path.replace("{table}", "t1").replace("{rule}", "r1").replace("{id}", "abc").replace("{path}", "x")
    }

    #[test]
    fn every_row_path_routes_to_its_endpoint() {
        for row in MAIN_ROUTES.iter().chain(ADMIN_ROUTES) {
            let path = example_path(row);
            assert_eq!(route(&path).kind(), Some(row.kind), "{} {}", row.method, row.path);
            assert_eq!(route(&format!("/v1{path}")).kind(), Some(row.kind), "/v1{path}");
        }
    }

    #[test]
    fn admin_endpoints_are_only_on_the_admin_listener_and_behind_its_token() {
        let admin_only = [
            E::Reload,
            E::Rollback,
            E::RuleEnabled,
            E::Snapshot,
            E::Snapshots,
            E::RouterStatus,
            E::Failover,
            E::FailoverClear,
            E::Promote,
            E::Page,
            E::Activity,
        ];
        for kind in admin_only {
            assert!(MAIN_ROUTES.iter().all(|row| row.kind != kind), "{kind:?} is on the main listener");
            assert!(ADMIN_ROUTES.iter().any(|row| row.kind == kind), "{kind:?} is on no listener");
        }
        // all but the status page, which holds no data and asks for the token itself
        assert!(ADMIN_ROUTES.iter().all(|row| row.token == Token::Admin || row.kind == E::Page));
        assert!(MAIN_ROUTES.iter().all(|row| row.token != Token::Admin));
        // what the main listener serves without the decision token: health and metrics only
        let open: Vec<_> = MAIN_ROUTES.iter().filter(|row| row.token == Token::None).map(|row| row.kind).collect();
        assert_eq!(open, [E::Health, E::Metrics]);
    }

    #[test]
    fn decisions_are_only_on_the_main_listener() {
        for kind in [E::Decide, E::Batch, E::Authz, E::Feedback] {
            assert!(ADMIN_ROUTES.iter().all(|row| row.kind != kind), "{kind:?} is on the admin listener");
            assert!(MAIN_ROUTES.iter().any(|row| row.kind == kind));
        }
    }

    #[test]
    fn each_endpoint_answers_one_method_on_every_listener() {
        for table in [MAIN_ROUTES, ADMIN_ROUTES] {
            for row in table {
                for other in table.iter().filter(|o| o.kind == row.kind) {
                    assert_eq!(row.method, other.method, "{:?}", row.kind);
                }
            }
        }
        let get = ADMIN_ROUTES.iter().find(|row| row.kind == E::Health).map(|row| row.allows("HEAD"));
        assert_eq!(get, Some(true));
    }

    #[test]
    fn unknown_paths_name_no_endpoint() {
        for path in ["/decide/a/b/c", "/nope", "/tuning", "/router/failover/a/b"] {
            assert_eq!(route(path).kind(), None, "{path}");
        }
    }
}
