//! A span being recorded: its facts collect here while the work runs, and it becomes
//! the exporter's `SpanData` once, when it ends.

use opentelemetry::trace::{
    Event, Link, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Events kept on one span at most (a call retried for an hour stays bounded).
const MAX_EVENTS: usize = 128;

pub struct Open {
    pub id: SpanId,
    pub parent: SpanId,
    pub name: String,
    pub kind: SpanKind,
    pub start: SystemTime,
    pub attrs: Vec<KeyValue>,
    pub events: Vec<Event>,
    pub links: Vec<Link>,
    pub error: Option<String>,
    dropped_events: u32,
}

/// A wall-clock time in ms since the epoch, as the store keeps times.
pub fn at_ms(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}

impl Open {
    pub fn new(id: SpanId, parent: SpanId, name: String, kind: SpanKind) -> Open {
        Open {
            id,
            parent,
            name,
            kind,
            start: SystemTime::now(),
            attrs: Vec::new(),
            events: Vec::new(),
            links: Vec::new(),
            error: None,
            dropped_events: 0,
        }
    }

    pub fn attr(&mut self, kv: KeyValue) {
        self.attrs.push(kv);
    }

    pub fn event(&mut self, name: &'static str, at: Option<i64>, attrs: Vec<KeyValue>) {
        if self.events.len() >= MAX_EVENTS {
            self.dropped_events += 1;
            return;
        }
        let when = at.map_or_else(SystemTime::now, at_ms);
        self.events.push(Event::new(name, when, attrs, 0));
    }

    /// The finished span in trace `trace`, ended now.
    pub fn finish(self, trace: TraceId) -> SpanData {
        let end = SystemTime::now().max(self.start);
        let status = match self.error {
            Some(description) => Status::Error {
                description: Cow::Owned(description),
            },
            None => Status::Unset,
        };
        SpanData {
            span_context: SpanContext::new(
                trace,
                self.id,
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: self.parent,
            parent_span_is_remote: false,
            span_kind: self.kind,
            name: Cow::Owned(self.name),
            start_time: self.start,
            end_time: end,
            attributes: self.attrs,
            dropped_attributes_count: 0,
            events: events(self.events, self.dropped_events),
            links: links(self.links),
            status,
            instrumentation_scope: scope(),
        }
    }
}

fn events(events: Vec<Event>, dropped_count: u32) -> SpanEvents {
    let mut e = SpanEvents::default();
    e.events = events;
    e.dropped_count = dropped_count;
    e
}

fn links(links: Vec<Link>) -> SpanLinks {
    let mut l = SpanLinks::default();
    l.links = links;
    l
}

fn scope() -> InstrumentationScope {
    InstrumentationScope::builder("agentrun")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}
