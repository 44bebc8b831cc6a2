//! The human queue on PostgreSQL: escalations a run raises, and people's decisions.

use super::conn::PgStore;
use super::rows::escalation_row;
use super::write::check_lease;
use crate::records::{EscalationId, EscalationRow, Resolution, RunId};
use crate::store::durability::now_ms;
use crate::store::error::{Result, StoreError};
use crate::store::lease::Lease;
use crate::store::rows::escalation_columns;

impl PgStore {
    pub fn escalation(&self, id: EscalationId) -> Result<EscalationRow> {
        let rows = self.read(move |r| {
            r.query(
                concat!(
                    "SELECT ",
                    escalation_columns!(),
                    " FROM escalations WHERE id = $1"
                ),
                &[&id.0],
            )
        })?;
        let row = rows
            .first()
            .ok_or_else(|| StoreError::EscalationNotFound(id.to_string()))?;
        escalation_row(row)
    }

    pub fn list_escalations(&self, all: bool) -> Result<Vec<EscalationRow>> {
        let rows = self.read(move |r| {
            r.query(
                concat!(
                    "SELECT ",
                    escalation_columns!(),
                    " FROM escalations
                 WHERE ($1 OR status = 'open') ORDER BY id DESC"
                ),
                &[&all],
            )
        })?;
        rows.iter().map(escalation_row).collect()
    }

    pub fn escalations_for_run(&self, run: &RunId) -> Result<Vec<EscalationRow>> {
        let id = run.clone();
        let rows = self.read(move |r| {
            r.query(
                concat!(
                    "SELECT ",
                    escalation_columns!(),
                    " FROM escalations
                 WHERE run_id = $1 ORDER BY id"
                ),
                &[&id.0],
            )
        })?;
        rows.iter().map(escalation_row).collect()
    }

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
        let by = by.to_string();
        let summary = format!("{} by {by}", resolution.describe());
        self.write(move |tx| {
            let found: Option<(String, String, String)> = tx
                .opt(
                    "SELECT status, run_id, kind FROM escalations WHERE id = $1 FOR UPDATE",
                    &[&id.0],
                )?
                .map(|r| (r.get(0), r.get(1), r.get(2)));
            let (run, kind) = match found {
                None => return Err(StoreError::EscalationNotFound(id.to_string())),
                Some((status, run, kind)) if status == "open" => (RunId(run), kind),
                Some((status, _, _)) if status == "cancelled" => {
                    return Err(StoreError::EscalationCancelled(id.0));
                }
                Some(_) => return Err(StoreError::AlreadyResolved(id.0)),
            };
            tx.exec(
                "UPDATE escalations SET status = 'resolved', resolved_at = $2, resolved_by = $3,
                    resolution = $4 WHERE id = $1",
                &[&id.0, &now_ms(), &by, &json],
            )?;
            let event = crate::config::types::NotifyEvent::EscalationResolved;
            super::outbox::record(tx, event, &run, Some(id.0), &kind, &summary)?;
            Ok(())
        })
    }

    pub fn mark_applied(&self, lease: &Lease, id: EscalationId) -> Result<()> {
        let lease = lease.clone();
        self.write(move |tx| {
            check_lease(tx, &lease)?;
            tx.exec(
                "UPDATE escalations SET applied = true WHERE id = $1",
                &[&id.0],
            )?;
            Ok(())
        })
    }
}
