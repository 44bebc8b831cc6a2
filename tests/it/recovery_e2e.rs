//! The recovery layer end to end (issue 4): each case of the seeds' failure matrix runs
//! the real binary (`agentrun start task.md --json`) with the scripted model and real
//! command or HTTP tools, then reads `runs show --json`: what the model saw
//! (`messages`), the journal (`tool_calls`) and the trace (`events`).
//!
//! Tools count their own invocations by appending a line to `calls.log`, so "exactly
//! three attempts" is checked against what really ran, not against what agentrun says.
//! Delays are small (`backoff = "10ms"`); the exact schedule is unit-tested with an
//! injected clock, so here a wait is only checked to lie within `[0, its ceiling]` —
//! except a server's `Retry-After`, which is exact.

use crate::common::{FAST_DEFAULTS, Project, events, journal, runtime, tool_result};
use serde_json::{Value, json};
use std::time::{Duration, Instant, SystemTime};
use wiremock::matchers::{body_json, header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// A command tool: appends to calls.log, then exits with `$1`'s code, or with the
/// code on line N of `codes` for the Nth call (0 prints the success output).
const EXIT_TOOL: &str = r#"#!/bin/sh
cat > /dev/null
echo "${AGENTRUN_CALL_ID##*:}" >> calls.log
n=$(wc -l < calls.log)
code=$(sed -n "${n}p" codes)
[ -z "$code" ] && code=$(tail -n 1 codes)
if [ "$code" = 0 ]; then
  echo '{"order": "ORD-1001", "status": "paid"}'
  exit 0
fi
echo "attempt $n failed with $code" >&2
exit "$code"
"#;

/// A project with one command tool `pay` (exit codes from `codes`, one per call, the
/// last repeating) and a script that calls it once and then answers.
fn exit_code_project(codes: &[i32], tool_extra: &str) -> Project {
    let p = Project::new();
    p.script("tool.sh", EXIT_TOOL);
    let codes: Vec<String> = codes.iter().map(i32::to_string).collect();
    p.write("codes", &(codes.join("\n") + "\n"));
    p.fast_tools(&format!(
        r#"
[tools.pay]
description = "Payment status"
input_schema = {{ type = "object", properties = {{ order_id = {{ type = "string" }} }}, required = ["order_id"] }}
command = ["sh", "tool.sh"]
{tool_extra}
"#
    ));
    p.model_script(json!([
        {"tool_calls": [{"name": "pay", "args": {"order_id": "ORD-1001"}}]},
        {"text": "final answer"}
    ]));
    p.task("", "Check the payment for ORD-1001.");
    p
}

/// The ceiling of the wait before retry `retry` (0-based) under [`FAST_DEFAULTS`].
fn ceiling_ms(retry: usize) -> u64 {
    (10u64 << retry).min(200)
}

/// Asserts the backoff events: one per retry, numbered for the attempt they precede,
/// each within its full-jitter ceiling and not from a Retry-After.
fn assert_jittered_backoffs(show: &Value, tool: &str, count: usize) {
    let backoffs = events(show, "backoff");
    assert_eq!(backoffs.len(), count, "{backoffs:#?}");
    for (i, b) in backoffs.iter().enumerate() {
        assert_eq!(
            (&b["tool"], &b["attempt"], &b["retry_after"]),
            (&json!(tool), &json!(i + 2), &json!(false)),
            "{b}"
        );
        let delay = b["delay_ms"].as_u64().expect("delay_ms");
        assert!(delay <= ceiling_ms(i), "retry {i}: {delay} ms: {b}");
    }
}

/// The error JSON's stable fields (everything but `message` and `hint`).
fn error_fields(content: &Value) -> Value {
    json!({
        "error": content["error"],
        "class": content["class"],
        "retryable": content["retryable"],
        "attempts": content["attempts"],
    })
}

fn assert_hint(content: &Value) {
    let hint = content["hint"].as_str().unwrap_or_default();
    assert!(!hint.trim().is_empty(), "no hint: {content}");
}

// ---- 1. transient failures that recover ---------------------------------------------

#[test]
fn a_tool_that_fails_twice_then_succeeds_shows_the_model_only_the_success() {
    let p = exit_code_project(&[75, 75, 0], "");
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    assert_eq!(p.lines("calls.log"), 3);
    assert_eq!(
        tool_result(&show, "call_0_0"),
        (json!({"order": "ORD-1001", "status": "paid"}), false)
    );
    let row = journal(&show, "call_0_0");
    assert_eq!(
        (&row["status"], &row["attempts"], &row["via"]),
        (&json!("ok"), &json!(3), &Value::Null)
    );
    assert_jittered_backoffs(&show, "pay", 2);
    let attempts: Vec<Value> = events(&show, "tool_attempt")
        .iter()
        .map(|a| json!([a["attempt"], a["error"]]))
        .collect();
    assert_eq!(
        attempts,
        vec![
            json!([1, "unavailable"]),
            json!([2, "unavailable"]),
            json!([3, null])
        ]
    );
}

// ---- 2. a persistent outage -------------------------------------------------------------

#[test]
fn persistent_outage_is_tried_three_times_and_reported_honestly() {
    let p = exit_code_project(&[69], "");
    let (run, show) = p.start(&[]);
    let v = run.expect_code(0).json();
    assert_eq!(
        (&v["status"], &v["answer"], &v["steps"]),
        (&json!("completed"), &json!("final answer"), &json!(2))
    );
    assert_eq!(p.lines("calls.log"), 3, "exactly three invocations");
    let (content, is_error) = tool_result(&show, "call_0_0");
    assert!(is_error);
    assert_eq!(
        error_fields(&content),
        json!({"error": "unavailable", "class": "transient", "retryable": true, "attempts": 3})
    );
    assert_hint(&content);
    assert!(
        content["message"]
            .as_str()
            .unwrap()
            .contains("pay exited with 69"),
        "{content}"
    );
    assert_jittered_backoffs(&show, "pay", 2);
    // No retries on top: one journaled call, and no wait after the last attempt.
    assert_eq!(show["tool_calls"].as_array().unwrap().len(), 1);
    let row = journal(&show, "call_0_0");
    assert_eq!(
        (&row["status"], &row["attempts"]),
        (&json!("error"), &json!(3))
    );
    assert_eq!(events(&show, "tool_attempt").len(), 3);
}

// ---- 3. permanent failures: one attempt ------------------------------------------------

#[test]
fn not_found_and_permission_denied_are_tried_once_with_a_hint() {
    for (code, kind) in [(66, "not_found"), (77, "permission_denied")] {
        let p = exit_code_project(&[code], "");
        let (run, show) = p.start(&[]);
        run.expect_code(0);
        assert_eq!(p.lines("calls.log"), 1, "exit {code}");
        let (content, is_error) = tool_result(&show, "call_0_0");
        assert!(is_error, "exit {code}");
        assert_eq!(
            error_fields(&content),
            json!({"error": kind, "class": "permanent", "retryable": false, "attempts": 1}),
            "exit {code}"
        );
        assert_hint(&content);
        assert_eq!(events(&show, "backoff"), Vec::<Value>::new(), "exit {code}");
        assert_eq!(journal(&show, "call_0_0")["attempts"], 1, "exit {code}");
    }
}

#[test]
fn each_permanent_kind_gets_its_own_hint() {
    let hint = |code| {
        let p = exit_code_project(&[code], "");
        let (_, show) = p.start(&[]);
        tool_result(&show, "call_0_0").0["hint"].clone()
    };
    assert_ne!(hint(66), hint(77));
}

// ---- 4. and 5. malformed calls: no call is made -----------------------------------------

#[test]
fn invalid_arguments_are_refused_without_a_call_and_corrected_next_turn() {
    let p = exit_code_project(&[0], "");
    p.model_script(json!([
        {"tool_calls": [{"name": "pay", "args": {"order": "ORD-1001"}}]},
        {"tool_calls": [{"name": "pay", "args": {"order_id": "ORD-1001"}}]},
        {"text": "paid"}
    ]));
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    let (bad, is_error) = tool_result(&show, "call_0_0");
    assert!(is_error);
    assert_eq!(
        error_fields(&bad),
        json!({"error": "schema_violation", "class": "malformed", "retryable": false, "attempts": 0})
    );
    let message = bad["message"].as_str().unwrap();
    assert!(message.contains("order_id"), "names the missing key: {bad}");
    assert_hint(&bad);
    assert_eq!(
        tool_result(&show, "call_1_0"),
        (json!({"order": "ORD-1001", "status": "paid"}), false)
    );
    // Only the corrected call ran.
    let log = std::fs::read_to_string(p.path().join("calls.log")).unwrap();
    assert_eq!(log, "call_1_0\n");
    let attempted: Vec<Value> = events(&show, "tool_attempt")
        .iter()
        .map(|a| a["call_id"].clone())
        .collect();
    assert_eq!(attempted, vec![json!("call_1_0")]);
    let statuses: Vec<(Value, Value)> = show["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["status"].clone(), c["attempts"].clone()))
        .collect();
    assert_eq!(
        statuses,
        vec![(json!("error"), json!(0)), (json!("ok"), json!(1))]
    );
}

#[test]
fn an_unknown_tool_is_malformed_and_nothing_runs() {
    let p = exit_code_project(&[0], "");
    p.model_script(json!([
        {"tool_calls": [{"name": "refund_everything", "args": {"order_id": "ORD-1001"}}]},
        {"text": "I cannot do that."}
    ]));
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    let (content, is_error) = tool_result(&show, "call_0_0");
    assert!(is_error);
    assert_eq!(
        error_fields(&content),
        json!({"error": "unknown_tool", "class": "malformed", "retryable": false, "attempts": 0})
    );
    assert!(
        content["message"]
            .as_str()
            .unwrap()
            .contains("refund_everything")
    );
    assert_eq!(p.lines("calls.log"), 0);
    assert_eq!(events(&show, "tool_attempt"), Vec::<Value>::new());
    assert_eq!(journal(&show, "call_0_0")["attempts"], 0);
}

// ---- 7. a hanging tool -----------------------------------------------------------------

#[test]
fn a_hanging_tool_is_killed_at_its_timeout_on_every_attempt() {
    let p = Project::new();
    // The sleep runs in the background so it is a grandchild: the kill must reach the
    // whole process group, not only the shell.
    p.script(
        "hang.sh",
        "#!/bin/sh\ncat > /dev/null\nsleep 30 &\necho $! >> calls.log\nwait\n",
    );
    p.fast_tools(
        r#"
[tools.hang]
description = "Never answers"
input_schema = { type = "object" }
command = ["sh", "hang.sh"]
timeout = "300ms"
attempts = 2
idempotent = true
"#,
    );
    p.model_script(json!([{"tool_calls": [{"name": "hang"}]}, {"text": "gave up"}]));
    p.task("", "Wait for it.");
    let started = Instant::now();
    let (run, show) = p.start(&[]);
    let elapsed = started.elapsed();
    run.expect_code(0);
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
    let (content, is_error) = tool_result(&show, "call_0_0");
    assert!(is_error);
    assert_eq!(
        error_fields(&content),
        json!({"error": "timeout", "class": "transient", "retryable": true, "attempts": 2})
    );
    assert_eq!(content["message"], "hang exceeded 300ms");
    assert_eq!(p.lines("calls.log"), 2);
    assert_jittered_backoffs(&show, "hang", 1);
    // Both background sleeps died with their group.
    let pids = std::fs::read_to_string(p.path().join("calls.log")).unwrap();
    for pid in pids.lines() {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit(") ").next().and_then(|s| s.chars().next());
        assert!(
            state.is_none() || state == Some('Z'),
            "sleep {pid} outlived the attempt: {stat}"
        );
    }
}

// ---- 8. and 9. fallback chains ---------------------------------------------------------

/// `search_kb` (always down) falling back to `kb_cache` (and `kb_mirror`), which echo
/// the arguments they received, or exit with the code in their file.
fn chain_project(cache_code: i32, mirror: bool) -> Project {
    let p = Project::new();
    p.script(
        "down.sh",
        "#!/bin/sh\ncat > /dev/null\necho search_kb >> calls.log\necho 'kb is down' >&2\nexit 69\n",
    );
    let echo = |name: &str, code: i32| {
        format!(
            "#!/bin/sh\nargs=$(cat)\necho {name} >> calls.log\n[ {code} = 0 ] || exit {code}\nprintf '{{\"answer\": \"30 days\", \"got\": %s}}\\n' \"$args\"\n"
        )
    };
    p.script("cache.sh", &echo("kb_cache", cache_code));
    p.script("mirror.sh", &echo("kb_mirror", 66));
    let chain = if mirror {
        r#"[{ tool = "kb_cache", map = { q = "query" } }, { tool = "kb_mirror" }]"#
    } else {
        r#"[{ tool = "kb_cache", map = { q = "query" } }]"#
    };
    p.fast_tools(&format!(
        r#"
[tools.search_kb]
description = "Search the knowledge base"
input_schema = {{ type = "object", properties = {{ q = {{ type = "string" }} }}, required = ["q"] }}
command = ["sh", "down.sh"]
fallback = {chain}

[tools.kb_cache]
description = "Cached answers"
input_schema = {{ type = "object", properties = {{ query = {{ type = "string" }} }}, required = ["query"] }}
command = ["sh", "cache.sh"]
stale = true

[tools.kb_mirror]
description = "A mirror"
input_schema = {{ type = "object", properties = {{ q = {{ type = "string" }} }}, required = ["q"] }}
command = ["sh", "mirror.sh"]
"#
    ));
    p.model_script(json!([
        {"tool_calls": [{"name": "search_kb", "args": {"q": "refund window"}}]},
        {"text": "done"}
    ]));
    p.task("", "Find the refund window.");
    p
}

#[test]
fn a_fallback_answer_is_disclosed_to_the_model_and_journaled() {
    let p = chain_project(0, false);
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    assert_eq!(
        tool_result(&show, "call_0_0"),
        (
            json!({
                "result": {"answer": "30 days", "got": {"query": "refund window"}},
                "via": "kb_cache",
                "stale": true
            }),
            false
        )
    );
    let row = journal(&show, "call_0_0");
    assert_eq!(
        (&row["status"], &row["via"], &row["attempts"], &row["tool"]),
        (
            &json!("ok"),
            &json!("kb_cache"),
            &json!(4),
            &json!("search_kb")
        )
    );
    let hops: Vec<(Value, Value)> = events(&show, "fallback")
        .iter()
        .map(|f| (f["from"].clone(), f["to"].clone()))
        .collect();
    assert_eq!(hops, vec![(json!("search_kb"), json!("kb_cache"))]);
    let log = std::fs::read_to_string(p.path().join("calls.log")).unwrap();
    assert_eq!(log, "search_kb\nsearch_kb\nsearch_kb\nkb_cache\n");
}

#[test]
fn a_chain_that_fails_entirely_names_every_tool_and_its_attempts() {
    let p = chain_project(69, true);
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    let (content, is_error) = tool_result(&show, "call_0_0");
    assert!(is_error);
    assert_eq!(
        error_fields(&content),
        json!({"error": "all_tools_failed", "class": "permanent", "retryable": false, "attempts": 7})
    );
    assert_eq!(
        content["message"],
        "search_kb: unavailable after 3 attempts; kb_cache: unavailable after 3 attempts; \
         kb_mirror: not_found after 1 attempt"
    );
    assert_hint(&content);
    let hops: Vec<(Value, Value)> = events(&show, "fallback")
        .iter()
        .map(|f| (f["from"].clone(), f["to"].clone()))
        .collect();
    assert_eq!(
        hops,
        vec![
            (json!("search_kb"), json!("kb_cache")),
            (json!("kb_cache"), json!("kb_mirror"))
        ]
    );
    assert_eq!(p.lines("calls.log"), 7);
    let row = journal(&show, "call_0_0");
    assert_eq!(
        (&row["status"], &row["via"]),
        (&json!("error"), &Value::Null)
    );
}

#[test]
fn a_permanent_failure_does_not_start_the_fallback_chain() {
    // not_found from the primary is an answer, not an outage: the cache must not
    // contradict it.
    let p = chain_project(0, false);
    p.script(
        "down.sh",
        "#!/bin/sh\ncat > /dev/null\necho search_kb >> calls.log\nexit 66\n",
    );
    let (_, show) = p.start(&[]);
    assert_eq!(tool_result(&show, "call_0_0").0["error"], "not_found");
    assert_eq!(events(&show, "fallback"), Vec::<Value>::new());
    assert_eq!(p.lines("calls.log"), 1);
}

// ---- 6. and 10. HTTP tools against a real local server -----------------------------------

/// A local HTTP server and a project whose tool `fetch` calls it.
struct HttpCase {
    rt: tokio::runtime::Runtime,
    server: MockServer,
    project: Project,
}

impl HttpCase {
    /// `tool` is the body of `[tools.fetch]` after its description and schema, with
    /// `{SERVER}` standing for the server's address.
    fn new(tool: &str, args: Value) -> HttpCase {
        let rt = runtime();
        let server = rt.block_on(MockServer::start());
        let project = Project::new();
        // Every argument is a declared property (URL placeholders must be).
        let properties: Vec<String> = args
            .as_object()
            .expect("object arguments")
            .keys()
            .map(|k| format!("{k} = {{}}"))
            .collect();
        project.fast_tools(&format!(
            "[tools.fetch]\ndescription = \"Fetch an item\"\n\
             input_schema = {{ type = \"object\", properties = {{ {} }} }}\n{}\n",
            properties.join(", "),
            tool.replace("{SERVER}", &server.uri())
        ));
        project.model_script(json!([
            {"tool_calls": [{"name": "fetch", "args": args}]},
            {"text": "done"}
        ]));
        project.task("", "Fetch it.");
        HttpCase {
            rt,
            server,
            project,
        }
    }

    /// A GET tool for `/item/{id}`, called with id "42".
    fn get(extra: &str) -> HttpCase {
        HttpCase::new(
            &format!("http = {{ method = \"GET\", url = \"{{SERVER}}/item/{{id}}\" }}\n{extra}"),
            json!({"id": "42"}),
        )
    }

    /// Answers requests to `/item/42` with `responses` in order, the last repeating.
    fn answer(&self, responses: Vec<ResponseTemplate>) {
        let last = responses.len() - 1;
        for (i, r) in responses.into_iter().enumerate() {
            let mock = Mock::given(method("GET"))
                .and(path("/item/42"))
                .respond_with(r);
            let mock = if i < last {
                mock.up_to_n_times(1).with_priority(1)
            } else {
                mock.with_priority(2)
            };
            self.rt.block_on(mock.mount(&self.server));
        }
    }

    fn start(&self) -> (crate::common::Run, Value) {
        self.project.start(&[])
    }

    fn requests(&self) -> Vec<wiremock::Request> {
        self.rt
            .block_on(self.server.received_requests())
            .expect("request recording is on")
    }
}

fn ok_item() -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({"id": 42, "name": "shoes"}))
}

