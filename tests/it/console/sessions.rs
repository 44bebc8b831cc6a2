//! Who reaches the console and for how long: the `Host` check against DNS
//! rebinding, the pause after wrong logins, logout, the session's lifetime in the
//! browser, the login page saying only what applies, and the name asked once.

use super::http::{Client, field};
use super::{Console, TOKEN, open_escalations, paused_for_approval};
use reqwest::StatusCode;
use std::io::{Read, Write};
use std::net::TcpStream;

/// One raw HTTP/1.1 request with the `Host` header we choose (an HTTP client sets it
/// from the URL); returns the status line and the whole response.
fn with_host(base: &str, host: &str, request_line: &str, body: &str) -> (String, String) {
    let addr = base.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).expect("connect");
    let req = format!(
        "{request_line} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    let status = out.lines().next().unwrap_or_default().to_string();
    (status, out)
}

#[test]
fn a_request_naming_another_host_is_refused_before_any_page_the_login_page_included() {
    let (p, _id) = paused_for_approval();
    let c = Console::start_args(&p, Some(TOKEN), &["--public-url", "https://review.example"]);
    let port = c.base.rsplit(':').next().expect("port").to_string();
    // A rebound name reaches the socket but no route: not the login page, and a
    // correct token posted through it opens no session.
    for host in [format!("evil.example:{port}"), "evil.example".to_string()] {
        let (status, whole) = with_host(&c.base, &host, "GET /login", "");
        assert!(status.contains(" 421 "), "{host}: {status}");
        assert!(!whole.contains("Log in"), "{whole}");
        let (status, whole) = with_host(&c.base, &host, "POST /login", &format!("token={TOKEN}"));
        assert!(status.contains(" 421 "), "{host}: {status}");
        assert!(
            !whole.to_ascii_lowercase().contains("set-cookie"),
            "{whole}"
        );
    }
    // Our own names are answered: the address, localhost, the public URL's host.
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        "review.example".to_string(),
    ] {
        let (status, whole) = with_host(&c.base, &host, "GET /login", "");
        assert!(status.contains(" 200 "), "{host}: {status}");
        assert!(whole.contains("Log in"));
    }
}

#[test]
fn a_bad_public_url_is_refused_at_start_naming_the_flag() {
    let (p, _id) = paused_for_approval();
    let out = p.run_env(
        &[
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--public-url",
            "not a url",
        ],
        &[("AGENTRUN_SERVE_TOKEN", TOKEN)],
    );
    out.expect_code(2);
    assert!(out.stderr.contains("--public-url"), "{}", out.stderr);
}

#[test]
fn after_five_wrong_tokens_logins_pause_and_even_the_right_token_opens_nothing() {
    let (p, _id) = paused_for_approval();
    let c = Console::start(&p);
    let mut web = Client::new(&c);
    for _ in 0..5 {
        let wrong = web.post("/login", &[("token", "wrong-token-0123456789")]);
        assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    }
    let paused = web.post("/login", &[("token", TOKEN)]);
    assert_eq!(
        paused.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        paused.body
    );
    assert!(paused.body.contains("try again in"), "{}", paused.body);
    assert!(web.cookie.is_none(), "no session while paused");
}

#[test]
fn logout_ends_the_session_and_its_cookie_opens_nothing_after() {
    let (p, _id) = paused_for_approval();
    let c = Console::start(&p);
    let mut web = Client::new(&c);
    let login = web.post("/login", &[("token", TOKEN)]);
    let set = login.headers["set-cookie"].to_str().expect("ascii");
    assert!(
        set.contains("Max-Age=43200"),
        "the browser keeps the session its 12 hours: {set}"
    );
    let queue = web.get("/");
    assert_eq!(queue.status, StatusCode::OK);
    assert!(queue.body.contains("Log out"));
    let csrf = field(&queue.body, "csrf");
    let old = web.cookie.clone();
    // Without the form's CSRF token a logout is refused (another site cannot log
    // a reviewer out), and the session goes on.
    assert_eq!(web.post("/logout", &[]).status, StatusCode::FORBIDDEN);
    assert_eq!(web.get("/").status, StatusCode::OK);
    let out = web.post("/logout", &[("csrf", &csrf)]);
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert_eq!(out.location.as_deref(), Some("/login"));
    let cleared = out.headers["set-cookie"].to_str().expect("ascii");
    assert!(cleared.contains("Max-Age=0"), "{cleared}");
    // The old cookie, kept by someone who copied it, is dead on the server.
    web.cookie = old;
    let after = web.get("/");
    assert_eq!(after.status, StatusCode::UNAUTHORIZED);
    let forged = web.post(
        "/escalations/1/decide",
        &[("csrf", &csrf), ("action", "approve"), ("by", "eve")],
    );
    assert_eq!(forged.status, StatusCode::UNAUTHORIZED);
    assert_eq!(open_escalations(&p).len(), 1);
}

#[test]
fn the_login_page_explains_only_the_way_in_this_console_has() {
    let (p, _id) = paused_for_approval();
    let with_token = Console::start(&p);
    let page = Client::new(&with_token).get("/login");
    assert!(page.body.contains("name=\"token\""), "{}", page.body);
    assert!(
        !page.body.contains("login link"),
        "no talk of links: {}",
        page.body
    );
    let with_links = Console::start_with(&p, None);
    let page = Client::new(&with_links).get("/login");
    assert!(page.body.contains("login link"), "{}", page.body);
    assert!(
        !page.body.contains("name=\"token\"") && !page.body.contains("AGENTRUN_SERVE_TOKEN"),
        "no token to paste when none was set: {}",
        page.body
    );
}

#[test]
fn a_name_given_at_login_is_never_asked_again_and_every_action_records_it() {
    let (p, id) = paused_for_approval();
    let c = Console::start(&p);
    let mut web = Client::new(&c);
    let login = web.post("/login", &[("token", TOKEN), ("name", "Ana Reviewer")]);
    assert_eq!(login.status, StatusCode::SEE_OTHER);
    let page = web.get(&format!("/runs/{id}"));
    assert!(page.body.contains("Signed in as"), "{}", page.body);
    assert!(
        !page.body.contains("name=\"by\""),
        "no name field: {}",
        page.body
    );
    let esc = web.get("/escalations/1");
    assert!(!esc.body.contains("name=\"by\""), "{}", esc.body);
    let csrf = field(&page.body, "csrf");
    let sent = web.post(
        &format!("/runs/{id}/send"),
        &[("csrf", &csrf), ("text", "Mention 4711.")],
    );
    assert_eq!(sent.status, StatusCode::SEE_OTHER, "{}", sent.body);
    let show = p.show(&id);
    assert_eq!(show["sent_messages"][0]["by"], "Ana Reviewer", "{show}");
    let digest = field(&esc.body, "digest");
    let decided = web.post(
        "/escalations/1/decide",
        &[("csrf", &csrf), ("digest", &digest), ("action", "approve")],
    );
    assert_eq!(decided.status, StatusCode::SEE_OTHER, "{}", decided.body);
    let e = p
        .run(&["escalations", "show", "1", "--json"])
        .expect_code(0)
        .json();
    assert_eq!(e["resolved_by"], "Ana Reviewer");
}
