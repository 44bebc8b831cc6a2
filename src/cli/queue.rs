//! `agentrun submit` and `agentrun worker`: a run queue in the store, and workers that
//! take runs from it (issue 17).
//!
//! `submit` checks and snapshots everything `start` does, then records the run as
//! `queued` and prints its id. A worker runs `--concurrency N` slots on a few threads
//! (`runner::worker::threads`), each with its own store handle (SQLite: a connection
//! of its own; PostgreSQL: the process's one bounded pool, `--db-pool`, which every
//! store opened on the URL shares — so the worker's connections are the pool's) and
//! its own single-threaded runtime (the driver blocks on store calls, so more than one
//! thread lets runs commit while another waits); one batched pulse on the main thread
//! heartbeats every run held and looks for cancels (`runner::pulse`).
//! A slot claims the oldest queued run — or a `running` one whose lease heartbeat is
//! older than the TTL, i.e. its worker died — and drives it from its last committed
//! step, exactly as `resume` does: journaled outcomes are reused, and a
//! non-idempotent call that was in flight becomes `outcome_unknown`. While it drives a
//! run it heartbeats the lease every TTL/4; every write is fenced by the lease's
//! token, so a worker that was taken over cannot write late.
//!
//! SIGTERM (or Ctrl-C) stops claiming; each run in progress gets a stop request
//! (issue 21): the machine ends the run at its next step boundary, so no new step
//! begins, and the work in flight may finish within `--grace`; then the run goes back
//! to the queue (`queued`, lease released) and another worker continues it from that
//! step, without waiting for the TTL. Work still in flight after the grace is given
//! up (the model request dropped, a tool's process group killed), as when `start` is
//! interrupted: its last committed step stands. The slot loop and the lifecycle live
//! in `runner/`; this module parses, starts the slots' threads and prints.

use super::start::{StartArgs, prepare};
use super::{BadInput, Cli, Exit, open_store, output};
use crate::machine::state::LoopState;
use crate::model::{Message, Role};
use crate::runner::lifecycle::shutdown_signal;
use crate::runner::pulse::Pulses;
use crate::runner::worker::{self, Report, SlotConfig};
use crate::store::{NewRun, RunId, RunStatus};
use anyhow::Context;
use clap::Args;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

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
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=MAX_CONCURRENCY))]
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
    /// Serve this worker's metrics in Prometheus text format at `http://ADDR/metrics`
    /// (e.g. 127.0.0.1:9464; docs/observability.md).
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<String>,
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

/// The most runs one worker drives at once. A run waiting on its model costs well
/// under 200 KiB here (docs/bench.md, "One worker, many runs"); the bound is what
/// one process's file descriptors and one database's writes comfortably carry.
const MAX_CONCURRENCY: i64 = 4096;

