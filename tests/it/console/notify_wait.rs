//! Notifications never hold a person up: a command that caused events waits at most
//! a second for their delivery after its outcome, and what it could not deliver is
//! sent later by another process (the outbox keeps it, as after a crash).

use crate::common::Project;
use serde_json::json;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A webhook receiver on a real socket: while `answer` is false it accepts and never
/// answers (the connection stays open); after, it answers 200 and keeps the bodies.
struct Hook {
    port: u16,
    answer: Arc<AtomicBool>,
    bodies: Arc<Mutex<Vec<String>>>,
}

impl Hook {
    fn start() -> Hook {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let answer = Arc::new(AtomicBool::new(false));
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let (a, b) = (answer.clone(), bodies.clone());
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for conn in listener.incoming().map_while(Result::ok) {
                if a.load(Ordering::SeqCst) {
                    if let Some(body) = answer_one(conn) {
                        b.lock().expect("lock").push(body);
                    }
                } else {
                    held.push(conn); // never answered, never closed
                }
            }
        });
        Hook {
            port,
            answer,
            bodies,
        }
    }
}

/// Reads one HTTP request, answers 200, returns its body.
fn answer_one(mut conn: TcpStream) -> Option<String> {
    conn.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut reader = BufReader::new(conn.try_clone().ok()?);
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    String::from_utf8(body).ok()
}

#[test]
fn start_with_a_webhook_that_never_answers_returns_within_1_5_s_of_its_outcome_and_another_process_delivers_later()
 {
    let hook = Hook::start();
    let p = Project::new();
    p.script(
        "send.sh",
        "#!/bin/sh\nprintf '{\"sent\": %s}\\n' \"$(cat)\"\n",
    );
    p.write(
        "tools.toml",
        &format!(
            "[notify]\nwebhook = \"http://127.0.0.1:{}/hook\"\nevents = [\"escalation_filed\"]\n\n\
             [tools.send_email]\ndescription = \"Send an email\"\n\
             input_schema = {{ type = \"object\" }}\ncommand = [\"sh\", \"send.sh\"]\napproval = \"always\"\n",
            hook.port
        ),
    );
    p.model_script(json!([
        {"tool_calls": [{"name": "send_email", "args": {"to": "dana@example.com"}}], "usage": {"input": 10, "output": 2}},
        {"text": "sent", "usage": {"input": 10, "output": 2}}
    ]));
    p.task("max_steps = 10", "Tell Dana.");

    let mut child = p
        .command(&["start", "task.md"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Each line as it arrives, with when it arrived (stdout and stderr alike).
    let last_line = Arc::new(Mutex::new(None::<(Instant, String)>));
    let readers: Vec<_> = [
        Box::new(child.stdout.take().expect("stdout")) as Box<dyn Read + Send>,
        Box::new(child.stderr.take().expect("stderr")),
    ]
    .into_iter()
    .map(|stream| {
        let last = last_line.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                *last.lock().expect("lock") = Some((Instant::now(), line));
            }
        })
    })
    .collect();
    let status = child.wait().expect("wait");
    let exited = Instant::now();
    for r in readers {
        r.join().expect("reader");
    }
    assert_eq!(status.code(), Some(3), "the run waits for approval");
    let (at, line) = last_line
        .lock()
        .expect("lock")
        .clone()
        .expect("an outcome line");
    let held = exited - at;
    assert!(
        held < Duration::from_millis(1500),
        "start returned {held:?} after its outcome line {line:?}"
    );
    assert!(
        hook.bodies.lock().expect("lock").is_empty(),
        "nothing answered yet"
    );
    let pending = p
        .run(&["notify", "list", "--all", "--json"])
        .expect_code(0)
        .json();
    assert_eq!(pending[0]["event"], "escalation_filed", "{pending}");
    assert_eq!(pending[0]["state"], "pending", "{pending}");

    // Another process, with a receiver that answers now, delivers it.
    hook.answer.store(true, Ordering::SeqCst);
    let out = p
        .run(&["notify", "deliver", "--json"])
        .expect_code(0)
        .json();
    assert_eq!(out["delivered"], 1, "{out}");
    let bodies = hook.bodies.lock().expect("lock").clone();
    assert_eq!(bodies.len(), 1);
    let body: serde_json::Value = serde_json::from_str(&bodies[0]).expect("JSON");
    assert_eq!(body["event"], "escalation_filed");
}
