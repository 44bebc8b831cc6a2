//! The one way to stdout and stderr. Every command writes through [`stdout`] and
//! [`stderr`] (the [`outln!`](crate::outln) and [`errln!`](crate::errln) macros), which
//! treat a closed pipe (`agentrun start … | head -2`) as the reader having seen enough:
//! that write and every later one on the stream are dropped, and the command ends with
//! its own exit code — a run's outcome does not depend on who reads it (issue 27).
//! `println!` panics there instead (exit 101); `clippy.toml` forbids it and the bare
//! `std::io::stdout()` everywhere else, so no command can bring the panic back.

use std::io::{self, ErrorKind, Write};
use std::sync::atomic::{AtomicBool, Ordering};

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
static STDOUT_WRITTEN: AtomicBool = AtomicBool::new(false);
static STDERR_CLOSED: AtomicBool = AtomicBool::new(false);

/// Standard output, quiet once its reader has gone.
#[derive(Debug, Clone, Copy)]
pub struct Stdout;

/// Standard error, quiet once its reader has gone (`agentrun start … 2>&1 | head`).
#[derive(Debug, Clone, Copy)]
pub struct Stderr;

pub fn stdout() -> Stdout {
    Stdout
}

pub fn stderr() -> Stderr {
    Stderr
}

/// Whether stdout's reader has gone (a long listing may stop reading the store).
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(Ordering::Relaxed)
}

/// Whether anything was written to stdout (an error after a command's own `--json`
/// object must not add a second one).
pub fn stdout_written() -> bool {
    STDOUT_WRITTEN.load(Ordering::Relaxed)
}

/// `result`, or `instead` when it is a write to a closed pipe (remembered in `closed`).
fn quiet<T>(closed: &AtomicBool, result: io::Result<T>, instead: T) -> io::Result<T> {
    match result {
        Err(e) if e.kind() == ErrorKind::BrokenPipe => {
            closed.store(true, Ordering::Relaxed);
            Ok(instead)
        }
        other => other,
    }
}

#[allow(clippy::disallowed_methods)] // the one place that writes to the real streams
impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        STDOUT_WRITTEN.store(true, Ordering::Relaxed);
        if stdout_closed() {
            return Ok(buf.len());
        }
        quiet(&STDOUT_CLOSED, io::stdout().lock().write(buf), buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if stdout_closed() {
            return Ok(());
        }
        quiet(&STDOUT_CLOSED, io::stdout().lock().flush(), ())
    }
}

#[allow(clippy::disallowed_methods)] // the one place that writes to the real streams
impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if STDERR_CLOSED.load(Ordering::Relaxed) {
            return Ok(buf.len());
        }
        quiet(&STDERR_CLOSED, io::stderr().lock().write(buf), buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        quiet(&STDERR_CLOSED, io::stderr().lock().flush(), ())
    }
}

/// `println!` that returns the write's `io::Result` (a closed pipe is `Ok`) instead of
/// panicking; other failures (a full disk) are the command's error.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        writeln!($crate::out::stdout(), $($arg)*)
    }};
}

/// `eprintln!` that never panics: a message that cannot be shown is dropped (the
/// command's outcome is its exit code).
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = writeln!($crate::out::stderr(), $($arg)*);
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_pipe_is_remembered_and_every_later_write_succeeds() {
        let closed = AtomicBool::new(false);
        let broken = io::Error::from(ErrorKind::BrokenPipe);
        assert_eq!(quiet(&closed, Err(broken), 5).unwrap(), 5);
        assert!(closed.load(Ordering::Relaxed));
        let full = io::Error::from(ErrorKind::StorageFull);
        let other = quiet(&AtomicBool::new(false), Err::<usize, _>(full), 0);
        assert_eq!(other.unwrap_err().kind(), ErrorKind::StorageFull);
    }
}
