//! Who may use the console: a token exchanged for a session, and CSRF tokens.
//!
//! The access token comes from `AGENTRUN_SERVE_TOKEN` (posted in the login form) or is
//! generated at start and never shown: what `serve` prints then is a link with a
//! one-time login code (`/login?code=…`, [`CODE_TTL`]). A URL is kept in browser
//! history, shell scrollback and proxy logs, so the only secret ever put in one is
//! worthless once used; `serve` prints the next link when one is used or expires. A
//! correct token or code sets an `HttpOnly; SameSite=Strict` session cookie that the
//! browser keeps for [`SESSION_TTL`] (also across a browser restart); every other page
//! needs that cookie (else 401), and a session older than that is gone. Logging out
//! ends the session at once. Each session has its own CSRF token, put in every form; a
//! state-changing request without it (or with another session's) is refused with 403.
//! After [`MAX_FAILURES`] wrong tokens or codes, every login is refused for
//! [`FAILURE_WINDOW`] (the right one too: a guesser learns nothing meanwhile). Sessions
//! live in this process's memory: restarting `serve` logs everyone out, which is the
//! safe direction. Tokens are compared in constant time. A session also keeps the
//! reviewer's name, asked once and recorded with every action taken in it.

use axum::http::HeaderMap;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a printed login link works if nobody uses it.
pub const CODE_TTL: Duration = Duration::from_secs(15 * 60);

/// How long a session lasts from its login (docs/console.md, Signing in).
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 60 * 60);

/// Wrong tokens or codes in a row before logins pause for [`FAILURE_WINDOW`].
pub const MAX_FAILURES: u32 = 5;

/// How long logins pause after [`MAX_FAILURES`] wrong ones.
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);

/// Why a login was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Not the token, or not the current code.
    Wrong,
    /// Too many wrong ones lately: try again after this long.
    Paused(Duration),
}

/// The session cookie's name.
pub const COOKIE: &str = "agentrun_session";

/// A logged-in browser.
#[derive(Debug, Clone)]
pub struct Session {
    /// The cookie's value.
    pub id: String,
    pub csrf: String,
    /// The reviewer's name, once given (at login or with the first action).
    pub name: Option<String>,
    opened: Instant,
}

/// Wrong logins lately: how many in a row, and when the last one was.
#[derive(Debug, Default)]
struct Failures {
    count: u32,
    last: Option<Instant>,
}

/// The time, as a parameter (tests move it; the console reads the real one).
pub type Now = Box<dyn Fn() -> Instant + Send + Sync>;

