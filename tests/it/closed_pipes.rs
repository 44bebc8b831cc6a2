//! Every command with its stdout (and for runs, stderr too) closed before it writes a
//! byte, as `agentrun … | head -0` leaves it (issue 27: `start`, `resume` and `tools
//! check` exited 101 with "failed printing to stdout: Broken pipe"). A closed pipe ends
//! the output quietly and the command keeps its own exit code: a run that waits for a
//! person still exits 3 however its reader behaves.

use crate::common::{Project, Run};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::Stdio;

/// The write end of a pipe whose read end is already closed: every write fails with
/// EPIPE, deterministically (no race with a reader that exits "soon").
fn closed_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills both descriptors; each is owned exactly once below.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe(2)");
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    Stdio::from(write)
}

#[derive(Clone, Copy, PartialEq)]
enum Closed {
    Stdout,
    Both,
}

fn run_closed(p: &Project, args: &[&str], closed: Closed) -> Run {
    let mut c = p.command(args);
    c.stdout(closed_pipe());
    if closed == Closed::Both {
        c.stderr(closed_pipe());
    } else {
        c.stderr(Stdio::piped());
    }
    Run::from_output(c.output().expect("spawn agentrun"))
}

fn example(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name)
        .join("task.md")
        .display()
        .to_string()
}

fn first_id(p: &Project, args: &[&str], key: &str) -> String {
    let v = p.run(args).json();
    v[0][key].as_str().expect("an id").to_string()
}

#[test]
fn every_command_with_a_closed_stdout_ends_quietly_with_its_own_exit_code() {
    let p = Project::new();
    let quickstart = example("quickstart");
    let approval = example("approval");
    let tools = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tools.toml")
        .display()
        .to_string();
    // Runs to read back, made with stdout open.
    p.run(&["start", &quickstart]).expect_code(0);
    let done = first_id(&p, &["runs", "list", "--json"], "id");
    p.run(&["start", &approval]).expect_code(3);
    let waiting = first_id(&p, &["runs", "list", "--json"], "id");
    let esc = first_id(&p, &["escalations", "list", "--json"], "id");
    p.run(&["start", &quickstart]).expect_code(0);
    let spare = first_id(&p, &["runs", "list", "--json"], "id");

    let table: Vec<(Vec<&str>, i32)> = vec![
        (vec!["start", &quickstart], 0),
        (vec!["start", &quickstart, "--json"], 0),
        (vec!["start", &approval], 3),
        (vec!["start", &approval, "--json"], 3),
        (vec!["start", &quickstart, "--stream-json"], 0),
        (vec!["start", "missing.md"], 2),
        (vec!["start", "missing.md", "--json"], 2),
        (vec!["resume", &done], 0),
        (vec!["resume", &done, "--json"], 0),
        (vec!["resume", &waiting], 3),
        (vec!["resume", &waiting, "--json"], 3),
        (vec!["submit", &quickstart], 0),
        (vec!["submit", &quickstart, "--json"], 0),
        (vec!["worker", "--until-idle"], 0),
        (vec!["runs", "list"], 0),
        (vec!["runs", "list", "--json"], 0),
        (vec!["runs", "show", &done], 0),
        (vec!["runs", "show", &done, "--json"], 0),
        (vec!["runs", "export", &done], 0),
        (vec!["runs", "show", "nosuchrun"], 2),
        (vec!["runs", "prune", "--older-than", "30d", "--dry-run"], 0),
        (vec!["runs", "prune", "--older-than", "30d", "--json"], 0),
        (vec!["escalations", "list"], 0),
        (vec!["escalations", "list", "--all", "--json"], 0),
        (vec!["escalations", "show", &esc], 0),
        (vec!["escalations", "show", &esc, "--json"], 0),
        (vec!["tools", "check", "--tools", &tools], 0),
        (vec!["tools", "check", "--tools", &tools, "--json"], 0),
        (vec!["tools", "check", "--tools", "missing.toml"], 2),
        (vec!["init", "--dir", "starter"], 0),
        (vec!["init", "--dir", "starter2", "--json"], 0),
        (vec!["completions", "bash"], 0),
        (vec!["completions", "zsh"], 0),
        (vec!["completions", "fish"], 0),
        (vec!["man"], 0),
        (vec!["man", "start"], 0),
        (vec!["--help"], 0),
        (vec!["start", "--help"], 0),
        (vec!["--version"], 0),
        (vec!["no-such-command"], 2),
        (vec!["notify", "list", "--all"], 0),
        (vec!["notify", "list", "--json"], 0),
        (vec!["notify", "deliver"], 0),
        (vec!["notify", "deliver", "--json"], 0),
        (vec!["db", "check"], 0),
        (vec!["db", "check", "--json"], 0),
        (vec!["runs", "cancel", "nosuchrun"], 2),
        (vec!["runs", "cancel", "nosuchrun", "--json"], 2),
        // Last: they change what the rows above read.
        (vec!["runs", "fork", &done, "--no-start"], 0),
        (vec!["runs", "fork", &done, "--at-step", "1", "--json"], 0),
        (vec!["runs", "send", &waiting, "Ship it by Friday."], 0),
        (vec!["runs", "send", &waiting, "Ship it.", "--json"], 0),
        (vec!["runs", "send", &done, "Too late."], 2),
        (vec!["escalations", "resolve", &esc, "--deny", "not now"], 0),
        (vec!["runs", "rm", &spare], 0),
        (vec!["runs", "cancel", &waiting], 0),
        (vec!["runs", "cancel", &waiting, "--json"], 0),
    ];
    let mut failures = Vec::new();
    for (args, code) in &table {
        let r = run_closed(&p, args, Closed::Stdout);
        if r.code != *code || r.stderr.contains("panicked") || r.stderr.contains("Broken pipe") {
            failures.push(format!(
                "`agentrun {}`: want exit {code}\n{r}",
                args.join(" ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// `agentrun start … 2>&1 | head`: progress and answer both go to a reader that left.
#[test]
fn a_run_with_stdout_and_stderr_closed_keeps_its_exit_code() {
    let p = Project::new();
    for (task, code) in [(example("quickstart"), 0), (example("approval"), 3)] {
        for json in [false, true] {
            let mut args = vec!["start", task.as_str()];
            if json {
                args.push("--json");
            }
            let r = run_closed(&p, &args, Closed::Both);
            assert_eq!(r.code, code, "`agentrun {}`\n{r}", args.join(" "));
        }
    }
    // The runs themselves are whole: each ended as its exit code says.
    let list = p.run(&["runs", "list", "--json"]).json();
    let statuses: Vec<&str> = list
        .as_array()
        .expect("array")
        .iter()
        .map(|r| r["status"].as_str().expect("status"))
        .collect();
    assert_eq!(
        statuses,
        [
            "awaiting_approval",
            "awaiting_approval",
            "completed",
            "completed"
        ]
    );
}
