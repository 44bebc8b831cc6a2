//! Running `agentrun` (and the tool helper) as a child and measuring it: wall time,
//! CPU time and peak memory.
//!
//! Children are reaped with `wait4` rather than `Child::wait` because `wait4` hands back
//! that one child's `rusage`: its peak RSS and CPU time, not a maximum over every
//! child the bench ever started (which is what `getrusage(RUSAGE_CHILDREN)` gives).
//!
//! One caveat, from the kernel: a child's `ru_maxrss` starts at the RSS of the
//! process it was forked from (exec records the old address space's high-water mark),
//! so no child can report less than the bench's own peak. The bench keeps that small
//! and prints it ([`own_peak_rss_kib`]) so the reader can see the figures are the
//! children's.

use std::fs::File;
use std::io::{Read, Seek};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One finished child process.
pub struct Measured {
    pub wall: Duration,
    /// User + system time of the child and the children it waited for (its tools).
    pub cpu: Duration,
    pub max_rss_kib: u64,
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Measured {
    /// Panics with everything useful when the exit code is not the expected one: a
    /// benchmark of a failing run measures nothing.
    pub fn expect_code(self, code: i32, what: &str) -> Measured {
        assert_eq!(
            self.code, code,
            "{what}: unexpected exit code\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout, self.stderr
        );
        self
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.stdout))
    }
}

/// What to do with the child's stdout.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Stdout {
    Keep,
    /// `> /dev/null`: for commands whose output is large and not needed.
    Discard,
}

/// Runs `cmd` to completion (stdin closed) and measures it.
// The child is reaped by `wait4` (see the module doc), which clippy cannot see.
#[allow(clippy::zombie_processes)]
pub fn run(cmd: &mut Command, stdout: Stdout) -> Measured {
    // Files, not pipes: nothing needs draining while the child runs, so the parent
    // does no work that could compete with the child for the machine's two cores.
    let out = tempfile::tempfile().expect("temp file for stdout");
    let err = tempfile::tempfile().expect("temp file for stderr");
    cmd.stdin(Stdio::null())
        .stderr(err.try_clone().expect("dup stderr file"));
    match stdout {
        Stdout::Keep => cmd.stdout(out.try_clone().expect("dup stdout file")),
        Stdout::Discard => cmd.stdout(Stdio::null()),
    };
    let start = Instant::now();
    let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let (code, usage) = wait4(child.id() as libc::pid_t);
    let wall = start.elapsed();
    Measured {
        wall,
        cpu: timeval(usage.ru_utime) + timeval(usage.ru_stime),
        max_rss_kib: usage.ru_maxrss.max(0) as u64,
        code,
        stdout: read_all(out),
        stderr: read_all(err),
    }
}

/// Reaps `pid`, returning its exit code (-signal when killed) and resource usage.
fn wait4(pid: libc::pid_t) -> (i32, libc::rusage) {
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain old data; zero is a valid value for every field.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `pid` is our own unreaped child; both out-pointers are valid.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        assert_eq!(e.kind(), std::io::ErrorKind::Interrupted, "wait4: {e}");
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -libc::WTERMSIG(status)
    };
    (code, usage)
}

fn timeval(t: libc::timeval) -> Duration {
    Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
}

fn read_all(mut f: File) -> String {
    let mut s = String::new();
    f.rewind().expect("rewind output file");
    f.read_to_string(&mut s).expect("read output file");
    s
}

/// Nanoseconds on CLOCK_MONOTONIC: one clock for every process on the machine, so the
/// tool helper's timestamps and the bench's own can be subtracted.
pub fn monotonic_ns() -> u64 {
    // SAFETY: timespec is plain old data.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer and a clock every Linux has.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// This process's peak RSS (VmHWM), in KiB.
pub fn own_peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// A child whose output is read as it comes: when its first byte arrived, how many
/// bytes it wrote, and the usual measurements.
pub struct Streamed {
    pub first_byte: Duration,
    pub bytes: u64,
    pub measured: Measured,
}

/// Runs `cmd` with stdout on a pipe the bench drains, timing the first byte: how long
/// a person waits before `runs show` starts to print.
#[allow(clippy::zombie_processes)]
pub fn first_output(cmd: &mut Command) -> Streamed {
    let err = tempfile::tempfile().expect("temp file for stderr");
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(err.try_clone().expect("dup stderr file"));
    let start = Instant::now();
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let mut out = child.stdout.take().expect("piped stdout");
    let mut buf = vec![0u8; 64 * 1024];
    let mut first_byte = None;
    let mut bytes = 0u64;
    loop {
        match out.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                first_byte.get_or_insert_with(|| start.elapsed());
                bytes += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("read the child's stdout: {e}"),
        }
    }
    let (code, usage) = wait4(child.id() as libc::pid_t);
    let wall = start.elapsed();
    Streamed {
        first_byte: first_byte.unwrap_or(wall),
        bytes,
        measured: Measured {
            wall,
            cpu: timeval(usage.ru_utime) + timeval(usage.ru_stime),
            max_rss_kib: usage.ru_maxrss.max(0) as u64,
            code,
            stdout: String::new(),
            stderr: read_all(err),
        },
    }
}
