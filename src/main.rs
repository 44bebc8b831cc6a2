//! The agentrun binary: parse arguments, run, map the result to an exit code.

use agentrun::cli::{self, Cli, Exit};
use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let parsed = Cli::parse();
    let code = match cli::run(parsed) {
        Ok(exit) => exit,
        Err(err) => {
            // One line per cause, outermost first: "file: problem".
            eprintln!("agentrun: {err:#}");
            Exit::for_error(&err)
        }
    };
    ExitCode::from(code as u8)
}
