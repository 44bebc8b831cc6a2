//! Issue 12 — trust: a run does only what its task allows, keeps no secret, repeats no
//! effect. Each test pins one hole found by trying agentrun as an attacker or a careless
//! operator would, through the real binary where the behaviour is visible there.

use crate::common::{Project, Run, events, journal, notes, runtime, tool_result};
use serde_json::{Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

/// A command tool `name` that appends its call id to `<name>.log`, then runs `body`.
fn logging_tool(p: &Project, name: &str, body: &str) -> String {
    p.script(
        &format!("{name}.sh"),
        &format!("#!/bin/sh\ncat > /dev/null\necho \"$AGENTRUN_CALL_ID\" >> {name}.log\n{body}\n"),
    );
    format!(
        "[tools.{name}]\ndescription = \"{name}\"\ninput_schema = {{ type = \"object\" }}\n\
         command = [\"sh\", \"{name}.sh\"]\n"
    )
}

fn calls(name: &str, n: usize) -> Value {
    let list: Vec<Value> = (0..n).map(|_| json!({"name": name})).collect();
    json!({ "tool_calls": list })
}

// ---- 1. only the tools offered in a step run ------------------------------------------

#[test]
fn a_tool_outside_the_task_subset_is_unknown_and_never_runs() {
    let p = Project::new();
    let tools = logging_tool(&p, "lookup", "echo '\"found\"'")
        + &logging_tool(&p, "wipe", "echo '\"wiped\"'");
    p.fast_tools(&tools);
    p.model_script(json!([
        {"tool_calls": [{"name": "wipe"}, {"name": "lookup"}]},
        {"text": "done"}
    ]));
    p.task("tools = [\"lookup\"]", "Look it up.");
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    let (content, is_error) = tool_result(&show, "call_0_0");
    assert!(is_error);
    assert_eq!(
        (&content["error"], &content["class"]),
        (&json!("unknown_tool"), &json!("malformed"))
    );
    assert_eq!(p.lines("wipe.log"), 0, "wipe must never run");
    assert_eq!(p.lines("lookup.log"), 1);
}

#[test]
fn a_withdrawn_tool_called_again_is_unknown_and_never_runs() {
    let p = Project::new();
    let tools = logging_tool(&p, "flaky", "exit 75")
        + "attempts = 1\n"
        + &logging_tool(&p, "steady", "echo '\"ok\"'");
    p.fast_tools(&format!("[policy]\ndisable_after = 1\n\n{tools}"));
    p.model_script(json!([calls("flaky", 1), calls("flaky", 1), {"text": "done"}]));
    p.task("", "Try.");
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    assert_eq!(tool_result(&show, "call_0_0").0["error"], "unavailable");
    assert_eq!(tool_result(&show, "call_1_0").0["error"], "unknown_tool");
    assert_eq!(p.lines("flaky.log"), 1, "a withdrawn tool never runs again");
}

// ---- 2. a tool that is not idempotent is never repeated after an unknown outcome ------

/// `charge` records a charge, then hangs past its 300 ms timeout; 3 attempts allowed.
fn charging_project(extra: &str) -> Project {
    let p = Project::new();
    let tools =
        logging_tool(&p, "charge", "sleep 5") + "timeout = \"300ms\"\nattempts = 3\n" + extra;
    p.fast_tools(&tools);
    p.model_script(json!([calls("charge", 1), {"text": "charged"}]));
    p.task("", "Charge the card.");
    p
}

#[test]
fn a_non_idempotent_tool_that_times_out_is_charged_once_and_escalated() {
    let p = charging_project("");
    let (run, show) = p.start(&[]);
    run.expect_code(3);
    assert_eq!(run.json()["status"], "escalated");
    assert_eq!(p.lines("charge.log"), 1, "one charge, never retried");
    let list = p
        .run(&["escalations", "list", "--json"])
        .expect_code(0)
        .json();
    assert_eq!(list[0]["kind"], "outcome_unknown", "{list:#}");
    assert_eq!(journal(&show, "call_0_0")["status"], "pending");
    // Resolved like a crash: the person says it did take effect; nothing runs again.
    let id = match &list[0]["id"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    p.run(&["escalations", "resolve", &id, "--reply", "charged once"])
        .expect_code(0);
    let run_id = run.json()["run_id"].as_str().unwrap().to_string();
    p.run(&["resume", &run_id, "--json"]).expect_code(0);
    assert_eq!(p.lines("charge.log"), 1);
    let show = p.show(&run_id);
    assert_eq!(
        tool_result(&show, "call_0_0").0,
        json!({"reported_by_person": "charged once"})
    );
}

#[test]
fn a_non_idempotent_timeout_with_tell_model_gives_the_model_outcome_unknown() {
    let p = charging_project("on_unknown = \"tell_model\"\n");
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    assert_eq!(p.lines("charge.log"), 1);
    let (content, is_error) = tool_result(&show, "call_0_0");
    assert!(is_error);
    assert_eq!(content["error"], "outcome_unknown");
    assert_eq!(content["attempts"], 1);
    assert!(
        content["message"]
            .as_str()
            .unwrap()
            .contains("exceeded 300ms"),
        "{content}"
    );
    assert_eq!(journal(&show, "call_0_0")["status"], "unknown");
    assert_eq!(events(&show, "note")[0]["kind"], "outcome_unknown");
    // The human view says what happened and why it was not retried.
    let id = run.json()["run_id"].as_str().unwrap().to_string();
    let human = p.run(&["runs", "show", &id]).expect_code(0).stdout.clone();
    assert!(
        human.contains(
            "charge exceeded 300ms (timeout); charge is not idempotent, so it was not \
             retried: it is unknown whether it took effect"
        ),
        "{human}"
    );
}

#[test]
fn a_non_idempotent_tool_is_retried_after_exit_75() {
    let p = Project::new();
    p.fast_tools(&logging_tool(&p, "charge", "exit 75"));
    p.model_script(json!([calls("charge", 1), {"text": "gave up"}]));
    p.task("", "Charge.");
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    assert_eq!(p.lines("charge.log"), 3, "75 proves nothing happened");
    assert_eq!(tool_result(&show, "call_0_0").0["error"], "unavailable");
}

/// A non-idempotent POST tool against a server answering `status` every time:
/// returns how many requests reached the server and the model's view of the result.
fn post_against(status: u16) -> (usize, Value) {
    let rt = runtime();
    let server = rt.block_on(MockServer::start());
    rt.block_on(
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(status))
            .mount(&server),
    );
    let p = Project::new();
    p.fast_tools(&format!(
        "[tools.pay]\ndescription = \"pay\"\ninput_schema = {{ type = \"object\" }}\n\
         http = {{ method = \"POST\", url = \"{}/pay\" }}\non_unknown = \"tell_model\"\n",
        server.uri()
    ));
    p.model_script(json!([calls("pay", 1), {"text": "done"}]));
    p.task("", "Pay.");
    let (_, show) = p.start(&[]);
    let sent = rt
        .block_on(server.received_requests())
        .expect("recording")
        .len();
    (sent, tool_result(&show, "call_0_0").0)
}

#[test]
fn a_non_idempotent_http_tool_is_not_retried_after_500_502_504() {
    for status in [500, 502, 504] {
        let (sent, content) = post_against(status);
        assert_eq!(
            (sent, content["error"].as_str()),
            (1, Some("outcome_unknown")),
            "HTTP {status}: {content}"
        );
    }
    for status in [429, 503] {
        let (sent, content) = post_against(status);
        assert_eq!(sent, 3, "HTTP {status} proves nothing happened: {content}");
    }
}

// ---- 3. AGENTRUN_CALL_ID is an idempotency key across runs and databases --------------

/// A project whose tool `pay` logs `$AGENTRUN_CALL_ID` to keys.log: it exits 75 on its
/// first attempt, kills agentrun (its parent) while a `die` file exists, else succeeds.
fn key_project() -> Project {
    let p = Project::new();
    p.script(
        "pay.sh",
        "#!/bin/sh\ncat > /dev/null\necho \"$AGENTRUN_CALL_ID\" >> keys.log\n\
         if [ ! -f tried ]; then touch tried; exit 75; fi\n\
         if [ -f die ]; then rm -f die; kill -9 \"$PPID\"; exit 0; fi\necho '\"paid\"'\n",
    );
    p.fast_tools(
        "[tools.pay]\ndescription = \"pay\"\ninput_schema = { type = \"object\" }\n\
         command = [\"sh\", \"pay.sh\"]\nidempotent = true\n\
         # The tool kills agentrun (its parent) to stand for a crash: a sandboxed tool may not.\n\
         sandbox = \"off\"\n",
    );
    p.model_script(json!([calls("pay", 1), {"text": "paid"}]));
    p.task("", "Pay.");
    p
}

fn keys(p: &Project) -> Vec<String> {
    std::fs::read_to_string(p.path().join("keys.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn agentrun_call_id_is_unique_across_runs_and_databases_and_stable_across_retries() {
    let a = key_project();
    let first = a.run(&["start", "task.md", "--json"]).expect_code(0).json();
    std::fs::remove_file(a.path().join("tried")).expect("reset");
    a.run(&["start", "task.md", "--json"]).expect_code(0);
    let b = key_project();
    b.run(&["start", "task.md", "--json"]).expect_code(0);
    let (ka, kb) = (keys(&a), keys(&b));
    assert_eq!(ka.len(), 4, "two attempts in each of two runs: {ka:?}");
    assert_eq!(ka[0], ka[1], "a retry keeps its key");
    assert_ne!(ka[0], ka[2], "another run, another key");
    assert_ne!(ka[0], kb[0], "another database, another key");
    let run_id = first["run_id"].as_str().unwrap();
    assert!(
        ka[0].starts_with(&format!("{run_id}:")) && ka[0].ends_with(":call_0_0"),
        "{ka:?}"
    );
}

#[test]
fn agentrun_call_id_is_stable_across_a_resume() {
    let p = key_project();
    p.write("die", "");
    assert_eq!(p.run(&["start", "task.md"]).code, -1, "killed by its tool");
    let id = p.only_run();
    p.run(&["resume", &id, "--json"]).expect_code(0);
    let k = keys(&p);
    assert_eq!(k.len(), 3, "{k:?}");
    assert!(k.iter().all(|x| *x == k[0]), "one key for one call: {k:?}");
}

// ---- 4. secrets never follow a redirect to another origin -----------------------------

/// Two local servers: `home` (configured) and `elsewhere` (only named in redirects).
struct Servers {
    rt: tokio::runtime::Runtime,
    home: MockServer,
    elsewhere: MockServer,
}

impl Servers {
    fn new() -> Servers {
        let rt = runtime();
        let home = rt.block_on(MockServer::start());
        let elsewhere = rt.block_on(MockServer::start());
        rt.block_on(
            Mock::given(wiremock::matchers::any())
                .respond_with(ResponseTemplate::new(200).set_body_json(json!({"stolen": true})))
                .mount(&elsewhere),
        );
        Servers {
            rt,
            home,
            elsewhere,
        }
    }

    /// `home` answers GET `from` with a `status` redirect to `to`.
    fn redirect(&self, from: &str, status: u16, to: &str) {
        self.rt.block_on(
            Mock::given(method("GET"))
                .and(wiremock::matchers::path(from))
                .respond_with(ResponseTemplate::new(status).insert_header("Location", to))
                .mount(&self.home),
        );
    }

    fn hits(&self, server: &MockServer) -> usize {
        self.rt
            .block_on(server.received_requests())
            .expect("recording")
            .len()
    }

    /// Runs a project whose idempotent GET tool `fetch` calls `home` at `/a` with an
    /// `x-api-key: ${KB_TOKEN}` header; returns the model's view of the result.
    fn fetch(&self) -> (Project, Value) {
        let p = Project::new();
        p.fast_tools(&format!(
            "[tools.fetch]\ndescription = \"fetch\"\ninput_schema = {{ type = \"object\" }}\n\
             http = {{ method = \"GET\", url = \"{}/a\", headers = {{ x-api-key = \"${{KB_TOKEN}}\" }} }}\n\
             idempotent = true\n",
            self.home.uri()
        ));
        p.model_script(json!([calls("fetch", 1), {"text": "done"}]));
        p.task("", "Fetch.");
        let (run, show) = p.start(&[("KB_TOKEN", "kb-secret-123")]);
        run.expect_code(0);
        let content = tool_result(&show, "call_0_0").0;
        (p, content)
    }
}

#[test]
fn an_http_tool_never_follows_a_redirect_to_another_origin() {
    let s = Servers::new();
    let target = format!("{}/steal?x=1", s.elsewhere.uri());
    s.redirect("/a", 307, &target);
    let (p, content) = s.fetch();
    assert_eq!(s.hits(&s.elsewhere), 0, "nothing reached the other origin");
    assert_eq!(s.hits(&s.home), 1, "permanent: tried once");
    assert_eq!(
        (&content["error"], &content["class"]),
        (&json!("redirect"), &json!("permanent"))
    );
    let message = content["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("{}/steal", s.elsewhere.uri())),
        "{message}"
    );
    // `runs show` reads clearly.
    let human = p.run(&["runs", "show", &p.only_run()]);
    human.expect_code(0);
    assert!(
        human.stdout.contains("redirected to another origin"),
        "{}",
        human.stdout
    );
}

#[test]
fn a_same_origin_redirect_is_followed_and_a_loop_is_permanent() {
    let s = Servers::new();
    s.redirect("/a", 302, "/b");
    s.rt.block_on(
        Mock::given(method("GET"))
            .and(wiremock::matchers::path("/b"))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({"ok": 1})))
            .mount(&s.home),
    );
    assert_eq!(s.fetch().1, json!({"ok": 1}));

    let l = Servers::new();
    l.redirect("/a", 302, "/c");
    l.redirect("/c", 302, "/a");
    let content = l.fetch().1;
    assert_eq!(content["error"], "redirect", "{content}");
    assert_eq!(
        l.hits(&l.home),
        2,
        "one attempt: /a then /c, then the loop is seen"
    );
}

#[test]
fn a_provider_base_url_redirecting_elsewhere_gets_neither_key_nor_transcript() {
    let s = Servers::new();
    s.rt.block_on(
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(307).insert_header(
                "Location",
                format!("{}/v1/chat/completions", s.elsewhere.uri()),
            ))
            .mount(&s.home),
    );
    let p = Project::new();
    p.write("tools.toml", "");
    p.write(
        "task.md",
        "+++\nmodel = \"openai:gpt-4o-mini\"\n+++\nSay hi.\n",
    );
    let run = p.run_env(
        &["start", "task.md", "--json"],
        &[
            ("OPENAI_BASE_URL", &format!("{}/v1", s.home.uri())),
            ("OPENAI_API_KEY", "sk-redirect-secret"),
        ],
    );
    run.expect_code(1);
    assert_eq!(s.hits(&s.elsewhere), 0, "the key went nowhere else");
    assert_eq!(s.hits(&s.home), 1, "permanent: not retried");
    assert!(run.stdout.contains("another origin"), "{run}");
}

