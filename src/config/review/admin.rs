//! The review of `admin:`, the admin listener: an address that is host:port, and a loud warning
//! when it is reachable from other machines without a token.

use super::Findings;
use crate::config::layer::Layered;
use crate::diagnostic::quote;

/// Reviews `admin.listen`: an error when it is not host:port, a SECURITY warning when it is off
/// loopback and `admin.token_file` is not set.
pub(super) fn review(l: &Layered, found: &mut Findings) {
    let admin = &l.config.admin;
    match listen_is_loopback(&admin.listen) {
        None => found.errors.push(l.at_value(
            &["admin", "listen"],
            format!(
                "`admin.listen` is `{}`, which is not host:port; write an address and a port like \
                 127.0.0.1:9901 or [::1]:9901, or \"\" for no admin listener",
                quote(&admin.listen)
            ),
        )),
        Some(false) if admin.token_file.is_none() => found.warnings.push(
            l.at_value(
                &["admin", "listen"],
                format!(
                    "SECURITY: `admin.listen` is {}, which is not a loopback address, and `admin.token_file` is \
                     not set: anyone who can reach that address can reload tables and roll them back. Set \
                     `admin.token_file` to a file holding a token, or listen on 127.0.0.1",
                    quote(&admin.listen)
                ),
            )
            .warning(),
        ),
        Some(_) => {}
    }
}

/// Whether `listen` (host:port) is on a loopback address (127.0.0.0/8, ::1, localhost); `None`
/// when it is not host:port. Empty (no admin listener) counts as loopback.
fn listen_is_loopback(listen: &str) -> Option<bool> {
    use std::net::{IpAddr, SocketAddr};
    if listen.is_empty() {
        return Some(true);
    }
    if let Ok(addr) = listen.parse::<SocketAddr>() {
        return Some(match addr.ip() {
            IpAddr::V4(ip) => ip.is_loopback(),
            IpAddr::V6(ip) => ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
        });
    }
    let (host, port) = listen.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    let label = |l: &str| !l.is_empty() && l.len() <= 63 && l.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-');
    (host.len() <= 253 && host.split('.').all(label)).then(|| host.eq_ignore_ascii_case("localhost"))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{review_with, PI};

    #[test]
    fn an_admin_listener_off_loopback_without_a_token_is_a_loud_warning() {
        for listen in ["0.0.0.0:9901", "192.168.1.10:9901", "'[::]:9901'", "pi.local:9901"] {
            let (errors, warnings, _) = review_with(&format!("admin:\n  listen: {listen}\n"), &[], &PI);
            assert!(errors.is_empty(), "{listen}: {errors:?}");
            assert_eq!(warnings.len(), 1, "{listen}: {warnings:?}");
            let w = &warnings[0];
            assert_eq!((w.line, w.column, w.severity), (2, 11, crate::diagnostic::Severity::Warning), "{w}");
            assert!(w.message.contains("anyone who can reach that address can reload tables"), "{w}");
            assert!(w.message.contains("admin.token_file") && w.message.contains("127.0.0.1"), "{w}");
            // with a token it is fine
            let text = format!("admin:\n  listen: {listen}\n  token_file: t\n");
            assert!(review_with(&text, &[], &PI).1.is_empty(), "{listen}");
        }
        for listen in ["127.0.0.1:9901", "127.8.0.1:1", "'[::1]:9901'", "localhost:9901", "LOCALHOST:1", "''"] {
            let (errors, warnings, _) = review_with(&format!("admin:\n  listen: {listen}\n"), &[], &PI);
            assert!(errors.is_empty() && warnings.is_empty(), "{listen}: {errors:?} {warnings:?}");
        }
        for listen in ["9901", "127.0.0.1", "127.0.0.1:99999", "::1:9901", "a b:1", ":9901", "host:"] {
            let (errors, _, _) = review_with(&format!("admin:\n  listen: \"{listen}\"\n"), &[], &PI);
            assert_eq!(errors.len(), 1, "{listen}: {errors:?}");
            assert_eq!((errors[0].line, errors[0].column), (2, 11), "{}", errors[0]);
            assert!(errors[0].message.contains("which is not host:port"), "{}", errors[0]);
        }
    }
}
