//! Forwarding a request to the instance the router chose, with one retry.
//!
//! The body is sent as received (for `/authz`, the input the router built from the request,
//! to the peer's `POST /decide/{table}`), with `X-Clef-Forwarded` so that the peer decides it
//! itself, and the caller's `Authorization` and `traceparent`. A 2xx or 4xx answer is the
//! answer (a 4xx is the peer's verdict on the request, passed through and not retried); a 5xx,
//! a broken connection, a timeout or an answer beyond the client's limits is a failure, which
//! counts towards the instance's ejection and moves on to the retry instance (then to `local`
//! when it serves the table). A decision's `instance` is rewritten to the id our configuration
//! gives the peer (which itself says `local`).
//!
//! A batch is answered one line per input, in input order (SPEC §6), whoever decides it: a 2xx
//! answer with any other number of lines (an older or foreign server answering one object) is a
//! failure like a 5xx, and a 4xx refusal of the whole batch becomes that error on every input's
//! line, with its line number, as `POST /decide/{table}` to that peer would answer each input.
//! Only a body that is no batch at all (an array that is not valid JSON) gets the peer's error
//! as it is, the one answer any clef gives such a body.

use std::borrow::Cow;
use std::io::Write;
use std::time::{Duration, Instant};

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::client::{self, ClientError};
use super::{Plan, Router, Target};
use crate::expr::json::write_json_string;

/// The largest answer body accepted from a peer (a batch answer included).
pub const MAX_ANSWER_BYTES: usize = 8 << 20;

/// Which endpoint a forwarded request goes to on the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /decide/{table}` (also what `/authz` forwards, with the input it built)
    Decide,
    /// `POST /decide/{table}/batch`
    Batch,
}

/// A request to forward.
#[derive(Debug, Clone, Copy)]
pub struct Outgoing<'a> {
    /// the table
    pub table: &'a str,
    /// where on the peer
    pub endpoint: Endpoint,
    /// the body, as received
    pub body: &'a [u8],
    /// `?explain=true`
    pub explain: bool,
    /// the caller's `Authorization` header, for a peer with `server.token_file`
    pub authorization: Option<&'a [u8]>,
    /// the caller's `traceparent` header
    pub traceparent: Option<&'a [u8]>,
}

/// A peer's answer, ready to send to our caller.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// its status
    pub status: u16,
    /// `application/json` or `application/x-ndjson`
    pub content_type: &'static str,
    /// the body, `instance` rewritten
    pub body: String,
    /// the instance that decided
    pub instance: u32,
}

impl Answer {
    /// Writes the answer as our response.
    pub fn write(self, rsp: &mut crate::http1::Response) {
        rsp.status = self.status;
        rsp.content_type = self.content_type;
        rsp.body = self.body;
    }
}

/// How forwarding ended without an answer.
#[derive(Debug)]
pub enum Unanswered {
    /// the instances tried failed, and local serves the table: decide here
    Local,
    /// the instances tried failed, each for its reason
    Failed(FailedForwards),
}

/// The forwards of one request that failed: each instance's id and why.
#[derive(Debug, Default)]
pub struct FailedForwards(pub Vec<(String, ForwardError)>);

impl std::fmt::Display for FailedForwards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            return f.write_str("nothing to forward to");
        }
        for (i, (instance, why)) in self.0.iter().enumerate() {
            let sep = if i == 0 { "" } else { "; " };
            write!(f, "{sep}{instance}: {why}")?;
        }
        Ok(())
    }
}

/// Why one forward got no answer clef takes from a peer.
#[derive(Debug)]
pub enum ForwardError {
    /// the exchange failed: no connection, no answer in time, a broken or invalid answer
    Exchange(ClientError),
    /// the peer answered a server error
    Status(u16),
    /// the answer's body is not UTF-8
    NotUtf8,
    /// the answer to one input is not a decision
    NotADecision,
    /// a decision came back for a body that is no batch
    DecisionToNoBatch,
    /// a line of a batch answer is not a JSON object
    BatchLineNotAnObject,
    /// a batch answer with another number of lines than the batch had inputs
    BatchLines {
        /// lines answered
        lines: usize,
        /// inputs sent
        inputs: usize,
    },
    /// a refusal of a whole batch whose body is not a clef error
    NotAnError {
        /// its status
        status: u16,
    },
}

impl std::fmt::Display for ForwardError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ForwardError::Exchange(e) => e.fmt(f),
            ForwardError::Status(status) => write!(f, "answered {status}"),
            ForwardError::NotUtf8 => f.write_str("answered a body that is not UTF-8"),
            ForwardError::NotADecision => f.write_str("answered something that is not a decision"),
            ForwardError::DecisionToNoBatch => f.write_str("answered a decision to a body that is no batch"),
            ForwardError::BatchLineNotAnObject => f.write_str("answered a batch line that is not a JSON object"),
            ForwardError::BatchLines { lines, inputs } => {
                write!(f, "answered {lines} lines to a batch of {inputs} inputs")
            }
            ForwardError::NotAnError { status } => write!(f, "answered {status} with a body that is not a clef error"),
        }
    }
}

