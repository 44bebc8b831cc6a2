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

// Tests and benches print for people; only the binary goes through src/out.rs.
#![allow(clippy::disallowed_macros, clippy::disallowed_methods)]

mod fixture;
mod http;
mod parallel;
mod peers;
mod procs;
mod report;
mod sandbox;
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
    /// The non-idempotent command tool (the started mark: one more fsync per step).
    not_idempotent: Vec<(u32, usize)>,
    /// The long run (HTTP tool, one repetition): growth, memory, resume and `runs
    /// show` at a length where anything O(run) per step or per resume shows.
    long: u32,
    /// Runs in the database that `runs list` reads (copies of one real run).
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
                not_idempotent: vec![(100, 3), (1_000, 1)],
                long: 3_000,
                list_runs: 1_000,
                strace_steps: 100,
                reps: 5,
            }
        } else {
            Plan {
                quick,
                sizes: vec![(10, 3), (100, 3), (1_000, 3), (10_000, 1)],
                not_idempotent: vec![(1_000, 3), (10_000, 1)],
                long: 100_000,
                list_runs: 100_000,
                strace_steps: 1_000,
                reps: 5,
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
    /// Median, mean and 10th percentile step time of the first and last tenth.
    first_tenth_ms: (f64, f64, f64),
    last_tenth_ms: (f64, f64, f64),
}

impl Row {
    /// Growth: last tenth over first tenth, by medians (a burst of load from the
    /// machine's other users moves a mean far more than a median), and by means (which
    /// count periodic costs such as WAL checkpoints), and by 10th percentiles (a step
    /// the machine's other load left alone: what the run itself costs).
    fn growth(&self) -> (f64, f64, f64) {
        (
            self.last_tenth_ms.0 / self.first_tenth_ms.0,
            self.last_tenth_ms.1 / self.first_tenth_ms.1,
            self.last_tenth_ms.2 / self.first_tenth_ms.2,
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
    /// The same spawn through the trampoline, per [`sandbox::KINDS`] (issue 22).
    trampolines: Vec<[f64; 3]>,
    /// CPU (ms) of one spawn of the tool, spawner and tool together.
    spawn_cpus: Vec<f64>,
    round_trips: Vec<f64>,
    sandbox: sandbox::Setup,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(tool::TOOL_ARG) {
        return tool::main(&args[2..]);
    }
    if args.get(1).map(String::as_str) == Some(parallel::SLOW_ARG) {
        return parallel::slow_main();
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
        sandbox: sandbox::Setup::new(work.path()),
        work,
        server: Arc::new(http::Server::start()),
        floors: Vec::new(),
        spawns: Vec::new(),
        trampolines: Vec::new(),
        spawn_cpus: Vec::new(),
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
        let spawn = tool::spawn_cost(&stamps, 100);
        self.spawns.push(ms(spawn.wall));
        self.spawn_cpus.push(ms(spawn.cpu));
        self.trampolines.push(self.sandbox.spawns(&self.bin, 100));
        self.round_trips.push(ms(self.server.round_trip(200)));
    }

    fn floor(&self) -> f64 {
        median(&self.floors)
    }

    /// The CPU of the row's tool itself per step: a spawn for the command tools; an
    /// HTTP tool's server runs in this process, so nothing is subtracted there.
    fn tool_cpu_ms(&self, r: &Row) -> f64 {
        if r.tool == "HTTP" {
            0.0
        } else {
            median(&self.spawn_cpus)
        }
    }

    fn project(&self, name: &str, tool: Tool) -> Project {
        Project::new(&self.bin, self.root(), name, tool)
    }

    fn run(&mut self) -> String {
        let load_before = loadavg();
        self.measure_references();
        let big_n = self.plan.big();
        let long_n = self.plan.long;

        let command = self.project("command", Tool::Command { idempotent: true });
        let sizes = self.plan.sizes.clone();
        let (mut rows, big) = self.step_rows(&command, "command", &sizes, big_n);
        let not_idem = self.project("command-ni", Tool::Command { idempotent: false });
        let ni_sizes = self.plan.not_idempotent.clone();
        let (ni_rows, _) = self.step_rows(&not_idem, NOT_IDEMPOTENT, &ni_sizes, 0);
        // The sandbox's step cost (issue 22): the same tool, confined.
        let sandboxed = self.project("command-sandboxed", Tool::Sandboxed { network: true });
        let (mut sb_rows, _) = self.step_rows(&sandboxed, SANDBOXED, &sizes, 0);
        let offline = self.project("command-offline", Tool::Sandboxed { network: false });
        sb_rows.extend(self.step_rows(&offline, SANDBOXED_OFFLINE, &sizes, 0).0);
        let http = self.project("http", Tool::Http(self.server.clone()));
        let mut http_sizes = sizes.clone();
        http_sizes.push((long_n, 1));
        let (http_rows, long) = self.step_rows(&http, "HTTP", &http_sizes, long_n);
        rows.extend(ni_rows);
        rows.extend(sb_rows);
        rows.extend(http_rows);

        let storage = sqlite::storage(&big.0);
        let resume_big = self.resume(&command, &big.0, &big.1, big_n);
        sqlite::storage(&long.0);
        let resume_long = self.resume(&http, &long.0, &long.1, long_n);
        let show_big = self.show(&command, &big.0, &big.1);
        let show_long = self.show(&http, &long.0, &long.1);
        remove_db(&long.0);
        let fsyncs = self.fsyncs(&command);
        let fsyncs_ni = self.fsyncs(&not_idem);
        let (version_ms, lists) = self.cold_start(&command);
        let par = parallel::measure(
            &self.bin,
            self.root(),
            8,
            if self.plan.quick { 1 } else { 5 },
        );
        self.measure_references();
        let (policy_ms, walk_ms) = (self.sandbox.policy_ms(200), self.sandbox.walk_ms(200));
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
            "- **Tool spawn** (the helper, spawned outside agentrun with posix_spawn; median of {} \
             medians of 100): {} ms ({}); its CPU, spawner and tool together (getrusage): {} ms \
             ({})\n",
            self.spawns.len(),
            num(spawn_ms),
            spread(&self.spawns),
            num(median(&self.spawn_cpus)),
            spread(&self.spawn_cpus),
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
            "CPU / step beyond the tool (ms)",
            "peak RSS (MiB)",
            "last ÷ first tenth: medians (ms → ms); means; p10s",
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
                num(r.cpu_per_step_ms - self.tool_cpu_ms(r)),
                num(r.max_rss_mib),
                format!(
                    "{} ({} → {}); {}; {}",
                    num(r.growth().0),
                    num(r.first_tenth_ms.0),
                    num(r.last_tenth_ms.0),
                    num(r.growth().1),
                    num(r.growth().2),
                ),
            ]);
        }
        out.push_str(&t.finish());

        out.push_str(&self.sandbox_section(&rows, spawn_ms, policy_ms, walk_ms));

        out.push_str("\n### Storage, commits, resume, `runs show`, cold start\n\n");
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
        let strace_label = |what: &str| {
            format!(
                "fsync + fdatasync / step, {what} (strace -f, ({} − 10 steps) ÷ {})",
                self.plan.strace_steps,
                self.plan.strace_steps - 10
            )
        };
        let fsync_cell = |f: Option<f64>| f.map_or("n/a (strace unavailable)".into(), num);
        t.row(vec![strace_label("idempotent tool"), fsync_cell(fsyncs)]);
        t.row(vec![strace_label("not idempotent"), fsync_cell(fsyncs_ni)]);
        for (steps, resume) in [(big_n, resume_big), (long_n, resume_long)] {
            t.row(vec![
                format!("`resume` of the {steps}-step run, whole process (one more step)"),
                format!("{} ms, peak RSS {} MiB", num(resume.0), num(resume.1)),
            ]);
        }
        for (steps, show) in [(big_n, &show_big), (long_n, &show_long)] {
            for (how, m) in [("", &show.human), (" --json", &show.json)] {
                t.row(vec![
                    format!("`runs show RUN{how}` on the {steps}-step run: first output; whole; peak RSS"),
                    format!(
                        "{} ms; {} ms ({} MB); {} MiB",
                        num(m.first_ms),
                        num(m.whole_ms),
                        num(m.bytes as f64 / 1e6),
                        num(m.rss_mib)
                    ),
                ]);
            }
        }
        t.row(vec![
            "`agentrun --version`".into(),
            format!("{} ms", num(version_ms)),
        ]);
        t.row(vec![
            format!(
                "one turn of {} calls to a {} ms tool, whole `start` (median): together; one call; one by one",
                par.k,
                parallel::SLOW_MS
            ),
            format!(
                "{} ms; {} ms; {} ms",
                num(par.together_ms),
                num(par.one_ms),
                num(par.one_by_one_ms)
            ),
        ]);
        let list_runs = self.plan.list_runs;
        t.row(vec![
            format!("`agentrun runs list --limit 20` on {list_runs} runs"),
            lists
                .limited
                .map_or("n/a (this build has no `--limit`)".into(), |v| {
                    format!("{} ms", num(v))
                }),
        ]);
        t.row(vec![
            format!("`agentrun runs list` (all) on {list_runs} runs"),
            format!("{} ms", num(lists.all)),
        ]);
        out.push_str(&t.finish());

        out.push_str("\n### Targets\n\n");
        let mut t = Table::new(&["target", "measured", "verdict"]);
        let floors_at = |pred: &dyn Fn(&Row) -> bool| {
            rows.iter()
                .filter(|r| r.steps == big_n && pred(r))
                .map(|r| r.overhead_ms() / self.floor())
                .reduce(f64::max)
        };
        // None: no run of that size (the quick plan runs the non-idempotent tool smaller).
        for (label, limit, got) in [
            (
                "idempotent step ≤ 1.5 floors",
                1.5,
                floors_at(&|r| r.tool == "command" || r.tool == "HTTP"),
            ),
            (
                "non-idempotent step ≤ 2.5 floors",
                2.5,
                floors_at(&|r| r.tool == NOT_IDEMPOTENT),
            ),
        ] {
            t.row(vec![
                format!("{label} beyond the tool at {big_n} steps (worst tool)"),
                got.map_or("n/a (not run at this size)".into(), |g| {
                    format!("{} floors", num(g))
                }),
                got.map_or("n/a", |g| verdict(g <= limit)).into(),
            ]);
        }
        let beyond = rows
            .iter()
            .filter(|r| r.tool == "command" && r.steps == big_n)
            .map(|r| r.cpu_per_step_ms - self.tool_cpu_ms(r))
            .next();
        t.row(vec![
            format!("command-tool step: agentrun's CPU beyond the tool's spawn ≤ 0.5 ms at {big_n} steps"),
            beyond.map_or("n/a".into(), |b| format!("{} ms", num(b))),
            beyond.map_or("n/a", |b| verdict(b <= 0.5)).into(),
        ]);
        for (want, got) in [(1.0, fsyncs), (2.0, fsyncs_ni)] {
            t.row(vec![
                format!(
                    "{want} fsync per {} step (≤ {} with SQLite's WAL checkpoints)",
                    if want == 1.0 {
                        "idempotent"
                    } else {
                        "non-idempotent"
                    },
                    want + 0.1
                ),
                fsync_cell(got),
                got.map_or("n/a", |g| verdict(g <= want + 0.1)).into(),
            ]);
        }
        let long_row = rows.iter().find(|r| r.steps == long_n && r.tool == "HTTP");
        let (growth, p10s) =
            long_row.map_or((f64::NAN, f64::NAN), |r| (r.growth().0, r.growth().2));
        t.row(vec![
            format!("last tenth ≤ 1.1 × first tenth at {long_n} steps (medians)"),
            format!("{}× (p10s: {}×)", num(growth), num(p10s)),
            verdict(growth <= 1.1).into(),
        ]);
        let rss = long_row.map_or(f64::NAN, |r| r.max_rss_mib);
        t.row(vec![
            format!("peak RSS of a {long_n}-step run < 50 MiB"),
            format!("{} MiB", num(rss)),
            verdict(rss < 50.0).into(),
        ]);
        t.row(vec![
            format!("resume of a {long_n}-step run < 100 ms"),
            format!("{} ms", num(resume_long.0)),
            verdict(resume_long.0 < 100.0).into(),
        ]);
        let first = show_long.human.first_ms.max(show_long.json.first_ms);
        t.row(vec![
            format!("`runs show` of a {long_n}-step run: first output < 100 ms"),
            format!("{} ms", num(first)),
            verdict(first < 100.0).into(),
        ]);
        let flat = show_long.human.rss_mib.max(show_long.json.rss_mib)
            / show_big.human.rss_mib.max(show_big.json.rss_mib);
        t.row(vec![
            format!("`runs show` memory flat: peak RSS at {long_n} ÷ at {big_n} steps ≤ 1.5"),
            format!("{}×", num(flat)),
            verdict(flat <= 1.5).into(),
        ]);
        t.row(vec![
            format!("`runs list --limit` on {list_runs} runs < 50 ms"),
            lists
                .limited
                .map_or("n/a".into(), |v| format!("{} ms", num(v))),
            lists.limited.map_or("n/a", |v| verdict(v < 50.0)).into(),
        ]);
        let per_step = storage.file_bytes as f64 / n;
        t.row(vec![
            "≤ 2 KB of database per step".into(),
            format!("{} bytes", num(per_step)),
            verdict(per_step <= 2048.0).into(),
        ]);
        let extra = par.together_ms - par.one_ms;
        t.row(vec![
            format!(
                "{} parallel calls of a {} ms tool cost about one: whole run − the 1-call run < {} ms",
                par.k,
                parallel::SLOW_MS,
                parallel::SLOW_MS
            ),
            format!("{} ms", num(extra)),
            verdict(extra < parallel::SLOW_MS as f64).into(),
        ]);
        t.row(vec![
            "`--version` < 10 ms".into(),
            format!("{} ms", num(version_ms)),
            verdict(version_ms < 10.0).into(),
        ]);
        out.push_str(&t.finish());
        let ours = [
            num(storage.file_bytes as f64 / n),
            format!("{} ms ({big_n} steps)", num(resume_big.0)),
            format!("{} ms (`--version`)", num(version_ms)),
        ];
        out.push_str(&peers::report(
            &self.peers_file(),
            &rows,
            self.floor(),
            ours,
        ));
        out
    }

    /// Runs `project` at each size; returns the rows and the database and run id of
    /// the first run with `keep` steps (kept for the storage, resume and show
    /// measurements).
    fn step_rows(
        &mut self,
        project: &Project,
        label: &str,
        sizes: &[(u32, usize)],
        keep: u32,
    ) -> (Vec<Row>, (PathBuf, String)) {
        let mut rows = Vec::new();
        let mut kept = (PathBuf::new(), String::new());
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
                if n == keep && rep == 0 {
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

    /// Median whole-process time and peak RSS of `resume` (one more step, on a fresh
    /// copy each time) of a checkpointed run of `steps` steps.
    fn resume(&self, project: &Project, db: &Path, run_id: &str, steps: u32) -> (f64, f64) {
        let max_steps = (steps + 1).to_string();
        let copy = project.db("resume.db");
        let runs: Vec<Measured> = (0..self.plan.reps.min(5))
            .map(|_| {
                sqlite::copy_db(db, &copy);
                procs::run(
                    &mut project.agentrun(
                        &copy,
                        &["resume", run_id, "--max-steps", &max_steps, "--json"],
                    ),
                    Stdout::Keep,
                )
                .expect_code(0, "resume")
            })
            .collect();
        remove_db(&copy);
        let wall = median(&runs.iter().map(|m| ms(m.wall)).collect::<Vec<_>>());
        let rss = runs
            .iter()
            .map(|m| m.max_rss_kib as f64 / 1024.0)
            .fold(0.0, f64::max);
        eprintln!("bench: resume of {steps} steps: {} ms", num(wall));
        (wall, rss)
    }

    /// `runs show` (human, and `--json`) of a run: time to the first byte on stdout,
    /// whole time, bytes and peak RSS, medians of repetitions.
    fn show(&self, project: &Project, db: &Path, run_id: &str) -> ShowTimes {
        let measure = |json: bool| -> ShowOne {
            let mut args = vec!["runs", "show", run_id];
            if json {
                args.push("--json");
            }
            let runs: Vec<procs::Streamed> = (0..self.plan.reps.min(5))
                .map(|_| {
                    let s = procs::first_output(&mut project.agentrun(db, &args));
                    assert_eq!(s.measured.code, 0, "runs show: {}", s.measured.stderr);
                    s
                })
                .collect();
            ShowOne {
                first_ms: median(&runs.iter().map(|s| ms(s.first_byte)).collect::<Vec<_>>()),
                whole_ms: median(&runs.iter().map(|s| ms(s.measured.wall)).collect::<Vec<_>>()),
                bytes: runs.first().map_or(0, |s| s.bytes),
                rss_mib: runs
                    .iter()
                    .map(|s| s.measured.max_rss_kib as f64 / 1024.0)
                    .fold(0.0, f64::max),
            }
        };
        let times = ShowTimes {
            human: measure(false),
            json: measure(true),
        };
        eprintln!(
            "bench: runs show first output {} ms, whole {} ms",
            num(times.human.first_ms),
            num(times.human.whole_ms)
        );
        times
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

    /// Median `--version`, and median `runs list` (with `--limit 20` when this build
    /// has it, and without) on a database of many runs.
    fn cold_start(&self, project: &Project) -> (f64, Lists) {
        let db = project.db("list.db");
        let versions: Vec<f64> = (0..self.plan.reps * 2)
            .map(|_| {
                let m = procs::run(&mut project.agentrun(&db, &["--version"]), Stdout::Keep)
                    .expect_code(0, "--version");
                ms(m.wall)
            })
            .collect();
        // One real one-step run that answers at once, copied to the wanted count.
        project.start(&db, 0, 5).expect_code(0, "start, 1 step");
        sqlite::clone_runs(&db, self.plan.list_runs);
        eprintln!("bench: {} runs for `runs list`", self.plan.list_runs);
        let list = |args: &[&str]| -> Option<f64> {
            let lists: Vec<Measured> = (0..self.plan.reps)
                .map(|_| procs::run(&mut project.agentrun(&db, args), Stdout::Discard))
                .collect();
            lists
                .iter()
                .all(|m| m.code == 0)
                .then(|| median(&lists.iter().map(|m| ms(m.wall)).collect::<Vec<_>>()))
        };
        let limited = list(&["runs", "list", "--limit", "20"]);
        let all = list(&["runs", "list"]).expect("runs list succeeds");
        remove_db(&db);
        (median(&versions), Lists { limited, all })
    }

    /// What the sandbox costs (issue 22): the spawn alone through the trampoline, the
    /// whole step with the confined tool, and the two pieces of policy work per call.
    fn sandbox_section(&self, rows: &[Row], spawn_ms: f64, policy_ms: f64, walk_ms: f64) -> String {
        let mut out = String::from("\n### Sandbox (issue 22)\n\n");
        out.push_str(&format!(
            "Spawn alone: the helper started as the *Tool spawn* above, directly or through \
             agentrun's trampoline under each policy (median of {} medians of 100).\n\n",
            self.trampolines.len()
        ));
        let mut t = Table::new(&["spawn", "median (ms)", "× direct", "+ ms"]);
        t.row(vec!["direct".into(), num(spawn_ms), "1".into(), "0".into()]);
        for (i, kind) in sandbox::KINDS.iter().enumerate() {
            let m = median(&self.trampolines.iter().map(|k| k[i]).collect::<Vec<_>>());
            t.row(vec![
                format!("trampoline, {kind}"),
                num(m),
                num(m / spawn_ms),
                num(m - spawn_ms),
            ]);
        }
        out.push_str(&t.finish());
        let base = |steps| {
            rows.iter()
                .find(|r| r.tool == "command" && r.steps == steps)
        };
        let mut t = Table::new(&[
            "step in-run",
            "steps",
            "median (ms)",
            "p10 (ms)",
            "× unsandboxed",
            "+ ms",
        ]);
        for r in rows
            .iter()
            .filter(|r| r.tool.starts_with("command") && r.tool != NOT_IDEMPOTENT)
        {
            let Some(b) = base(r.steps) else { continue };
            t.row(vec![
                r.tool.clone(),
                r.steps.to_string(),
                num(r.step_ms),
                num(r.step_p10_ms),
                num(r.step_ms / b.step_ms),
                num(r.step_ms - b.step_ms),
            ]);
        }
        out.push('\n');
        out.push_str(&t.finish());
        out.push_str(&format!(
            "\nPer sandboxed call, inside those figures: building the policy in agentrun \
             (`Policy::new`) {} ms; the trampoline's walk to the credential stores \
             (`readable_roots`) {} ms (medians of 200, in the bench's process).\n",
            num(policy_ms),
            num(walk_ms)
        ));
        out
    }

    /// Where `benches/peers/run.sh` leaves its figures.
    fn peers_file(&self) -> PathBuf {
        self.bin
            .parent()
            .and_then(Path::parent)
            .map_or_else(|| PathBuf::from("peers.json"), |t| t.join("peers.json"))
    }
}

/// The non-idempotent command tool's rows.
const NOT_IDEMPOTENT: &str = "command, not idempotent";
const SANDBOXED: &str = "command, sandboxed";
const SANDBOXED_OFFLINE: &str = "command, sandboxed, network off";

struct ShowOne {
    first_ms: f64,
    whole_ms: f64,
    bytes: u64,
    rss_mib: f64,
}

struct ShowTimes {
    human: ShowOne,
    json: ShowOne,
}

struct Lists {
    /// `None` when this build has no `--limit` (it lands with issue 13).
    limited: Option<f64>,
    all: f64,
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
            median(&tenths.iter().map(|t| t.0.2).collect::<Vec<_>>()),
        ),
        last_tenth_ms: (
            median(&tenths.iter().map(|t| t.1.0).collect::<Vec<_>>()),
            median(&tenths.iter().map(|t| t.1.1).collect::<Vec<_>>()),
            median(&tenths.iter().map(|t| t.1.2).collect::<Vec<_>>()),
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
