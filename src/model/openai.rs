//! OpenAI Chat Completions (and compatible servers: vLLM, Ollama, llama.cpp, LiteLLM).
//! STUB: to be implemented.

use super::{ModelError, ModelRequest, ModelResponse};
use std::time::Duration;

pub struct OpenAi {
    model: String,
}

impl OpenAi {
    /// Reads `OPENAI_API_KEY` and `OPENAI_BASE_URL` from the environment.
    pub fn from_env(model: &str, _timeout: Duration) -> Result<OpenAi, ModelError> {
        Ok(OpenAi {
            model: model.to_string(),
        })
    }

    pub fn name(&self) -> String {
        format!("openai:{}", self.model)
    }

    pub async fn complete(&self, _req: &ModelRequest<'_>) -> Result<ModelResponse, ModelError> {
        Err(ModelError::Config("openai provider not implemented yet".into()))
    }
}
