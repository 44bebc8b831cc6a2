//! The console in a real browser: headless Chromium driven through chromedriver
//! (WebDriver). Skipped with one line when either is not installed (`.ci/run`
//! installs Debian's `chromium` and `chromium-driver`).
//!
//! One browser per test (each costs a Chromium start), so each test walks a whole
//! story: a reviewer logs in, finds the waiting run, decides, and watches it finish.

use super::{
    Console, TOKEN, XSS_QUESTION, hostile_run, open_escalations, paused_for_approval, wait_status,
};
use crate::common::{peer, runtime};
use fantoccini::{Client, ClientBuilder, Locator};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// chromedriver and the browser it starts; both end when dropped, also when a test
/// panics before [`Browser::close`] (see [`Drop`]).
struct Browser {
    driver: Child,
    client: Option<Client>,
    /// Chromium's profile folder, only this browser's: it marks its processes.
    profile: tempfile::TempDir,
}

impl Browser {
    /// `None` (after printing why) when Chromium or chromedriver is missing.
    async fn start() -> Option<Browser> {
        let chromedriver = peer::available(
            "Chromium and chromedriver",
            "run .ci/run, or `apt-get install chromium chromium-driver`",
            || {
                let browser =
                    peer::on_path("chromium").or_else(|| peer::on_path("chromium-browser"));
                browser.and(peer::on_path("chromedriver"))
            },
        )?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        use std::os::unix::process::CommandExt;
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own group, so Drop can end chromedriver and what it started at once.
            .process_group(0)
            .spawn()
            .expect("spawn chromedriver");
        let profile = tempfile::tempdir().expect("profile dir");
        let user_data = format!("--user-data-dir={}", profile.path().display());
        let mut browser = Browser {
            driver,
            client: None,
            profile,
        };
        let caps = serde_json::json!({"goog:chromeOptions": {"args": [
            "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--window-size=1200,700", user_data
        ]}});
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut b =
                ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new());
            b.capabilities(caps.as_object().expect("object").clone());
            match b.connect(&url).await {
                Ok(c) => {
                    browser.client = Some(c);
                    return Some(browser);
                }
                Err(e) if Instant::now() > deadline => panic!("chromedriver did not start: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    fn c(&self) -> &Client {
        self.client.as_ref().expect("client")
    }

    /// The text of the first element matching `css`, waiting (at most 20 s) for it to
    /// appear: a click that submits a form returns before the next page is there.
    async fn text_of(&self, css: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(e) = self.c().find(Locator::Css(css)).await
                && let Ok(text) = e.text().await
            {
                return text;
            }
            assert!(Instant::now() < deadline, "no {css} appeared");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn body(&self) -> String {
        self.text_of("body").await
    }

    /// Waits (at most 20 s) until the page's text contains `needle`.
    async fn wait_body(&self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.body().await.contains(needle) {
            assert!(
                Instant::now() < deadline,
                "{needle:?} never showed: {}",
                self.body().await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn fill(&self, css: &str, text: &str) {
        let e = self.c().find(Locator::Css(css)).await.expect(css);
        e.clear().await.expect("clear");
        e.send_keys(text).await.expect("type");
    }

    async fn click(&self, css: &str) {
        self.c()
            .find(Locator::Css(css))
            .await
            .expect(css)
            .click()
            .await
            .expect("click");
    }

    /// Waits (at most 20 s) until the element's text is `want`.
    async fn wait_text(&self, css: &str, want: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(e) = self.c().find(Locator::Css(css)).await
                && e.text().await.is_ok_and(|t| t == want)
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{css} never read {want:?}: {}",
                self.body().await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn log_in(&self, base: &str) {
        self.c().goto(&format!("{base}/")).await.expect("goto");
        assert!(
            self.body().await.contains("Log in"),
            "no session, no console"
        );
        // What the browser got for it, and for a run page: 401, not a page.
        let statuses = self
            .c()
            .execute_async(
                "const done = arguments[arguments.length - 1];\
                 Promise.all(['/', '/runs'].map(p => fetch(p).then(r => r.status))).then(done);",
                vec![],
            )
            .await
            .expect("fetch");
        assert_eq!(statuses, serde_json::json!([401, 401]), "no token, 401");
        self.fill("input[name=token]", TOKEN).await;
        self.click("form button[type=submit]").await;
        self.wait_text("h1", "Queue").await;
    }
}

impl Browser {
    /// Ends the Chromium session (a test that fails before this still kills
    /// chromedriver when the value drops; the session itself needs the runtime).
    async fn close(mut self) {
        if let Some(c) = self.client.take() {
            let _ = c.close().await;
        }
    }
}

impl Drop for Browser {
    /// Kills chromedriver's process group, then any Chromium process left with this
    /// browser's profile (Chromium may put its helpers in groups of their own): a
    /// test that panics mid-way leaves no browser running.
    fn drop(&mut self) {
        // SAFETY: kill(2) on the group this test made (a negative pid is a group).
        unsafe { libc::kill(-(self.driver.id() as i32), libc::SIGKILL) };
        let _ = self.driver.wait();
        for pid in chromium_of(self.profile.path()) {
            // SAFETY: kill(2) on a process whose command line names this profile.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// The processes whose command line names `profile` (this browser's Chromium).
fn chromium_of(profile: &std::path::Path) -> Vec<i32> {
    let needle = format!("--user-data-dir={}", profile.display());
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&needle))
        })
        .collect()
}

/// Whether a process is gone (or only a zombie waiting to be reaped).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[test]
fn a_browser_dropped_without_closing_as_after_a_panic_leaves_no_chromium_running() {
    runtime().block_on(async {
        let Some(b) = Browser::start().await else {
            return;
        };
        let profile = b.profile.path().to_path_buf();
        let chromium = chromium_of(&profile);
        assert!(
            !chromium.is_empty(),
            "Chromium runs with the test's profile"
        );
        let driver = b.driver.id() as i32;
        drop(b); // as a panic's unwinding does: no close()
        let deadline = Instant::now() + Duration::from_secs(10);
        while !(gone(driver) && chromium.iter().all(|p| gone(*p))) {
            assert!(
                Instant::now() < deadline,
                "left running: {:?}",
                chromium_of(&profile)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

#[test]
fn a_reviewer_in_a_browser_finds_the_waiting_run_approves_it_and_watches_it_finish() {
    runtime().block_on(async {
        let Some(b) = Browser::start().await else {
            return;
        };
        let (p, id) = paused_for_approval();
        let console = Console::start(&p);
        b.log_in(&console.base).await;
        assert!(b.body().await.contains("approval_required"));
        save_screenshot(&b.c().screenshot().await.expect("screenshot"));

        b.click("a[href='/escalations/1']").await;
        b.wait_body("Escalation 1").await;
        assert!(b.text_of(".args").await.contains("dana@example.com"));
        // Modify with arguments the schema refuses: the error is shown in the form.
        b.fill("input[name=by]", "Ana Reviewer").await;
        b.fill("textarea[name=args]", "{\"to\": 42}").await;
        b.click("button[value=modify]").await;
        let error = b.text_of(".error").await;
        assert!(error.contains("do not fit send_email"), "{error}");
        assert_eq!(open_escalations(&p).len(), 1);

        // A form stripped of its CSRF token is refused.
        b.c()
            .execute(
                "document.querySelector('form.decide input[name=csrf]').remove()",
                vec![],
            )
            .await
            .expect("script");
        b.click("button[value=approve]").await;
        b.wait_body("403").await;
        assert_eq!(open_escalations(&p).len(), 1);

        // Approve and resume: the run continues in the server and the page follows it.
        b.c()
            .goto(&format!("{}/escalations/1", console.base))
            .await
            .expect("goto");
        // The name given with the first action is not asked again this session.
        let asks = b
            .c()
            .find_all(Locator::Css("input[name=by]"))
            .await
            .expect("find");
        assert!(asks.is_empty(), "the name was asked again");
        assert!(b.body().await.contains("As Ana Reviewer."));
        b.click("button[value=approve_resume]").await;
        b.wait_text("#status", "completed").await;
        assert!(
            b.text_of("#transcript")
                .await
                .contains("The email was sent.")
        );
        let show = wait_status(&p, &id, "completed");
        assert_eq!(show["answer"], "The email was sent.");
        let e = p
            .run(&["escalations", "show", "1", "--json"])
            .expect_code(0)
            .json();
        assert_eq!(e["resolved_by"], "Ana Reviewer");

        // Fork the finished run from its page: a new run, followed live to its end.
        b.c()
            .goto(&format!("{}/runs/{id}", console.base))
            .await
            .expect("goto");
        b.fill("form.fork input[name=at_step]", "1").await;
        b.click("form.fork button").await;
        b.wait_body(&format!("from {id} at step 1")).await;
        b.wait_text("#status", "completed").await;

        // Deny on another run: the reason reaches the model.
        let (p2, id2) = paused_for_approval();
        let console2 = Console::start(&p2);
        b.log_in(&console2.base).await;
        b.c()
            .goto(&format!("{}/escalations/1", console2.base))
            .await
            .expect("goto");
        b.fill("input[name=by]", "Bo").await;
        b.fill("input[name=reason]", "wrong customer").await;
        b.click("button[value=deny]").await;
        assert!(
            b.text_of(".decision")
                .await
                .contains("denied (wrong customer) by Bo")
        );
        b.click("form.resume button").await;
        b.wait_text("#status", "completed").await;
        let show = wait_status(&p2, &id2, "completed");
        let result = crate::common::tool_results(&show);
        assert_eq!(result[0]["error"], "approval_denied");
        b.close().await;
    });
}

#[test]
fn markup_from_a_tool_and_from_ask_user_runs_no_script_in_the_browser() {
    runtime().block_on(async {
        let Some(b) = Browser::start().await else {
            return;
        };
        let (p, id) = hostile_run();
        let console = Console::start(&p);
        b.log_in(&console.base).await;
        for path in [
            "/".to_string(),
            format!("/runs/{id}"),
            "/escalations/1".to_string(),
        ] {
            b.c()
                .goto(&format!("{}{path}", console.base))
                .await
                .expect("goto");
            let title = b.c().title().await.expect("title");
            assert!(!title.contains("pwned"), "{path}: a script ran ({title})");
            let imgs = b.c().find_all(Locator::Css("img")).await.expect("find");
            assert!(imgs.is_empty(), "{path}: markup became elements");
        }
        b.c()
            .goto(&format!("{}/escalations/1", console.base))
            .await
            .expect("goto");
        assert!(
            b.text_of(".question").await.contains(XSS_QUESTION),
            "shown as text"
        );
        b.c()
            .goto(&format!("{}/runs/{id}", console.base))
            .await
            .expect("goto");
        assert!(
            b.text_of("#transcript")
                .await
                .contains("<script>document.title='pwned-tool'</script>")
        );
        b.close().await;
    });
}

/// The queue page for the README: written to docs/console-queue.png when
/// `AGENTRUN_UPDATE_SCREENSHOTS` is set, else only checked to be a PNG.
fn save_screenshot(png: &[u8]) {
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    if std::env::var_os("AGENTRUN_UPDATE_SCREENSHOTS").is_some() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/console-queue.png");
        std::fs::write(&path, png).expect("write screenshot");
    }
}

/// A waiting run's page, left open, follows the run that another reviewer approves
/// elsewhere: it reaches "completed" with the answer, and its Send and Cancel go,
/// without a reload. An open queue page shows a new escalation as it is filed.
#[test]
fn an_open_run_page_and_queue_page_follow_what_happens_elsewhere_without_a_reload() {
    runtime().block_on(async {
        let Some(b) = Browser::start().await else {
            return;
        };
        let (p, id) = paused_for_approval();
        let console = Console::start(&p);
        b.log_in(&console.base).await;
        b.c()
            .goto(&format!("{}/runs/{id}", console.base))
            .await
            .expect("goto");
        b.wait_text("#status", "awaiting_approval").await;
        assert!(b.c().find(Locator::Css("form.send")).await.is_ok());
        // A mark on the page: a reload would lose it.
        b.c()
            .execute("document.body.setAttribute('data-mark', 'kept')", vec![])
            .await
            .expect("mark");

        // In another tab, the reviewer approves and resumes; then back to the first.
        let first = b.c().window().await.expect("window");
        let tab = b.c().new_window(true).await.expect("new tab");
        b.c().switch_to_window(tab.handle).await.expect("switch");
        b.c()
            .goto(&format!("{}/escalations/1", console.base))
            .await
            .expect("goto");
        b.fill("input[name=by]", "Bo").await;
        b.click("button[value=approve_resume]").await;
        wait_status(&p, &id, "completed");
        b.c().switch_to_window(first).await.expect("switch back");
        b.wait_text("#status", "completed").await;
        b.wait_body("The email was sent.").await;
        let mark = b
            .c()
            .execute("return document.body.getAttribute('data-mark')", vec![])
            .await
            .expect("mark");
        assert_eq!(mark, "kept", "the page was not reloaded");
        let deadline = Instant::now() + Duration::from_secs(20);
        while b
            .c()
            .find(Locator::Css("form.send, form.cancel"))
            .await
            .is_ok()
        {
            assert!(
                Instant::now() < deadline,
                "Send and Cancel stayed on a completed run"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            b.c().find(Locator::Css("form.fork")).await.is_ok(),
            "Fork stays"
        );

        // The queue page, open while a new run asks for approval.
        b.c()
            .goto(&format!("{}/", console.base))
            .await
            .expect("goto");
        b.wait_body("Nothing waits for a person").await;
        p.run(&["start", "task.md"]).expect_code(3);
        b.text_of("a[href='/escalations/2']").await;
        b.wait_body("1 waiting for a decision").await;
        b.close().await;
    });
}
