//! The console's live followers against the run they follow (issue 24):
//! `cargo bench --bench console`.
//!
//! The same scripted run (one command-tool call per step) is submitted and driven by
//! `agentrun worker --until-idle`, alone and with 50 browser-like followers of it on
//! `agentrun serve` (server-sent event streams of `/runs/ID/events`, read to the end),
//! alternating, several times. It reports the worker's wall time per step (median of
//! the repetitions; worker start-up is in both arms alike) and the ratio. The
//! followers' updates are counted, to show they were following.

// Benches print for people; only the binary goes through src/out.rs.
#![allow(clippy::disallowed_macros, clippy::disallowed_methods)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Plan {
    steps: u32,
    reps: usize,
    followers: usize,
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick")
        || std::env::var_os("AGENTRUN_BENCH_QUICK").is_some();
    let plan = if quick {
        Plan {
            steps: 50,
            reps: 2,
            followers: 50,
        }
    } else {
        Plan {
            steps: 300,
            reps: 5,
            followers: 50,
        }
    };
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_agentrun"));
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path();
    write_project(p, plan.steps);
    let db = p.join("bench.db");
    let mut serve = Serve::start(&bin, p, &db);
    let cookie = serve.login();
    let (mut alone, mut followed, mut updates) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..plan.reps {
        alone.push(one_run(&bin, p, &db, &serve, &cookie, 0).0);
        let (ms, n) = one_run(&bin, p, &db, &serve, &cookie, plan.followers);
        followed.push(ms);
        updates.push(n as f64);
    }
    let (a, f) = (median(&alone), median(&followed));
    let report = format!(
        "| followers | step (ms, median of {reps}) | ratio |\n| --- | --- | --- |\n\
         | 0 | {a:.3} | 1.00 |\n| {n} | {f:.3} | {r:.2} |\n\n\
         {steps}-step runs; the {n} followers received {u:.0} updates per run (median).\n",
        reps = plan.reps,
        n = plan.followers,
        r = f / a,
        steps = plan.steps,
        u = median(&updates),
    );
    print!("{report}");
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/console-bench.md");
    let _ = std::fs::write(out, &report);
    serve.stop();
}

fn write_project(p: &Path, steps: u32) {
    std::fs::write(
        p.join("tools.toml"),
        "[tools.t]\ndescription = \"t\"\ninput_schema = { type = \"object\" }\n\
         command = [\"sh\", \"-c\", \"cat >/dev/null; echo ok\"]\nidempotent = true\n",
    )
    .expect("tools.toml");
    let mut script = String::from("{\"turns\": [\n");
    for i in 0..steps {
        script.push_str(&format!(
            "{{\"tool_calls\": [{{\"name\": \"t\", \"args\": {{\"i\": {i}}}}}]}},\n"
        ));
    }
    script.push_str("{\"text\": \"done\"}\n]}\n");
    std::fs::write(p.join("script.json"), script).expect("script");
    std::fs::write(
        p.join("task.md"),
        format!(
            "+++\nmodel = \"script:script.json\"\nmax_steps = {}\nmax_tokens = 1000000000000\n+++\nGo.\n",
            steps + 5
        ),
    )
    .expect("task");
}

struct Serve {
    child: Child,
    addr: String,
    /// The one-time login link's path (`/login?code=…`) serve printed.
    login: String,
}

impl Serve {
    fn start(bin: &Path, dir: &Path, db: &Path) -> Serve {
        let mut child = Command::new(bin)
            .current_dir(dir)
            .env("AGENTRUN_DB", db)
            .env_remove("AGENTRUN_SERVE_TOKEN")
            .args(["serve", "--addr", "127.0.0.1:0"])
            .stderr(Stdio::piped())
            .spawn()
            .expect("serve");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let first = lines.next().expect("line").expect("read");
        let addr = first
            .split_whitespace()
            .find_map(|w| w.strip_prefix("http://"))
            .expect("address")
            .trim_end_matches('/')
            .to_string();
        let login = first
            .split_whitespace()
            .find_map(|w| {
                w.split_once("/login?code=")
                    .map(|(_, c)| format!("/login?code={c}"))
            })
            .expect("a login link");
        std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
        Serve { child, addr, login }
    }

    fn login(&self) -> String {
        let head = request(&self.addr, &self.login, None, false).0;
        head.lines()
            .find_map(|l| l.strip_prefix("set-cookie: "))
            .and_then(|v| v.split(';').next())
            .expect("a session cookie")
            .to_string()
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A GET; the head, and (when `body`) the number of `event: update` lines in the body
/// read to its end.
fn request(addr: &str, path: &str, cookie: Option<&str>, body: bool) -> (String, usize) {
    let mut s = TcpStream::connect(addr).expect("connect");
    let cookie = cookie
        .map(|c| format!("Cookie: {c}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{cookie}Connection: close\r\n\r\n"
    )
    .expect("send");
    let mut r = BufReader::new(s);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        head.push_str(&line.to_lowercase());
    }
    if !body {
        return (head, 0);
    }
    let mut text = String::new();
    let _ = r.read_to_string(&mut text);
    (head, text.matches("event: update").count())
}

/// Submits a run, opens `followers` streams of it, drives it with a worker; the
/// worker's wall time per step (ms) and the updates the followers received.
fn one_run(
    bin: &Path,
    dir: &Path,
    db: &Path,
    serve: &Serve,
    cookie: &str,
    followers: usize,
) -> (f64, usize) {
    let out = Command::new(bin)
        .current_dir(dir)
        .env("AGENTRUN_DB", db)
        .args(["submit", "task.md"])
        .output()
        .expect("submit");
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        !id.is_empty(),
        "submit printed no id: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let streams: Vec<_> = (0..followers)
        .map(|_| {
            let (addr, cookie, path) = (
                serve.addr.clone(),
                cookie.to_string(),
                format!("/runs/{id}/events"),
            );
            std::thread::spawn(move || request(&addr, &path, Some(&cookie), true).1)
        })
        .collect();
    // Every follower is connected and has its first update before the run starts.
    std::thread::sleep(Duration::from_millis(if followers > 0 { 500 } else { 0 }));
    let steps = std::fs::read_to_string(dir.join("script.json"))
        .map(|s| s.matches("tool_calls").count())
        .unwrap_or(1)
        .max(1);
    let started = Instant::now();
    let status = Command::new(bin)
        .current_dir(dir)
        .env("AGENTRUN_DB", db)
        .args([
            "--quiet",
            "worker",
            "--until-idle",
            "--concurrency",
            "1",
            "--poll",
            "10ms",
        ])
        .status()
        .expect("worker");
    let wall = started.elapsed();
    assert!(status.success(), "worker failed");
    let updates: usize = streams.into_iter().map(|t| t.join().unwrap_or(0)).sum();
    (wall.as_secs_f64() * 1000.0 / steps as f64, updates)
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}
