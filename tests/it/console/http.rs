//! The console over plain HTTP: authentication, CSRF, the digest binding, decisions,
//! resume, and escaping — with a cookie-keeping client that does not follow redirects.

use super::{
    Console, TOKEN, XSS_QUESTION, XSS_TOOL, hostile_run, open_escalations, paused_for_approval,
    wait_status,
};
use crate::common::runtime;
use reqwest::StatusCode;

pub(super) struct Client {
    http: reqwest::Client,
    base: String,
    pub(super) cookie: Option<String>,
    rt: tokio::runtime::Runtime,
}

pub(super) struct Page {
    pub(super) status: StatusCode,
    pub(super) body: String,
    pub(super) location: Option<String>,
    pub(super) headers: reqwest::header::HeaderMap,
}

impl Client {
    pub(super) fn new(c: &Console) -> Client {
        Client {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
            base: c.base.clone(),
            cookie: None,
            rt: runtime(),
        }
    }

    fn send(&mut self, req: reqwest::RequestBuilder) -> Page {
        let req = match &self.cookie {
            Some(c) => req.header("cookie", c),
            None => req,
        };
        self.rt.block_on(async {
            let res = req.send().await.expect("request");
            if let Some(set) = res.headers().get("set-cookie") {
                let v = set.to_str().expect("ascii").to_string();
                self.cookie = Some(v.split(';').next().expect("pair").to_string());
            }
            let status = res.status();
            let headers = res.headers().clone();
            let location = headers
                .get("location")
                .map(|l| l.to_str().expect("ascii").to_string());
            let body = res.text().await.expect("body");
            Page {
                status,
                body,
                location,
                headers,
            }
        })
    }

    pub(super) fn get(&mut self, path: &str) -> Page {
        let req = self.http.get(format!("{}{path}", self.base));
        self.send(req)
    }

    pub(super) fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Page {
        let enc = |v: &str| {
            percent_encoding::utf8_percent_encode(v, percent_encoding::NON_ALPHANUMERIC).to_string()
        };
        let body: Vec<String> = form
            .iter()
            .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
            .collect();
        let req = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.join("&"));
        self.send(req)
    }

    pub(super) fn login(&mut self) {
        let p = self.post("/login", &[("token", TOKEN)]);
        assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
        let cookie = self.cookie.clone().expect("a session cookie");
        assert!(cookie.starts_with("agentrun_session="), "{cookie}");
    }
}

/// The value of `name="…" value="…"` in a page.
pub(super) fn field(body: &str, name: &str) -> String {
    let at = body
        .find(&format!("name=\"{name}\" value=\""))
        .unwrap_or_else(|| panic!("no field {name} in {body}"));
    let rest = &body[at + name.len() + 15..];
    rest[..rest.find('"').expect("closing quote")].to_string()
}

#[test]
fn without_a_session_every_page_is_401_and_a_wrong_token_opens_none() {
    let (p, id) = paused_for_approval();
    let c = Console::start(&p);
    let mut web = Client::new(&c);
    for path in [
        "/",
        "/runs",
        &format!("/runs/{id}"),
        "/escalations/1",
        &format!("/runs/{id}/events"),
    ] {
        let page = web.get(path);
        assert_eq!(page.status, StatusCode::UNAUTHORIZED, "{path}");
        assert!(page.body.contains("Log in"), "{path}: {}", page.body);
    }
    let bad = web.post("/login", &[("token", "wrong-token-0123456789")]);
    assert_eq!(bad.status, StatusCode::UNAUTHORIZED);
    assert!(web.cookie.is_none());
    // Not even the right token opens a session from the address bar: it belongs in
    // the form (addresses are kept in history and logs).
    let in_url = web.get(&format!("/login?token={TOKEN}"));
    assert_eq!(in_url.status, StatusCode::UNAUTHORIZED);
    assert!(
        in_url.body.contains("not in the address"),
        "{}",
        in_url.body
    );
    assert!(web.cookie.is_none());
    let forged = web.post(
        "/escalations/1/decide",
        &[("action", "approve"), ("by", "eve")],
    );
    assert_eq!(forged.status, StatusCode::UNAUTHORIZED);
    assert_eq!(open_escalations(&p).len(), 1, "nothing was decided");
}

