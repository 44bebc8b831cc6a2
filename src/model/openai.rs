//! OpenAI Chat Completions (and compatible servers: vLLM, Ollama, llama.cpp, LiteLLM,
//! OpenRouter, the Hugging Face router). Streaming (SSE, `stream: true`) by default;
//! one POST and one JSON answer when `stream = false` — or when a server ignores the
//! flag and answers with JSON anyway.
//!
//! The wire format is built with `json!` and read with lenient serde structs: compatible
//! servers add, drop and null fields freely (the HF router sends `tool_calls: []`,
//! OpenRouter adds `metadata`), so only what agentrun needs is required.

use super::Delta;
use super::settings::{ModelSettings, ToolChoice};
use super::sse::SseEvent;
use super::wire::{self, ApiKey, Flow, Http, Streamed, Timeouts};
use super::{Message, ModelError, ModelRequest, ModelResponse, Part, Role, StopReason, Usage};
use reqwest::Url;
use reqwest::header::HeaderMap;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;

const PROVIDER: &str = "openai";
const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
const ENV_VARS: wire::EnvVars = wire::EnvVars {
    key: "OPENAI_API_KEY",
    base_url: "OPENAI_BASE_URL",
};

/// Everything needed to talk to one OpenAI-compatible endpoint.
#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    pub model: String,
    /// e.g. `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1`; a trailing slash
    /// is fine.
    pub base_url: String,
    /// `None` for local servers that need none: then no `Authorization` header is sent.
    pub api_key: Option<ApiKey>,
    pub timeouts: Timeouts,
    pub stream: bool,
    pub temperature: Option<f64>,
    pub tool_choice: Option<ToolChoice>,
    /// `prompt_cache`: `None` sends `prompt_cache_key` only to api.openai.com.
    pub prompt_cache: Option<bool>,
}

/// Which field carries the output-token cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TokenField {
    /// api.openai.com: `max_tokens` is deprecated there and rejected outright by the
    /// o-series and newer models ("Use 'max_completion_tokens' instead").
    MaxCompletionTokens,
    /// Everything else. Ollama, LM Studio and older llama.cpp servers *silently ignore*
    /// `max_completion_tokens`, which would make the cap unlimited; every compatible
    /// server (vLLM, Ollama, llama.cpp, LiteLLM, OpenRouter, HF router) reads `max_tokens`.
    MaxTokens,
}

impl TokenField {
    fn for_url(url: &Url) -> TokenField {
        match url.host_str() {
            Some("api.openai.com") => TokenField::MaxCompletionTokens,
            _ => TokenField::MaxTokens,
        }
    }

    fn name(self) -> &'static str {
        match self {
            TokenField::MaxCompletionTokens => "max_completion_tokens",
            TokenField::MaxTokens => "max_tokens",
        }
    }
}

pub struct OpenAi {
    model: String,
    url: Url,
    token_field: TokenField,
    http: Http,
    stream: bool,
    temperature: Option<f64>,
    tool_choice: Option<ToolChoice>,
    /// Send the run id as `prompt_cache_key` (issue 23): requests of one run then
    /// reach the same cache. Unknown to other servers, so off for them by default.
    cache_key: bool,
}

impl std::fmt::Debug for OpenAi {
    // By hand: the client's default headers hold the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAi")
            .field("model", &self.model)
            .field("url", &crate::redact::url_shown(self.url.as_str()))
            .finish_non_exhaustive()
    }
}

impl OpenAi {
    /// Reads `OPENAI_API_KEY` (optional) and `OPENAI_BASE_URL` (default
    /// `https://api.openai.com/v1`) from the environment.
    pub fn from_env(model: &str, settings: &ModelSettings) -> Result<OpenAi, ModelError> {
        OpenAi::new(config_from(model, settings, |var| std::env::var(var).ok()))
    }

