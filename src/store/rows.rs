//! Reading rows into records, once for both backends (issue 25): each table's reader
//! takes its columns in one order ([`run_columns!`], [`escalation_columns!`], [`message_columns!`],
//! [`journal_columns!`], [`event_columns!`]) through [`Cols`], which each driver implements
//! for its own row type. A value that does not parse names the run (or escalation)
//! whose stored data is damaged.

use crate::model::{Message, Role};
use crate::records::{
    CallStatus, EscalationDetail, EscalationId, EscalationKind, EscalationRow, ForkOrigin,
    JournalEntry, ParentLink, RunId, RunRow, RunStatus, StoredEvent, StoredMessage,
};
use crate::store::error::{Result, StoreError};
use serde_json::Value;

/// The columns [`run_row`] reads, in its order (a macro: PostgreSQL's statement cache
/// keys on `&'static str`, so queries are built with `concat!`).
macro_rules! run_columns {
    () => {
        "id, task, task_path, status, max_steps, max_tokens, steps, input_tokens, \
         output_tokens, answer, error, lease_pid, created_at, updated_at, lease_worker, \
         lease_heartbeat, parent_run, parent_call, forked_from, forked_at, cost_usd"
    };
}
pub(crate) use run_columns;

/// The columns [`escalation_row`] reads, in its order.
macro_rules! escalation_columns {
    () => {
        "id, run_id, step, kind, status, summary, detail, created_at, resolved_at, \
         resolved_by, resolution, applied"
    };
}
pub(crate) use escalation_columns;

/// The columns [`message_row`] reads, in its order.
macro_rules! message_columns {
    () => {
        "seq, step, role, content"
    };
}
pub(crate) use message_columns;

/// The columns [`journal_row`] reads, in its order.
macro_rules! journal_columns {
    () => {
        "step, idx, call_id, tool, args, status, started, attempts, result, is_error, via"
    };
}
pub(crate) use journal_columns;

/// The columns [`event_row`] reads, in its order.
macro_rules! event_columns {
    () => {
        "step, at, data"
    };
}
pub(crate) use event_columns;

/// One row of a query, as the readers below see it: a column by position, in the
/// driver's own types underneath (SQLite's integers and 0/1 flags, PostgreSQL's
/// `BIGINT` and `BOOLEAN`). A value of the wrong type is the driver's error.
pub(crate) trait Cols {
    fn int(&self, i: usize) -> Result<i64>;
    fn opt_int(&self, i: usize) -> Result<Option<i64>>;
    fn flag(&self, i: usize) -> Result<bool>;
    fn real(&self, i: usize) -> Result<f64>;
    fn str(&self, i: usize) -> Result<&str>;
    fn opt_str(&self, i: usize) -> Result<Option<&str>>;

    fn string(&self, i: usize) -> Result<String> {
        Ok(self.str(i)?.to_string())
    }
    fn opt_string(&self, i: usize) -> Result<Option<String>> {
        Ok(self.opt_str(i)?.map(str::to_string))
    }
    /// A step, count or index (stored signed, never negative).
    fn count(&self, i: usize) -> Result<u32> {
        Ok(self.int(i)? as u32)
    }
}

/// A run's row, from [`run_columns!`].
pub(crate) fn run_row(r: &impl Cols) -> Result<RunRow> {
    let id = r.string(0)?;
    let status = r.str(3)?;
    let Some(status) = RunStatus::parse(status) else {
        return Err(StoreError::Corrupt {
            message: format!("unknown status `{status}`"),
            run: id,
        });
    };
    Ok(RunRow {
        id: RunId(id),
        task: r.string(1)?,
        task_path: r.string(2)?,
        status,
        max_steps: r.count(4)?,
        max_tokens: r.int(5)? as u64,
        steps: r.count(6)?,
        input_tokens: r.int(7)? as u64,
        output_tokens: r.int(8)? as u64,
        answer: r.opt_string(9)?,
        error: r.opt_string(10)?,
        lease_pid: r.opt_int(11)?,
        created_at: r.int(12)?,
        updated_at: r.int(13)?,
        worker: r.opt_string(14)?,
        heartbeat: r.opt_int(15)?,
        parent: ParentLink::from_columns(r.opt_string(16)?, r.opt_string(17)?),
        fork: match (r.opt_string(18)?, r.opt_int(19)?) {
            (Some(run), Some(step)) => Some(ForkOrigin {
                run: RunId(run),
                step: step as u32,
            }),
            _ => None,
        },
        cost_usd: r.real(20)?,
    })
}

/// An escalation's row, from [`escalation_columns!`].
pub(crate) fn escalation_row(r: &impl Cols) -> Result<EscalationRow> {
    let id = r.int(0)?;
    let bad = |message: String| StoreError::Corrupt {
        run: format!("escalation {id}"),
        message,
    };
    let kind = r.str(3)?;
    let kind = EscalationKind::parse(kind)
        .ok_or_else(|| bad(format!("unknown escalation kind `{kind}`")))?;
    let detail = serde_json::from_str(r.str(6)?)
        .and_then(|v| EscalationDetail::from_json(kind, v))
        .map_err(|e| bad(e.to_string()))?;
    let resolution = r
        .opt_str(10)?
        .map(serde_json::from_str)
        .transpose()
        .map_err(|e| bad(e.to_string()))?;
    Ok(EscalationRow {
        id: EscalationId(id),
        run_id: RunId(r.string(1)?),
        step: r.count(2)?,
        kind,
        open: r.str(4)? == "open",
        summary: r.string(5)?,
        detail,
        created_at: r.int(7)?,
        resolved_at: r.opt_int(8)?,
        resolved_by: r.opt_string(9)?,
        resolution,
        applied: r.flag(11)?,
    })
}

/// A transcript message, from [`message_columns!`].
pub(crate) fn message_row(run: &RunId, r: &impl Cols) -> Result<StoredMessage> {
    let role: Role =
        serde_json::from_value(Value::String(r.string(2)?)).map_err(|e| corrupt(run, e))?;
    let content = serde_json::from_str(r.str(3)?).map_err(|e| corrupt(run, e))?;
    Ok(StoredMessage {
        seq: r.int(0)?,
        step: r.count(1)?,
        message: Message { role, content },
    })
}

/// A tool call's journal row, from [`journal_columns!`].
pub(crate) fn journal_row(run: &RunId, r: &impl Cols) -> Result<JournalEntry> {
    let status = r.str(5)?;
    Ok(JournalEntry {
        step: r.count(0)?,
        idx: r.count(1)?,
        call_id: r.string(2)?,
        tool: r.string(3)?,
        args: serde_json::from_str(r.str(4)?).map_err(|e| corrupt(run, e))?,
        status: CallStatus::parse(status)
            .ok_or_else(|| corrupt(run, format!("unknown call status `{status}`")))?,
        started: r.flag(6)?,
        attempts: r.count(7)?,
        result: r
            .opt_str(8)?
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| corrupt(run, e))?,
        is_error: r.flag(9)?,
        via: r.opt_string(10)?,
        spent: None,
    })
}

/// A trace event, from [`event_columns!`].
pub(crate) fn event_row(run: &RunId, r: &impl Cols) -> Result<StoredEvent> {
    Ok(StoredEvent {
        step: r.count(0)?,
        at: r.int(1)?,
        event: serde_json::from_str(r.str(2)?).map_err(|e| corrupt(run, e))?,
    })
}

/// The run's stored data is damaged: `e` says how.
pub(crate) fn corrupt(run: &RunId, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        run: run.0.clone(),
        message: e.to_string(),
    }
}
