//! PostgreSQL's rows as [`Cols`], for the shared readers of `store/rows.rs`.

use super::conn::pg;
use crate::store::error::Result;
use crate::store::rows::Cols;
pub(super) use crate::store::rows::{
    corrupt, escalation_row, event_row, journal_row, message_row, run_columns, run_row,
};
use tokio_postgres::Row;

impl Cols for Row {
    fn int(&self, i: usize) -> Result<i64> {
        self.try_get(i).map_err(pg)
    }
    fn opt_int(&self, i: usize) -> Result<Option<i64>> {
        self.try_get(i).map_err(pg)
    }
    fn flag(&self, i: usize) -> Result<bool> {
        self.try_get(i).map_err(pg)
    }
    fn real(&self, i: usize) -> Result<f64> {
        self.try_get(i).map_err(pg)
    }
    fn str(&self, i: usize) -> Result<&str> {
        self.try_get(i).map_err(pg)
    }
    fn opt_str(&self, i: usize) -> Result<Option<&str>> {
        self.try_get(i).map_err(pg)
    }
}
