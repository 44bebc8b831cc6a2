//! What the two HTTP adapters (OpenAI, Anthropic) share: the API key that never prints,
//! one JSON POST with a per-request timeout, and the mapping of everything that can go
//! wrong on the wire onto [`ModelError`], so retry code branches on variants only.

use super::ModelError;
use super::sse::{SseEvent, SseParser};
use crate::backoff;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{StatusCode, Url};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::fmt;
use std::time::{Duration, SystemTime};

/// An API key. Its `Debug` is redacted and it has no `Display`, so deriving `Debug` on
/// a struct that holds one cannot leak it (docs/ARCHITECTURE.md §5: secrets never reach the store
/// or the trace, and both are fed from `Display`/`Debug` of errors and configs).
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// `None` for an empty or blank value: `OPENAI_API_KEY=` means "no key".
    pub fn new(key: impl Into<String>) -> Option<ApiKey> {
        let key = key.into().trim().to_string();
        (!key.is_empty()).then_some(ApiKey(key))
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey([redacted])")
    }
}

/// A header carrying a secret: marked sensitive so reqwest/hyper never print it.
pub(crate) fn secret_header(
    name: &'static str,
    value: String,
    var: &str,
) -> Result<(HeaderName, HeaderValue), ModelError> {
    let mut value = HeaderValue::from_str(&value).map_err(|_| {
        ModelError::Config(format!(
            "{var} contains characters that are not allowed in an HTTP header"
        ))
    })?;
    value.set_sensitive(true);
    Ok((HeaderName::from_static(name), value))
}

/// `{base}/{path}`, with or without a trailing slash on the base.
pub(crate) fn endpoint(base: &str, path: &str, var: &str) -> Result<Url, ModelError> {
    let joined = format!("{}/{path}", base.trim().trim_end_matches('/'));
    Url::parse(&joined).map_err(|e| {
        let base = crate::redact::url_shown(base);
        ModelError::Config(format!("{var} `{base}` is not a URL: {e}"))
    })
}

/// How long one attempt may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// To open the connection.
    pub connect: Duration,
    /// Streaming: the longest silence allowed before the first byte and between chunks.
    /// A server that is generating sends a chunk per token, so silence means stalled.
    pub idle: Duration,
    /// The whole attempt, first byte to last; without streaming the only limit on a
    /// long generation, so it must cover the slowest answer expected.
    pub total: Duration,
}

impl Timeouts {
    /// Every limit `d` (tests and callers that think in one number).
    pub fn all(d: Duration) -> Timeouts {
        Timeouts {
            connect: d,
            idle: d,
            total: d,
        }
    }
}

/// A response body larger than this is refused, streamed or not (docs/ARCHITECTURE.md §3.5); a real
/// answer is far below it.
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// How much of a non-2xx body is read: enough for any provider's error JSON.
pub const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// What a streaming POST got back: events were handed to the callback, or the server
/// ignored `stream: true` and answered with one JSON body (some compatible servers do).
pub(crate) enum Streamed {
    /// The callback saw the provider's end marker.
    Done,
    /// The body ended without it: the caller decides whether what came is whole
    /// (see [`Http::cut_short`]).
    Ended,
    Json(Vec<u8>),
}

/// Whether the stream reader goes on after an event.
pub(crate) enum Flow {
    More,
    /// The provider's end marker arrived (`[DONE]`, `message_stop`).
    Done,
}

/// The environment variables that configure a provider, for messages that name the
/// one to fix (issue 27).
#[derive(Debug, Clone, Copy)]
pub(crate) struct EnvVars {
    /// `OPENAI_API_KEY`
    pub key: &'static str,
    /// `OPENAI_BASE_URL`
    pub base_url: &'static str,
}

/// A reqwest client for one provider, with its fixed headers and timeouts.
pub(crate) struct Http {
    pub provider: &'static str,
    vars: EnvVars,
    client: reqwest::Client,
    timeouts: Timeouts,
    /// The API key and the credentials in the base URL's userinfo
    /// (`https://user:pass@host`, [`Http::scrub_url`]): only to scrub them out of what a
    /// server might echo them into.
    secrets: crate::redact::Secrets,
    /// A digest of the API key (never the key): which provider account a rate limit
    /// belongs to (docs/rate-limits.md).
    key_id: String,
}

