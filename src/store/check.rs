//! `agentrun db check` (issue 25): what a database is, looked at without changing it —
//! no file created, no migration applied — so it can be run before the first `start`
//! and on a database another version of agentrun uses.

use serde::Serialize;

/// What `db check` reports, for either backend.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DbCheck {
    /// `sqlite` or `postgres`.
    pub backend: &'static str,
    /// The database as messages show it (a URL without its password).
    pub database: String,
    /// The server's (or the SQLite library's) version.
    pub server_version: String,
    /// The TLS protocol and cipher in use, or `None` (SQLite, or a plain connection).
    pub tls: Option<String>,
    /// The schema version found, and the one this build knows.
    pub schema_version: i64,
    pub known_version: i64,
    /// Migrations the next open applies (`known - found` when this build is newer).
    pub pending_migrations: i64,
    /// PostgreSQL: the most connections one agentrun process opens to the database
    /// (its pool, shared by all its runs in flight); `None` on SQLite.
    pub pool_size: Option<usize>,
    /// What the role or the file lacks for agentrun to work, one line each.
    pub missing_privileges: Vec<String>,
}

impl DbCheck {
    pub(crate) fn with_versions(mut self, found: i64, known: i64) -> DbCheck {
        self.schema_version = found;
        self.known_version = known;
        self.pending_migrations = (known - found).max(0);
        self
    }

    /// Whether agentrun can use the database as it is (pending migrations are applied
    /// on open, so they are not a problem; a newer schema or a missing right is).
    pub fn usable(&self) -> bool {
        self.missing_privileges.is_empty() && self.schema_version <= self.known_version
    }
}
