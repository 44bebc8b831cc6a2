//! Children start without forking agentrun (issue 23): command tools and stdio MCP
//! servers are spawned by absolute path, so std uses `posix_spawn`
//! (`clone3(CLONE_VM|CLONE_VFORK)`) and never copies the whole multi-threaded process.
//! Counted with `strace`, which these tests need (they skip without it; `.ci/run`
//! installs it).

use crate::common::{self, Project, Run, bin, peer};
use serde_json::json;
use std::collections::BTreeSet;
use std::process::{Command, Stdio};

/// `strace` when it is installed and may trace here (a container may forbid ptrace).
fn strace() -> bool {
    let works = || {
        Command::new("strace")
            .args(["-f", "-qq", "-o", "/dev/null", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
            .then_some(())
    };
    peer::available(
        "strace",
        "apt-get install strace; it must be allowed to ptrace",
        works,
    )
    .is_some()
}

/// What agentrun's own threads did, from an `strace -f` log: (forks: new processes
/// sharing nothing, spawns: `CLONE_VFORK` children). The tools' own clones are not
/// counted: only agentrun's first pid and the threads it (transitively) started count.
fn clones(log: &str) -> (Vec<String>, usize) {
    let mut ours: BTreeSet<&str> = BTreeSet::new();
    let (mut forks, mut spawns) = (Vec::new(), 0);
    for line in log.lines() {
        let Some((pid, call)) = line.split_once(' ') else {
            continue;
        };
        let call = call.trim_start();
        if ours.is_empty() {
            ours.insert(pid);
        }
        let is_clone = ["clone(", "clone3(", "fork(", "vfork("]
            .iter()
            .any(|c| call.starts_with(c));
        if !ours.contains(pid) || !is_clone {
            continue;
        }
        let child = call.rsplit("= ").next().unwrap_or("").trim();
        if call.contains("CLONE_THREAD") {
            ours.insert(child);
        } else if call.contains("CLONE_VFORK") && call.contains("CLONE_VM") {
            spawns += 1;
        } else {
            forks.push(line.to_string());
        }
    }
    (forks, spawns)
}

/// `agentrun start task.md` under `strace -f`; the run and the log (clones and execs).
fn traced_start(p: &Project) -> (Run, String) {
    let log = p.path().join("strace.log");
    let mut c = Command::new("strace");
    c.current_dir(p.path())
        .env("AGENTRUN_DB", p.db())
        .args([
            "-f",
            "-qq",
            "-e",
            "trace=clone,clone3,fork,vfork,execve",
            "-o",
        ])
        .arg(&log)
        .arg(bin())
        .args(["start", "task.md", "--json"])
        .stdin(Stdio::null());
    let run = Run::from_output(c.output().expect("spawn strace"));
    (run, std::fs::read_to_string(&log).expect("strace log"))
}

/// Runs a task that calls the `echo` tool four times under strace and checks that
/// agentrun spawned once per call and never forked; returns the strace log.
fn echo_four_times_without_forking(p: &Project) -> String {
    let calls: Vec<_> = (0..4)
        .map(|i| json!({"tool_calls": [{"name": "echo", "args": {"i": i}}]}))
        .chain([json!({"text": "done"})])
        .collect();
    p.model_script(json!(calls));
    p.task("", "Echo four times.");
    let (run, log) = traced_start(p);
    run.expect_code(0);
    let (forks, spawns) = clones(&log);
    assert!(
        forks.is_empty(),
        "agentrun forked:\n{}\n{run}",
        forks.join("\n")
    );
    assert_eq!(spawns, 4, "one spawn per call\n{log}");
    log
}

#[test]
fn command_tools_named_on_path_start_without_forking_agentrun() {
    if !strace() {
        return;
    }
    let p = Project::new();
    // `cat` by name: the case that made std fork (a bare name with an explicit
    // environment); `cat` itself does not fork, so every clone is agentrun's.
    p.fast_tools(
        "[tools.echo]\ndescription = \"echo\"\ninput_schema = { type = \"object\" }\n\
         command = [\"cat\"]\nidempotent = true\n",
    );
    let _ = echo_four_times_without_forking(&p);
}

#[test]
fn stdio_mcp_servers_start_without_forking_agentrun() {
    if !strace() {
        return;
    }
    let p = Project::new();
    p.write("server.py", common::PING_MCP_SERVER);
    p.fast_tools("[mcp.tiny]\ncommand = [\"python3\", \"server.py\"]\n");
    p.model_script(json!([
        {"tool_calls": [{"name": "tiny__ping", "args": {}}]},
        {"text": "done"}
    ]));
    p.task("", "Ping.");
    let (run, log) = traced_start(&p);
    run.expect_code(0);
    let show = p.show(run.json()["run_id"].as_str().expect("run id"));
    let (result, is_error) = crate::common::tool_result(&show, "call_0_0");
    assert!(!is_error && result.to_string().contains("pong"), "{result}");
    let (forks, spawns) = clones(&log);
    assert!(
        forks.is_empty(),
        "agentrun forked:\n{}\n{run}",
        forks.join("\n")
    );
    assert!(spawns >= 1, "the server was spawned\n{log}");
}

/// Sandboxed tools start through agentrun's trampoline (issue 22), which is spawned the
/// same way: still no fork of agentrun, one spawn per call, and each call's child
/// execs the trampoline and then the tool.
#[test]
fn sandboxed_command_tools_start_through_the_trampoline_without_forking_agentrun() {
    if !strace() {
        return;
    }
    let k = agentrun::config::preflight::Support::probe();
    let enforced = || (k.landlock_abi >= 1 && k.seccomp).then_some(());
    if peer::available(
        "a kernel with Landlock and seccomp",
        "Linux 5.13 or newer with Landlock enabled",
        enforced,
    )
    .is_none()
    {
        return;
    }
    let p = Project::new();
    p.fast_tools(
        "[tools.echo]\ndescription = \"echo\"\ninput_schema = { type = \"object\" }\n\
         command = [\"cat\"]\nidempotent = true\nsandbox = \"workspace\"\nnetwork = false\n",
    );
    let log = echo_four_times_without_forking(&p);
    // (An exec may be logged in two halves, "<unfinished ...>" then "resumed".)
    let execs = |needle: &str| {
        log.lines()
            .filter(|l| l.contains("execve(") && l.contains(needle))
            .count()
    };
    assert_eq!(execs("\"__exec-tool\""), 4, "through the trampoline\n{log}");
    assert_eq!(execs("/cat\", [\"cat\"]"), 4, "then the tool\n{log}");
}