#[test]
fn a_rate_limit_waits_exactly_as_long_as_retry_after_says() {
    let case = HttpCase::get("max_backoff = \"2s\"");
    case.answer(vec![
        ResponseTemplate::new(429).insert_header("Retry-After", "1"),
        ok_item(),
    ]);
    let (run, show) = case.start();
    run.expect_code(0);
    let backoffs = events(&show, "backoff");
    assert_eq!(backoffs.len(), 1, "{backoffs:#?}");
    assert_eq!(
        (&backoffs[0]["delay_ms"], &backoffs[0]["retry_after"]),
        (&json!(1000), &json!(true))
    );
    assert_eq!(
        tool_result(&show, "call_0_0"),
        (json!({"id": 42, "name": "shoes"}), false)
    );
    let row = journal(&show, "call_0_0");
    assert_eq!(
        (&row["status"], &row["attempts"]),
        (&json!("ok"), &json!(2))
    );
    let first = &events(&show, "tool_attempt")[0];
    assert_eq!(
        (&first["error"], &first["class"]),
        (&json!("rate_limited"), &json!("transient"))
    );
    assert_eq!(case.requests().len(), 2);
}

#[test]
fn retry_after_as_an_http_date_in_the_past_means_no_wait() {
    let case = HttpCase::get("");
    case.answer(vec![
        ResponseTemplate::new(503).insert_header("Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT"),
        ok_item(),
    ]);
    let (run, show) = case.start();
    run.expect_code(0);
    let b = &events(&show, "backoff")[0];
    assert_eq!(
        (&b["delay_ms"], &b["retry_after"]),
        (&json!(0), &json!(true))
    );
    assert_eq!(journal(&show, "call_0_0")["attempts"], 2);
}

