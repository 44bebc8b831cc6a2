//! What a live run tells the person watching it, on stderr. stdout stays for the
//! answer or the `--json` object.

use std::io::Write;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// `--quiet` or `--json`: nothing on stderr but errors.
    Quiet,
    /// One plain line per event.
    Lines,
}

impl Progress {
    pub fn say(&self, line: impl AsRef<str>) {
        if *self == Progress::Lines {
            // A closed stderr must not kill the run.
            let _ = writeln!(std::io::stderr(), "{}", line.as_ref());
        }
    }
}
