//! End-to-end tests of the runnable core through the real binary: start, resume after
//! kill -9, budgets, leases, and bad input.

use crate::common::{Project, transcript};
use serde_json::{Value, json};

/// A command tool that records each call and kills agentrun (its parent) with SIGKILL
/// when its call id matches the one written in `kill_at`.
const KILLER_TOOL: &str = r#"#!/bin/sh
cat > /dev/null
echo "${AGENTRUN_CALL_ID##*:}" >> calls.log
if [ -f kill_at ] && [ "$(cat kill_at)" = "${AGENTRUN_CALL_ID##*:}" ]; then
  rm -f kill_at
  kill -9 "$PPID"
  exit 0
fi
printf '{"call": "%s"}\n' "${AGENTRUN_CALL_ID##*:}"
"#;

const STEP_TOOLS: &str = r#"
[tools.step]
description = "Does one step of work"
input_schema = { type = "object", properties = { i = { type = "integer" } }, required = ["i"] }
command = ["sh", "step.sh"]
idempotent = true
# The tool kills agentrun (its parent) to stand for a crash: a sandboxed tool may not.
sandbox = "off"
"#;

fn fifty_step_project() -> Project {
    let p = Project::new();
    p.script("step.sh", KILLER_TOOL);
    p.write("tools.toml", STEP_TOOLS);
    let mut turns: Vec<Value> = (0..50)
        .map(|i| json!({"tool_calls": [{"name": "step", "args": {"i": i}}], "usage": {"input": 10, "output": 2}}))
        .collect();
    turns.push(json!({"text": "all 50 steps done", "usage": {"input": 10, "output": 3}}));
    p.model_script(json!(turns));
    p.task("max_steps = 60", "Do fifty steps.");
    p
}

#[test]
fn quickstart_example_completes_with_an_answer() {
    let root = env!("CARGO_MANIFEST_DIR");
    let p = Project::new();
    let run = std::process::Command::new(crate::common::bin())
        .current_dir(root)
        .env("AGENTRUN_DB", p.db())
        .args(["start", "examples/quickstart/task.md", "--json"])
        .output()
        .expect("spawn");
    let out = String::from_utf8_lossy(&run.stdout);
    assert_eq!(
        run.status.code(),
        Some(0),
        "{out}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["status"], "completed");
    assert_eq!(v["steps"], 3);
    assert_eq!(v["tokens"], json!({"input": 1630, "output": 102}));
    assert!(
        v["answer"]
            .as_str()
            .unwrap()
            .contains("within 30 days of delivery")
    );
    assert_eq!(v["escalation_id"], Value::Null);
}

#[test]
fn uninterrupted_fifty_step_run_completes() {
    let p = fifty_step_project();
    let v = p.run(&["start", "task.md", "--json"]).expect_code(0).json();
    assert_eq!(
        (v["status"].as_str(), v["steps"].as_u64()),
        (Some("completed"), Some(51))
    );
    assert_eq!(v["answer"], "all 50 steps done");
    let show = p.show(v["run_id"].as_str().unwrap());
    // system + task, then per step an assistant message and a tool result, then the answer.
    assert_eq!(show["messages"].as_array().unwrap().len(), 2 + 50 * 2 + 1);
    assert_eq!(show["tool_calls"].as_array().unwrap().len(), 50);
}

#[test]
fn kill_dash_nine_at_a_random_step_then_resume_matches_an_uninterrupted_run() {
    let reference = fifty_step_project();
    let v = reference
        .run(&["start", "task.md", "--json"])
        .expect_code(0)
        .json();
    let want = transcript(&reference.show(v["run_id"].as_str().unwrap()));

    for seed in [7u64, 1234, 99_991] {
        // A small LCG: deterministic per seed, spread over the 50 tool steps.
        let kill_turn = (seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1) >> 33) % 50;
        let p = fifty_step_project();
        p.write("kill_at", &format!("call_{kill_turn}_0"));
        let killed = p.run(&["start", "task.md", "--json"]);
        assert_eq!(
            killed.code, -1,
            "agentrun should have died by SIGKILL (seed {seed})\n{killed}"
        );
        let id = p.only_run();
        let before = p.show(&id);
        assert_eq!(before["status"], "running", "seed {seed}");
        assert_eq!(
            before["steps"].as_u64(),
            Some(kill_turn),
            "seed {seed}: committed steps"
        );

        let resumed = p.run(&["resume", &id, "--json"]).expect_code(0).json();
        assert_eq!(resumed["status"], "completed", "seed {seed}");
        assert_eq!(resumed["steps"], 51, "seed {seed}");
        assert_eq!(
            transcript(&p.show(&id)),
            want,
            "seed {seed}: transcript differs"
        );
        // Every call ran; only the killed one ran twice (it is idempotent).
        let log = std::fs::read_to_string(p.path().join("calls.log")).unwrap();
        let calls: Vec<&str> = log.lines().collect();
        assert_eq!(calls.len(), 51, "seed {seed}");
        let killed_id = format!("call_{kill_turn}_0");
        assert_eq!(
            calls.iter().filter(|c| **c == killed_id).count(),
            2,
            "seed {seed}"
        );
    }
}