#[test]
fn retry_after_as_a_future_http_date_beyond_max_retry_after_is_not_waited_for() {
    // An hour ahead, over the default max_retry_after (60s): no retry, rate_limited
    // with the server's delay (issue 12 item 10; it used to be cut to max_backoff).
    let case = HttpCase::get("max_backoff = \"300ms\"");
    let date = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(3600));
    case.answer(vec![
        ResponseTemplate::new(429).insert_header("Retry-After", date.as_str()),
        ok_item(),
    ]);
    let (run, show) = case.start();
    run.expect_code(0);
    assert_eq!(events(&show, "backoff"), Vec::<Value>::new());
    let content = tool_result(&show, "call_0_0").0;
    assert_eq!(content["error"], "rate_limited");
    let secs = content["retry_after_s"].as_u64().expect("retry_after_s");
    assert!((3590..=3600).contains(&secs), "{content}");
}

#[test]
fn http_503_is_retried_then_reported_unavailable() {
    let case = HttpCase::get("");
    case.answer(vec![
        ResponseTemplate::new(503).set_body_string("overloaded"),
    ]);
    let (run, show) = case.start();
    run.expect_code(0);
    assert_eq!(case.requests().len(), 3);
    let (content, is_error) = tool_result(&show, "call_0_0");
    assert!(is_error);
    assert_eq!(
        error_fields(&content),
        json!({"error": "unavailable", "class": "transient", "retryable": true, "attempts": 3})
    );
    assert!(
        content["message"].as_str().unwrap().contains("503"),
        "{content}"
    );
    assert_jittered_backoffs(&show, "fetch", 2);
}