// ---- 5. secrets are redacted before anything is stored, shown or sent -----------------

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[test]
fn a_header_secret_echoed_in_an_error_body_is_never_stored_or_shown() {
    let s = Servers::new();
    s.rt.block_on(
        Mock::given(method("GET"))
            .respond_with(
                ResponseTemplate::new(400)
                    .set_body_string("bad request; you sent x-api-key: kb-secret-123"),
            )
            .mount(&s.home),
    );
    let (p, content) = s.fetch();
    assert_eq!(
        content["message"],
        "fetch: HTTP 400 Bad Request: bad request; you sent x-api-key: [redacted]"
    );
    assert!(
        !contains(&p.db_bytes(), "kb-secret-123"),
        "the database holds the secret"
    );
    let human = p.run(&["runs", "show", &p.only_run()]);
    assert!(!human.stdout.contains("kb-secret-123"), "{human}");
}

#[test]
fn credentials_in_a_provider_base_url_are_never_stored_or_shown() {
    let s = Servers::new();
    // A proxy that echoes what it got: the userinfo as written, and the Basic header
    // an HTTP client makes of it (base64 of `alice:pw-5ecret-77`).
    s.rt.block_on(
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(400).set_body_json(json!({"error": {
                "message": "denied alice:pw-5ecret-77 (Authorization: Basic YWxpY2U6cHctNWVjcmV0LTc3)"
            }})))
            .mount(&s.home),
    );
    let p = Project::new();
    p.write("tools.toml", "");
    p.write(
        "task.md",
        "+++\nmodel = \"openai:gpt-4o-mini\"\n+++\nSay hi.\n",
    );
    let base = s
        .home
        .uri()
        .replace("http://", "http://alice:pw-5ecret-77@");
    let run = p.run_env(
        &["start", "task.md", "--json"],
        &[("OPENAI_BASE_URL", &format!("{base}/v1"))],
    );
    run.expect_code(1);
    assert!(run.stdout.contains("denied [redacted]"), "{run}");
    let id = run.json()["run_id"].as_str().unwrap().to_string();
    let show = p.run(&["runs", "show", &id]);
    let show_json = p.run(&["runs", "show", &id, "--json"]);
    let export = p.run(&["runs", "export", &id]);
    for secret in ["pw-5ecret-77", "YWxpY2U6cHctNWVjcmV0LTc3"] {
        for text in [
            &run.stdout,
            &run.stderr,
            &show.stdout,
            &show_json.stdout,
            &export.stdout,
        ] {
            assert!(!text.contains(secret), "`{secret}` shown:\n{text}");
        }
        assert!(!contains(&p.db_bytes(), secret), "`{secret}` stored");
    }
    // A base URL that is not a URL is named without its credentials.
    let bad = p.run_env(
        &["start", "task.md"],
        &[("OPENAI_BASE_URL", "http://alice:pw-5ecret-77@[::1")],
    );
    assert!(!bad.stderr.contains("pw-5ecret-77"), "{bad}");
    assert!(bad.stderr.contains("[redacted]@"), "{bad}");
}

