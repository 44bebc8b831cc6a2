//! `agentrun serve`: the web console for reviewers (issue 24).
//!
//! Pages are rendered here on the server from the store, with every stored text
//! escaped ([`html::esc`]); the stylesheet and the one small script (it only follows
//! a live run through server-sent events) are embedded in the binary, so the console
//! works offline and behind a firewall. Forms work without JavaScript.
//!
//! Routes: `/` the queue (open escalations first, live: `/events/queue`),
//! `/escalations/{id}` one handover with the decision form, `/runs` the runs list,
//! `/runs/{id}` one run (followed live until it is final), `/runs/{id}/events` its
//! server-sent events, `/runs/{id}/cancel|send|fork`
//! the operator's controls ([`operate`]), `/login`, `/logout`, `/assets/*`.
//! Decisions go through [`crate::decide`], exactly as `agentrun escalations resolve`:
//! the same checks, the same binding to the call's digest, the same records.
//!
//! The server runs on one tokio runtime thread; store reads are short and done in
//! place. A run resumed from the console is driven on a thread of its own
//! ([`drive`]), with its own store connection, as a worker slot is.

mod auth;
mod drive;
mod escalation;
mod evals;
pub mod host;
pub mod html;
mod live;
mod operate;
mod runs;

use crate::store::Store;
use axum::Router;
use axum::extract::{FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

pub use auth::random_token;

/// How the console is set up.
#[derive(Debug, Clone)]
pub struct Options {
    /// The database every page reads (SQLite path or postgres:// URL).
    pub db: PathBuf,
    /// The access token a browser exchanges for a session.
    pub token: String,
    /// How a run page shows the run: `runs show`'s text, given by the command line
    /// (which sits above the console and owns that view).
    pub render: RenderRun,
    /// The `Host` values the console answers (see [`host`]).
    pub hosts: host::Hosts,
}

/// The whole of `runs show` for a run, as text in a style.
pub type RenderRun =
    fn(&Store, &crate::records::RunId, crate::render::Style) -> anyhow::Result<String>;

/// What every handler shares.
pub struct App {
    pub(crate) store: Arc<Store>,
    pub(crate) db: PathBuf,
    pub(crate) auth: auth::Auth,
    pub(crate) live: live::Live,
    pub(crate) drivers: drive::Drivers,
    /// `http://HOST:PORT` when the token was generated: login links are printed then.
    links: std::sync::OnceLock<String>,
    pub(crate) render: RenderRun,
    hosts: host::Hosts,
}

impl App {
    /// Turns on one-time login links (the token was generated, nobody knows it) and
    /// returns the first: `base/login?code=…`.
    pub fn login_links(&self, base: String) -> String {
        let _ = self.links.set(base);
        self.next_link().unwrap_or_default()
    }

    /// A new one-time login link, when links are on.
    fn next_link(&self) -> Option<String> {
        let base = self.links.get()?;
        Some(format!("{base}/login?code={}", self.auth.new_code()))
    }

    /// Prints the next login link (the last one was used or expired).
    fn print_next_link(&self) {
        if let Some(link) = self.next_link() {
            crate::errln!(
                "agentrun: next login link (works once, for {} minutes): {link}",
                auth::CODE_TTL.as_secs() / 60
            );
        }
    }
}

/// Headers on every response: a strict Content-Security-Policy (only our own script
/// and stylesheet; no inline code, no framing, forms post only here), no MIME
/// sniffing, no referrer.
const SECURITY_HEADERS: [(&str, &str); 4] = [
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
         connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-store"),
];

/// How often the console delivers pending notification events (decisions made here,
/// runs it drives).
const NOTIFY_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Delivers pending notification events every [`NOTIFY_EVERY`] while the console
/// runs, on a thread of its own with one store connection and one runtime for all
/// its passes (a slow receiver never holds a page up). It ends with the process; a
/// database it cannot open yet is tried again at the next pass.
pub fn spawn_notifier(db: &std::path::Path) {
    let db = db.to_path_buf();
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        let mut store = None;
        loop {
            if store.is_none() {
                store = Store::open(&db, false).ok();
            }
            if let Some(s) = &store {
                rt.block_on(crate::notify::deliver_pending(s));
            }
            std::thread::sleep(NOTIFY_EVERY);
        }
    });
}

