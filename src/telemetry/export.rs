//! Sending finished spans, off the run's path (docs/observability.md, "Never in the
//! way"). A run hands a finished span to a bounded queue and goes on; one thread of
//! the process batches the queue to the OTLP exporter. A full queue drops the span and
//! counts it; a collector that is down, slow or refusing costs that thread's time, not
//! the run's, and is reported once. A process that ends waits at most the flush bound.

use super::settings::Settings;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, Instant};

/// Spans sent in one request at most.
const BATCH: usize = 512;

enum Msg {
    Span(Box<SpanData>),
    /// Send what is queued, then answer.
    Flush(SyncSender<()>),
}

/// The queue in front of the export thread.
pub struct Export {
    tx: SyncSender<Msg>,
    flush: Duration,
    counts: std::sync::Arc<Counts>,
}

/// What became of the spans handed over, for the one report at the end.
#[derive(Default)]
pub struct Counts {
    pub queued: AtomicU64,
    pub dropped: AtomicU64,
    pub exported: AtomicU64,
    pub failed: AtomicU64,
    said_dropped: AtomicBool,
    said_failed: AtomicBool,
}

impl Export {
    /// Starts the export thread (the exporter is built on it: its blocking HTTP
    /// client must live outside any async runtime).
    pub fn start(settings: &Settings) -> Export {
        let (tx, rx) = std::sync::mpsc::sync_channel(settings.queue);
        let counts = std::sync::Arc::new(Counts::default());
        let (delay, service) = (settings.delay, settings.service_name.clone());
        let thread_counts = counts.clone();
        let spawned = std::thread::Builder::new()
            .name("agentrun-otlp".into())
            .spawn(move || serve(rx, delay, &service, &thread_counts));
        if let Err(e) = spawned {
            say(&format!("telemetry is off: its thread did not start: {e}"));
        }
        Export {
            tx,
            flush: settings.flush,
            counts,
        }
    }

    /// Queues a finished span; never waits.
    pub fn send(&self, span: SpanData) {
        match self.tx.try_send(Msg::Span(Box::new(span))) {
            Ok(()) => {
                self.counts.queued.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.counts.dropped.fetch_add(1, Ordering::Relaxed);
                if !self.counts.said_dropped.swap(true, Ordering::Relaxed) {
                    say("telemetry: the span queue is full; spans are dropped and counted");
                }
            }
        }
    }

    pub fn counts(&self) -> &Counts {
        &self.counts
    }

    /// Sends what is queued, waiting at most the flush bound; says how many spans
    /// were dropped, if any were.
    pub fn flush(&self) {
        let (ack, done) = std::sync::mpsc::sync_channel(1);
        let deadline = Instant::now() + self.flush;
        // The queue may be full: wait for room, but only until the deadline.
        let mut msg = Msg::Flush(ack);
        loop {
            match self.tx.try_send(msg) {
                Ok(()) => break,
                Err(TrySendError::Full(m)) if Instant::now() < deadline => {
                    msg = m;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(_) => return self.report(),
            }
        }
        let _ = done.recv_timeout(deadline.saturating_duration_since(Instant::now()));
        self.report();
    }

    fn report(&self) {
        let c = &self.counts;
        let lost = c.dropped.load(Ordering::Relaxed) + c.failed.load(Ordering::Relaxed);
        if lost > 0 {
            say(&format!(
                "telemetry: {lost} span(s) were not delivered ({} dropped from a full queue, {} refused or timed out)",
                c.dropped.load(Ordering::Relaxed),
                c.failed.load(Ordering::Relaxed)
            ));
        }
    }
}

fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(crate::out::stderr(), "agentrun: {line}");
}

/// The export thread: batches of up to [`BATCH`] spans, sent when full or `delay`
/// after the first span of the batch arrived, and on every flush.
fn serve(rx: Receiver<Msg>, delay: Duration, service: &str, counts: &Counts) {
    let built = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build();
    let mut exporter = match built {
        Ok(e) => e,
        Err(e) => {
            say(&format!("telemetry is off: the OTLP exporter: {e}"));
            // Drain, so senders see a full queue rather than block.
            for _ in rx {}
            return;
        }
    };
    let resource = Resource::builder()
        .with_service_name(service.to_string())
        .build();
    exporter.set_resource(&resource);
    let mut batch: Vec<SpanData> = Vec::new();
    let mut due: Option<Instant> = None;
    loop {
        let wait = due.map_or(Duration::from_secs(3600), |d| {
            d.saturating_duration_since(Instant::now())
        });
        match rx.recv_timeout(wait) {
            Ok(Msg::Span(span)) => {
                batch.push(*span);
                due.get_or_insert_with(|| Instant::now() + delay);
                if batch.len() >= BATCH {
                    send(&exporter, &mut batch, counts);
                    due = None;
                }
            }
            Ok(Msg::Flush(ack)) => {
                send(&exporter, &mut batch, counts);
                due = None;
                let _ = ack.try_send(());
            }
            Err(RecvTimeoutError::Timeout) => {
                send(&exporter, &mut batch, counts);
                due = None;
            }
            Err(RecvTimeoutError::Disconnected) => {
                send(&exporter, &mut batch, counts);
                return;
            }
        }
    }
}

fn send(exporter: &opentelemetry_otlp::SpanExporter, batch: &mut Vec<SpanData>, counts: &Counts) {
    if batch.is_empty() {
        return;
    }
    let n = batch.len() as u64;
    match futures_executor::block_on(exporter.export(std::mem::take(batch))) {
        Ok(()) => {
            counts.exported.fetch_add(n, Ordering::Relaxed);
        }
        Err(e) => {
            counts.failed.fetch_add(n, Ordering::Relaxed);
            if !counts.said_failed.swap(true, Ordering::Relaxed) {
                say(&format!(
                    "telemetry: the collector did not take spans ({e}); runs go on, spans are counted as lost"
                ));
            }
        }
    }
}
