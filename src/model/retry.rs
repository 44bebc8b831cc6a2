//! Retries and fallbacks for model calls. STUB: to be implemented (single attempt now).

use super::{ModelError, ModelRequest, ModelResponse, Provider};
use crate::clock::Clock;
use crate::trace::EventSink;

/// Calls the first model, retrying transient errors; when its retries are spent, the
/// next model in `models` takes over. Returns the last error when every model failed.
pub async fn complete(
    models: &[Provider],
    req: &ModelRequest<'_>,
    _clock: &dyn Clock,
    _events: &dyn EventSink,
) -> Result<ModelResponse, ModelError> {
    let first = models
        .first()
        .ok_or_else(|| ModelError::Config("no model configured".into()))?;
    first.complete(req).await
}