#[test]
fn http_403_and_404_are_tried_once() {
    for (status, kind) in [(403, "permission_denied"), (404, "not_found")] {
        let case = HttpCase::get("");
        case.answer(vec![ResponseTemplate::new(status)]);
        let (run, show) = case.start();
        run.expect_code(0);
        assert_eq!(case.requests().len(), 1, "HTTP {status}");
        let (content, is_error) = tool_result(&show, "call_0_0");
        assert!(is_error, "HTTP {status}");
        assert_eq!(
            error_fields(&content),
            json!({"error": kind, "class": "permanent", "retryable": false, "attempts": 1}),
            "HTTP {status}"
        );
        assert_hint(&content);
        assert_eq!(
            events(&show, "backoff"),
            Vec::<Value>::new(),
            "HTTP {status}"
        );
    }
}

#[test]
fn a_slow_http_response_times_out_on_every_attempt() {
    let case = HttpCase::get("timeout = \"300ms\"\nattempts = 2\nidempotent = true");
    case.answer(vec![ok_item().set_delay(Duration::from_secs(20))]);
    let started = Instant::now();
    let (run, show) = case.start();
    run.expect_code(0);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let (content, is_error) = tool_result(&show, "call_0_0");
    assert!(is_error);
    assert_eq!(
        error_fields(&content),
        json!({"error": "timeout", "class": "transient", "retryable": true, "attempts": 2})
    );
    assert_eq!(content["message"], "fetch exceeded 300ms");
    assert_eq!(case.requests().len(), 2);
}

