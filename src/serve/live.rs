//! Following runs and the queue live: server-sent events for the run page and the
//! queue page.
//!
//! **One reader per followed run, not per follower.** The first page that follows a
//! run starts a poller that reads the run's row and escalations every [`POLL`] and,
//! when they changed, renders the `runs show` text once and publishes it on a watch
//! channel; every open page of that run receives the same `Arc`. Fifty pages cost one
//! poll and one render per change, so followers never add load on the run's own
//! process (measured: benches, "50 followers"). Each follower only formats its own
//! controls (its CSRF token, its name) from that snapshot. A run is followed whatever
//! its status — a waiting run can be resumed by anyone — and the stream ends only
//! once the run is final (completed or cancelled); the poller stops with its last
//! follower or then. The queue has one poller of its own, the same way ([`QUEUE_POLL`]).

use super::auth::Session;
use super::runs::{RunView, controls, is_final, text, view};
use super::{App, Reviewer, store_error};
use crate::store::RunId;
use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// How often a followed run is read.
pub const POLL: Duration = Duration::from_millis(250);

/// How often the queue is read while a queue page is open.
pub const QUEUE_POLL: Duration = Duration::from_secs(1);

/// What a follower is sent: the run as its page shows it, and its `runs show` text.
#[derive(Debug, Clone, PartialEq)]
pub struct Snap {
    pub view: RunView,
    pub text: Arc<String>,
}

type Rx<T> = watch::Receiver<Option<T>>;

#[derive(Default)]
pub struct Live {
    runs: Mutex<HashMap<RunId, Rx<Snap>>>,
    queue: Mutex<Option<Rx<Arc<String>>>>,
}

impl Live {
    /// A receiver for `id`'s snapshots, starting its poller if none runs.
    fn follow(&self, app: &Arc<App>, id: &RunId) -> Rx<Snap> {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(rx) = runs.get(id).filter(|rx| rx.has_changed().is_ok()) {
            return rx.clone();
        }
        let (tx, rx) = watch::channel(None);
        runs.insert(id.clone(), rx.clone());
        tokio::spawn(poll(app.clone(), id.clone(), tx));
        rx
    }

    /// A receiver for the queue's body, starting its poller if none runs.
    fn follow_queue(&self, app: &Arc<App>) -> Rx<Arc<String>> {
        let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(rx) = queue.as_ref().filter(|rx| rx.has_changed().is_ok()) {
            return rx.clone();
        }
        let (tx, rx) = watch::channel(None);
        *queue = Some(rx.clone());
        tokio::spawn(poll_queue(app.clone(), tx));
        rx
    }
}

async fn poll(app: Arc<App>, id: RunId, tx: watch::Sender<Option<Snap>>) {
    let mut tick = tokio::time::interval(POLL);
    let mut last: Option<RunView> = None;
    loop {
        tick.tick().await;
        if tx.receiver_count() <= 1 && last.is_some() {
            break; // only the registry's own receiver is left
        }
        let Ok(v) = view(&app, &id) else { break };
        if last.as_ref() != Some(&v) {
            let snap = Snap {
                view: v.clone(),
                text: Arc::new(text(&app, &id)),
            };
            tx.send_replace(Some(snap));
            last = Some(v);
        }
        if last.as_ref().is_some_and(|v| is_final(v.row.status)) {
            break;
        }
    }
    app.live
        .runs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&id);
}

async fn poll_queue(app: Arc<App>, tx: watch::Sender<Option<Arc<String>>>) {
    let mut tick = tokio::time::interval(QUEUE_POLL);
    let mut last: Option<Arc<String>> = None;
    loop {
        tick.tick().await;
        if tx.receiver_count() <= 1 && last.is_some() {
            break;
        }
        let Ok(body) = super::escalation::queue_body(&app) else {
            break;
        };
        if last.as_deref() != Some(&body) {
            let body = Arc::new(body);
            tx.send_replace(Some(body.clone()));
            last = Some(body);
        }
    }
    *app.live.queue.lock().unwrap_or_else(|p| p.into_inner()) = None;
}

/// `/runs/{id}/events`: an `update` event with `{"status", "steps", "final",
/// "controls", "text"}` each time the run changes; the stream ends once it is final.
pub async fn events(State(app): State<Arc<App>>, r: Reviewer, Path(id): Path<String>) -> Response {
    let id = match app.store.find_run(&id) {
        Ok(id) => id,
        Err(e) => return store_error(&e),
    };
    let rx = app.live.follow(&app, &id);
    Sse::new(updates(rx, r.0))
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// `/events/queue`: an `update` event with `{"html"}` (the queue's tables) each time
/// an escalation is filed or decided (and as ages move).
pub async fn queue_events(State(app): State<Arc<App>>, _r: Reviewer) -> Response {
    let rx = app.live.follow_queue(&app);
    let events = changes(rx).map(|body| {
        let data = serde_json::json!({ "html": body.as_str() });
        Ok::<_, Infallible>(Event::default().event("update").data(data.to_string()))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

use futures_util::StreamExt;

/// Every value the watch channel holds from now on (the current one first), until its
/// poller stops.
fn changes<T: Clone + Send + Sync + 'static>(rx: Rx<T>) -> impl Stream<Item = T> {
    stream::unfold((rx, true), |(mut rx, first)| async move {
        if !first || rx.borrow().is_none() {
            loop {
                if rx.changed().await.is_err() {
                    return None; // the poller stopped
                }
                if rx.borrow().is_some() {
                    break;
                }
            }
        }
        let value = rx.borrow_and_update().clone()?;
        Some((value, (rx, false)))
    })
}

fn updates(rx: Rx<Snap>, who: Session) -> impl Stream<Item = Result<Event, Infallible>> {
    // Ends after the first final snapshot.
    changes(rx)
        .scan(false, |ended, s| {
            let out = (!*ended).then_some(s.clone());
            *ended = *ended || is_final(s.view.row.status);
            futures_util::future::ready(out)
        })
        .map(move |s| {
            let data = serde_json::json!({
                "status": s.view.row.status.as_str(),
                "steps": s.view.row.steps,
                "final": is_final(s.view.row.status),
                "controls": controls(&s.view, &who),
                "text": s.text.as_str(),
            });
            Ok(Event::default().event("update").data(data.to_string()))
        })
}
