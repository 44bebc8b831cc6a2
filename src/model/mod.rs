//! Models: the neutral message types, the providers that speak them, and the retry /
//! fallback policy for model calls.

pub mod anthropic;
mod echo;
pub mod error;
pub mod estimate;
pub mod limits;
pub mod openai;
pub mod output;
pub mod pairing;
pub mod prices;
pub mod retry;
pub mod script;
pub mod settings;
mod sse;
pub mod types;
mod wire;

pub use error::ModelError;
pub use settings::{ModelSettings, ToolChoice};
pub use types::*;
pub use wire::{ApiKey, Timeouts};

use std::fmt;
use std::path::PathBuf;

/// A parsed model spec: `openai:MODEL`, `anthropic:MODEL` or `script:PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSpec {
    OpenAi(String),
    Anthropic(String),
    Script(PathBuf),
}

impl ModelSpec {
    pub fn parse(spec: &str) -> Result<ModelSpec, String> {
        let (scheme, rest) = spec.split_once(':').ok_or_else(|| {
            format!(
                "model `{spec}` has no provider: write openai:MODEL, anthropic:MODEL or script:PATH"
            )
        })?;
        if rest.trim().is_empty() {
            return Err(format!("model `{spec}` names no model after `{scheme}:`"));
        }
        match scheme {
            "openai" => Ok(ModelSpec::OpenAi(rest.to_string())),
            "anthropic" => Ok(ModelSpec::Anthropic(rest.to_string())),
            "script" => Ok(ModelSpec::Script(PathBuf::from(rest))),
            other => Err(format!(
                "model `{spec}` has unknown provider `{other}`: use openai, anthropic or script"
            )),
        }
    }
}

impl fmt::Display for ModelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelSpec::OpenAi(m) => write!(f, "openai:{m}"),
            ModelSpec::Anthropic(m) => write!(f, "anthropic:{m}"),
            ModelSpec::Script(p) => write!(f, "script:{}", p.display()),
        }
    }
}

/// A ready-to-call model. An enum rather than a trait object: the set is closed and
/// each variant's `complete` is a plain async fn.
pub enum Provider {
    Script(script::ScriptModel),
    OpenAi(openai::OpenAi),
    Anthropic(anthropic::Anthropic),
}

impl Provider {
    /// The spec string this provider was built from (for traces and `ModelResponse`).
    pub fn name(&self) -> String {
        match self {
            Provider::Script(m) => m.name(),
            Provider::OpenAi(m) => m.name(),
            Provider::Anthropic(m) => m.name(),
        }
    }

    /// The spec and where it is served, for messages about waiting on it:
    /// `openai:gpt-4o-mini at api.openai.com`.
    pub fn describe(&self) -> String {
        match self {
            Provider::Script(m) => m.name(),
            Provider::OpenAi(m) => format!("{} at {}", m.name(), wire::host_of(m.url())),
            Provider::Anthropic(m) => format!("{} at {}", m.name(), wire::host_of(m.url())),
        }
    }

    /// The endpoint (base URL and a digest of the key) its rate limits belong to;
    /// `None` for a script, which sends nothing anywhere.
    pub(crate) fn limit_endpoint(&self) -> Option<String> {
        match self {
            Provider::Script(_) => None,
            Provider::OpenAi(m) => Some(m.limit_endpoint()),
            Provider::Anthropic(m) => Some(m.limit_endpoint()),
        }
    }

    /// What this provider must never show (its key, its URL's credentials).
    pub(crate) fn secrets(&self) -> Option<&crate::redact::Secrets> {
        match self {
            Provider::Script(_) => None,
            Provider::OpenAi(m) => Some(m.secrets()),
            Provider::Anthropic(m) => Some(m.secrets()),
        }
    }

    /// One attempt; retries and fallbacks are [`retry::complete`]'s job.
    /// Every response passes [`limits::check_response`] (issue 12 item 7), and
    /// everything the provider sent back is redacted ([`echo`]); when it reports no
    /// usage, the usage is estimated ([`estimate`]).
    /// Under rate limits (`req.limits`), the attempt first waits its turn under its
    /// endpoint's key and settles after (`crate::govern::model`).
    pub async fn complete(&self, req: &ModelRequest<'_>) -> Result<ModelResponse, ModelError> {
        match req.limits {
            Some(gate) => {
                let attempt = || self.complete_once(req);
                crate::govern::model::governed(
                    gate,
                    &self.name(),
                    self.limit_endpoint(),
                    req,
                    attempt,
                )
                .await
            }
            None => self.complete_once(req).await,
        }
    }

    async fn complete_once(&self, req: &ModelRequest<'_>) -> Result<ModelResponse, ModelError> {
        let Some(secrets) = self.secrets() else {
            // A script's turns say their usage; none is none.
            return self.complete_raw(req).await;
        };
        let live = req.live.map(|inner| echo::Live::new(inner, secrets));
        let mut redacted_req = req.clone();
        redacted_req.live = live.as_ref().map(|l| l as &dyn LiveSink);
        let resp = self.complete_raw(&redacted_req).await;
        match resp {
            Ok(resp) => {
                if let Some(live) = live {
                    live.finish();
                }
                // A provider that reports no usage still counts against budgets.
                Ok(estimate::fill(req, echo::response(secrets, resp)))
            }
            Err(e) => Err(echo::error(secrets, e)),
        }
    }

    async fn complete_raw(&self, req: &ModelRequest<'_>) -> Result<ModelResponse, ModelError> {
        let (resp, provider) = match self {
            Provider::Script(m) => (m.complete(req), "script"),
            Provider::OpenAi(m) => (m.complete(req).await, "openai"),
            Provider::Anthropic(m) => (m.complete(req).await, "anthropic"),
        };
        let resp = resp?;
        limits::check_response(&resp)
            .map_err(|message| ModelError::BadResponse { provider, message })?;
        Ok(resp)
    }
}