#[test]
fn a_secret_a_command_tool_was_given_is_redacted_from_its_output() {
    let p = Project::new();
    p.fast_tools(
        "[tools.deploy]\ndescription = \"deploy\"\ninput_schema = { type = \"object\" }\n\
         command = [\"sh\", \"-c\", \"cat >/dev/null; echo \\\"token is $DEPLOY_TOKEN, dsn $SENTRY_DSN\\\"\"]\n\
         env = [\"DEPLOY_TOKEN\"]\nset = { SENTRY_DSN = \"https://pub:set-secret-77@sentry.example/1\" }\n",
    );
    p.model_script(json!([calls("deploy", 1), {"text": "done"}]));
    p.task("", "Deploy.");
    let (run, show) = p.start(&[("DEPLOY_TOKEN", "dt-secret-456")]);
    run.expect_code(0);
    assert_eq!(
        tool_result(&show, "call_0_0").0,
        json!("token is [redacted], dsn [redacted]")
    );
    // (A literal in tools.toml, like the `set` value here, is part of the run's config
    // snapshot; `tools check` warns about it. A value from the environment never is.)
    assert!(!contains(&p.db_bytes(), "dt-secret-456"));
}

// ---- 6. the child's environment is an allow-list --------------------------------------

/// The names of the variables a command tool sees, with `extra` in its definition.
fn child_env_names(extra: &str) -> Vec<String> {
    let p = Project::new();
    p.fast_tools(&format!(
        "[tools.envdump]\ndescription = \"env\"\ninput_schema = {{ type = \"object\" }}\n\
         command = [\"sh\", \"-c\", \"cat >/dev/null; env | cut -d= -f1 | sort | tr '\\\\n' ' '\"]\n{extra}"
    ));
    p.model_script(json!([calls("envdump", 1), {"text": "done"}]));
    p.task("", "Dump.");
    let (_, show) = p.start(&[
        ("GITHUB_PAT", "ghp_x1"),
        ("DATABASE_URL", "postgres://u:pw@h/db"),
        ("HTTPS_PROXY", "http://pu:pp@proxy:3128"),
        ("MYSQL_PWD", "pw1"),
        ("SENTRY_DSN", "https://k@sentry.io/1"),
        ("SSH_AUTH_SOCK", "/tmp/agent"),
        ("EDITOR", "vi"),
        ("LC_ALL", "C"),
    ]);
    let text = tool_result(&show, "call_0_0").0;
    text.as_str()
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_command_tool_gets_only_the_core_set_and_what_it_lists() {
    let names = child_env_names("env = [\"EDITOR\"]\nset = { MODE = \"test\" }\n");
    for leak in [
        "GITHUB_PAT",
        "DATABASE_URL",
        "HTTPS_PROXY",
        "MYSQL_PWD",
        "SENTRY_DSN",
        "SSH_AUTH_SOCK",
        "AGENTRUN_DB",
    ] {
        assert!(
            !names.contains(&leak.to_string()),
            "{leak} leaked: {names:?}"
        );
    }
    for kept in ["PATH", "LC_ALL", "EDITOR", "MODE", "AGENTRUN_CALL_ID"] {
        assert!(
            names.contains(&kept.to_string()),
            "{kept} missing: {names:?}"
        );
    }
}

#[test]
fn inherit_all_still_removes_secret_names_and_credential_urls() {
    let names = child_env_names("inherit = \"all\"\n");
    assert!(names.contains(&"EDITOR".to_string()), "{names:?}");
    for leak in [
        "GITHUB_PAT",
        "DATABASE_URL",
        "HTTPS_PROXY",
        "MYSQL_PWD",
        "SENTRY_DSN",
        "SSH_AUTH_SOCK",
    ] {
        assert!(
            !names.contains(&leak.to_string()),
            "{leak} leaked: {names:?}"
        );
    }
}

// ---- 10. Retry-After is a floor; above max_retry_after there is no retry --------------

#[test]
fn retry_after_is_never_shortened_by_max_backoff() {
    let s = Servers::new();
    s.rt.block_on(
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(429).insert_header("Retry-After", "1"))
            .up_to_n_times(1)
            .with_priority(1)
            .mount(&s.home),
    );
    s.rt.block_on(
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({"ok": 1})))
            .with_priority(2)
            .mount(&s.home),
    );
    let p = Project::new();
    p.write(
        "tools.toml",
        &format!(
            "[defaults]\nbackoff = \"10ms\"\nmax_backoff = \"50ms\"\n\n\
             [tools.fetch]\ndescription = \"fetch\"\ninput_schema = {{ type = \"object\" }}\n\
             http = {{ method = \"GET\", url = \"{}/a\" }}\nidempotent = true\n",
            s.home.uri()
        ),
    );
    p.model_script(json!([calls("fetch", 1), {"text": "done"}]));
    p.task("", "Fetch.");
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    let b = &events(&show, "backoff")[0];
    assert_eq!(
        (&b["delay_ms"], &b["retry_after"]),
        (&json!(1000), &json!(true))
    );
}

