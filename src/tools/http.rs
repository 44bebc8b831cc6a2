//! HTTP tools (docs/ARCHITECTURE.md §3.2): one attempt fills the URL template from the arguments,
//! sends the request with one shared client and maps the status to an error kind.
//!
//! The model chooses only path and query text: placeholders are refused in the scheme,
//! host and port (`config::validate::check_url_template`, at load and again per call), values are
//! percent-encoded with everything but RFC 3986 unreserved characters escaped (so a
//! value can never add a `/`, `?`, `&` or `#`), and a whole path segment of `.` or `..`
//! is refused because URL parsing would resolve it into a different path.
//!
//! Statuses outside the contract's list: other 4xx are `tool_bug` (the request's shape
//! comes from tools.toml, not from the model, so the tool's owner must look; the model
//! is told not to retry), except 410 Gone, which is `not_found`. Other 5xx (501, 505…)
//! say the server will not do this at all, so they are `tool_bug` too, not retried.

use super::CallContext;
use super::outcome::{AttemptResult, ErrorKind, ToolError};
use crate::backoff;
use crate::config::types::{HttpSpec, ToolDef};
use crate::config::validate;
use crate::config::validate::Placeholder;
use crate::redact::Secrets;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Client, Method, Response, StatusCode, Url};
use serde_json::Value;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::rc::Rc;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

/// Everything except RFC 3986 unreserved characters is escaped.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');
/// How much of an error response's body goes into the error message.
const BODY_TAIL: usize = 500;

pub async fn run(
    spec: &HttpSpec,
    def: &ToolDef,
    args: &Value,
    ctx: &CallContext<'_>,
) -> AttemptResult {
    let secrets = secrets_of(spec, |name| std::env::var(name).ok());
    // The call's span, so the service joins the run's trace (telemetry off: none).
    let traceparent = crate::telemetry::traceparent(ctx.run_id, ctx.call_id);
    let result = send(spec, def, args, traceparent).await;
    super::redacted(result, &secrets)
}

/// The secret values one attempt uses: what each `${VAR}` in a header expands to, and
/// credentials written into the URL (docs/ARCHITECTURE.md §5: none of them is ever stored).
pub fn secrets_of(spec: &HttpSpec, env: impl Fn(&str) -> Option<String>) -> Secrets {
    let mut secrets = Secrets::default();
    for template in spec.headers.values() {
        let mut rest = template.as_str();
        while let Some(start) = rest.find("${") {
            let Some(len) = rest[start + 2..].find('}') else {
                break;
            };
            if let Some(value) = env(&rest[start + 2..start + 2 + len]) {
                secrets.add(&value);
            }
            rest = &rest[start + 3 + len..];
        }
    }
    if let Some(userinfo) = crate::redact::url_credentials(&spec.url) {
        secrets.add(userinfo);
    }
    secrets
}

async fn send(
    spec: &HttpSpec,
    def: &ToolDef,
    args: &Value,
    traceparent: Option<String>,
) -> AttemptResult {
    let tool = def.name.as_str();
    let url = fill_url(&spec.url, args).map_err(prefixed(tool))?;
    let method = Method::from_bytes(spec.method.to_ascii_uppercase().as_bytes()).map_err(|_| {
        ToolError::new(
            ErrorKind::ToolBug,
            format!("{tool}: bad HTTP method `{}`", spec.method),
        )
    })?;
    let mut headers =
        expand_headers(&spec.headers, |name| std::env::var(name).ok()).map_err(prefixed(tool))?;
    // A `traceparent` the tool's config sets itself is kept.
    if let Some(tp) = traceparent.and_then(|tp| HeaderValue::from_str(&tp).ok())
        && !headers.contains_key("traceparent")
    {
        headers.insert(HeaderName::from_static("traceparent"), tp);
    }
    let mut request = client()?
        .request(method.clone(), url)
        .headers(headers)
        .timeout(def.retry.timeout);
    if method != Method::GET && method != Method::HEAD {
        request = request.json(args);
    }
    let transport = |e: reqwest::Error| transport_error(tool, def.retry.timeout, &e);
    let response = request.send().await.map_err(transport)?;
    let status = response.status();
    let retry_after = backoff::retry_after(response.headers(), SystemTime::now());
    let body = read_capped(response, spec.output_cap)
        .await
        .map_err(transport)?;
    classify(tool, status, &body, retry_after)
}

