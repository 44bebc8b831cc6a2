//! Parallel tool calls (issue 14), through the binary with real command tools: the
//! independent calls of one turn run at the same time (shown by overlap, not by the
//! clock: every call starts before any ends), identical calls still run one after the
//! other, the transcript keeps the model's order, and a crash in the middle of a batch
//! resumes re-running only the idempotent calls that had not finished, while a
//! non-idempotent one that had started becomes `outcome_unknown`.

use crate::common::{Project, tool_result};
use serde_json::{Value, json};

/// `barrier N`: logs its start, waits (bounded) until N calls have started, logs its
/// end. Run one by one, the first call would wait out its bound alone and end before
/// the second started.
const BARRIER: &str = r#"#!/bin/sh
cat > /dev/null
id=${AGENTRUN_CALL_ID##*:}
echo "start $id" >> marks.log
touch "started.$id"
i=0
while [ "$(ls started.* | wc -l)" -lt "$1" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
echo "end $id" >> marks.log
printf '{"call": "%s"}\n' "$id"
"#;

fn project(tools: &str, script: Value) -> Project {
    let p = Project::new();
    p.script("barrier.sh", BARRIER);
    p.script("effect.sh", EFFECT);
    p.write("tools.toml", tools);
    p.model_script(script);
    p.task("max_steps = 5", "Do the work.");
    p
}

fn turn(calls: Vec<Value>) -> Value {
    json!({"tool_calls": calls, "usage": {"input": 10, "output": 2}})
}

fn answer() -> Value {
    json!({"text": "all done", "usage": {"input": 10, "output": 3}})
}

fn marks(p: &Project) -> Vec<String> {
    std::fs::read_to_string(p.path().join("marks.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn eight_independent_calls_all_start_before_any_ends() {
    let tools = r#"
[tools.slow]
description = "A slow lookup"
input_schema = { type = "object" }
command = ["sh", "barrier.sh", "8"]
idempotent = true
"#;
    let calls = (0..8)
        .map(|i| json!({"name": "slow", "args": {"q": i}}))
        .collect();
    let p = project(tools, json!([turn(calls), answer()]));
    let v = p.run(&["start", "task.md", "--json"]).expect_code(0).json();
    let log = marks(&p);
    let first_end = log.iter().position(|l| l.starts_with("end"));
    let starts = log.iter().filter(|l| l.starts_with("start")).count();
    assert_eq!(
        (starts, first_end),
        (8, Some(8)),
        "every call starts before any ends: {log:#?}"
    );
    // The transcript keeps the model's order, each result with its own call.
    let show = p.show(v["run_id"].as_str().expect("run_id"));
    let order: Vec<String> = show["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .flat_map(|m| m["content"].as_array().expect("content").iter())
        .filter(|p| p["type"] == "tool_result")
        .map(|p| p["call_id"].as_str().expect("call_id").to_string())
        .collect();
    let want: Vec<String> = (0..8).map(|i| format!("call_0_{i}")).collect();
    assert_eq!(order, want);
    for id in &want {
        assert_eq!(tool_result(&show, id), (json!({"call": id}), false));
    }
}

#[test]
fn identical_calls_run_one_after_the_other() {
    // One by one: each logs its start and its end before the next starts.
    let tools = r#"
[tools.quick]
description = "A quick lookup"
input_schema = { type = "object" }
command = ["sh", "effect.sh"]
idempotent = true
"#;
    let p = project(
        tools,
        json!([
            turn(vec![
                json!({"name": "quick", "args": {"q": 1}}),
                json!({"name": "quick", "args": {"q": 1}}),
            ]),
            answer()
        ]),
    );
    p.run(&["start", "task.md", "--json"]).expect_code(0);
    assert_eq!(
        marks(&p),
        vec![
            "effect start call_0_0",
            "effect end call_0_0",
            "effect start call_0_1",
            "effect end call_0_1"
        ]
    );
}

/// `effect.sh`: logs its start and end around its answer; with `WAIT_FOR` set, waits
/// (bounded) first until those calls have logged their start; with `RELEASE`, waits
/// (bounded) after its start until the file `release` exists.
const EFFECT: &str = r#"#!/bin/sh
cat > /dev/null
id=${AGENTRUN_CALL_ID##*:}
i=0
for w in $WAIT_FOR; do
  while [ ! -e "started.$w" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
done
echo "effect start $id" >> marks.log
touch "started.$id"
if [ -n "$RELEASE" ]; then
  while [ ! -e release ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done
fi
echo "effect end $id" >> marks.log
printf '{"call": "%s"}\n' "$id"
"#;

#[test]
fn a_crash_mid_batch_reruns_only_unfinished_idempotent_calls() {
    // call_0_0 slow idempotent, call_0_1 quick idempotent, call_0_2 slow
    // non-idempotent, call_0_3 quick non-idempotent. The quick ones wait until both
    // slow ones have begun their effect, then finish and are journaled as they
    // arrive; the process dies after the second of those journal writes, while the
    // slow ones still run.
    let tools = r#"
[tools.slow_idem]
description = "slow, idempotent"
input_schema = { type = "object" }
command = ["sh", "effect.sh"]
set = { RELEASE = "1" }
timeout = "30s"
idempotent = true

[tools.quick_idem]
description = "quick, idempotent"
input_schema = { type = "object" }
command = ["sh", "effect.sh"]
set = { WAIT_FOR = "call_0_0 call_0_2" }
timeout = "30s"
idempotent = true

[tools.slow_once]
description = "slow, must not repeat"
input_schema = { type = "object" }
command = ["sh", "effect.sh"]
set = { RELEASE = "1" }
timeout = "30s"
on_unknown = "tell_model"

[tools.quick_once]
description = "quick, must not repeat"
input_schema = { type = "object" }
command = ["sh", "effect.sh"]
set = { WAIT_FOR = "call_0_0 call_0_2" }
timeout = "30s"
"#;
    let calls = ["slow_idem", "quick_idem", "slow_once", "quick_once"]
        .iter()
        .enumerate()
        .map(|(i, name)| json!({"name": name, "args": {"i": i}}))
        .collect();
    let p = project(tools, json!([turn(calls), answer()]));
    let crashed = p.run_env(
        &["start", "task.md", "--json"],
        &[("AGENTRUN_CRASH_AT", "after_tool_outcome:2")],
    );
    assert_eq!(crashed.code, -1, "agentrun should have aborted\n{crashed}");
    // The slow calls the dead process started finish their effect now.
    p.write("release", "");
    let id = p.only_run();
    let v = p.run(&["resume", &id, "--json"]).expect_code(0).json();
    assert_eq!(v["status"], "completed");

    let show = p.show(&id);
    let ok = |id: &str| (json!({"call": id}), false);
    assert_eq!(tool_result(&show, "call_0_0"), ok("call_0_0"));
    assert_eq!(tool_result(&show, "call_0_1"), ok("call_0_1"));
    assert_eq!(tool_result(&show, "call_0_3"), ok("call_0_3"));
    let (unknown, is_error) = tool_result(&show, "call_0_2");
    assert_eq!(
        (unknown["error"].as_str(), is_error),
        (Some("outcome_unknown"), true)
    );

    // Effects begun: the unfinished idempotent call twice (before the crash and on
    // resume); every other call once — the finished ones were reused, the started
    // non-idempotent one was not run again.
    let log = marks(&p);
    let begun = |id: &str| {
        log.iter()
            .filter(|l| **l == format!("effect start {id}"))
            .count()
    };
    assert_eq!(
        ["call_0_0", "call_0_1", "call_0_2", "call_0_3"].map(begun),
        [2, 1, 1, 1],
        "{log:#?}"
    );
}