#[test]
fn a_post_tool_sends_the_arguments_as_json_and_header_secrets_stay_out_of_the_db() {
    let secret = "kb-token-7d1f0a93";
    let case = HttpCase::new(
        r#"http = { method = "POST", url = "{SERVER}/orders", headers = { Authorization = "Bearer ${AGENTRUN_E2E_KB_TOKEN}" } }"#,
        json!({"order_id": "ORD-1001", "qty": 2}),
    );
    case.rt.block_on(
        Mock::given(method("POST"))
            .and(path("/orders"))
            .and(body_json(json!({"order_id": "ORD-1001", "qty": 2})))
            .and(header("authorization", format!("Bearer {secret}").as_str()))
            .respond_with(ResponseTemplate::new(201).set_body_json(json!({"created": true})))
            .expect(1)
            .mount(&case.server),
    );
    let (run, show) = case.project.start(&[("AGENTRUN_E2E_KB_TOKEN", secret)]);
    run.expect_code(0);
    assert_eq!(
        tool_result(&show, "call_0_0"),
        (json!({"created": true}), false)
    );
    let db = String::from_utf8_lossy(&case.project.db_bytes()).into_owned();
    assert!(
        !db.contains(secret),
        "the header value reached the database"
    );
    assert!(!show.to_string().contains(secret));
}

