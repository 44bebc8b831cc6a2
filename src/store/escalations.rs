//! The human queue: escalations a run raises, and the decisions people record.

use super::detail::EscalationDetail;
use super::runs::check_lease;
use super::{Lease, Result, RunId, RunStatus, SqliteStore, StoreError, now_ms};
use crate::trace::TraceEvent;
use rusqlite::{OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EscalationKind {
    BreakerOpen,
    ApprovalRequired,
    Stuck,
    Question,
    OutcomeUnknown,
    ToolBug,
    AllToolsFailed,
}

impl EscalationKind {
    pub const ALL: [EscalationKind; 7] = [
        EscalationKind::BreakerOpen,
        EscalationKind::ApprovalRequired,
        EscalationKind::Stuck,
        EscalationKind::Question,
        EscalationKind::OutcomeUnknown,
        EscalationKind::ToolBug,
        EscalationKind::AllToolsFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EscalationKind::BreakerOpen => "breaker_open",
            EscalationKind::ApprovalRequired => "approval_required",
            EscalationKind::Stuck => "stuck",
            EscalationKind::Question => "question",
            EscalationKind::OutcomeUnknown => "outcome_unknown",
            EscalationKind::ToolBug => "tool_bug",
            EscalationKind::AllToolsFailed => "all_tools_failed",
        }
    }

    pub fn parse(s: &str) -> Option<EscalationKind> {
        EscalationKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Whether the run waits for this one (a tool bug is a report for the tool's
    /// owner, and `all_tools_failed` a report that the run answered without tools;
    /// either way the run goes on).
    pub fn pauses(self) -> bool {
        !matches!(
            self,
            EscalationKind::ToolBug | EscalationKind::AllToolsFailed
        )
    }

    /// Whether the run paused in the middle of a tool call (vs. between steps).
    pub fn blocks_a_call(self) -> bool {
        matches!(
            self,
            EscalationKind::ApprovalRequired
                | EscalationKind::Question
                | EscalationKind::OutcomeUnknown
        )
    }
}

impl fmt::Display for EscalationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A person's decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Resolution {
    Approve,
    Deny { reason: String },
    Modify { args: Value },
    Reply { text: String },
}

/// An escalation's number in the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EscalationId(pub i64);

impl fmt::Display for EscalationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct EscalationRow {
    pub id: EscalationId,
    pub run_id: RunId,
    pub step: u32,
    pub kind: EscalationKind,
    pub open: bool,
    pub summary: String,
    /// Kind-specific facts (tool, args, call id, digest) and the handover text.
    pub detail: EscalationDetail,
    pub created_at: i64,
    pub resolved_at: Option<i64>,
    pub resolved_by: Option<String>,
    pub resolution: Option<Resolution>,
    pub applied: bool,
}

impl EscalationRow {
    /// The call this escalation blocks, if any.
    pub fn call_id(&self) -> Option<&str> {
        self.detail.facts.call_id().map(|c| c.as_str())
    }
}

pub struct NewEscalation<'a> {
    pub step: u32,
    pub summary: &'a str,
    /// The facts (and so the kind) and the handover.
    pub detail: &'a EscalationDetail,
}

impl NewEscalation<'_> {
    pub fn kind(&self) -> EscalationKind {
        self.detail.kind()
    }
}

const COLUMNS: &str = "id, run_id, step, kind, status, summary, detail, created_at, resolved_at, \
     resolved_by, resolution, applied";