impl Http {
    pub fn new(
        provider: &'static str,
        vars: EnvVars,
        timeouts: Timeouts,
        headers: HeaderMap,
        key: Option<ApiKey>,
    ) -> Result<Http, ModelError> {
        // Same-origin redirects only (crate::net): a base URL answering 307 elsewhere
        // must not receive the key and the transcript (issue 12).
        let client = crate::net::client_builder()
            .connect_timeout(timeouts.connect)
            .default_headers(headers)
            .build()
            .map_err(|e| {
                ModelError::Config(format!("{provider}: cannot build HTTP client: {e}"))
            })?;
        let mut secrets = crate::redact::Secrets::default();
        if let Some(key) = &key {
            secrets.add(key.expose());
        }
        let key_id = key.as_ref().map_or_else(String::new, |k| {
            use sha2::Digest;
            let digest = sha2::Sha256::digest(k.expose().as_bytes());
            digest[..8].iter().map(|b| format!("{b:02x}")).collect()
        });
        Ok(Http {
            provider,
            vars,
            client,
            timeouts,
            secrets,
            key_id,
        })
    }

    /// Also scrubs the credentials in `url`'s userinfo out of every message (reqwest
    /// sends them as `Authorization: Basic`, which a server may echo too).
    pub fn scrub_url(mut self, url: &Url) -> Http {
        self.secrets.add_url(url.as_str());
        self
    }

    /// What this provider must never show: its key and URL credentials.
    pub fn secrets(&self) -> &crate::redact::Secrets {
        &self.secrets
    }

    /// Where requests go and with which key, as a rate-limit key: the URL without
    /// credentials and a digest of the key.
    pub fn limit_endpoint(&self, url: &Url) -> String {
        format!("{}#{}", crate::redact::url_shown(url.as_str()), self.key_id)
    }

    /// One POST of `body`; a 2xx body is decoded into `T`, anything else is an error.
    pub async fn post<T: DeserializeOwned>(
        &self,
        url: &Url,
        body: &Value,
    ) -> Result<T, ModelError> {
        let total = self.timeouts.total;
        let bytes = match tokio::time::timeout(total, self.post_bytes(url, body)).await {
            Ok(r) => r?,
            Err(_) => return Err(self.timeout(url, total, TimeoutKind::Total)),
        };
        self.decode(&bytes)
    }

    pub fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, ModelError> {
        serde_json::from_slice(bytes).map_err(|e| self.bad_response(format!("{e}")))
    }

