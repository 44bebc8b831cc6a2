//! What a live run tells the person watching it, on stderr. stdout stays for the
//! answer or the `--json` object.

use crate::trace::TraceEvent;
use std::io::Write;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `--quiet` or `--json`: nothing on stderr but errors.
    Quiet,
    /// One plain line per event.
    Lines,
}

pub struct Progress {
    mode: Mode,
}

impl Progress {
    pub fn new(mode: Mode) -> Progress {
        Progress { mode }
    }

    /// A line for the person watching.
    pub fn say(&self, line: impl AsRef<str>) {
        if self.mode == Mode::Lines {
            // A closed stderr must not kill the run.
            let _ = writeln!(std::io::stderr(), "{}", line.as_ref());
        }
    }

    /// A trace event as it happens (attempts, backoff waits, fallback hops).
    pub fn event(&self, e: &TraceEvent) {
        match e {
            TraceEvent::Backoff { .. }
            | TraceEvent::Fallback { .. }
            | TraceEvent::ModelRetry { .. }
            | TraceEvent::ModelFallback { .. } => {
                self.say(format!("agentrun:   {}", crate::cli::describe_event(e)))
            }
            _ => {}
        }
    }
}
