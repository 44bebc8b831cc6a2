//! Anthropic Messages API (`POST {base}/v1/messages`). Streaming (SSE) by default,
//! one JSON answer with `stream = false`.
//!
//! The neutral transcript differs from Anthropic's in two ways this module bridges:
//! tool results are `tool_result` blocks inside a *user* message (so consecutive tool
//! messages become one user message), and there is no system role inside `messages`.

use super::Delta;
use super::output::{ANSWER_TOOL, OutputSpec};
use super::settings::{CacheTtl, ModelSettings, ToolChoice};
use super::sse::SseEvent;
use super::wire::{self, ApiKey, Flow, Http, Streamed, Timeouts};
use super::{Message, ModelError, ModelRequest, ModelResponse, Part, Role, StopReason, Usage};
use reqwest::Url;
use reqwest::header::{HeaderMap, HeaderValue};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;

const PROVIDER: &str = "anthropic";
const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
const ENV_VARS: wire::EnvVars = wire::EnvVars {
    key: "ANTHROPIC_API_KEY",
    base_url: "ANTHROPIC_BASE_URL",
};
const API_VERSION: &str = "2023-06-01";

/// Everything needed to talk to the Messages API.
#[derive(Debug, Clone)]
pub struct AnthropicConfig {
    pub model: String,
    /// Without `/v1`, as the Anthropic SDKs take it: `https://api.anthropic.com`.
    pub base_url: String,
    pub api_key: ApiKey,
    pub timeouts: Timeouts,
    pub stream: bool,
    pub temperature: Option<f64>,
    pub tool_choice: Option<ToolChoice>,
    /// `cache_control` breakpoints with this lifetime; `None`: none (issue 23).
    pub prompt_cache: Option<CacheTtl>,
}

pub struct Anthropic {
    model: String,
    url: Url,
    http: Http,
    stream: bool,
    temperature: Option<f64>,
    tool_choice: Option<ToolChoice>,
    prompt_cache: Option<CacheTtl>,
}

impl std::fmt::Debug for Anthropic {
    // By hand: the client's default headers hold the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Anthropic")
            .field("model", &self.model)
            .field("url", &crate::redact::url_shown(self.url.as_str()))
            .finish_non_exhaustive()
    }
}

impl Anthropic {
    /// Reads `ANTHROPIC_API_KEY` (required) and `ANTHROPIC_BASE_URL` (default
    /// `https://api.anthropic.com`) from the environment.
    pub fn from_env(model: &str, settings: &ModelSettings) -> Result<Anthropic, ModelError> {
        Anthropic::new(config_from(model, settings, |var| std::env::var(var).ok())?)
    }

    pub fn new(config: AnthropicConfig) -> Result<Anthropic, ModelError> {
        let url = wire::endpoint(&config.base_url, "v1/messages", "ANTHROPIC_BASE_URL")?;
        let mut headers = HeaderMap::new();
        let (name, value) = wire::secret_header(
            "x-api-key",
            config.api_key.expose().to_string(),
            "ANTHROPIC_API_KEY",
        )?;
        headers.insert(name, value);
        headers.insert("anthropic-version", HeaderValue::from_static(API_VERSION));
        let http = Http::new(
            PROVIDER,
            ENV_VARS,
            config.timeouts,
            headers,
            Some(config.api_key),
        )?
        .scrub_url(&url);
        Ok(Anthropic {
            model: config.model,
            url,
            http,
            stream: config.stream,
            temperature: config.temperature,
            tool_choice: config.tool_choice,
            prompt_cache: config.prompt_cache,
        })
    }

    /// The endpoint, for messages that say where agentrun is waiting.
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// Its key and URL credentials, to redact what the server echoes.
    pub(crate) fn secrets(&self) -> &crate::redact::Secrets {
        self.http.secrets()
    }

    /// The endpoint and key a rate limit of this model belongs to.
    pub(crate) fn limit_endpoint(&self) -> String {
        self.http.limit_endpoint(&self.url)
    }

    pub fn name(&self) -> String {
        format!("anthropic:{}", self.model)
    }

