//! Notifications cross no trust line (docs/security.md, Notifications): a run's
//! `[notify]` cannot make another agentrun process — a reviewer's `escalations
//! resolve`, `escalations list` or `serve` — expand that process's environment or run
//! a command; those events wait for the run's own driver. Stored errors and `notify
//! list --json` never hold a resolved webhook secret.

use crate::common::{Project, runtime};
use crate::console::Console;
use serde_json::json;
use std::time::{Duration, Instant};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// A local HTTP receiver that keeps every request's URL.
struct Hook {
    server: MockServer,
    rt: tokio::runtime::Runtime,
}

impl Hook {
    fn start() -> Hook {
        let rt = runtime();
        let server = rt.block_on(async {
            let server = MockServer::start().await;
            // The first two requests to /marker fail: the process that causes the
            // event tries at most twice (its passes at start and exit), so the one
            // that gets through comes from the console's timer.
            Mock::given(method("POST"))
                .and(path("/marker"))
                .respond_with(ResponseTemplate::new(500))
                .up_to_n_times(2)
                .with_priority(1)
                .mount(&server)
                .await;
            Mock::given(method("POST"))
                .respond_with(ResponseTemplate::new(200))
                .mount(&server)
                .await;
            server
        });
        Hook { server, rt }
    }

    fn urls(&self) -> Vec<String> {
        self.rt
            .block_on(self.server.received_requests())
            .unwrap_or_default()
            .iter()
            .map(|r| r.url.to_string())
            .collect()
    }

    /// Waits (bounded) until `n` requests to URLs containing `part` arrived.
    fn wait_for(&self, part: &str, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.urls().iter().filter(|u| u.contains(part)).count() < n {
            assert!(
                Instant::now() < deadline,
                "no request with {part}: {:?}",
                self.urls()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A run that pauses for approval of `send_email`, announcing to `notify`.
fn project(notify: &str) -> Project {
    let p = Project::new();
    p.script(
        "send.sh",
        "#!/bin/sh\ncat > /dev/null\necho '{\"sent\": true}'\n",
    );
    p.write(
        "tools.toml",
        &format!(
            "[notify]\n{notify}\n\n[tools.send_email]\ndescription = \"Send an email\"\n\
             input_schema = {{ type = \"object\" }}\ncommand = [\"sh\", \"send.sh\"]\napproval = \"always\"\n"
        ),
    );
    p.model_script(json!([
        {"tool_calls": [{"name": "send_email", "args": {"to": "dana@example.com"}}]},
        {"text": "sent"}
    ]));
    p.task("", "Tell Dana.");
    p
}

const AUTHOR: &str = "author-value-1234";
const REVIEWER: &str = "reviewer-secret-5678";

#[test]
fn a_reviewers_processes_send_none_of_their_environment_and_run_no_command_of_the_run() {
    let hook = Hook::start();
    let notify = format!(
        "webhook = \"{}/run?leak=${{AGENTRUN_SERVE_TOKEN}}\"\ncommand = [\"sh\", \"-c\", \"echo ran >> notify-cmd.log\"]",
        hook.server.uri()
    );
    let p = project(&notify);
    let author = [("AGENTRUN_SERVE_TOKEN", AUTHOR)];
    let v = p
        .run_env(&["start", "task.md", "--json"], &author)
        .expect_code(3)
        .json();
    let id = v["run_id"].as_str().expect("run_id").to_string();
    // The author's own process sends its run's escalation with the author's value.
    hook.wait_for(AUTHOR, 1);
    assert_eq!(p.lines("notify-cmd.log"), 1);

    // A reviewer decides (an escalation_resolved event), lists, and serves the console.
    let reviewer = [("AGENTRUN_SERVE_TOKEN", REVIEWER)];
    p.run_env(&["escalations", "resolve", "1", "--approve"], &reviewer)
        .expect_code(0);
    p.run_env(&["escalations", "list"], &reviewer)
        .expect_code(0);
    // A second run whose webhook is a plain URL, refused the first time: once the
    // console's timer has sent it, the console has passed over the first run's
    // pending event too.
    let marker = p.write(
        "marker.toml",
        &format!(
            "[notify]\nwebhook = \"{}/marker\"\nattempts = 1\n\n[tools.send_email]\ndescription = \"Send\"\n\
             input_schema = {{ type = \"object\" }}\ncommand = [\"sh\", \"send.sh\"]\napproval = \"always\"\n",
            hook.server.uri()
        ),
    );
    p.model_script(json!([
        {"tool_calls": [{"name": "send_email", "args": {}}]},
        {"text": "sent"}
    ]));
    let marker = marker.display().to_string();
    p.run(&["start", "task.md", "--tools", &marker])
        .expect_code(3);
    let console = Console::start_with(&p, Some(REVIEWER));
    hook.wait_for("/marker", 3);
    drop(console);
    let urls = hook.urls();
    assert!(
        urls.iter().all(|u| !u.contains(REVIEWER)),
        "a reviewer's environment was sent: {urls:?}"
    );
    assert_eq!(
        p.lines("notify-cmd.log"),
        1,
        "a reviewer's process ran the run's command"
    );
    let pending = p
        .run(&["notify", "list", "--all", "--json"])
        .expect_code(0)
        .json();
    assert!(
        pending.to_string().contains("escalation_resolved"),
        "the decision's event waits for the run's driver: {pending}"
    );

    // The run's own driver sends it, with its own environment, and runs its command.
    p.run_env(&["resume", &id], &author).expect_code(0);
    let sent = hook.urls().iter().filter(|u| u.contains(AUTHOR)).count();
    assert!(
        sent >= 3,
        "filed, resolved and ended, by the author: {:?}",
        hook.urls()
    );
    assert!(p.lines("notify-cmd.log") >= 3);
}

#[test]
fn a_webhook_secret_never_reaches_the_store_or_notify_list() {
    // Nothing listens on port 1: the delivery fails, and its error is stored.
    let secret = "T0SECRET/B0SECRET/xoxsecretpath123";
    let p = project("webhook = \"${HOOK_URL}\"\nattempts = 1\ntimeout = \"2s\"");
    let env = [("HOOK_URL", &*format!("http://127.0.0.1:1/{secret}"))];
    p.run_env(&["start", "task.md"], &env).expect_code(3);
    let list = p.run_env(&["notify", "list", "--json"], &env);
    list.expect_code(0);
    assert!(list.stdout.contains("notify_webhook"), "{list}");
    assert!(!list.stdout.contains("SECRET"), "{list}");
    let bytes = p.db_bytes();
    assert!(
        !bytes.windows(8).any(|w| w == b"B0SECRET"),
        "the resolved webhook is in the database"
    );
}
