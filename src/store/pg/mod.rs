//! The PostgreSQL backend (issue 17): the same contract as the SQLite store (docs/ARCHITECTURE.md
//! §5), on a server several machines share, so runs can be queued and taken by workers
//! anywhere (`agentrun submit` / `agentrun worker`).
//!
//! **Shape.** [`PgStore`] has the SQLite store's synchronous methods, so every call
//! site (the driver, the commands) is the same for both. Underneath is tokio-postgres,
//! whose client must not be blocked on from a thread already inside a runtime (the
//! driver's), so each connection lives on a dedicated thread with a current-thread
//! runtime of its own, and a store call sends it a job and blocks until the answer
//! comes back: exactly how the driver already blocks on an SQLite call.
//!
//! **Connections** (issue 25) come from one bounded pool per process and URL
//! (`pool`): every store opened on the URL — a worker's `--concurrency N` slots, the
//! console, a command — shares at most `--db-pool` connections (default 10), each
//! call holding one for the length of a transaction or a read. A call that finds them
//! all busy waits up to 20 s, then fails naming the size and how to raise it. A
//! connection attempt (TCP, TLS, startup, authentication) is bounded as a whole by the
//! connect timeout, each statement by `statement_timeout` (`conninfo`).
//!
//! **Transactions and fencing.** Every write is one transaction (READ COMMITTED) whose
//! first statement is the lease check, an `UPDATE` of the run's row: it takes that
//! row's lock, so two writers of one run are serialised on it for the whole
//! transaction, and a writer whose token is stale updates nothing and fails with
//! [`StoreError::LeaseLost`] before it writes anything (the fencing SQLite gets from
//! `BEGIN IMMEDIATE` plus the same check). `acquire` and the queue's claims lock the
//! row with `FOR UPDATE` (`SKIP LOCKED` when claiming) before they raise the token.
//!
//! **Durability.** [`Durability::PowerCut`] commits are ordinary commits
//! (`synchronous_commit = on`: the WAL is flushed before COMMIT returns).
//! [`Durability::Process`] commits set `synchronous_commit = off` for that transaction:
//! like SQLite's NORMAL they survive this process being killed at once (the server has
//! them), and a server crash loses at most a suffix of them — PostgreSQL's WAL is
//! written in order, so the next flushed commit makes every earlier one durable.
//!
//! **Lease liveness** is the heartbeat alone: a lease whose heartbeat is older than the
//! TTL is free, whoever and wherever the holder was. As a shortcut for `resume` right
//! after a crash on the same machine, a holder on this host (same `lease_host`) whose
//! pid no longer exists is replaced at once, as on SQLite; a pid on another host is
//! never looked at.
//!
//! Connection strings can carry a password: it is never stored, and [`PgStore::path`]
//! (what messages show) drops it.
//!
//! Module map (imports go downwards only): `url` (what messages show of a connection
//! string), `conninfo` and `tls` (where and how to connect), `migrations`, `pool` (the
//! bounded pool, generic over its slots), `conn` (the connection threads, the
//! process's pools, transactions, migrating on open), `write` (the inserts and the lease
//! check the tables share), `rows` (PostgreSQL's rows for the shared readers of
//! `store/rows.rs`), `plan` (a `store/plan.rs` plan as PostgreSQL's SQL), then `runs`,
//! `queue`, `journal`, `escalations`, `outbox`, `cancel`, `operate` (fork, sent
//! messages), `admin` and `check`, each adding its methods to [`PgStore`].

mod admin;
mod cancel;
mod check;
mod conn;
mod conninfo;
mod escalations;
mod evals;
mod journal;
mod limits;
mod migrations;
mod operate;
mod outbox;
mod plan;
mod pool;
mod queue;
mod rows;
mod runs;
mod tls;
mod url;
mod write;

pub use check::check;
pub use conn::PgStore;
pub use pool::{DEFAULT_POOL_SIZE, PoolStatus, pool_size, set_pool_size};
pub use url::redact_url;
