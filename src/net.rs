//! The one way agentrun builds an HTTP client (HTTP tools and model providers alike),
//! so the redirect rule of docs/ARCHITECTURE.md §3.2 holds everywhere (issue 12, item 4):
//!
//! - a redirect to the same origin (scheme, host, port) is followed, at most
//!   [`MAX_REDIRECTS`] times;
//! - a redirect to another origin is never followed: the request fails with
//!   [`RedirectRefused::CrossOrigin`] naming the target, so no header (an API key, a
//!   `${VAR}` header) and no body (a transcript) ever reaches a host nobody configured;
//! - a redirect back to a URL already visited is a loop, refused at once;
//! - no `Referer` header is ever sent.
//!
//! Callers find the reason in the error's source chain with [`redirect_refused`] and
//! treat it as permanent: sending the same request again gets the same redirect.
//!
//! Every client here (and the MCP HTTP client) also shares one TLS configuration
//! ([`tls_builder`]): the system's root certificates are read and parsed once per
//! process, not once per client — a worker builds a model client per run, and parsing
//! the roots again for each cost CPU and a root store per run in flight (issue 23).

use reqwest::redirect::{Attempt, Policy};
use reqwest::{ClientBuilder, Url};
use std::fmt;
use std::sync::{Arc, OnceLock};

/// Same-origin redirects followed before the request fails.
pub const MAX_REDIRECTS: usize = 5;

/// Why a redirect was not followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedirectRefused {
    /// To another origin; the target URL (its query and credentials dropped).
    CrossOrigin(String),
    /// Back to a URL already visited.
    Loop(String),
    /// More than [`MAX_REDIRECTS`] hops.
    TooMany(String),
}

impl fmt::Display for RedirectRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RedirectRefused::CrossOrigin(to) => write!(
                f,
                "redirected to another origin ({to}), which agentrun never follows"
            ),
            RedirectRefused::Loop(to) => write!(f, "redirect loop (back to {to})"),
            RedirectRefused::TooMany(to) => {
                write!(f, "more than {MAX_REDIRECTS} redirects (last to {to})")
            }
        }
    }
}

impl std::error::Error for RedirectRefused {}

/// A client builder with the redirect rule and no Referer; add timeouts and headers.
pub fn client_builder() -> ClientBuilder {
    tls_builder()
        .redirect(Policy::custom(decide))
        .referer(false)
}

/// A client builder with the process's shared TLS configuration (see the module doc).
pub fn tls_builder() -> ClientBuilder {
    match shared_tls() {
        Some(tls) => reqwest::Client::builder().tls_backend_preconfigured(tls),
        // No usable roots on this system: reqwest tries on its own and reports the
        // same error it always did when the client is built.
        None => reqwest::Client::builder(),
    }
}

/// What reqwest builds for each client by default — rustls with the platform's
/// verifier, TLS 1.2 and 1.3, HTTP/1.1 — made once. `None` when the platform
/// verifier cannot be set up (no root certificates found).
fn shared_tls() -> Option<rustls::ClientConfig> {
    static TLS: OnceLock<Option<rustls::ClientConfig>> = OnceLock::new();
    TLS.get_or_init(|| {
        let provider = rustls::crypto::CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
        let verifier = rustls_platform_verifier::Verifier::new(provider.clone()).ok()?;
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .ok()?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Some(config)
    })
    .clone()
}

fn decide(attempt: Attempt<'_>) -> reqwest::redirect::Action {
    let verdict = judge(attempt.url(), attempt.previous());
    match verdict {
        Some(refused) => attempt.error(refused),
        None => attempt.follow(),
    }
}

/// `None` to follow a redirect to `next` after visiting `previous` (the first entry is
/// the URL the request was sent to).
fn judge(next: &Url, previous: &[Url]) -> Option<RedirectRefused> {
    let shown = display(next);
    let first = previous.first()?;
    if next.origin() != first.origin() {
        return Some(RedirectRefused::CrossOrigin(shown));
    }
    if previous.iter().any(|u| u == next) {
        return Some(RedirectRefused::Loop(shown));
    }
    if previous.len() > MAX_REDIRECTS {
        return Some(RedirectRefused::TooMany(shown));
    }
    None
}

/// A URL for messages: scheme, host, port and path only (a query or userinfo may hold
/// secrets).
fn display(url: &Url) -> String {
    let mut u = url.clone();
    u.set_query(None);
    u.set_fragment(None);
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.to_string()
}

/// The refused redirect behind an error, if that is what it is.
pub fn redirect_refused<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a RedirectRefused> {
    let mut current = Some(err);
    while let Some(e) = current {
        if let Some(r) = e.downcast_ref::<RedirectRefused>() {
            return Some(r);
        }
        current = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shared configuration is one reqwest accepts (a mismatched rustls would be an
    /// "unknown TLS backend" error at build time), and clients built with it work.
    #[test]
    #[allow(clippy::disallowed_macros)] // the test harness's own output: a skip line
    fn clients_share_one_tls_configuration_reqwest_accepts() {
        if rustls_native_certs::load_native_certs().certs.is_empty() {
            println!("skipped: no system root certificates here");
            return;
        }
        assert!(shared_tls().is_some());
        for _ in 0..2 {
            client_builder()
                .build()
                .expect("client with the shared TLS");
            tls_builder().build().expect("client with the shared TLS");
        }
    }

    fn u(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn same_origin_is_followed_other_origins_are_not() {
        let from = [u("http://a.test:8080/x")];
        assert_eq!(judge(&u("http://a.test:8080/y?q=1"), &from), None);
        let refused = |s| Some(RedirectRefused::CrossOrigin(s));
        assert_eq!(
            judge(&u("http://b.test:8080/y?token=s"), &from),
            refused("http://b.test:8080/y".into())
        );
        assert_eq!(
            judge(&u("http://a.test:9090/y"), &from),
            refused("http://a.test:9090/y".into())
        );
        assert_eq!(
            judge(&u("https://a.test:8080/y"), &from),
            refused("https://a.test:8080/y".into())
        );
    }

    #[test]
    fn loops_and_long_chains_are_refused() {
        let chain = [u("http://a.test/1"), u("http://a.test/2")];
        assert_eq!(
            judge(&u("http://a.test/1"), &chain),
            Some(RedirectRefused::Loop("http://a.test/1".into()))
        );
        let long: Vec<Url> = (0..=MAX_REDIRECTS)
            .map(|i| u(&format!("http://a.test/{i}")))
            .collect();
        assert!(matches!(
            judge(&u("http://a.test/last"), &long),
            Some(RedirectRefused::TooMany(_))
        ));
    }
}