#[test]
fn retry_after_above_max_retry_after_fails_rate_limited_at_once() {
    let s = Servers::new();
    s.rt.block_on(
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(429).insert_header("Retry-After", "120"))
            .mount(&s.home),
    );
    let (_, content) = s.fetch();
    assert_eq!(s.hits(&s.home), 1);
    assert_eq!(
        (&content["error"], &content["retry_after_s"]),
        (&json!("rate_limited"), &json!(120))
    );
}

// ---- 8. no terminal escape reaches the person deciding --------------------------------

#[test]
fn escapes_in_tool_output_and_questions_never_reach_a_human_view() {
    let p = Project::new();
    p.fast_tools(
        "[tools.lookup]\ndescription = \"lookup\"\ninput_schema = { type = \"object\" }\n\
         command = [\"sh\", \"-c\", \"cat >/dev/null; printf 'ok\\\\033]52;c;ZXZpbA==\\\\007 done'\"]\n",
    );
    p.model_script(json!([
        calls("lookup", 1),
        {"tool_calls": [{"name": "ask_user", "args": {"question": "Approve?\u{1b}[2J\u{1b}]0;pwned\u{7}"}}]},
        {"text": "done"}
    ]));
    p.task("", "Look.");
    let run = p.run(&["start", "task.md", "--json"]);
    run.expect_code(3);
    let id = p.only_run();
    let human = [
        p.run(&["runs", "show", &id]),
        p.run(&["escalations", "list"]),
        p.run(&["escalations", "show", "1"]),
    ];
    for view in &human {
        view.expect_code(0);
        assert!(
            !view.stdout.contains('\u{1b}') && !view.stdout.contains('\u{7}'),
            "{view}"
        );
    }
    assert!(human[0].stdout.contains("ok"), "{}", human[0]);
    assert!(human[2].stdout.contains("Approve?"), "{}", human[2]);
    // --json keeps the data as it was.
    let show = p.show(&id);
    assert_eq!(
        tool_result(&show, "call_0_0").0,
        json!("ok\u{1b}]52;c;ZXZpbA==\u{7} done")
    );
}

