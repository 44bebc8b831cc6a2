//! Runs resumed from the console, driven in the server process.
//!
//! Like a worker slot: each run gets a thread with its own store connection and its
//! own single-threaded runtime (the driver blocks on store calls), and goes through
//! the one lifecycle (`runner::lifecycle`: heartbeat, cancel, release). The lease is taken and the run marked
//! `running` before [`Drivers::start`] returns, so the page the reviewer lands on
//! already follows a live run, and a second click is refused by the lease.

use crate::cli::progress::{Mode, Progress};
use crate::clock::SystemClock;
use crate::runner::Runner;
use crate::runner::lifecycle::{self, Lifecycle, StopOn};
use crate::setup::{self, Snapshot};
use crate::store::{Lease, RunId, RunStatus, Store};
use anyhow::Context;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often a driven run's lease heartbeat is renewed.
const HEARTBEAT: Duration = Duration::from_secs(10);

/// The runs this server process drives.
#[derive(Default)]
pub struct Drivers {
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Drivers {
    /// Takes the run's lease and drives it to its next stop on a new thread.
    pub fn start(&self, db: &Path, id: &RunId) -> anyhow::Result<()> {
        let store = Arc::new(Store::open(db, false)?);
        let snapshot: Snapshot = serde_json::from_str(&store.snapshot(id)?)
            .with_context(|| format!("run {id}: stored config snapshot is damaged"))?;
        let mut snapshot = snapshot;
        snapshot.scripts.extend(store.scripts(id)?);
        let resolved = setup::resolve(snapshot)?;
        let row = store.run(id)?;
        let lease = store.acquire(id)?;
        store.set_status(&lease, RunStatus::Running, None)?;
        let runner = Runner {
            store: store.clone(),
            lease: lease.clone(),
            resolved,
            max_steps: row.max_steps,
            max_tokens: row.max_tokens,
            clock: Arc::new(SystemClock),
            observer: Arc::new(Progress::new(Mode::Quiet)),
        };
        let handle = std::thread::Builder::new()
            .name(format!("run-{id}"))
            .spawn(move || drive(store, lease, runner))?;
        let mut threads = self.threads.lock().unwrap_or_else(|p| p.into_inner());
        threads.retain(|t| !t.is_finished());
        threads.push(handle);
        Ok(())
    }
}

fn drive(store: Arc<Store>, lease: Lease, runner: Runner) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        let _ = store.set_status(
            &lease,
            RunStatus::Failed,
            Some("cannot start the async runtime"),
        );
        let _ = store.release(&lease);
        return;
    };
    // The one lifecycle (issue 21): heartbeat, cancel through the store, release.
    let how = Lifecycle {
        heartbeat_every: HEARTBEAT,
        stop_on: StopOn::CancelOnly,
    };
    let result = rt.block_on(lifecycle::drive(&runner, how));
    drop(rt);
    if let Err(e) = &result {
        // The runner records what it can; a store error leaves the run for `resume`.
        crate::errln!("agentrun: serve: run {} stopped: {e}", lease.run);
    }
}
