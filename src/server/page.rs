//! `GET /` on the admin listener: the status page, one HTML file with its style and script
//! inside, built into the binary (`src/server/page/`). It loads nothing from elsewhere (a Pi is
//! often offline) and is an ordinary client of the admin listener's JSON endpoints: what it
//! shows, scripts can ask for too.
//!
//! The answer carries a `Content-Security-Policy` that names the page's one script and one
//! style by their SHA-256: the browser runs no other script, applies no other style, and
//! connects nowhere but to the listener that served it.

use std::sync::OnceLock;

use base64::Engine as _;
use sha2::{Digest, Sha256};

use crate::http1::Response;

const HTML: &str = include_str!("page/index.html");
const STYLE: &str = include_str!("page/style.css");
const SCRIPT: &str = include_str!("page/app.js");

/// The page as served, and its `Content-Security-Policy`.
#[derive(Debug)]
pub struct Page {
    /// the HTML with its style and script inside
    pub html: String,
    /// the `Content-Security-Policy` header's value
    pub csp: String,
}

/// The page, built on first use.
pub fn page() -> &'static Page {
    static PAGE: OnceLock<Page> = OnceLock::new();
    PAGE.get_or_init(|| {
        let hash = |text: &str| base64::engine::general_purpose::STANDARD.encode(Sha256::digest(text.as_bytes()));
        let html = HTML.replacen("/*STYLE*/", STYLE, 1).replacen("/*SCRIPT*/", SCRIPT, 1);
        let csp = format!(
            "default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; connect-src 'self'; img-src 'self' data:; \
             base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
            hash(SCRIPT),
            hash(STYLE)
        );
        Page { html, csp }
    })
}

/// Answers `GET /` with the page.
pub fn serve(rsp: &mut Response) {
    let page = page();
    rsp.content_type = "text/html; charset=utf-8";
    rsp.add_header("Content-Security-Policy", page.csp.clone());
    rsp.add_header("X-Content-Type-Options", "nosniff");
    rsp.add_header("Referrer-Policy", "no-referrer");
    rsp.add_header("Cache-Control", "no-cache");
    rsp.body.push_str(&page.html);
}
