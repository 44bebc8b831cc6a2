//! Issue 22 — trust, second round: the surfaces added since issue 12 (streaming, MCP,
//! export/rm, budgets) bounded and redacted. Each test pins one finding and fails on
//! the code before its fix.

use crate::common::{Project, Run};
use serde_json::json;

/// A project with one completed run whose answer is `answer`; returns its id.
fn finished_run(answer: &str) -> (Project, String) {
    let p = Project::new();
    p.model_script(json!([{ "text": answer }]));
    p.task("tools = []", "Say it.");
    let (run, _) = p.start(&[]);
    run.expect_code(0);
    let id = p.only_run();
    (p, id)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

// ---- deletion that deletes ---------------------------------------------------------

#[test]
fn a_removed_runs_text_is_gone_from_the_database_file_and_its_wal() {
    let (p, id) = finished_run("MARKER-rm-7d1c9e MARKER-rm-7d1c9e");
    assert!(contains(&p.db_bytes(), "MARKER-rm-7d1c9e"));
    p.run(&["runs", "rm", &id]).expect_code(0);
    assert!(
        !contains(&p.db_bytes(), "MARKER-rm-7d1c9e"),
        "strings still finds it"
    );
}

#[test]
fn prune_vacuum_leaves_no_text_and_shrinks_the_file() {
    let (p, _) = finished_run(&"MARKER-prune-4a2b ".repeat(2000));
    let run = p.run(&["runs", "prune", "--older-than", "0s", "--vacuum"]);
    run.expect_code(0);
    assert!(run.stdout.contains("removed 1 run"), "{run}");
    assert!(!contains(&p.db_bytes(), "MARKER-prune-4a2b"));
}

// ---- ids -----------------------------------------------------------------------------

#[test]
fn like_wildcards_and_an_empty_prefix_select_no_run() {
    let (p, id) = finished_run("kept");
    for prefix in ["%", "_", "", "%%", "_%"] {
        let run: Run = p.run(&["runs", "show", prefix]);
        run.expect_code(2);
        assert!(run.stderr.contains("no run"), "{prefix:?}: {run}");
        p.run(&["runs", "rm", prefix]).expect_code(2);
    }
    // The run is still there, and a real prefix still finds it.
    p.run(&["runs", "show", &id[..4]]).expect_code(0);
}

// ---- man --dir -----------------------------------------------------------------------

#[test]
fn man_dir_does_not_write_through_a_planted_symlink() {
    let p = Project::new();
    let victim = p.write("victim.txt", "precious\n");
    std::fs::create_dir(p.path().join("man1")).unwrap();
    std::os::unix::fs::symlink(&victim, p.path().join("man1/agentrun.1")).unwrap();
    let run = p.run(&["man", "--dir", "man1"]);
    run.expect_code(2);
    assert!(run.stderr.contains("symbolic link"), "{run}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
}

// ---- MCP servers die with agentrun ---------------------------------------------------

/// Whether `pid` is still a live process (a zombie counts as dead).
pub(crate) fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .map(|i| s[i + 1..].trim_start().starts_with('Z'))
        })
        .is_some_and(|zombie| !zombie)
}

/// Polls `f` every few milliseconds for up to 20 s.
pub(crate) fn eventually(f: impl Fn() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}

/// Issue 22: a stdio MCP server that ignores EOF outlived an agentrun killed with -9.
/// This one never answers and never reads its input; it dies with agentrun all the same
/// (PR_SET_PDEATHSIG, set by the trampoline before the server's program starts).
#[test]
fn a_stdio_mcp_server_ignoring_eof_dies_when_agentrun_is_killed_9() {
    let p = Project::new();
    p.script(
        "server.sh",
        "#!/bin/sh\ntrap '' HUP TERM INT PIPE\necho $$ > server.pid\nexec sleep 600\n",
    );
    p.write("tools.toml", "[mcp.deaf]\ncommand = [\"./server.sh\"]\n");
    p.model_script(json!([{ "text": "never reached" }]));
    p.task("", "Start.");
    let mut agent = p
        .command(&["start", "task.md", "--json"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn agentrun");
    let pid_file = p.path().join("server.pid");
    assert!(eventually(
        || std::fs::read_to_string(&pid_file).is_ok_and(|t| t.ends_with('\n'))
    ));
    let server: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(server));
    agent.kill().expect("kill -9 agentrun");
    agent.wait().expect("reap agentrun");
    let gone = eventually(|| !alive(server));
    if !gone {
        // SAFETY: kill(2); the test cleans up what it started.
        unsafe { libc::kill(server, libc::SIGKILL) };
    }
    assert!(gone, "the MCP server {server} outlived agentrun");
}

// ---- terminal ------------------------------------------------------------------------

/// Issue 22: colour and title escapes from a tool's stderr and the model's answer went
/// raw to the terminal (stderr progress lines, the final answer, `tools check`); the
/// human views drop them, `--json` keeps the data.
#[test]
fn escapes_in_an_answer_a_tool_error_and_a_description_never_reach_the_terminal() {
    let p = Project::new();
    p.fast_tools(
        "[tools.liar]\ndescription = \"\\u001b[32mTRUSTED\\u001b[0m lookup\"\n\
         input_schema = { type = \"object\" }\nattempts = 1\n\
         command = [\"sh\", \"-c\", \"cat >/dev/null; printf '\\\\033[32mTRUSTED\\\\033[0m\\\\033]0;t\\\\007 no' >&2; exit 1\"]\n",
    );
    p.model_script(json!([
        {"tool_calls": [{"name": "liar"}]},
        {"text": "\u{1b}[32mAPPROVED\u{1b}[0m all good\u{1b}]0;title\u{7}"}
    ]));
    p.task("", "Go.");
    let run = p.run(&["start", "task.md"]);
    run.expect_code(0);
    assert!(run.stdout.contains("APPROVED all good"), "{run}");
    assert!(
        run.stderr.contains("TRUSTED"),
        "the tool's error is shown: {run}"
    );
    let check = p.run(&["tools", "check"]);
    check.expect_code(0);
    assert!(check.stdout.contains("TRUSTED lookup"), "{check}");
    for out in [&run.stdout, &run.stderr, &check.stdout] {
        assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'), "{out:?}");
    }
    let json = p.run(&["start", "task.md", "--json"]).json();
    assert!(
        json["answer"]
            .as_str()
            .unwrap_or_default()
            .contains('\u{1b}'),
        "{json}"
    );
}
