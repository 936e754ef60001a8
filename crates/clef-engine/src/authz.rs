//! What a decision's action asks forward-auth (`/authz/{table}`) to answer: whether the request
//! goes through, with which status and which headers.
//!
//! An action says it with three keys, all optional:
//! - `allow`: `true` lets the request through; anything else refuses it;
//! - `status`: the status of the answer, an integer: 200–299 with `"allow": true`, else 400–599
//!   (by default 200, or 403);
//! - `headers`: an object of header names and string values sent with the answer —
//!   `WWW-Authenticate` with a 401, `Retry-After` with a 429, or, on a request let through,
//!   headers the proxy copies to the upstream request.
//!
//! Every table is checked at load with [`check_action`] (its rules' actions and fallbacks, its
//! default, a flash table's actions), so a served action holds valid values. Only header values
//! that a rule set's template fills in at decision time, and an answer from another instance,
//! are checked when answering: a value is made header-safe, a header that is not valid left out.
//!
//! Proxies differ in the statuses they take from the auth answer. Envoy's `ext_authz` (HTTP
//! service), Traefik's and Caddy's forward auth pass a refusal's status, headers and body to the
//! client as they are. nginx's `auth_request` takes only 2xx, 401 and 403 (anything else becomes
//! its 500); asked with `X-Clef-Proxy: nginx` ([`Proxy::Nginx`]), a refusal is answered 401 when
//! the table asks for 401 and 403 otherwise, and `X-Clef-Status` carries the status asked for,
//! for nginx's `error_page` to answer with.

use std::borrow::Cow;

use serde_json::Value;

/// The status of a refusal whose action names none.
pub const DEFAULT_REFUSAL: u16 = 403;

/// Headers an action may not set: the answer's framing, and clef's own.
const RESERVED: &[&str] =
    &["content-length", "content-type", "transfer-encoding", "connection", "keep-alive", "upgrade", "te", "trailer"];

/// What forward-auth answers for one action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// whether the request goes through
    pub allowed: bool,
    /// the status the table asks for
    pub status: u16,
    /// the headers the table asks for, as (name as written, value)
    pub headers: Vec<(String, String)>,
}

/// Which statuses the proxy asking takes from the auth answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proxy {
    /// any (Envoy, Traefik, Caddy, a direct caller): the status the table asks for
    AsIs,
    /// nginx's `auth_request`: 2xx, 401 or 403, with the status asked for in `X-Clef-Status`
    Nginx,
}

impl Proxy {
    /// The proxy an `X-Clef-Proxy` header names (none: [`Proxy::AsIs`]); `Err` says what it may be.
    pub fn from_header(value: Option<&[u8]>) -> Result<Proxy, UnknownProxy> {
        match value.map(<[u8]>::trim_ascii) {
            None => Ok(Proxy::AsIs),
            Some(v) if v.eq_ignore_ascii_case(b"nginx") => Ok(Proxy::Nginx),
            Some(v) => Err(UnknownProxy(String::from_utf8_lossy(v).into_owned())),
        }
    }
}

/// An `X-Clef-Proxy` header naming a proxy clef does not know (the value, as sent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownProxy(pub String);

impl std::fmt::Display for UnknownProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "X-Clef-Proxy: \"{}\" is not a proxy clef knows; the one value is `nginx` (its auth_request takes only \
             2xx, 401 and 403); leave the header out to get the status the table asks for",
            self.0.escape_debug()
        )
    }
}

impl std::error::Error for UnknownProxy {}

impl Verdict {
    /// The verdict of an action (any JSON value: no object, or no `allow: true`, refuses).
    pub fn of_action(action: &Value) -> Verdict {
        let allowed = action.get("allow") == Some(&Value::Bool(true));
        let statuses = if allowed { 200..=299 } else { 400..=599 };
        let status = action
            .get("status")
            .and_then(Value::as_u64)
            .and_then(|s| u16::try_from(s).ok())
            .filter(|s| statuses.contains(s))
            .unwrap_or(if allowed { 200 } else { DEFAULT_REFUSAL });
        let headers = match action.get("headers") {
            Some(Value::Object(members)) => members
                .iter()
                .filter(|(name, _)| check_header_name(name).is_ok())
                .filter_map(|(name, value)| {
                    let text = match value {
                        Value::String(s) => Cow::Borrowed(s.as_str()),
                        // a rule set's template of one placeholder keeps its value's type
                        Value::Number(n) => Cow::Owned(n.to_string()),
                        _ => return None,
                    };
                    Some((name.clone(), header_safe(&text)))
                })
                .collect(),
            _ => Vec::new(),
        };
        Verdict { allowed, status, headers }
    }

