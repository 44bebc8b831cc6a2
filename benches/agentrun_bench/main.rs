//! agentrun's performance suite (issue 8; docs/bench.md says what each row means).
//!
//! `cargo bench --bench agentrun_bench` builds the release binary, runs every
//! scenario against it as a separate process, prints one Markdown report and writes it
//! to `target/bench.md`. `-- --quick` (or `AGENTRUN_BENCH_QUICK=1`) runs small sizes
//! only, as a sanity check.
//!
//! The machine is shared and noisy, so every figure is a median of repetitions, and
//! the per-step figures are also given as multiples of a floor — one 400-byte SQLite
//! insert + commit, WAL, `synchronous=FULL` — measured repeatedly in the same run on
//! the same disk.

mod fixture;
mod http;
mod procs;
mod report;
mod sqlite;
mod tool;

use fixture::{Project, StepRun, Tool};
use procs::{Measured, Stdout};
use report::{Table, median, ms, num, verdict};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;

/// Sizes and repetition counts.
struct Plan {
    quick: bool,
    /// (steps, repetitions); the last size is "the big run".
    sizes: Vec<(u32, usize)>,
    /// The non-idempotent command tool (one more commit per step) at one size.
    not_idempotent: (u32, usize),
    /// Runs in the database that `runs list` reads.
    list_runs: u32,
    /// The larger of the two runs whose fsyncs are counted.
    strace_steps: u32,
    reps: usize,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                quick,
                sizes: vec![(10, 3), (100, 3), (1_000, 1)],
                not_idempotent: (100, 3),
                list_runs: 50,
                strace_steps: 100,
                reps: 5,
            }
        } else {
            Plan {
                quick,
                sizes: vec![(10, 5), (100, 5), (1_000, 3), (10_000, 3)],
                not_idempotent: (1_000, 3),
                list_runs: 1_000,
                strace_steps: 1_000,
                reps: 11,
            }
        }
    }

    fn big(&self) -> u32 {
        self.sizes.last().map_or(0, |s| s.0)
    }
}

/// One row of the per-step table.
struct Row {
    tool: String,
    steps: u32,
    reps: usize,
    wall_ms: f64,
    /// Median gap between consecutive tool calls: one whole in-process step.
    step_ms: f64,
    /// Its 10th percentile: what a step costs when the machine's other load leaves it
    /// alone.
    step_p10_ms: f64,
    /// The tool's own cost (spawn, or HTTP round trip), measured outside agentrun.
    tool_ms: f64,
    cpu_per_step_ms: f64,
    max_rss_mib: f64,
    /// Median and mean step time of the first and last tenth of the steps.
    first_tenth_ms: (f64, f64),
    last_tenth_ms: (f64, f64),
}

impl Row {
    /// Growth: last tenth over first tenth, by medians (a burst of load from the
    /// machine's other users moves a mean far more than a median), and by means (which
    /// count periodic costs such as WAL checkpoints).
    fn growth(&self) -> (f64, f64) {
        (
            self.last_tenth_ms.0 / self.first_tenth_ms.0,
            self.last_tenth_ms.1 / self.first_tenth_ms.1,
        )
    }
}

impl Row {
    fn overhead_ms(&self) -> f64 {
        self.step_ms - self.tool_ms
    }
}

