//! The human queue: escalations a run raises, and the decisions people record.

use super::conn::SqliteStore;
use super::rows::{ESCALATION_COLUMNS, escalation_row};
use super::write::check_lease;
use crate::records::{EscalationId, EscalationRow, Resolution, RunId};
use crate::store::durability::now_ms;
use crate::store::error::{Result, StoreError};
use crate::store::lease::Lease;
use rusqlite::{OptionalExtension, params};

impl SqliteStore {
    pub fn escalation(&self, id: EscalationId) -> Result<EscalationRow> {
        let conn = self.lock()?;
        conn.query_row(
            &format!("SELECT {ESCALATION_COLUMNS} FROM escalations WHERE id = ?1"),
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
                "SELECT {ESCALATION_COLUMNS} FROM escalations WHERE (?1 OR status = 'open') ORDER BY id DESC"
            ),
            params![all],
        )
    }

    pub fn escalations_for_run(&self, run: &RunId) -> Result<Vec<EscalationRow>> {
        self.query_escalations(
            &format!("SELECT {ESCALATION_COLUMNS} FROM escalations WHERE run_id = ?1 ORDER BY id"),
            params![run.0],
        )
    }

    fn query_escalations(&self, sql: &str, p: impl rusqlite::Params) -> Result<Vec<EscalationRow>> {
        let conn = self.lock()?;
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
            let found: Option<(String, String, String)> = tx
                .query_row(
                    "SELECT status, run_id, kind FROM escalations WHERE id = ?1",
                    [id.0],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .optional()?;
            let (run, kind) = match found {
                None => return Err(StoreError::EscalationNotFound(id.to_string())),
                Some((status, run, kind)) if status == "open" => (RunId(run), kind),
                Some((status, _, _)) if status == "cancelled" => {
                    return Err(StoreError::EscalationCancelled(id.0));
                }
                Some(_) => return Err(StoreError::AlreadyResolved(id.0)),
            };
            tx.execute(
                "UPDATE escalations SET status = 'resolved', resolved_at = ?2, resolved_by = ?3,
                    resolution = ?4 WHERE id = ?1",
                params![id.0, now_ms(), by, json],
            )?;
            let summary = format!("{} by {by}", resolution.describe());
            let event = crate::config::types::NotifyEvent::EscalationResolved;
            super::outbox::record(tx, event, &run, Some(id.0), &kind, &summary)?;
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