    pub fn new(config: OpenAiConfig) -> Result<OpenAi, ModelError> {
        let url = wire::endpoint(&config.base_url, "chat/completions", "OPENAI_BASE_URL")?;
        if config.api_key.is_none() && needs_key(&url) {
            return Err(ModelError::Config(format!(
                "OPENAI_API_KEY is not set: model `openai:{}` at {} needs an API key in the \
                 environment (a local server needs none: set OPENAI_BASE_URL to it)",
                config.model,
                wire::host_of(&url)
            )));
        }
        let mut headers = HeaderMap::new();
        if let Some(key) = &config.api_key {
            let (name, value) = wire::secret_header(
                "authorization",
                format!("Bearer {}", key.expose()),
                "OPENAI_API_KEY",
            )?;
            headers.insert(name, value);
        }
        let http = Http::new(PROVIDER, ENV_VARS, config.timeouts, headers, config.api_key)?
            .scrub_url(&url);
        let cache_key = config
            .prompt_cache
            .unwrap_or(url.host_str() == Some("api.openai.com"));
        Ok(OpenAi {
            model: config.model,
            cache_key,
            token_field: TokenField::for_url(&url),
            url,
            http,
            stream: config.stream,
            temperature: config.temperature,
            tool_choice: config.tool_choice,
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
        format!("openai:{}", self.model)
    }

    /// One attempt.
    pub async fn complete(&self, req: &ModelRequest<'_>) -> Result<ModelResponse, ModelError> {
        let mut body = request_body(&self.model, self.token_field, req);
        if self.cache_key && !req.cache_key.is_empty() {
            body["prompt_cache_key"] = json!(req.cache_key);
        }
        if let Some(t) = self.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(choice) = &self.tool_choice
            && !req.tools.is_empty()
        {
            body["tool_choice"] = tool_choice(choice);
        }
        let (message, stop, usage) = if self.stream {
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
            self.stream(req, &body).await?
        } else {
            let resp: ChatResponse = self.http.post(&self.url, &body).await?;
            resp.into_parts().map_err(|m| self.http.bad_response(m))?
        };
        Ok(ModelResponse {
            message,
            usage,
            stop,
            model: self.name(),
        })
    }

    async fn stream(
        &self,
        req: &ModelRequest<'_>,
        body: &Value,
    ) -> Result<(Message, StopReason, Usage), ModelError> {
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
            Streamed::Json(bytes) => {
                let resp: ChatResponse = self.http.decode(&bytes)?;
                resp.into_parts().map_err(|m| self.http.bad_response(m))
            }
            // Without `[DONE]` a stream that gave its finish reason is still whole
            // (some compatible servers close right after it); without either it was
            // cut, and a cut turn is never returned as a finished one.
            Streamed::Ended if acc.finish.is_none() => Err(self.http.cut_short(&self.url)),
            Streamed::Done | Streamed::Ended => Ok(acc.into_parts()),
        }
    }
}

fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::Required => json!("required"),
        ToolChoice::None => json!("none"),
        ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
    }
}

// ---- streaming -------------------------------------------------------------------

enum AccError {
    /// Not readable: a permanent bad response.
    Bad(String),
    /// The server reported an error inside the stream.
    Api(ModelError),
}

/// A chat completion being assembled from `chat.completion.chunk` deltas.
#[derive(Default)]
struct StreamAcc {
    text: String,
    /// By the delta's `index`: the id and name come in the first delta of a call, the
    /// arguments as string pieces in the following ones.
    calls: BTreeMap<u64, PartialCall>,
    finish: Option<String>,
    usage: Option<WireUsage>,
    timings: Option<Timings>,
}

#[derive(Default)]
struct PartialCall {
    id: Option<String>,
    name: String,
    args: String,
}