struct Bench {
    plan: Plan,
    bin: PathBuf,
    work: tempfile::TempDir,
    server: Arc<http::Server>,
    /// Repeated measurements (ms) taken between scenarios, so that each reference
    /// sees the same mix of machine load as the runs it is compared with.
    floors: Vec<f64>,
    spawns: Vec<f64>,
    round_trips: Vec<f64>,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(tool::TOOL_ARG) {
        return tool::main(&args[2..]);
    }
    let quick = args.iter().any(|a| a == "--quick")
        || std::env::var_os("AGENTRUN_BENCH_QUICK").is_some_and(|v| v != "0");
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_agentrun"));
    // target/release/agentrun → target/: the report lands beside the build, and the
    // scratch databases on the same disk as the project (never a tmpfs, where fsync
    // costs nothing and the floor would be meaningless).
    let target = bin
        .parent()
        .and_then(Path::parent)
        .expect("the agentrun binary lives in target/PROFILE/")
        .to_path_buf();
    let work = tempfile::Builder::new()
        .prefix("agentrun-bench-")
        .tempdir_in(&target)
        .expect("scratch folder under target/");
    let mut bench = Bench {
        plan: Plan::new(quick),
        bin,
        work,
        server: Arc::new(http::Server::start()),
        floors: Vec::new(),
        spawns: Vec::new(),
        round_trips: Vec::new(),
    };
    let report = bench.run();
    println!("{report}");
    let out = target.join("bench.md");
    match std::fs::write(&out, &report) {
        Ok(()) => eprintln!("bench: report written to {}", out.display()),
        Err(e) => eprintln!("bench: cannot write {}: {e}", out.display()),
    }
    ExitCode::SUCCESS
}

impl Bench {
    fn root(&self) -> &Path {
        self.work.path()
    }

    /// One more measurement of each reference: the floor, the tool's spawn, the HTTP
    /// round trip.
    fn measure_references(&mut self) {
        self.floors.push(ms(sqlite::floor(self.work.path(), 200)));
        let stamps = self.root().join("spawn-stamps");
        self.spawns.push(ms(tool::spawn_cost(&stamps, 100)));
        self.round_trips.push(ms(self.server.round_trip(200)));
    }

    fn floor(&self) -> f64 {
        median(&self.floors)
    }

    fn project(&self, name: &str, tool: Tool) -> Project {
        Project::new(&self.bin, self.root(), name, tool)
    }