    /// One attempt.
    pub async fn complete(&self, req: &ModelRequest<'_>) -> Result<ModelResponse, ModelError> {
        let mut body = request_body(&self.model, req, self.prompt_cache);
        if let Some(t) = self.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(choice) = &self.tool_choice
            && !req.tools.is_empty()
        {
            body["tool_choice"] = tool_choice(choice);
        }
        if let Some(spec) = req.output {
            offer_answer_tool(&mut body, spec, self.tool_choice.is_none());
        }
        let resp = if self.stream {
            body["stream"] = json!(true);
            self.stream(req, &body).await?
        } else {
            self.http.post(&self.url, &body).await?
        };
        Ok(ModelResponse {
            stop: stop_reason(resp.stop_reason.as_deref()),
            usage: resp.usage.map(WireUsage::neutral).unwrap_or_default(),
            message: match req.output {
                Some(spec) => answer_as_text(spec, neutral(resp.content)),
                None => neutral(resp.content),
            },
            model: self.name(),
        })
    }

    async fn stream(
        &self,
        req: &ModelRequest<'_>,
        body: &Value,
    ) -> Result<MessagesResponse, ModelError> {
        let name = self.name();
        let mut acc = StreamAcc::default();
        let streamed = self
            .http
            .post_stream(&self.url, body, |ev| {
                acc.event(ev, &|d| {
                    if let Some(live) = req.live {
                        live.delta(&name, &d);
                    }
                })
                .map_err(|e| match e {
                    AccError::Bad(m) => self.http.bad_response(m),
                    AccError::Api(e) => e,
                })
            })
            .await?;
        match streamed {
            Streamed::Json(bytes) => self.http.decode(&bytes),
            Streamed::Done => acc.into_response().map_err(|m| self.http.bad_response(m)),
            // No `message_stop`: cut, and a cut turn is never a finished one.
            Streamed::Ended => Err(self.http.cut_short(&self.url)),
        }
    }
}

/// A structured answer (issue 26): Anthropic has no JSON mode, so the answer comes
/// through [`ANSWER_TOOL`], offered beside the tools; unless the task chose otherwise,
/// the model must call a tool (`any`): another tool, or this one to answer.
fn offer_answer_tool(body: &mut Value, spec: &OutputSpec, force: bool) {
    let t = spec.tool_spec();
    let tool =
        json!({"name": t.name, "description": t.description, "input_schema": t.input_schema});
    match body["tools"].as_array_mut() {
        Some(tools) => tools.push(tool),
        None => body["tools"] = json!([tool]),
    }
    if force {
        body["tool_choice"] = json!({"type": "any"});
    }
}

/// The model's call of [`ANSWER_TOOL`] becomes the answer's text: the machine sees an
/// answer, as from any provider, and the transcript holds no call without a result.
fn answer_as_text(spec: &OutputSpec, message: Message) -> Message {
    let content = message
        .content
        .into_iter()
        .map(|p| match p {
            Part::ToolCall { name, args, .. } if name == ANSWER_TOOL => Part::Text {
                text: spec.answer_from_tool(&args),
            },
            other => other,
        })
        .collect();
    Message { content, ..message }
}

fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!({"type": "auto"}),
        ToolChoice::Required => json!({"type": "any"}),
        ToolChoice::None => json!({"type": "none"}),
        ToolChoice::Tool(name) => json!({"type": "tool", "name": name}),
    }
}

// ---- streaming -------------------------------------------------------------------

enum AccError {
    Bad(String),
    Api(ModelError),
}

/// A message being assembled from `message_start`, `content_block_*`,
/// `message_delta` and `message_stop` events.
#[derive(Default)]
struct StreamAcc {
    blocks: BTreeMap<u64, PartialBlock>,
    stop_reason: Option<String>,
    usage: Option<Value>,
}

enum PartialBlock {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        /// `input_json_delta` pieces; the start's `input` when none came.
        json: String,
        start_input: Value,
    },
    Other,
}

