//! The agentrun binary: parse arguments, run, map the result to an exit code.

use agentrun::cli::{self, Exit};
use std::process::ExitCode;

fn main() -> ExitCode {
    let parsed = match cli::parse() {
        Ok(parsed) => parsed,
        Err(code) => return ExitCode::from(code as u8),
    };
    let code = match cli::run(parsed) {
        Ok(exit) => exit,
        Err(err) => {
            // One line per cause, outermost first: "file: problem".
            agentrun::errln!("agentrun: {err:#}");
            Exit::for_error(&err)
        }
    };
    ExitCode::from(code as u8)
}