    fn run(&mut self) -> String {
        let load_before = loadavg();
        self.measure_references();

        let command = self.project("command", Tool::Command { idempotent: true });
        let sizes = self.plan.sizes.clone();
        let (mut rows, big) = self.step_rows(&command, "command", &sizes);
        let not_idem = self.project("command-ni", Tool::Command { idempotent: false });
        let (ni_rows, _) = self.step_rows(
            &not_idem,
            "command, not idempotent",
            &[self.plan.not_idempotent],
        );
        let http = self.project("http", Tool::Http(self.server.clone()));
        let (http_rows, _) = self.step_rows(&http, "HTTP", &sizes);
        rows.extend(ni_rows);
        rows.extend(http_rows);

        let big_n = self.plan.big();
        let storage = sqlite::storage(&big.0);
        let (resume_ms, show_ms) = self.resume(&command, &big.0, &big.1);
        let fsyncs = self.fsyncs(&command);
        let (version_ms, list_ms) = self.cold_start(&command);
        self.measure_references();
        let load_after = loadavg();
        let (spawn_ms, rtt_ms) = (median(&self.spawns), median(&self.round_trips));
        for r in &mut rows {
            r.tool_ms = if r.tool == "HTTP" { rtt_ms } else { spawn_ms };
        }

        let mut out = String::new();
        out.push_str(&format!(
            "## agentrun benchmark{}\n\n",
            if self.plan.quick { " (quick)" } else { "" }
        ));
        out.push_str(&format!(
            "Machine: {} cores; load average {load_before} before, {load_after} after. \
             The bench's own peak RSS, a lower bound on every child's: {} MiB.\n\n",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            num(procs::own_peak_rss_kib() as f64 / 1024.0)
        ));
        out.push_str(&format!(
            "- **Floor**: one 400-byte SQLite insert + commit (WAL, synchronous=FULL): \
             **{} ms** (median of {} measurements of 200 commits each, {})\n",
            num(self.floor()),
            self.floors.len(),
            spread(&self.floors),
        ));
        out.push_str(&format!(
            "- **Tool spawn** (the helper, spawned outside agentrun; median of {} medians of 100): \
             {} ms ({})\n",
            self.spawns.len(),
            num(spawn_ms),
            spread(&self.spawns),
        ));
        out.push_str(&format!(
            "- **HTTP round trip** (keep-alive GET to the loopback server; median of {} medians \
             of 200): {} ms ({})\n\n",
            self.round_trips.len(),
            num(rtt_ms),
            spread(&self.round_trips),
        ));

        out.push_str("### Per step\n\n");
        let mut t = Table::new(&[
            "tool",
            "steps",
            "runs",
            "whole run (ms)",
            "whole run / step (ms)",
            "step in-run, median (ms)",
            "p10 (ms)",
            "minus tool (ms)",
            "× floor",
            "CPU / step (ms)",
            "peak RSS (MiB)",
            "last ÷ first tenth: medians (ms → ms); means",
        ]);
        for r in &rows {
            t.row(vec![
                r.tool.clone(),
                r.steps.to_string(),
                r.reps.to_string(),
                num(r.wall_ms),
                num(r.wall_ms / r.steps as f64),
                num(r.step_ms),
                num(r.step_p10_ms),
                num(r.overhead_ms()),
                num(r.overhead_ms() / self.floor()),
                num(r.cpu_per_step_ms),
                num(r.max_rss_mib),
                format!(
                    "{} ({} → {}); {}",
                    num(r.growth().0),
                    num(r.first_tenth_ms.0),
                    num(r.last_tenth_ms.0),
                    num(r.growth().1),
                ),
            ]);
        }
        out.push_str(&t.finish());

        out.push_str("\n### Storage, resume, cold start\n\n");
        let mut t = Table::new(&["measurement", "value"]);
        let n = big_n as f64;
        t.row(vec![
            format!("database bytes / step ({big_n}-step run, after wal_checkpoint(TRUNCATE))"),
            format!(
                "{} ({} bytes file)",
                num(storage.file_bytes as f64 / n),
                storage.file_bytes
            ),
        ]);
        t.row(vec![
            "  of which JSON text / step: messages, tool_calls, events".into(),
            format!(
                "{}, {}, {} ({} events / step)",
                num(storage.messages_bytes as f64 / n),
                num(storage.tool_calls_bytes as f64 / n),
                num(storage.events_bytes as f64 / n),
                num(storage.events as f64 / n)
            ),
        ]);
        t.row(vec![
            format!(
                "fsync + fdatasync / step (strace -f, ({} − 10 steps) ÷ {})",
                self.plan.strace_steps,
                self.plan.strace_steps - 10
            ),
            fsyncs.map_or("n/a (strace unavailable)".into(), num),
        ]);
        t.row(vec![
            format!("`resume` of the {big_n}-step run, whole process (one more step)"),
            format!("{} ms", num(resume_ms)),
        ]);
        t.row(vec![
            format!("`runs show RUN --json > /dev/null` on the {big_n}-step run"),
            format!("{} ms", num(show_ms)),
        ]);
        t.row(vec![
            "`agentrun --version`".into(),
            format!("{} ms", num(version_ms)),
        ]);
        t.row(vec![
            format!("`agentrun runs list` on {} runs", self.plan.list_runs),
            format!("{} ms", num(list_ms)),
        ]);
        out.push_str(&t.finish());

        out.push_str("\n### Targets\n\n");
        let mut t = Table::new(&["target", "measured", "verdict"]);
        let worst = rows
            .iter()
            .filter(|r| r.steps >= 100)
            .map(|r| r.overhead_ms() / self.floor())
            .fold(0.0, f64::max);
        t.row(vec![
            "one-tool step ≤ 3 floors + the tool's own cost (worst row with ≥ 100 steps)".into(),
            format!("{} floors", num(worst)),
            verdict(worst <= 3.0).into(),
        ]);
        let growth = rows
            .iter()
            .filter(|r| r.steps == big_n)
            .map(|r| r.growth().0)
            .fold(0.0, f64::max);
        t.row(vec![
            format!("last tenth ≤ 1.2 × first tenth at {big_n} steps (medians, worst tool)"),
            format!("{}×", num(growth)),
            verdict(growth <= 1.2).into(),
        ]);
        let per_step = storage.file_bytes as f64 / n;
        t.row(vec![
            "≤ 2 KB of database per step".into(),
            format!("{} bytes", num(per_step)),
            verdict(per_step <= 2048.0).into(),
        ]);
        t.row(vec![
            format!("resume of a {big_n}-step run < 100 ms"),
            format!("{} ms", num(resume_ms)),
            verdict(resume_ms < 100.0).into(),
        ]);
        t.row(vec![
            "`--version` < 10 ms".into(),
            format!("{} ms", num(version_ms)),
            verdict(version_ms < 10.0).into(),
        ]);
        let rss = rows
            .iter()
            .filter(|r| r.steps == big_n)
            .map(|r| r.max_rss_mib)
            .fold(0.0, f64::max);
        t.row(vec![
            format!("peak memory of a {big_n}-step run < 50 MB"),
            format!("{} MiB", num(rss)),
            verdict(rss < 50.0).into(),
        ]);
        out.push_str(&t.finish());
        out
    }

