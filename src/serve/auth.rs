//! Who may use the console: a token exchanged for a session, and CSRF tokens.
//!
//! The access token comes from `AGENTRUN_SERVE_TOKEN` (posted in the login form) or is
//! generated at start and never shown: what `serve` prints then is a link with a
//! one-time login code (`/login?code=…`, [`CODE_TTL`]). A URL is kept in browser
//! history, shell scrollback and proxy logs, so the only secret ever put in one is
//! worthless once used; `serve` prints the next link when one is used or expires. A
//! correct token or code sets an `HttpOnly; SameSite=Strict` session cookie; every other page needs that cookie
//! (else 401). Each session has its own CSRF token, put in every form; a state-changing
//! request without it (or with another session's) is refused with 403. Sessions live
//! in this process's memory: restarting `serve` logs everyone out, which is the safe
//! direction. Tokens are compared in constant time.

use axum::http::HeaderMap;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a printed login link works if nobody uses it.
pub const CODE_TTL: Duration = Duration::from_secs(15 * 60);

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
    /// The one login code that works now, and when it was made.
    code: Mutex<Option<(String, Instant)>>,
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
            code: Mutex::new(None),
        }
    }

    /// A new session id for a correct token; `None` otherwise.
    pub fn login(&self, token: &str) -> Option<String> {
        if !same(token, &self.token) {
            return None;
        }
        Some(self.open_session())
    }

    /// Makes a new login code (the previous one stops working).
    pub fn new_code(&self) -> String {
        let code = random_token();
        *self.code.lock().unwrap_or_else(|p| p.into_inner()) = Some((code.clone(), Instant::now()));
        code
    }

    /// Whether a code works now: no code, or an expired one, means a new link is due.
    pub fn code_live(&self) -> bool {
        let code = self.code.lock().unwrap_or_else(|p| p.into_inner());
        code.as_ref().is_some_and(|(_, at)| at.elapsed() < CODE_TTL)
    }

    /// A new session id for the current, unexpired code, which is used up by it.
    pub fn login_code(&self, given: &str) -> Option<String> {
        let mut code = self.code.lock().unwrap_or_else(|p| p.into_inner());
        match code.as_ref() {
            Some((c, at)) if same(c, given) && at.elapsed() < CODE_TTL => {
                *code = None;
                drop(code);
                Some(self.open_session())
            }
            _ => None,
        }
    }

    fn open_session(&self) -> String {
        let id = random_token();
        let session = Session {
            csrf: random_token(),
        };
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone(), session);
        id
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
    fn a_login_code_opens_one_session_and_then_nothing() {
        let auth = Auth::new("s3cret-token".into());
        assert!(auth.login_code("").is_none(), "no code made yet");
        assert!(!auth.code_live());
        let old = auth.new_code();
        let code = auth.new_code();
        assert!(auth.login_code(&old).is_none(), "a replaced code is dead");
        assert!(auth.code_live());
        assert!(auth.login_code(&code).is_some());
        assert!(auth.login_code(&code).is_none(), "used up");
        assert!(!auth.code_live(), "a new link is due");
        assert!(
            auth.login_code("s3cret-token").is_none(),
            "the token is no code"
        );
    }

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