/// Forwards `out` as `plan` (a [`Plan::Forward`]) says: the first instance, then the retry
/// instance, then local when it serves the table.
pub fn run(router: &Router, plan: &Plan, out: &Outgoing<'_>) -> Result<Answer, Unanswered> {
    let Plan::Forward { first, retry, local_serves } = plan else {
        return Err(Unanswered::Failed(FailedForwards::default()));
    };
    let request = encode(router, out);
    let shape = match out.endpoint {
        Endpoint::Decide => Shape::Decision,
        Endpoint::Batch => Shape::Batch(
            crate::input::batch::BatchInputs::check(out.body)
                .ok()
                .map(|mut inputs| std::iter::from_fn(|| inputs.next(out.body)).map(|(line, _)| line).collect()),
        ),
    };
    let mut why = FailedForwards::default();
    let mut target = Some(*first);
    let mut attempt = 0;
    while let Some(t) = target {
        match attempt_once(router, t, attempt > 0, &request, &shape) {
            Ok(answer) => return Ok(answer),
            Err(e) => why.0.push((router.instance_id(t.index).to_string(), e)),
        }
        attempt += 1;
        // looked up now: the coroutine may run on another worker, with a newer table
        target = retry.filter(|_| attempt == 1).and_then(|r| router.target(r));
    }
    if *local_serves {
        return Err(Unanswered::Local);
    }
    Err(Unanswered::Failed(why))
}

/// One forward to `target`, counted in its figures.
fn attempt_once(
    router: &Router,
    target: Target,
    retry: bool,
    request: &[u8],
    shape: &Shape,
) -> Result<Answer, ForwardError> {
    let guard = router.begin_forward(target, retry);
    let deadline = Instant::now() + Duration::from_millis(router.config.forward_timeout_ms);
    let key = (router.uid << 32) | u64::from(target.index);
    let result = client::exchange_pooled(key, target.addr, request, deadline, MAX_ANSWER_BYTES, |reply| {
        accept(router, target.index, reply, shape)
    });
    match result.map_err(ForwardError::Exchange).and_then(|answer| answer) {
        Ok(answer) => {
            guard.succeeded();
            Ok(answer)
        }
        Err(e) => {
            guard.failed();
            Err(e)
        }
    }
}

/// The request bytes for the peer.
fn encode(router: &Router, out: &Outgoing<'_>) -> Vec<u8> {
    let mut r = Vec::with_capacity(256 + out.body.len());
    r.extend_from_slice(b"POST /decide/");
    for part in percent_encoding::utf8_percent_encode(out.table, percent_encoding::NON_ALPHANUMERIC) {
        r.extend_from_slice(part.as_bytes());
    }
    if out.endpoint == Endpoint::Batch {
        r.extend_from_slice(b"/batch");
    }
    if out.explain {
        r.extend_from_slice(b"?explain=true");
    }
    r.extend_from_slice(b" HTTP/1.1\r\nHost: clef\r\nContent-Type: application/json\r\nX-Clef-Forwarded: ");
    r.extend_from_slice(router.our_name().as_bytes());
    for (name, value) in [("Authorization", out.authorization), ("traceparent", out.traceparent)] {
        if let Some(v) = value.filter(|v| !v.contains(&b'\r') && !v.contains(&b'\n')) {
            r.extend_from_slice(b"\r\n");
            r.extend_from_slice(name.as_bytes());
            r.extend_from_slice(b": ");
            r.extend_from_slice(v);
        }
    }
    r.extend_from_slice(b"\r\nContent-Length: ");
    // writing into a Vec cannot fail
    let _ = write!(r, "{}", out.body.len());
    r.extend_from_slice(b"\r\n\r\n");
    r.extend_from_slice(out.body);
    r
}

/// What a peer's answer must be to be ours.
enum Shape {
    /// a decision (or an error) for one input
    Decision,
    /// one NDJSON line per input: the line numbers of the inputs (`None`: the body is no batch
    /// any clef reads, so the peer's answer is its error for the whole body)
    Batch(Option<Vec<usize>>),
}

/// Turns a peer's answer into ours: 2xx and 4xx are answers; anything else fails the attempt.
fn accept(router: &Router, index: u32, x: client::Reply<'_>, shape: &Shape) -> Result<Answer, ForwardError> {
    if x.status >= 500 {
        return Err(ForwardError::Status(x.status));
    }
    let body = std::str::from_utf8(x.body).map_err(|_| ForwardError::NotUtf8)?;
    let id = router.instance_id(index);
    let refused = x.status >= 300;
    let (status, body, content_type) = match shape {
        // passed through as the peer wrote it
        Shape::Decision | Shape::Batch(None) if refused => (x.status, body.to_string(), "application/json"),
        Shape::Decision => (x.status, rename_instance(body, id).ok_or(ForwardError::NotADecision)?, "application/json"),
        Shape::Batch(None) => return Err(ForwardError::DecisionToNoBatch),
        Shape::Batch(Some(inputs)) if refused => {
            (200, refusal_per_line(x.status, body, inputs)?, "application/x-ndjson")
        }
        Shape::Batch(Some(inputs)) => {
            let mut out = String::with_capacity(body.len() + 16 * inputs.len());
            let mut lines = 0;
            for line in body.lines().filter(|l| !l.trim().is_empty()) {
                out.push_str(&rename_instance(line, id).ok_or(ForwardError::BatchLineNotAnObject)?);
                out.push('\n');
                lines += 1;
            }
            if lines != inputs.len() {
                return Err(ForwardError::BatchLines { lines, inputs: inputs.len() });
            }
            (x.status, out, "application/x-ndjson")
        }
    };
    Ok(Answer { status, content_type, body, instance: index })
}

