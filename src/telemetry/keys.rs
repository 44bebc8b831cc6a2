//! Attribute names of the OpenTelemetry GenAI semantic conventions, and the few
//! OpenInference names Phoenix reads to show a span's kind and token counts.

pub const OPERATION: &str = "gen_ai.operation.name";
pub const PROVIDER: &str = "gen_ai.provider.name";
pub const REQUEST_MODEL: &str = "gen_ai.request.model";
pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
pub const FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
pub const CONVERSATION: &str = "gen_ai.conversation.id";
pub const AGENT_NAME: &str = "gen_ai.agent.name";
pub const INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
pub const OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
pub const CACHE_READ: &str = "gen_ai.usage.cache_read.input_tokens";
pub const CACHE_CREATION: &str = "gen_ai.usage.cache_creation.input_tokens";
pub const TOOL_NAME: &str = "gen_ai.tool.name";
pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
pub const TOOL_TYPE: &str = "gen_ai.tool.type";
pub const TOOL_ARGS: &str = "gen_ai.tool.call.arguments";
pub const TOOL_RESULT: &str = "gen_ai.tool.call.result";
pub const OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
pub const ERROR_TYPE: &str = "error.type";
/// Phoenix's span kind (`LLM`, `TOOL`, `AGENT`, `CHAIN`).
pub const OI_KIND: &str = "openinference.span.kind";
