//! Time as a parameter: sleeping, reading the wall clock and drawing jitter go through
//! [`Clock`] so retry schedules can be asserted exactly, without sleeping, in tests.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub type SleepFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
    fn sleep(&self, d: Duration) -> SleepFuture;
    /// A uniformly random duration in `[0, max]` ("full jitter").
    fn jitter(&self, max: Duration) -> Duration;
}

/// The real clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }

    fn sleep(&self, d: Duration) -> SleepFuture {
        Box::pin(tokio::time::sleep(d))
    }

    fn jitter(&self, max: Duration) -> Duration {
        if max.is_zero() {
            return max;
        }
        let ms = max.as_millis() as u64;
        Duration::from_millis(rand::random_range(0..=ms))
    }
}

/// A clock for tests: sleeps return at once and are recorded; jitter is the maximum
/// (so schedules are exact); time advances by what was slept.
#[derive(Clone, Default)]
pub struct FakeClock {
    inner: Arc<Mutex<FakeState>>,
}

#[derive(Default)]
struct FakeState {
    now_ms: i64,
    sleeps: Vec<Duration>,
}

impl FakeClock {
    pub fn new(now_ms: i64) -> Self {
        let clock = FakeClock::default();
        clock.lock().now_ms = now_ms;
        clock
    }

    pub fn sleeps(&self) -> Vec<Duration> {
        self.lock().sleeps.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        // A poisoned lock only means another test thread panicked; the data is still fine.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Clock for FakeClock {
    fn now_ms(&self) -> i64 {
        self.lock().now_ms
    }

    fn sleep(&self, d: Duration) -> SleepFuture {
        let mut s = self.lock();
        s.sleeps.push(d);
        s.now_ms += d.as_millis() as i64;
        Box::pin(async {})
    }

    fn jitter(&self, max: Duration) -> Duration {
        max
    }
}
