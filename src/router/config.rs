//! `router:` in `config.yaml` (SPEC §7).
//!
//! ```yaml
//! router:
//!   region: JP
//!   policy: score            # score | hash
//!   hash_key: user_id
//!   forward_timeout_ms: 50
//!   local_max_load: 0.8
//!   health: {interval_ms: 5000, timeout_ms: 200, unhealthy_after: 3, healthy_after: 2, ejection_ms: 30000}
//!   fallback_table: backup_rules
//!   instances:
//!     - {id: local}
//!     - {id: jev-jp-02, addr: 127.0.0.1:8081, region: JP}
//! ```
//!
//! Unknown keys and wrong types are found while the file is read (serde with
//! `deny_unknown_fields` on the positioned YAML reader); [`RouterConfig::problems`] finds the
//! values that cannot work (duplicate ids, a missing `local`, addresses that are not
//! `host:port`, zero or inverted timeouts), each named by its dotted key so that the config
//! review can point at its line and column. No `router:` section (no instances) means the
//! router is off and every decision is made here, as without a router.

use serde::{Deserialize, Serialize};

/// The id of the in-process engine among the instances.
pub const LOCAL_ID: &str = "local";
/// The most instances one router knows.
pub const MAX_INSTANCES: usize = 10_000;
/// The longest forward timeout and probe interval: a minute.
pub const MAX_MS: u64 = 60_000;

/// `router:` — which instance decides each request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RouterConfig {
    /// our region; `local`'s region, and the one that earns the region bonus
    pub region: String,
    /// how an instance is chosen: `score` (load, region, freshness) or `hash` (by `hash_key`)
    pub policy: Policy,
    /// for `policy: hash`: the input field (dotted path) whose value picks the instance
    pub hash_key: Option<String>,
    /// the most one forward (connect, send, answer) may take, in milliseconds
    pub forward_timeout_ms: u64,
    /// `local` decides whenever it serves the table and its load is below this
    pub local_max_load: f64,
    /// active health probing
    pub health: HealthConfig,
    /// the table that answers (locally, marked degraded) when no instance can
    pub fallback_table: Option<String>,
    /// every instance, `local` included
    pub instances: Vec<InstanceConfig>,
}

impl Default for RouterConfig {
    fn default() -> Self {
        RouterConfig {
            region: String::new(),
            policy: Policy::Score,
            hash_key: None,
            forward_timeout_ms: 50,
            local_max_load: 0.8,
            health: HealthConfig::default(),
            fallback_table: None,
            instances: Vec::new(),
        }
    }
}

/// How the router chooses among instances.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// local first, then the best score by power of two choices
    #[default]
    Score,
    /// the same `hash_key` value always lands on the same healthy instance
    Hash,
}

impl Policy {
    /// The name in `config.yaml`.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Score => "score",
            Policy::Hash => "hash",
        }
    }
}

/// `router.health:` — how remote instances are probed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthConfig {
    /// every remote instance's `/health` is asked this often
    pub interval_ms: u64,
    /// the most a probe (connect and answer) may take
    pub timeout_ms: u64,
    /// failures in a row (probes or forwards) that eject an instance
    pub unhealthy_after: u32,
    /// successful probes in a row that bring an ejected instance back
    pub healthy_after: u32,
    /// how long the first ejection lasts; the n-th lasts n times this, at most 10 times
    pub ejection_ms: u64,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig { interval_ms: 5000, timeout_ms: 200, unhealthy_after: 3, healthy_after: 2, ejection_ms: 30_000 }
    }
}

/// One entry of `router.instances`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceConfig {
    /// the name answers and metrics use (`local`: this process)
    pub id: String,
    /// `host:port` of its decision listener (none for `local`)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
    /// its region (for the region bonus); `local`'s is `router.region`
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
}

impl RouterConfig {
    /// Whether the router is on: some instance is configured.
    pub fn enabled(&self) -> bool {
        !self.instances.is_empty()
    }

