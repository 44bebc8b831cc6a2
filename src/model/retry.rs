//! Retries and fallbacks for model calls.
//!
//! Per model: transient errors (429, 5xx, 529, timeouts, dropped connections — see
//! [`ModelError::is_transient`]) are retried with exponential full-jitter backoff, the
//! server's `Retry-After` first, capped by the policy's `max`. Anything else ends that
//! model's turn at once: sending the identical request again cannot fix a 400 or a 401.
//!
//! Across models: the next model takes over on *any* failure of the previous one, not
//! only transient ones. A 400 "prompt too long" for one model's context, a 401 or 404
//! for one provider's key or model name says nothing about a different provider, and a
//! fallback list exists precisely so a run does not stop on one provider's problem.
//! The last model's error is returned when every model failed.

use super::{ModelError, ModelRequest, ModelResponse, Provider};
use crate::backoff;
use crate::clock::Clock;
use crate::trace::{EventSink, TraceEvent};
use std::time::Duration;

/// How hard to try one model before giving up on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelRetryPolicy {
    /// Attempts per model, the first included (at least 1).
    pub attempts: u32,
    /// Backoff base: retry `n` (from 0) waits up to `base * 2^n`.
    pub base: Duration,
    /// Cap on any wait, the server's `Retry-After` included.
    pub max: Duration,
}

impl Default for ModelRetryPolicy {
    fn default() -> Self {
        ModelRetryPolicy {
            attempts: 4,
            base: Duration::from_millis(500),
            max: Duration::from_secs(30),
        }
    }
}

/// [`complete_with`] under the default policy.
pub async fn complete(
    models: &[Provider],
    req: &ModelRequest<'_>,
    clock: &dyn Clock,
    events: &dyn EventSink,
) -> Result<ModelResponse, ModelError> {
    complete_with(models, req, &ModelRetryPolicy::default(), clock, events).await
}

/// Calls the first model, retrying transient errors; when it fails for good, the next
/// model in `models` takes over. `ModelResponse::model` names the model that answered.
pub async fn complete_with(
    models: &[Provider],
    req: &ModelRequest<'_>,
    policy: &ModelRetryPolicy,
    clock: &dyn Clock,
    events: &dyn EventSink,
) -> Result<ModelResponse, ModelError> {
    let mut failed: Option<(String, ModelError)> = None;
    for model in models {
        let name = model.name();
        if let Some((from, err)) = &failed {
            events.emit(TraceEvent::ModelFallback {
                from: from.clone(),
                to: name.clone(),
                error: err.to_string(),
            });
        }
        match with_retries(model, &name, req, policy, clock, events).await {
            Ok(mut resp) => {
                resp.model = name;
                return Ok(resp);
            }
            Err(err) => failed = Some((name, err)),
        }
    }
    Err(match failed {
        Some((_, err)) => err,
        None => ModelError::Config("no model configured".into()),
    })
}

/// One model, up to `policy.attempts` attempts.
async fn with_retries(
    model: &Provider,
    name: &str,
    req: &ModelRequest<'_>,
    policy: &ModelRetryPolicy,
    clock: &dyn Clock,
    events: &dyn EventSink,
) -> Result<ModelResponse, ModelError> {
    let attempts = policy.attempts.max(1);
    let mut attempt = 1;
    loop {
        let err = match model.complete(req).await {
            Ok(resp) => return Ok(resp),
            Err(err) if err.is_transient() && attempt < attempts => err,
            Err(err) => return Err(err),
        };
        let delay = backoff::delay(
            policy.base,
            policy.max,
            attempt - 1,
            err.retry_after(),
            clock,
        );
        events.emit(TraceEvent::ModelRetry {
            model: name.to_string(),
            attempt,
            error: err.to_string(),
            delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
        });
        clock.sleep(delay).await;
        attempt += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;
    use crate::model::script::ScriptModel;
    use crate::model::{Message, Role};
    use crate::trace::EventBuffer;

    fn script(name: &str, text: &str) -> Provider {
        Provider::Script(ScriptModel::parse(name, text).unwrap())
    }

    fn request(messages: &[Message]) -> ModelRequest<'_> {
        ModelRequest {
            system: "",
            messages,
            tools: &[],
            max_output_tokens: 64,
            live: None,
        }
    }

    #[tokio::test]
    async fn a_transient_failure_is_retried_after_the_servers_delay() {
        let models = [script(
            "a",
            r#"{"turns": [{"text": "hi", "fail": {"status": 429, "retry_after": 2}}]}"#,
        )];
        let (clock, events) = (FakeClock::new(0), EventBuffer::default());
        let resp = complete(&models, &request(&[]), &clock, &events)
            .await
            .unwrap();
        assert_eq!(resp.message.joined_text(), "hi");
        assert_eq!(clock.sleeps(), [Duration::from_secs(2)]);
        let evs = events.take();
        assert!(
            matches!(
                &evs[..],
                [TraceEvent::ModelRetry {
                    attempt: 1,
                    delay_ms: 2000,
                    ..
                }]
            ),
            "{evs:?}"
        );
    }

    #[tokio::test]
    async fn a_permanent_failure_falls_back_without_retrying() {
        let models = [
            script(
                "a",
                r#"{"turns": [{"text": "a", "fail": {"status": 400}}]}"#,
            ),
            script("b", r#"{"turns": [{"text": "b"}]}"#),
        ];
        let (clock, events) = (FakeClock::new(0), EventBuffer::default());
        let resp = complete(&models, &request(&[]), &clock, &events)
            .await
            .unwrap();
        assert_eq!(resp.model, "script:b");
        assert!(clock.sleeps().is_empty());
        let evs = events.take();
        assert!(
            matches!(&evs[..], [TraceEvent::ModelFallback { from, to, .. }] if from == "script:a" && to == "script:b"),
            "{evs:?}"
        );
    }

    #[tokio::test]
    async fn the_last_error_is_returned_when_every_model_fails() {
        let models = [script("a", r#"{"turns": [{"text": "a"}]}"#)];
        let history = [Message::text(Role::Assistant, "done")];
        let (clock, events) = (FakeClock::new(0), EventBuffer::default());
        let err = complete(&models, &request(&history), &clock, &events)
            .await
            .unwrap_err();
        assert!(matches!(err, ModelError::ScriptExhausted { .. }), "{err}");
        let none = complete(&[], &request(&[]), &clock, &events)
            .await
            .unwrap_err();
        assert!(matches!(none, ModelError::Config(_)));
    }
}
