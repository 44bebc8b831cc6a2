//! Delivering notification events from the store's outbox (issue 24).
//!
//! Whoever writes an escalation or a run's end writes its event row in the same
//! transaction (`store/outbox.rs`); [`deliver_pending`] sends what is pending and marks
//! it. Every agentrun process that works on a database calls it — after the change it
//! made (run, resume, worker, resolve, serve) and when it starts — so an event a crash
//! left pending goes out with the next process, whichever it is.
//!
//! Targets come from the run's own `[notify]` (its tools.toml as snapshotted at start):
//! a webhook gets the event as a JSON POST with `Idempotency-Key: EVENT_ID` and a
//! Slack-compatible `text`; a command gets the same JSON on stdin and the event id as
//! `AGENTRUN_CALL_ID`. Each delivery goes through the tools' recovery chain
//! (per-attempt timeout, retries with backoff, `Retry-After`), and a target that keeps
//! failing is left alone for the rest of the pass (a breaker), so one dead receiver
//! cannot hold a process up. A failure is recorded on the row (`agentrun notify list`)
//! and retried by later passes up to [`MAX_PASSES`]; it never fails or blocks a run.
//!
//! **Trust lines** (docs/security.md, Notifications). A run's `[notify]` is the run
//! author's configuration, and delivering it must carry nothing of the process that
//! happens to deliver it. So a process expands `${VAR}` in a webhook, and runs a
//! notify `command`, only for a run it drives itself (start, resume, a worker's run,
//! a run the console drives) — a process that runs that run's tools by choice. Every
//! other process passing over the outbox (`serve`'s timer, `escalations list`,
//! `notify deliver`, any command's start-up pass) sends only events whose every target
//! is a plain URL, and leaves the rest pending for the run's next driver. Text in the
//! `text` field is escaped for Slack and Mattermost (`&`, `<`, `>`); its one link is
//! built from `public_url`. A delivery error names the webhook as written, never its
//! expanded value.

use crate::config::types::{
    Approval, CommandSpec, HttpSpec, NotifyConfig, OnUnknown, ToolDef, ToolKind, ToolsConfig,
};
use crate::recovery::{Execution, Gate};
use crate::setup::Snapshot;
use crate::store::{Delivery, Notice, RunId, Store};
use crate::tools::CallContext;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;

/// Events read per pass.
const BATCH: u32 = 100;
/// Passes that may fail before an event is marked failed for good.
pub const MAX_PASSES: u32 = 5;
/// Consecutive failures of one target before this pass stops trying it.
const BREAKER: u32 = 3;

/// What a pass did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Pass {
    pub delivered: u32,
    pub skipped: u32,
    pub failed: u32,
}

/// The JSON a receiver gets.
pub fn payload(n: &Notice, public_url: Option<&str>) -> Value {
    let link = public_url.map(|base| {
        let base = base.trim_end_matches('/');
        match n.escalation_id {
            Some(e) => format!("{base}/escalations/{e}"),
            None => format!("{base}/runs/{}", n.run_id),
        }
    });
    let what = match n.event {
        crate::config::types::NotifyEvent::EscalationFiled => {
            format!(
                "Run {} needs a person ({}): {}",
                n.run_id, n.kind, n.summary
            )
        }
        crate::config::types::NotifyEvent::EscalationResolved => format!(
            "Escalation {} of run {} was decided: {}",
            n.escalation_id.unwrap_or_default(),
            n.run_id,
            n.summary
        ),
        crate::config::types::NotifyEvent::RunEnded => {
            format!("Run {} ended: {}", n.run_id, n.kind)
        }
    };
    // Model, tool and people's text must not become Slack markup (`<!channel>`,
    // `<https://evil.example|agentrun console>`): the only link is ours.
    let what = slack_escape(&what);
    let text = match &link {
        Some(l) => format!("{what} <{}>", slack_escape(l)),
        None => what,
    };
    json!({
        "event": n.event.as_str(),
        "event_id": n.id,
        "run_id": n.run_id.as_str(),
        "escalation_id": n.escalation_id,
        "kind": n.kind,
        "summary": n.summary,
        "link": link,
        "created_at": crate::timefmt::rfc3339(n.created_at),
        "text": text,
    })
}