impl StreamAcc {
    fn event(&mut self, ev: SseEvent, live: &dyn Fn(Delta)) -> Result<Flow, AccError> {
        let data = ev.data.trim();
        if data.is_empty() {
            return Ok(Flow::More);
        }
        let v: Value = serde_json::from_str(data)
            .map_err(|e| AccError::Bad(format!("stream event is not JSON ({e}): {data:.200}")))?;
        let kind = v["type"]
            .as_str()
            .or(ev.event.as_deref())
            .unwrap_or_default()
            .to_string();
        match kind.as_str() {
            "message_start" => self.merge_usage(&v["message"]["usage"]),
            "content_block_start" => {
                let index = v["index"].as_u64().unwrap_or(self.blocks.len() as u64);
                let b = &v["content_block"];
                let block = match b["type"].as_str() {
                    Some("text") => {
                        let text = b["text"].as_str().unwrap_or_default().to_string();
                        if !text.is_empty() {
                            live(Delta::Text(text.clone()));
                        }
                        PartialBlock::Text(text)
                    }
                    Some("tool_use") => {
                        let name = b["name"].as_str().unwrap_or_default().to_string();
                        live(Delta::ToolCall { name: name.clone() });
                        PartialBlock::ToolUse {
                            id: b["id"].as_str().unwrap_or_default().to_string(),
                            name,
                            json: String::new(),
                            start_input: b["input"].clone(),
                        }
                    }
                    _ => PartialBlock::Other,
                };
                self.blocks.insert(index, block);
            }
            "content_block_delta" => {
                let index = v["index"].as_u64().unwrap_or_default();
                let d = &v["delta"];
                match (self.blocks.get_mut(&index), d["type"].as_str()) {
                    (Some(PartialBlock::Text(text)), Some("text_delta")) => {
                        let piece = d["text"].as_str().unwrap_or_default();
                        text.push_str(piece);
                        live(Delta::Text(piece.to_string()));
                    }
                    (Some(PartialBlock::ToolUse { json, .. }), Some("input_json_delta")) => {
                        json.push_str(d["partial_json"].as_str().unwrap_or_default());
                    }
                    (None, _) => {
                        return Err(AccError::Bad(format!(
                            "content_block_delta for block {index}, which never started"
                        )));
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(r) = v["delta"]["stop_reason"].as_str() {
                    self.stop_reason = Some(r.to_string());
                }
                self.merge_usage(&v["usage"]);
            }
            "message_stop" => return Ok(Flow::Done),
            "error" => return Err(AccError::Api(stream_error(&v["error"]))),
            // ping, content_block_stop, and event types added later.
            _ => {}
        }
        Ok(Flow::More)
    }

    /// `message_delta` usage is cumulative: a field it carries replaces the start's.
    fn merge_usage(&mut self, u: &Value) {
        let Some(fields) = u.as_object() else { return };
        let usage = self.usage.get_or_insert_with(|| json!({}));
        for (k, val) in fields {
            if !val.is_null() {
                usage[k] = val.clone();
            }
        }
    }

    fn into_response(self) -> Result<MessagesResponse, String> {
        let mut content = Vec::new();
        for (_, b) in self.blocks {
            content.push(match b {
                PartialBlock::Text(text) => Block::Text { text },
                PartialBlock::ToolUse {
                    id,
                    name,
                    json,
                    start_input,
                } => {
                    let input = if json.trim().is_empty() {
                        start_input
                    } else {
                        // Unparsable input is kept as a string: the call then fails
                        // schema validation as `malformed`, which the model can fix.
                        serde_json::from_str(&json).unwrap_or(Value::String(json))
                    };
                    Block::ToolUse { id, name, input }
                }
                PartialBlock::Other => Block::Other,
            });
        }
        let usage = match self.usage {
            Some(u) => serde_json::from_value(u).map_err(|e| format!("usage: {e}"))?,
            None => None,
        };
        Ok(MessagesResponse {
            content,
            stop_reason: self.stop_reason,
            usage,
        })
    }
}

/// An `error` event mid-stream, classified like the status the same error type gets
/// as an HTTP answer (overloaded 529, rate limit 429, api_error 500, …).
fn stream_error(err: &Value) -> ModelError {
    let kind = err["type"].as_str().unwrap_or("api_error");
    let status = match kind {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "overloaded_error" => 529,
        _ => 500,
    };
    ModelError::Status {
        provider: PROVIDER,
        status,
        message: format!(
            "error in the stream: {} ({kind})",
            err["message"].as_str().unwrap_or("no message")
        ),
        retry_after: None,
        should_retry: None,
    }
}

/// `from_env` minus the environment, so tests need not mutate process state.
fn config_from(
    model: &str,
    settings: &ModelSettings,
    var: impl Fn(&str) -> Option<String>,
) -> Result<AnthropicConfig, ModelError> {
    let api_key = var("ANTHROPIC_API_KEY").and_then(ApiKey::new).ok_or_else(|| {
        ModelError::Config(format!(
            "ANTHROPIC_API_KEY is not set: model `anthropic:{model}` needs an Anthropic API key \
             in the environment"
        ))
    })?;
    Ok(AnthropicConfig {
        model: model.to_string(),
        base_url: var("ANTHROPIC_BASE_URL")
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_BASE_URL.to_string()),
        api_key,
        timeouts: settings.timeouts(),
        stream: settings.stream,
        temperature: settings.temperature,
        tool_choice: settings.tool_choice.clone(),
        // On unless the task says `prompt_cache = false`.
        prompt_cache: (settings.prompt_cache != Some(false)).then_some(settings.prompt_cache_ttl),
    })
}

// ---- request ---------------------------------------------------------------------

/// The request; with `cache`, two `cache_control` breakpoints (issue 23): one on the
/// system prompt (or the last tool, without one), which caches the tools and the
/// system prompt — the same bytes at every step of a run — and one on the last block
/// (the budget note, when one is sent): the next step's request starts with all of
/// this one, reads it from the cache and pays only for what is new.
fn request_body(model: &str, req: &ModelRequest<'_>, cache: Option<CacheTtl>) -> Value {
    let marker = cache.map(|ttl| match ttl {
        CacheTtl::FiveMinutes => json!({"type": "ephemeral"}),
        CacheTtl::OneHour => json!({"type": "ephemeral", "ttl": "1h"}),
    });
    let (system, messages) = translate(req, marker.as_ref());
    let mut body = json!({
        "model": model,
        "max_tokens": req.max_output_tokens,
        "messages": messages,
    });
    if !req.tools.is_empty() {
        let mut tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
            .collect();
        if let (Some(m), true, Some(last)) = (&marker, system.is_empty(), tools.last_mut()) {
            last["cache_control"] = m.clone();
        }
        body["tools"] = Value::Array(tools);
    }
    if !system.is_empty() {
        body["system"] = match &marker {
            Some(m) => json!([{"type": "text", "text": system, "cache_control": m}]),
            None => Value::String(system),
        };
    }
    body
}

/// The system text and the `messages` array.
///
/// System messages in the transcript: those *before* the conversation starts belong to
/// the instructions and are appended to the top-level `system` field. Later ones (a
/// nudge the runner adds mid-run) become user text at their place, because their
/// timing is their meaning and `system` has no position.
fn translate(req: &ModelRequest<'_>, marker: Option<&Value>) -> (String, Vec<Value>) {
    let mut system: Vec<&str> = Vec::new();
    if !req.system.is_empty() {
        system.push(req.system);
    }
    let leading = req
        .messages
        .iter()
        .position(|m| m.role != Role::System)
        .unwrap_or(req.messages.len());
    let joined: Vec<String> = req.messages[..leading]
        .iter()
        .map(Message::joined_text)
        .collect();
    system.extend(joined.iter().map(String::as_str).filter(|s| !s.is_empty()));
    let mut out = Turns::default();
    for m in &req.messages[leading..] {
        out.push(m);
    }
    // Last, after the tool results; the next request starts with all of this one
    // (the note stays in the context), so the breakpoint goes on the very end.
    out.push(&Message::text(Role::User, req.note));
    if let Some(m) = marker
        && let Some(block) = out
            .0
            .last_mut()
            .and_then(|msg| msg["content"].as_array_mut())
            .and_then(|blocks| blocks.last_mut())
    {
        block["cache_control"] = m.clone();
    }
    (system.join("\n\n"), out.0)
}

/// Messages being built, merging consecutive user-side content (tool results, user
/// text) into one user message: Anthropic wants every result of one assistant turn in
/// the single user message that follows it, and roles to alternate.
#[derive(Default)]
struct Turns(Vec<Value>);

impl Turns {
    fn push(&mut self, m: &Message) {
        let role = match m.role {
            Role::Assistant => "assistant",
            Role::User | Role::Tool | Role::System => "user",
        };
        let blocks: Vec<Value> = m.content.iter().filter_map(block).collect();
        if blocks.is_empty() {
            // Anthropic rejects empty content; an empty message says nothing anyway.
            return;
        }
        match self.0.last_mut() {
            Some(last) if last["role"] == role => {
                if let Some(content) = last["content"].as_array_mut() {
                    content.extend(blocks);
                }
            }
            _ => self.0.push(json!({"role": role, "content": blocks})),
        }
    }
}

fn block(part: &Part) -> Option<Value> {
    match part {
        // Empty text blocks are rejected by the API.
        Part::Text { text } if text.is_empty() => None,
        Part::Text { text } => Some(json!({"type": "text", "text": text})),
        Part::ToolCall { id, name, args } => {
            Some(json!({"type": "tool_use", "id": id, "name": name, "input": args}))
        }
        Part::ToolResult {
            call_id,
            content,
            is_error,
        } => Some(json!({"type": "tool_result", "tool_use_id": call_id,
                         "content": wire::result_text(content), "is_error": is_error})),
    }
}

// ---- response --------------------------------------------------------------------

#[derive(Deserialize)]
struct MessagesResponse {
    /// Required: a 2xx without it is not a message (BadResponse).
    content: Vec<Block>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    /// Thinking, server tools, citations blocks and whatever comes next: not ours.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

impl WireUsage {
    /// Anthropic's `input_tokens` leaves out tokens written to or read from the cache;
    /// OpenAI's `prompt_tokens` includes them. Neutral `input` means the whole prompt (as
    /// OpenAI does), so token budgets mean the same on both; `cached` is the part read
    /// from the cache, `cache_write` the part written to it.
    fn neutral(self) -> Usage {
        let cached = self.cache_read_input_tokens.unwrap_or(0);
        let cache_write = self.cache_creation_input_tokens.unwrap_or(0);
        Usage {
            input: self.input_tokens.unwrap_or(0) + cache_write + cached,
            output: self.output_tokens.unwrap_or(0),
            cached,
            cache_write,
            ..Default::default()
        }
    }
}

fn neutral(blocks: Vec<Block>) -> Message {
    let content = blocks
        .into_iter()
        .filter_map(|b| match b {
            Block::Text { text } if text.is_empty() => None,
            Block::Text { text } => Some(Part::Text { text }),
            Block::ToolUse { id, name, input } => Some(Part::ToolCall {
                id,
                name,
                // A tool without parameters may come back with no input at all.
                args: if input.is_null() { json!({}) } else { input },
            }),
            Block::Other => None,
        })
        .collect();
    Message {
        role: Role::Assistant,
        content,
    }
}

fn stop_reason(reason: Option<&str>) -> StopReason {
    match reason {
        Some("end_turn") => StopReason::EndTurn,
        Some("tool_use") => StopReason::ToolUse,
        Some("max_tokens") => StopReason::MaxTokens,
        Some("stop_sequence") => StopReason::StopSequence,
        Some(other) => StopReason::Other(other.to_string()),
        None => StopReason::Other("none".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolSpec;

    fn req<'a>(
        system: &'a str,
        messages: &'a [Message],
        tools: &'a [ToolSpec],
    ) -> ModelRequest<'a> {
        ModelRequest {
            system,
            messages,
            note: "",
            cache_key: "",
            tools,
            max_output_tokens: 512,
            live: None,
            purpose: crate::model::Purpose::Step,
            turns_left_out: 0,
            output: None,
            limits: None,
        }
    }

    fn call(id: &str) -> Part {
        Part::ToolCall {
            id: id.into(),
            name: "search_kb".into(),
            args: json!({"q": id}),
        }
    }

    #[test]
    fn consecutive_tool_results_share_one_user_message() {
        let msgs = vec![
            Message::text(Role::User, "go"),
            Message {
                role: Role::Assistant,
                content: vec![
                    Part::Text {
                        text: "two calls".into(),
                    },
                    call("a"),
                    call("b"),
                ],
            },
            Message::tool_result("a", json!({"ok": 1}), false),
            Message::tool_result("b", json!("boom"), true),
        ];
        let tools = [ToolSpec {
            name: "search_kb".into(),
            description: "Search".into(),
            input_schema: json!({"type": "object"}),
        }];
        let body = request_body("claude", &req("sys", &msgs, &tools), None);
        assert_eq!(
            body,
            json!({
                "model": "claude",
                "max_tokens": 512,
                "system": "sys",
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "go"}]},
                    {"role": "assistant", "content": [
                        {"type": "text", "text": "two calls"},
                        {"type": "tool_use", "id": "a", "name": "search_kb", "input": {"q": "a"}},
                        {"type": "tool_use", "id": "b", "name": "search_kb", "input": {"q": "b"}}]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "a", "content": "{\"ok\":1}", "is_error": false},
                        {"type": "tool_result", "tool_use_id": "b", "content": "boom", "is_error": true}]},
                ],
                "tools": [{"name": "search_kb", "description": "Search", "input_schema": {"type": "object"}}],
            })
        );
    }

    #[test]
    fn leading_system_messages_join_the_system_field_later_ones_stay_in_place() {
        let msgs = vec![
            Message::text(Role::System, "stored prompt"),
            Message::text(Role::User, "go"),
            Message {
                role: Role::Assistant,
                content: vec![call("a")],
            },
            Message::tool_result("a", json!(1), false),
            Message::text(Role::System, "you are repeating yourself"),
        ];
        let body = request_body("m", &req("base", &msgs, &[]), None);
        assert_eq!(body["system"], "base\n\nstored prompt");
        assert_eq!(body["messages"].as_array().unwrap().len(), 3);
        assert_eq!(
            body["messages"][2]["content"],
            json!([
                {"type": "tool_result", "tool_use_id": "a", "content": "1", "is_error": false},
                {"type": "text", "text": "you are repeating yourself"}])
        );
        assert!(body.get("tools").is_none());
    }

    #[test]
    fn no_system_field_when_there_is_none() {
        let msgs = [Message::text(Role::User, "hi")];
        assert!(
            request_body("m", &req("", &msgs, &[]), None)
                .get("system")
                .is_none()
        );
    }

    #[test]
    fn reads_blocks_ignoring_unknown_ones_and_fields() {
        let resp: MessagesResponse = serde_json::from_value(json!({
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "x"},
                {"type": "text", "text": "ok", "citations": null},
                {"type": "tool_use", "id": "t", "name": "n", "input": {"a": 1}, "caller": {"type": "direct"}}],
            "stop_reason": "pause_turn", "stop_details": null,
            "usage": {"input_tokens": 10, "output_tokens": 3, "cache_creation_input_tokens": 5,
                      "cache_read_input_tokens": 100, "inference_geo": "x"},
        }))
        .unwrap();
        assert_eq!(
            stop_reason(resp.stop_reason.as_deref()),
            StopReason::Other("pause_turn".into())
        );
        assert_eq!(
            resp.usage.unwrap().neutral(),
            Usage {
                input: 115,
                output: 3,
                cached: 100,
                cache_write: 5,
                ..Default::default()
            }
        );
        let msg = neutral(resp.content);
        assert_eq!(msg.joined_text(), "ok");
        assert_eq!(msg.tool_calls()[0].args, json!({"a": 1}));
    }

    #[test]
    fn a_missing_key_names_the_variable() {
        let err = config_from("claude", &ModelSettings::default(), |_| None).unwrap_err();
        assert!(
            matches!(&err, ModelError::Config(m) if m.contains("ANTHROPIC_API_KEY")),
            "{err}"
        );
        let ok = config_from("claude", &ModelSettings::default(), |v| {
            (v == "ANTHROPIC_API_KEY").then(|| "sk-ant-secret".to_string())
        })
        .unwrap();
        assert_eq!(ok.base_url, DEFAULT_BASE_URL);
        assert!(!format!("{ok:?}").contains("sk-ant-secret"));
    }
}
