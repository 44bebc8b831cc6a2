//! Sub-agents (issue 26): `[agents.NAME]` in tools.toml is a tool whose call is a
//! child run in the same database — keyed by the parent call's `AGENTRUN_CALL_ID`
//! (one call, one child, across crashes), capped by and counted against the parent's
//! budgets, cancelled with it, resumed with it, depth-limited; its answer is the
//! call's result and its failure a classified tool error.

use crate::common::{Db, Project, test_pg, tool_result};
use serde_json::{Value, json};

/// A `lookup` tool that logs each run (`lookups.log`), and a `research` agent.
const TOOLS: &str = r#"
[tools.lookup]
description = "Look a fact up"
input_schema = { type = "object", properties = { q = { type = "string" } }, required = ["q"] }
command = ["sh", "-c", "cat >> lookups.log; echo >> lookups.log; echo '{\"fact\": \"42\"}'"]
idempotent = true

[agents.research]
task = "agents/research.md"
description = "Research one question and answer it"
"#;

/// A project whose parent calls `research` with each of `questions` in one turn, then
/// answers "done"; the agent looks one fact up and answers with `agent_answer`.
fn project(front: &str, agent_front: &str, questions: &[&str], agent_turns: Value) -> Project {
    project_on(&Db::Sqlite, front, agent_front, questions, agent_turns)
}

/// [`project`] on a chosen backend.
fn project_on(
    db: &Db,
    front: &str,
    agent_front: &str,
    questions: &[&str],
    agent_turns: Value,
) -> Project {
    let p = Project::on(db);
    p.fast_tools(TOOLS);
    let calls: Vec<Value> = questions
        .iter()
        .map(|q| json!({"name": "research", "args": {"task": q}}))
        .collect();
    p.model_script(json!([{"tool_calls": calls}, {"text": "done"}]));
    p.task(front, "Answer with the help of research.");
    p.write(
        "agents/research.md",
        &format!(
            "+++\nmodel = \"script:research.json\"\ntools = [\"lookup\"]\n{agent_front}\n+++\nYou research one question.\n"
        ),
    );
    p.write(
        "agents/research.json",
        &json!({ "turns": agent_turns }).to_string(),
    );
    p
}

/// SQLite, and PostgreSQL when `AGENTRUN_TEST_PG` names a server.
fn backends() -> Vec<Db> {
    let mut dbs = vec![Db::Sqlite];
    dbs.extend(test_pg().map(Db::Pg));
    dbs
}

fn simple_agent() -> Value {
    json!([
        {"tool_calls": [{"name": "lookup", "args": {"q": "answer"}}]},
        {"text": "the answer is 42"}
    ])
}

fn runs(p: &Project) -> Vec<Value> {
    p.run(&["runs", "list", "--json"])
        .expect_code(0)
        .json()
        .as_array()
        .expect("array")
        .clone()
}