/// The console's routes over `store`.
pub fn router(opts: &Options, store: Arc<Store>) -> (Router, Arc<App>) {
    let app = Arc::new(App {
        store,
        db: opts.db.clone(),
        auth: auth::Auth::new(opts.token.clone()),
        live: live::Live::default(),
        drivers: drive::Drivers::default(),
        links: std::sync::OnceLock::new(),
        render: opts.render,
        hosts: opts.hosts.clone(),
    });
    let router = Router::new()
        .route("/", get(escalation::queue))
        .route("/login", get(login_get).post(login_post))
        .route("/logout", post(logout))
        .route("/escalations/{id}", get(escalation::page))
        .route("/escalations/{id}/decide", post(escalation::decide))
        .route("/evals", get(evals::list))
        .route("/evals/{name}", get(evals::page))
        .route("/runs", get(runs::list))
        .route("/runs/{id}", get(runs::page))
        .route("/runs/{id}/events", get(live::events))
        .route("/events/queue", get(live::queue_events))
        .route("/runs/{id}/resume", post(runs::resume))
        .route("/runs/{id}/cancel", post(operate::cancel))
        .route("/runs/{id}/send", post(operate::send))
        .route("/runs/{id}/fork", post(operate::fork))
        .route("/assets/app.css", get(css))
        .route("/assets/app.js", get(js))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            check_host,
        ))
        .layer(axum::middleware::map_response(secure))
        .with_state(app.clone());
    (router, app)
}

/// Serves until `shutdown` completes. The listener is bound by the caller (so a test
/// can take port 0 and read the address).
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Whether `addr` only accepts connections from this machine.
pub fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

/// Refuses (421) a request whose `Host` is not one the console serves: a DNS-rebound
/// page reaches no route, not even the login page ([`host`]).
async fn check_host(
    State(app): State<Arc<App>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let given = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if app.hosts.allows(given) {
        return next.run(req).await;
    }
    (
        StatusCode::MISDIRECTED_REQUEST,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "This console does not answer for this host name.\n",
    )
        .into_response()
}

async fn secure(mut res: Response) -> Response {
    let h = res.headers_mut();
    for (name, value) in SECURITY_HEADERS {
        h.insert(name, HeaderValue::from_static(value));
    }
    res
}

/// A logged-in request. Extracting it answers 401 (with the login form) when the
/// request carries no valid session.
pub struct Reviewer(pub auth::Session);

impl FromRequestParts<Arc<App>> for Reviewer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App>) -> Result<Self, Response> {
        match app.auth.session(&parts.headers) {
            Some(s) => Ok(Reviewer(s)),
            None => Err(login_page(app, StatusCode::UNAUTHORIZED, None)),
        }
    }
}

impl Reviewer {
    /// The name this session acts under: the one the form gave (remembered for the
    /// rest of the session), else the one given before; `None` when neither.
    pub fn acting_as(&self, app: &App, given: &str) -> Option<String> {
        let given = given.trim();
        if given.is_empty() {
            return self.0.name.clone();
        }
        if self.0.name.as_deref() != Some(given) {
            app.auth.set_name(&self.0.id, given);
        }
        Some(given.to_string())
    }

    /// The 403 page, unless the form's CSRF field is this session's.
    pub fn refuse_without_csrf(&self, given: Option<&str>) -> Option<Response> {
        if self.0.csrf_ok(given) {
            None
        } else {
            Some(error_page(
                StatusCode::FORBIDDEN,
                "This form is missing its security token (CSRF) or it belongs to another session; reload the page and try again.",
            ))
        }
    }
}

/// A page that says what went wrong.
pub fn error_page(status: StatusCode, message: &str) -> Response {
    let body = format!(
        "<h1>{}</h1><p class=\"error\">{}</p><p><a href=\"/\">Back to the queue</a></p>",
        status.as_u16(),
        html::esc(message)
    );
    (
        status,
        Html(html::page("Error", html::Tab::None, None, &body)),
    )
        .into_response()
}

