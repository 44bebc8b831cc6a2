//! SQLite's rows as [`Cols`], for the shared readers of `store/rows.rs`.

use crate::records::{EscalationRow, RunRow};
use crate::store::error::Result;
use crate::store::rows::{self, Cols, escalation_columns, run_columns};
pub(super) use crate::store::rows::{corrupt, event_row, journal_row, message_row};
use rusqlite::Row;

pub(super) const RUN_COLUMNS: &str = run_columns!();
pub(super) const ESCALATION_COLUMNS: &str = escalation_columns!();

impl Cols for Row<'_> {
    fn int(&self, i: usize) -> Result<i64> {
        Ok(self.get(i)?)
    }
    fn opt_int(&self, i: usize) -> Result<Option<i64>> {
        Ok(self.get(i)?)
    }
    fn flag(&self, i: usize) -> Result<bool> {
        Ok(self.get(i)?)
    }
    fn real(&self, i: usize) -> Result<f64> {
        Ok(self.get(i)?)
    }
    fn str(&self, i: usize) -> Result<&str> {
        Ok(self.get_ref(i)?.as_str().map_err(rusqlite::Error::from)?)
    }
    fn opt_str(&self, i: usize) -> Result<Option<&str>> {
        Ok(self
            .get_ref(i)?
            .as_str_or_null()
            .map_err(rusqlite::Error::from)?)
    }
}

/// [`rows::run_row`] in the shape of rusqlite's row callbacks (`query_row`, `query_map`).
pub(super) fn run_row(r: &Row<'_>) -> rusqlite::Result<Result<RunRow>> {
    Ok(rows::run_row(r))
}
/// [`rows::escalation_row`] in the shape of rusqlite's row callbacks.
pub(super) fn escalation_row(r: &Row<'_>) -> rusqlite::Result<Result<EscalationRow>> {
    Ok(rows::escalation_row(r))
}

/// An SQLite error as a store error, for the generic `each_*` readers.
pub(super) fn db<T>(r: rusqlite::Result<T>) -> Result<T> {
    Ok(r?)
}
