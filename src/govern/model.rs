//! The call site around one model attempt: reserve the request's estimated tokens
//! (input estimate plus output cap) under its endpoint's key, send it at its start,
//! settle to the usage the provider reports. A refusal (429) goes to the key — every
//! run using it pauses and the rate is cut — and the request takes the line again
//! from its old place, without spending an attempt of the run's own retries; only
//! after [`MAX_REFUSALS`] in a row does the refusal reach them.

use super::gate::{Gate, Pause};
use crate::model::{ModelError, ModelRequest, ModelResponse, estimate};
use std::future::Future;
use std::time::Duration;

/// Refusals of one attempt the key absorbs before the run's retry policy sees one.
pub const MAX_REFUSALS: u32 = 8;

/// A refusal without a `Retry-After`: pause the key for this long.
const DEFAULT_PAUSE: Duration = Duration::from_secs(1);

/// Runs `attempt` (one request to `spec` at `endpoint`) under the gate's limits for
/// it; without a limit for it, simply runs it.
pub async fn governed<F, Fut>(
    gate: &Gate<'_>,
    spec: &str,
    endpoint: Option<String>,
    req: &ModelRequest<'_>,
    attempt: F,
) -> Result<ModelResponse, ModelError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<ModelResponse, ModelError>>,
{
    let Some(key) = endpoint.and_then(|e| gate.model_key(spec, &e)) else {
        return attempt().await;
    };
    let tokens = (estimate::request_tokens(req) + u64::from(req.max_output_tokens)) as i64;
    let mut place = None;
    let mut refusals = 0;
    loop {
        let ticket = match gate.enter(&key, tokens, place).await {
            Ok(t) => t,
            // The store is out of reach: the request goes ungoverned.
            Err(_) => return attempt().await,
        };
        place = Some(ticket.place());
        let result = attempt().await;
        match &result {
            Ok(resp) => {
                let used = (resp.usage.input + resp.usage.output) as i64;
                gate.settle(ticket, Some(used), None).await;
                return result;
            }
            Err(err) if refused(err) => {
                let after = err.retry_after().unwrap_or(DEFAULT_PAUSE);
                let pause = Pause { after, lower: true };
                gate.settle(ticket, Some(0), Some(pause)).await;
                refusals += 1;
                if refusals >= MAX_REFUSALS {
                    return result;
                }
            }
            // Sent or not, what it used is unknown: the reservation stands.
            Err(_) => {
                gate.settle(ticket, None, None).await;
                return result;
            }
        }
    }
}

/// A rate-limit refusal: HTTP 429.
fn refused(err: &ModelError) -> bool {
    matches!(
        err,
        ModelError::Status { status: 429, .. } | ModelError::RateLimited { status: 429, .. }
    )
}
