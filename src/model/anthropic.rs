//! Anthropic Messages API.
//! STUB: to be implemented.

use super::{ModelError, ModelRequest, ModelResponse};
use std::time::Duration;

pub struct Anthropic {
    model: String,
}

impl Anthropic {
    /// Reads `ANTHROPIC_API_KEY` and `ANTHROPIC_BASE_URL` from the environment.
    pub fn from_env(model: &str, _timeout: Duration) -> Result<Anthropic, ModelError> {
        Ok(Anthropic {
            model: model.to_string(),
        })
    }

    pub fn name(&self) -> String {
        format!("anthropic:{}", self.model)
    }

    pub async fn complete(&self, _req: &ModelRequest<'_>) -> Result<ModelResponse, ModelError> {
        Err(ModelError::Config("anthropic provider not implemented yet".into()))
    }
}
