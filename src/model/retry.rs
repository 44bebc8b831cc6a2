//! Retries, fallbacks and the circuit breaker for model calls.
//!
//! Per model: transient errors (429, 5xx, 529, timeouts, dropped connections, cut
//! streams — see [`ModelError::is_transient`]) are retried with exponential backoff
//! ("equal jitter": at least half of each step, so a server that restarts in a few
//! seconds is ridden out, issue 15). The server's `Retry-After` / `retry-after-ms` is a
//! floor, never shortened; above `max_retry_after` the model is not retried and fails
//! [`ModelError::RateLimited`] (docs/ARCHITECTURE.md §3.3, issue 12 item 10). Anything else ends
//! that model's turn at once: sending the identical request again cannot fix a 400 or a 401.
//!
//! Across models: the next model takes over on *any* failure of the previous one, not
//! only transient ones. A 400 "prompt too long" for one model's context, a 401 or 404
//! for one provider's key or model name says nothing about a different provider, and a
//! fallback list exists precisely so a run does not stop on one provider's problem.
//! The last model's error is returned when every model failed.
//!
//! The breaker: a model that failed its retries (or answered 401/403/404, or asked for
//! a wait above `max_retry_after`) is skipped for `cooldown` by later calls of the same
//! run, so a dead first choice costs its retries once, not every step. After the
//! cool-down it gets one probe (one attempt, "half-open"): success closes the circuit,
//! failure opens it again. When every model is open they are all tried as usual — a
//! skipped list would only fail the run. The breaker lives in the process: a resumed
//! run starts with every circuit closed.

use super::{ModelError, ModelRequest, ModelResponse, Provider};
use crate::backoff::{self, Wait};
use crate::clock::Clock;
use crate::trace::{EventSink, TraceEvent};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// How hard to try one model before giving up on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelRetryPolicy {
    /// Attempts per model, the first included (at least 1).
    pub attempts: u32,
    /// Backoff base: retry `n` (from 0) waits between half of and `base * 2^n`.
    pub base: Duration,
    /// Cap on a computed wait (not on the server's `Retry-After`, which is a floor).
    pub max: Duration,
    /// A server asking for a longer wait than this is not retried.
    pub max_retry_after: Duration,
    /// How long a model that failed is skipped before it is probed again.
    pub cooldown: Duration,
}

impl ModelRetryPolicy {
    /// The backoff part of the policy, as the one retry engine takes it: equal jitter
    /// ("at least half of each step", so a restarting server is ridden out).
    pub fn backoff(&self) -> backoff::Backoff {
        backoff::Backoff {
            base: self.base,
            max_backoff: self.max,
            max_retry_after: self.max_retry_after,
            jitter: backoff::Jitter::Equal,
        }
    }
}

impl Default for ModelRetryPolicy {
    /// 6 attempts, 1 s doubling: the waits are at least 0.5 + 1 + 2 + 4 + 8 = 15.5 s
    /// in all (at most 31 s), enough for a local server to restart.
    fn default() -> Self {
        ModelRetryPolicy {
            attempts: 6,
            base: Duration::from_secs(1),
            max: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(60),
            cooldown: Duration::from_secs(300),
        }
    }
}

/// Which models are skipped, and until when (clock milliseconds).
#[derive(Debug, Default)]
pub struct ModelBreaker {
    open: Mutex<HashMap<String, Open>>,
}

#[derive(Debug, Clone)]
struct Open {
    until_ms: i64,
    error: String,
}

enum Circuit {
    Closed,
    /// Skip it: cooling down.
    Open(Open),
    /// Cool-down over: one probe attempt.
    HalfOpen,
}

impl ModelBreaker {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Open>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn circuit(&self, model: &str, now_ms: i64) -> Circuit {
        match self.lock().get(model) {
            None => Circuit::Closed,
            Some(o) if now_ms < o.until_ms => Circuit::Open(o.clone()),
            Some(_) => Circuit::HalfOpen,
        }
    }

    fn trip(&self, model: &str, until_ms: i64, error: &ModelError) {
        self.lock().insert(
            model.to_string(),
            Open {
                until_ms,
                error: error.to_string(),
            },
        );
    }

    fn close(&self, model: &str) {
        self.lock().remove(model);
    }

    /// Whether `model` is being skipped at `now_ms` (for tests and progress).
    pub fn is_open(&self, model: &str, now_ms: i64) -> bool {
        matches!(self.circuit(model, now_ms), Circuit::Open(_))
    }
}

