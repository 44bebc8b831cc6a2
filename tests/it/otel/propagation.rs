//! The trace context reaches what a run calls (checked where it arrives), and a
//! collector that refuses or hangs costs the run nothing beyond the flush bound.

use crate::common::{Project, runtime};
use serde_json::json;
use std::time::{Duration, Instant};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const TOOLS: &str = r#"
[defaults]
timeout = "5s"

[tools.shell]
description = "Runs a command"
input_schema = { type = "object", properties = {} }
command = ["sh", "-c", "cat > /dev/null; printf '%s' \"$TRACEPARENT\" > traceparent.txt; echo '{}'"]
idempotent = true

[tools.web]
description = "Calls a service"
input_schema = { type = "object", properties = {} }
http = { method = "POST", url = "{SERVER}/svc" }
"#;

/// A port that refuses connections: bound, then closed.
fn refusing_endpoint() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    drop(l);
    format!("http://127.0.0.1:{port}")
}

fn project(server: &str) -> Project {
    let p = Project::new();
    p.write("tools.toml", &TOOLS.replace("{SERVER}", server));
    p.model_script(json!([
        {"tool_calls": [{"name": "shell", "args": {}}, {"name": "web", "args": {}}]},
        {"text": "done"}
    ]));
    p.task("max_steps = 4", "Call both.");
    p
}

#[test]
fn traceparent_reaches_a_command_tool_and_an_http_tool_and_a_refusing_collector_costs_nothing() {
    let rt = runtime();
    let server = rt.block_on(MockServer::start());
    rt.block_on(
        Mock::given(method("POST"))
            .and(path("/svc"))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({"ok": true})))
            .mount(&server),
    );
    let p = project(&server.uri());
    let endpoint = refusing_endpoint();
    let (run, show) = p.start(&[("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())]);
    run.expect_code(0);
    assert_eq!(show["status"], "completed");
    let id = show["id"]
        .as_str()
        .or(show["run_id"].as_str())
        .expect("id")
        .to_string();
    let trace = agentrun::telemetry::ids::trace_id(&id);
    let want = |call: &str| {
        agentrun::telemetry::ids::traceparent(trace, agentrun::telemetry::ids::tool_span(&id, call))
    };
    let at_command = std::fs::read_to_string(p.path().join("traceparent.txt")).expect("written");
    assert_eq!(at_command, want("call_0_0"));
    let requests = rt.block_on(server.received_requests()).expect("recorded");
    assert_eq!(requests.len(), 1);
    let header = requests[0]
        .headers
        .get("traceparent")
        .expect("traceparent sent");
    assert_eq!(header.to_str().unwrap(), want("call_0_1"));
    // The refused spans are said once, on one line, and the run is unharmed.
    let lost: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("not delivered"))
        .collect();
    assert_eq!(lost.len(), 1, "{run}");
}

#[test]
fn without_telemetry_no_trace_context_is_given() {
    let rt = runtime();
    let server = rt.block_on(MockServer::start());
    rt.block_on(
        Mock::given(method("POST"))
            .and(path("/svc"))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({"ok": true})))
            .mount(&server),
    );
    let p = project(&server.uri());
    let (run, _) = p.start(&[(
        "TRACEPARENT",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    )]);
    run.expect_code(0);
    // The parent's own TRACEPARENT is not passed through the tool's allow-list either.
    assert_eq!(
        std::fs::read_to_string(p.path().join("traceparent.txt")).unwrap(),
        ""
    );
    let requests = rt.block_on(server.received_requests()).expect("recorded");
    assert!(requests[0].headers.get("traceparent").is_none());
}

#[test]
fn a_collector_that_hangs_costs_the_process_at_most_the_flush_bound() {
    // Accepts connections and never answers.
    let hang = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let endpoint = format!("http://{}", hang.local_addr().expect("addr"));
    let held = std::thread::spawn(move || {
        let mut open = Vec::new();
        while let Ok((s, _)) = hang.accept() {
            open.push(s);
            if open.len() > 8 {
                break;
            }
        }
    });
    let p = project("http://127.0.0.1:9");
    let started = Instant::now();
    // Without the bound the exporter would wait for its 60 s timeout.
    let (run, show) = p.start(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "60000"),
        ("OTEL_BSP_EXPORT_TIMEOUT", "300"),
        ("OTEL_BSP_SCHEDULE_DELAY", "10"),
    ]);
    let took = started.elapsed();
    run.expect_code(0);
    assert_eq!(show["status"], "completed");
    assert!(
        took < Duration::from_secs(30),
        "the process waited {took:?} for a hung collector"
    );
    drop(held);
}
