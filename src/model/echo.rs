//! What a provider echoes back is redacted before agentrun keeps or shows it (docs/ARCHITECTURE.md
//! §5, issue 22): a server may quote the API key (or the base URL's credentials) in an
//! answer, in an in-stream `error` event or in any error message. Everything a provider
//! returns passes through here in [`super::Provider::complete`] — the answer, the error
//! and the live deltas — so the journal, `runs show`, export, stderr, progress, `--json`
//! and `--stream-json` only ever see `[redacted]`.

use super::{Delta, LiveSink, ModelError, ModelResponse};
use crate::redact::{Secrets, StreamText};
use std::sync::Mutex;

/// `resp` with every known secret replaced, in text, tool-call arguments and names.
pub(crate) fn response(secrets: &Secrets, mut resp: ModelResponse) -> ModelResponse {
    if secrets.is_empty() {
        return resp;
    }
    let Ok(mut v) = serde_json::to_value(&resp.message) else {
        return resp;
    };
    secrets.json(&mut v);
    if let Ok(m) = serde_json::from_value(v) {
        resp.message = m;
    }
    resp
}

/// `err` with every known secret replaced in its messages.
pub(crate) fn error(secrets: &Secrets, err: ModelError) -> ModelError {
    use ModelError as E;
    let r = |m: String| secrets.text(&m);
    match err {
        E::Status {
            provider,
            status,
            message,
            retry_after,
            should_retry,
        } => E::Status {
            provider,
            status,
            message: r(message),
            retry_after,
            should_retry,
        },
        E::Connection {
            provider,
            host,
            message,
        } => E::Connection {
            provider,
            host,
            message: r(message),
        },
        E::RateLimited {
            provider,
            status,
            message,
            retry_after,
            max,
        } => E::RateLimited {
            provider,
            status,
            message: r(message),
            retry_after,
            max,
        },
        E::CircuitOpen {
            model,
            retry_in,
            last_error,
        } => E::CircuitOpen {
            model,
            retry_in,
            last_error: r(last_error),
        },
        E::BadResponse { provider, message } => E::BadResponse {
            provider,
            message: r(message),
        },
        E::Config(message) => E::Config(r(message)),
        // Nothing the server sent: host names and limits only.
        other @ (E::Timeout { .. } | E::Refused { .. } | E::ScriptExhausted { .. }) => other,
    }
}

/// A live view that only sees redacted text: the end of a delta that could begin a
/// secret waits for the next delta ([`StreamText`]).
pub(crate) struct Live<'a> {
    inner: &'a dyn LiveSink,
    text: Mutex<(Option<String>, StreamText<'a>)>,
    secrets: &'a Secrets,
}

impl<'a> Live<'a> {
    pub fn new(inner: &'a dyn LiveSink, secrets: &'a Secrets) -> Live<'a> {
        Live {
            inner,
            text: Mutex::new((None, StreamText::new(secrets))),
            secrets,
        }
    }

    /// The answer arrived whole: show what was held back. (After an error it is
    /// dropped: a stream cut inside a key must not show its first part.)
    pub fn finish(self) {
        let (model, text) = self.text.into_inner().unwrap_or_else(|e| e.into_inner());
        let rest = text.finish();
        if let Some(model) = model
            && !rest.is_empty()
        {
            self.inner.delta(&model, &Delta::Text(rest));
        }
    }
}

impl LiveSink for Live<'_> {
    fn delta(&self, model: &str, delta: &Delta) {
        let mut guard = self.text.lock().unwrap_or_else(|e| e.into_inner());
        let (seen_model, text) = &mut *guard;
        *seen_model = Some(model.to_string());
        let shown = match delta {
            Delta::Text(t) => Delta::Text(text.push(t)),
            Delta::ToolCall { name } => Delta::ToolCall {
                name: self.secrets.text(name),
            },
        };
        if !matches!(&shown, Delta::Text(t) if t.is_empty()) {
            self.inner.delta(model, &shown);
        }
    }
}