/// A store error as a page: 404 for a missing run or escalation, else 500.
pub fn store_error(e: &crate::store::StoreError) -> Response {
    use crate::store::StoreError;
    let status = match e {
        StoreError::RunNotFound(_) | StoreError::EscalationNotFound(_) => StatusCode::NOT_FOUND,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error_page(status, &e.to_string())
}

/// The login page: it explains only the way in this console has — the printed
/// one-time link when the token was generated, the token form when it was given.
fn login_page(app: &App, status: StatusCode, message: Option<&str>) -> Response {
    let note = message
        .map(|m| format!("<p class=\"error\" role=\"alert\">{}</p>", html::esc(m)))
        .unwrap_or_default();
    let how = if app.links.get().is_some() {
        "<p>Open the login link that <code>agentrun serve</code> printed in its terminal. \
         Each link works once; the terminal shows the next one as soon as it is used.</p>"
            .to_string()
    } else {
        "<p>Enter the console's access token (whoever started the console has it).</p>\
         <form method=\"post\" action=\"/login\" class=\"login\">\
         <p><label>Access token <input type=\"password\" name=\"token\" autocomplete=\"off\" required></label></p>\
         <p><label>Your name <input name=\"name\" autocomplete=\"name\"></label> \
         <span class=\"hint\">(recorded with your decisions; asked once)</span></p>\
         <p><button type=\"submit\">Log in</button></p></form>"
            .to_string()
    };
    let body = format!(
        "<h1>Log in</h1>{note}{how}<p class=\"hint\">You stay signed in for {} hours, or until you log out.</p>",
        auth::SESSION_TTL.as_secs() / 3600
    );
    (
        status,
        Html(html::page("Log in", html::Tab::None, None, &body)),
    )
        .into_response()
}

#[derive(serde::Deserialize)]
struct LoginForm {
    token: Option<String>,
    code: Option<String>,
    name: Option<String>,
}

/// A refused login as a page: 401 for a wrong one, 429 while logins are paused.
fn refused_login(app: &App, why: auth::Refused, wrong: &str) -> Response {
    match why {
        auth::Refused::Wrong => login_page(app, StatusCode::UNAUTHORIZED, Some(wrong)),
        auth::Refused::Paused(left) => login_page(
            app,
            StatusCode::TOO_MANY_REQUESTS,
            Some(&format!(
                "Too many wrong logins: try again in {} seconds.",
                left.as_secs().max(1)
            )),
        ),
    }
}

/// `/login?code=…` (a printed one-time link) logs in; a token in the address does not
/// (see `auth`): it belongs in the form.
async fn login_get(State(app): State<Arc<App>>, Query(q): Query<LoginForm>) -> Response {
    if let Some(code) = q.code {
        return match app.auth.login_code(&code) {
            Ok(id) => {
                app.print_next_link();
                session_redirect(&id)
            }
            Err(why) => {
                // A new link only when none works: a wrong guess must not void the
                // reviewer's link.
                if !app.auth.code_live() {
                    app.print_next_link();
                }
                refused_login(
                    &app,
                    why,
                    "This login link was used or has expired; the console's terminal shows a new one.",
                )
            }
        };
    }
    if q.token.is_some() {
        return login_page(
            &app,
            StatusCode::UNAUTHORIZED,
            Some(
                "Paste the token in the form below, not in the address (addresses are kept in history and logs).",
            ),
        );
    }
    login_page(&app, StatusCode::OK, None)
}

async fn login_post(State(app): State<Arc<App>>, axum::Form(f): axum::Form<LoginForm>) -> Response {
    match app.auth.login(f.token.as_deref().unwrap_or("")) {
        Ok(id) => {
            if let Some(name) = f.name.as_deref().map(str::trim).filter(|n| !n.is_empty()) {
                app.auth.set_name(&id, name);
            }
            session_redirect(&id)
        }
        Err(why) => refused_login(&app, why, "That token is not the console's."),
    }
}

#[derive(serde::Deserialize)]
struct LogoutForm {
    csrf: Option<String>,
}

/// `POST /logout`: ends the session here and in the browser.
async fn logout(
    State(app): State<Arc<App>>,
    r: Reviewer,
    axum::Form(f): axum::Form<LogoutForm>,
) -> Response {
    if let Some(res) = r.refuse_without_csrf(f.csrf.as_deref()) {
        return res;
    }
    app.auth.end(&r.0.id);
    let mut res = Redirect::to("/login").into_response();
    if let Ok(v) = HeaderValue::from_str(&auth::Auth::clear_cookie()) {
        res.headers_mut().insert(header::SET_COOKIE, v);
    }
    res
}

/// To the queue, with the new session's cookie.
fn session_redirect(id: &str) -> Response {
    let mut res = Redirect::to("/").into_response();
    if let Ok(v) = HeaderValue::from_str(&auth::Auth::set_cookie(id)) {
        res.headers_mut().insert(header::SET_COOKIE, v);
    }
    res
}

async fn css() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("assets/app.css"),
    )
}

async fn js() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("assets/app.js"),
    )
}
