//! The README's five-minute walk, run exactly as written by a newcomer: in a fresh
//! `git clone` of this repository (nothing else beside it), the blocks of "Quick
//! start", "A person in the loop" and "Kill it, resume it" are read out of README.md at
//! test time and run one after another. The only edits: `cargo install --path .` is
//! skipped (the binary under test is first on PATH), and `<RUN_ID>` is the id of the
//! newest run. A `console` block's commands are run and every output line it shows
//! without an ellipsis must be printed (run ids as in the README are matched to any id).
//! Also the smaller first-hour promises: one next step after a resolution, and who
//! acts when `$USER` is unset.

use crate::common::{Project, bin, path_with_bin, peer};
use serde_json::json;
use std::path::Path;
use std::process::Command;

/// The fenced blocks of the README section titled `title`: (language, body), in order.
fn blocks(readme: &str, title: &str) -> Vec<(String, String)> {
    let heading = format!("\n## {title}\n");
    let start = readme
        .find(&heading)
        .unwrap_or_else(|| panic!("README section `{title}`"));
    let rest = &readme[start + heading.len()..];
    let section = &rest[..rest.find("\n## ").unwrap_or(rest.len())];
    let mut out = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in section.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(lang)) => open = Some((lang.trim().to_string(), String::new())),
            (Some(_), Some("")) => out.extend(open.take()),
            (Some((_, body)), _) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    out
}

/// A fresh clone of this repository, as a newcomer has it.
fn clone(into: &Path) -> Option<std::path::PathBuf> {
    let root = env!("CARGO_MANIFEST_DIR");
    let git = peer::available("git", "`apt-get install git`", || peer::on_path("git"))?;
    let dest = into.join("agentrun");
    std::fs::create_dir_all(into.join("home")).expect("home");
    let ok = Command::new(git)
        .args(["clone", "--quiet", root])
        .arg(&dest)
        .status()
        .is_ok_and(|s| s.success());
    // A source tree that is not a git checkout (an unpacked archive) has nothing to
    // clone, and nothing a newcomer would have either.
    if !ok {
        eprintln!("skipped: the README walk needs a git checkout to clone ({root} is none)");
        return None;
    }
    Some(dest)
}

/// Runs one shell script in `dir` with the binary under test first on PATH.
fn sh(dir: &Path, script: &str) -> (i32, String) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env("PATH", path_with_bin())
        // A home of its own beside the clone: a workspace that is the home folder
        // holds its credential stores, which the sandbox refuses.
        .env("HOME", dir.with_file_name("home"))
        .env_remove("AGENTRUN_DB")
        .env_remove("AGENTRUN_CRASH_AT")
        .env_remove("KB_OUTAGE")
        .output()
        .expect("sh");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

const NEWEST: &str =
    r#""$(agentrun runs list --json | grep -o '"id":"[0-9a-f]*"' | head -1 | cut -d'"' -f4)""#;

/// A `sh` block as the shell script a reader types.
fn as_script(body: &str) -> String {
    let mut script = String::from("set -e\n");
    for line in body.lines() {
        if line.trim_start().starts_with("cargo install") {
            continue;
        }
        script.push_str(&line.replace("<RUN_ID>", NEWEST));
        script.push('\n');
    }
    script
}

/// A `console` block: each `$ ` command is run; each output line shown without `…`
/// must appear in what the commands printed (README run ids stand for any id).
fn check_console(dir: &Path, body: &str) {
    let id = regex::Regex::new(r"\b[0-9a-f]{12}\b").expect("id pattern");
    let mut printed = String::new();
    for line in body.lines() {
        if let Some(command) = line.strip_prefix("$ ") {
            let (_, out) = sh(dir, command);
            printed.push_str(&out);
        }
    }
    let printed = id.replace_all(&printed, "RUNID");
    let spaces = regex::Regex::new(r" +").expect("spaces");
    let squeeze = |s: &str| spaces.replace_all(s.trim(), " ").into_owned();
    let printed: Vec<String> = printed.lines().map(squeeze).collect();
    for shown in body
        .lines()
        .filter(|l| !l.starts_with("$ ") && !l.contains('…'))
    {
        let shown = squeeze(&id.replace_all(shown, "RUNID"));
        assert!(
            printed.contains(&shown),
            "the README shows `{shown}`, which was not printed:\n{}",
            printed.join("\n")
        );
    }
}