// ---- 7. a model cannot exhaust the machine or store what cannot be read back ----------

#[test]
fn calls_beyond_64_in_one_turn_are_answered_malformed_and_never_run() {
    let p = Project::new();
    p.fast_tools(&(logging_tool(&p, "count", "echo 1") + "idempotent = true\n"));
    let many: Vec<Value> = (0..70)
        .map(|i| json!({"name": "count", "args": {"i": i}}))
        .collect();
    p.model_script(json!([{ "tool_calls": many }, {"text": "done"}]));
    p.task("", "Count.");
    let (run, show) = p.start(&[]);
    assert_eq!(p.lines("count.log"), 64);
    let (content, is_error) = tool_result(&show, "call_0_69");
    assert!(is_error);
    assert_eq!(
        (&content["error"], &content["class"]),
        (&json!("too_many_calls"), &json!("malformed"))
    );
    assert_eq!(
        content["message"],
        "this turn asked for 70 tool calls and one turn may make at most 64, so calls 65 \
         to 70 were not made (this is call 70); ask for it again in a later turn"
    );
    assert_eq!(tool_result(&show, "call_0_63").0, json!(1));
    // Six identical refusals are one oversized turn, not a loop: no nudge, no `stuck`
    // escalation, and the run ends with the model's answer.
    run.expect_code(0);
    assert_eq!(run.json()["status"], "completed", "{run}");
    assert!(notes(&show).is_empty(), "{:?}", notes(&show));
    assert!(events(&show, "nudge").is_empty());
}