fn looping_project(turns: usize, usage: Value) -> Project {
    let p = Project::new();
    p.script("step.sh", KILLER_TOOL);
    p.write("tools.toml", STEP_TOOLS);
    let mut ts: Vec<Value> = (0..turns)
        .map(|i| json!({"text": format!("working on {i}"), "tool_calls": [{"name": "step", "args": {"i": i}}], "usage": usage}))
        .collect();
    ts.push(json!({"text": "finished", "usage": usage}));
    p.model_script(json!(ts));
    p
}

#[test]
fn step_budget_stops_with_exit_4_and_reports_progress() {
    let p = looping_project(10, json!({"input": 5, "output": 1}));
    p.task("max_steps = 3", "Loop.");
    let run = p.run(&["start", "task.md", "--json"]);
    let v = run.expect_code(4).json();
    assert_eq!(v["status"], "budget_exhausted");
    assert_eq!(v["steps"], 3);
    assert_eq!(
        v["answer"], "working on 2",
        "the last assistant text is reported"
    );
    let show = p.show(v["run_id"].as_str().unwrap());
    assert_eq!(show["status"], "budget_exhausted");
    assert_eq!(show["error"], "step budget spent: 3 of 3 steps used");
    // The guard is not a tool failure: the calls made are all ok, none retried.
    assert!(
        show["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["status"] == "ok" && c["attempts"] == 1)
    );
}

#[test]
fn resume_with_a_higher_budget_continues_to_completion() {
    let p = looping_project(5, json!({"input": 5, "output": 1}));
    p.task("max_steps = 2", "Loop.");
    let id = p.run(&["start", "task.md", "--json"]).expect_code(4).json()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let v = p
        .run(&["resume", &id, "--max-steps", "4", "--json"])
        .expect_code(4)
        .json();
    assert_eq!(v["steps"], 4);
    let v = p
        .run(&["resume", &id, "--max-steps", "10", "--json"])
        .expect_code(0)
        .json();
    assert_eq!(
        (v["status"].as_str(), v["steps"].as_u64()),
        (Some("completed"), Some(6))
    );
    let log = std::fs::read_to_string(p.path().join("calls.log")).unwrap();
    assert_eq!(
        log.lines().count(),
        5,
        "no call repeated across the budget stops"
    );
}

#[test]
fn token_budget_stops_before_the_next_step() {
    let p = looping_project(10, json!({"input": 40, "output": 10}));
    p.task("max_tokens = 120", "Loop.");
    let v = p.run(&["start", "task.md", "--json"]).expect_code(4).json();
    // 50 tokens a step: after 3 steps 150 >= 120, so the 4th never starts.
    assert_eq!(
        (v["steps"].as_u64(), v["tokens"].clone()),
        (Some(3), json!({"input": 120, "output": 30}))
    );
}

#[test]
fn a_budget_of_one_step_stops_after_one_step() {
    // What the model is told about its budget is checked on the wire in
    // tests/providers_e2e.rs (the scripted model's requests are not observable).
    let p = looping_project(3, json!({"input": 1, "output": 1}));
    p.task("max_steps = 1", "Loop.");
    p.run(&["start", "task.md"]).expect_code(4);
}

#[test]
fn two_concurrent_resumes_only_one_proceeds() {
    // The tool blocks while `hold` exists, so the winner is still running when the
    // loser tries.
    let (p, id) = crate::common::blocked_run();
    p.write("hold", "");
    let a = p
        .command(&["resume", &id, "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let b = p
        .command(&["resume", &id, "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The loser exits on its own while the winner is blocked in the tool.
    let (first, second) = wait_first(a, b);
    let lost = String::from_utf8_lossy(&first.stderr).to_string();
    assert_eq!(first.status.code(), Some(2), "{lost}");
    assert!(lost.contains(&format!("run {id} is held by pid")), "{lost}");
    std::fs::remove_file(p.path().join("hold")).unwrap();
    let won = second.wait_with_output().unwrap();
    assert_eq!(
        won.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&won.stderr)
    );
}

/// Waits for whichever child exits first; returns its output and the other child.
fn wait_first(
    mut a: std::process::Child,
    mut b: std::process::Child,
) -> (std::process::Output, std::process::Child) {
    loop {
        if a.try_wait().unwrap().is_some() {
            return (a.wait_with_output().unwrap(), b);
        }
        if b.try_wait().unwrap().is_some() {
            return (b.wait_with_output().unwrap(), a);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn a_run_whose_holder_died_resumes_at_once() {
    let p = fifty_step_project();
    p.write("kill_at", "call_3_0");
    p.run(&["start", "task.md"]);
    let id = p.only_run();
    // The lease still names the dead pid; resume must not wait for it to expire.
    let v = p.run(&["resume", &id, "--json"]).expect_code(0).json();
    assert_eq!(v["status"], "completed");
}

#[test]
fn resume_accepts_a_unique_prefix_and_rejects_unknown_ids() {
    let p = looping_project(1, json!({"input": 1, "output": 1}));
    p.task("max_steps = 1", "Loop.");
    p.run(&["start", "task.md"]).expect_code(4);
    let id = p.only_run();
    p.run(&["resume", &id[..6], "--max-steps", "5"])
        .expect_code(0);
    let r = p.run(&["resume", "zzzz"]);
    r.expect_code(2);
    assert_eq!(
        r.stderr.trim(),
        format!(
            "agentrun: no run `zzzz` in {} (see `agentrun runs list`, or choose another database with --db)",
            p.db().display()
        )
    );
}

/// Polls `cond` until it holds or `secs` pass; a bounded wait on observable state.
fn wait_until(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}

#[test]
fn ctrl_c_checkpoints_exits_130_and_the_run_resumes() {
    let p = Project::new();
    // Signals that it started, then blocks while `hold` exists.
    p.script(
        "slow.sh",
        "#!/bin/sh\ncat > /dev/null\necho \"${AGENTRUN_CALL_ID##*:}\" >> started\nwhile [ -f hold ]; do sleep 0.02; done\necho '\"ok\"'\n",
    );
    p.write(
        "tools.toml",
        "[tools.slow]\ndescription = \"slow\"\ninput_schema = { type = \"object\" }\ncommand = [\"sh\", \"slow.sh\"]\nidempotent = true\n",
    );
    p.model_script(json!([{"tool_calls": [{"name": "fast_enough", "args": {}}]}, {"tool_calls": [{"name": "slow"}]}, {"text": "done"}]));
    p.task("", "Be slow.");
    p.write("hold", "");
    let child = p
        .command(&["start", "task.md", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = p.path().join("started");
    assert!(
        wait_until(30, || started.exists()),
        "the slow tool never started"
    );
    // SAFETY: plain kill(2) on the child we spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        (v["status"].as_str(), v["steps"].as_u64()),
        (Some("interrupted"), Some(1))
    );
    let id = v["run_id"].as_str().unwrap();
    assert_eq!(p.show(id)["status"], "interrupted");
    std::fs::remove_file(p.path().join("hold")).unwrap();
    let v = p.run(&["resume", id, "--json"]).expect_code(0).json();
    assert_eq!(
        (v["status"].as_str(), v["steps"].as_u64()),
        (Some("completed"), Some(3))
    );
}
