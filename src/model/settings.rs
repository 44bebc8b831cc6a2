//! Model settings a task (front matter) or the command line chooses, with their
//! defaults; and the live view of a streamed answer.
//!
//! The settings are stored in the run's config snapshot, so a resumed run asks the
//! model exactly as it started (durations as milliseconds, plain numbers in JSON).

use super::prices::Price;
use super::retry::ModelRetryPolicy;
use super::wire::Timeouts;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Output-token cap per response when nothing says otherwise (Anthropic requires one).
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 4096;
/// Per attempt, whole response. Long enough for a 4096-token answer from a slow local
/// server when not streaming; with streaming the idle limit catches a dead server.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
/// Streaming: the longest silence before the first byte and between chunks.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Which tool the model must (or may) call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum ToolChoice {
    /// The model decides (the APIs' default).
    Auto,
    /// Some tool must be called (OpenAI `required`, Anthropic `any`).
    Required,
    /// No tool may be called.
    None,
    /// This tool must be called.
    Tool(String),
}

impl From<ToolChoice> for String {
    fn from(c: ToolChoice) -> String {
        match c {
            ToolChoice::Auto => "auto".into(),
            ToolChoice::Required => "required".into(),
            ToolChoice::None => "none".into(),
            ToolChoice::Tool(name) => format!("tool:{name}"),
        }
    }
}

impl TryFrom<String> for ToolChoice {
    type Error = String;
    fn try_from(s: String) -> Result<ToolChoice, String> {
        ToolChoice::parse(&s)
    }
}

impl ToolChoice {
    /// `auto`, `required` (or `any`), `none`, or `tool:NAME`.
    pub fn parse(s: &str) -> Result<ToolChoice, String> {
        match s.trim() {
            "auto" => Ok(ToolChoice::Auto),
            "required" | "any" => Ok(ToolChoice::Required),
            "none" => Ok(ToolChoice::None),
            other => match other.strip_prefix("tool:") {
                Some(name) if !name.trim().is_empty() => {
                    Ok(ToolChoice::Tool(name.trim().to_string()))
                }
                _ => Err(format!(
                    "tool_choice `{s}` is not one of auto, required, none, tool:NAME"
                )),
            },
        }
    }
}

/// Everything about how the model is asked, resolved (defaults filled in).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelSettings {
    pub max_output_tokens: u32,
    /// When a response is cut at `max_output_tokens`, it is asked again once with this
    /// larger cap (`None`: the same cap).
    pub max_output_tokens_retry: Option<u32>,
    pub temperature: Option<f64>,
    pub tool_choice: Option<ToolChoice>,
    /// Stream responses (SSE): live text, and an idle limit instead of one long wait.
    pub stream: bool,
    pub timeout_ms: u64,
    pub idle_timeout_ms: u64,
    pub connect_timeout_ms: u64,
    /// The model's context window in tokens; `None`: from [`known_context_window`].
    pub context_window: Option<u64>,
    /// Attempts per model call (the first included) on transient failures.
    pub attempts: u32,
    /// Backoff base and cap between attempts.
    pub backoff_ms: u64,
    pub max_backoff_ms: u64,
    /// A longer `Retry-After` than this is not waited for: the model fails
    /// `rate_limited`.
    pub max_retry_after_ms: u64,
    /// How long a model that failed is skipped by the rest of the run (breaker).
    pub cooldown_ms: u64,
    /// The run's own price for every model (`None`: the shipped table's, issue 15).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price: Option<Price>,
    /// Money budget in USD for the whole run (issue 15).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_cost: Option<f64>,
    /// Time budget for the whole run: wall-clock time it is driven, across resumes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_duration_ms: Option<u64>,
    /// Prompt-cache hints (issue 23): `None` = Anthropic's `cache_control` on, OpenAI's
    /// `prompt_cache_key` only at api.openai.com; `Some(true)` = both everywhere;
    /// `Some(false)` = neither.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_cache: Option<bool>,
    /// How long Anthropic keeps a cache entry.
    #[serde(skip_serializing_if = "CacheTtl::is_default")]
    pub prompt_cache_ttl: CacheTtl,
}

/// Anthropic's cache lifetimes: 5 minutes (the default; writes cost 1.25× input) or an
/// hour (2×).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum CacheTtl {
    #[default]
    #[serde(rename = "5m")]
    FiveMinutes,
    #[serde(rename = "1h")]
    OneHour,
}

impl CacheTtl {
    pub fn parse(s: &str) -> Result<CacheTtl, String> {
        match s.trim() {
            "5m" => Ok(CacheTtl::FiveMinutes),
            "1h" => Ok(CacheTtl::OneHour),
            other => Err(format!(
                "`prompt_cache_ttl` = \"{other}\" is not one of \"5m\", \"1h\" (the lifetimes Anthropic offers)"
            )),
        }
    }