#[test]
fn duplicate_tool_call_ids_refuse_the_response_and_nothing_runs() {
    let p = Project::new();
    p.fast_tools(&logging_tool(&p, "pay", "echo paid"));
    p.model_script(json!([
        {"tool_calls": [{"id": "same", "name": "pay"}, {"id": "same", "name": "pay"}]},
        {"text": "done"}
    ]));
    p.task("", "Pay.");
    let run = p.run(&["start", "task.md", "--json"]);
    run.expect_code(1);
    assert!(run.stdout.contains("share the id `same`"), "{run}");
    assert_eq!(p.lines("pay.log"), 0);
    p.run(&["runs", "show", &p.only_run()]).expect_code(0);
}

/// An OpenAI-style server answering every POST with `body`.
fn openai_answering(body: ResponseTemplate) -> (Servers, Project, crate::common::Run) {
    let s = Servers::new();
    s.rt.block_on(
        Mock::given(method("POST"))
            .respond_with(body)
            .mount(&s.home),
    );
    let p = Project::new();
    p.fast_tools(&logging_tool(&p, "t", "echo ok"));
    p.write("task.md", "+++\nmodel = \"openai:gpt-4o-mini\"\n+++\nGo.\n");
    let run = p.run_env(
        &["start", "task.md", "--json"],
        &[
            ("OPENAI_BASE_URL", &format!("{}/v1", s.home.uri())),
            ("OPENAI_API_KEY", "sk-test"),
        ],
    );
    (s, p, run)
}

#[test]
fn arguments_nested_127_deep_are_refused_and_the_run_stays_readable() {
    let args = format!("{}1{}", "[".repeat(127), "]".repeat(127));
    let body = json!({
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [{"id": "c1", "type": "function",
                            "function": {"name": "t", "arguments": args}}]}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1}
    });
    let (_s, p, run) = openai_answering(ResponseTemplate::new(200).set_body_json(body));
    run.expect_code(1);
    assert!(run.stdout.contains("nest 127 levels deep"), "{run}");
    assert_eq!(p.lines("t.log"), 0);
    let id = p.only_run();
    p.run(&["runs", "show", &id]).expect_code(0);
    p.run(&["runs", "show", &id, "--json"]).expect_code(0);
}

#[test]
fn a_tool_result_nested_127_deep_is_a_tool_bug_and_the_run_stays_readable() {
    let p = Project::new();
    let deep = format!("{}1{}", "[".repeat(127), "]".repeat(127));
    p.fast_tools(&logging_tool(&p, "deep", &format!("echo '{deep}'")));
    p.model_script(json!([calls("deep", 1), {"text": "done"}]));
    p.task("", "Go deep.");
    let (run, show) = p.start(&[]);
    run.expect_code(0);
    let (content, is_error) = tool_result(&show, "call_0_0");
    assert!(is_error);
    assert_eq!(content["error"], "tool_bug", "{content}");
    let id = run.json()["run_id"].as_str().unwrap().to_string();
    p.run(&["runs", "show", &id]).expect_code(0);
    p.run(&["resume", &id, "--json"]).expect_code(0);
}

#[test]
fn a_response_body_over_16_mib_is_refused_unread() {
    let huge = format!("{{\"pad\": \"{}\"}}", "x".repeat(17 * 1024 * 1024));
    let (_s, p, run) =
        openai_answering(ResponseTemplate::new(200).set_body_raw(huge, "application/json"));
    run.expect_code(1);
    assert!(run.stdout.contains("larger than 16 MiB"), "{run}");
    assert!(
        p.db_bytes().len() < 4 * 1024 * 1024,
        "nothing of it was stored"
    );
}

// ---- 9. the database is private and never reached through a symlink ------------------

#[test]
fn the_database_folder_is_0700_its_file_0600_and_a_symlink_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let p = Project::new();
    p.fast_tools("");
    p.model_script(json!([{"text": "done"}]));
    p.task("", "Hi.");
    let db = p.path().join("private/dir/runs.db");
    let db_s = db.to_string_lossy().to_string();
    p.run_env(&["start", "task.md"], &[("AGENTRUN_DB", &db_s)])
        .expect_code(0);
    let mode = |path: &std::path::Path| {
        std::fs::metadata(path).expect("stat").permissions().mode() & 0o777
    };
    assert_eq!(mode(&p.path().join("private")), 0o700);
    assert_eq!(mode(&db), 0o600);
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    p.run_env(&["runs", "list"], &[("AGENTRUN_DB", &db_s)])
        .expect_code(0);
    assert_eq!(mode(&db), 0o600, "an existing 0666 file is tightened");

    let link = p.path().join("link.db");
    std::os::unix::fs::symlink(p.path().join("elsewhere.db"), &link).expect("symlink");
    let run = p.run_env(
        &["start", "task.md"],
        &[("AGENTRUN_DB", &link.to_string_lossy())],
    );
    assert_ne!(run.code, 0, "{run}");
    assert!(run.stderr.contains("symbolic link"), "{run}");
    assert!(!p.path().join("elsewhere.db").exists());
}

// ---- 9. a timeout kills every descendant, `setsid` escapees too -----------------------

