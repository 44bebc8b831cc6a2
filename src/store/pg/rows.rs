//! Reading PostgreSQL rows into records: one reader per table, each naming the run
//! (or escalation) whose stored data is damaged when a value does not parse.

use crate::model::{Message, Role};
use crate::records::{
    CallStatus, EscalationDetail, EscalationId, EscalationKind, EscalationRow, JournalEntry, RunId,
    RunRow, RunStatus, StoredEvent, StoredMessage,
};
use crate::store::error::{Result, StoreError};
use serde_json::Value;
use tokio_postgres::Row;

pub(super) fn run_row(r: &Row) -> Result<RunRow> {
    let id: String = r.get(0);
    let status: String = r.get(3);
    let Some(status) = RunStatus::parse(&status) else {
        return Err(StoreError::Corrupt {
            run: id,
            message: format!("unknown status `{status}`"),
        });
    };
    Ok(RunRow {
        id: RunId(id),
        task: r.get(1),
        task_path: r.get(2),
        status,
        max_steps: r.get::<_, i64>(4) as u32,
        max_tokens: r.get::<_, i64>(5) as u64,
        steps: r.get::<_, i64>(6) as u32,
        input_tokens: r.get::<_, i64>(7) as u64,
        output_tokens: r.get::<_, i64>(8) as u64,
        answer: r.get(9),
        error: r.get(10),
        lease_pid: r.get(11),
        created_at: r.get(12),
        updated_at: r.get(13),
        worker: r.get(14),
        heartbeat: r.get(15),
        parent: crate::records::ParentLink::from_columns(r.get(16), r.get(17)),
        fork: match (r.get::<_, Option<String>>(18), r.get::<_, Option<i64>>(19)) {
            (Some(run), Some(step)) => Some(crate::records::ForkOrigin {
                run: RunId(run),
                step: step as u32,
            }),
            _ => None,
        },
        cost_usd: r.get(20),
    })
}
pub(super) fn message_row(run: &RunId, r: &Row) -> Result<StoredMessage> {
    let role: Role = serde_json::from_value(Value::String(r.get::<_, String>(2)))
        .map_err(|e| corrupt(run, e))?;
    let content = serde_json::from_str(r.get(3)).map_err(|e| corrupt(run, e))?;
    Ok(StoredMessage {
        seq: r.get(0),
        step: r.get::<_, i64>(1) as u32,
        message: Message { role, content },
    })
}
pub(super) fn journal_row(run: &RunId, r: &Row) -> Result<JournalEntry> {
    let status: &str = r.get(5);
    let result: Option<&str> = r.get(8);
    Ok(JournalEntry {
        step: r.get::<_, i64>(0) as u32,
        idx: r.get::<_, i64>(1) as u32,
        call_id: r.get(2),
        tool: r.get(3),
        args: serde_json::from_str(r.get(4)).map_err(|e| corrupt(run, e))?,
        status: CallStatus::parse(status)
            .ok_or_else(|| corrupt(run, format!("unknown call status `{status}`")))?,
        started: r.get(6),
        attempts: r.get::<_, i64>(7) as u32,
        result: result
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| corrupt(run, e))?,
        is_error: r.get(9),
        via: r.get(10),
        spent: None,
    })
}
pub(super) fn escalation_row(r: &Row) -> Result<EscalationRow> {
    let id: i64 = r.get(0);
    let bad = |message: String| StoreError::Corrupt {
        run: format!("escalation {id}"),
        message,
    };
    let kind: String = r.get(3);
    let kind = EscalationKind::parse(&kind)
        .ok_or_else(|| bad(format!("unknown escalation kind `{kind}`")))?;
    let detail: String = r.get(6);
    let detail = serde_json::from_str(&detail)
        .and_then(|v| EscalationDetail::from_json(kind, v))
        .map_err(|e| bad(e.to_string()))?;
    let resolution: Option<String> = r.get(10);
    let resolution = resolution
        .map(|t| serde_json::from_str(&t))
        .transpose()
        .map_err(|e| bad(e.to_string()))?;
    Ok(EscalationRow {
        id: EscalationId(id),
        run_id: RunId(r.get(1)),
        step: r.get::<_, i64>(2) as u32,
        kind,
        open: r.get::<_, String>(4) == "open",
        summary: r.get(5),
        detail,
        created_at: r.get(7),
        resolved_at: r.get(8),
        resolved_by: r.get(9),
        resolution,
        applied: r.get(11),
    })
}
pub(super) fn event_row(run: &RunId, row: &Row) -> Result<StoredEvent> {
    Ok(StoredEvent {
        step: row.get::<_, i64>(0) as u32,
        at: row.get(1),
        event: serde_json::from_str(row.get(2)).map_err(|e| corrupt(run, e))?,
    })
}
pub(super) fn corrupt(run: &RunId, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        run: run.0.clone(),
        message: e.to_string(),
    }
}
