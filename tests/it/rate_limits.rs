//! Shared rate limits (docs/rate-limits.md) through the real binary: two worker
//! processes drive 200 runs against a fixture provider that enforces 60 requests and
//! 40,000 tokens per window and refuses beyond them (429, `Retry-After`), and a
//! command tool with `max_concurrent = 2` is counted by a real server across both
//! workers.
//!
//! **Scaled time.** The limits' `window` is three seconds here instead of a minute: the
//! code path is the one a minute takes (the window is a number in the schedule), and
//! the fixture's limits are per the same window. The long version, and the
//! same test without limits for comparison, is the bench `rate_limits_bench`
//! (docs/bench.md, "Rate limits").
//!
//! The fixture provider answers as OpenAI does (bodies of the recorded fixtures in
//! `tests/fixtures/providers/openai/`: a tool call, then a final answer; a 429 with
//! the recorded rate-limit error body and `retry-after-ms` / `Retry-After`), and
//! charges each request its prompt (bytes / 4) plus its completion against token
//! buckets that refill continuously, as OpenAI's do.

use crate::common::{Db, Project};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The scaled minute: long enough that a loaded test machine keeps up with 60
/// requests in it.
const WINDOW: Duration = Duration::from_secs(3);
const RPM: f64 = 60.0;
const TPM: f64 = 40_000.0;
const COMPLETION_TOKENS: u64 = 20;

/// What the fixture provider saw.
#[derive(Default)]
struct Seen {
    accepted: Vec<Instant>,
    refused: Vec<Instant>,
    /// When each tool call id was handed out, and when its result came back.
    call_sent: HashMap<String, Instant>,
    call_back: Vec<Duration>,
}

struct Buckets {
    requests: f64,
    tokens: f64,
    at: Instant,
}

impl Buckets {
    /// Takes one request of `tokens`, or says how long until it could.
    fn take(&mut self, tokens: f64) -> Result<(), Duration> {
        let now = Instant::now();
        let dt = now.duration_since(self.at).as_secs_f64() / WINDOW.as_secs_f64();
        self.requests = (self.requests + dt * RPM).min(RPM);
        self.tokens = (self.tokens + dt * TPM).min(TPM);
        self.at = now;
        if self.requests >= 1.0 && self.tokens >= tokens {
            self.requests -= 1.0;
            self.tokens -= tokens;
            return Ok(());
        }
        let need_r = (1.0 - self.requests).max(0.0) / RPM;
        let need_t = (tokens - self.tokens).max(0.0) / TPM;
        Err(WINDOW.mul_f64(need_r.max(need_t)))
    }
}

struct Provider {
    url: String,
    seen: Arc<Mutex<Seen>>,
}

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/providers/openai/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).expect("fixture");
    serde_json::from_str(&text).expect("fixture json")
}

/// Starts the fixture provider on a free port; it serves until the test process ends.
fn provider() -> Provider {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/v1", listener.local_addr().expect("addr"));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let buckets = Arc::new(Mutex::new(Buckets {
        requests: RPM,
        tokens: TPM,
        at: Instant::now(),
    }));
    let call = fixture("01_single_tool_call")["response"]["body"].clone();
    let answer = fixture("03_tool_results_final_answer")["response"]["body"].clone();
    let refusal = fixture("14_error_429_rate_limit_tokens")["response"]["body"].clone();
    let bodies = Arc::new((call, answer, refusal));
    let s = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let (seen, buckets, bodies) = (s.clone(), buckets.clone(), bodies.clone());
            std::thread::spawn(move || serve(conn, &seen, &buckets, &bodies));
        }
    });
    Provider { url, seen }
}

