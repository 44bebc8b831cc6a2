//! `[notify]` of tools.toml (and of the config file): checked like every other section,
//! every problem named with its key.

use super::Sink;
use super::raw::{RawNotify, Where};
use super::resolve::{RetryFields, resolve_retry};
use super::types::{NotifyConfig, NotifyEvent, RetryPolicy};

const PLACE: Where<'static> = Where::Section("notify");

pub(super) fn resolve(raw: RawNotify, defaults: &RetryPolicy, sink: &mut Sink) -> NotifyConfig {
    let retry = resolve_retry(
        &RetryFields {
            timeout: raw.timeout.as_deref(),
            attempts: raw.attempts,
            backoff: None,
            max_backoff: None,
            max_retry_after: None,
        },
        defaults,
        PLACE,
        sink,
    );
    if let Some(url) = &raw.webhook
        && !(url.starts_with("https://") || url.starts_with("http://") || url.starts_with("${"))
    {
        sink.key(
            PLACE,
            "webhook",
            format!("`{}` is not an http(s) URL", crate::redact::url_shown(url)),
        );
    }
    if raw.command.as_ref().is_some_and(|c| c.is_empty()) {
        sink.key(PLACE, "command", "must name a program".into());
    }
    if raw.webhook.is_none() && raw.command.is_none() {
        sink.at(
            PLACE,
            "give webhook = \"https://…\" and/or command = [\"program\", …]".into(),
        );
    }
    let events = match raw.events {
        None => NotifyEvent::ALL.to_vec(),
        Some(names) => names
            .iter()
            .filter_map(|n| {
                let e = NotifyEvent::parse(n);
                if e.is_none() {
                    sink.key(
                        PLACE,
                        "events",
                        format!(
                            "unknown event `{n}` (escalation_filed, escalation_resolved, run_ended)"
                        ),
                    );
                }
                e
            })
            .collect(),
    };
    NotifyConfig {
        webhook: raw.webhook,
        command: raw.command,
        events,
        public_url: raw.public_url,
        retry,
    }
}