#[test]
fn url_arguments_are_percent_encoded_into_the_path_and_query() {
    let case = HttpCase::new(
        r#"http = { method = "GET", url = "{SERVER}/search/{q}?lang={lang}" }"#,
        json!({"q": "a b/c?d#e", "lang": "en&x=1"}),
    );
    case.rt.block_on(
        Mock::given(method("GET"))
            .respond_with(ok_item())
            .mount(&case.server),
    );
    let (run, show) = case.start();
    run.expect_code(0);
    assert!(!tool_result(&show, "call_0_0").1);
    let requests = case.requests();
    assert_eq!(requests.len(), 1);
    let url = &requests[0].url;
    assert_eq!(url.path(), "/search/a%20b%2Fc%3Fd%23e");
    assert_eq!(url.query(), Some("lang=en%26x%3D1"));
}

// ---- 11. the demo: an outage of search_kb answered by kb_cache ---------------------------

#[test]
fn the_demo_outage_falls_back_to_the_stale_cache() {
    let root = env!("CARGO_MANIFEST_DIR");
    let p = Project::new();
    let out = std::process::Command::new(crate::common::bin())
        .current_dir(root)
        .env("AGENTRUN_DB", p.db())
        .env("KB_OUTAGE", "1")
        .args(["start", "examples/quickstart/task.md", "--json"])
        .output()
        .expect("spawn agentrun");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["status"], "completed");
    let show = p.show(v["run_id"].as_str().unwrap());

    let (content, is_error) = tool_result(&show, "call_1_0");
    assert!(!is_error);
    assert_eq!(
        (&content["via"], &content["stale"]),
        (&json!("kb_cache"), &json!(true))
    );
    assert!(
        content["result"]["snippets"][0]
            .as_str()
            .unwrap()
            .contains("30 days"),
        "{content}"
    );
    let row = journal(&show, "call_1_0");
    assert_eq!(
        (&row["tool"], &row["via"], &row["attempts"]),
        (&json!("search_kb"), &json!("kb_cache"), &json!(4))
    );
    let kb_attempts: Vec<(Value, Value)> = events(&show, "tool_attempt")
        .iter()
        .filter(|a| a["call_id"] == "call_1_0")
        .map(|a| (a["tool"].clone(), a["error"].clone()))
        .collect();
    assert_eq!(
        kb_attempts,
        vec![
            (json!("search_kb"), json!("unavailable")),
            (json!("search_kb"), json!("unavailable")),
            (json!("search_kb"), json!("unavailable")),
            (json!("kb_cache"), Value::Null),
        ]
    );
    assert_eq!(events(&show, "backoff").len(), 2);
    assert_eq!(events(&show, "fallback").len(), 1);
}

#[test]
fn the_human_trace_numbers_each_wait_by_the_attempt_it_precedes() {
    let p = exit_code_project(&[75, 0], "");
    let (_, show) = p.start(&[]);
    let id = show["id"].as_str().unwrap();
    let human = p.run(&["runs", "show", id]).expect_code(0).stdout.clone();
    assert!(
        human.contains("ms before attempt 2\n") || human.contains("ms before attempt 2 "),
        "{human}"
    );
}

/// Keeps [`FAST_DEFAULTS`] honest: the ceilings above assume these values.
#[test]
fn fast_defaults_are_what_the_ceilings_assume() {
    assert!(FAST_DEFAULTS.contains("backoff = \"10ms\""));
    assert!(FAST_DEFAULTS.contains("max_backoff = \"200ms\""));
    assert!(FAST_DEFAULTS.contains("attempts = 3"));
}