#[test]
fn the_readme_five_minute_walk_runs_as_written_in_a_fresh_clone() {
    let home = tempfile::tempdir().expect("temp");
    let Some(dir) = clone(home.path()) else {
        return;
    };
    // The clone's README: what a newcomer reads is what was committed.
    let readme = std::fs::read_to_string(dir.join("README.md")).expect("README.md");
    assert!(bin().is_file());
    for title in ["Quick start", "A person in the loop", "Kill it, resume it"] {
        let walk = blocks(&readme, title);
        assert!(!walk.is_empty(), "no blocks in `{title}`");
        for (lang, body) in walk {
            match lang.as_str() {
                "sh" => {
                    let (code, out) = sh(&dir, &as_script(&body));
                    assert_eq!(code, 0, "`{title}`:\n{body}\n{out}");
                    if body.contains("kill -9") {
                        assert!(out.contains("stale"), "`runs list` after kill -9:\n{out}");
                        assert!(out.contains("completed after 3 steps"), "{out}");
                        assert!(out.contains("resuming run"), "{out}");
                    }
                }
                "console" => check_console(&dir, &body),
                other => panic!("a `{other}` block in `{title}`: teach this test to run it"),
            }
        }
    }
}

/// A submitted run goes back to the queue when its escalation is resolved: the one next
/// step is a worker's, so no "agentrun resume" advice follows.
#[test]
fn resolving_a_queued_runs_escalation_gives_one_next_step() {
    let p = Project::new();
    p.write(
        "tools.toml",
        "[tools.send]\ndescription = \"send\"\ninput_schema = { type = \"object\" }\n\
         command = [\"sh\", \"-c\", \"cat >/dev/null; echo '\\\"sent\\\"'\"]\napproval = \"always\"\n",
    );
    p.model_script(json!([{"tool_calls": [{"name": "send"}]}, {"text": "sent"}]));
    p.task("", "Send it.");
    p.run(&["submit", "task.md"]).expect_code(0);
    p.run(&["worker", "--until-idle"]).expect_code(0);
    let r = p.run(&["escalations", "resolve", "1", "--approve"]);
    r.expect_code(0);
    assert!(r.stderr.contains("is queued again"), "{r}");
    assert!(!r.stdout.contains("agentrun resume"), "{r}");
    // A run started here (not submitted) is resumed by a person: that advice stays.
    let q = Project::new();
    q.write(
        "tools.toml",
        "[tools.send]\ndescription = \"send\"\ninput_schema = { type = \"object\" }\n\
         command = [\"sh\", \"-c\", \"cat >/dev/null; echo '\\\"sent\\\"'\"]\napproval = \"always\"\n",
    );
    q.model_script(json!([{"tool_calls": [{"name": "send"}]}, {"text": "sent"}]));
    q.task("", "Send it.");
    q.run(&["start", "task.md"]).expect_code(3);
    let r = q.run(&["escalations", "resolve", "1", "--approve"]);
    r.expect_code(0);
    assert!(r.stdout.contains("agentrun resume"), "{r}");
    assert!(!r.stderr.contains("queued again"), "{r}");
}

/// With neither `$USER` nor `$LOGNAME` (cron, containers), the record names the OS
/// account, not "unknown".
#[test]
fn a_cancel_without_by_or_user_names_the_os_account() {
    let account = Command::new("id").arg("-un").output().expect("id -un");
    let account = String::from_utf8_lossy(&account.stdout).trim().to_string();
    let (p, id) = crate::common::blocked_run();
    let out = p
        .command(&["runs", "cancel", &id])
        .env_remove("USER")
        .env_remove("LOGNAME")
        .output()
        .expect("cancel");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(p.show(&id)["cancelled"]["by"], account.as_str());
}

