//! Notifications from the outbox (issue 24): a webhook receiver (a real local HTTP
//! server) gets each event with its id as `Idempotency-Key`; a kill -9 at each crash
//! point still gets every event to it, once by id; failures are listed and never fail
//! a run; a command target gets the JSON on stdin.

use crate::common::{Db, Project, runtime, test_pg};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// A tool that answers `{"sent": ARGS}`.
const SEND_TOOL: &str = "#!/bin/sh\nprintf '{\"sent\": %s}\\n' \"$(cat)\"\n";

/// A project whose run pauses for approval of `send_email`, announcing to `notify`.
fn project(db: &Db, notify: &str) -> Project {
    let p = Project::on(db);
    p.script("send.sh", SEND_TOOL);
    p.write(
        "tools.toml",
        &format!(
            "[notify]\n{notify}\n\n[tools.send_email]\ndescription = \"Send an email\"\n\
             input_schema = {{ type = \"object\" }}\ncommand = [\"sh\", \"send.sh\"]\napproval = \"always\"\n"
        ),
    );
    p.model_script(json!([
        {"tool_calls": [{"name": "send_email", "args": {"to": "dana@example.com"}}], "usage": {"input": 10, "output": 2}},
        {"text": "sent", "usage": {"input": 10, "output": 2}}
    ]));
    p.task("max_steps = 10", "Tell Dana.");
    p
}

struct Receiver {
    server: MockServer,
    rt: tokio::runtime::Runtime,
}

impl Receiver {
    fn start(status: u16) -> Receiver {
        let rt = runtime();
        let server = rt.block_on(async {
            let server = MockServer::start().await;
            Mock::given(method("POST"))
                .and(path("/hook"))
                .respond_with(ResponseTemplate::new(status))
                .mount(&server)
                .await;
            server
        });
        Receiver { server, rt }
    }

    fn url(&self) -> String {
        format!("{}/hook", self.server.uri())
    }

    /// Every delivery: (Idempotency-Key, body).
    fn got(&self) -> Vec<(String, Value)> {
        let requests = self
            .rt
            .block_on(self.server.received_requests())
            .unwrap_or_default();
        requests
            .iter()
            .map(|r| {
                let key = r
                    .headers
                    .get("idempotency-key")
                    .map(|v| v.to_str().unwrap_or_default().to_string())
                    .unwrap_or_default();
                (key, serde_json::from_slice(&r.body).expect("JSON body"))
            })
            .collect()
    }

    /// Distinct events by id: event id -> (event name, deliveries of it).
    fn by_id(&self) -> BTreeMap<String, (String, usize)> {
        let mut out: BTreeMap<String, (String, usize)> = BTreeMap::new();
        for (key, body) in self.got() {
            assert_eq!(key, body["event_id"], "the Idempotency-Key is the event id");
            let e = out
                .entry(key)
                .or_insert((body["event"].as_str().unwrap_or_default().to_string(), 0));
            e.1 += 1;
        }
        out
    }

    fn events(&self) -> Vec<String> {
        let mut names: Vec<String> = self.by_id().into_values().map(|(e, _)| e).collect();
        names.sort();
        names
    }
}

fn backends() -> Vec<Db> {
    let mut dbs = vec![Db::Sqlite];
    if let Some(url) = test_pg() {
        dbs.push(Db::Pg(url));
    }
    dbs
}

const ALL: [&str; 3] = ["escalation_filed", "escalation_resolved", "run_ended"];