/// One client for the process: it pools connections, and building one is not cheap.
fn client() -> Result<&'static Client, ToolError> {
    static CLIENT: OnceLock<Result<Client, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            crate::net::client_builder()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| {
            ToolError::new(
                ErrorKind::ToolBug,
                format!("cannot build the HTTP client: {e}"),
            )
        })
}

/// Fills the template from `args`, percent-encoded (see the module doc). The template
/// is checked again here with the config's own rules, so a URL that escaped validation
/// still cannot let an argument reach the scheme, host or port.
pub fn fill_url(template: &str, args: &Value) -> Result<Url, ToolError> {
    let holes = checked_placeholders(template)
        .map_err(|e| ToolError::new(ErrorKind::ToolBug, format!("url template: {e}")))?;
    let invalid = |m: String| ToolError::new(ErrorKind::InvalidArguments, m);
    let query_at = template.find('?').unwrap_or(template.len());
    let mut filled = String::with_capacity(template.len());
    let mut last = 0;
    for hole in holes.iter() {
        let text = arg_text(args, &hole.name).map_err(invalid)?;
        let span = &hole.span;
        if span.start < query_at
            && is_whole_segment(template, span)
            && (text == "." || text == "..")
        {
            return Err(invalid(format!(
                "argument `{}` may not be `{text}`",
                hole.name
            )));
        }
        filled.push_str(&template[last..span.start]);
        filled.extend(utf8_percent_encode(&text, COMPONENT));
        last = span.end;
    }
    filled.push_str(&template[last..]);
    // Two placeholders can form a dot segment together (`{a}{b}` with `.` and `.`):
    // the path is checked again after substitution (issue 12 item 9).
    if dot_segments(&filled) > dot_segments(template) {
        return Err(invalid(
            "the arguments form a `.` or `..` path segment".to_string(),
        ));
    }
    Url::parse(&filled).map_err(|e| invalid(format!("the filled url is not valid: {e}")))
}

/// The template's placeholders once it passed [`validate::check_url_template`]. The
/// check depends on the template alone, so its verdict is kept per template for the
/// thread (issue 14: checking parsed the template as a URL on every call, ~10k
/// instructions); a worker that sees ever new templates starts the memo afresh.
fn checked_placeholders(template: &str) -> Result<Rc<[Placeholder]>, String> {
    type Memo = HashMap<String, Result<Rc<[Placeholder]>, String>>;
    thread_local! {
        static CHECKED: RefCell<Memo> = RefCell::new(HashMap::new());
    }
    const MAX_TEMPLATES: usize = 256;
    CHECKED.with(|memo| {
        if let Some(verdict) = memo.borrow().get(template) {
            return verdict.clone();
        }
        let verdict = validate::check_url_template(template)
            .and_then(|()| validate::url_placeholders(template))
            .map(Rc::from);
        let mut memo = memo.borrow_mut();
        if memo.len() >= MAX_TEMPLATES {
            memo.clear();
        }
        memo.insert(template.to_string(), verdict.clone());
        verdict
    })
}

/// How many `.`/`..` segments the path of `url` (after `scheme://host`) holds.
fn dot_segments(url: &str) -> usize {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[after_scheme..];
    let Some(path_at) = rest.find('/') else {
        return 0;
    };
    let path = &rest[path_at..];
    let path = &path[..path.find(['?', '#']).unwrap_or(path.len())];
    path.split('/').filter(|s| *s == "." || *s == "..").count()
}

/// Whether the placeholder at `span` is a whole path segment (`/{id}/`, `/{id}?`, …).
fn is_whole_segment(template: &str, span: &Range<usize>) -> bool {
    template[..span.start].ends_with('/')
        && (span.end == template.len() || template[span.end..].starts_with(['/', '?', '#']))
}

/// An argument as URL text: strings as they are, numbers and booleans printed.
fn arg_text(args: &Value, name: &str) -> Result<String, String> {
    match args.get(name) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(v @ (Value::Number(_) | Value::Bool(_))) => Ok(v.to_string()),
        None | Some(Value::Null) => Err(format!("missing argument `{name}` for the url")),
        Some(_) => Err(format!(
            "argument `{name}` must be a string, number or boolean to go in the url"
        )),
    }
}

