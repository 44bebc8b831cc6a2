//! Model settings on the command line (`start`), and the streaming view flag shared
//! by `start` and `resume`. They override the task's front matter (docs/models.md).

use crate::model::settings::{SettingsInput, ToolChoice};
use clap::Args;

#[derive(Debug, Args, Default)]
#[command(next_help_heading = "Model settings (override the front matter)")]
pub struct ModelArgs {
    /// Output-token cap per model response [default: front matter, else 4096]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_output_tokens: Option<u32>,
    /// Sampling temperature, 0 to 2 [default: the provider's]
    #[arg(long, value_name = "T")]
    pub temperature: Option<f64>,
    /// auto, required, none, or tool:NAME [default: the provider's (auto)]
    #[arg(long, value_name = "CHOICE", value_parser = ToolChoice::parse)]
    pub tool_choice: Option<ToolChoice>,
    /// Whole-response limit per model attempt, e.g. 10m [default: 10m]
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<humantime::Duration>,
    /// Streaming: longest silence from the server before the attempt fails [default: 60s]
    #[arg(long, value_name = "DURATION")]
    pub idle_timeout: Option<humantime::Duration>,
    /// The model's context window in tokens [default: known for common models]
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u64).range(1..))]
    pub context_window: Option<u64>,
    /// Ask for one JSON answer instead of a stream
    #[arg(long)]
    pub no_stream: bool,
}

impl ModelArgs {
    pub fn input(&self) -> Result<SettingsInput, String> {
        let input = SettingsInput {
            max_output_tokens: self.max_output_tokens,
            temperature: self.temperature,
            tool_choice: self.tool_choice.clone(),
            stream: self.no_stream.then_some(false),
            timeout: self.timeout.map(Into::into),
            idle_timeout: self.idle_timeout.map(Into::into),
            context_window: self.context_window,
            ..SettingsInput::default()
        };
        input.validate()?;
        Ok(input)
    }
}
