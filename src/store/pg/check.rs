//! `db check` on PostgreSQL: connect as the store would (same URL, credentials and TLS),
//! then ask the server — without creating or migrating anything — for its version,
//! the connection's TLS, the schema version, and the rights agentrun needs.

use super::conn::Conn;
use super::conninfo;
use super::migrations::MIGRATIONS;
use super::pool::pool_size;
use super::tls;
use crate::store::check::DbCheck;
use crate::store::error::{Result, StoreError};
use std::path::PathBuf;

/// Looks at the database `url` names.
pub fn check(url: &str) -> Result<DbCheck> {
    let info =
        conninfo::resolve(url, &|k| std::env::var(k).ok()).map_err(|message| StoreError::Open {
            path: PathBuf::from(super::url::redact_url(url)),
            message,
        })?;
    let bad = |message: String| StoreError::Open {
        path: PathBuf::from(&info.display),
        message,
    };
    let connector = tls::connector(&info).map_err(bad)?;
    let mut conn = Conn::new(info.clone(), connector).map_err(|e| bad(e.to_string()))?;
    let q = |e: StoreError| match e {
        StoreError::Postgres(m) => bad(m),
        e => e,
    };
    let mut client = conn.reader().map_err(q)?;
    let row = client
        .opt(
            "SELECT current_setting('server_version'),
                (SELECT version || ' ' || cipher FROM pg_stat_ssl
                  WHERE pid = pg_backend_pid() AND ssl),
                current_schema()::text,
                current_schema() IS NOT NULL AND has_schema_privilege(current_schema(), 'USAGE'),
                current_schema() IS NOT NULL AND has_schema_privilege(current_schema(), 'CREATE'),
                to_regclass('schema_version') IS NOT NULL",
            &[],
        )
        .map_err(q)?
        .ok_or_else(|| bad("the server answered no row".into()))?;
    let schema: Option<String> = row.get(2);
    let mut missing = Vec::new();
    match &schema {
        None => missing.push(
            "USAGE and CREATE on a schema: none in the search_path exists or is usable \
             (GRANT them, or set options=-c search_path=… in the URL)"
                .to_string(),
        ),
        Some(s) => {
            if !row.get::<_, bool>(3) {
                missing.push(format!("USAGE on schema {s}"));
            }
            if !row.get::<_, bool>(4) {
                missing.push(format!(
                    "CREATE on schema {s} (agentrun creates and migrates its tables there)"
                ));
            }
        }
    }
    let found: i64 = if row.get::<_, bool>(5) {
        client
            .opt("SELECT version FROM schema_version", &[])
            .map_err(q)?
            .map_or(0, |r| r.get(0))
    } else {
        0
    };
    if schema.is_some() {
        for r in client
            .query(
                "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = current_schema() AND c.relkind = 'r'
                   AND NOT has_table_privilege(c.oid, 'SELECT, INSERT, UPDATE, DELETE')
                 ORDER BY 1",
                &[],
            )
            .map_err(q)?
        {
            let table: String = r.get(0);
            missing.push(format!("SELECT, INSERT, UPDATE, DELETE on table {table}"));
        }
    }
    Ok(DbCheck {
        backend: "postgres",
        database: info.display.clone(),
        server_version: format!("PostgreSQL {}", row.get::<_, String>(0)),
        tls: row.get(1),
        schema_version: 0,
        known_version: 0,
        pending_migrations: 0,
        pool_size: Some(pool_size()),
        missing_privileges: missing,
    }
    .with_versions(found, MIGRATIONS.len() as i64))
}