    /// The values that cannot work, as (dotted key under `router`, message). `given`: whether
    /// the file (or the environment) has a `router:` section at all; a section that names no
    /// instances is then an error rather than "router off".
    pub fn problems(&self, given: bool) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut push = |key: String, message: String| out.push((key, message));
        if !given && self.instances.is_empty() {
            return Vec::new();
        }
        if self.instances.len() > MAX_INSTANCES {
            push(
                "instances".into(),
                format!("{} instances, more than {MAX_INSTANCES}: split them among routers", self.instances.len()),
            );
        }
        let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for (i, instance) in self.instances.iter().enumerate() {
            let at = |field: &str| format!("instances.{i}.{field}");
            let id = instance.id.as_str();
            if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)) {
                push(
                    at("id"),
                    format!(
                        "`{}` is not an instance id: write 1 to 64 letters, digits, `.`, `_` or `-` (it names the \
                         instance in answers, metrics and headers)",
                        id.escape_debug()
                    ),
                );
            } else if let Some(first) = seen.insert(id, i) {
                push(
                    at("id"),
                    format!("`{id}` is also the id of instance {first} (counting from 0): every id names one instance"),
                );
            }
            if id == LOCAL_ID {
                if instance.addr.is_some() {
                    push(
                        at("addr"),
                        "`local` is this process, which needs no address; give other boxes another id".into(),
                    );
                }
                if instance.region.as_deref().is_some_and(|r| r != self.region) {
                    push(at("region"), "`local`'s region is `router.region`; write it there".into());
                }
                continue;
            }
            match &instance.addr {
                None => push(
                    format!("instances.{i}"),
                    format!("instance `{id}` has no `addr`: write the host:port of its decision listener"),
                ),
                Some(addr) if !is_host_port(addr) => push(
                    at("addr"),
                    format!(
                        "`{}` is not host:port: write an address and a port like 10.0.0.2:8080, [fd00::2]:8080 or \
                         box2.lan:8080",
                        addr.escape_debug()
                    ),
                ),
                Some(_) => {}
            }
        }
        if !self.instances.iter().any(|i| i.id == LOCAL_ID) {
            push(
                "instances".into(),
                "no `{id: local}` among them: list this process too (whether or not it serves every \
                 table), so that the router can decide here"
                    .into(),
            );
        }
        if self.policy == Policy::Hash && self.hash_key.is_none() {
            push(
                "policy".into(),
                "`policy: hash` needs `router.hash_key`, the input field whose value picks the instance".into(),
            );
        }
        if let Some(key) = &self.hash_key {
            if key.is_empty() || key.split('.').any(str::is_empty) {
                push(
                    "hash_key".into(),
                    format!("`{key}` is not a field path: write names joined by dots, like `user.id`"),
                );
            }
        }
        if let Some(t) = &self.fallback_table {
            if t.is_empty() {
                push("fallback_table".into(), "an empty table name; write a table's name or leave the key out".into());
            }
        }
        if !(0.0..=1.0).contains(&self.local_max_load) {
            push(
                "local_max_load".into(),
                format!(
                    "{} is not a load: write a share of busy time from 0 (always route by score) to 1",
                    self.local_max_load
                ),
            );
        }
        let ms = [
            ("forward_timeout_ms", self.forward_timeout_ms, "every forward would fail at once"),
            ("health.interval_ms", self.health.interval_ms, "instances would be probed without pause"),
            ("health.timeout_ms", self.health.timeout_ms, "every probe would fail at once"),
            ("health.ejection_ms", self.health.ejection_ms, "an ejection would last no time"),
        ];
        for (key, value, zero) in ms {
            if value == 0 {
                push(key.into(), format!("0: {zero}"));
            } else if value > MAX_MS * 10 || (key != "health.ejection_ms" && value > MAX_MS) {
                push(key.into(), format!("{value} ms is more than a minute ({MAX_MS}); is a zero too many?"));
            }
        }
        if self.health.timeout_ms > self.health.interval_ms {
            push(
                "health.timeout_ms".into(),
                format!(
                    "{} ms is longer than `health.interval_ms` ({} ms): a probe must end before the next one starts",
                    self.health.timeout_ms, self.health.interval_ms
                ),
            );
        }
        for (key, value) in [
            ("health.unhealthy_after", self.health.unhealthy_after),
            ("health.healthy_after", self.health.healthy_after),
        ] {
            if value == 0 || value > 100 {
                push(key.into(), format!("{value}: write how many results in a row count, from 1 to 100"));
            }
        }
        out
    }
}

/// Whether `text` is `host:port`: an IP socket address, or a DNS name and a port.
pub fn is_host_port(text: &str) -> bool {
    if text.parse::<std::net::SocketAddr>().is_ok() {
        return true;
    }
    let Some((host, port)) = text.rsplit_once(':') else { return false };
    if port.parse::<u16>().map_or(true, |p| p == 0) {
        return false;
    }
    let label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    !host.is_empty() && host.len() <= 253 && host.split('.').all(label)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(instances: &[(&str, Option<&str>)]) -> RouterConfig {
        RouterConfig {
            instances: instances
                .iter()
                .map(|(id, addr)| InstanceConfig { id: id.to_string(), addr: addr.map(str::to_string), region: None })
                .collect(),
            ..RouterConfig::default()
        }
    }

    fn keys(c: &RouterConfig) -> Vec<String> {
        c.problems(true).into_iter().map(|(k, _)| k).collect()
    }

    #[test]
    fn no_section_is_off_and_fine() {
        assert!(RouterConfig::default().problems(false).is_empty());
        assert!(!RouterConfig::default().enabled());
        assert_eq!(keys(&RouterConfig::default()), ["instances"]);
    }

    #[test]
    fn instances_are_checked() {
        assert!(keys(&with(&[("local", None), ("b", Some("127.0.0.1:1"))])).is_empty());
        assert_eq!(keys(&with(&[("b", Some("127.0.0.1:1"))])), ["instances"]);
        assert_eq!(keys(&with(&[("local", None), ("b", Some("h:1")), ("b", Some("h:2"))])), ["instances.2.id"]);
        assert_eq!(keys(&with(&[("local", None), ("b", Some("nope"))])), ["instances.1.addr"]);
        assert_eq!(keys(&with(&[("local", None), ("b", None)])), ["instances.1"]);
        assert_eq!(keys(&with(&[("local", Some("h:1"))])), ["instances.0.addr"]);
        assert_eq!(keys(&with(&[("local", None), ("a b", Some("h:1"))])), ["instances.1.id"]);
    }

    #[test]
    fn host_port() {
        for ok in ["127.0.0.1:8080", "[::1]:80", "box-2.lan:8080", "localhost:1"] {
            assert!(is_host_port(ok), "{ok}");
        }
        for bad in ["127.0.0.1", ":80", "host:0", "host:99999", "a b:80", "-x:80", "http://x:80"] {
            assert!(!is_host_port(bad), "{bad}");
        }
    }

    #[test]
    fn values_that_cannot_work() {
        let mut c = with(&[("local", None)]);
        c.policy = Policy::Hash;
        c.local_max_load = 1.5;
        c.forward_timeout_ms = 0;
        c.health.timeout_ms = 6000;
        c.health.unhealthy_after = 0;
        assert_eq!(
            keys(&c),
            ["policy", "local_max_load", "forward_timeout_ms", "health.timeout_ms", "health.unhealthy_after"]
        );
    }
}
