//! One run's whole story in a real OTLP receiver (Arize Phoenix): a model fallback, a
//! tool retried and then replaced by its fallback, an approval, a kill -9 and a resume
//! by another process, and a sub-agent — one trace, spans named and attributed in the
//! GenAI conventions, parented right, with the usage `runs show` reports.

use super::phoenix::phoenix;
use crate::common::Project;
use serde_json::{Value, json};

const TOOLS: &str = r#"
[defaults]
timeout = "5s"
attempts = 2
backoff = "10ms"
max_backoff = "50ms"

[tools.lookup]
description = "Look the order up"
input_schema = { type = "object", properties = { q = { type = "string" } }, required = ["q"] }
command = ["sh", "-c", "cat > /dev/null; echo 'down for maintenance' >&2; exit 75"]
idempotent = true
fallback = [{ tool = "lookup_cache" }]

[tools.lookup_cache]
description = "Last night's copy of the orders"
input_schema = { type = "object", properties = { q = { type = "string" } }, required = ["q"] }
command = ["sh", "-c", "cat > /dev/null; echo '{\"order\": \"ORD-1\"}'"]
idempotent = true

[tools.refund]
description = "Refund an order"
input_schema = { type = "object", properties = { order = { type = "string" } }, required = ["order"] }
command = ["sh", "refund.sh"]
idempotent = true
approval = "always"
sandbox = "off"   # it plays a crash by killing agentrun, which a sandboxed tool may not

[agents.research]
task = "agents/research.md"
description = "Research one question"
"#;

/// Kills agentrun (its parent) with SIGKILL the first time it runs after `kill_at`
/// was written; answers otherwise.
const REFUND: &str = r#"#!/bin/sh
cat > /dev/null
if [ -f kill_at ]; then
  rm -f kill_at
  kill -9 "$PPID"
  exit 0
fi
echo '{"refunded": true}'
"#;

fn project() -> Project {
    let p = Project::new();
    p.write("tools.toml", TOOLS);
    p.script("refund.sh", REFUND);
    // The first model always fails for good: every request falls back to the second.
    p.write(
        "down.json",
        r#"{"turns": [{"fail": {"status": 401}, "text": "never"}]}"#,
    );
    p.model_script(json!([
        {"tool_calls": [{"name": "lookup", "args": {"q": "ORD-1"}}], "usage": {"input": 100, "output": 10}},
        {"tool_calls": [{"name": "refund", "args": {"order": "ORD-1"}}], "usage": {"input": 200, "output": 20}},
        {"tool_calls": [{"name": "research", "args": {"task": "Is ORD-1 refundable?"}}], "usage": {"input": 300, "output": 30}},
        {"text": "Refunded.", "usage": {"input": 400, "output": 40}}
    ]));
    p.write(
        "task.md",
        "+++\nmodel = [\"script:down.json\", \"script:script.json\"]\nmax_steps = 10\n+++\nRefund ORD-1.\n",
    );
    p.write(
        "agents/research.md",
        "+++\nmodel = \"script:research.json\"\ntools = []\n+++\nYou research.\n",
    );
    p.write(
        "agents/research.json",
        r#"{"turns": [{"text": "yes", "usage": {"input": 7, "output": 3}}]}"#,
    );
    p
}

fn attr<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