/// The quick start with its knowledge base down answers from last night's cache: the
/// answer reads like a healthy one, so the final line says what it rests on.
#[test]
fn an_answer_built_on_a_stale_fallback_says_it_is_degraded() {
    let root = env!("CARGO_MANIFEST_DIR");
    let db = tempfile::tempdir().expect("db");
    let run = |outage: &str| {
        let out = Command::new(bin())
            .args(["start", "examples/quickstart/task.md"])
            .current_dir(root)
            .env("AGENTRUN_DB", db.path().join("a.db"))
            .env("KB_OUTAGE", outage)
            .output()
            .expect("start");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let degraded = run("1");
    assert!(
        degraded.contains("agentrun: degraded: the answer rests on results from kb_cache"),
        "{degraded}"
    );
    let healthy = run("0");
    assert!(!healthy.contains("degraded"), "{healthy}");
}

/// A scripted model has no prompt cache and no price: its trace shows neither.
#[test]
fn a_scripted_runs_trace_shows_no_cache_share() {
    let p = Project::new();
    p.write(
        "tools.toml",
        "[tools.send]\ndescription = \"send\"\ninput_schema = { type = \"object\" }\n\
         command = [\"sh\", \"-c\", \"cat >/dev/null; echo '\\\"sent\\\"'\"]\napproval = \"always\"\n",
    );
    p.model_script(json!([{"tool_calls": [{"name": "send"}], "usage": {"input": 100, "output": 5}}, {"text": "sent"}]));
    p.task("", "Send it.");
    p.run(&["start", "task.md"]).expect_code(3);
    let r = p.run(&["escalations", "show", "1"]);
    r.expect_code(0);
    assert!(r.stdout.contains("100 tokens in, 5 out"), "{r}");
    assert!(!r.stdout.contains("from the cache"), "{r}");
    assert!(!r.stdout.contains("$0.0"), "{r}");
}

/// At 60 columns the task keeps enough words to tell runs apart: the numbers go first.
#[test]
fn a_narrow_runs_list_keeps_a_readable_task() {
    let p = Project::new();
    p.model_script(json!([{"text": "ok"}]));
    p.task(
        "tools = []",
        "A customer asks whether order ORD-1001 can still be returned.",
    );
    p.run(&["start", "task.md"]).expect_code(0);
    let out = p
        .command(&["runs", "list"])
        .env("COLUMNS", "60")
        .output()
        .expect("runs list");
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text.lines().nth(1).expect("a row");
    assert!(row.chars().count() <= 60, "{text}");
    assert!(row.contains("A customer asks whether"), "{text}");
}

/// `SLOW_SECS=2 agentrun start …` used to reach nothing, silently: the tool's script
/// reads SLOW_SECS, but tools get an allow-list of the environment. `tools check` and
/// `start` now say so once, with the line that passes it; a listed variable is quiet.
#[test]
fn a_variable_the_script_reads_but_is_not_passed_is_named_once() {
    let p = Project::new();
    p.script(
        "slow.sh",
        "#!/bin/sh\ncat >/dev/null\nsleep \"${SLOW_SECS:-0}\"\necho '\"ok\"'\n",
    );
    p.write(
        "tools.toml",
        "[tools.slow]\ndescription = \"slow\"\ninput_schema = { type = \"object\" }\n\
         command = [\"sh\", \"slow.sh\"]\n\
         [tools.web]\ndescription = \"web\"\ninput_schema = { type = \"object\" }\n\
         http = { method = \"GET\", url = \"http://127.0.0.1:9/x\" }\n",
    );
    p.model_script(json!([{"tool_calls": [{"name": "slow"}]}, {"text": "done"}]));
    p.task("tools = [\"slow\"]", "Be slow.");
    let warning = "tool `slow`: its script reads SLOW_SECS, set here but not passed to it";
    let check = p.run_env(&["tools", "check"], &[("SLOW_SECS", "0")]);
    check.expect_code(0);
    assert_eq!(check.stderr.matches(warning).count(), 1, "{check}");
    assert!(
        check.stderr.contains(r#"add `env = ["SLOW_SECS"]`"#),
        "{check}"
    );
    assert!(
        check
            .stdout
            .contains("an HTTP call: no process runs on this machine"),
        "{check}"
    );
    let start = p.run_env(&["start", "task.md"], &[("SLOW_SECS", "0")]);
    start.expect_code(0);
    assert_eq!(start.stderr.matches(warning).count(), 1, "{start}");
    // Not set here: nothing would have reached the tool, nothing to say.
    let unset = p.run(&["tools", "check"]);
    assert!(!unset.stderr.contains("SLOW_SECS"), "{unset}");
}