impl StreamAcc {
    fn event(&mut self, ev: SseEvent, live: &dyn Fn(Delta)) -> Result<Flow, AccError> {
        let data = ev.data.trim();
        if data == "[DONE]" {
            return Ok(Flow::Done);
        }
        if data.is_empty() {
            return Ok(Flow::More);
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| AccError::Bad(format!("stream event is not JSON ({e}): {data:.200}")))?;
        if let Some(err) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(AccError::Api(stream_error(err)));
        }
        if let Some(u) = chunk.get("usage").filter(|u| !u.is_null()) {
            self.usage = serde_json::from_value(u.clone()).ok();
        }
        if let Some(t) = chunk.get("timings").filter(|t| !t.is_null()) {
            self.timings = serde_json::from_value(t.clone()).ok();
        }
        let Some(choice) = chunk["choices"].as_array().and_then(|c| c.first()) else {
            return Ok(Flow::More);
        };
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str()
            && !text.is_empty()
        {
            self.text.push_str(text);
            live(Delta::Text(text.to_string()));
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().unwrap_or(self.calls.len() as u64);
            let entry = self.calls.entry(index).or_default();
            if let Some(id) = call["id"].as_str().filter(|s| !s.is_empty()) {
                entry.id = Some(id.to_string());
            }
            if let Some(name) = call["function"]["name"].as_str().filter(|s| !s.is_empty()) {
                if entry.name.is_empty() {
                    live(Delta::ToolCall {
                        name: name.to_string(),
                    });
                }
                entry.name.push_str(name);
            }
            match &call["function"]["arguments"] {
                Value::String(piece) => entry.args.push_str(piece),
                Value::Null => {}
                // A server that sends the arguments as an object at once.
                other => entry.args.push_str(&other.to_string()),
            }
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            self.finish = Some(reason.to_string());
        }
        Ok(Flow::More)
    }

    fn into_parts(self) -> (Message, StopReason, Usage) {
        let mut content = Vec::new();
        if !self.text.is_empty() {
            content.push(Part::Text { text: self.text });
        }
        for (i, (_, call)) in self.calls.into_iter().enumerate() {
            content.push(Part::ToolCall {
                id: call.id.unwrap_or_else(|| format!("call_{i}")),
                name: call.name,
                args: arguments(Value::String(call.args)),
            });
        }
        let stop = finish_reason(self.finish.as_deref());
        let usage = neutral_usage(self.usage, self.timings);
        (
            Message {
                role: Role::Assistant,
                content,
            },
            stop,
            usage,
        )
    }
}

/// An `error` object inside a stream (OpenRouter: `{"code": 400, "message": …}` with
/// an HTTP-like code): classified like the same status would be.
fn stream_error(err: &Value) -> ModelError {
    let message = err["message"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| err.to_string());
    let status = err["code"]
        .as_u64()
        .or_else(|| err["code"].as_str().and_then(|c| c.parse().ok()))
        .filter(|c| (400..600).contains(c))
        .unwrap_or(500);
    ModelError::Status {
        provider: PROVIDER,
        status: status as u16,
        message: format!("error in the stream: {message}"),
        retry_after: None,
        should_retry: None,
    }
}

/// Public endpoints that always want a key: without one the run would only fail
/// later with a 401 (or, offline, a DNS error), after it was recorded (issue 13).
/// Local and self-hosted servers may need none, so any other host is asked as it is.
fn needs_key(url: &Url) -> bool {
    const PUBLIC: &[&str] = &[
        "api.openai.com",
        "openrouter.ai",
        "api.groq.com",
        "api.together.xyz",
        "api.mistral.ai",
        "api.deepseek.com",
        "api.fireworks.ai",
        "router.huggingface.co",
        "generativelanguage.googleapis.com",
    ];
    url.host_str().is_some_and(|h| PUBLIC.contains(&h))
}

/// `from_env` minus the environment, so tests need not mutate process state.
fn config_from(
    model: &str,
    settings: &ModelSettings,
    var: impl Fn(&str) -> Option<String>,
) -> OpenAiConfig {
    OpenAiConfig {
        model: model.to_string(),
        base_url: var("OPENAI_BASE_URL")
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_BASE_URL.to_string()),
        api_key: var("OPENAI_API_KEY").and_then(ApiKey::new),
        timeouts: settings.timeouts(),
        stream: settings.stream,
        temperature: settings.temperature,
        tool_choice: settings.tool_choice.clone(),
        prompt_cache: settings.prompt_cache,
    }
}

// ---- request ---------------------------------------------------------------------

fn request_body(model: &str, token_field: TokenField, req: &ModelRequest<'_>) -> Value {
    let mut body = json!({
        "model": model,
        "messages": messages(req),
        token_field.name(): req.max_output_tokens,
    });
    // An empty `tools` list is rejected by some servers ("[] is too short"): omit it.
    if !req.tools.is_empty() {
        body["tools"] = req
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.input_schema,
                }})
            })
            .collect();
    }
    // A structured answer (issue 26): the API's JSON mode, strict where the schema
    // allows; agentrun checks the answer either way.
    if let Some(format) = req.output.and_then(|o| o.response_format()) {
        body["response_format"] = format;
    }
    body
}