/// A peer's refusal of a whole batch (`{"error": {"code", "message"}}`) as the error of each
/// input, on its line: `{"error": {…}, "line": N}`.
fn refusal_per_line(status: u16, body: &str, inputs: &[usize]) -> Result<String, ForwardError> {
    #[derive(serde::Deserialize)]
    struct Refusal {
        error: Error,
    }
    #[derive(serde::Deserialize)]
    struct Error {
        code: String,
        message: String,
    }
    let refusal: Refusal = serde_json::from_str(body).map_err(|_| ForwardError::NotAnError { status })?;
    let mut out = String::with_capacity(inputs.len() * (body.len() + 16));
    for &line in inputs {
        crate::render::write_line_error(&refusal.error.code, &refusal.error.message, line, &mut out);
        out.push('\n');
    }
    Ok(out)
}

/// `text` (a JSON object) with its top-level `instance` set to `id`; `None` when it is not an
/// object. Every other member is kept as written, in order.
pub fn rename_instance(text: &str, id: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len() + id.len());
    let mut de = serde_json::Deserializer::from_str(text);
    (&mut de).deserialize_map(Renamer { id, out: &mut out }).ok()?;
    de.end().ok()?;
    Some(out)
}

/// Writes the members of a JSON object to `out` as it reads them, values unparsed, with the
/// value of `instance` replaced by `id`.
struct Renamer<'o> {
    id: &'o str,
    out: &'o mut String,
}

impl<'de> Visitor<'de> for Renamer<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.out.push('{');
        let mut first = true;
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            if !first {
                self.out.push(',');
            }
            first = false;
            match &key {
                // borrowed from the text: it had no escapes, so it needs none
                Cow::Borrowed(k) => {
                    self.out.push('"');
                    self.out.push_str(k);
                    self.out.push('"');
                }
                Cow::Owned(k) => write_json_string(k, self.out),
            }
            self.out.push(':');
            let value = map.next_value::<&'de RawValue>()?;
            if key == "instance" {
                write_json_string(self.id, self.out);
            } else {
                self.out.push_str(value.get());
            }
        }
        self.out.push('}');
        Ok(())
    }
}

/// An object key, borrowed from the text when it has no escapes (serde's own `Cow<str>`
/// always copies).
struct Key<'de>(Cow<'de, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Key<'de>, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// Reads what a forwarded decision says, for `/authz`: its action (`null` when the body is
/// not a decision), its `rule_id` (as text) and its `snapshot_id`.
pub fn authz_parts(body: &str) -> (serde_json::Value, Option<String>, Option<String>) {
    let Ok(mut v) = serde_json::from_str::<serde_json::Value>(body) else {
        return (serde_json::Value::Null, None, None);
    };
    let rule = match v.get("rule_id") {
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(serde_json::Value::Null) | None => None,
        Some(other) => Some(other.to_string()),
    };
    let snapshot = v.get("snapshot_id").and_then(|s| s.as_str()).map(str::to_string);
    let action = v.get_mut("action").map(serde_json::Value::take).unwrap_or_default();
    (action, rule, snapshot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renames_only_the_top_level_instance() {
        let text = r#"{"rule_id":"r","action":{"instance":"x","a\"b":[1, 2]},"instance":"local","extra":null}"#;
        assert_eq!(
            rename_instance(text, "box-2").unwrap(),
            r#"{"rule_id":"r","action":{"instance":"x","a\"b":[1, 2]},"instance":"box-2","extra":null}"#
        );
        assert_eq!(rename_instance(r#"{"k\u0041":1}"#, "b").unwrap(), r#"{"kA":1}"#);
        assert!(rename_instance("[1]", "b").is_none());
        assert!(rename_instance("{\"a\":", "b").is_none());
    }

    #[test]
    fn reads_forwarded_authz_decisions() {
        assert_eq!(
            authz_parts(r#"{"rule_id":"ok","action":{"allow":true},"snapshot_id":"s"}"#),
            (serde_json::json!({"allow": true}), Some("ok".into()), Some("s".into()))
        );
        assert_eq!(authz_parts(r#"{"rule_id":7,"action":null}"#), (serde_json::Value::Null, Some("7".into()), None));
        assert_eq!(authz_parts("[1]"), (serde_json::Value::Null, None, None));
    }
}