/// One keep-alive connection: requests until the client closes it.
fn serve(
    conn: TcpStream,
    seen: &Mutex<Seen>,
    buckets: &Mutex<Buckets>,
    bodies: &(Value, Value, Value),
) {
    let mut reader = BufReader::new(conn.try_clone().expect("clone"));
    let mut out = conn;
    loop {
        let mut len = 0usize;
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let (status, headers, reply) = answer(&body, seen, buckets, bodies);
        let reply = reply.to_string();
        let head = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{headers}\r\n",
            reply.len()
        );
        if out.write_all(head.as_bytes()).is_err() || out.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

fn answer(
    body: &[u8],
    seen: &Mutex<Seen>,
    buckets: &Mutex<Buckets>,
    (call, final_answer, refusal): &(Value, Value, Value),
) -> (&'static str, String, Value) {
    let prompt = (body.len() as u64).div_ceil(4);
    let taken = buckets
        .lock()
        .unwrap()
        .take((prompt + COMPLETION_TOKENS) as f64);
    let now = Instant::now();
    let mut seen = seen.lock().unwrap();
    if let Err(wait) = taken {
        seen.refused.push(now);
        let ms = wait.as_millis().max(1);
        let headers = format!(
            "retry-after-ms: {ms}\r\nretry-after: {}\r\nx-ratelimit-limit-requests: {RPM}\r\n",
            ms.div_ceil(1000)
        );
        return ("429 Too Many Requests", headers, refusal.clone());
    }
    seen.accepted.push(now);
    let req: Value = serde_json::from_slice(body).unwrap_or_default();
    let answered = req["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|m| m["tool_call_id"].as_str().map(String::from));
    let mut reply = match answered {
        Some(id) => {
            if let Some(sent) = seen.call_sent.get(&id) {
                let d = now.duration_since(*sent);
                seen.call_back.push(d);
            }
            final_answer.clone()
        }
        None => {
            let id = format!("call_{}", seen.accepted.len());
            seen.call_sent.insert(id.clone(), now);
            let mut c = call.clone();
            c["choices"][0]["message"]["tool_calls"][0]["id"] = json!(id);
            c
        }
    };
    reply["usage"]["prompt_tokens"] = json!(prompt);
    reply["usage"]["completion_tokens"] = json!(COMPLETION_TOKENS);
    reply["usage"]["total_tokens"] = json!(prompt + COMPLETION_TOKENS);
    ("200 OK", String::new(), reply)
}

/// `[models."openai:fixture"]` with the provider's limits, or none.
fn project(db: &Db, governed: bool) -> Project {
    let p = Project::on(db);
    p.script("lookup.sh", "#!/bin/sh\ncat > /dev/null\necho '\"1000\"'\n");
    let limits = if governed {
        "[models.\"openai:fixture\"]\nrpm = 60\ntpm = 40000\nwindow = \"3s\"\n"
    } else {
        ""
    };
    p.write(
        "tools.toml",
        &format!(
            "{limits}\n[tools.lookup_population]\ndescription = \"population\"\n\
             input_schema = {{ type = \"object\" }}\ncommand = [\"sh\", \"lookup.sh\"]\n\
             idempotent = true\nsandbox = \"off\"\n"
        ),
    );
    p.write(
        "task.md",
        "+++\nmodel = \"openai:fixture\"\nmax_steps = 5\nmax_output_tokens = 64\n+++\nHow many people live in Crumpet?\n",
    );
    p
}

fn worker(p: &Project, name: &str, url: &str, concurrency: &str) -> Child {
    p.command(&[
        "worker",
        "--name",
        name,
        "--concurrency",
        concurrency,
        "--until-idle",
        "--poll",
        "20ms",
    ])
    .env("OPENAI_BASE_URL", url)
    .env("OPENAI_API_KEY", "sk-fixture")
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn worker")
}

/// What one load of runs did against the fixture provider.
#[derive(Debug)]
pub struct Report {
    pub runs: usize,
    pub completed: usize,
    pub accepted: usize,
    pub refused: usize,
    /// Refusals after the first window.
    pub refused_late: usize,
    /// Accepted requests per window over the time runs waited, as a share of the limit.
    pub use_share: f64,
    /// The longest and median time from a run's tool call to its next request.
    pub longest_wait: Duration,
    pub median_wait: Duration,
    pub elapsed: Duration,
}

/// Submits `runs` runs and drains them with two workers.
pub fn load(db: &Db, runs: usize, governed: bool) -> Report {
    let server = provider();
    let p = project(db, governed);
    let submitted: Vec<_> = (0..runs)
        .map(|_| {
            p.run_env(
                &["submit", "task.md", "--json"],
                &[
                    ("OPENAI_BASE_URL", &server.url),
                    ("OPENAI_API_KEY", "sk-fixture"),
                ],
            )
            .expect_code(0)
            .json()
        })
        .collect();
    assert_eq!(submitted.len(), runs);
    let per = (runs / 2).max(1).to_string();
    let began = Instant::now();
    let workers = [
        worker(&p, "w-a", &server.url, &per),
        worker(&p, "w-b", &server.url, &per),
    ];
    for w in workers {
        let out = w.wait_with_output().expect("worker");
        assert!(
            out.status.success(),
            "worker failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let elapsed = began.elapsed();
    let list = p.run(&["runs", "list", "--json"]).expect_code(0).json();
    let completed = list
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["status"] == "completed")
        .count();
    let seen = server.seen.lock().unwrap();
    report(&seen, runs, completed, elapsed)
}

fn report(seen: &Seen, runs: usize, completed: usize, elapsed: Duration) -> Report {
    let first = seen.accepted.iter().chain(&seen.refused).min().copied();
    let last = seen.accepted.iter().max().copied();
    let refused_late = first.map_or(0, |f| {
        seen.refused
            .iter()
            .filter(|t| t.duration_since(f) > WINDOW)
            .count()
    });
    // The time runs waited: after the first window, until the last window.
    let use_share = match (first, last) {
        (Some(f), Some(l)) if l.duration_since(f) > WINDOW * 3 => {
            let (from, to) = (f + WINDOW, l - WINDOW);
            let n = seen
                .accepted
                .iter()
                .filter(|t| **t >= from && **t <= to)
                .count();
            n as f64 / (to.duration_since(from).as_secs_f64() / WINDOW.as_secs_f64() * RPM)
        }
        _ => 0.0,
    };
    let mut waits = seen.call_back.clone();
    waits.sort();
    Report {
        runs,
        completed,
        accepted: seen.accepted.len(),
        refused: seen.refused.len(),
        refused_late,
        use_share,
        longest_wait: waits.last().copied().unwrap_or_default(),
        median_wait: waits.get(waits.len() / 2).copied().unwrap_or_default(),
        elapsed,
    }
}

/// `use_floor`: the share of the limit the key must be used at while runs wait. On
/// PostgreSQL the share depends on how fast the server takes 200 runs' writes on the
/// machine at hand (42% measured on a loaded 2-core VM, where the workers themselves
/// fell behind); it is reported there, not asserted.
pub fn two_hundred_runs_share_one_key(db: &Db, use_floor: f64) {
    let r = load(db, 200, true);
    eprintln!("{r:?}");
    assert_eq!(r.completed, 200, "{r:?}");
    assert!(
        r.refused_late as f64 <= 0.01 * r.accepted as f64,
        "at most 1% refused after the first window: {r:?}"
    );
    assert!(
        r.use_share >= use_floor,
        "the key's use while runs wait: {r:?}"
    );
    assert!(
        r.longest_wait <= r.median_wait * 3,
        "the longest wait within 3x the median: {r:?}"
    );
}

#[test]
fn two_hundred_runs_on_two_workers_share_one_key_without_refusals() {
    two_hundred_runs_share_one_key(&Db::Sqlite, 0.85);
}

#[test]
fn two_hundred_runs_on_two_workers_share_one_key_on_postgresql() {
    let Some(db) = crate::pg::pg_or_say() else {
        return;
    };
    two_hundred_runs_share_one_key(&db, 0.0);
}

/// The bench (docs/bench.md, "Rate limits"): the same load with and without limits,
/// side by side. `cargo test --release --test it rate_limits_bench -- --ignored --nocapture`.
#[test]
#[ignore]
fn rate_limits_bench() {
    let runs: usize = std::env::var("RATE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    println!(
        "| limits | runs | completed | accepted | refused | refused after 1st window | use | median wait | longest wait | wall |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for governed in [false, true] {
        let r = load(&Db::Sqlite, runs, governed);
        println!(
            "| {} | {} | {} | {} | {} | {} | {:.0}% | {:.2} s | {:.2} s | {:.1} s |",
            if governed { "rpm/tpm set" } else { "none" },
            r.runs,
            r.completed,
            r.accepted,
            r.refused,
            r.refused_late,
            r.use_share * 100.0,
            r.median_wait.as_secs_f64(),
            r.longest_wait.as_secs_f64(),
            r.elapsed.as_secs_f64()
        );
    }
}

/// A counting server: each connection is one call in flight until it closes.
struct Counter {
    port: u16,
    /// (in flight now, most in flight ever, calls in all)
    counts: Arc<Mutex<(u32, u32, u32)>>,
}

fn counter() -> Counter {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let counts = Arc::new(Mutex::new((0, 0, 0)));
    let c = counts.clone();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            {
                let mut n = c.lock().unwrap();
                n.0 += 1;
                n.1 = n.1.max(n.0);
                n.2 += 1;
            }
            let c = c.clone();
            std::thread::spawn(move || {
                let mut sink = Vec::new();
                let _ = conn.read_to_end(&mut sink);
                c.lock().unwrap().0 -= 1;
            });
        }
    });
    Counter { port, counts }
}