    /// The status to answer `proxy` with.
    pub fn answer_status(&self, proxy: Proxy) -> u16 {
        match proxy {
            Proxy::AsIs => self.status,
            Proxy::Nginx if self.allowed || self.status == 401 => self.status,
            Proxy::Nginx => DEFAULT_REFUSAL,
        }
    }
}

/// Checks what an action asks of forward-auth (see the module comment): `Err` says what is
/// wrong, for a load error.
pub fn check_action(action: &Value) -> Result<(), ActionProblem> {
    let allowed = action.get("allow") == Some(&Value::Bool(true));
    match action.get("status") {
        None | Some(Value::Null) => {}
        Some(status) => {
            let (range, when) = if allowed { (200..=299, "with \"allow\": true") } else { (400..=599, "refusing") };
            let fits = status.as_u64().is_some_and(|s| range.contains(&s));
            if !fits {
                return Err(ActionProblem::Status {
                    status: crate::diagnostic::quote(&status.to_string()),
                    range: (*range.start(), *range.end()),
                    when,
                });
            }
        }
    }
    match action.get("headers") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(members)) => members.iter().try_for_each(|(name, value)| {
            check_header_name(name).map_err(ActionProblem::HeaderName)?;
            let Value::String(text) = value else {
                return Err(ActionProblem::HeaderNotText {
                    name: name.clone(),
                    value: crate::diagnostic::quote(&value.to_string()),
                });
            };
            match http::HeaderValue::from_str(text).ok().filter(|v| v.to_str().is_ok()) {
                Some(_) => Ok(()),
                None => Err(ActionProblem::HeaderNotPrintable { name: name.clone() }),
            }
        }),
        Some(other) => Err(ActionProblem::HeadersNotObject { value: crate::diagnostic::quote(&other.to_string()) }),
    }
}

/// What is wrong with what an action asks of forward-auth (a load error of its table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionProblem {
    /// `status` out of the range its `allow` permits
    Status {
        /// the value, quoted as diagnostics quote it
        status: String,
        /// the range allowed
        range: (u64, u64),
        /// `with "allow": true`, or `refusing`
        when: &'static str,
    },
    /// a header name that is not one, or that clef sets itself
    HeaderName(HeaderNameProblem),
    /// a header value that is not a string
    HeaderNotText {
        /// the header
        name: String,
        /// the value, quoted
        value: String,
    },
    /// a header value with characters a header cannot carry
    HeaderNotPrintable {
        /// the header
        name: String,
    },
    /// `headers` that is not an object
    HeadersNotObject {
        /// the value, quoted
        value: String,
    },
}

impl std::fmt::Display for ActionProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ActionProblem::Status { status, range: (low, high), when } => write!(
                f,
                "\"status\" {status} must be an integer from {low} to {high} {when}: it is the status /authz answers with"
            ),
            ActionProblem::HeaderName(problem) => write!(f, "\"headers\": {problem}"),
            ActionProblem::HeaderNotText { name, value } => write!(
                f,
                "\"headers\": the value of \"{}\" must be a string (\"30\", in quotes), not {value}",
                name.escape_debug()
            ),
            ActionProblem::HeaderNotPrintable { name } => write!(
                f,
                "\"headers\": the value of \"{}\" may hold only printable ASCII characters, spaces and tabs",
                name.escape_debug()
            ),
            ActionProblem::HeadersNotObject { value } => write!(
                f,
                "\"headers\" must be an object of header names and string values ({{\"Retry-After\": \"30\"}}), not {value}"
            ),
        }
    }
}

impl std::error::Error for ActionProblem {}

/// Why a name in an action's `headers` cannot be a header of the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderNameProblem {
    /// not an HTTP header name: the name
    NotAName(String),
    /// a header clef sets itself (`x-clef-…`, `content-length`, …): the name
    SetByClef(String),
}

