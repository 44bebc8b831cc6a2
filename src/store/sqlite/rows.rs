//! Reading SQLite rows into records: one reader per table, each naming the run (or
//! escalation) whose stored data is damaged when a value does not parse.

use crate::model::{Message, Role};
use crate::records::{
    CallStatus, EscalationDetail, EscalationId, EscalationKind, EscalationRow, ForkOrigin,
    JournalEntry, ParentLink, RunId, RunRow, RunStatus, StoredEvent, StoredMessage,
};
use crate::store::error::{Result, StoreError};
use rusqlite::Row;
use serde_json::Value;

pub(super) const RUN_COLUMNS: &str = "id, task, task_path, status, max_steps, max_tokens, steps, \
     input_tokens, output_tokens, answer, error, lease_pid, created_at, updated_at, \
     lease_worker, lease_heartbeat, parent_run, parent_call, forked_from, forked_at, cost_usd";
pub(super) const ESCALATION_COLUMNS: &str = "id, run_id, step, kind, status, summary, detail, created_at, resolved_at, \
     resolved_by, resolution, applied";
pub(super) fn run_row(r: &Row<'_>) -> rusqlite::Result<Result<RunRow>> {
    let id: String = r.get(0)?;
    let status: String = r.get(3)?;
    let Some(status) = RunStatus::parse(&status) else {
        return Ok(Err(StoreError::Corrupt {
            run: id,
            message: format!("unknown status `{status}`"),
        }));
    };
    Ok(Ok(RunRow {
        id: RunId(id),
        task: r.get(1)?,
        task_path: r.get(2)?,
        status,
        max_steps: r.get(4)?,
        max_tokens: r.get::<_, i64>(5)? as u64,
        steps: r.get(6)?,
        input_tokens: r.get::<_, i64>(7)? as u64,
        output_tokens: r.get::<_, i64>(8)? as u64,
        answer: r.get(9)?,
        error: r.get(10)?,
        lease_pid: r.get(11)?,
        created_at: r.get(12)?,
        updated_at: r.get(13)?,
        worker: r.get(14)?,
        heartbeat: r.get(15)?,
        parent: ParentLink::from_columns(r.get(16)?, r.get(17)?),
        fork: match (
            r.get::<_, Option<String>>(18)?,
            r.get::<_, Option<u32>>(19)?,
        ) {
            (Some(run), Some(step)) => Some(ForkOrigin {
                run: RunId(run),
                step,
            }),
            _ => None,
        },
        cost_usd: r.get(20)?,
    }))
}
pub(super) fn escalation_row(r: &Row<'_>) -> rusqlite::Result<Result<EscalationRow>> {
    let id: i64 = r.get(0)?;
    let kind: String = r.get(3)?;
    let bad = |message: String| StoreError::Corrupt {
        run: format!("escalation {id}"),
        message,
    };
    let Some(kind) = EscalationKind::parse(&kind) else {
        return Ok(Err(bad(format!("unknown escalation kind `{kind}`"))));
    };
    let detail: String = r.get(6)?;
    let resolution: Option<String> = r.get(10)?;
    let detail =
        match serde_json::from_str(&detail).and_then(|v| EscalationDetail::from_json(kind, v)) {
            Ok(v) => v,
            Err(e) => return Ok(Err(bad(e.to_string()))),
        };
    let resolution = match resolution.map(|t| serde_json::from_str(&t)).transpose() {
        Ok(v) => v,
        Err(e) => return Ok(Err(bad(e.to_string()))),
    };
    Ok(Ok(EscalationRow {
        id: EscalationId(id),
        run_id: RunId(r.get(1)?),
        step: r.get(2)?,
        kind,
        open: r.get::<_, String>(4)? == "open",
        summary: r.get(5)?,
        detail,
        created_at: r.get(7)?,
        resolved_at: r.get(8)?,
        resolved_by: r.get(9)?,
        resolution,
        applied: r.get(11)?,
    }))
}
/// An SQLite error as a store error, for the generic `each_*` readers.
pub(super) fn db<T>(r: rusqlite::Result<T>) -> Result<T> {
    Ok(r?)
}
pub(super) fn text<'r>(r: &'r rusqlite::Row<'_>, i: usize) -> Result<&'r str> {
    Ok(r.get_ref(i)?.as_str().map_err(rusqlite::Error::from)?)
}
pub(super) fn message_row(run: &RunId, r: &Row<'_>) -> Result<StoredMessage> {
    let role: Role =
        serde_json::from_value(Value::String(text(r, 2)?.into())).map_err(|e| corrupt(run, e))?;
    let content = serde_json::from_str(text(r, 3)?).map_err(|e| corrupt(run, e))?;
    Ok(StoredMessage {
        seq: r.get(0)?,
        step: r.get(1)?,
        message: Message { role, content },
    })
}
pub(super) fn journal_row(run: &RunId, r: &Row<'_>) -> Result<JournalEntry> {
    let status = text(r, 5)?;
    let result: Option<&str> = r
        .get_ref(8)?
        .as_str_or_null()
        .map_err(rusqlite::Error::from)?;
    Ok(JournalEntry {
        step: r.get(0)?,
        idx: r.get(1)?,
        call_id: r.get(2)?,
        tool: r.get(3)?,
        args: serde_json::from_str(text(r, 4)?).map_err(|e| corrupt(run, e))?,
        status: CallStatus::parse(status)
            .ok_or_else(|| corrupt(run, format!("unknown call status `{status}`")))?,
        started: r.get(6)?,
        attempts: r.get(7)?,
        result: result
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| corrupt(run, e))?,
        is_error: r.get(9)?,
        via: r.get(10)?,
        spent: None,
    })
}
pub(super) fn event_row(run: &RunId, r: &Row<'_>) -> Result<StoredEvent> {
    Ok(StoredEvent {
        step: r.get(0)?,
        at: r.get(1)?,
        event: serde_json::from_str(text(r, 2)?).map_err(|e| corrupt(run, e))?,
    })
}
pub(super) fn corrupt(run: &RunId, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        run: run.0.clone(),
        message: e.to_string(),
    }
}