/// The system prompt first and only there; agentrun's notes — those in the transcript
/// and the per-step one, last — as user-role text (issue 23): many chat templates
/// (Mistral's, Gemma's, Llama 2's) reject a system message after the first.
fn messages(req: &ModelRequest<'_>) -> Vec<Value> {
    let mut out = Vec::new();
    if !req.system.is_empty() {
        out.push(json!({"role": "system", "content": req.system}));
    }
    for m in req.messages {
        push_message(&mut out, m);
    }
    if !req.note.is_empty() {
        push_user_text(&mut out, req.note.to_string());
    }
    out
}

/// User-role text, joined to a user message right before it: templates that want
/// roles to alternate reject two user messages in a row.
fn push_user_text(out: &mut Vec<Value>, text: String) {
    if let Some(last) = out.last_mut()
        && last["role"] == "user"
        && let Some(before) = last["content"].as_str()
    {
        last["content"] = Value::String(format!("{before}\n\n{text}"));
        return;
    }
    out.push(json!({"role": "user", "content": text}));
}

fn push_message(out: &mut Vec<Value>, m: &Message) {
    match m.role {
        Role::Assistant => out.push(assistant(m)),
        // One `tool` message per result, as the API pairs them by `tool_call_id`. Chat
        // Completions has no error flag: the content is already the error object the
        // model is meant to read (docs/ARCHITECTURE.md §4).
        Role::Tool => {
            for part in &m.content {
                if let Part::ToolResult {
                    call_id, content, ..
                } = part
                {
                    out.push(json!({"role": "tool", "tool_call_id": call_id,
                                    "content": wire::result_text(content)}));
                }
            }
            push_text(out, m);
        }
        Role::System | Role::User => push_text(out, m),
    }
}

/// The message's text parts as user-role text, if it has any.
fn push_text(out: &mut Vec<Value>, m: &Message) {
    if m.content.iter().any(|p| matches!(p, Part::Text { .. })) {
        push_user_text(out, m.joined_text());
    }
}

fn assistant(m: &Message) -> Value {
    let text = m.joined_text();
    // `content: null` rather than "" when the turn was only tool calls, as OpenAI itself
    // returns it; some compatible servers reject an empty string next to tool calls.
    let content = if text.is_empty() {
        Value::Null
    } else {
        Value::String(text)
    };
    let mut msg = json!({"role": "assistant", "content": content});
    let calls: Vec<Value> = m
        .tool_calls()
        .into_iter()
        .map(|c| {
            json!({"id": c.id, "type": "function",
                   "function": {"name": c.name, "arguments": c.args.to_string()}})
        })
        .collect();
    if !calls.is_empty() {
        msg["tool_calls"] = Value::Array(calls);
    }
    msg
}

// ---- response --------------------------------------------------------------------

#[derive(Deserialize)]
struct ChatResponse {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    /// Some proxies answer 200 with an error object instead of choices.
    #[serde(default)]
    error: Option<Value>,
    /// llama.cpp's own count of the prompt: evaluated and taken from its cache.
    #[serde(default)]
    timings: Option<Timings>,
}

/// llama.cpp's `timings`: `prompt_n` tokens evaluated, `cache_n` reused from its KV
/// cache (the OpenAI-style usage of that server has no cached count).
#[derive(Deserialize)]
struct Timings {
    #[serde(default)]
    prompt_n: Option<u64>,
    #[serde(default)]
    cache_n: Option<u64>,
}

/// The neutral usage from the `usage` object and, where a server sends them,
/// llama.cpp's `timings` (which say what came from its cache).
fn neutral_usage(usage: Option<WireUsage>, timings: Option<Timings>) -> Usage {
    let mut out = usage.map(WireUsage::neutral).unwrap_or_default();
    if let Some(t) = timings
        && let Some(cache_n) = t.cache_n
        && out.cached == 0
    {
        out.cached = cache_n;
        // The prompt is what was evaluated plus what was reused.
        out.input = out.input.max(cache_n + t.prompt_n.unwrap_or(0));
    }
    out
}

