//! `db check` on SQLite: the file read-only (never created, never migrated), its schema
//! version, the library's version, and whether this user may write it.

use super::migrations::MIGRATIONS;
use crate::store::check::DbCheck;
use crate::store::error::{Result, StoreError};
use rusqlite::{Connection, OpenFlags};
use std::path::Path;

/// Looks at the SQLite file `path`.
pub fn check(path: &Path) -> Result<DbCheck> {
    let open_err = |message: String| StoreError::Open {
        path: path.to_path_buf(),
        message,
    };
    if !path.exists() {
        return Err(open_err(
            "no such file; `agentrun start` creates it, or pass --db / AGENTRUN_DB".into(),
        ));
    }
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| open_err(e.to_string()))?;
    let (found, version): (i64, String) = conn
        .query_row(
            "SELECT (SELECT user_version FROM pragma_user_version), sqlite_version()",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map_err(|e| match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::NotADatabase) => StoreError::NotADatabase {
                path: path.to_path_buf(),
                message: e.to_string(),
            },
            _ => open_err(e.to_string()),
        })?;
    let mut missing = Vec::new();
    if std::fs::OpenOptions::new().append(true).open(path).is_err() {
        missing.push(format!("write access to {}", path.display()));
    }
    Ok(DbCheck {
        backend: "sqlite",
        database: path.display().to_string(),
        server_version: format!("SQLite {version}"),
        tls: None,
        schema_version: 0,
        known_version: 0,
        pending_migrations: 0,
        pool_size: None,
        missing_privileges: missing,
    }
    .with_versions(found, MIGRATIONS.len() as i64))
}
