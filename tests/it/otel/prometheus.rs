//! A real Prometheus (Debian's `prometheus`) scraping `worker --metrics-addr` while it
//! drains 20 runs answers for runs completed, cost and tool attempts with the values
//! the store holds.

use crate::common::{Project, peer};
use serde_json::{Value, json};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOOLS: &str = r#"
[defaults]
timeout = "5s"
attempts = 3
backoff = "10ms"
max_backoff = "20ms"

[tools.step]
description = "Does one step"
input_schema = { type = "object", properties = {} }
command = ["sh", "-c", "cat > /dev/null; echo '{\"ok\": true}'"]
idempotent = true
"#;

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port")
}

fn query(base: &str, q: &str) -> Option<f64> {
    let url = format!("{base}/api/v1/query?query={}", percent(q));
    let body = super::phoenix::get(&url)?;
    let v: Value = serde_json::from_str(&body).ok()?;
    v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

fn percent(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Polls `q` until it answers `want` (Prometheus scrapes every second), for at most a
/// minute; the last answer.
fn settle(base: &str, q: &str, want: f64) -> Option<f64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = query(base, q);
        if got.is_some_and(|g| (g - want).abs() < 1e-9) || Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn prometheus_scraping_a_worker_sees_its_runs_cost_and_tool_attempts() {
    let Some(prometheus) = peer::available(
        "Prometheus",
        "run .ci/run, or `apt-get install prometheus`",
        || peer::on_path("prometheus"),
    ) else {
        return;
    };
    let p = Project::new();
    p.write("tools.toml", TOOLS);
    p.model_script(json!([
        {"tool_calls": [{"name": "step", "args": {}}], "usage": {"input": 1000, "output": 100}},
        {"text": "done", "usage": {"input": 2000, "output": 50}}
    ]));
    p.task(
        "max_steps = 4\nprice = { input = 3, output = 15 }",
        "Do one step.",
    );
    for _ in 0..20 {
        p.run(&["submit", "task.md", "--json"]).expect_code(0);
    }
    let port = free_port();
    let worker = Killed(
        p.command(&[
            "worker",
            "--concurrency",
            "4",
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("worker"),
    );
    let web = free_port();
    let config = p.write(
        "prometheus.yml",
        &format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: agentrun\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        ),
    );
    let prom = Killed(
        Command::new(prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                p.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{web}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus"),
    );
    let base = format!("http://127.0.0.1:{web}");

    let completed = settle(
        &base,
        r#"sum(agentrun_runs_ended_total{status="completed"})"#,
        20.0,
    );
    assert_eq!(completed, Some(20.0));
    let runs = p.run(&["runs", "list", "--json"]).expect_code(0).json();
    let runs = runs.as_array().expect("runs").clone();
    assert_eq!(runs.len(), 20);
    let cost: f64 = runs
        .iter()
        .map(|r| {
            p.show(r["id"].as_str().unwrap())["cost_usd"]
                .as_f64()
                .unwrap()
        })
        .sum();
    // 3,000 input and 150 output tokens a run, at $3 and $15 per million.
    assert!(
        (cost - 20.0 * (3000.0 * 3.0 + 150.0 * 15.0) / 1e6).abs() < 1e-9,
        "{cost}"
    );
    let got = settle(&base, "sum(agentrun_cost_usd_total)", cost).expect("cost");
    assert!((got - cost).abs() < 1e-9, "{got} vs {cost}");
    let attempts = settle(
        &base,
        r#"sum(agentrun_tool_attempts_total{tool="step",error_class="none"})"#,
        20.0,
    );
    assert_eq!(attempts, Some(20.0));
    assert_eq!(settle(&base, "sum(agentrun_steps_total)", 40.0), Some(40.0));
    drop((prom, worker));
}