    fn is_default(&self) -> bool {
        *self == CacheTtl::FiveMinutes
    }
}

impl Default for ModelSettings {
    fn default() -> Self {
        let d = ModelRetryPolicy::default();
        ModelSettings {
            max_output_tokens: DEFAULT_MAX_OUTPUT_TOKENS,
            max_output_tokens_retry: None,
            temperature: None,
            tool_choice: None,
            stream: true,
            timeout_ms: ms(DEFAULT_TIMEOUT),
            idle_timeout_ms: ms(DEFAULT_IDLE_TIMEOUT),
            connect_timeout_ms: ms(DEFAULT_CONNECT_TIMEOUT),
            context_window: None,
            attempts: d.attempts,
            backoff_ms: ms(d.base),
            max_backoff_ms: ms(d.max),
            max_retry_after_ms: ms(d.max_retry_after),
            cooldown_ms: ms(d.cooldown),
            price: None,
            max_cost: None,
            max_duration_ms: None,
            prompt_cache: None,
            prompt_cache_ttl: CacheTtl::FiveMinutes,
        }
    }
}

pub fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl ModelSettings {
    pub fn timeouts(&self) -> Timeouts {
        Timeouts {
            connect: Duration::from_millis(self.connect_timeout_ms),
            idle: Duration::from_millis(self.idle_timeout_ms),
            total: Duration::from_millis(self.timeout_ms),
        }
    }

    pub fn retry_policy(&self) -> ModelRetryPolicy {
        ModelRetryPolicy {
            attempts: self.attempts.max(1),
            base: Duration::from_millis(self.backoff_ms),
            max: Duration::from_millis(self.max_backoff_ms),
            max_retry_after: Duration::from_millis(self.max_retry_after_ms),
            cooldown: Duration::from_millis(self.cooldown_ms),
        }
    }

    /// The context window for `model` (a spec's model part): the setting, else the
    /// known default, else `None` (unknown: no compaction threshold).
    pub fn context_window_for(&self, model: &str) -> Option<u64> {
        self.context_window.or_else(|| known_context_window(model))
    }

    /// How the run prices its model calls.
    pub fn pricing(&self) -> super::prices::Pricing {
        super::prices::Pricing { given: self.price }
    }
}

/// Settings as given by the task's front matter or the command line: only what was
/// said. [`SettingsInput::apply`] lays one source over the defaults (or another).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SettingsInput {
    pub max_output_tokens: Option<u32>,
    pub max_output_tokens_retry: Option<u32>,
    pub temperature: Option<f64>,
    pub tool_choice: Option<ToolChoice>,
    pub stream: Option<bool>,
    pub timeout: Option<Duration>,
    pub idle_timeout: Option<Duration>,
    pub connect_timeout: Option<Duration>,
    pub context_window: Option<u64>,
    pub attempts: Option<u32>,
    pub backoff: Option<Duration>,
    pub max_backoff: Option<Duration>,
    pub max_retry_after: Option<Duration>,
    pub cooldown: Option<Duration>,
    pub price: Option<Price>,
    pub max_cost: Option<f64>,
    pub max_duration: Option<Duration>,
    pub prompt_cache: Option<bool>,
    pub prompt_cache_ttl: Option<CacheTtl>,
}

impl SettingsInput {
    pub fn apply(&self, s: &mut ModelSettings) {
        if let Some(v) = self.max_output_tokens {
            s.max_output_tokens = v;
        }
        if let Some(v) = self.max_output_tokens_retry {
            s.max_output_tokens_retry = Some(v);
        }
        if let Some(v) = self.temperature {
            s.temperature = Some(v);
        }
        if let Some(v) = &self.tool_choice {
            s.tool_choice = Some(v.clone());
        }
        if let Some(v) = self.stream {
            s.stream = v;
        }
        if let Some(v) = self.timeout {
            s.timeout_ms = ms(v);
        }
        if let Some(v) = self.idle_timeout {
            s.idle_timeout_ms = ms(v);
        }
        if let Some(v) = self.connect_timeout {
            s.connect_timeout_ms = ms(v);
        }
        if let Some(v) = self.context_window {
            s.context_window = Some(v);
        }
        if let Some(v) = self.attempts {
            s.attempts = v;
        }
        if let Some(v) = self.price {
            s.price = Some(v);
        }
        if let Some(v) = self.max_cost {
            s.max_cost = Some(v);
        }
        if let Some(v) = self.max_duration {
            s.max_duration_ms = Some(ms(v));
        }
        if let Some(v) = self.prompt_cache {
            s.prompt_cache = Some(v);
        }
        if let Some(v) = self.prompt_cache_ttl {
            s.prompt_cache_ttl = v;
        }
        for (from, to) in [
            (self.backoff, &mut s.backoff_ms),
            (self.max_backoff, &mut s.max_backoff_ms),
            (self.max_retry_after, &mut s.max_retry_after_ms),
            (self.cooldown, &mut s.cooldown_ms),
        ] {
            if let Some(v) = from {
                *to = ms(v);
            }
        }
    }

