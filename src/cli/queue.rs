//! `agentrun submit` and `agentrun worker`: a run queue in the store, and workers that
//! take runs from it (issue 17).
//!
//! `submit` checks and snapshots everything `start` does, then records the run as
//! `queued` and prints its id. A worker runs `--concurrency N` slots, each a thread
//! with its own store connection and its own single-threaded runtime (the driver
//! blocks on store calls, so one runtime per slot is what lets N runs commit at once).
//! A slot claims the oldest queued run — or a `running` one whose lease heartbeat is
//! older than the TTL, i.e. its worker died — and drives it from its last committed
//! step, exactly as `resume` does: journaled outcomes are reused, and a
//! non-idempotent call that was in flight becomes `outcome_unknown`. While it drives a
//! run it heartbeats the lease every TTL/4; every write is fenced by the lease's
//! token, so a worker that was taken over cannot write late.
//!
//! SIGTERM (or Ctrl-C) stops claiming; each run in progress is given up to `--grace`
//! to finish the step it is in (the worker watches the run's checkpoint and stops the
//! run as soon as it advances, so no new step begins), then goes back to the queue
//! (`queued`, lease released) and another worker continues it from that step, without
//! waiting for the TTL. A step still running after the grace is cut off, as when
//! `start` is interrupted: its last committed step stands.

use super::start::{StartArgs, prepare, shutdown_signal};
use super::{BadInput, Cli, Exit, open_store, output};
use crate::cli::progress::{Mode, Progress};
use crate::clock::SystemClock;
use crate::machine::state::LoopState;
use crate::model::{Message, Role};
use crate::runner::{RunError, Runner};
use crate::setup;
use crate::store::{Lease, NewRun, RunId, RunStatus, Store, StoreError};
use anyhow::Context;
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Take queued runs and drive them, up to N at once; runs whose worker died are taken
/// over after the lease TTL.
///
/// Every worker on every machine shares the database (--db / AGENTRUN_DB; PostgreSQL
/// for more than one machine). SIGTERM hands runs in progress back to the queue.
///
/// Examples:
///   agentrun worker --concurrency 16
///   agentrun worker --until-idle       # drain the queue, then exit
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct WorkerArgs {
    /// Runs driven at once by this process.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub concurrency: u32,
    /// This worker's name, shown by `runs list` [default: HOST-PID]
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// A run whose lease has not been renewed for this long is taken over (use the
    /// same value on every worker).
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    pub lease_ttl: String,
    /// How often an idle slot looks for work.
    #[arg(long, value_name = "DURATION", default_value = "500ms")]
    pub poll: String,
    /// Exit once the queue has no queued or running run left.
    #[arg(long)]
    pub until_idle: bool,
    /// On SIGTERM, how long a run in progress may take to finish its current step
    /// before it is cut off and handed back.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub grace: String,
}

pub fn submit(cli: &Cli, args: &StartArgs) -> anyhow::Result<Exit> {
    if args.stream_json {
        return Err(BadInput(
            "--stream-json is for `start`; a worker drives submitted runs".into(),
        )
        .into());
    }
    let (_, prepared) = prepare(cli, args)?;
    let store = open_store(&cli.db_path(), true)?;
    let snapshot = serde_json::to_string(&prepared.resolved.snapshot)?;
    let messages = [
        Message::text(
            Role::System,
            prepared.resolved.snapshot.prompts.system.trim(),
        ),
        Message::text(Role::User, &prepared.task.prompt),
    ];
    let state = serde_json::to_string(&LoopState::default())?;
    let id = RunId::generate();
    store.submit_run(&NewRun {
        id: id.clone(),
        task: &prepared.task.prompt,
        task_path: &prepared.task.path.display().to_string(),
        snapshot: &snapshot,
        scripts: &prepared.resolved.snapshot.scripts,
        max_steps: prepared.max_steps,
        max_tokens: prepared.max_tokens,
        messages: &messages,
        state: &state,
    })?;
    if cli.json {
        output::print_json(&serde_json::json!({"run_id": id.as_str(), "status": "queued"}))?;
    } else {
        crate::outln!("{id}")?;
    }
    Ok(Exit::Completed)
}

struct Ctx {
    db: PathBuf,
    name: String,
    ttl: Duration,
    poll: Duration,
    grace: Duration,
    until_idle: bool,
    quiet: bool,
}

pub fn worker(cli: &Cli, args: &WorkerArgs) -> anyhow::Result<Exit> {
    let duration = |flag: &str, v: &str| {
        crate::config::parse_duration(v)
            .map_err(|e| BadInput(format!("{flag}: {e} (e.g. 30s, 500ms)")))
    };
    let ttl = duration("--lease-ttl", &args.lease_ttl)?;
    let poll = duration("--poll", &args.poll)?;
    let grace = duration("--grace", &args.grace)?;
    let name = args.name.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "worker".into());
        format!("{host}-{}", std::process::id())
    });
    // Open once here so a bad --db is reported before any thread starts.
    drop(open_store(&cli.db_path(), true)?);
    let ctx = Arc::new(Ctx {
        db: cli.db_path(),
        name,
        ttl,
        poll,
        grace,
        until_idle: args.until_idle,
        quiet: cli.quiet || cli.json,
    });
    if !ctx.quiet {
        crate::errln!(
            "agentrun: worker {} taking runs from {} ({} at once, lease TTL {})",
            ctx.name,
            super::open_store(&ctx.db, false)?.path().display(),
            args.concurrency,
            humantime::format_duration(ttl)
        );
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let done = Arc::new(tokio::sync::Notify::new());
    let left = Arc::new(AtomicUsize::new(args.concurrency as usize));
    let slots: Vec<_> = (0..args.concurrency)
        .map(|i| {
            let (ctx, stop, done, left) =
                (ctx.clone(), stop_rx.clone(), done.clone(), left.clone());
            std::thread::Builder::new()
                .name(format!("slot-{i}"))
                .spawn(move || {
                    let r = slot(&ctx, stop);
                    if left.fetch_sub(1, Ordering::SeqCst) == 1 {
                        done.notify_one();
                    }
                    r
                })
                .context("cannot start a worker thread")
        })
        .collect::<anyhow::Result<_>>()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async {
        tokio::select! {
            _ = shutdown_signal() => {}
            _ = done.notified() => {}
        }
    });
    let _ = stop_tx.send(true);
    let mut failed = None;
    for s in slots {
        if let Ok(Err(e)) = s.join() {
            failed = Some(e);
        }
    }
    if !ctx.quiet {
        crate::errln!("agentrun: worker {} stopped", ctx.name);
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(Exit::Completed),
    }
}