/// Escapes text for Slack's and Mattermost's `text` (their three control characters).
pub fn slack_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The runs this process drives (through the one lifecycle): for them alone it expands
/// `${VAR}` in a webhook and runs a notify `command` (module doc, Trust lines).
static DRIVEN: std::sync::Mutex<Vec<RunId>> = std::sync::Mutex::new(Vec::new());

/// Records that this process drives `run` (called by the lifecycle).
pub fn driving(run: &RunId) {
    if let Ok(mut d) = DRIVEN.lock()
        && !d.contains(run)
    {
        d.push(run.clone());
    }
}

fn drives(run: &RunId) -> bool {
    DRIVEN.lock().is_ok_and(|d| d.contains(run))
}

/// Whether a process that does not drive the run may send to every target of `cfg`:
/// only plain URLs, nothing of its own environment, no command.
fn needs_nothing_of_the_sender(cfg: &NotifyConfig) -> bool {
    cfg.command.is_none() && cfg.webhook.as_deref().is_none_or(|w| !w.contains("${"))
}

/// Sends every pending event and marks each. Never fails: a store error ends the pass
/// (the events stay pending for the next one).
pub async fn deliver_pending(store: &Store) -> Pass {
    let Ok(pending) = store.pending_notices(BATCH) else {
        return Pass::default();
    };
    deliver(store, pending, |run| run_config(store, run)).await
}

/// Where a run's events go, as far as its driver knows.
pub enum RunTargets {
    /// The run's `[notify]` (`None`: it has none).
    Known(Option<NotifyConfig>),
    /// Not set up: read from its snapshot.
    Unknown,
}

/// Sends the pending events of one run (a worker's slot, as the run it drove ends):
/// only that run's, so hundreds of slots ending runs at once do not each pass over
/// (and race to claim) everyone's; with its targets already known, no snapshot is
/// parsed again (issue 23).
pub async fn deliver_run(store: &Store, run: &RunId, targets: RunTargets) -> Pass {
    if let RunTargets::Known(None) = targets {
        // Nothing to send: one write, not a read and a write per event.
        let _ = store.skip_notices_of(run).await;
        return Pass::default();
    }
    let Ok(pending) = store.pending_notices_of(run, BATCH) else {
        return Pass::default();
    };
    match targets {
        RunTargets::Known(cfg) => deliver(store, pending, |_| cfg.clone()).await,
        RunTargets::Unknown => deliver(store, pending, |run| run_config(store, run)).await,
    }
}

async fn deliver(
    store: &Store,
    pending: Vec<Notice>,
    mut config_of: impl FnMut(&RunId) -> Option<NotifyConfig>,
) -> Pass {
    let mut pass = Pass::default();
    let mut configs: HashMap<RunId, Option<NotifyConfig>> = HashMap::new();
    let mut failures: HashMap<String, u32> = HashMap::new();
    for n in pending {
        let cfg = configs
            .entry(n.run_id.clone())
            .or_insert_with(|| config_of(&n.run_id))
            .clone();
        let Some(cfg) = cfg.filter(|c| c.events.contains(&n.event)) else {
            // Nothing to send, whoever looks: no claim needed to say so.
            let _ = store.mark_notice(&n.id, &Delivery::Skipped);
            pass.skipped += 1;
            continue;
        };
        if !drives(&n.run_id) && !needs_nothing_of_the_sender(&cfg) {
            // The run's next driver sends it (module doc, Trust lines).
            continue;
        }
        // Another process passing over the outbox now may be sending it.
        if !matches!(store.claim_notice(&n.id), Ok(true)) {
            continue;
        }
        crate::fault::point("notify_after_commit");
        let body = payload(&n, cfg.public_url.as_deref());
        let mut errors = Vec::new();
        let (targets, secrets) = targets(&cfg, &n.id);
        for target in targets {
            let key = target.name.clone();
            if failures.get(&key).is_some_and(|f| *f >= BREAKER) {
                // The breaker: counted as this pass's failure, tried by a later pass.
                errors.push(format!(
                    "{key}: not tried (failed {BREAKER} times in a row)"
                ));
                continue;
            }
            match send(&target, &body, &n).await {
                Ok(()) => {
                    failures.remove(&key);
                }
                Err(e) => {
                    *failures.entry(key).or_default() += 1;
                    errors.push(
                        secrets
                            .iter()
                            .fold(e, |e, s| e.replace(s.as_str(), "[redacted]")),
                    );
                }
            }
        }
        let how = if errors.is_empty() {
            crate::fault::point("notify_after_delivery");
            pass.delivered += 1;
            Delivery::Delivered
        } else {
            pass.failed += 1;
            Delivery::Failed {
                give_up: n.attempts + 1 >= MAX_PASSES,
                error: errors.join("; "),
            }
        };
        let _ = store.mark_notice(&n.id, &how);
    }
    pass
}