/// A project whose runs each call `tool` twice in one turn, then answer.
fn tool_project(tools: &str, call: &str) -> Project {
    let p = Project::new();
    p.write("tools.toml", tools);
    p.model_script(json!([
        {"tool_calls": [{"name": call, "args": {}}, {"name": call, "args": {}}]},
        {"text": "done"}
    ]));
    p.task("max_steps = 5", "Call it.");
    p
}

/// Workers with a short lease, so a killed one's places come free in seconds; not
/// shorter, or a loaded test machine delays heartbeats past it.
fn script_worker(p: &Project, name: &str, extra: &[&str]) -> Child {
    let mut args = vec![
        "worker",
        "--name",
        name,
        "--lease-ttl",
        "3s",
        "--poll",
        "20ms",
    ];
    args.extend_from_slice(extra);
    p.command(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn worker")
}

/// Waits for a worker to exit, for at most 120 s (a leaked slot would hang it).
fn exits(mut child: Child, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            assert!(status.success(), "{what}: {err}");
            return;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what}: still running after 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn limits_json(p: &Project) -> Value {
    p.run(&["limits", "--json"]).expect_code(0).json()
}

#[test]
fn a_command_tool_with_max_concurrent_2_never_has_more_in_flight_across_two_workers() {
    let server = counter();
    let tools = format!(
        "[tools.count]\ndescription = \"count\"\ninput_schema = {{ type = \"object\" }}\n\
         command = [\"python3\", \"-c\", \"import socket,time; s=socket.create_connection(('127.0.0.1', {})); time.sleep(0.1); s.close(); print('1')\"]\n\
         idempotent = true\nsandbox = \"off\"\nmax_concurrent = 2\n",
        server.port
    );
    let p = tool_project(&tools, "count");
    for _ in 0..12 {
        p.run(&["submit", "task.md"]).expect_code(0);
    }
    let a = script_worker(&p, "w-a", &["--concurrency", "6", "--until-idle"]);
    let b = script_worker(&p, "w-b", &["--concurrency", "6", "--until-idle"]);
    exits(a, "worker w-a");
    exits(b, "worker w-b");
    let (now, most, calls) = *server.counts.lock().unwrap();
    assert_eq!((now, calls), (0, 24));
    assert_eq!(
        most, 2,
        "never more than 2 in flight, and the limit was used"
    );
    let keys = limits_json(&p);
    assert_eq!(keys[0]["label"], "count");
    assert_eq!(
        (keys[0]["in_flight"].as_u64(), keys[0]["waiting"].as_u64()),
        (Some(0), Some(0))
    );
}

#[test]
fn a_killed_workers_slots_come_free_with_its_leases() {
    let tools = "[tools.block]\ndescription = \"block\"\ninput_schema = { type = \"object\" }\n\
         command = [\"sh\", \"block.sh\"]\nidempotent = true\nsandbox = \"off\"\nmax_concurrent = 1\n";
    let p = tool_project(tools, "block");
    p.model_script(json!([
        {"tool_calls": [{"name": "block", "args": {}}]},
        {"text": "done"}
    ]));
    p.script(
        "block.sh",
        "#!/bin/sh\ncat > /dev/null\ntouch \"started.$AGENTRUN_CALL_ID\"\nwhile [ -f hold ]; do sleep 0.02; done\necho '\"ok\"'\n",
    );
    p.write("hold", "");
    // Two runs: one's call takes the only slot, the other's waits for it.
    p.run(&["submit", "task.md"]).expect_code(0);
    p.run(&["submit", "task.md"]).expect_code(0);
    let mut a = script_worker(&p, "w-a", &["--concurrency", "2"]);
    let started = || {
        std::fs::read_dir(p.path())
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("started."))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while started() == 0 {
        assert!(Instant::now() < deadline, "no call started");
        std::thread::sleep(Duration::from_millis(10));
    }
    // One call holds the only slot; the other run's call comes to wait for it.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let keys = limits_json(&p);
        let seen = (keys[0]["in_flight"].as_u64(), keys[0]["waiting"].as_u64());
        if seen == (Some(1), Some(1)) {
            break;
        }
        assert_eq!(seen.0, Some(1), "{keys}");
        assert!(
            Instant::now() < deadline,
            "the second call never waited: {keys}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    a.kill().expect("kill -9 the worker");
    let _ = a.wait();
    std::fs::remove_file(p.path().join("hold")).expect("let calls finish");
    // A new worker takes the run over after the lease TTL; the dead worker's slot
    // must have come free with its lease, or its calls would wait forever.
    let b = script_worker(&p, "w-b", &["--concurrency", "2", "--until-idle"]);
    exits(b, "worker w-b");
    let list = p.run(&["runs", "list", "--json"]).expect_code(0).json();
    let done = list
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["status"] == "completed");
    assert_eq!(done.count(), 2, "{list}");
    let keys = limits_json(&p);
    assert_eq!(
        (keys[0]["in_flight"].as_u64(), keys[0]["waiting"].as_u64()),
        (Some(0), Some(0)),
        "{keys}"
    );
}