    async fn post_bytes(&self, url: &Url, body: &Value) -> Result<Vec<u8>, ModelError> {
        let mut resp = self.send(url, body).await?;
        // Read the whole body before judging it: a connection cut mid-body is a
        // transport error (transient), a complete body that does not parse is not.
        let mut bytes = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.transport(url, e))? {
            self.append(&mut bytes, &chunk)?;
        }
        Ok(bytes)
    }

    async fn send(&self, url: &Url, body: &Value) -> Result<reqwest::Response, ModelError> {
        let mut resp = self
            .client
            .post(url.clone())
            .json(body)
            .send()
            .await
            .map_err(|e| self.transport(url, e))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let headers = resp.headers().clone();
        // Only the start of an error body is read (issue 22: an 800 MB error body was
        // read whole); the rest is dropped with the connection.
        let mut bytes = Vec::new();
        while bytes.len() < MAX_ERROR_BODY_BYTES {
            match resp.chunk().await.map_err(|e| self.transport(url, e))? {
                Some(chunk) => bytes.extend_from_slice(&chunk),
                None => break,
            }
        }
        bytes.truncate(MAX_ERROR_BODY_BYTES);
        Err(self.status_error(url, status, &headers, &bytes))
    }

    fn append(&self, bytes: &mut Vec<u8>, chunk: &[u8]) -> Result<(), ModelError> {
        if bytes.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(self.bad_response(format!(
                "the response is larger than {} MiB; refused",
                MAX_BODY_BYTES / (1024 * 1024)
            )));
        }
        bytes.extend_from_slice(chunk);
        Ok(())
    }

    /// One streaming POST: each server-sent event goes to `on_event` as it arrives.
    ///
    /// The idle limit applies to the response headers and to every gap between chunks,
    /// the total limit to the whole attempt. A stream that ends (or breaks) before the
    /// provider's end marker is a [`ModelError::Connection`] — transient, so the retry
    /// layer asks again, and the caller never returns a partial turn as a finished one.
    pub async fn post_stream(
        &self,
        url: &Url,
        body: &Value,
        mut on_event: impl FnMut(SseEvent) -> Result<Flow, ModelError>,
    ) -> Result<Streamed, ModelError> {
        let total = self.timeouts.total;
        let deadline = tokio::time::Instant::now() + total;
        let within = |limit: Duration| {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left < limit {
                (left, TimeoutKind::Total)
            } else {
                (limit, TimeoutKind::Idle)
            }
        };
        let (wait, kind) = within(self.timeouts.idle);
        let mut resp = match tokio::time::timeout(wait, self.send(url, body)).await {
            Ok(r) => r?,
            Err(_) => return Err(self.timeout(url, self.limit(kind), kind)),
        };
        let is_sse = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let mut parser = SseParser::default();
        let mut seen = 0usize;
        let mut json = Vec::new();
        loop {
            let (wait, kind) = within(self.timeouts.idle);
            let chunk = match tokio::time::timeout(wait, resp.chunk()).await {
                Ok(r) => r.map_err(|e| self.transport(url, e))?,
                Err(_) => return Err(self.timeout(url, self.limit(kind), kind)),
            };
            let Some(chunk) = chunk else { break };
            if !is_sse {
                self.append(&mut json, &chunk)?;
                continue;
            }
            seen += chunk.len();
            if seen > MAX_BODY_BYTES {
                return Err(self.bad_response(format!(
                    "the stream is larger than {} MiB; refused",
                    MAX_BODY_BYTES / (1024 * 1024)
                )));
            }
            for ev in parser.feed(&chunk) {
                if let Flow::Done = on_event(ev)? {
                    return Ok(Streamed::Done);
                }
            }
        }
        if !is_sse {
            return Ok(Streamed::Json(json));
        }
        if let Some(ev) = parser.finish()
            && let Flow::Done = on_event(ev)?
        {
            return Ok(Streamed::Done);
        }
        Ok(Streamed::Ended)
    }

    /// A stream that ended before the response was complete: transient, like any
    /// connection dropped mid-answer.
    pub fn cut_short(&self, url: &Url) -> ModelError {
        ModelError::Connection {
            provider: self.provider,
            host: host_of(url),
            message: "the stream ended before the response was complete".into(),
        }
    }

    fn limit(&self, kind: TimeoutKind) -> Duration {
        match kind {
            TimeoutKind::Idle => self.timeouts.idle,
            TimeoutKind::Total => self.timeouts.total,
        }
    }

    fn timeout(&self, url: &Url, timeout: Duration, kind: TimeoutKind) -> ModelError {
        ModelError::Timeout {
            provider: self.provider,
            host: host_of(url),
            timeout,
            idle: kind == TimeoutKind::Idle,
        }
    }

    pub fn bad_response(&self, message: String) -> ModelError {
        ModelError::BadResponse {
            provider: self.provider,
            message: self.redact(message),
        }
    }

    fn transport(&self, url: &Url, err: reqwest::Error) -> ModelError {
        if err.is_timeout() {
            return ModelError::Timeout {
                provider: self.provider,
                host: host_of(url),
                timeout: self.timeouts.connect,
                idle: false,
            };
        }
        if let Some(refused) = crate::net::redirect_refused(&err) {
            // Permanent: the same request gets the same redirect.
            return self.bad_response(refused.to_string());
        }
        if is_refused(&err) {
            return ModelError::Refused {
                provider: self.provider,
                host: host_of(url),
                base_var: self.vars.base_url,
            };
        }
        // Everything else on the way there or back (reset, closed early, DNS, TLS)
        // means the server never gave a full answer: worth another attempt.
        ModelError::Connection {
            provider: self.provider,
            host: host_of(url),
            message: self.redact(error_chain(&err.without_url())),
        }
    }

    fn status_error(
        &self,
        url: &Url,
        status: StatusCode,
        headers: &HeaderMap,
        body: &[u8],
    ) -> ModelError {
        let mut message = self.redact(error_message(status, body));
        if status == StatusCode::UNAUTHORIZED {
            // The server's text ("Incorrect API key provided") never says which
            // variable holds the key, nor where it went (issue 27).
            message.push_str(&format!(
                " — check {}: it was sent to {} ({})",
                self.vars.key,
                crate::redact::url_shown(url.as_str()),
                self.vars.base_url
            ));
        }
        ModelError::Status {
            provider: self.provider,
            status: status.as_u16(),
            message,
            retry_after: backoff::retry_after(headers, SystemTime::now()),
            should_retry: should_retry(headers),
        }
    }

    pub fn redact(&self, message: String) -> String {
        self.secrets.text(&message)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TimeoutKind {
    Idle,
    Total,
}

/// Whether the connection was refused (nothing listens at the address).
fn is_refused(err: &reqwest::Error) -> bool {
    let mut source: Option<&dyn std::error::Error> = Some(err);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        source = e.source();
    }
    false
}

