//! The command tool the benchmark gives agentrun: this very executable, started with
//! [`TOOL_ARG`]. It appends a CLOCK_MONOTONIC timestamp to a file, reads its arguments
//! from stdin and prints `1`.
//!
//! Why a compiled helper and not `sh -c 'cat; echo 1'`: the tool's own start-up is
//! paid on every step and would drown agentrun's overhead; a static Rust binary that
//! does nothing starts in about a millisecond, and [`spawn_cost`] measures exactly that
//! so it can be subtracted. Why timestamps: the gap between two consecutive calls is
//! one whole step inside a single agentrun process (model turn, journal writes,
//! commit, tool spawn) with no process start-up in it, so per-step time and its growth
//! over a 10,000-step run can be read without instrumenting agentrun.

use super::procs::monotonic_ns;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// argv[1] that turns the bench executable into the tool.
pub const TOOL_ARG: &str = "__agentrun_bench_tool";

/// The tool's `main`: `TOOL_ARG STAMP_FILE`.
pub fn main(args: &[String]) -> ExitCode {
    let now = monotonic_ns();
    if let Some(path) = args.first() {
        // O_APPEND: each call adds one line, whatever else happened to the file.
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(format!("{now}\n").as_bytes()));
        if appended.is_err() {
            return ExitCode::from(70);
        }
    }
    let mut input = Vec::new();
    if std::io::stdin().read_to_end(&mut input).is_err() {
        return ExitCode::from(70);
    }
    println!("1");
    ExitCode::SUCCESS
}

/// argv of the tool for tools.toml.
pub fn argv(stamps: &Path) -> Vec<String> {
    vec![
        std::env::current_exe()
            .expect("path of the bench executable")
            .display()
            .to_string(),
        TOOL_ARG.to_string(),
        stamps.display().to_string(),
    ]
}

/// The timestamps the tool wrote, in call order.
pub fn read_stamps(path: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|l| l.parse().expect("tool stamp is a number"))
        .collect()
}

/// What one spawn of the tool costs, measured outside agentrun.
pub struct SpawnCost {
    /// Median wall time.
    pub wall: Duration,
    /// Mean CPU (user + system) of the spawning process and the tool together: this
    /// process's own (`RUSAGE_SELF`) and its waited-for children's
    /// (`RUSAGE_CHILDREN`), over the loop, per spawn.
    pub cpu: Duration,
}

/// Spawns the tool the way agentrun does (absolute path, so `posix_spawn`; own process
/// group, piped stdin/stdout/stderr), hands it its arguments and waits for it, `reps`
/// times.
pub fn spawn_cost(stamps: &Path, reps: usize) -> SpawnCost {
    spawn_cost_of(&argv(stamps), stamps, reps)
}

/// Median wall time of the same through agentrun's trampoline (issue 22), as a
/// sandboxed tool starts: `agentrun __exec-tool POLICY PROGRAM ARGV0 ARGS…`, which
/// applies `policy` (JSON) to itself and execs the helper.
pub fn trampoline_cost(agentrun: &Path, policy: &str, stamps: &Path, reps: usize) -> Duration {
    let tool = argv(stamps);
    let mut wrapped = vec![
        agentrun.display().to_string(),
        agentrun::tools::trampoline::ARG.to_string(),
        policy.to_string(),
        tool[0].clone(),
    ];
    wrapped.extend(tool);
    spawn_cost_of(&wrapped, stamps, reps).wall
}

fn spawn_cost_of(argv: &[String], stamps: &Path, reps: usize) -> SpawnCost {
    let cpu_before = cpu_of(libc::RUSAGE_SELF) + cpu_of(libc::RUSAGE_CHILDREN);
    let mut times: Vec<Duration> = (0..reps)
        .map(|_| {
            let start = Instant::now();
            let mut child = Command::new(&argv[0])
                .args(&argv[1..])
                .process_group(0)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn the tool helper");
            child
                .stdin
                .take()
                .expect("piped stdin")
                .write_all(br#"{"i":1}"#)
                .expect("write tool input");
            let out = child.wait_with_output().expect("wait for the tool helper");
            assert!(out.status.success(), "tool helper failed: {out:?}");
            start.elapsed()
        })
        .collect();
    let cpu = cpu_of(libc::RUSAGE_SELF) + cpu_of(libc::RUSAGE_CHILDREN) - cpu_before;
    let _ = std::fs::remove_file(stamps);
    times.sort();
    SpawnCost {
        wall: times[times.len() / 2],
        cpu: cpu / reps as u32,
    }
}

/// User + system CPU of `who` (`RUSAGE_SELF` or `RUSAGE_CHILDREN`) so far.
fn cpu_of(who: libc::c_int) -> Duration {
    // SAFETY: rusage is plain old data; getrusage only writes it.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer and a valid `who`.
    unsafe { libc::getrusage(who, &mut u) };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    tv(u.ru_utime) + tv(u.ru_stime)
}
