//! How stop requests reach the driver while it waits (issue 21).
//!
//! A stop comes as a [`StopOrder`]: the machine's [`StopRequest`] and how long the
//! work in flight may still take (`grace`: zero for a cancel, a signal and the time
//! budget; a worker's `--grace` when it shuts down). The driver waits on its work,
//! its inbox and two instants at once ([`Stops::race`]): when the grace or the run's
//! time budget runs out, the work is given up — the model request dropped, each
//! running call's future dropped, which kills its process group.

use crate::machine::{StopCause, StopRequest};
use std::future::Future;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// A stop for the driver: the request, and how long the work in flight may finish.
#[derive(Debug, Clone)]
pub struct StopOrder {
    pub request: StopRequest,
    pub grace: Duration,
}

/// Where stop orders come from (the lifecycle's signal, worker and store watchers).
pub type StopSender = mpsc::UnboundedSender<StopOrder>;

/// What the driver's wait ended with.
pub(super) enum Woke<T> {
    /// The work finished.
    Done(T),
    /// A stop arrived; the wait goes on (until its grace says otherwise).
    Stop(StopOrder),
    /// The work is given up: the grace ran out, or (with its request) the time budget.
    GiveUp(Option<StopRequest>),
}

/// The driver's side of the stops: its inbox, the stops the machine has not been told
/// of yet, and when the work in flight must be given up.
pub(super) struct Stops {
    inbox: mpsc::UnboundedReceiver<StopOrder>,
    /// Received while the machine could not be told (a model request borrowed it).
    undelivered: Vec<StopRequest>,
    /// The earliest grace end among the stops received.
    give_up_at: Option<Instant>,
}

impl Stops {
    pub(super) fn new(inbox: mpsc::UnboundedReceiver<StopOrder>) -> Stops {
        Stops {
            inbox,
            undelivered: Vec::new(),
            give_up_at: None,
        }
    }

    /// Notes a stop: its request waits for [`Stops::take_undelivered`], its grace
    /// brings the give-up time forward.
    pub(super) fn note(&mut self, order: StopOrder) {
        let at = Instant::now() + order.grace;
        self.give_up_at = Some(self.give_up_at.map_or(at, |t| t.min(at)));
        self.undelivered.push(order.request);
    }

    /// Takes every stop that arrived without waiting.
    pub(super) fn poll_inbox(&mut self) {
        while let Ok(order) = self.inbox.try_recv() {
            self.note(order);
        }
    }

    /// The stops the machine is to be told of now, in the order they came.
    pub(super) fn take_undelivered(&mut self) -> Vec<StopRequest> {
        std::mem::take(&mut self.undelivered)
    }

    /// Waits for `work`, a stop, the grace's end or the time budget's (`time_left`),
    /// whichever comes first.
    pub(super) async fn race<T>(
        &mut self,
        work: impl Future<Output = T>,
        time_left: Option<Duration>,
    ) -> Woke<T> {
        let deadline = time_left.map(|d| Instant::now() + d);
        let far = Instant::now() + Duration::from_secs(86_400 * 365);
        tokio::select! {
            biased;
            out = work => Woke::Done(out),
            Some(order) = self.inbox.recv() => Woke::Stop(order),
            _ = tokio::time::sleep_until(self.give_up_at.unwrap_or(far)), if self.give_up_at.is_some() => {
                Woke::GiveUp(None)
            }
            _ = tokio::time::sleep_until(deadline.unwrap_or(far)), if deadline.is_some() => {
                Woke::GiveUp(Some(StopRequest::new(StopCause::Deadline, "the time budget")))
            }
        }
    }
}