/// Header templates with `${VAR}` read through `env`. Errors name the variable, never a
/// value; values are marked sensitive so they stay out of debug output.
pub fn expand_headers(
    templates: &BTreeMap<String, String>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<HeaderMap, ToolError> {
    let bug = |m: String| ToolError::new(ErrorKind::ToolBug, m);
    let mut headers = HeaderMap::new();
    for (name, template) in templates {
        let value = expand_vars(template, &env).map_err(|var| {
            bug(format!(
                "header `{name}` needs the environment variable `{var}`, which is not set"
            ))
        })?;
        let key = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| bug(format!("bad header name `{name}`")))?;
        let mut value = HeaderValue::from_str(&value).map_err(|_| {
            bug(format!(
                "header `{name}`: the value is not a valid header value"
            ))
        })?;
        value.set_sensitive(true);
        headers.insert(key, value);
    }
    Ok(headers)
}

/// Replaces `${VAR}`; the error is the name of the first unset variable.
fn expand_vars(template: &str, env: &impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        let Some(len) = rest[start + 2..].find('}') else {
            break;
        };
        let var = &rest[start + 2..start + 2 + len];
        out.push_str(&rest[..start]);
        out.push_str(&env(var).ok_or_else(|| var.to_string())?);
        rest = &rest[start + 3 + len..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A response body read up to a cap; the rest is not downloaded.
struct Body {
    bytes: Vec<u8>,
    cut: bool,
}

async fn read_capped(mut response: Response, cap: usize) -> Result<Body, reqwest::Error> {
    let mut body = Body {
        bytes: Vec::new(),
        cut: false,
    };
    while let Some(chunk) = response.chunk().await? {
        let room = cap.saturating_sub(body.bytes.len());
        body.bytes
            .extend_from_slice(&chunk[..chunk.len().min(room)]);
        if chunk.len() > room {
            body.cut = true;
            break;
        }
    }
    Ok(body)
}

impl Body {
    fn text(&self) -> String {
        let mut text = String::from_utf8_lossy(&self.bytes).into_owned();
        if self.cut {
            text.push_str(&format!("\n[output cut at {} bytes]", self.bytes.len()));
        }
        text
    }
}

/// The kind for a status, `None` for success (the table in docs/ARCHITECTURE.md §3.2).
pub fn status_kind(status: StatusCode) -> Option<ErrorKind> {
    use ErrorKind::*;
    Some(match status.as_u16() {
        200..=299 => return None,
        408 => Timeout,
        429 => RateLimited,
        500 => ServerError,
        502..=504 => Unavailable,
        400 | 422 => InvalidArguments,
        401 | 403 => PermissionDenied,
        404 | 410 => NotFound,
        409 => Conflict,
        _ => ToolBug,
    })
}

fn classify(
    tool: &str,
    status: StatusCode,
    body: &Body,
    retry_after: Option<Duration>,
) -> AttemptResult {
    let text = body.text();
    let Some(kind) = status_kind(status) else {
        let parsed = (!body.cut)
            .then(|| serde_json::from_str(&text).ok())
            .flatten();
        return Ok(parsed.unwrap_or(Value::String(text)));
    };
    let mut message = format!("{tool}: HTTP {status}");
    let detail = super::command::tail(&text, BODY_TAIL);
    if !detail.is_empty() {
        message.push_str(": ");
        message.push_str(&detail);
    }
    let mut err = ToolError::new(kind, message);
    if kind.is_retryable() {
        err.retry_after = retry_after;
    }
    // 429 and 503 refuse the request; 500, 502, 504 and 408 may come after it acted.
    err.not_acted = matches!(status.as_u16(), 429 | 503);
    Err(err)
}

fn transport_error(tool: &str, timeout: Duration, e: &reqwest::Error) -> ToolError {
    if let Some(refused) = crate::net::redirect_refused(e) {
        return ToolError::new(ErrorKind::Redirect, format!("{tool}: {refused}"));
    }
    if e.is_timeout() {
        let limit = humantime::format_duration(timeout);
        return ToolError::new(ErrorKind::Timeout, format!("{tool} exceeded {limit}"));
    }
    let kind = if e.is_builder() {
        ErrorKind::ToolBug
    } else {
        ErrorKind::Unavailable
    };
    let err = ToolError::new(kind, format!("{tool}: {}", error_chain(e)));
    // A failure to connect happens before any byte of the request is sent; a reset or
    // a broken body afterwards may come after the server acted.
    if e.is_connect() { err.not_acted() } else { err }
}

/// "outer: cause: root cause" — reqwest's own Display stops at the outermost layer.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Puts the tool's name in front of an error's message.
fn prefixed(tool: &str) -> impl Fn(ToolError) -> ToolError + '_ {
    move |e| ToolError {
        message: format!("{tool}: {}", e.message),
        ..e
    }
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