impl SqliteStore {
    /// Queues an escalation. When it pauses the run, the run's status becomes
    /// `pause_as` in the same commit; a blocked call's start mark is cleared, since the
    /// call did not run (it waits for the decision).
    pub fn create_escalation(
        &self,
        lease: &Lease,
        new: &NewEscalation<'_>,
        pause_as: Option<RunStatus>,
        events: &[TraceEvent],
    ) -> Result<EscalationId> {
        self.write(|tx| {
            check_lease(tx, lease)?;
            let id = insert(tx, &lease.run, new)?;
            if let Some(status) = pause_as {
                tx.execute(
                    "UPDATE runs SET status = ?2, updated_at = ?3 WHERE id = ?1",
                    params![lease.run.0, status.as_str(), now_ms()],
                )?;
            }
            if let (true, Some(call)) = (new.kind().blocks_a_call(), new.detail.facts.call_id()) {
                tx.execute(
                    "UPDATE tool_calls SET started = 0 WHERE run_id = ?1 AND step = ?2 AND call_id = ?3",
                    params![lease.run.0, new.step, call.as_str()],
                )?;
            }
            super::journal::insert_events(tx, &lease.run, new.step, events)?;
            Ok(id)
        })
    }

    pub fn escalation(&self, id: EscalationId) -> Result<EscalationRow> {
        let conn = self.lock();
        conn.query_row(
            &format!("SELECT {COLUMNS} FROM escalations WHERE id = ?1"),
            [id.0],
            escalation_row,
        )
        .optional()?
        .ok_or_else(|| StoreError::EscalationNotFound(id.to_string()))?
    }

    /// Open escalations (or all, newest first).
    pub fn list_escalations(&self, all: bool) -> Result<Vec<EscalationRow>> {
        self.query_escalations(
            &format!(
                "SELECT {COLUMNS} FROM escalations WHERE (?1 OR status = 'open') ORDER BY id DESC"
            ),
            params![all],
        )
    }

    pub fn escalations_for_run(&self, run: &RunId) -> Result<Vec<EscalationRow>> {
        self.query_escalations(
            &format!("SELECT {COLUMNS} FROM escalations WHERE run_id = ?1 ORDER BY id"),
            params![run.0],
        )
    }

    fn query_escalations(&self, sql: &str, p: impl rusqlite::Params) -> Result<Vec<EscalationRow>> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(sql)?;
        let rows = stmt.query_map(p, escalation_row)?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row??);
        }
        Ok(out)
    }

    /// Records a person's decision. Refused when already resolved.
    pub fn resolve_escalation(
        &self,
        id: EscalationId,
        resolution: &Resolution,
        by: &str,
    ) -> Result<()> {
        let json = serde_json::to_string(resolution).map_err(|e| StoreError::Corrupt {
            run: String::new(),
            message: e.to_string(),
        })?;
        self.write(|tx| {
            let status: Option<String> = tx
                .query_row(
                    "SELECT status FROM escalations WHERE id = ?1",
                    [id.0],
                    |r| r.get(0),
                )
                .optional()?;
            match status.as_deref() {
                None => return Err(StoreError::EscalationNotFound(id.to_string())),
                Some("open") => {}
                Some(_) => return Err(StoreError::AlreadyResolved(id.0)),
            }
            tx.execute(
                "UPDATE escalations SET status = 'resolved', resolved_at = ?2, resolved_by = ?3,
                    resolution = ?4 WHERE id = ?1",
                params![id.0, now_ms(), by, json],
            )?;
            Ok(())
        })
    }

    /// Marks a between-step escalation's decision as carried into the run.
    pub fn mark_applied(&self, lease: &Lease, id: EscalationId) -> Result<()> {
        self.write(|tx| {
            check_lease(tx, lease)?;
            tx.execute("UPDATE escalations SET applied = 1 WHERE id = ?1", [id.0])?;
            Ok(())
        })
    }
}

pub(super) fn insert(
    tx: &rusqlite::Connection,
    run: &RunId,
    new: &NewEscalation<'_>,
) -> Result<EscalationId> {
    tx.execute(
        "INSERT INTO escalations (run_id, step, kind, status, summary, detail, created_at)
         VALUES (?1, ?2, ?3, 'open', ?4, ?5, ?6)",
        params![
            run.0,
            new.step,
            new.kind().as_str(),
            new.summary,
            new.detail.to_json().to_string(),
            now_ms()
        ],
    )?;
    Ok(EscalationId(tx.last_insert_rowid()))
}

fn escalation_row(r: &Row<'_>) -> rusqlite::Result<Result<EscalationRow>> {
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