/// The session ids of every process we can see.
fn sessions() -> Vec<(i32, i32)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let rest = &stat[stat.rfind(')').unwrap() + 1..];
        let sid = rest.split_whitespace().nth(3).unwrap().parse().unwrap();
        out.push((pid, sid));
    }
    out
}

#[test]
fn a_setsid_grandchild_dies_with_its_timed_out_tool() {
    let p = Project::new();
    // `setsid` is not a group leader here, so it execs in place: `$!` is the new
    // session's leader, which then starts `sleep 30` inside that session.
    let body = "setsid sh -c 'sleep 30; touch marker' & echo $! > grandchild.pid
sleep 5";
    let tools = logging_tool(&p, "slow", body) + "timeout = \"300ms\"\n";
    p.fast_tools(&tools);
    p.model_script(json!([calls("slow", 1), {"text": "done"}]));
    p.task("", "Run it.");
    let (run, _) = p.start(&[]);
    // Not idempotent by default: a timeout is an unknown outcome, escalated.
    run.expect_code(3);
    let text = std::fs::read_to_string(p.path().join("grandchild.pid")).unwrap();
    let sid: i32 = text.trim().parse().unwrap();
    // Killed and reaped before agentrun exited: no process of that session is left,
    // not even a zombie.
    // SAFETY: kill(2) with signal 0 only checks for existence.
    let alive = unsafe { libc::kill(sid, 0) } == 0;
    assert!(!alive, "the setsid grandchild {sid} survived");
    let left: Vec<i32> = sessions()
        .into_iter()
        .filter(|&(_, s)| s == sid)
        .map(|(p, _)| p)
        .collect();
    assert!(
        left.is_empty(),
        "processes of the escaped session survived: {left:?}"
    );
}

// ---- 9. a tool's leftovers die and are reaped, even once their parent has exited -----

/// The processes started with `AGENTRUN_CALL_ID=key` in their environment.
fn carrying(key: &str) -> Vec<i32> {
    let want = format!("AGENTRUN_CALL_ID={key}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|env| env.split(|b| *b == 0).any(|v| v == want.as_bytes()))
                .unwrap_or(false)
        })
        .collect()
}

/// The zombie children of `parent`.
fn zombies_of(parent: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let mut rest = stat[stat.rfind(')').unwrap() + 1..].split_whitespace();
        let state = rest.next().unwrap();
        let ppid: i32 = rest.next().unwrap().parse().unwrap();
        if ppid == parent && state == "Z" {
            out.push(pid);
        }
    }
    out
}