/// One slot: claim, drive, repeat, until told to stop (or, with --until-idle, until
/// the queue is empty).
fn slot(ctx: &Ctx, mut stop: tokio::sync::watch::Receiver<bool>) -> anyhow::Result<()> {
    let store = Arc::new(open_store(&ctx.db, false)?.with_lease_ttl(ctx.ttl));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async {
        loop {
            if *stop.borrow() {
                return Ok(());
            }
            match store.claim(&ctx.name, ctx.ttl) {
                Ok(Some(lease)) => drive(ctx, &store, lease, &mut stop).await,
                Ok(None) => {
                    if ctx.until_idle && store.queue_counts()? == (0, 0) {
                        return Ok(());
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(ctx.poll) => {}
                        _ = stop.changed() => {}
                    }
                }
                Err(e) => {
                    crate::errln!("agentrun: worker {}: cannot claim a run: {e}", ctx.name);
                    tokio::select! {
                        _ = tokio::time::sleep(ctx.poll.max(Duration::from_secs(1))) => {}
                        _ = stop.changed() => {}
                    }
                }
            }
        }
    })
}

/// Drives one claimed run until it stops, or until the worker is told to stop (then
/// the run goes back to the queue).
async fn drive(
    ctx: &Ctx,
    store: &Arc<Store>,
    lease: Lease,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) {
    let id = lease.run.clone();
    let say = |line: String| {
        if !ctx.quiet {
            crate::errln!("agentrun: worker {}: run {id} {line}", ctx.name);
        }
    };
    let runner = match runner_for(store, &lease) {
        Ok(r) => r,
        Err(e) => {
            // The snapshot cannot be set up here (e.g. a tool missing on this machine):
            // the run fails with the reason rather than bouncing between workers.
            let reason = format!("worker {} cannot set the run up: {e:#}", ctx.name);
            let _ = store.set_status(&lease, RunStatus::Failed, Some(&reason));
            let _ = store.release(&lease);
            say(format!("failed: {reason}"));
            return;
        }
    };
    let heartbeat = {
        let (store, lease, every) = (store.clone(), lease.clone(), ctx.ttl / 4);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every.max(Duration::from_millis(10)));
            loop {
                tick.tick().await;
                if store.heartbeat(&lease).is_err() {
                    return;
                }
            }
        })
    };
    // The block ends the run's future (and with it any tool still running) before the
    // lease is released below.
    let result = {
        let run = runner.run();
        tokio::pin!(run);
        let mut result = tokio::select! {
            r = &mut run => Some(r),
            _ = stop.changed() => None,
        };
        if result.is_none() {
            // Stopping: let the current step finish (its checkpoint advances), up to the grace.
            let begun = store.checkpoint(&id).map(|c| c.0).ok();
            let deadline = tokio::time::Instant::now() + ctx.grace;
            loop {
                tokio::select! {
                    r = &mut run => {
                        result = Some(r);
                        break;
                    }
                    _ = tokio::time::sleep(Duration::from_millis(20)) => {
                        let now = store.checkpoint(&id).map(|c| c.0).ok();
                        if now != begun || tokio::time::Instant::now() >= deadline {
                            break;
                        }
                    }
                }
            }
        }
        result
    };
    heartbeat.abort();
    drop(runner);
    match result {
        Some(Ok(o)) => {
            let _ = store.release(&lease);
            say(format!("{} after {} steps", o.status, o.steps));
        }
        Some(Err(RunError::Store(StoreError::LeaseLost(_)))) => {
            say("was taken over by another worker; this one stopped writing to it".into());
        }
        Some(Err(e)) => {
            // A store or state error: hand it back, another worker (or this one) retries.
            let _ = store.release_to_queue(&lease);
            say(format!("stopped ({e}); back in the queue"));
        }
        None => {
            let _ = store.release_to_queue(&lease);
            say("handed back to the queue (worker stopping)".into());
        }
    }
}

fn runner_for(store: &Arc<Store>, lease: &Lease) -> anyhow::Result<Runner> {
    let row = store.run(&lease.run)?;
    let snapshot = super::start::stored_snapshot(store, &lease.run)?;
    let resolved = setup::resolve(snapshot)?;
    Ok(Runner {
        store: store.clone(),
        lease: lease.clone(),
        resolved,
        max_steps: row.max_steps,
        max_tokens: row.max_tokens,
        clock: Arc::new(SystemClock),
        observer: Arc::new(Progress::new(Mode::Quiet)),
    })
}
