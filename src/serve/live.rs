//! Following runs live: server-sent events for the run page.
//!
//! **One reader per followed run, not per follower.** The first page that follows a
//! run starts a poller that looks at the run's row every [`POLL`] and, when it
//! changed, renders the `runs show` text once and publishes it on a watch channel;
//! every open page of that run receives the same `Arc`. Fifty pages cost one
//! poll and one render per change, so followers never add load on the run's own
//! process (measured: benches, "50 followers"). The poller stops with its last
//! follower, or when the run reaches a status that only a person can change.

use super::runs::{is_live, text};
use super::{App, Reviewer, store_error};
use crate::store::{RunId, RunStatus};
use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// How often a followed run's row is read.
pub const POLL: Duration = Duration::from_millis(250);

/// What a follower is sent: the run's status and its `runs show` text.
#[derive(Debug, Clone, PartialEq)]
pub struct Snap {
    pub status: RunStatus,
    pub steps: u32,
    pub updated_at: i64,
    pub text: Arc<String>,
}

#[derive(Default)]
pub struct Live {
    runs: Mutex<HashMap<RunId, watch::Receiver<Option<Snap>>>>,
}

impl Live {
    /// A receiver for `id`'s snapshots, starting its poller if none runs.
    fn follow(&self, app: &Arc<App>, id: &RunId) -> watch::Receiver<Option<Snap>> {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(rx) = runs.get(id).filter(|rx| rx.has_changed().is_ok()) {
            return rx.clone();
        }
        let (tx, rx) = watch::channel(None);
        runs.insert(id.clone(), rx.clone());
        tokio::spawn(poll(app.clone(), id.clone(), tx));
        rx
    }
}

async fn poll(app: Arc<App>, id: RunId, tx: watch::Sender<Option<Snap>>) {
    let mut tick = tokio::time::interval(POLL);
    let mut last: Option<(RunStatus, u32, i64)> = None;
    loop {
        tick.tick().await;
        if tx.receiver_count() <= 1 && last.is_some() {
            break; // only the registry's own receiver is left
        }
        let Ok(row) = app.store.run(&id) else { break };
        let key = (row.status, row.steps, row.updated_at);
        if last != Some(key) {
            last = Some(key);
            let snap = Snap {
                status: row.status,
                steps: row.steps,
                updated_at: row.updated_at,
                text: Arc::new(text(&app, &id)),
            };
            tx.send_replace(Some(snap));
        }
        if !is_live(row.status) {
            break;
        }
    }
    app.live
        .runs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&id);
}

/// `/runs/{id}/events`: an `update` event with `{"status", "steps", "text"}` each time
/// the run changes; the stream ends once the run stops.
pub async fn events(State(app): State<Arc<App>>, _r: Reviewer, Path(id): Path<String>) -> Response {
    let id = match app.store.find_run(&id) {
        Ok(id) => id,
        Err(e) => return store_error(&e),
    };
    let rx = app.live.follow(&app, &id);
    Sse::new(updates(rx))
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn updates(rx: watch::Receiver<Option<Snap>>) -> impl Stream<Item = Result<Event, Infallible>> {
    // (receiver, first event, stream done)
    stream::unfold((rx, true, false), |(mut rx, first, done)| async move {
        if done {
            return None;
        }
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
        let s = rx.borrow_and_update().clone()?;
        let data = serde_json::json!({
            "status": s.status.as_str(),
            "steps": s.steps,
            "live": is_live(s.status),
            "text": s.text.as_str(),
        });
        let event = Event::default().event("update").data(data.to_string());
        Some((Ok(event), (rx, false, !is_live(s.status))))
    })
}
