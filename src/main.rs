//! The agentrun binary: parse arguments, run, map the result to an exit code.

use agentrun::cli;
use std::process::ExitCode;

fn main() -> ExitCode {
    // A child being started in a sandbox (issue 22): before clap and any runtime, this
    // process applies the policy and becomes the tool; it never returns here.
    agentrun::tools::trampoline::run_if_asked();
    let parsed = match cli::parse() {
        Ok(parsed) => parsed,
        Err(code) => return ExitCode::from(code as u8),
    };
    // Off (nothing at all) unless the OTEL_* variables name an endpoint; sends what is
    // queued, within its bound, as the process ends.
    let _telemetry = agentrun::telemetry::init();
    let json = parsed.json;
    let code = match cli::run(parsed) {
        Ok(exit) => exit,
        Err(err) => cli::report_error(&err, json),
    };
    ExitCode::from(code as u8)
}