    /// Runs `project` at each size; returns the rows and the first big run's database
    /// and run id (kept for the storage and resume measurements).
    fn step_rows(
        &mut self,
        project: &Project,
        label: &str,
        sizes: &[(u32, usize)],
    ) -> (Vec<Row>, (PathBuf, String)) {
        let mut rows = Vec::new();
        let mut kept = (PathBuf::new(), String::new());
        let big = self.plan.big();
        for &(n, reps) in sizes {
            self.measure_references();
            let mut runs: Vec<StepRun> = Vec::new();
            for rep in 0..reps {
                let db = project.db(&format!("n{n}-{rep}.db"));
                let run = project.step_run(&db, n);
                eprintln!(
                    "bench: {label}, {n} steps, run {}/{reps}: {} ms",
                    rep + 1,
                    num(ms(run.measured.wall))
                );
                if n == big && rep == 0 {
                    kept = (db, run.run_id.clone());
                } else {
                    remove_db(&db);
                }
                runs.push(run);
            }
            rows.push(row(label, n, &runs));
        }
        (rows, kept)
    }

    /// Median whole-process times of `resume` (one more step, on a fresh copy each
    /// time) and of `runs show --json`, on the big run.
    fn resume(&self, project: &Project, db: &Path, run_id: &str) -> (f64, f64) {
        let max_steps = (self.plan.big() + 1).to_string();
        let copy = project.db("resume.db");
        let resumes: Vec<f64> = (0..self.plan.reps.min(5))
            .map(|_| {
                sqlite::copy_db(db, &copy);
                let m = procs::run(
                    &mut project.agentrun(
                        &copy,
                        &["resume", run_id, "--max-steps", &max_steps, "--json"],
                    ),
                    Stdout::Keep,
                )
                .expect_code(0, "resume");
                ms(m.wall)
            })
            .collect();
        let shows: Vec<f64> = (0..self.plan.reps.min(5))
            .map(|_| {
                let m = procs::run(
                    &mut project.agentrun(db, &["runs", "show", run_id, "--json"]),
                    Stdout::Discard,
                )
                .expect_code(0, "runs show");
                ms(m.wall)
            })
            .collect();
        eprintln!(
            "bench: resume {} ms, runs show {} ms",
            num(median(&resumes)),
            num(median(&shows))
        );
        (median(&resumes), median(&shows))
    }