#[test]
fn the_session_cookie_is_httponly_samesite_strict_and_pages_carry_a_strict_csp() {
    let (p, _id) = paused_for_approval();
    let c = Console::start(&p);
    let mut web = Client::new(&c);
    let login = web.post("/login", &[("token", TOKEN)]);
    let set = login.headers["set-cookie"].to_str().expect("ascii");
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    let page = web.get("/");
    assert_eq!(page.status, StatusCode::OK);
    let csp = page.headers["content-security-policy"]
        .to_str()
        .expect("ascii");
    assert!(
        csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    assert!(
        !page.body.contains("onclick") && !page.body.contains("<script>"),
        "no inline script"
    );
}

#[test]
fn a_post_without_the_csrf_token_is_403_and_decides_nothing() {
    let (p, _id) = paused_for_approval();
    let c = Console::start(&p);
    let mut web = Client::new(&c);
    web.login();
    let page = web.get("/escalations/1");
    let digest = field(&page.body, "digest");
    let no_csrf = web.post(
        "/escalations/1/decide",
        &[("digest", &digest), ("by", "ana"), ("action", "approve")],
    );
    assert_eq!(no_csrf.status, StatusCode::FORBIDDEN);
    let wrong = web.post(
        "/escalations/1/decide",
        &[
            ("csrf", "0000"),
            ("digest", &digest),
            ("by", "ana"),
            ("action", "approve"),
        ],
    );
    assert_eq!(wrong.status, StatusCode::FORBIDDEN);
    assert_eq!(open_escalations(&p).len(), 1, "nothing was decided");
}

#[test]
fn approve_and_resume_records_the_reviewer_and_the_run_completes_in_the_server() {
    let (p, id) = paused_for_approval();
    let c = Console::start(&p);
    let mut web = Client::new(&c);
    web.login();
    let queue = web.get("/");
    assert!(
        queue.body.contains("approval_required") && queue.body.contains(&id),
        "{}",
        queue.body
    );
    let page = web.get("/escalations/1");
    assert!(
        page.body.contains("dana@example.com"),
        "the call's arguments are shown"
    );
    let (csrf, digest) = (field(&page.body, "csrf"), field(&page.body, "digest"));
    let done = web.post(
        "/escalations/1/decide",
        &[
            ("csrf", &csrf),
            ("digest", &digest),
            ("by", "Ana Reviewer"),
            ("action", "approve_resume"),
        ],
    );
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    assert_eq!(
        done.location.as_deref(),
        Some(format!("/runs/{id}").as_str())
    );
    let show = wait_status(&p, &id, "completed");
    assert_eq!(show["answer"], "The email was sent.");
    let e = p
        .run(&["escalations", "show", "1", "--json"])
        .expect_code(0)
        .json();
    assert_eq!(e["resolved_by"], "Ana Reviewer");
    assert_eq!(e["resolution"]["decision"], "approve");
}

#[test]
fn a_form_whose_digest_no_longer_matches_is_refused() {
    let (p, _id) = paused_for_approval();
    let c = Console::start(&p);
    let mut web = Client::new(&c);
    web.login();
    let page = web.get("/escalations/1");
    let csrf = field(&page.body, "csrf");
    let stale = web.post(
        "/escalations/1/decide",
        &[
            ("csrf", &csrf),
            ("digest", "send_email#0123"),
            ("by", "ana"),
            ("action", "approve"),
        ],
    );
    assert_eq!(stale.status, StatusCode::CONFLICT);
    assert!(
        stale.body.contains("digest no longer matches"),
        "{}",
        stale.body
    );
    assert_eq!(open_escalations(&p).len(), 1);
}

#[test]
fn modify_with_arguments_that_break_the_schema_shows_the_error_in_the_form() {
    let (p, id) = paused_for_approval();
    let c = Console::start(&p);
    let mut web = Client::new(&c);
    web.login();
    let page = web.get("/escalations/1");
    let (csrf, digest) = (field(&page.body, "csrf"), field(&page.body, "digest"));
    let bad = web.post(
        "/escalations/1/decide",
        &[
            ("csrf", &csrf),
            ("digest", &digest),
            ("by", "ana"),
            ("action", "modify"),
            ("args", "{\"to\": 42}"),
        ],
    );
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(bad.body.contains("do not fit send_email"), "{}", bad.body);
    assert!(
        bad.body.contains("{&quot;to&quot;: 42}"),
        "the text area keeps what was typed"
    );
    let not_json = web.post(
        "/escalations/1/decide",
        &[
            ("csrf", &csrf),
            ("digest", &digest),
            ("by", "ana"),
            ("action", "modify"),
            ("args", "{to:"),
        ],
    );
    assert!(
        not_json.body.contains("not valid JSON"),
        "{}",
        not_json.body
    );
    assert_eq!(open_escalations(&p).len(), 1);
    let good = web.post(
        "/escalations/1/decide",
        &[
            ("csrf", &csrf),
            ("digest", &digest),
            ("by", "ana"),
            ("action", "modify"),
            ("args", "{\"to\": \"ops@example.com\"}"),
        ],
    );
    assert_eq!(good.status, StatusCode::SEE_OTHER, "{}", good.body);
    let resumed = web.post(&format!("/runs/{id}/resume"), &[("csrf", &csrf)]);
    assert_eq!(resumed.status, StatusCode::SEE_OTHER, "{}", resumed.body);
    let show = wait_status(&p, &id, "completed");
    let result = super::super::common::tool_results(&show);
    assert_eq!(
        result[0]["result"]["sent"]["to"], "ops@example.com",
        "{result:?}"
    );
    assert_eq!(
        result[0]["args_modified_by_person"]["to"],
        "ops@example.com"
    );
}

#[test]
fn deny_needs_a_reason_and_the_model_is_told_it() {
    let (p, id) = paused_for_approval();
    let c = Console::start(&p);
    let mut web = Client::new(&c);
    web.login();
    let page = web.get("/escalations/1");
    let (csrf, digest) = (field(&page.body, "csrf"), field(&page.body, "digest"));
    // A session that never gave a name is asked for one; once given, it is not.
    let nameless = web.post(
        "/escalations/1/decide",
        &[
            ("csrf", &csrf),
            ("digest", &digest),
            ("by", " "),
            ("action", "deny"),
            ("reason", "no"),
        ],
    );
    assert!(
        nameless.body.contains("Your name is needed"),
        "{}",
        nameless.body
    );
    assert_eq!(open_escalations(&p).len(), 1);
    let empty = web.post(
        "/escalations/1/decide",
        &[
            ("csrf", &csrf),
            ("digest", &digest),
            ("by", "ana"),
            ("action", "deny"),
        ],
    );
    assert!(empty.body.contains("Deny needs a reason"), "{}", empty.body);
    assert!(
        web.get("/escalations/1").body.contains("As ana."),
        "the name is said, not asked again"
    );
    let denied = web.post(
        "/escalations/1/decide",
        &[
            ("csrf", &csrf),
            ("digest", &digest),
            ("action", "deny"),
            ("reason", "not today"),
        ],
    );
    assert_eq!(denied.status, StatusCode::SEE_OTHER);
    let e = p
        .run(&["escalations", "show", "1", "--json"])
        .expect_code(0)
        .json();
    assert_eq!(e["resolved_by"], "ana", "recorded under the session's name");
    web.post(&format!("/runs/{id}/resume"), &[("csrf", &csrf)]);
    let show = wait_status(&p, &id, "completed");
    let result = super::super::common::tool_results(&show);
    assert_eq!(result[0]["error"], "approval_denied", "{result:?}");
    assert!(
        result[0]["message"]
            .as_str()
            .unwrap_or("")
            .contains("not today"),
        "{result:?}"
    );
}

#[test]
fn markup_from_a_tool_and_from_ask_user_is_shown_as_text() {
    let (p, id) = hostile_run();
    let c = Console::start(&p);
    let mut web = Client::new(&c);
    web.login();
    let run = web.get(&format!("/runs/{id}"));
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
            .replace('\'', "&#39;")
    };
    for page in [
        &run.body,
        &web.get("/escalations/1").body,
        &web.get("/").body,
    ] {
        assert!(
            !page.contains("<script>document") && !page.contains("<img src=x"),
            "raw markup in {page}"
        );
    }
    assert!(
        run.body.contains(&esc("<script>document.title=")),
        "the tool output is there, as text"
    );
    let e = web.get("/escalations/1");
    assert!(e.body.contains(&esc(XSS_QUESTION)), "{}", e.body);
    let _ = XSS_TOOL;
}

