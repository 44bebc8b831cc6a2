//! Integration tests for tool execution and the recovery layer: real subprocesses for
//! command tools, wiremock for HTTP tools, a fake clock for retry schedules.

mod command;
mod fallback;
mod http;
mod retry;
mod support;
