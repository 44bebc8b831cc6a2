//! agentrun: a durable, failure-aware LLM tool-use loop.
//!
//! The binary (`src/main.rs`) only parses arguments and maps outcomes to exit codes;
//! everything else lives here so tests can drive it directly.

pub mod backoff;
pub mod cli;
pub mod clock;
pub mod config;
pub mod decide;
pub mod digest;
pub mod evals;
pub mod fault;
pub mod govern;
pub mod hooks;
pub mod machine;
pub mod model;
pub mod money;
pub mod net;
pub mod notify;
pub mod out;
pub mod prompts;
pub mod records;
pub mod recovery;
pub mod redact;
pub mod render;
pub mod runner;
pub mod schema;
pub mod serve;
pub mod setup;
pub mod store;
pub mod task;
pub mod taxonomy;
pub mod telemetry;
pub mod text;
pub mod timefmt;
pub mod tools;
pub mod trace;