    /// Checks ranges; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(t) = self.temperature
            && !(0.0..=2.0).contains(&t)
        {
            return Err(format!("`temperature` must be between 0 and 2, got {t}"));
        }
        for (key, v) in [
            ("max_output_tokens", self.max_output_tokens),
            ("max_output_tokens_retry", self.max_output_tokens_retry),
        ] {
            if v == Some(0) {
                return Err(format!("`{key}` must be positive"));
            }
        }
        for (key, v) in [
            ("timeout", self.timeout),
            ("idle_timeout", self.idle_timeout),
            ("connect_timeout", self.connect_timeout),
        ] {
            if v.is_some_and(|d| d.is_zero()) {
                return Err(format!("`{key}` must be longer than 0s"));
            }
        }
        if self.attempts == Some(0) {
            return Err("`model_attempts` must be at least 1".into());
        }
        if self.context_window == Some(0) {
            return Err("`context_window` must be positive".into());
        }
        if let Some(p) = &self.price {
            p.validate()?;
        }
        if self.max_cost.is_some_and(|c| !(c.is_finite() && c > 0.0)) {
            return Err("`max_cost` must be a positive number of USD".into());
        }
        if self.max_duration.is_some_and(|d| d.is_zero()) {
            return Err("`max_duration` must be longer than 0s".into());
        }
        Ok(())
    }
}

/// A duration as written in a task or on the command line: `90s`, `10m`, `1m 30s`.
pub fn parse_duration(key: &str, v: &str) -> Result<Duration, String> {
    humantime::parse_duration(v.trim())
        .map_err(|e| format!("`{key}` = \"{v}\" is not a duration like \"90s\" or \"10m\": {e}"))
}

/// Context windows (tokens) of common models, by name prefix; longest prefix wins.
/// Overridable with `context_window` in the task.
const CONTEXT_WINDOWS: &[(&str, u64)] = &[
    ("gpt-4o", 128_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4-turbo", 128_000),
    ("gpt-4", 8_192),
    ("gpt-3.5-turbo", 16_385),
    ("gpt-5", 400_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
    ("claude-", 200_000),
    ("llama3.1", 131_072),
    ("llama3.2", 131_072),
    ("llama3", 8_192),
    ("qwen2.5", 32_768),
    ("qwen3", 40_960),
    ("mistral", 32_768),
    ("gemma3", 131_072),
    ("smollm2", 8_192),
];

pub fn known_context_window(model: &str) -> Option<u64> {
    let name = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    CONTEXT_WINDOWS
        .iter()
        .filter(|(prefix, _)| name.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, n)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_choice_reads_every_form() {
        assert_eq!(ToolChoice::parse("auto"), Ok(ToolChoice::Auto));
        assert_eq!(ToolChoice::parse("any"), Ok(ToolChoice::Required));
        assert_eq!(
            ToolChoice::parse("tool:lookup"),
            Ok(ToolChoice::Tool("lookup".into()))
        );
        assert!(ToolChoice::parse("tool:").is_err());
        assert!(ToolChoice::parse("always").is_err());
    }

    #[test]
    fn known_models_have_a_context_window_and_the_longest_prefix_wins() {
        assert_eq!(known_context_window("gpt-4o-mini"), Some(128_000));
        assert_eq!(known_context_window("gpt-4"), Some(8_192));
        assert_eq!(known_context_window("claude-sonnet-4-5"), Some(200_000));
        assert_eq!(
            known_context_window("Qwen/Qwen2.5-7B-Instruct"),
            Some(32_768)
        );
        assert_eq!(known_context_window("my-own-model"), None);
        let s = ModelSettings {
            context_window: Some(1000),
            ..ModelSettings::default()
        };
        assert_eq!(s.context_window_for("gpt-4o"), Some(1000));
    }

    #[test]
    fn old_snapshots_without_settings_get_the_defaults() {
        let s: ModelSettings = serde_json::from_str("{}").unwrap();
        assert_eq!(s, ModelSettings::default());
        let s: ModelSettings = serde_json::from_str(r#"{"tool_choice": "required"}"#).unwrap();
        assert_eq!(s.tool_choice, Some(ToolChoice::Required));
    }
}