/// A run busy in a 30 s tool (timeout longer), held by a `start` in the background.
fn busy_run() -> (crate::common::Project, String, std::process::Child) {
    let p = crate::common::Project::new();
    p.script(
        "slow.sh",
        "#!/bin/sh\ncat > /dev/null\necho \"$AGENTRUN_CALL_ID\" >> effects.log\nsleep 30\necho '\"slept\"'\n",
    );
    p.write(
        "tools.toml",
        "[tools.slow]\ndescription = \"slow\"\ninput_schema = { type = \"object\" }\n\
         command = [\"sh\", \"slow.sh\"]\ntimeout = \"60s\"\n",
    );
    p.model_script(serde_json::json!([
        {"tool_calls": [{"name": "slow", "args": {}}]},
        {"text": "finished"}
    ]));
    p.task("max_steps = 10", "Wait.");
    let child = p
        .command(&["start", "task.md", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn agentrun");
    let log = p.path().join("effects.log");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !log.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the tool never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let id = p.only_run();
    (p, id, child)
}

/// Issue 24's operator controls: Cancel on a running run's page stops it (the holder,
/// another process, exits 5) and records the reviewer as `by`; a finished run's page
/// offers Fork but neither Cancel nor Send.
#[test]
fn cancel_from_the_console_stops_a_running_run_and_names_the_reviewer() {
    let (p, id, holder) = busy_run();
    let c = Console::start(&p);
    let mut web = Client::new(&c);
    web.login();
    let page = web.get(&format!("/runs/{id}"));
    assert!(
        page.body.contains(&format!("action=\"/runs/{id}/cancel\""))
            && page.body.contains(&format!("action=\"/runs/{id}/send\"")),
        "{}",
        page.body
    );
    let csrf = field(&page.body, "csrf");
    let done = web.post(
        &format!("/runs/{id}/cancel"),
        &[
            ("csrf", &csrf),
            ("by", "Ana Reviewer"),
            ("reason", "wrong customer"),
        ],
    );
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    assert_eq!(
        done.location.as_deref(),
        Some(format!("/runs/{id}").as_str())
    );
    let out = crate::common::Run::from_output(holder.wait_with_output().expect("wait"));
    out.expect_code(5);
    let show = p.show(&id);
    assert_eq!(show["status"], "cancelled");
    assert_eq!(show["cancelled"]["by"], "Ana Reviewer");
    assert_eq!(show["cancelled"]["reason"], "wrong customer");
    let after = web.get(&format!("/runs/{id}"));
    // Cancelled, and stopped inside its first step: nothing to cancel, send or fork.
    assert_eq!(show["steps"], 0);
    for action in ["cancel", "send", "fork"] {
        assert!(
            !after.body.contains(&format!("/{action}\"")),
            "{action}: {}",
            after.body
        );
    }
}

/// Send on a waiting run's page stores the message; approving and resuming delivers it
/// once, after step 1's tool result. Fork on the completed run's page creates a run
/// with `forked_from`, driven by the console to its end.
#[test]
fn send_from_the_console_is_delivered_once_and_fork_creates_a_run_forked_from_it() {
    let (p, id) = paused_for_approval();
    let c = Console::start(&p);
    let mut web = Client::new(&c);
    web.login();
    let page = web.get(&format!("/runs/{id}"));
    let csrf = field(&page.body, "csrf");
    let text = "Mention the refund number 4711.";
    let nameless = web.post(
        &format!("/runs/{id}/send"),
        &[("csrf", &csrf), ("by", " "), ("text", text)],
    );
    assert_eq!(nameless.status, StatusCode::UNPROCESSABLE_ENTITY);
    let sent = web.post(
        &format!("/runs/{id}/send"),
        &[("csrf", &csrf), ("by", "Ana Reviewer"), ("text", text)],
    );
    assert_eq!(sent.status, StatusCode::SEE_OTHER, "{}", sent.body);
    assert_eq!(
        p.show(&id)["sent_messages"].as_array().map(Vec::len),
        Some(1)
    );
    let esc = web.get("/escalations/1");
    let digest = field(&esc.body, "digest");
    web.post(
        "/escalations/1/decide",
        &[
            ("csrf", &csrf),
            ("digest", &digest),
            ("by", "Ana Reviewer"),
            ("action", "approve_resume"),
        ],
    );
    let show = wait_status(&p, &id, "completed");
    crate::fork_send::check_delivered_once(&show, "Ana Reviewer", text, 1);

    let done = web.get(&format!("/runs/{id}"));
    assert!(
        !done.body.contains("/cancel\"") && !done.body.contains("/send\""),
        "a completed run offers neither Cancel nor Send"
    );
    let forked = web.post(
        &format!("/runs/{id}/fork"),
        &[("csrf", &csrf), ("at_step", "1"), ("model", "")],
    );
    assert_eq!(forked.status, StatusCode::SEE_OTHER, "{}", forked.body);
    let location = forked.location.expect("the fork's page");
    let fork = location.trim_start_matches("/runs/").to_string();
    assert_ne!(fork, id);
    let show = wait_status(&p, &fork, "completed");
    assert_eq!(
        show["forked_from"],
        serde_json::json!({"run_id": id, "step": 1})
    );
    assert_eq!(show["answer"], "The email was sent.");
    let past = web.post(
        &format!("/runs/{id}/fork"),
        &[("csrf", &csrf), ("at_step", "9")],
    );
    assert_eq!(past.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        past.body.contains("cannot be forked at step 9"),
        "{}",
        past.body
    );
}

/// Cancel, Send and Fork without the session's CSRF token: 403, nothing done.
#[test]
fn operator_forms_without_the_csrf_token_are_403_and_change_nothing() {
    let (p, id) = paused_for_approval();
    let c = Console::start(&p);
    let mut web = Client::new(&c);
    web.login();
    for (action, form) in [
        ("cancel", vec![("by", "eve")]),
        ("send", vec![("by", "eve"), ("text", "do it")]),
        ("fork", vec![("at_step", "0")]),
    ] {
        let mut wrong = form.clone();
        wrong.push(("csrf", "0000"));
        for f in [form, wrong] {
            let page = web.post(&format!("/runs/{id}/{action}"), &f);
            assert_eq!(
                page.status,
                StatusCode::FORBIDDEN,
                "{action}: {}",
                page.body
            );
        }
    }
    let show = p.show(&id);
    assert_eq!(show["status"], "awaiting_approval");
    assert_eq!(show["sent_messages"], serde_json::json!([]));
    let runs = p.run(&["runs", "list", "--json"]).expect_code(0).json();
    assert_eq!(runs.as_array().map(Vec::len), Some(1), "no fork");
}

#[test]
fn without_a_set_token_serve_prints_one_time_login_links_and_never_the_token() {
    let (p, _id) = paused_for_approval();
    let c = Console::start_with(&p, None);
    let first = super::link_in(&c.first).expect("a login link in the first line");
    let mut web = Client::new(&c);
    let wrong = web.get("/login?code=0123456789abcdef0123456789abcdef");
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(web.cookie.is_none());
    let opened = web.get(&first);
    assert_eq!(
        opened.status,
        StatusCode::SEE_OTHER,
        "a wrong guess left the link working"
    );
    assert_eq!(web.get("/").status, StatusCode::OK, "logged in");
    // The link is used up: someone who finds it in history or a log gets nothing.
    let mut other = Client::new(&c);
    let again = other.get(&first);
    assert_eq!(again.status, StatusCode::UNAUTHORIZED);
    assert!(again.body.contains("used or has expired"), "{}", again.body);
    assert!(other.cookie.is_none());
    // serve printed the next link when the first was used; it works once too.
    let next = c.next_link();
    assert_ne!(next, first);
    assert_eq!(other.get(&next).status, StatusCode::SEE_OTHER);
    assert_eq!(other.get("/").status, StatusCode::OK);
}