struct Ctx {
    slot: SlotConfig,
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
    if let Some(addr) = &args.metrics_addr {
        let listener = std::net::TcpListener::bind(addr.as_str())
            .map_err(|e| BadInput(format!("--metrics-addr {addr}: {e}")))?;
        crate::telemetry::metrics::serve(listener).context("cannot start the metrics thread")?;
    }
    let name = args.name.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "worker".into());
        format!("{host}-{}", std::process::id())
    });
    // Opened here so a bad --db is reported before any thread starts; the pulse
    // writes through it.
    let pulse_store = open_store(&cli.db_path(), true)?.with_lease_ttl(ttl);
    let pulses = Arc::new(Pulses::default());
    let ctx = Arc::new(Ctx {
        slot: SlotConfig {
            db: cli.db_path(),
            name,
            ttl,
            poll,
            grace,
            until_idle: args.until_idle,
            pulses: pulses.clone(),
            idle: tokio::sync::Mutex::new(()),
            run_ended: tokio::sync::Notify::new(),
            drained: std::sync::atomic::AtomicBool::new(false),
        },
        quiet: cli.quiet || cli.json,
    });
    if !ctx.quiet {
        crate::errln!(
            "agentrun: worker {} taking runs from {} ({} at once, lease TTL {})",
            ctx.slot.name,
            super::open_store(&ctx.slot.db, false)?.path().display(),
            args.concurrency,
            humantime::format_duration(ttl)
        );
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let done = Arc::new(tokio::sync::Notify::new());
    let concurrency = args.concurrency as usize;
    let threads = worker::threads(concurrency);
    let left = Arc::new(AtomicUsize::new(threads));
    let started = std::time::Instant::now();
    let slots: Vec<_> = (0..threads)
        .map(|i| {
            // Slots spread evenly: the first `concurrency % threads` get one more.
            let n = concurrency / threads + usize::from(i < concurrency % threads);
            let (ctx, stop, done, left) =
                (ctx.clone(), stop_rx.clone(), done.clone(), left.clone());
            std::thread::Builder::new()
                .name(format!("slots-{i}"))
                .spawn(move || {
                    let r = slots_thread(&ctx, n, stop);
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
    let every = (ttl / 4).max(std::time::Duration::from_millis(10));
    let signalled = rt.block_on(async {
        tokio::select! {
            _ = shutdown_signal() => true,
            _ = done.notified() => false,
            // Never ends: it pulses for as long as it is polled.
            _ = pulses.run(&pulse_store, every) => false,
        }
    });
    let _ = stop_tx.send(true);
    if signalled {
        if !ctx.quiet {
            crate::errln!(
                "agentrun: worker {} stopping: runs in progress stop at their next step \
                 boundary (work in flight may finish within {}), then go back to the queue",
                ctx.slot.name,
                args.grace
            );
        }
        // Runs finishing their step keep their heartbeat until handed back.
        rt.block_on(async {
            tokio::select! {
                _ = done.notified() => {}
                _ = pulses.run(&pulse_store, every) => {}
            }
        });
    }
    let mut failed = None;
    for s in slots {
        if let Ok(Err(e)) = s.join() {
            failed = Some(e);
        }
    }
    if !ctx.quiet {
        crate::errln!(
            "agentrun: worker {} stopped after {:.1} s ({} heartbeat writes)",
            ctx.slot.name,
            started.elapsed().as_secs_f64(),
            pulses.heartbeat_writes()
        );
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(Exit::Completed),
    }
}

/// One of the worker's threads: its own store handle and runtime, driving `n`
/// slots through the runner's slot loop; this prints what they report. A slot's
/// store error ends that slot only; the first is the thread's result.
fn slots_thread(
    ctx: &Ctx,
    n: usize,
    stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let store = Arc::new(open_store(&ctx.slot.db, false)?.with_lease_ttl(ctx.slot.ttl));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let say = |id: &RunId, report: Report| say(ctx, id, report);
    let slots = (0..n).map(|_| worker::run_slot(&ctx.slot, store.clone(), stop.clone(), &say));
    let results = rt.block_on(futures_util::future::join_all(slots));
    results.into_iter().collect::<Result<Vec<()>, _>>()?;
    Ok(())
}

/// The worker's line about a run a slot drove.
fn say(ctx: &Ctx, id: &RunId, report: Report) {
    let name = &ctx.slot.name;
    let line = match report {
        Report::ClaimFailed(e) => {
            // Said even with --quiet: the worker cannot reach its queue.
            crate::errln!("agentrun: worker {name}: cannot claim a run: {e}");
            return;
        }
        Report::Stopped(o) if o.status == RunStatus::Queued => {
            "handed back to the queue (worker stopping)".to_string()
        }
        Report::Stopped(o) => format!(
            "{} after {} step{}",
            o.status,
            o.steps,
            if o.steps == 1 { "" } else { "s" }
        ),
        Report::TakenOver => {
            "was taken over by another worker; this one stopped writing to it".into()
        }
        Report::SetupFailed(reason) => format!("failed: {reason}"),
        Report::Error(e) => format!("stopped ({e}); back in the queue"),
    };
    if !ctx.quiet {
        crate::errln!("agentrun: worker {name}: run {id} {line}");
    }
}