/// Runs `spawner` (a tool with `body`, plus `extra` tools.toml lines), then a `gate`
/// tool that holds agentrun open until the test has looked at the process table: by
/// then the spawner's call is over, and nothing it started may be left — not alive, not
/// a zombie of agentrun (which is their subreaper, so only it can reap them).
fn nothing_is_left_after(body: &str, extra: &str, first_result: &str) {
    let p = Project::new();
    let tools = logging_tool(&p, "spawner", body)
        + extra
        + &logging_tool(
            &p,
            "gate",
            "mkfifo go; touch gate.started; cat go > /dev/null; echo open",
        );
    p.fast_tools(&tools);
    p.model_script(json!([calls("spawner", 1), calls("gate", 1), {"text": "done"}]));
    p.task("", "Run it.");
    let agent = p
        .command(&["start", "task.md", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let agent_pid = i32::try_from(agent.id()).unwrap();
    let started = p.path().join("gate.started");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !started.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the gate tool never ran"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let key = std::fs::read_to_string(p.path().join("spawner.log")).unwrap();
    let key = key.trim();
    let daemon = std::fs::read_to_string(p.path().join("daemon.pid")).unwrap();
    let daemon = daemon.trim();
    let daemon_left = std::path::Path::new(&format!("/proc/{daemon}")).exists();
    let alive = carrying(key);
    let zombies = zombies_of(agent_pid);
    // Let the run finish before asserting, so a failure leaves nothing running either.
    std::fs::write(p.path().join("go"), "go").unwrap();
    let run = Run::from_output(agent.wait_with_output().unwrap());
    run.expect_code(0);
    assert!(
        !daemon_left,
        "the double-forked daemon {daemon} is still there\n{run}"
    );
    assert!(
        alive.is_empty(),
        "processes of call {key} survived: {alive:?}\n{run}"
    );
    assert!(
        zombies.is_empty(),
        "agentrun left zombies: {zombies:?}\n{run}"
    );
    let show = p.show(&p.only_run());
    let (first, _) = tool_result(&show, "call_0_0");
    assert!(first.to_string().contains(first_result), "{first}");
}

/// `( setsid sleep & )`: the subshell exits at once, so the daemon is an orphan handed to
/// agentrun, outside the tool's process group and no longer below the tool.
const DOUBLE_FORK: &str = "( setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > daemon.pid )";

#[test]
fn a_double_forked_daemon_and_a_background_job_die_when_their_tool_exits() {
    // The background job stays in the tool's group: killed with it before, but then
    // left a zombie of agentrun until agentrun exited.
    nothing_is_left_after(
        &format!("{DOUBLE_FORK}\nsleep 300 </dev/null >/dev/null 2>&1 &\necho '\"spawned\"'"),
        "",
        "\"spawned\"",
    );
}

#[test]
fn a_daemon_whose_parent_exited_before_the_timeout_dies_with_the_timed_out_tool() {
    nothing_is_left_after(
        &format!("{DOUBLE_FORK}\nexec sleep 300"),
        "timeout = \"500ms\"\nidempotent = true\nattempts = 1\n",
        "\"error\":\"timeout\"",
    );
}

// ---- 9. `tools check` warns about credentials written into tools.toml ----------------

#[test]
fn tools_check_warns_about_literal_credentials_and_keeps_exit_0() {
    let p = Project::new();
    p.write(
        "tools.toml",
        "[tools.kb]\ndescription = \"kb\"\ninput_schema = { type = \"object\" }\n\
         http = { url = \"https://bob:hunter22@kb.example/q\", headers = { Authorization = \"Bearer sk-live-1234\", x-env = \"${KB_ENV}\", x-trace = \"on\" } }\n\n\
         [tools.deploy]\ndescription = \"deploy\"\ninput_schema = { type = \"object\" }\n\
         command = [\"cat\"]\nset = { DEPLOY_TOKEN = \"tok-5678\", PATH = \"/usr/bin\", MODE = \"prod\" }\n\n\
         [tools.fine]\ndescription = \"fine\"\ninput_schema = { type = \"object\" }\n\
         http = { url = \"https://kb.example/q\", headers = { Authorization = \"Bearer ${KB_TOKEN}\" } }\n",
    );
    let r = p.run_env(&["tools", "check"], &[("KB_TOKEN", "t"), ("KB_ENV", "e")]);
    r.expect_code(0);
    let warnings: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("agentrun: warning:"))
        .collect();
    for want in [
        "agentrun: warning: tools.toml: tool `kb`: url holds a literal credential",
        "agentrun: warning: tools.toml: tool `kb`: headers.Authorization holds a literal credential; use `${VAR}`",
        "agentrun: warning: tools.toml: tool `deploy`: set.DEPLOY_TOKEN holds a literal credential",
    ] {
        assert!(
            warnings.iter().any(|l| l.starts_with(want)),
            "`{want}` missing:\n{r}"
        );
    }
    assert_eq!(warnings.len(), 3, "nothing else is flagged:\n{r}");
    assert!(r.stdout.contains("ok, 3 tools"), "{r}");
}

// ---- 9. approval patterns ignore case and whitespace runs -----------------------------

#[test]
fn an_approval_pattern_catches_drop_table_with_a_double_space() {
    let p = Project::new();
    p.write(
        "tools.toml",
        "[policy]\napproval_patterns = [\"drop table\", 're:rm\\s+-(r\\s*-?f|f\\s*-?r)']\n\
         [tools.sql]\ndescription = \"s\"\ninput_schema = { type = \"object\" }\n\
         command = [\"sh\", \"-c\", \"cat > /dev/null; echo ran >> sql.log\"]\n",
    );
    p.model_script(json!([
        {"tool_calls": [{"name": "sql", "args": {"q": "DROP  TABLE users"}}]},
        {"text": "done"}
    ]));
    p.task("", "Clean up.");
    let start = p.run(&["start", "task.md", "--json"]);
    start.expect_code(3);
    assert_eq!(start.json()["status"], "awaiting_approval", "{start}");
    assert!(
        !p.path().join("sql.log").exists(),
        "the call ran before approval"
    );
}

// ---- 9. a program edited between approval and resume is named on resume -------------

/// A run paused for approval of `send`, approved, and `send.sh` edited since.
fn edited_after_approval() -> (Project, String) {
    let p = Project::new();
    p.script("send.sh", "#!/bin/sh\ncat > /dev/null\necho sent\n");
    p.write(
        "tools.toml",
        "[tools.send]\ndescription = \"s\"\ninput_schema = { type = \"object\" }\n\
         command = [\"sh\", \"send.sh\"]\napproval = \"always\"\n",
    );
    p.model_script(json!([
        {"tool_calls": [{"name": "send", "args": {}}]},
        {"text": "done"}
    ]));
    p.task("", "Send it.");
    let start = p.run(&["start", "task.md", "--json"]);
    start.expect_code(3);
    let v = start.json();
    let (run, esc) = (
        v["run_id"].as_str().expect("run id").to_string(),
        v["escalation_id"]
            .as_str()
            .expect("escalation id")
            .to_string(),
    );
    p.run(&["escalations", "resolve", &esc, "--approve"])
        .expect_code(0);
    p.script("send.sh", "#!/bin/sh\ncat > /dev/null\necho edited\n");
    (p, run)
}

#[test]
fn resume_under_quiet_keeps_the_program_change_notice_off_stderr() {
    // `--quiet` means nothing on stderr but errors: this notice is not one.
    let (p, run) = edited_after_approval();
    let r = p.run(&["--quiet", "resume", &run]);
    r.expect_code(0);
    assert_eq!(r.stderr, "", "{r}");
    assert_eq!(r.stdout, "done\n", "{r}");
}

#[test]
fn resume_names_a_tool_script_edited_after_approval() {
    let (p, run) = edited_after_approval();
    let r = p.run(&["resume", &run]);
    r.expect_code(0);
    let line = r
        .stderr
        .lines()
        .find(|l| l.contains("changed since the run started"))
        .unwrap_or_else(|| panic!("no change line: {r}"));
    assert!(
        line.contains("tool `send`") && line.contains("send.sh"),
        "{r}"
    );
    assert_eq!(r.stdout, "done\n", "{r}");
}