fn event_names(span: &Value) -> Vec<String> {
    span["events"]
        .as_array()
        .map(|es| {
            es.iter()
                .map(|e| e["name"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_run_killed_and_resumed_elsewhere_is_one_trace_in_phoenix() {
    let Some(phoenix) = phoenix() else { return };
    let p = project();
    let env = phoenix.env("one-trace");
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();

    // Process 1: the lookup is retried, then its fallback answers; the refund waits
    // for a person.
    let first = p.run_env(&["start", "task.md", "--json"], &env);
    first.expect_code(3);
    let run = first.json()["run_id"].as_str().expect("run id").to_string();
    let esc = first.json()["escalation_id"]
        .as_str()
        .expect("escalation")
        .to_string();
    p.run(&["escalations", "resolve", &esc, "--approve", "--by", "ops"])
        .expect_code(0);
    // Process 2 runs the approved refund, which kills it.
    p.write("kill_at", "now");
    let killed = p.run_env(&["resume", &run], &env);
    assert_eq!(killed.code, -1, "killed by SIGKILL\n{killed}");
    // Process 3 finishes it: the refund again, the sub-agent, the answer.
    p.run_env(&["resume", &run, "--json"], &env).expect_code(0);
    let show = p.show(&run);
    assert_eq!(show["status"], "completed");

    let spans = phoenix.spans_when("one-trace", |s| {
        s.iter()
            .filter(|x| {
                x["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("invoke_agent"))
            })
            .count()
            == 2
    });
    let traces: std::collections::BTreeSet<&str> = spans
        .iter()
        .map(|s| s["context"]["trace_id"].as_str().unwrap())
        .collect();
    assert_eq!(traces.len(), 1, "one trace: {traces:?}");
    let want_trace = agentrun::telemetry::ids::trace_id(&run).to_string();
    assert!(
        traces.contains(want_trace.as_str()),
        "{traces:?} vs {want_trace}"
    );

    let roots = named(&spans, "invoke_agent task");
    assert_eq!(roots.len(), 1, "{spans:#?}");
    let root = roots[0];
    let root_id = root["context"]["span_id"].as_str().unwrap();
    assert!(root["parent_id"].is_null());
    assert_eq!(attr(root, "gen_ai.operation.name"), "invoke_agent");
    assert_eq!(attr(root, "gen_ai.conversation.id"), run.as_str());
    assert_eq!(attr(root, "gen_ai.agent.name"), "task");
    assert_eq!(attr(root, "agentrun.run.status"), "completed");
    assert_eq!(
        attr(root, "agentrun.run.input_tokens"),
        &show["tokens"]["input"]
    );
    assert_eq!(
        attr(root, "agentrun.run.output_tokens"),
        &show["tokens"]["output"]
    );

    // Every model request of the run: a fallback from the first model, and together
    // the usage `runs show` reports.
    let chats: Vec<&Value> = spans
        .iter()
        .filter(|s| {
            s["name"] == "chat down.json" && attr(s, "gen_ai.conversation.id") == run.as_str()
        })
        .collect();
    assert_eq!(chats.len(), 4, "{chats:#?}");
    let mut input = 0;
    let mut output = 0;
    for c in &chats {
        assert_eq!(c["parent_id"], root_id);
        assert_eq!(attr(c, "gen_ai.operation.name"), "chat");
        assert_eq!(attr(c, "gen_ai.provider.name"), "script");
        assert_eq!(attr(c, "gen_ai.request.model"), "down.json");
        assert_eq!(attr(c, "gen_ai.response.model"), "script.json");
        assert_eq!(attr(c, "agentrun.model.fallback"), true);
        assert!(
            event_names(c).contains(&"agentrun.model.fallback".to_string()),
            "{c:#?}"
        );
        input += attr(c, "gen_ai.usage.input_tokens").as_u64().unwrap();
        output += attr(c, "gen_ai.usage.output_tokens").as_u64().unwrap();
    }
    assert_eq!((input, output), (1000, 100));
    assert_eq!(
        (json!(input), json!(output)),
        (
            show["tokens"]["input"].clone(),
            show["tokens"]["output"].clone()
        )
    );

    // The lookup: two attempts, a wait between them, the hop to its fallback.
    let lookup = named(&spans, "execute_tool lookup");
    assert_eq!(lookup.len(), 1);
    let lookup = lookup[0];
    assert_eq!(lookup["parent_id"], root_id);
    assert_eq!(attr(lookup, "gen_ai.tool.name"), "lookup");
    assert_eq!(attr(lookup, "gen_ai.tool.call.id"), "call_0_0");
    assert_eq!(attr(lookup, "agentrun.tool.via"), "lookup_cache");
    let events = event_names(lookup);
    for want in [
        "agentrun.tool.attempt",
        "agentrun.tool.retry_wait",
        "agentrun.tool.fallback",
    ] {
        assert!(events.contains(&want.to_string()), "{want} in {events:?}");
    }
    let failed: Vec<&Value> = lookup["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["attributes"]["error.type"] == "transient")
        .collect();
    assert_eq!(
        failed.len(),
        2,
        "both attempts at the lookup failed transiently"
    );

    // The refund, run by the third process after the approval, with its wait.
    let refund = named(&spans, "execute_tool refund");
    assert_eq!(refund.len(), 1, "the killed process sent no span of it");
    assert_eq!(refund[0]["parent_id"], root_id);
    assert_eq!(attr(refund[0], "gen_ai.tool.call.id"), "call_1_0");

    // The sub-agent's run is a child of the call that started it.
    let research = named(&spans, "execute_tool research");
    assert_eq!(research.len(), 1);
    let child = named(&spans, "invoke_agent research");
    assert_eq!(child.len(), 1);
    assert_eq!(child[0]["parent_id"], research[0]["context"]["span_id"]);
    let child_chat: Vec<&Value> = spans
        .iter()
        .filter(|s| {
            s["parent_id"] == child[0]["context"]["span_id"] && s["name"] == "chat research.json"
        })
        .collect();
    assert_eq!(child_chat.len(), 1);

    // The processes' segments: the first escalated, the last was a resume.
    let segments = named(&spans, "agentrun.segment");
    let of_run: Vec<&&Value> = segments
        .iter()
        .filter(|s| attr(s, "gen_ai.conversation.id") == run.as_str())
        .collect();
    assert_eq!(
        of_run.len(),
        2,
        "the killed process's segment is lost: {of_run:#?}"
    );
    let escalations: Vec<&Value> = of_run
        .iter()
        .flat_map(|s| s["events"].as_array().unwrap().iter())
        .filter(|e| e["name"] == "agentrun.escalation")
        .collect();
    assert_eq!(escalations.len(), 1, "{of_run:#?}");
    assert_eq!(
        escalations[0]["attributes"]["agentrun.escalation.kind"],
        "approval_required"
    );
    assert!(
        of_run
            .iter()
            .any(|s| attr(s, "agentrun.segment.resumed") == true)
    );
}