/// Opens the database (if it exists) and runs [`deliver_pending_blocking`]; for the
/// command layer, which calls it when a command starts and after it ends.
pub fn deliver_for(db: &Path) -> Pass {
    let exists = crate::store::is_postgres_url(&db.to_string_lossy()) || db.exists();
    match exists.then(|| Store::open(db, false)) {
        Some(Ok(store)) => deliver_pending_blocking(&store),
        _ => Pass::default(),
    }
}

/// [`deliver_pending`] on a runtime of its own, for the synchronous command layer.
pub fn deliver_pending_blocking(store: &Store) -> Pass {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(deliver_pending(store)),
        Err(_) => Pass::default(),
    }
}

/// The run's `[notify]`, as snapshotted at start ([`Snapshot::notify`]).
fn run_config(store: &Store, run: &RunId) -> Option<NotifyConfig> {
    let snapshot: Snapshot = serde_json::from_str(&store.snapshot(run).ok()?).ok()?;
    snapshot.notify()
}

/// `${VAR}` in a webhook URL, from the environment at send time (a Slack webhook URL
/// is itself a secret, and stays out of tools.toml and the store that way).
fn expand(url: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = url;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let end = rest[at..]
            .find('}')
            .ok_or_else(|| "webhook: unclosed ${".to_string())?;
        let var = &rest[at + 2..at + end];
        let value = std::env::var(var).map_err(|_| {
            format!("webhook needs the environment variable `{var}`, which is not set")
        })?;
        out.push_str(&value);
        rest = &rest[at + end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The delivery targets as tools the recovery chain can run, and what `${VAR}`
/// expanded to (kept out of every error stored).
fn targets(cfg: &NotifyConfig, event_id: &str) -> (Vec<ToolDef>, Vec<String>) {
    let def = |name: &str, kind: ToolKind| ToolDef {
        name: name.to_string(),
        description: String::new(),
        input_schema: json!({"type": "object"}),
        kind,
        retry: cfg.retry.clone(),
        // Receivers drop repeats by the event id, so retrying after a timeout is safe.
        idempotent: true,
        fallback: Vec::new(),
        stale: false,
        approval: Approval::Never,
        on_unknown: OnUnknown::TellModel,
    };
    let mut out = Vec::new();
    let mut secrets = Vec::new();
    if let Some(url) = &cfg.webhook {
        let mut headers = std::collections::BTreeMap::new();
        headers.insert("Idempotency-Key".to_string(), event_id.to_string());
        let expanded = expand(url).unwrap_or_else(|e| format!("invalid://{e}"));
        if expanded != *url {
            secrets.push(expanded.clone());
            secrets.extend(expanded_values(url));
        }
        let url = expanded;
        out.push(def(
            "notify_webhook",
            ToolKind::Http(HttpSpec {
                method: "POST".into(),
                url: url.replace('{', "%7B").replace('}', "%7D"),
                headers,
                output_cap: 4096,
            }),
        ));
    }
    if let Some(argv) = &cfg.command {
        out.push(def(
            "notify_command",
            ToolKind::Command(CommandSpec {
                argv: argv.clone(),
                program: None,
                env: Vec::new(),
                set: Default::default(),
                inherit_all: false,
                cwd: cfg.cwd.clone(),
                output_cap: 4096,
                // The user's own notifier (it must reach the network), not a tool
                // the model chose: unconfined, as docs/security.md says.
                sandbox: crate::config::Sandbox::off(),
            }),
        ));
    }
    (out, secrets)
}

/// The values of the `${VAR}`s in `url` long enough to be told apart in a message.
fn expanded_values(url: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = url;
    while let Some(at) = rest.find("${") {
        let Some(end) = rest[at..].find('}') else {
            break;
        };
        if let Ok(v) = std::env::var(&rest[at + 2..at + end])
            && v.len() >= 8
        {
            out.push(v);
        }
        rest = &rest[at + end + 1..];
    }
    out
}

/// Runs one delivery through the recovery chain; the error is one line.
async fn send(def: &ToolDef, body: &Value, n: &Notice) -> Result<(), String> {
    let mut cfg = ToolsConfig::default();
    cfg.tools.insert(def.name.clone(), def.clone());
    let prompts = crate::prompts::Prompts::builtin();
    let clock = crate::clock::SystemClock;
    let events = crate::trace::EventBuffer::default();
    let ctx = CallContext {
        run_id: n.run_id.as_str(),
        call_id: &n.id,
        key: &n.id,
        clock: &clock,
        events: &events,
        mcp: None,
        hooks: None,
        limits: None,
    };
    let run = |_: &ToolDef, _: &Value| Gate::Run;
    match crate::recovery::execute(&cfg, &prompts, &def.name, body, &ctx, &run).await {
        Execution::Done(o) if !o.is_error => Ok(()),
        Execution::Done(o) => Err(format!(
            "{}: {}",
            def.name,
            o.content["message"].as_str().unwrap_or("failed")
        )),
        // A notifier is a command or HTTP tool: it neither pauses nor has children.
        Execution::Paused { .. } | Execution::ChildWaiting { .. } => {
            Err(format!("{}: paused", def.name))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::types::NotifyEvent;

    fn notice(summary: &str) -> Notice {
        Notice {
            id: "evt_1".into(),
            event: NotifyEvent::EscalationFiled,
            run_id: RunId("r1".into()),
            escalation_id: Some(7),
            kind: "approval_required".into(),
            summary: summary.into(),
            created_at: 0,
            state: "pending".into(),
            attempts: 0,
            last_error: None,
        }
    }

    /// Model, tool and people's text cannot ping a channel or plant a link in Slack
    /// or Mattermost: `<`, `>` and `&` arrive escaped, and the one link is ours.
    #[test]
    fn slack_markup_in_a_summary_arrives_escaped() {
        let hostile = "<!channel> refund now <https://evil.example|agentrun console> & more";
        let body = payload(&notice(hostile), Some("https://console.example"));
        assert_eq!(
            body["text"],
            "Run r1 needs a person (approval_required): &lt;!channel&gt; refund now \
             &lt;https://evil.example|agentrun console&gt; &amp; more \
             <https://console.example/escalations/7>"
        );
        // The JSON field keeps the text as it is, for receivers that escape their own.
        assert_eq!(body["summary"], hostile);
    }

    #[test]
    fn a_sender_that_does_not_drive_the_run_sends_only_plain_urls() {
        let cfg = |webhook: Option<&str>, command: bool| NotifyConfig {
            webhook: webhook.map(str::to_string),
            command: command.then(|| vec!["notify.sh".to_string()]),
            events: NotifyEvent::ALL.to_vec(),
            public_url: None,
            retry: Default::default(),
            cwd: std::path::PathBuf::from("."),
        };
        assert!(needs_nothing_of_the_sender(&cfg(
            Some("https://x.example/h"),
            false
        )));
        assert!(!needs_nothing_of_the_sender(&cfg(
            Some("https://x/${TOKEN}"),
            false
        )));
        assert!(!needs_nothing_of_the_sender(&cfg(None, true)));
        assert!(!drives(&RunId("not-driven-here".into())));
        driving(&RunId("driven-here".into()));
        assert!(drives(&RunId("driven-here".into())));
    }
}