pub struct Auth {
    token: String,
    sessions: Mutex<HashMap<String, Session>>,
    /// The one login code that works now, and when it was made.
    code: Mutex<Option<(String, Instant)>>,
    failures: Mutex<Failures>,
    now: Now,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
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
        Auth::with_clock(token, Box::new(Instant::now))
    }

    pub fn with_clock(token: String, now: Now) -> Auth {
        Auth {
            token,
            sessions: Mutex::new(HashMap::new()),
            code: Mutex::new(None),
            failures: Mutex::new(Failures::default()),
            now,
        }
    }

    /// A new session id for a correct token.
    pub fn login(&self, token: &str) -> Result<String, Refused> {
        self.attempt(|| same(token, &self.token))
    }

    /// Makes a new login code (the previous one stops working).
    pub fn new_code(&self) -> String {
        let code = random_token();
        *lock(&self.code) = Some((code.clone(), (self.now)()));
        code
    }

    /// Whether a code works now: no code, or an expired one, means a new link is due.
    pub fn code_live(&self) -> bool {
        let now = (self.now)();
        lock(&self.code)
            .as_ref()
            .is_some_and(|(_, at)| now.duration_since(*at) < CODE_TTL)
    }

    /// A new session id for the current, unexpired code, which is used up by it.
    pub fn login_code(&self, given: &str) -> Result<String, Refused> {
        self.attempt(|| {
            let now = (self.now)();
            let mut code = lock(&self.code);
            let ok = code
                .as_ref()
                .is_some_and(|(c, at)| same(c, given) && now.duration_since(*at) < CODE_TTL);
            if ok {
                *code = None;
            }
            ok
        })
    }

    /// One login attempt: refused unpaused, counted when wrong, a session when right.
    fn attempt(&self, right: impl FnOnce() -> bool) -> Result<String, Refused> {
        let now = (self.now)();
        let mut f = lock(&self.failures);
        if let Some(last) = f.last {
            let since = now.duration_since(last);
            if since >= FAILURE_WINDOW {
                *f = Failures::default();
            } else if f.count >= MAX_FAILURES {
                return Err(Refused::Paused(FAILURE_WINDOW - since));
            }
        }
        if !right() {
            f.count += 1;
            f.last = Some(now);
            return Err(Refused::Wrong);
        }
        *f = Failures::default();
        drop(f);
        Ok(self.open_session(now))
    }

    fn open_session(&self, now: Instant) -> String {
        let id = random_token();
        let session = Session {
            id: id.clone(),
            csrf: random_token(),
            name: None,
            opened: now,
        };
        let mut sessions = lock(&self.sessions);
        // Expired sessions go as new ones come: the map never grows without bound.
        sessions.retain(|_, s| now.duration_since(s.opened) < SESSION_TTL);
        sessions.insert(id.clone(), session);
        id
    }

    /// The unexpired session the request's cookie names.
    pub fn session(&self, headers: &HeaderMap) -> Option<Session> {
        let id = cookie(headers, COOKIE)?;
        let now = (self.now)();
        let sessions = lock(&self.sessions);
        sessions
            .iter()
            .find(|(k, _)| same(k, id))
            .map(|(_, s)| s.clone())
            .filter(|s| now.duration_since(s.opened) < SESSION_TTL)
    }

    /// Records the reviewer's name for the rest of the session.
    pub fn set_name(&self, id: &str, name: &str) {
        if let Some(s) = lock(&self.sessions).get_mut(id) {
            s.name = Some(name.to_string());
        }
    }

    /// Ends a session (logout).
    pub fn end(&self, id: &str) {
        lock(&self.sessions).remove(id);
    }

    /// The `Set-Cookie` value for a new session: kept by the browser for the
    /// session's lifetime.
    pub fn set_cookie(id: &str) -> String {
        format!(
            "{COOKIE}={id}; Path=/; Max-Age={}; HttpOnly; SameSite=Strict",
            SESSION_TTL.as_secs()
        )
    }

    /// The `Set-Cookie` value that makes the browser forget its session.
    pub fn clear_cookie() -> String {
        format!("{COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict")
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
    use std::sync::Arc;

    /// An [`Auth`] whose time the test moves.
    fn clocked(token: &str) -> (Auth, Arc<Mutex<Instant>>) {
        let t = Arc::new(Mutex::new(Instant::now()));
        let at = t.clone();
        let auth = Auth::with_clock(token.into(), Box::new(move || *lock(&at)));
        (auth, t)
    }

    fn with_cookie(id: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            axum::http::header::COOKIE,
            format!("a=b; {COOKIE}={id}").parse().unwrap(),
        );
        h
    }

    #[test]
    fn a_login_code_opens_one_session_and_then_nothing() {
        let auth = Auth::new("s3cret-token".into());
        assert!(auth.login_code("").is_err(), "no code made yet");
        assert!(!auth.code_live());
        let old = auth.new_code();
        let code = auth.new_code();
        assert!(auth.login_code(&old).is_err(), "a replaced code is dead");
        assert!(auth.code_live());
        assert!(auth.login_code(&code).is_ok());
        assert!(auth.login_code(&code).is_err(), "used up");
        assert!(!auth.code_live(), "a new link is due");
        assert!(
            auth.login_code("s3cret-token").is_err(),
            "the token is no code"
        );
    }

    #[test]
    fn only_the_token_opens_a_session_and_only_its_csrf_passes() {
        let auth = Auth::new("s3cret".into());
        assert_eq!(auth.login("s3cre"), Err(Refused::Wrong));
        assert_eq!(auth.login("s3cret!"), Err(Refused::Wrong));
        let id = auth.login("s3cret").expect("logged in");
        let s = auth.session(&with_cookie(&id)).expect("session");
        assert!(s.csrf_ok(Some(&s.csrf.clone())));
        assert!(!s.csrf_ok(None));
        assert!(!s.csrf_ok(Some("x")));
        assert!(auth.session(&with_cookie("nope")).is_none());
    }

    #[test]
    fn a_session_lasts_its_lifetime_and_not_a_second_more_and_logout_ends_it() {
        let (auth, t) = clocked("s3cret");
        let id = auth.login("s3cret").expect("in");
        *lock(&t) += SESSION_TTL - Duration::from_secs(1);
        assert!(auth.session(&with_cookie(&id)).is_some(), "still in");
        *lock(&t) += Duration::from_secs(1);
        assert!(auth.session(&with_cookie(&id)).is_none(), "expired");
        let other = auth.login("s3cret").expect("in again");
        auth.end(&other);
        assert!(auth.session(&with_cookie(&other)).is_none(), "logged out");
        assert!(
            Auth::set_cookie("x").contains(&format!("Max-Age={}", SESSION_TTL.as_secs())),
            "the browser keeps the cookie as long as the session lasts"
        );
    }

    #[test]
    fn after_five_wrong_logins_even_the_right_token_waits_out_the_window() {
        let (auth, t) = clocked("s3cret");
        for _ in 0..MAX_FAILURES {
            assert_eq!(auth.login("guess"), Err(Refused::Wrong));
        }
        assert_eq!(auth.login("s3cret"), Err(Refused::Paused(FAILURE_WINDOW)));
        let code = auth.new_code();
        assert!(
            matches!(auth.login_code(&code), Err(Refused::Paused(_))),
            "codes are paused too"
        );
        *lock(&t) += FAILURE_WINDOW - Duration::from_secs(1);
        assert_eq!(
            auth.login("s3cret"),
            Err(Refused::Paused(Duration::from_secs(1)))
        );
        *lock(&t) += Duration::from_secs(1);
        assert!(auth.login("s3cret").is_ok(), "the window passed");
        for _ in 0..MAX_FAILURES - 1 {
            assert_eq!(auth.login("guess"), Err(Refused::Wrong));
        }
        assert!(
            auth.login("s3cret").is_ok(),
            "a success starts the count again"
        );
        assert_eq!(auth.login("guess"), Err(Refused::Wrong));
    }

    #[test]
    fn the_name_given_once_stays_with_the_session() {
        let auth = Auth::new("s3cret".into());
        let id = auth.login("s3cret").expect("in");
        assert_eq!(auth.session(&with_cookie(&id)).expect("s").name, None);
        auth.set_name(&id, "Ana");
        assert_eq!(
            auth.session(&with_cookie(&id)).expect("s").name.as_deref(),
            Some("Ana")
        );
    }
}
