//! Provider-neutral conversation types.
//!
//! Every provider adapter translates to and from these; the store persists them as
//! JSON exactly in the shape of the `runs show --json` contract (docs/ARCHITECTURE.md §1), so the
//! serde representation here *is* the public format: change it only by extending.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One piece of a message's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    Text {
        text: String,
    },
    ToolCall {
        id: String,
        name: String,
        args: Value,
    },
    ToolResult {
        call_id: String,
        /// The JSON the model saw (docs/ARCHITECTURE.md §4): the tool's output, or an error object.
        content: Value,
        is_error: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Part>,
}

/// A tool call the model asked for, borrowed out of an assistant message.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub args: Value,
}

impl Message {
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        Message {
            role,
            content: vec![Part::Text { text: text.into() }],
        }
    }

    pub fn tool_result(call_id: impl Into<String>, content: Value, is_error: bool) -> Self {
        Message {
            role: Role::Tool,
            content: vec![Part::ToolResult {
                call_id: call_id.into(),
                content,
                is_error,
            }],
        }
    }

    /// All text parts joined by newlines; empty when there are none.
    pub fn joined_text(&self) -> String {
        let texts: Vec<&str> = self
            .content
            .iter()
            .filter_map(|p| match p {
                Part::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        texts.join("\n")
    }

    pub fn tool_calls(&self) -> Vec<ToolCall> {
        self.content
            .iter()
            .filter_map(|p| match p {
                Part::ToolCall { id, name, args } => Some(ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    args: args.clone(),
                }),
                _ => None,
            })
            .collect()
    }
}

/// Token usage reported by a provider for one model call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    /// Input tokens served from the provider's prompt cache, where reported (part of
    /// `input`).
    #[serde(default)]
    pub cached: u64,
    /// Input tokens written to the provider's prompt cache (Anthropic's
    /// `cache_creation_input_tokens`, priced at the write premium; part of `input`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write: u64,
    /// The provider reported no usage: these are agentrun's estimate
    /// ([`super::estimate`]), so budgets still hold (issue 22).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    pub fn total(&self) -> u64 {
        self.input + self.output
    }

    pub fn add(&mut self, other: Usage) {
        self.input += other.input;
        self.output += other.output;
        self.cached += other.cached;
        self.cache_write += other.cache_write;
        self.estimated |= other.estimated;
    }

    /// The share of input tokens read from the cache, 0 to 1; `None` without input.
    pub fn cache_hit_ratio(&self) -> Option<f64> {
        (self.input > 0).then(|| self.cached.min(self.input) as f64 / self.input as f64)
    }
}

/// Why the model stopped producing output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// A finished turn: a final answer, or tool calls to run.
    EndTurn,
    ToolUse,
    /// The output was cut by the provider's output-token limit: not a final answer.
    MaxTokens,
    StopSequence,
    Other(String),
}

/// What a model call returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelResponse {
    /// Always `Role::Assistant`.
    pub message: Message,
    pub usage: Usage,
    pub stop: StopReason,
    /// The model spec that answered (after any model fallback), e.g. `openai:gpt-4o-mini`.
    pub model: String,
}

/// A tool as offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

/// Everything a provider needs for one call.
#[derive(Clone)]
pub struct ModelRequest<'a> {
    /// The same bytes at every step of a run (issue 23).
    pub system: &'a str,
    pub messages: &'a [Message],
    /// agentrun's per-step note (budget, spend), sent after `messages` as user-role
    /// text: last, so everything before it can come from a prompt cache. Empty: none.
    pub note: &'a str,
    /// What the provider may group cached prompts by (the run id; OpenAI's
    /// `prompt_cache_key`). Empty: none.
    pub cache_key: &'a str,
    pub tools: &'a [ToolSpec],
    /// Output-token cap per response (Anthropic requires one).
    pub max_output_tokens: u32,
    /// Who sees a streamed answer as it arrives; `None`: nobody.
    pub live: Option<&'a dyn LiveSink>,
    /// A step, or a compaction's summary (issue 15).
    pub purpose: Purpose,
    /// Assistant turns of the run that are not in `messages` (compacted away): the
    /// scripted model counts them to pick its turn.
    pub turns_left_out: u32,
    /// What the final answer must be (issue 26): each provider asks for it natively
    /// where it can. `None` for free text, and for summaries.
    pub output: Option<&'a OutputSpec>,
    /// The rate limits the request waits its turn under (docs/rate-limits.md); `None`:
    /// it is sent at once.
    pub limits: Option<&'a crate::govern::Gate<'a>>,
}

/// What a model request is for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Purpose {
    /// The agent's next step.
    #[default]
    Step,
    /// A summary of earlier turns, to compact the context.
    Summary,
}

impl std::fmt::Debug for ModelRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelRequest")
            .field("system", &self.system)
            .field("messages", &self.messages)
            .field("note", &self.note)
            .field("cache_key", &self.cache_key)
            .field("tools", &self.tools)
            .field("max_output_tokens", &self.max_output_tokens)
            .field("live", &self.live.is_some())
            .field("purpose", &self.purpose)
            .field("turns_left_out", &self.turns_left_out)
            .field("output", &self.output)
            .finish()
    }
}

/// A piece of a streamed answer, as it arrives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delta {
    Text(String),
    /// The model began a tool call.
    ToolCall {
        name: String,
    },
}

/// Who watches a streamed answer (live text on a terminal, `--stream-json` lines).
/// Deltas are a view only: what is journaled is the whole response, once complete.
pub trait LiveSink: Send + Sync {
    fn delta(&self, model: &str, delta: &Delta);
}

/// What the final answer must be: one JSON value valid against `schema` (how an
/// answer is checked against it: `output.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputSpec {
    pub schema: Value,
    /// Answers checked in all (the first and the corrections).
    pub attempts: u32,
}
