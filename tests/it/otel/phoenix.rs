//! Arize Phoenix (PyPI `arize-phoenix`) as the OTLP receiver the trace tests send to:
//! one server per test binary, on loopback ports of its own, with a temporary working
//! folder; each test reads back its spans from Phoenix's REST API under a project name
//! of its own (`openinference.project.name`).

use crate::common::peer;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub struct Phoenix {
    pub base: String,
}

/// Where `.ci/run` installs it (a virtual environment in the repository), else `PATH`.
fn program() -> Option<PathBuf> {
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".otel-peers/phoenix/bin/phoenix");
    venv.is_file()
        .then_some(venv)
        .or_else(|| peer::on_path("phoenix"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// The shared server, started on first use; `None` (the test skips) when Phoenix is
/// not installed.
pub fn phoenix() -> Option<&'static Phoenix> {
    static SERVER: OnceLock<Option<Phoenix>> = OnceLock::new();
    let found = SERVER.get_or_init(|| program().map(start)).as_ref();
    peer::available(
        "Arize Phoenix",
        "run .ci/run, or `python3 -m venv .otel-peers/phoenix && .otel-peers/phoenix/bin/pip install arize-phoenix`",
        || found,
    )
}

fn start(program: PathBuf) -> Phoenix {
    let (port, grpc) = (free_port(), free_port());
    let dir = tempfile::tempdir().expect("tempdir").keep();
    let log = std::fs::File::create(dir.join("phoenix.log")).expect("log file");
    // Started from a thread that never ends, so the server dies with the test binary
    // (PR_SET_PDEATHSIG follows the thread that spawned it).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(&program);
        cmd.arg("serve")
            .env("PHOENIX_WORKING_DIR", &dir)
            .env("PHOENIX_HOST", "127.0.0.1")
            .env("PHOENIX_PORT", port.to_string())
            .env("PHOENIX_GRPC_PORT", grpc.to_string())
            .env("PHOENIX_TELEMETRY_ENABLED", "false")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd.spawn();
        let _ = tx.send(child.map(|c| c.id()));
        loop {
            std::thread::park();
        }
    });
    rx.recv().expect("spawner").expect("start phoenix");
    let base = format!("http://127.0.0.1:{port}");
    // Its first start migrates a fresh database: slow on a loaded machine.
    let deadline = Instant::now() + Duration::from_secs(300);
    while get(&format!("{base}/healthz")).is_none() {
        assert!(
            Instant::now() < deadline,
            "Phoenix did not come up at {base}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    Phoenix { base }
}

/// A GET on loopback, its body when the answer was 200.
pub fn get(url: &str) -> Option<String> {
    crate::common::wait(async {
        let r = reqwest::get(url).await.ok()?;
        if !r.status().is_success() {
            return None;
        }
        r.text().await.ok()
    })
}

impl Phoenix {
    /// `OTEL_*` for a run that sends to this server, into `project`.
    pub fn env(&self, project: &str) -> Vec<(&'static str, String)> {
        vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", self.base.clone()),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                format!("openinference.project.name={project}"),
            ),
            ("OTEL_BSP_SCHEDULE_DELAY", "50".into()),
        ]
    }

    /// Every span Phoenix holds for `project`.
    pub fn spans(&self, project: &str) -> Vec<Value> {
        let url = format!("{}/v1/projects/{project}/spans?limit=1000", self.base);
        let Some(body) = get(&url) else {
            return Vec::new();
        };
        let v: Value = serde_json::from_str(&body).expect("Phoenix answers JSON");
        v["data"].as_array().cloned().unwrap_or_default()
    }

    /// The spans of `project` once `done` holds of them (Phoenix ingests in the
    /// background, slowly on a loaded machine), polling for at most three minutes.
    pub fn spans_when(&self, project: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let spans = self.spans(project);
            if done(&spans) || Instant::now() > deadline {
                return spans;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}
