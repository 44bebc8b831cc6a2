//! All integration tests, as modules of one binary: one link for `cargo test`, shared
//! helpers in `common` (the kill -9 soak test stays its own binary, `tests/soak.rs`).

// Tests and benches print for people; only the binary goes through src/cli/out.rs.
#![allow(clippy::disallowed_macros, clippy::disallowed_methods)]

mod common;
mod exactly_once;

mod bad_input;
mod budgets;
mod budgets_hold;
mod cli_ux;
mod closed_pipes;
mod compaction;
mod console;
mod core;
mod crash;
mod db_check;
mod docs;
mod escalations;
mod evals;
mod examples;
mod first_hour;
mod fork_send;
mod fork_send_crash;
mod golden;
mod guide;
mod handover;
mod help;
mod hooks;
mod in_doubt;
mod lease;
mod mcp;
mod models_e2e;
mod newcomer;
mod notify;
mod notify_trust;
mod operating;
mod otel;
mod parallel;
mod pg;
mod pg_pool;
mod pg_readme;
mod pg_tls;
mod prompt_cache;
mod providers;
mod providers_e2e;
mod queue;
mod rate_limits;
mod reading_runs;
mod recovery_e2e;
mod redaction;
mod sandbox;
mod scale;
mod spawn;
mod steering;
mod storage;
mod streaming;
mod structured;
mod subagents;
mod syncs;
mod tools_exec;
mod trust;
mod trust_again;
mod trust_mcp;
mod trust_operator;
mod walkthrough;
