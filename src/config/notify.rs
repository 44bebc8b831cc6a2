//! `[notify]` of tools.toml (and of the config file): checked like every other section,
//! every problem named with its key.

use super::fields::{RetryFields, resolve_retry};
use super::raw::{RawNotify, Section, Where, read_section};
use super::types::{NotifyConfig, NotifyEvent, RetryPolicy};
use super::{ConfigErrors, Sink};
use std::path::Path;

const PLACE: Where<'static> = Where::Section("notify");

pub(super) fn resolve(
    raw: RawNotify,
    defaults: &RetryPolicy,
    cwd: &Path,
    sink: &mut Sink,
) -> NotifyConfig {
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
        cwd: cwd.to_path_buf(),
    }
}

/// `[notify]` of any TOML text (the config file; a run's snapshot of it): that one
/// section checked as tools.toml's is, every other key left to its owner. `file`
/// names the file in errors; a relative `command` runs in `cwd`.
pub fn section_of(
    text: &str,
    file: &Path,
    cwd: &Path,
) -> Result<Option<NotifyConfig>, ConfigErrors> {
    let mut sink = Sink::new(file);
    let Ok(doc) = toml::de::DeTable::parse(text) else {
        // The file's owner reports its syntax errors.
        return Ok(None);
    };
    let Some((_, value)) = doc
        .into_inner()
        .into_iter()
        .find(|(k, _)| k.get_ref().as_ref() == "notify")
    else {
        return Ok(None);
    };
    let raw: Section<RawNotify> = read_section(value, text, PLACE, &mut sink);
    let cfg = resolve(raw.value, &RetryPolicy::default(), cwd, &mut sink);
    sink.finish(Some(cfg))
}