fn children_of(p: &Project, parent: &str) -> Vec<Value> {
    let mut out: Vec<Value> = runs(p)
        .into_iter()
        .filter(|r| r["parent"]["run_id"] == parent)
        .collect();
    out.sort_by_key(|r| {
        r["parent"]["call_id"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    });
    out
}

#[test]
fn a_sub_agent_is_a_child_run_whose_answer_is_the_calls_result() {
    for db in backends() {
        a_sub_agent_is_a_child_run_on(&db);
    }
}

fn a_sub_agent_is_a_child_run_on(db: &Db) {
    let p = project_on(db, "", "", &["what is the answer?"], simple_agent());
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    let parent = run.json()["run_id"].as_str().unwrap().to_string();
    let (content, is_error) = tool_result(&show, "call_0_0");
    assert_eq!((content, is_error), (json!("the answer is 42"), false));
    let children = children_of(&p, &parent);
    assert_eq!(children.len(), 1, "{children:?}");
    let child = &children[0];
    assert_eq!(
        (&child["status"], &child["parent"]["call_id"]),
        (&json!("completed"), &json!("call_0_0"))
    );
    // The child's task is the agent's task file and the call's input.
    let task = child["task"].as_str().unwrap();
    assert!(
        task.starts_with("You research one question.") && task.ends_with("what is the answer?"),
        "{task}"
    );
    assert_eq!(p.lines("lookups.log"), 1);
    // Its steps count against the parent.
    let child_show = p.show(child["id"].as_str().unwrap());
    assert_eq!(child_show["steps"], 2);
}

/// `lookup` as a script: logs its start, waits (bounded) until `want` lookups have
/// started, and — while a `die` file exists — the first to take it kills agentrun
/// (its parent) with SIGKILL: every lookup is then in flight.
fn blocking_lookup(p: &Project, want: usize) {
    p.script(
        "lookup.sh",
        &format!(
            "#!/bin/sh\ncat > /dev/null\necho start >> starts.log\ni=0\n\
             while [ \"$(wc -l < starts.log)\" -lt {want} ] && [ $i -lt 1000 ]; do sleep 0.02; i=$((i+1)); done\n\
             if mv die died 2>/dev/null; then kill -9 \"$PPID\"; sleep 5; fi\n\
             echo '{{\"fact\": \"42\"}}'\n"
        ),
    );
    p.fast_tools(&TOOLS.replace(
        r#"command = ["sh", "-c", "cat >> lookups.log; echo >> lookups.log; echo '{\"fact\": \"42\"}'"]"#,
        "command = [\"sh\", \"lookup.sh\"]\n\
         # The tool kills agentrun (its parent) to stand for a crash: a sandboxed tool may not.\n\
         sandbox = \"off\"",
    ));
}

#[test]
fn a_parent_killed_while_two_children_run_resumes_to_the_same_two_children() {
    for db in backends() {
        killed_while_two_children_run_on(&db);
    }
}

fn killed_while_two_children_run_on(db: &Db) {
    let p = project_on(db, "", "", &["first?", "second?"], simple_agent());
    blocking_lookup(&p, 2);
    p.write("die", "");
    let killed = p.run(&["start", "task.md", "--json"]);
    assert_eq!(killed.code, -1, "killed by a lookup\n{killed}");
    assert_eq!(p.lines("starts.log"), 2, "both children were running");
    let parent = runs(&p)
        .into_iter()
        .find(|r| r["parent"].is_null())
        .expect("the parent run")["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(children_of(&p, &parent).len(), 2);
    let resumed = p.run(&["resume", &parent, "--json"]);
    resumed.expect_code(0);
    assert_eq!(resumed.json()["answer"], "done");
    let children = children_of(&p, &parent);
    assert_eq!(children.len(), 2, "no third child: {children:?}");
    assert_eq!(runs(&p).len(), 3);
    let show = p.show(&parent);
    for (i, child) in children.iter().enumerate() {
        assert_eq!(child["status"], "completed", "{child}");
        assert_eq!(child["parent"]["call_id"], format!("call_0_{i}"));
        // One result for each call, in the parent and in the child.
        assert_eq!(
            tool_result(&show, &format!("call_0_{i}")),
            (json!("the answer is 42"), false)
        );
        let child_show = p.show(child["id"].as_str().unwrap());
        let results = crate::common::tool_results(&child_show);
        assert_eq!(results.len(), 1, "{results:?}");
    }
    let results = crate::common::tool_results(&show);
    assert_eq!(results.len(), 2, "{results:?}");
}

#[test]
fn the_same_call_never_creates_a_second_child_whatever_the_crash_point() {
    let points = [
        "after_model_stored",
        "after_tool_intent",
        "after_tool_effect",
        "inside_commit",
        "after_commit",
    ];
    for point in points {
        for nth in 1..=4 {
            let p = project("", "", &["what is the answer?"], simple_agent());
            let crash = format!("{point}:{nth}");
            let first = p.run_env(
                &["start", "task.md", "--json"],
                &[("AGENTRUN_CRASH_AT", &crash)],
            );
            if first.code == 0 {
                continue;
            }
            assert_eq!(first.code, -1, "aborted at {crash}\n{first}");
            let parent = runs(&p)
                .into_iter()
                .find(|r| r["parent"].is_null())
                .expect("the parent run")["id"]
                .as_str()
                .unwrap()
                .to_string();
            // Wherever the crash hit (the parent, or its child mid-step), resuming the
            // parent finishes both.
            p.run(&["resume", &parent, "--json"]).expect_code(0);
            let children = children_of(&p, &parent);
            assert_eq!(children.len(), 1, "after {crash}: {children:?}");
            assert_eq!(children[0]["status"], "completed", "after {crash}");
            let show = p.show(&parent);
            assert_eq!(
                tool_result(&show, "call_0_0"),
                (json!("the answer is 42"), false),
                "after {crash}"
            );
            assert!(p.lines("lookups.log") <= 2, "after {crash}");
        }
    }
}

#[test]
fn a_child_that_would_overspend_the_parents_tokens_is_stopped_by_them() {
    let turn = json!({"tool_calls": [{"name": "lookup", "args": {"q": "more"}}], "usage": {"input": 300, "output": 0}});
    let agent_turns: Vec<Value> = (0..10).map(|_| turn.clone()).collect();
    let p = project("max_tokens = 1000", "", &["dig deep"], json!(agent_turns));
    p.model_script(json!([
        {"tool_calls": [{"name": "research", "args": {"task": "dig deep"}}], "usage": {"input": 100, "output": 0}},
        {"text": "done"}
    ]));
    let (run, show) = p.start(&[]);
    run.expect_code(4);
    assert_eq!(run.json()["status"], "budget_exhausted");
    let parent = run.json()["run_id"].as_str().unwrap().to_string();
    let children = children_of(&p, &parent);
    assert_eq!(children.len(), 1);
    let child = p.show(children[0]["id"].as_str().unwrap());
    // Its own budget was 200,000 tokens; the parent had 900 left.
    assert_eq!(
        (&child["status"], &child["max_tokens"]),
        (&json!("budget_exhausted"), &json!(900))
    );
    let spent =
        child["tokens"]["input"].as_u64().unwrap() + child["tokens"]["output"].as_u64().unwrap();
    assert_eq!(spent, 900);
    assert_eq!(p.lines("lookups.log"), 3);
    let (content, is_error) = tool_result(&show, "call_0_0");
    assert!(is_error);
    assert_eq!(
        (&content["error"], &content["class"]),
        (&json!("budget"), &json!("guard"))
    );
    // The child's spend counted: the parent stopped before asking the model again.
    assert_eq!(show["steps"], 1);
    assert!(
        run.json()["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("1000 of 1000 tokens"),
        "{}",
        run.stdout
    );
}

#[test]
fn a_failing_child_is_a_classified_error_for_the_parents_model() {
    let p = project(
        "",
        "output_schema = { type = \"object\", properties = { n = { type = \"integer\" } }, required = [\"n\"] }\noutput_attempts = 1",
        &["count"],
        json!([{"text": "not a number"}]),
    );
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    let parent = run.json()["run_id"].as_str().unwrap().to_string();
    let children = children_of(&p, &parent);
    assert_eq!(children[0]["status"], "failed");
    let (content, is_error) = tool_result(&show, "call_0_0");
    assert!(is_error);
    assert_eq!(
        (&content["error"], &content["class"]),
        (&json!("agent_failed"), &json!("permanent"))
    );
    let message = content["message"].as_str().unwrap();
    let child = children[0]["id"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("sub-agent research (run {child}) ended failed:")),
        "{message}"
    );
    assert!(
        content["hint"]
            .as_str()
            .unwrap()
            .starts_with("The sub-agent could not finish")
    );
}

#[test]
fn a_structured_child_answer_is_the_calls_result_as_json() {
    let p = project(
        "",
        "output_schema = { type = \"object\", properties = { n = { type = \"integer\" } }, required = [\"n\"] }",
        &["count"],
        json!([{"text": "{\"n\": 42}"}]),
    );
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    assert_eq!(tool_result(&show, "call_0_0"), (json!({"n": 42}), false));
}

#[test]
fn sub_agents_nest_no_deeper_than_max_depth() {
    let p = project(
        "",
        "",
        &["recurse"],
        json!([
            {"tool_calls": [{"name": "research", "args": {"task": "deeper"}}]},
            {"text": "stopped at the limit"}
        ]),
    );
    p.fast_tools(&format!("{TOOLS}\n[policy]\nmax_depth = 1\n"));
    p.write(
        "agents/research.md",
        "+++\nmodel = \"script:research.json\"\ntools = [\"lookup\", \"research\"]\n+++\nYou research.\n",
    );
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    assert_eq!(
        tool_result(&show, "call_0_0"),
        (json!("stopped at the limit"), false)
    );
    assert_eq!(runs(&p).len(), 2, "no grandchild");
    let parent = run.json()["run_id"].as_str().unwrap().to_string();
    let child = children_of(&p, &parent)[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (content, is_error) = tool_result(&p.show(&child), "call_0_0");
    assert!(is_error);
    assert_eq!(
        (&content["error"], &content["class"]),
        (&json!("depth_limit"), &json!("guard"))
    );
}

/// Waits (bounded) until `cond` holds.
fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn cancelling_the_parent_cancels_its_running_child_and_kills_its_tool() {
    for db in backends() {
        cancel_on(&db);
    }
}

fn cancel_on(db: &Db) {
    let p = project_on(db, "", "", &["slow question"], simple_agent());
    // The lookup runs until `go` exists (never, here), then logs that it finished.
    p.script(
        "lookup.sh",
        "#!/bin/sh\ncat > /dev/null\necho $$ > lookup.pid\necho start >> starts.log\ni=0\n\
         while [ ! -f go ] && [ $i -lt 1000 ]; do sleep 0.02; i=$((i+1)); done\n\
         echo finished >> finished.log\necho '{\"fact\": \"42\"}'\n",
    );
    p.fast_tools(&TOOLS.replace(
        r#"command = ["sh", "-c", "cat >> lookups.log; echo >> lookups.log; echo '{\"fact\": \"42\"}'"]"#,
        "command = [\"sh\", \"lookup.sh\"]\n\
         # The tool kills agentrun (its parent) to stand for a crash: a sandboxed tool may not.\n\
         sandbox = \"off\"",
    ));
    let running = p
        .command(&["start", "task.md", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn agentrun");
    wait_until("the child's lookup to start", || p.lines("starts.log") == 1);
    let parent = runs(&p)
        .into_iter()
        .find(|r| r["parent"].is_null())
        .expect("the parent run")["id"]
        .as_str()
        .unwrap()
        .to_string();
    p.run(&["runs", "cancel", &parent, "--reason", "not needed"])
        .expect_code(0);
    let out = running.wait_with_output().expect("agentrun ends");
    let run = crate::common::Run::from_output(out);
    assert_eq!(run.json()["status"], "cancelled", "{run}");
    let children = children_of(&p, &parent);
    assert_eq!(children.len(), 1);
    assert_eq!(children[0]["status"], "cancelled", "{children:?}");
    let child = p.show(children[0]["id"].as_str().unwrap());
    assert!(
        child["error"]
            .as_str()
            .unwrap_or_default()
            .contains("not needed")
            || child["error"]
                .as_str()
                .unwrap_or_default()
                .contains(&parent),
        "{}",
        child["error"]
    );
    // The lookup was killed with the child, not left to finish.
    let pid: i32 = std::fs::read_to_string(p.path().join("lookup.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: signal 0 only asks whether the process exists.
    wait_until(
        "the lookup to be killed",
        || unsafe { libc::kill(pid, 0) } != 0,
    );
    assert_eq!(p.lines("finished.log"), 0);
    // A cancelled parent is never resumed; nor is its child started again.
    p.run(&["resume", &parent]).expect_code(2);
}

#[test]
fn a_child_waiting_for_a_person_pauses_its_parent_and_the_queue_names_the_parent() {
    let p = project(
        "",
        "",
        &["which order?"],
        json!([
            {"tool_calls": [{"name": "ask_user", "args": {"question": "Which order number?"}}]},
            {"text": "order 7 it is"}
        ]),
    );
    let first = p.run(&["start", "task.md", "--json"]);
    first.expect_code(3);
    let parent = first.json()["run_id"].as_str().unwrap().to_string();
    assert_eq!(first.json()["status"], "escalated");
    let queue = p
        .run(&["escalations", "list", "--json"])
        .expect_code(0)
        .json();
    let queue = queue.as_array().unwrap();
    assert_eq!(queue.len(), 1, "only the child's escalation: {queue:?}");
    let child = children_of(&p, &parent)[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        (&queue[0]["run_id"], &queue[0]["parent_run_id"]),
        (&json!(child), &json!(parent))
    );
    let esc = queue[0]["id"].as_str().unwrap().to_string();
    let table = p.run_env(&["escalations", "list"], &[("COLUMNS", "200")]);
    table.expect_code(0);
    assert!(
        table.stdout.contains(&format!(
            "(sub-agent of {parent}) the agent asks: Which order number?"
        )),
        "{table}"
    );
    // The agent's task file is in the parent's snapshot digests: an edit is told.
    p.write(
        "agents/research.md",
        "+++\nmodel = \"script:research.json\"\ntools = [\"lookup\"]\n+++\nYou research one question, briefly.\n",
    );
    let waiting = p.run(&["resume", &parent]);
    waiting.expect_code(3);
    assert!(
        waiting.stderr.contains("tool `research`:")
            && waiting
                .stderr
                .contains("agents/research.md changed since the run started"),
        "{waiting}"
    );
    assert_eq!(children_of(&p, &parent).len(), 1, "still the one child");
    // Resolving with --resume continues the parent, which resumes the child.
    let done = p.run(&[
        "escalations",
        "resolve",
        &esc,
        "--reply",
        "7",
        "--resume",
        "--json",
    ]);
    done.expect_code(0);
    assert_eq!(
        (&done.json()["run_id"], &done.json()["answer"]),
        (&json!(parent), &json!("done"))
    );
    assert_eq!(children_of(&p, &parent).len(), 1);
    assert_eq!(
        tool_result(&p.show(&parent), "call_0_0"),
        (json!("order 7 it is"), false)
    );
}

#[test]
fn agents_in_tools_toml_are_checked_like_the_rest_of_it() {
    let p = Project::new();
    p.write(
        "tools.toml",
        "[tools.lookup]\ndescription = \"x\"\ninput_schema = { type = \"object\" }\ncommand = [\"true\"]\n\n\
         [agents.research]\ntaks = \"agents/research.md\"\ndescription = \"r\"\n\n\
         [agents.lookup]\ntask = \"agents/lookup.md\"\ndescription = \"l\"\n\n\
         [agents.writer]\ntask = \"agents/missing.md\"\n\n[policy]\nmax_depth = -1\n",
    );
    let check = p.run(&["tools", "check", "--tools", "tools.toml"]);
    check.expect_code(2);
    for line in [
        "tools.toml: agents.research: unknown key `taks` (line 7, column 1); did you mean `task`?",
        "tools.toml: agents.research.task: missing: the agent's task file, e.g. task = \"agents/research.md\"",
        "tools.toml: agents.lookup: `lookup` is also a [tools.lookup]: an agent and a tool need different names",
        "tools.toml: agents.writer.description: missing: say what the agent does, so the model knows when to call it",
        "tools.toml: policy.max_depth: must be between 0 and 16, not -1",
    ] {
        assert!(
            check.stdout.contains(line) || check.stderr.contains(line),
            "no `{line}` in\n{check}"
        );
    }
    // A task file that is not there is named when the file is otherwise good.
    p.write(
        "tools.toml",
        "[agents.writer]\ntask = \"agents/missing.md\"\ndescription = \"w\"\n",
    );
    let check = p.run(&["tools", "check", "--tools", "tools.toml"]);
    check.expect_code(2);
    assert!(
        format!("{}{}", check.stdout, check.stderr)
            .contains("agents.writer.task: no such file `agents/missing.md`"),
        "{check}"
    );
    // And `start` refuses a bad agent task file before writing anything.
    p.write(
        "agents/missing.md",
        "+++\nmodel = \"script:nope.json\"\n+++\nWrite.\n",
    );
    p.model_script(json!([{"text": "done"}]));
    p.task("", "Go.");
    let start = p.run(&["start", "task.md"]);
    start.expect_code(2);
    assert!(start.stderr.contains("nope.json"), "{start}");
    assert!(!p.db().exists(), "nothing written");
}

/// `runs rm` of a parent refuses to leave its sub-agent runs (and the task text it
/// handed them) behind: it says how many and removes them with `--with-children`;
/// `runs prune` removes a parent together with its children.
#[test]
fn removing_a_parent_removes_its_children_or_refuses_saying_how_many() {
    let p = project("", "", &["first?", "second?"], simple_agent());
    let (run, _) = p.start(&[]);
    run.expect_code(0);
    let parent = run.json()["run_id"].as_str().unwrap().to_string();
    assert_eq!(children_of(&p, &parent).len(), 2);
    let refused = p.run(&["runs", "rm", &parent]);
    refused.expect_code(2);
    assert!(
        refused
            .stderr
            .contains(&format!("run {parent} started 2 sub-agent runs")),
        "{refused}"
    );
    assert!(refused.stderr.contains("--with-children"), "{refused}");
    assert_eq!(runs(&p).len(), 3, "nothing was removed");
    p.run(&["runs", "rm", &parent, "--with-children"])
        .expect_code(0);
    assert_eq!(runs(&p), Vec::<Value>::new());
    assert!(
        !p.db_bytes().windows(7).any(|w| w == b"second?"),
        "a child's task text is left in the database"
    );

    let p = project("", "", &["third?"], simple_agent());
    p.start(&[]).0.expect_code(0);
    assert_eq!(runs(&p).len(), 2);
    p.run(&["runs", "prune", "--older-than", "0s"])
        .expect_code(0);
    assert_eq!(runs(&p), Vec::<Value>::new());
}
