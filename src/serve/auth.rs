//! Who may use the console: a token exchanged for a session, and CSRF tokens.
//!
//! The access token comes from `AGENTRUN_SERVE_TOKEN` or is generated at start and
//! printed. Visiting `/login?token=…` (or posting the login form) with it sets an
//! `HttpOnly; SameSite=Strict` session cookie; every other page needs that cookie
//! (else 401). Each session has its own CSRF token, put in every form; a state-changing
//! request without it (or with another session's) is refused with 403. Sessions live
//! in this process's memory: restarting `serve` logs everyone out, which is the safe
//! direction. Tokens are compared in constant time.

use axum::http::HeaderMap;
use std::collections::HashMap;
use std::sync::Mutex;

/// The session cookie's name.
pub const COOKIE: &str = "agentrun_session";

/// A logged-in browser.
#[derive(Debug, Clone)]
pub struct Session {
    pub csrf: String,
}

pub struct Auth {
    token: String,
    sessions: Mutex<HashMap<String, Session>>,
}

/// 128 random bits as hex (the thread RNG is a CSPRNG).
pub fn random_token() -> String {
    format!(
        "{:016x}{:016x}",
        rand::random::<u64>(),
        rand::random::<u64>()
    )
}

/// Equal strings, in time that depends only on their lengths.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl Auth {
    pub fn new(token: String) -> Auth {
        Auth {
            token,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// A new session id for a correct token; `None` otherwise.
    pub fn login(&self, token: &str) -> Option<String> {
        if !same(token, &self.token) {
            return None;
        }
        let id = random_token();
        let session = Session {
            csrf: random_token(),
        };
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone(), session);
        Some(id)
    }

    /// The session the request's cookie names.
    pub fn session(&self, headers: &HeaderMap) -> Option<Session> {
        let id = cookie(headers, COOKIE)?;
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions
            .iter()
            .find(|(k, _)| same(k, id))
            .map(|(_, s)| s.clone())
    }

    /// The `Set-Cookie` value for a new session.
    pub fn set_cookie(id: &str) -> String {
        format!("{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict")
    }
}

impl Session {
    /// Whether a form's CSRF field is this session's.
    pub fn csrf_ok(&self, given: Option<&str>) -> bool {
        given.is_some_and(|g| same(g, &self.csrf))
    }
}

/// The value of cookie `name` in the request's `Cookie` headers.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_token_opens_a_session_and_only_its_csrf_passes() {
        let auth = Auth::new("s3cret".into());
        assert!(auth.login("s3cre").is_none());
        assert!(auth.login("s3cret!").is_none());
        let id = auth.login("s3cret").expect("logged in");
        let mut h = HeaderMap::new();
        h.insert(
            axum::http::header::COOKIE,
            format!("a=b; {COOKIE}={id}").parse().unwrap(),
        );
        let s = auth.session(&h).expect("session");
        assert!(s.csrf_ok(Some(&s.csrf.clone())));
        assert!(!s.csrf_ok(None));
        assert!(!s.csrf_ok(Some("x")));
        h.insert(
            axum::http::header::COOKIE,
            format!("{COOKIE}=nope").parse().unwrap(),
        );
        assert!(auth.session(&h).is_none());
    }
}
