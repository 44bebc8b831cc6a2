//! Human `runs show`, streamed (issue 14): the header as soon as the run's row is
//! read, then the steps a window at a time, then the escalations — the same text as
//! [`transcript::render`] of the whole run, with memory that of one window and the
//! first line out after a few index lookups however long the run.
//!
//! The transcript and the trace are read a page at a time by their keys (message seq,
//! event id), and a window takes every row up to its last step: both are written in
//! step order. The journal is read by step range (its primary key).

use crate::render::{Style, transcript};
use crate::store::{RunId, RunRow, Store, StoreError, StoredEvent, StoredMessage};
use crate::text::terminal_safe;
use std::collections::VecDeque;
use std::io::Write;

/// Steps rendered together.
const WINDOW: u32 = 64;
/// Rows read per page.
const PAGE: u32 = 512;

/// What the header needs besides the row.
pub struct Head<'a> {
    pub row: &'a RunRow,
    pub escalations: &'a [crate::store::EscalationRow],
    pub models: &'a [String],
    pub stale: bool,
    pub spend: &'a [(&'static str, String)],
    /// The task has an `output_schema`: the answer is shown as formatted JSON at the
    /// end (issue 26).
    pub structured: bool,
}

pub fn write(
    out: &mut impl Write,
    store: &Store,
    id: &RunId,
    head: &Head<'_>,
) -> anyhow::Result<()> {
    let style = Style::for_stdout();
    let mut put = |text: String| out.write_all(terminal_safe(&text).as_bytes());
    put(transcript::render_head(&view(head, &[], &[], &[]), style))?;
    let mut messages = Paged::default();
    let mut events = Paged::default();
    // Journal rows go at most one step past the last commit (a step cut short).
    let last = head.row.steps + 1;
    let mut first = 0u32;
    loop {
        let end = first.saturating_add(WINDOW - 1);
        let m = messages.through(
            end,
            |m: &StoredMessage| m.step,
            |after| {
                let page = store.messages_after(id, after, PAGE)?;
                Ok(page.into_iter().map(|m| (m.seq, m)).collect())
            },
        )?;
        let e = events.through(
            end,
            |e: &StoredEvent| e.step,
            |after| store.events_after(id, after, PAGE),
        )?;
        let j = store.journal_between(id, first, end)?;
        put(transcript::render_steps(&view(head, &m, &j, &e), style))?;
        if end >= last && messages.done() && events.done() {
            break;
        }
        first = end + 1;
    }
    put(transcript::render_escalations(head.escalations, style))?;
    if head.structured
        && let Some(answer) = &head.row.answer
    {
        put(transcript::render_structured_answer(answer, style))?;
    }
    put(transcript::render_sent(
        &store.sent_messages(id)?,
        head.row.status,
        style,
    ))?;
    out.flush()?;
    Ok(())
}

fn view<'a>(
    head: &Head<'a>,
    messages: &'a [StoredMessage],
    journal: &'a [crate::store::JournalEntry],
    events: &'a [StoredEvent],
) -> transcript::RunView<'a> {
    transcript::RunView {
        row: head.row,
        messages,
        journal,
        events,
        escalations: head.escalations,
        models: head.models,
        stale: head.stale,
        spend: head.spend,
    }
}

/// Rows read a page at a time by key, handed out a window of steps at a time.
struct Paged<T> {
    buf: VecDeque<(i64, T)>,
    /// The key of the last row read.
    after: i64,
    /// The last page came back short: nothing more to read.
    exhausted: bool,
}

impl<T> Default for Paged<T> {
    fn default() -> Self {
        Paged {
            buf: VecDeque::new(),
            after: i64::MIN,
            exhausted: false,
        }
    }
}

impl<T> Paged<T> {
    fn done(&self) -> bool {
        self.exhausted && self.buf.is_empty()
    }

    /// Every row up to step `end`, reading pages as needed.
    fn through(
        &mut self,
        end: u32,
        step: impl Fn(&T) -> u32,
        mut fetch: impl FnMut(i64) -> Result<Vec<(i64, T)>, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        let mut out = Vec::new();
        loop {
            match self.buf.front() {
                Some((_, row)) if step(row) <= end => {
                    if let Some((_, row)) = self.buf.pop_front() {
                        out.push(row);
                    }
                }
                Some(_) => return Ok(out),
                None if self.exhausted => return Ok(out),
                None => {
                    let page = fetch(self.after)?;
                    self.exhausted = page.len() < PAGE as usize;
                    if let Some((key, _)) = page.last() {
                        self.after = *key;
                    }
                    self.buf.extend(page);
                }
            }
        }
    }
}