    /// fsync + fdatasync calls per step, from `strace -c` of a small and a larger run
    /// (the difference removes what opening and creating the database cost). `None`
    /// when strace cannot run here.
    fn fsyncs(&self, project: &Project) -> Option<f64> {
        let count = |n: u32| -> Option<u64> {
            let db = project.db(&format!("strace-{n}.db"));
            let out = self.root().join(format!("strace-{n}.txt"));
            let inner = project.start_command(&db, n, n);
            let mut cmd = Command::new("strace");
            cmd.args(["-f", "-c", "-e", "trace=fsync,fdatasync", "-o"])
                .arg(&out)
                .arg("--")
                .arg(inner.get_program())
                .args(inner.get_args());
            for (k, v) in inner.get_envs() {
                match v {
                    Some(v) => cmd.env(k, v),
                    None => cmd.env_remove(k),
                };
            }
            if let Some(dir) = inner.get_current_dir() {
                cmd.current_dir(dir);
            }
            let m: Measured = procs::run(&mut cmd, Stdout::Keep);
            remove_db(&db);
            if m.code != 4 {
                eprintln!("bench: strace failed (exit {}): {}", m.code, m.stderr);
                return None;
            }
            let text = std::fs::read_to_string(&out).ok()?;
            Some(
                text.lines()
                    .filter_map(|l| {
                        let f: Vec<&str> = l.split_whitespace().collect();
                        let name = *f.last()?;
                        (name == "fsync" || name == "fdatasync")
                            .then(|| f.get(3)?.parse::<u64>().ok())
                            .flatten()
                    })
                    .sum(),
            )
        };
        let small = count(10)?;
        let large = count(self.plan.strace_steps)?;
        let per_step = (large as f64 - small as f64) / (self.plan.strace_steps - 10) as f64;
        eprintln!(
            "bench: fsyncs {small} at 10 steps, {large} at {}",
            self.plan.strace_steps
        );
        Some(per_step)
    }

    /// Median `--version`, and median `runs list` on a database of many runs.
    fn cold_start(&self, project: &Project) -> (f64, f64) {
        let db = project.db("list.db");
        let versions: Vec<f64> = (0..self.plan.reps * 2)
            .map(|_| {
                let m = procs::run(&mut project.agentrun(&db, &["--version"]), Stdout::Keep)
                    .expect_code(0, "--version");
                ms(m.wall)
            })
            .collect();
        for i in 0..self.plan.list_runs {
            // A one-step run that answers at once.
            project.start(&db, 0, 5).expect_code(0, "start, 1 step");
            if (i + 1) % 200 == 0 {
                eprintln!("bench: {} runs created for `runs list`", i + 1);
            }
        }
        let lists: Vec<f64> = (0..self.plan.reps)
            .map(|_| {
                let m = procs::run(
                    &mut project.agentrun(&db, &["runs", "list"]),
                    Stdout::Discard,
                )
                .expect_code(0, "runs list");
                ms(m.wall)
            })
            .collect();
        remove_db(&db);
        (median(&versions), median(&lists))
    }
}

fn row(label: &str, n: u32, runs: &[StepRun]) -> Row {
    let per_run =
        |f: &dyn Fn(&StepRun) -> f64| -> f64 { median(&runs.iter().map(f).collect::<Vec<_>>()) };
    let tenths: Vec<_> = runs
        .iter()
        .map(|r| report::tenths(&report::intervals_ms(&r.intervals)))
        .collect();
    Row {
        tool: label.to_string(),
        steps: n,
        reps: runs.len(),
        wall_ms: per_run(&|r| ms(r.measured.wall)),
        step_ms: per_run(&|r| median(&report::intervals_ms(&r.intervals))),
        step_p10_ms: per_run(&|r| report::quantile(&report::intervals_ms(&r.intervals), 0.1)),
        // Filled in at the end, from every measurement of the tool's own cost.
        tool_ms: f64::NAN,
        cpu_per_step_ms: per_run(&|r| ms(r.measured.cpu)) / n as f64,
        max_rss_mib: runs
            .iter()
            .map(|r| r.measured.max_rss_kib as f64 / 1024.0)
            .fold(0.0, f64::max),
        first_tenth_ms: (
            median(&tenths.iter().map(|t| t.0.0).collect::<Vec<_>>()),
            median(&tenths.iter().map(|t| t.0.1).collect::<Vec<_>>()),
        ),
        last_tenth_ms: (
            median(&tenths.iter().map(|t| t.1.0).collect::<Vec<_>>()),
            median(&tenths.iter().map(|t| t.1.1).collect::<Vec<_>>()),
        ),
    }
}

/// "min–max ms" of repeated measurements: how noisy the machine was.
fn spread(values: &[f64]) -> String {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(0.0, f64::max);
    format!("range {}–{} ms", num(min), num(max))
}

fn remove_db(db: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}
