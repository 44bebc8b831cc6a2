//! Golden outputs of the contract commands on every example (issue 11): the JSON of
//! `start --json`, `escalations show --json`, `resume --json` and `runs show --json`
//! stays identical, byte for byte, once run ids, wall-clock times and measured or
//! jittered durations are normalised.
//!
//! The goldens live in `tests/fixtures/golden/`. To write them again after an
//! intended change of a contract output, run with `AGENTRUN_BLESS=1` and review the diff.

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

/// Keys whose values depend on the wall clock, on measured time or on jitter.
const VARYING: [&str; 9] = [
    "at",
    "created_at",
    "updated_at",
    "resolved_at",
    "elapsed_ms",
    "delay_ms",
    "duration_ms",
    "wall_ms",
    "driven_ms",
];

struct Session {
    db: tempfile::TempDir,
    /// Every command's output, in order, normalised.
    log: Vec<String>,
    run_id: String,
}

impl Session {
    fn new() -> Session {
        Session {
            db: tempfile::tempdir().expect("tempdir"),
            log: Vec::new(),
            run_id: String::new(),
        }
    }

    fn run(&mut self, args: &[&str]) -> (i32, Value) {
        let out = Command::new(crate::common::bin())
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("AGENTRUN_DB", self.db.path().join("golden.db"))
            .env("USER", "golden")
            .args(args)
            .arg("--json")
            .output()
            .expect("spawn agentrun");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let code = out.status.code().unwrap_or(-1);
        let v: Value = serde_json::from_str(&stdout).unwrap_or(Value::Null);
        if self.run_id.is_empty()
            && let Some(id) = v["run_id"].as_str()
        {
            self.run_id = id.to_string();
        }
        let shown = if v.is_null() {
            stdout
        } else {
            Session::normalise(&v)
        };
        let entry = format!(
            "$ agentrun {} --json\nexit {code}\n{shown}\n",
            args.join(" ")
        );
        let entry = match self.run_id.as_str() {
            "" => entry,
            id => entry.replace(id, "<run>"),
        };
        self.log.push(entry);
        (code, v)
    }

    fn normalise(v: &Value) -> String {
        let mut v = v.clone();
        scrub(&mut v);
        serde_json::to_string_pretty(&v).expect("json")
    }
}

fn scrub(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (k, val) in map.iter_mut() {
                if VARYING.contains(&k.as_str()) && !val.is_null() {
                    *val = Value::String("<varies>".into());
                } else {
                    scrub(val);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(scrub),
        _ => {}
    }
}

/// What a person answers for each kind of escalation in the examples.
fn decision(kind: &str) -> Vec<&'static str> {
    match kind {
        "approval_required" => vec!["--approve"],
        _ => vec!["--reply", "the service is down until 14:00"],
    }
}

/// Start the example, then resolve and resume while it waits for a person (at most
/// three times), then show the run.
fn transcript(example: &str) -> String {
    let mut s = Session::new();
    let (mut code, mut v) = s.run(&["start", &format!("examples/{example}/task.md")]);
    for _ in 0..3 {
        if code != 3 {
            break;
        }
        let esc = v["escalation_id"]
            .as_str()
            .expect("escalation id")
            .to_string();
        let (_, e) = s.run(&["escalations", "show", &esc]);
        let kind = e["kind"].as_str().unwrap_or_default().to_string();
        let mut args = vec!["escalations", "resolve", esc.as_str()];
        args.extend(decision(&kind));
        s.run(&args);
        s.run(&["escalations", "show", &esc]);
        let run = s.run_id.clone();
        (code, v) = s.run(&["resume", &run]);
    }
    let run = s.run_id.clone();
    s.run(&["runs", "show", &run]);
    s.log.join("\n")
}

fn check(example: &str) {
    let got = transcript(example);
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/golden")
        .join(format!("{example}.txt"));
    if std::env::var_os("AGENTRUN_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with AGENTRUN_BLESS=1)", path.display()));
    if got != want {
        let line = got
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        panic!(
            "{example}: output differs from {} at line {}\n--- got\n{}\n--- want\n{}",
            path.display(),
            line + 1,
            got.lines().nth(line).unwrap_or("<end>"),
            want.lines().nth(line).unwrap_or("<end>"),
        );
    }
}

#[test]
fn approval_json_is_unchanged() {
    check("approval");
}

#[test]
fn breaker_json_is_unchanged() {
    check("breaker");
}

#[test]
fn invalid_args_json_is_unchanged() {
    check("invalid-args");
}

#[test]
fn outage_json_is_unchanged() {
    check("outage");
}

#[test]
fn permission_json_is_unchanged() {
    check("permission");
}

#[test]
fn quickstart_json_is_unchanged() {
    check("quickstart");
}

#[test]
fn stuck_json_is_unchanged() {
    check("stuck");
}

#[test]
fn transient_json_is_unchanged() {
    check("transient");
}
