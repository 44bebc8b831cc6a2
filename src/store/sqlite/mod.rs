//! The SQLite backend: one file (WAL) per installation holding every run, its
//! transcript, the tool-call journal, the trace and the human queue.
//!
//! [`Store::open`] does everything a connection needs up front (folder, WAL,
//! `synchronous=FULL`, busy timeout, migrations, 0600 permissions) so no caller can
//! forget a pragma. Every write goes through `BEGIN IMMEDIATE`, and every write made on
//! behalf of a running loop carries the run's lease token, so a process that lost its
//! lease cannot write late (fencing).
//!
//! **One fsync per step (issue 14).** Each write says how far it must survive
//! ([`Durability`]). Step commits, "started" marks and everything outside the step
//! path are `synchronous=FULL`: the commit returns after the WAL is fsynced. The
//! within-step journal (the model's response, a call's outcome) is committed with
//! `synchronous=NORMAL`: no fsync of its own. That is safe because of how WAL works:
//! commits append frames to one file in order, a later commit's fsync flushes the
//! whole file (so every earlier frame with it), and recovery after a power cut keeps
//! the longest prefix of whole, checksummed transactions. So a NORMAL commit survives
//! a killed process at once (it is in the OS's page cache) and a power cut as soon as
//! the next FULL commit returns; a power cut before that rolls back only a suffix of
//! the journal, never a hole in it. What a power cut can then cost is listed in the
//! module doc of `store/writes.rs` and in docs/durability.md.
//!
//! Damaged storage is reported, never repaired or overwritten (issue 6): a file that is
//! not SQLite, a damaged (e.g. truncated) one, a read-only one, or one another process
//! keeps locked past the busy timeout each get their own error, which the command layer
//! turns into one line and exit 2.

//!
//! Module map (imports go downwards only): `sql` (error classification, cached
//! statements, the rollback-on-drop transaction), `group` (one writer per file and
//! group commit), `conn` (open, pragmas, the write transaction, migrating with
//! `migrations`), `write` (the inserts and the lease check
//! the tables share), `rows` (SQLite's rows for the shared readers of `store/rows.rs`),
//! `plan` (a `store/plan.rs` plan as SQLite's SQL), then `runs`, `queue`, `journal`,
//! `escalations`, `outbox`, `cancel`, `admin`, `check`, `fork` and `sent`, each adding
//! its methods to [`SqliteStore`].

mod admin;
mod cancel;
mod check;
mod conn;
mod escalations;
mod evals;
mod fork;
mod group;
mod journal;
mod limits;
mod migrations;
mod outbox;
mod plan;
mod queue;
mod rows;
mod runs;
mod sent;
mod sql;
mod write;

pub use check::check;
pub use conn::SqliteStore;