impl std::fmt::Display for HeaderNameProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderNameProblem::NotAName(name) => {
                write!(f, "\"{}\" is not a header name (letters, digits and !#$%&'*+-.^_`|~)", name.escape_debug())
            }
            HeaderNameProblem::SetByClef(name) => {
                write!(f, "\"{name}\" is set by clef itself; an action may not set it")
            }
        }
    }
}

impl std::error::Error for HeaderNameProblem {}

/// Whether `name` can be a header of an action.
fn check_header_name(name: &str) -> Result<(), HeaderNameProblem> {
    if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Err(HeaderNameProblem::NotAName(name.to_string()));
    }
    let lower = name.to_ascii_lowercase();
    if RESERVED.contains(&lower.as_str()) || lower.starts_with("x-clef-") {
        return Err(HeaderNameProblem::SetByClef(name.to_string()));
    }
    Ok(())
}

/// `text` fit for a response header: printable ASCII and spaces, anything else as `?`.
pub fn header_safe(text: &str) -> String {
    text.chars().map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn verdicts_of_actions() {
        let v = Verdict::of_action(&json!({"allow": false, "status": 429, "headers": {"Retry-After": "30"}}));
        assert_eq!(v, Verdict { allowed: false, status: 429, headers: vec![("Retry-After".into(), "30".into())] });
        assert_eq!((v.answer_status(Proxy::AsIs), v.answer_status(Proxy::Nginx)), (429, 403));
        let v = Verdict::of_action(&json!({"status": 401, "headers": {"WWW-Authenticate": "Bearer"}}));
        assert_eq!((v.allowed, v.answer_status(Proxy::Nginx)), (false, 401));
        let v = Verdict::of_action(&json!({"allow": true, "headers": {"X-User": "ann", "X-N": 5}}));
        assert_eq!((v.allowed, v.status, v.headers.len()), (true, 200, 2));
        // what no table that loads holds (a peer's answer): left out, or the default
        let v = Verdict::of_action(&json!({"allow": "yes", "status": 200, "headers": {"bad name": "x", "Ok": "é\n"}}));
        assert_eq!(v, Verdict { allowed: false, status: 403, headers: vec![("Ok".into(), "??".into())] });
        assert_eq!(Verdict::of_action(&Value::Null).status, 403);
    }

    #[test]
    fn actions_are_checked() {
        for ok in [
            json!({}),
            json!({"allow": true, "status": 204, "headers": {"X-User": "{{ user }}"}}),
            json!({"status": 451, "headers": {"retry-after": "30", "WWW-Authenticate": "Bearer realm=\"api\""}}),
            json!({"status": null, "headers": null}),
        ] {
            assert_eq!(check_action(&ok), Ok(()), "{ok}");
        }
        for (bad, says) in [
            (json!({"status": 700}), "from 400 to 599 refusing"),
            (json!({"status": "429"}), "must be an integer"),
            (json!({"status": 200}), "from 400 to 599"),
            (json!({"allow": true, "status": 403}), "from 200 to 299 with \"allow\": true"),
            (json!({"headers": ["Retry-After"]}), "must be an object"),
            (json!({"headers": {"Retry After": "1"}}), "is not a header name"),
            (json!({"headers": {"Content-Length": "1"}}), "set by clef itself"),
            (json!({"headers": {"X-Clef-Rule": "1"}}), "set by clef itself"),
            (json!({"headers": {"Retry-After": 30}}), "must be a string"),
            (json!({"headers": {"X-A": "a\r\nSet-Cookie: x"}}), "printable ASCII"),
        ] {
            let problem = check_action(&bad).expect_err(&bad.to_string());
            assert!(problem.to_string().contains(says), "{bad}: {problem}");
        }
    }

    #[test]
    fn the_proxy_header() {
        assert_eq!(Proxy::from_header(None), Ok(Proxy::AsIs));
        assert_eq!(Proxy::from_header(Some(b" NGINX ")), Ok(Proxy::Nginx));
        assert!(Proxy::from_header(Some(b"envoy")).unwrap_err().to_string().contains("`nginx`"));
    }
}