#[derive(Deserialize)]
struct Choice {
    message: ChoiceMessage,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct ChoiceMessage {
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    tool_calls: Option<Vec<WireCall>>,
}

#[derive(Deserialize)]
struct WireCall {
    #[serde(default)]
    id: Option<String>,
    function: WireFunction,
}

#[derive(Deserialize)]
struct WireFunction {
    name: String,
    #[serde(default)]
    arguments: Value,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    /// Together (behind the HF router) reports it at the top level.
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

impl ChatResponse {
    fn into_parts(self) -> Result<(Message, StopReason, Usage), String> {
        let usage = neutral_usage(self.usage, self.timings);
        let Some(choice) = self.choices.into_iter().next() else {
            let why = self.error.map(|e| format!(": {e}")).unwrap_or_default();
            return Err(format!("no choices in the response{why}"));
        };
        let stop = finish_reason(choice.finish_reason.as_deref());
        Ok((choice.message.neutral(), stop, usage))
    }
}

impl ChoiceMessage {
    fn neutral(self) -> Message {
        let mut content = Vec::new();
        let text = text_of(self.content);
        if !text.is_empty() {
            content.push(Part::Text { text });
        }
        // `tool_calls: null`, absent and `[]` (HF router) all mean "no calls".
        for (i, call) in self.tool_calls.unwrap_or_default().into_iter().enumerate() {
            content.push(Part::ToolCall {
                // A tool result must name its call; a server that omits ids still gets
                // stable, unique ones.
                id: call
                    .id
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| format!("call_{i}")),
                name: call.function.name,
                args: arguments(call.function.arguments),
            });
        }
        Message {
            role: Role::Assistant,
            content,
        }
    }
}

/// `content` is a string, null, or (some compatible servers) a list of text parts.
fn text_of(content: Option<Value>) -> String {
    match content {
        Some(Value::String(s)) => s,
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// `arguments` is a JSON *string*. When it does not parse (models do emit truncated or
/// invalid JSON, especially when cut by max_tokens), it is kept as a JSON string value
/// instead of failing the whole response: the call then fails schema validation as a
/// `malformed` result the model can see and correct (docs/ARCHITECTURE.md §4), which a provider
/// error could not give it. An empty string means "no arguments"; a server that sends
/// an object is taken at its word.
fn arguments(raw: Value) -> Value {
    match raw {
        Value::String(s) if s.trim().is_empty() => json!({}),
        Value::String(s) => serde_json::from_str(&s).unwrap_or(Value::String(s)),
        Value::Null => json!({}),
        other => other,
    }
}

fn finish_reason(reason: Option<&str>) -> StopReason {
    match reason {
        Some("stop") => StopReason::EndTurn,
        Some("tool_calls") => StopReason::ToolUse,
        Some("length") => StopReason::MaxTokens,
        Some(other) => StopReason::Other(other.to_string()),
        None => StopReason::Other("none".to_string()),
    }
}

impl WireUsage {
    fn neutral(self) -> Usage {
        let cached = self
            .prompt_tokens_details
            .and_then(|d| d.cached_tokens)
            .or(self.cached_tokens);
        Usage {
            // `prompt_tokens` already includes the cached ones.
            input: self.prompt_tokens.unwrap_or(0),
            output: self.completion_tokens.unwrap_or(0),
            cached: cached.unwrap_or(0),
            cache_write: 0,
            ..Default::default()
        }
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
            max_output_tokens: 256,
            live: None,
            purpose: crate::model::Purpose::Step,
            turns_left_out: 0,
            output: None,
            limits: None,
        }
    }

    fn transcript() -> Vec<Message> {
        vec![
            Message::text(Role::User, "refund window?"),
            Message {
                role: Role::Assistant,
                content: vec![Part::ToolCall {
                    id: "c1".into(),
                    name: "search_kb".into(),
                    args: json!({"q": "refund"}),
                }],
            },
            Message::tool_result("c1", json!({"days": 30}), false),
            Message::tool_result("c2", json!("plain text"), true),
        ]
    }

    #[test]
    fn builds_the_chat_completions_body() {
        let tools = [ToolSpec {
            name: "search_kb".into(),
            description: "Search".into(),
            input_schema: json!({"type": "object"}),
        }];
        let msgs = transcript();
        let body = request_body("m", TokenField::MaxTokens, &req("be brief", &msgs, &tools));
        assert_eq!(
            body,
            json!({
                "model": "m",
                "max_tokens": 256,
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "refund window?"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function",
                         "function": {"name": "search_kb", "arguments": "{\"q\":\"refund\"}"}}]},
                    {"role": "tool", "tool_call_id": "c1", "content": "{\"days\":30}"},
                    {"role": "tool", "tool_call_id": "c2", "content": "plain text"},
                ],
                "tools": [{"type": "function", "function": {
                    "name": "search_kb", "description": "Search", "parameters": {"type": "object"}}}],
            })
        );
    }

    #[test]
    fn omits_empty_system_and_tools() {
        let msgs = [Message::text(Role::User, "hi")];
        let body = request_body("m", TokenField::MaxTokens, &req("", &msgs, &[]));
        assert_eq!(body["messages"], json!([{"role": "user", "content": "hi"}]));
        assert!(body.get("tools").is_none());
    }

    #[test]
    fn openai_itself_gets_max_completion_tokens() {
        let official = Url::parse("https://api.openai.com/v1/chat/completions").unwrap();
        let local = Url::parse("http://127.0.0.1:11434/v1/chat/completions").unwrap();
        assert_eq!(
            TokenField::for_url(&official),
            TokenField::MaxCompletionTokens
        );
        assert_eq!(TokenField::for_url(&local), TokenField::MaxTokens);
        let body = request_body("m", TokenField::MaxCompletionTokens, &req("", &[], &[]));
        assert_eq!(body["max_completion_tokens"], 256);
        assert!(body.get("max_tokens").is_none());
    }

    #[test]
    fn assistant_text_and_calls_travel_together() {
        let m = Message {
            role: Role::Assistant,
            content: vec![
                Part::Text {
                    text: "let me look".into(),
                },
                Part::ToolCall {
                    id: "c".into(),
                    name: "t".into(),
                    args: json!({}),
                },
            ],
        };
        let v = assistant(&m);
        assert_eq!(v["content"], "let me look");
        assert_eq!(v["tool_calls"][0]["function"]["arguments"], "{}");
    }

    #[test]
    fn unparsable_arguments_are_kept_as_a_string() {
        assert_eq!(arguments(json!("{\"q\": \"x\"}")), json!({"q": "x"}));
        assert_eq!(arguments(json!("{\"q\": \"x")), json!("{\"q\": \"x"));
        assert_eq!(arguments(json!("")), json!({}));
        assert_eq!(arguments(json!({"a": 1})), json!({"a": 1}));
    }

    #[test]
    fn reads_a_response_with_empty_tool_calls_and_top_level_cached_tokens() {
        let resp: ChatResponse = serde_json::from_value(json!({
            "choices": [{"message": {"content": "hi", "tool_calls": []}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 4, "completion_tokens": 100, "cached_tokens": 2},
        }))
        .unwrap();
        let (msg, stop, usage) = resp.into_parts().unwrap();
        assert_eq!(msg, Message::text(Role::Assistant, "hi"));
        assert_eq!(stop, StopReason::MaxTokens);
        assert_eq!(
            usage,
            Usage {
                input: 4,
                output: 100,
                cached: 2,
                cache_write: 0,
                ..Default::default()
            }
        );
    }

    #[test]
    fn no_choices_is_a_bad_response() {
        let resp: ChatResponse =
            serde_json::from_value(json!({"error": {"message": "upstream died"}})).unwrap();
        let err = resp.into_parts().unwrap_err();
        assert!(err.contains("upstream died"), "{err}");
    }

    #[test]
    fn the_environment_is_read_and_the_key_is_optional() {
        let none = config_from("m", &ModelSettings::default(), |_| None);
        assert_eq!(none.base_url, DEFAULT_BASE_URL);
        assert_eq!(none.api_key, None);
        let set = config_from("m", &ModelSettings::default(), |v| match v {
            "OPENAI_BASE_URL" => Some("http://127.0.0.1:11434/v1/".into()),
            "OPENAI_API_KEY" => Some("sk-x".into()),
            _ => None,
        });
        assert_eq!(set.base_url, "http://127.0.0.1:11434/v1/");
        assert_eq!(set.api_key, ApiKey::new("sk-x"));
        assert!(!format!("{set:?}").contains("sk-x"));
    }
}
