//! Model (provider) errors, classified once so retry code never matches on strings.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The provider answered with a non-success HTTP status.
    #[error("{provider} returned HTTP {status}: {message}")]
    Status {
        provider: &'static str,
        status: u16,
        message: String,
        /// Server-requested delay (`retry-after-ms`, `Retry-After` seconds or HTTP-date).
        retry_after: Option<Duration>,
        /// Anthropic's `x-should-retry` header, when present, overrides the status.
        should_retry: Option<bool>,
    },
    /// No answer in time: `idle` when a stream (or its headers) went silent for
    /// `timeout`, else the attempt's overall cap (or the connect limit).
    #[error("{provider} at {host} {}", timeout_text(*.idle, *.timeout))]
    Timeout {
        provider: &'static str,
        /// `host:port` it was waiting for.
        host: String,
        timeout: Duration,
        idle: bool,
    },
    /// Nothing listens at the address: the connection was refused. Transient (a
    /// server may be restarting), but a run's first step to a local server gives up
    /// within ~2 s: there it means "not started" (issue 27, [`super::retry`]).
    #[error("nothing is listening at {host} — is the server running? ({base_var})")]
    Refused {
        provider: &'static str,
        /// `host:port` it tried to reach.
        host: String,
        /// The variable that set the address (`OPENAI_BASE_URL`).
        base_var: &'static str,
    },
    #[error("{provider} at {host}: connection failed: {message}")]
    Connection {
        provider: &'static str,
        /// `host:port` it tried to reach (issue 13: say where).
        host: String,
        message: String,
    },
    /// The server asked to wait longer than `max_retry_after` allows: not retried.
    #[error(
        "{provider} is rate limited: the server asks to wait {}s, more than max_retry_after ({}s): {message}",
        retry_after.as_secs_f64().ceil(), max.as_secs_f64().ceil()
    )]
    RateLimited {
        provider: &'static str,
        status: u16,
        message: String,
        retry_after: Duration,
        max: Duration,
    },
    /// The model skipped by the circuit breaker: it failed its retries recently.
    #[error(
        "{model} is skipped for another {}s (circuit open; it failed: {last_error})",
        retry_in.as_secs_f64().ceil()
    )]
    CircuitOpen {
        model: String,
        /// Until a probe is allowed again.
        retry_in: Duration,
        last_error: String,
    },
    /// A 2xx body that is not the JSON we expect (truncated, wrong shape, error in stream).
    #[error("{provider} sent a response agentrun cannot read: {message}")]
    BadResponse {
        provider: &'static str,
        message: String,
    },
    /// Local misconfiguration: missing API key, unknown spec, unreadable script.
    #[error("{0}")]
    Config(String),
    /// The scripted model has no turn left for this transcript.
    #[error("script {path} has no turn {turn} (it has {len})")]
    ScriptExhausted {
        path: String,
        turn: usize,
        len: usize,
    },
}

impl ModelError {
    /// Whether the identical request may succeed if sent again shortly.
    pub fn is_transient(&self) -> bool {
        match self {
            ModelError::Status {
                status,
                should_retry,
                ..
            } => should_retry.unwrap_or_else(|| is_transient_status(*status)),
            ModelError::Timeout { .. }
            | ModelError::Connection { .. }
            | ModelError::Refused { .. } => true,
            ModelError::RateLimited { .. } | ModelError::CircuitOpen { .. } => false,
            ModelError::BadResponse { .. }
            | ModelError::Config(_)
            | ModelError::ScriptExhausted { .. } => false,
        }
    }

    /// A refused connection to this machine (`localhost`, `127.x`, `::1`).
    pub fn is_refused_locally(&self) -> bool {
        match self {
            ModelError::Refused { host, .. } => {
                let name = host.rsplit_once(':').map_or(host.as_str(), |(h, _)| h);
                name == "localhost" || name.starts_with("127.") || name == "[::1]"
            }
            _ => false,
        }
    }

    /// A few words for a status line: `connection refused`, `HTTP 503`, `timeout`.
    pub fn brief(&self) -> String {
        match self {
            ModelError::Status { status, .. } | ModelError::RateLimited { status, .. } => {
                format!("HTTP {status}")
            }
            ModelError::Timeout { idle: true, .. } => "idle timeout".into(),
            ModelError::Timeout { .. } => "timeout".into(),
            ModelError::Refused { .. } => "connection refused".into(),
            ModelError::Connection { .. } => "connection failed".into(),
            ModelError::CircuitOpen { .. } => "circuit open".into(),
            ModelError::BadResponse { .. } => "bad response".into(),
            ModelError::Config(_) | ModelError::ScriptExhausted { .. } => "error".into(),
        }
    }

    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ModelError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

fn timeout_text(idle: bool, timeout: Duration) -> String {
    let t = humantime::format_duration(Duration::from_millis(
        u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
    ));
    if idle {
        format!("sent nothing for {t} (idle_timeout)")
    } else {
        format!("did not finish within {t} (timeout)")
    }
}

/// 408, 409 (Anthropic uses it for transient conflicts), 429 and server errors are worth
/// a retry; 400, 401, 403, 404 and other client errors never are.
pub fn is_transient_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429 | 500 | 502 | 503 | 504 | 529) || status >= 500
}