/// `host:port` of a URL, for error messages that say where agentrun was trying to go.
pub(crate) fn host_of(url: &Url) -> String {
    let host = url.host_str().unwrap_or("?");
    match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    }
}

/// An error and its sources, `a: b: c`, since reqwest's own `Display` stops at the top.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        out.push_str(": ");
        out.push_str(&e.to_string());
        source = e.source();
    }
    out
}

/// `x-should-retry: true|false` (Anthropic, and OpenAI's SDKs honour it too): the server
/// knows better than the status code whether this particular failure is worth a retry.
fn should_retry(headers: &HeaderMap) -> Option<bool> {
    match headers.get("x-should-retry")?.to_str().ok()?.trim() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// The human message out of an error body. OpenAI and Anthropic put it in
/// `error.message`; OpenRouter adds the upstream detail in `error.metadata.raw` (and
/// makes `error.code` an integer, which is why this walks a `Value` rather than a typed
/// struct); vLLM puts `message` at the top level, FastAPI-style servers use `detail`,
/// Ollama's native errors are `{"error": "..."}`. Anything else: the body text itself.
fn error_message(status: StatusCode, body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        let err = &v["error"];
        if let Some(msg) = err["message"].as_str() {
            return match err["metadata"]["raw"].as_str() {
                Some(raw) => format!("{msg} ({raw})"),
                None => msg.to_string(),
            };
        }
        let found = [err, &v["message"], &v["detail"]]
            .into_iter()
            .find_map(|m| m.as_str());
        if let Some(msg) = found {
            return msg.to_string();
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return status
            .canonical_reason()
            .unwrap_or("no message")
            .to_string();
    }
    // An HTML error page from a proxy can be long; the start says what it is.
    crate::text::truncate(text, 500)
}

/// The text a tool result is sent as (both APIs take a string): a JSON string value is
/// sent as its raw text, anything else as its JSON text — the JSON the model sees
/// (docs/ARCHITECTURE.md §4).
pub(crate) fn result_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msg(status: u16, body: &str) -> String {
        error_message(StatusCode::from_u16(status).unwrap(), body.as_bytes())
    }

    #[test]
    fn error_messages_come_from_every_known_body_shape() {
        assert_eq!(
            msg(400, r#"{"error":{"message":"bad","code":null}}"#),
            "bad"
        );
        assert_eq!(
            msg(
                429,
                r#"{"error":{"code":429,"message":"Provider returned error","metadata":{"raw":"slow down"}}}"#
            ),
            "Provider returned error (slow down)"
        );
        assert_eq!(
            msg(400, r#"{"object":"error","message":"vllm says no"}"#),
            "vllm says no"
        );
        assert_eq!(
            msg(404, r#"{"error":"model not found"}"#),
            "model not found"
        );
        assert_eq!(msg(422, r#"{"detail":"nope"}"#), "nope");
        assert_eq!(
            msg(502, "<html>Bad Gateway</html>"),
            "<html>Bad Gateway</html>"
        );
        assert_eq!(msg(503, ""), "Service Unavailable");
    }

    #[test]
    fn an_api_key_does_not_print() {
        let key = ApiKey::new("sk-secret-123").unwrap();
        assert_eq!(format!("{key:?}"), "ApiKey([redacted])");
        assert_eq!(ApiKey::new("  "), None);
    }

    #[test]
    fn endpoints_accept_a_trailing_slash() {
        let a = endpoint("http://h:1/v1", "chat/completions", "X").unwrap();
        let b = endpoint("http://h:1/v1/", "chat/completions", "X").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.as_str(), "http://h:1/v1/chat/completions");
        assert!(matches!(
            endpoint("not a url", "x", "X"),
            Err(ModelError::Config(_))
        ));
    }

    #[test]
    fn tool_results_are_sent_as_text() {
        assert_eq!(result_text(&json!("plain")), "plain");
        assert_eq!(result_text(&json!({"a": 1})), r#"{"a":1}"#);
        assert_eq!(result_text(&json!(42)), "42");
    }
}