#[test]
fn each_event_reaches_the_webhook_once_with_its_id_as_idempotency_key_on_both_backends() {
    for db in backends() {
        let hook = Receiver::start(200);
        let p = project(
            &db,
            &format!(
                "webhook = \"{}\"\npublic_url = \"https://console.example.com\"",
                hook.url()
            ),
        );
        p.run(&["start", "task.md"]).expect_code(3);
        let got = hook.got();
        assert_eq!(
            got.len(),
            1,
            "{db:?}: filed, delivered by the process that filed it"
        );
        let filed = &got[0].1;
        assert_eq!(filed["event"], "escalation_filed");
        assert_eq!(filed["kind"], "approval_required");
        assert_eq!(filed["escalation_id"], 1);
        assert_eq!(filed["link"], "https://console.example.com/escalations/1");
        assert!(
            filed["text"]
                .as_str()
                .unwrap_or("")
                .contains("needs a person"),
            "{filed}"
        );
        p.run(&[
            "escalations",
            "resolve",
            "1",
            "--approve",
            "--by",
            "ana",
            "--resume",
        ])
        .expect_code(0);
        let by_id = hook.by_id();
        assert_eq!(hook.events(), ALL, "{db:?}: {by_id:?}");
        assert!(
            by_id.values().all(|(_, n)| *n == 1),
            "{db:?}: one delivery each: {by_id:?}"
        );
        let ended: Vec<Value> = hook
            .got()
            .into_iter()
            .map(|(_, b)| b)
            .filter(|b| b["event"] == "run_ended")
            .collect();
        assert_eq!(ended[0]["kind"], "completed");
        let list = p
            .run(&["notify", "list", "--all", "--json"])
            .expect_code(0)
            .json();
        let states: Vec<&str> = list
            .as_array()
            .expect("array")
            .iter()
            .map(|n| n["state"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(states, ["delivered"; 3]);
    }
}

#[test]
fn a_kill_9_at_each_crash_point_still_delivers_every_event_once_by_id() {
    for db in backends() {
        for point in agentrun::fault::NOTIFY_POINTS {
            let hook = Receiver::start(200);
            let p = project(&db, &format!("webhook = \"{}\"", hook.url()));
            let killed = p.run_env(&["start", "task.md"], &[("AGENTRUN_CRASH_AT", *point)]);
            assert!(
                ![0, 3].contains(&killed.code),
                "{point}: aborted: {}",
                killed.stderr
            );
            assert!(killed.stderr.contains(point), "{point}: {}", killed.stderr);
            let sent_before = hook.got().len();
            let expected_before = usize::from(*point == "notify_after_delivery");
            assert_eq!(
                sent_before, expected_before,
                "{db:?} {point}: sent before the kill"
            );
            let id = p.only_run();
            // The next agentrun process on the database delivers what is pending (after
            // a kill before the commit, nothing was: the run redoes its step instead).
            p.run(&["resume", &id]).expect_code(3);
            // Then a person approves whatever the run waits for, until it completes.
            for _ in 0..4 {
                let open = p
                    .run(&["escalations", "list", "--json"])
                    .expect_code(0)
                    .json();
                let Some(e) = open.as_array().and_then(|a| a.first()).cloned() else {
                    break;
                };
                let e = e["id"].as_str().expect("id").to_string();
                p.run(&["escalations", "resolve", &e, "--approve", "--resume"]);
            }
            assert_eq!(p.show(&id)["status"], "completed", "{db:?} {point}");
            let escalations = p
                .run(&["escalations", "list", "--all", "--json"])
                .expect_code(0)
                .json();
            let n = escalations.as_array().expect("array").len();
            let by_id = hook.by_id();
            let count = |name: &str| by_id.values().filter(|(e, _)| e == name).count();
            assert_eq!(
                count("escalation_filed"),
                n,
                "{db:?} {point}: one event per escalation: {by_id:?}"
            );
            assert_eq!(count("escalation_resolved"), n, "{db:?} {point}: {by_id:?}");
            assert_eq!(count("run_ended"), 1, "{db:?} {point}: {by_id:?}");
            let repeats: Vec<usize> = by_id.values().map(|(_, k)| *k).filter(|k| *k > 1).collect();
            let expected: Vec<usize> = if *point == "notify_after_delivery" {
                vec![2]
            } else {
                vec![]
            };
            assert_eq!(
                repeats, expected,
                "{db:?} {point}: a repeat only after a kill between send and mark, with the same id"
            );
            let all = p
                .run(&["notify", "list", "--all", "--json"])
                .expect_code(0)
                .json();
            assert!(
                all.as_array()
                    .expect("array")
                    .iter()
                    .all(|n| n["state"] == "delivered"),
                "{db:?} {point}: {all}"
            );
        }
    }
}

#[test]
fn a_failing_receiver_is_listed_and_never_fails_the_run_and_the_next_process_retries() {
    let hook = Receiver::start(503);
    let p = project(
        &Db::Sqlite,
        &format!("webhook = \"{}\"\nattempts = 1", hook.url()),
    );
    p.run(&["start", "task.md"]).expect_code(3);
    assert_eq!(hook.got().len(), 1, "tried once (attempts = 1)");
    let failed = p.run(&["notify", "list", "--json"]).expect_code(0).json();
    let row = &failed.as_array().expect("array")[0];
    assert_eq!(row["event"], "escalation_filed");
    assert_eq!(row["state"], "pending", "retried by later passes");
    assert_eq!(row["attempts"], 1);
    assert!(
        row["last_error"]
            .as_str()
            .unwrap_or("")
            .contains("notify_webhook"),
        "{row}"
    );
    let human = p.run(&["notify", "list"]);
    human.expect_code(0);
    assert!(
        human.stdout.contains("escalation_filed"),
        "{}",
        human.stdout
    );
    p.run(&["escalations", "resolve", "1", "--approve", "--resume"])
        .expect_code(0);
    let again = p
        .run(&["notify", "list", "--all", "--json"])
        .expect_code(0)
        .json();
    let filed = again
        .as_array()
        .expect("array")
        .iter()
        .find(|n| n["event"] == "escalation_filed")
        .cloned()
        .expect("filed");
    assert!(
        filed["attempts"].as_u64().unwrap_or(0) >= 2,
        "the next process tried again: {filed}"
    );
}

#[test]
fn only_the_selected_events_are_sent_and_a_command_gets_the_json_on_stdin() {
    let p = project(
        &Db::Sqlite,
        "command = [\"sh\", \"hook.sh\"]\nevents = [\"run_ended\"]",
    );
    p.script(
        "hook.sh",
        "#!/bin/sh\n{ cat; echo; echo \"key=$AGENTRUN_CALL_ID\"; } >> hook.log\n",
    );
    p.run(&["start", "task.md"]).expect_code(3);
    p.run(&["escalations", "resolve", "1", "--approve", "--resume"])
        .expect_code(0);
    let log = std::fs::read_to_string(p.path().join("hook.log")).expect("the command ran");
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2, "{log}");
    let body: Value = serde_json::from_str(lines[0]).expect("JSON on stdin");
    assert_eq!(body["event"], "run_ended");
    assert_eq!(body["kind"], "completed");
    assert_eq!(
        lines[1],
        format!("key={}", body["event_id"].as_str().unwrap_or(""))
    );
    let all = p
        .run(&["notify", "list", "--all", "--json"])
        .expect_code(0)
        .json();
    let skipped = all
        .as_array()
        .expect("array")
        .iter()
        .filter(|n| n["state"] == "skipped")
        .count();
    assert_eq!(skipped, 2, "filed and resolved were not selected: {all}");
}

#[test]
fn a_bad_notify_section_is_refused_naming_the_key() {
    let p = project(
        &Db::Sqlite,
        "webhook = \"ftp://x\"\nevents = [\"run_done\"]",
    );
    let r = p.run(&["tools", "check"]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("notify.webhook") || r.stdout.contains("notify.webhook"),
        "{}{}",
        r.stdout,
        r.stderr
    );
    assert!(
        r.stderr.contains("run_done") || r.stdout.contains("run_done"),
        "{}{}",
        r.stdout,
        r.stderr
    );
}

/// The `run_ended` bodies the receiver got.
fn ended(hook: &Receiver) -> Vec<Value> {
    hook.got()
        .into_iter()
        .map(|(_, b)| b)
        .filter(|b| b["event"] == "run_ended")
        .collect()
}

#[test]
fn a_cancelled_run_ends_with_run_ended_cancelled_whether_waiting_or_held() {
    for db in backends() {
        // Waiting for a person: `runs cancel` cancels it itself and delivers the event.
        let hook = Receiver::start(200);
        let p = project(&db, &format!("webhook = \"{}\"", hook.url()));
        p.run(&["start", "task.md"]).expect_code(3);
        let id = p.only_run();
        p.run(&[
            "runs",
            "cancel",
            &id,
            "--by",
            "ana",
            "--reason",
            "wrong customer",
        ])
        .expect_code(0);
        let got = ended(&hook);
        assert_eq!(got.len(), 1, "{db:?}: {got:?}");
        assert_eq!(got[0]["kind"], "cancelled", "{db:?}");
        assert!(
            got[0]["summary"].as_str().unwrap_or("").contains("ana"),
            "{db:?}: {}",
            got[0]
        );

        // Held by a live process busy in a slow tool: the holder writes `cancelled`
        // and delivers the event before it exits.
        let hook = Receiver::start(200);
        let p = Project::on(&db);
        p.script(
            "slow.sh",
            "#!/bin/sh\ncat > /dev/null\ntouch started\nsleep 30\necho '\"slept\"'\n",
        );
        p.write(
            "tools.toml",
            &format!(
                "[notify]\nwebhook = \"{}\"\nevents = [\"run_ended\"]\n\n[tools.slow]\n\
                 description = \"slow\"\ninput_schema = {{ type = \"object\" }}\n\
                 command = [\"sh\", \"slow.sh\"]\n",
                hook.url()
            ),
        );
        p.model_script(json!([{"tool_calls": [{"name": "slow", "args": {}}]}, {"text": "done"}]));
        p.task("max_steps = 10", "Wait.");
        let holder = p
            .command(&["start", "task.md"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !p.path().join("started").exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "the tool never started"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let id = p.only_run();
        p.run(&["runs", "cancel", &id, "--by", "ana"])
            .expect_code(0);
        let out = holder.wait_with_output().expect("wait");
        assert!(!out.status.success(), "a cancelled run does not exit 0");
        let got = ended(&hook);
        assert_eq!(
            got.len(),
            1,
            "{db:?}: one run_ended, from the holder: {got:?}"
        );
        assert_eq!(got[0]["kind"], "cancelled", "{db:?}");
        assert_eq!(got[0]["run_id"], id.as_str(), "{db:?}");
    }
}

/// The send_email project with no `[notify]` in its tools.toml.
fn project_without_notify(db: &Db) -> Project {
    let p = project(db, "webhook = \"http://unused.invalid/\"");
    let tools = std::fs::read_to_string(p.path().join("tools.toml")).expect("tools.toml");
    let (_, rest) = tools.split_once("\n\n").expect("sections");
    p.write("tools.toml", rest);
    p
}

#[test]
fn the_config_files_notify_is_used_unless_tools_toml_has_its_own_and_the_run_keeps_it() {
    // Only the config file says where: its receiver gets every event, also the one a
    // later process (without that config file) causes, from the run's snapshot.
    let person = Receiver::start(200);
    let p = project_without_notify(&Db::Sqlite);
    let config = p.write(
        "home/config.toml",
        &format!(
            "model = \"script:script.json\"\n\n[notify]\nwebhook = \"{}\"\n\
             events = [\"escalation_filed\", \"run_ended\"]\npublic_url = \"http://review.example\"\n",
            person.url()
        ),
    );
    let config = config.display().to_string();
    p.run_env(&["start", "task.md"], &[("AGENTRUN_CONFIG", &config)])
        .expect_code(3);
    std::fs::remove_file(&config).expect("rm config");
    p.run(&["escalations", "resolve", "1", "--approve", "--resume"])
        .expect_code(0);
    assert_eq!(
        person.events(),
        ["escalation_filed", "run_ended"],
        "the config file's events, not escalation_resolved"
    );
    let filed = person
        .got()
        .into_iter()
        .map(|(_, b)| b)
        .find(|b| b["event"] == "escalation_filed")
        .expect("filed");
    assert_eq!(filed["link"], "http://review.example/escalations/1");

    // tools.toml has its own `[notify]`: the project's receiver gets the events, the
    // person's none.
    let person = Receiver::start(200);
    let project_hook = Receiver::start(200);
    let p = project(
        &Db::Sqlite,
        &format!("webhook = \"{}\"", project_hook.url()),
    );
    let config = p.write(
        "home/config.toml",
        &format!("[notify]\nwebhook = \"{}\"\n", person.url()),
    );
    let config = config.display().to_string();
    p.run_env(&["start", "task.md"], &[("AGENTRUN_CONFIG", &config)])
        .expect_code(3);
    assert_eq!(project_hook.events(), ["escalation_filed"]);
    assert!(
        person.got().is_empty(),
        "tools.toml's [notify] wins as a whole"
    );
}

#[test]
fn a_bad_notify_in_the_config_file_is_refused_naming_the_file_the_key_and_the_line() {
    let p = project_without_notify(&Db::Sqlite);
    let config = p.write(
        "home/config.toml",
        "model = \"script:script.json\"\n\n[notify]\nwebhook = \"ftp://x\"\nevents = [\"run_done\"]\n",
    );
    let config = config.display().to_string();
    let r = p.run_env(&["start", "task.md"], &[("AGENTRUN_CONFIG", &config)]);
    r.expect_code(2);
    assert!(r.stderr.contains(&config), "{}", r.stderr);
    assert!(r.stderr.contains("notify.webhook"), "{}", r.stderr);
    assert!(
        r.stderr.contains("unknown event `run_done`"),
        "{}",
        r.stderr
    );
    assert!(!p.db().exists(), "nothing was started, no database made");
    let typo = p.write("home/typo.toml", "[notify]\nwebhok = \"https://x\"\n");
    let r = p.run_env(
        &["start", "task.md"],
        &[("AGENTRUN_CONFIG", &typo.display().to_string())],
    );
    r.expect_code(2);
    assert!(r.stderr.contains("webhok"), "{}", r.stderr);
    assert!(r.stderr.contains("line 2"), "{}", r.stderr);
}

#[test]
fn an_event_a_crash_left_pending_goes_out_with_the_next_process_whichever_it_is() {
    let next: [(&str, &[&str]); 3] = [
        ("start", &["start", "task.md"]),
        ("worker", &["worker", "--until-idle", "--poll", "20ms"]),
        ("serve", &["serve", "--addr", "127.0.0.1:0"]),
    ];
    for (name, args) in next {
        let hook = Receiver::start(200);
        let p = project(&Db::Sqlite, &format!("webhook = \"{}\"", hook.url()));
        let killed = p.run_env(
            &["start", "task.md"],
            &[("AGENTRUN_CRASH_AT", "notify_after_commit")],
        );
        assert!(
            killed.stderr.contains("notify_after_commit"),
            "{name}: {}",
            killed.stderr
        );
        assert!(hook.got().is_empty(), "{name}: killed before sending");
        let mut child = p
            .command(args)
            .env("AGENTRUN_SERVE_TOKEN", "notify-test-token-0123456789")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        // Until the event is sent and marked (serve goes on running; the others exit).
        let all_delivered = || {
            let list = p
                .run(&["notify", "list", "--all", "--json"])
                .expect_code(0)
                .json();
            let rows = list.as_array().expect("array").clone();
            !rows.is_empty() && rows.iter().all(|n| n["state"] == "delivered")
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while hook.got().is_empty() || !all_delivered() {
            assert!(
                std::time::Instant::now() < deadline,
                "{name} never delivered the pending event"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if name == "serve" {
            let _ = child.kill();
        }
        let _ = child.wait();
        assert!(all_delivered(), "{name}");
        let got = hook.by_id();
        // `start` files an escalation of its own new run too.
        let runs = if name == "start" { 2 } else { 1 };
        assert_eq!(
            hook.events(),
            vec!["escalation_filed"; runs],
            "{name}: {got:?}"
        );
        assert!(
            got.values().all(|(_, n)| *n == 1),
            "{name}: once each: {got:?}"
        );
    }
}

#[test]
fn a_worker_sends_a_run_s_end_as_it_ends_and_marks_a_run_without_targets_skipped() {
    for db in backends() {
        worker_deals_with_each_run_s_end(&db);
    }
}

fn worker_deals_with_each_run_s_end(db: &Db) {
    let hook = Receiver::start(200);
    let p = Project::on(db);
    p.write(
        "notify.toml",
        &format!(
            "[notify]\nwebhook = \"{}\"\nevents = [\"run_ended\"]\n",
            hook.url()
        ),
    );
    p.write("quiet.toml", "");
    p.model_script(json!([{"text": "done", "usage": {"input": 10, "output": 2}}]));
    p.task("max_steps = 3", "Say done.");
    let submit = |tools: &str| {
        let v = p
            .run(&["submit", "task.md", "--tools", tools, "--json"])
            .expect_code(0)
            .json();
        v["run_id"].as_str().expect("run_id").to_string()
    };
    let told = submit("notify.toml");
    let quiet = submit("quiet.toml");
    let mut worker = p
        .command(&["worker", "--poll", "20ms", "--concurrency", "2"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let states = || -> BTreeMap<String, String> {
        let list = p
            .run(&["notify", "list", "--all", "--json"])
            .expect_code(0)
            .json();
        let rows = list.as_array().expect("array").clone();
        rows.iter()
            .map(|n| {
                (
                    n["run_id"].as_str().unwrap_or_default().to_string(),
                    n["state"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    };
    let want = BTreeMap::from([
        (told.clone(), "delivered".to_string()),
        (quiet.clone(), "skipped".to_string()),
    ]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    // While the worker keeps running (it is not `--until-idle`): each run's event is
    // dealt with as the run ends, not when the worker exits.
    while states() != want {
        assert!(
            worker.try_wait().expect("wait").is_none(),
            "the worker exited"
        );
        assert!(std::time::Instant::now() < deadline, "{:?}", states());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = worker.kill();
    let _ = worker.wait();
    let got = hook.got();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].1["event"], "run_ended");
    assert_eq!(got[0].1["run_id"], told.as_str());
}
