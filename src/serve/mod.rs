//! `agentrun serve`: the web console for reviewers (issue 24).
//!
//! Pages are rendered here on the server from the store, with every stored text
//! escaped ([`html::esc`]); the stylesheet and the one small script (it only follows
//! a live run through server-sent events) are embedded in the binary, so the console
//! works offline and behind a firewall. Forms work without JavaScript.
//!
//! Routes: `/` the queue (open escalations first), `/escalations/{id}` one handover
//! with the decision form, `/runs` the runs list, `/runs/{id}` one run (live while it
//! goes), `/runs/{id}/events` its server-sent events, `/runs/{id}/cancel|send|fork`
//! the operator's controls ([`operate`]), `/login`, `/assets/*`.
//! Decisions go through [`crate::decide`], exactly as `agentrun escalations resolve`:
//! the same checks, the same binding to the call's digest, the same records.
//!
//! The server runs on one tokio runtime thread; store reads are short and done in
//! place. A run resumed from the console is driven on a thread of its own
//! ([`drive`]), with its own store connection, as a worker slot is.

mod auth;
mod drive;
mod escalation;
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
/// runs, on a thread of its own with its own store connection (a slow receiver never
/// holds a page up). It ends with the process.
pub fn spawn_notifier(db: &std::path::Path) {
    let db = db.to_path_buf();
    std::thread::spawn(move || {
        loop {
            crate::notify::deliver_for(&db);
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
    });
    let router = Router::new()
        .route("/", get(escalation::queue))
        .route("/login", get(login_get).post(login_post))
        .route("/escalations/{id}", get(escalation::page))
        .route("/escalations/{id}/decide", post(escalation::decide))
        .route("/runs", get(runs::list))
        .route("/runs/{id}", get(runs::page))
        .route("/runs/{id}/events", get(live::events))
        .route("/runs/{id}/resume", post(runs::resume))
        .route("/runs/{id}/cancel", post(operate::cancel))
        .route("/runs/{id}/send", post(operate::send))
        .route("/runs/{id}/fork", post(operate::fork))
        .route("/assets/app.css", get(css))
        .route("/assets/app.js", get(js))
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
            None => Err(login_page(StatusCode::UNAUTHORIZED, None)),
        }
    }
}

impl Reviewer {
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
    (status, Html(html::page("Error", html::Tab::None, &body))).into_response()
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

fn login_page(status: StatusCode, message: Option<&str>) -> Response {
    let note = message
        .map(|m| format!("<p class=\"error\">{}</p>", html::esc(m)))
        .unwrap_or_default();
    let body = format!(
        "<h1>Log in</h1>{note}<p>Open the one-time link <code>agentrun serve</code> printed, \
         or paste the access token (<code>AGENTRUN_SERVE_TOKEN</code>).</p>\
         <form method=\"post\" action=\"/login\"><label>Token \
         <input type=\"password\" name=\"token\" autocomplete=\"off\" required></label> \
         <button type=\"submit\">Log in</button></form>"
    );
    (status, Html(html::page("Log in", html::Tab::None, &body))).into_response()
}

#[derive(serde::Deserialize)]
struct LoginForm {
    token: Option<String>,
    code: Option<String>,
}

/// `/login?code=…` (a printed one-time link) logs in; a token in the address does not
/// (see `auth`): it belongs in the form.
async fn login_get(State(app): State<Arc<App>>, Query(q): Query<LoginForm>) -> Response {
    if let Some(code) = q.code {
        return match app.auth.login_code(&code) {
            Some(id) => {
                app.print_next_link();
                session_redirect(&id)
            }
            None => {
                // A new link only when none works: a wrong guess must not void the
                // reviewer's link.
                if !app.auth.code_live() {
                    app.print_next_link();
                }
                login_page(
                    StatusCode::UNAUTHORIZED,
                    Some(
                        "This login link was used or has expired; `agentrun serve` printed a new one.",
                    ),
                )
            }
        };
    }
    if q.token.is_some() {
        return login_page(
            StatusCode::UNAUTHORIZED,
            Some(
                "Paste the token in the form below, not in the address (addresses are kept in history and logs).",
            ),
        );
    }
    login_page(StatusCode::OK, None)
}

async fn login_post(State(app): State<Arc<App>>, axum::Form(f): axum::Form<LoginForm>) -> Response {
    login_with(&app, f.token.as_deref().unwrap_or(""))
}

fn login_with(app: &App, token: &str) -> Response {
    match app.auth.login(token) {
        Some(id) => session_redirect(&id),
        None => login_page(
            StatusCode::UNAUTHORIZED,
            Some("That token is not the console's."),
        ),
    }
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