/// Whether a failure says the model is unusable for a while (not just this request).
fn trips(err: &ModelError) -> bool {
    match err {
        ModelError::Status { status, .. } => {
            err.is_transient() || matches!(status, 401 | 403 | 404)
        }
        ModelError::RateLimited { .. } => true,
        other => other.is_transient(),
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

/// [`complete_guarded`] with a breaker of its own (nothing remembered between calls).
pub async fn complete_with(
    models: &[Provider],
    req: &ModelRequest<'_>,
    policy: &ModelRetryPolicy,
    clock: &dyn Clock,
    events: &dyn EventSink,
) -> Result<ModelResponse, ModelError> {
    complete_guarded(models, req, policy, &ModelBreaker::default(), clock, events).await
}

/// Calls the first model, retrying transient errors; when it fails for good, the next
/// model in `models` takes over. Models whose circuit is open in `breaker` are skipped
/// (unless all are). `ModelResponse::model` names the model that answered.
pub async fn complete_guarded(
    models: &[Provider],
    req: &ModelRequest<'_>,
    policy: &ModelRetryPolicy,
    breaker: &ModelBreaker,
    clock: &dyn Clock,
    events: &dyn EventSink,
) -> Result<ModelResponse, ModelError> {
    let now = clock.now_ms();
    let all_open = models
        .iter()
        .all(|m| matches!(breaker.circuit(&m.name(), now), Circuit::Open(_)));
    let mut failed: Option<(String, ModelError)> = None;
    for model in models {
        let name = model.name();
        if let Some((from, err)) = &failed {
            events.emit(TraceEvent::ModelFallback {
                from: from.clone(),
                to: name.clone(),
                error: err.to_string(),
                at_ms: Some(clock.now_ms()),
            });
        }
        let attempts = match breaker.circuit(&name, clock.now_ms()) {
            Circuit::Open(open) if !all_open => {
                failed = Some((
                    name.clone(),
                    ModelError::CircuitOpen {
                        model: name,
                        retry_in: Duration::from_millis(
                            u64::try_from(open.until_ms.saturating_sub(clock.now_ms()))
                                .unwrap_or(0),
                        ),
                        last_error: open.error,
                    },
                ));
                continue;
            }
            Circuit::HalfOpen => 1,
            Circuit::Open(_) | Circuit::Closed => policy.attempts,
        };
        match with_retries(model, &name, req, policy, attempts, clock, events).await {
            Ok(mut resp) => {
                breaker.close(&name);
                resp.model = name;
                return Ok(resp);
            }
            Err(err) => {
                if trips(&err) {
                    let until = clock.now_ms().saturating_add(
                        i64::try_from(policy.cooldown.as_millis()).unwrap_or(i64::MAX),
                    );
                    breaker.trip(&name, until, &err);
                }
                failed = Some((name, err));
            }
        }
    }
    Err(match failed {
        Some((_, err)) => err,
        None => ModelError::Config("no model configured".into()),
    })
}

/// How long a run's first step keeps trying a local server that refuses connections:
/// long enough for one that is just binding its port, short enough that "not started"
/// is said at once instead of after 15 s of backoff (issue 27). Only while no attempt of
/// the call has reached the server: one that answered, dropped the connection or timed
/// out is there and restarting, and gets the full schedule (issue 23).
pub const FIRST_STEP_REFUSED: Duration = Duration::from_secs(2);

/// Whether `req` asks for a run's first step: no answer of the model in it yet.
fn is_first_step(req: &ModelRequest<'_>) -> bool {
    req.purpose == super::Purpose::Step
        && req.turns_left_out == 0
        && !req
            .messages
            .iter()
            .any(|m| m.role == super::Role::Assistant)
}

/// One model, up to `attempts` attempts.
async fn with_retries(
    model: &Provider,
    name: &str,
    req: &ModelRequest<'_>,
    policy: &ModelRetryPolicy,
    attempts: u32,
    clock: &dyn Clock,
    events: &dyn EventSink,
) -> Result<ModelResponse, ModelError> {
    let attempts = attempts.max(1);
    // A first step whose every attempt so far a local server refused (FIRST_STEP_REFUSED).
    let mut refused_only = is_first_step(req);
    let mut refused_waited = Duration::ZERO;
    let mut attempt = 1;
    loop {
        let err = match model.complete(req).await {
            Ok(resp) => return Ok(resp),
            Err(err) if err.is_transient() && attempt < attempts => err,
            Err(err) => return Err(err),
        };
        let mut delay = match policy
            .backoff()
            .next_wait(attempt - 1, err.retry_after(), clock)
        {
            Wait::GiveUp { retry_after } => return Err(rate_limited(err, retry_after, policy)),
            Wait::After(d) => d,
        };
        refused_only &= err.is_refused_locally();
        if refused_only {
            let left = FIRST_STEP_REFUSED.saturating_sub(refused_waited);
            if left.is_zero() {
                return Err(err);
            }
            delay = delay.min(left);
            refused_waited += delay;
        }
        events.emit(TraceEvent::ModelRetry {
            model: name.to_string(),
            attempt,
            error: err.to_string(),
            reason: Some(err.brief()),
            delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            at_ms: Some(clock.now_ms()),
        });
        clock.sleep(delay).await;
        attempt += 1;
    }
}

fn rate_limited(err: ModelError, retry_after: Duration, policy: &ModelRetryPolicy) -> ModelError {
    match err {
        ModelError::Status {
            provider,
            status,
            message,
            ..
        } => ModelError::RateLimited {
            provider,
            status,
            message,
            retry_after,
            max: policy.max_retry_after,
        },
        other => other,
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
            note: "",
            cache_key: "",
            tools: &[],
            max_output_tokens: 64,
            live: None,
            purpose: crate::model::Purpose::Step,
            turns_left_out: 0,
            output: None,
            limits: None,
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

    fn refused() -> Provider {
        // Port 1: nothing listens there, so every attempt is refused at once.
        openai_at("http://127.0.0.1:1/v1")
    }

    fn openai_at(base_url: &str) -> Provider {
        let config = crate::model::openai::OpenAiConfig {
            model: "dead".into(),
            base_url: base_url.into(),
            api_key: None,
            timeouts: crate::model::Timeouts::all(Duration::from_secs(5)),
            stream: true,
            temperature: None,
            tool_choice: None,
            prompt_cache: None,
        };
        Provider::OpenAi(crate::model::openai::OpenAi::new(config).unwrap())
    }

    #[tokio::test]
    async fn a_dead_first_model_costs_its_retries_once_then_is_skipped_until_a_probe() {
        let models = [refused(), script("b", r#"{"turns": [{"text": "b"}]}"#)];
        let policy = ModelRetryPolicy {
            attempts: 3,
            base: Duration::from_millis(100),
            max: Duration::from_secs(1),
            cooldown: Duration::from_secs(60),
            ..ModelRetryPolicy::default()
        };
        let breaker = ModelBreaker::default();
        let (clock, events) = (FakeClock::new(0), EventBuffer::default());
        let req = request(&[]);
        let ask = || complete_guarded(&models, &req, &policy, &breaker, &clock, &events);
        // 1st step: three attempts at the dead model, then the fallback.
        assert_eq!(ask().await.unwrap().model, "script:b");
        let retries = |evs: &[TraceEvent]| {
            evs.iter()
                .filter(|e| matches!(e, TraceEvent::ModelRetry { .. }))
                .count()
        };
        assert_eq!(retries(&events.take()), 2);
        assert!(breaker.is_open("openai:dead", clock.now_ms()));
        // 2nd step: skipped, no attempt, no wait.
        let slept = clock.sleeps().len();
        assert_eq!(ask().await.unwrap().model, "script:b");
        let evs = events.take();
        assert_eq!(retries(&evs), 0);
        assert!(
            matches!(&evs[..], [TraceEvent::ModelFallback { error, .. }] if error.contains("skipped")),
            "{evs:?}"
        );
        assert_eq!(clock.sleeps().len(), slept);
        // After the cool-down: one probe attempt (no retries), which fails and reopens.
        clock.sleep(Duration::from_secs(61)).await;
        assert_eq!(ask().await.unwrap().model, "script:b");
        let evs = events.take();
        assert_eq!(retries(&evs), 0, "{evs:?}");
        assert!(
            matches!(&evs[..], [TraceEvent::ModelFallback { error, .. }] if error.contains("nothing is listening")),
            "{evs:?}"
        );
        assert!(breaker.is_open("openai:dead", clock.now_ms()));
    }

    #[tokio::test]
    async fn when_every_model_is_open_they_are_tried_anyway() {
        let models = [refused()];
        let policy = ModelRetryPolicy {
            attempts: 2,
            base: Duration::from_millis(10),
            ..ModelRetryPolicy::default()
        };
        let breaker = ModelBreaker::default();
        let (clock, events) = (FakeClock::new(0), EventBuffer::default());
        for _ in 0..2 {
            let err = complete_guarded(&models, &request(&[]), &policy, &breaker, &clock, &events)
                .await
                .unwrap_err();
            assert!(matches!(err, ModelError::Refused { .. }), "{err}");
        }
        assert_eq!(clock.sleeps().len(), 2, "both calls retried once");
    }

    /// A clock whose jitter is always zero: the smallest waits the schedule allows.
    struct NoJitter(FakeClock);

    impl Clock for NoJitter {
        fn now_ms(&self) -> i64 {
            self.0.now_ms()
        }
        fn sleep(&self, d: Duration) -> crate::clock::SleepFuture {
            self.0.sleep(d)
        }
        fn jitter(&self, _: Duration) -> Duration {
            Duration::ZERO
        }
    }

    /// A transcript past the first step: the model has answered once.
    fn later() -> Vec<Message> {
        vec![
            Message::text(Role::User, "task"),
            Message::text(Role::Assistant, "working on it"),
            Message::text(Role::User, "go on"),
        ]
    }

    #[tokio::test]
    async fn the_default_schedule_waits_at_least_15_seconds_before_giving_up() {
        let clock = NoJitter(FakeClock::new(0));
        let events = EventBuffer::default();
        let messages = later();
        let err = complete(&[refused()], &request(&messages), &clock, &events)
            .await
            .unwrap_err();
        assert!(matches!(err, ModelError::Refused { .. }));
        let total: Duration = clock.0.sleeps().iter().sum();
        assert_eq!(
            clock.0.sleeps(),
            [500, 1000, 2000, 4000, 8000].map(Duration::from_millis)
        );
        assert!(total >= Duration::from_secs(15));
    }

    /// Issue 27: on a run's first step a local server that refuses is not running;
    /// the run says so after 2 s of tries instead of 15 s of backoff, naming the
    /// variable that points there. Later steps keep the full schedule (above).
    #[tokio::test]
    async fn a_refused_local_server_on_the_first_step_fails_within_2_seconds() {
        let clock = NoJitter(FakeClock::new(0));
        let events = EventBuffer::default();
        let err = complete(&[refused()], &request(&[]), &clock, &events)
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "nothing is listening at 127.0.0.1:1 — is the server running? (OPENAI_BASE_URL)"
        );
        assert_eq!(
            clock.0.sleeps(),
            [500, 1000, 500].map(Duration::from_millis)
        );
        let reasons: Vec<Option<String>> = events
            .take()
            .into_iter()
            .map(|e| match e {
                TraceEvent::ModelRetry { reason, .. } => reason,
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(reasons, vec![Some("connection refused".to_string()); 3]);
    }

    /// Issue 23: a server killed while it answers a run's first step (the connection
    /// dropped mid-request) refuses while it restarts. It was there, so the full
    /// schedule applies; before, the first-step rule gave up after 2 s of refusals,
    /// before llama-server had loaded its model again.
    #[tokio::test]
    async fn a_server_that_dies_during_the_first_step_gets_the_full_schedule() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let _ = std::io::Read::read(&mut conn, &mut [0; 4096]);
            // Stop listening before the connection drops: every retry is refused.
            drop(listener);
        });
        let clock = NoJitter(FakeClock::new(0));
        let events = EventBuffer::default();
        let err = complete(&[openai_at(&base)], &request(&[]), &clock, &events)
            .await
            .unwrap_err();
        server.join().unwrap();
        assert!(matches!(err, ModelError::Refused { .. }), "{err}");
        assert_eq!(
            clock.0.sleeps(),
            [500, 1000, 2000, 4000, 8000].map(Duration::from_millis)
        );
        let reasons: Vec<String> = events
            .take()
            .into_iter()
            .filter_map(|e| match e {
                TraceEvent::ModelRetry { reason, .. } => reason,
                _ => None,
            })
            .collect();
        assert_eq!(reasons[0], "connection failed");
        assert_eq!(reasons[1..], ["connection refused"; 4]);
    }
}
