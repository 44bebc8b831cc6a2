//! Issue 13, "docs and help": help without repeated global options or defaults, one
//! error style, man pages per command with EXIT STATUS and ENVIRONMENT, completions
//! that offer statuses and run ids, and the messages that used to mislead.

use crate::common::{Project, Run, peer};
use serde_json::{Value, json};

const COMMANDS: &[&[&str]] = &[
    &["start"],
    &["resume"],
    &["runs", "list"],
    &["runs", "show"],
    &["runs", "export"],
    &["runs", "rm"],
    &["runs", "prune"],
    &["escalations", "list"],
    &["escalations", "show"],
    &["escalations", "resolve"],
    &["tools", "check"],
    &["init"],
    &["completions"],
    &["man"],
];

#[test]
fn subcommand_help_points_to_global_options_instead_of_repeating_them() {
    let p = Project::new();
    for cmd in COMMANDS {
        let mut args = cmd.to_vec();
        args.push("--help");
        let r = p.run(&args);
        r.expect_code(0);
        assert!(!r.stdout.contains("--db <PATH>"), "{cmd:?}\n{r}");
        assert!(!r.stdout.contains("-q, --quiet"), "{cmd:?}\n{r}");
        assert!(
            r.stdout
                .trim_end()
                .ends_with("Global options: --db PATH, --json, --quiet (see `agentrun --help`)."),
            "{cmd:?}\n{r}"
        );
        // A default is printed once: by the doc text or by clap, never both.
        for line in r.stdout.lines() {
            assert!(line.matches("[default:").count() <= 1, "{cmd:?}: {line}");
        }
        let lines: Vec<&str> = r.stdout.lines().collect();
        for pair in lines.windows(2) {
            assert!(
                !(pair[0].contains("[default:") && pair[1].trim_start().starts_with("[default:")),
                "{cmd:?}: a default printed twice:\n{}\n{}",
                pair[0],
                pair[1]
            );
        }
    }
    let top = p.run(&["--help"]);
    assert!(
        top.stdout
            .contains("Global options (any command, before or after it):"),
        "{top}"
    );
    assert!(top.stdout.contains("AGENTRUN_MODEL"), "{top}");
}

#[test]
fn usage_errors_speak_like_every_other_error() {
    let p = Project::new();
    let r = p.run(&["runs", "list", "--status", "done"]);
    r.expect_code(2);
    assert!(
        r.stderr
            .starts_with("agentrun: invalid value 'done' for '--status <STATUS>'"),
        "{r}"
    );
    let r = p.run(&["frobnicate"]);
    r.expect_code(2);
    assert!(
        r.stderr
            .starts_with("agentrun: unrecognized subcommand 'frobnicate'"),
        "{r}"
    );
}

#[test]
fn man_pages_exist_per_command_with_exit_status_and_environment() {
    let p = Project::new();
    let page = p.run(&["man", "runs", "list"]);
    page.expect_code(0);
    assert!(
        page.stdout.starts_with(".TH agentrun-runs-list 1"),
        "{page}"
    );
    for section in [
        ".SH \"EXIT STATUS\"",
        ".SH ENVIRONMENT",
        ".SH FILES",
        "AGENTRUN_DB",
    ] {
        assert!(page.stdout.contains(section), "{section} missing\n{page}");
    }
    assert_eq!(
        page.stdout.matches(".ds Aq").count(),
        2,
        "one apostrophe definition"
    );
    p.run(&["man", "--dir", "pages"]).expect_code(0);
    for name in [
        "agentrun.1",
        "agentrun-start.1",
        "agentrun-runs-prune.1",
        "agentrun-escalations-resolve.1",
    ] {
        assert!(p.path().join("pages").join(name).is_file(), "{name}");
    }
    let bad = p.run(&["man", "runs", "bogus"]);
    bad.expect_code(2);
    assert!(
        bad.stderr
            .contains("the commands are: list, show, export, rm, cancel, fork, send, prune"),
        "{bad}"
    );
}

/// A project with one finished run, and the run's id: what completion should offer.
fn one_finished_run() -> (Project, String) {
    let p = Project::new();
    p.model_script(json!([{"text": "done"}]));
    p.task("tools = []", "x");
    let id = p.run(&["start", "task.md", "--json"]).expect_code(0).json()["run_id"]
        .as_str()
        .expect("id")
        .to_string();
    (p, id)
}

/// Runs bash's completion function for a command line; what it would offer.
fn complete(p: &Project, line: &str) -> Vec<String> {
    let path = crate::common::path_with_bin();
    let script = format!(
        "source <(agentrun completions bash)\nCOMP_WORDS=({line} '')\nCOMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))\nCOMP_LINE='{line} '\nCOMP_POINT=${{#COMP_LINE}}\n_agentrun_with_run_ids agentrun '' \"${{COMP_WORDS[COMP_CWORD-1]}}\"\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n"
    );
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(p.path())
        .env("PATH", path)
        .env("AGENTRUN_DB", p.db())
        .output()
        .expect("bash");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn bash_completion_offers_statuses_and_run_ids() {
    if peer::available("bash", "`apt-get install bash`", || peer::on_path("bash")).is_none() {
        return;
    }
    let (p, id) = one_finished_run();
    assert_eq!(
        complete(&p, "agentrun runs show"),
        std::slice::from_ref(&id)
    );
    assert_eq!(complete(&p, "agentrun resume"), std::slice::from_ref(&id));
    // The operators' commands (issue 21): the run id first, nothing after it.
    assert_eq!(
        complete(&p, "agentrun runs fork"),
        std::slice::from_ref(&id)
    );
    assert_eq!(
        complete(&p, "agentrun runs send"),
        std::slice::from_ref(&id)
    );
    let after_id = complete(&p, &format!("agentrun runs send {id}"));
    assert!(!after_id.contains(&id), "{after_id:?}");
    let statuses = complete(&p, "agentrun runs list --status");
    assert!(
        statuses.contains(&"budget_exhausted".to_string()),
        "{statuses:?}"
    );
}

/// Drives an interactive zsh in a pseudo-terminal (zsh's own `zpty`): loads the
/// completion system with agentrun's script, presses Tab after the command line, and
/// prints what the first `compadd` of that completion offered, comma-separated.
const ZSH_DRIVER: &str = r#"zmodload zsh/zpty
zpty z zsh -f -i
zpty -w z "PROMPT=''; fpath=($1 \$fpath); autoload -U compinit; compinit -u -D"
zpty -w z 'compadd() { if (( ${@[(I)-[OAD]]} )); then builtin compadd "$@"; return; fi; typeset -a __hits; builtin compadd -A __hits "$@"; print -r -- "<""<${(j:,:)__hits}>"">"; }'
zpty -w z 'bindkey "^I" complete-word'
zpty -w -n z "$2"$'\t'
zpty -r -m z got '*<<*>>*'
print -r -- ${${got#*<<}%%>>*}
zpty -d z
"#;

/// What zsh offers after `line` (with a trailing space), through agentrun's script.
fn complete_zsh(p: &Project, line: &str) -> String {
    let path = crate::common::path_with_bin();
    let script = p.run(&["completions", "zsh"]).expect_code(0).stdout.clone();
    p.write("zfunc/_agentrun", &script);
    let driver = p.write("complete.zsh", ZSH_DRIVER);
    let mut child = std::process::Command::new("zsh")
        .arg("-f")
        .arg(&driver)
        .arg(p.path().join("zfunc"))
        .arg(format!("{line} "))
        .current_dir(p.path())
        .env("PATH", path)
        .env("AGENTRUN_DB", p.db())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("zsh");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while child.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("zsh completion of `{line}` never finished");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let out = child.wait_with_output().expect("zsh output");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn zsh_completion_offers_run_ids_and_statuses() {
    let zpty = || {
        std::process::Command::new("zsh")
            .args(["-fc", "zmodload zsh/zpty"])
            .status()
            .is_ok_and(|s| s.success())
            .then_some(())
    };
    // .ci/run installs zsh; a developer machine may not have it.
    if peer::available("zsh with zsh/zpty", "`apt-get install zsh`", zpty).is_none() {
        return;
    }
    let (p, id) = one_finished_run();
    for line in [
        "agentrun resume",
        "agentrun runs show",
        "agentrun runs export",
        "agentrun runs rm",
        "agentrun runs fork",
        "agentrun runs send",
    ] {
        assert_eq!(complete_zsh(&p, line), id, "after `{line}`");
    }
    let statuses = complete_zsh(&p, "agentrun runs list --status");
    assert!(statuses.contains("budget_exhausted"), "{statuses}");
}

#[test]
fn fish_completion_offers_run_ids_and_statuses() {
    // .ci/run installs fish; a developer machine may not have it.
    if peer::available("fish", "`apt-get install fish`", || peer::on_path("fish")).is_none() {
        return;
    }
    let (p, id) = one_finished_run();
    let script = p
        .run(&["completions", "fish"])
        .expect_code(0)
        .stdout
        .clone();
    let file = p.write("agentrun.fish", &script);
    // `complete -C LINE` prints what fish would offer after LINE.
    let complete = |line: &str| -> Vec<String> {
        let out = std::process::Command::new("fish")
            .arg("--no-config")
            .arg("-c")
            .arg(format!("source {}; complete -C '{line} '", file.display()))
            .current_dir(p.path())
            .env("PATH", crate::common::path_with_bin())
            .env("AGENTRUN_DB", p.db())
            .output()
            .expect("fish");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.split('\t').next().unwrap_or(l).to_string())
            .collect()
    };
    for line in [
        "agentrun resume",
        "agentrun runs show",
        "agentrun runs rm",
        "agentrun runs fork",
        "agentrun runs send",
    ] {
        assert_eq!(complete(line), std::slice::from_ref(&id), "after `{line}`");
    }
    let statuses = complete("agentrun runs list --status");
    assert!(
        statuses.contains(&"budget_exhausted".to_string()),
        "{statuses:?}"
    );
}

#[test]
fn front_matter_mistakes_name_the_key_or_the_format() {
    let p = Project::new();
    p.write("task.md", "---\nmodel: openai:gpt-4o-mini\n---\nDo it.\n");
    let r = p.run(&["start", "task.md"]);
    r.expect_code(2);
    assert!(
        r.stderr
            .contains("front matter is TOML between `+++` lines, not YAML"),
        "{r}"
    );
    p.write(
        "task.md",
        "+++\nmodel = \"script:s.json\"\nmax_steps = \"lots\"\n+++\nDo it.\n",
    );
    let r = p.run(&["start", "task.md"]);
    r.expect_code(2);
    assert_eq!(
        r.stderr,
        "agentrun: task.md: front matter: `max_steps` must be a whole number, not a string (\"lots\")\n"
    );
}

#[test]
fn the_budget_hint_names_only_the_budget_that_ran_out() {
    let p = Project::new();
    p.write(
        "tools.toml",
        "[tools.t]\ndescription = \"t\"\ninput_schema = { type = \"object\" }\ncommand = [\"echo\", \"1\"]\n",
    );
    p.model_script(json!([
        {"tool_calls": [{"name": "t"}], "usage": {"input": 10, "output": 1}},
        {"tool_calls": [{"name": "t", "args": {"n": 2}}], "usage": {"input": 10, "output": 1}},
        {"text": "done"}
    ]));
    p.task("max_steps = 1", "Loop.");
    let r = p.run(&["start", "task.md"]);
    r.expect_code(4);
    let last = r.stderr.lines().last().unwrap_or_default();
    assert!(last.contains("--max-steps N` (N is the new total)"), "{r}");
    assert!(!last.contains("--max-tokens"), "{r}");
}

#[test]
fn a_failed_run_has_no_answer_and_keeps_its_partial_text_apart() {
    let p = Project::new();
    p.model_script(json!([{"text": "A long essay that was cut", "stop": "max_tokens"}]));
    p.task("tools = []", "Write an essay.");
    let v: Value = p.run(&["start", "task.md", "--json"]).expect_code(1).json();
    assert_eq!(v["status"], "failed");
    assert_eq!(v["answer"], Value::Null);
    assert_eq!(v["partial_answer"], "A long essay that was cut");
}

#[test]
fn a_run_waiting_for_a_person_has_no_answer_whether_started_or_resumed() {
    let p = Project::new();
    p.script("pay.sh", "#!/bin/sh\ncat > /dev/null\nexit 77\n");
    p.write(
        "tools.toml",
        "[tools.pay]\ndescription = \"p\"\ninput_schema = { type = \"object\" }\n\
         command = [\"sh\", \"pay.sh\"]\n",
    );
    // The third identical failure opens the circuit when its step commits, so the
    // step's text is stored with it: text on the way, not an answer.
    let call = json!([{"name": "pay", "args": {"order": 1}}]);
    p.model_script(json!([
        {"text": "Paying.", "tool_calls": call},
        {"text": "Again.", "tool_calls": call},
        {"text": "Once more.", "tool_calls": call},
        {"text": "Paid."}
    ]));
    p.task("", "Pay order 1.");
    let started: Value = p.run(&["start", "task.md", "--json"]).expect_code(3).json();
    assert_eq!(started["status"], "escalated", "{started}");
    assert_eq!(started["answer"], Value::Null, "{started}");
    let id = started["run_id"].as_str().expect("id").to_string();
    // `resume` of a run still waiting reads its outcome back from the database.
    let waiting: Value = p.run(&["resume", &id, "--json"]).expect_code(3).json();
    assert_eq!(waiting["answer"], Value::Null, "{waiting}");
    let esc = started["escalation_id"].as_str().expect("escalation id");
    p.run(&["escalations", "resolve", esc, "--reply", "paid by hand"])
        .expect_code(0);
    let done: Value = p.run(&["resume", &id, "--json"]).expect_code(0).json();
    assert_eq!(done["answer"], "Paid.", "{done}");
    // And read back once completed: the stored answer.
    let again: Value = p.run(&["resume", &id, "--json"]).expect_code(0).json();
    assert_eq!(again["answer"], "Paid.");
}

#[test]
fn the_breaker_handover_lists_the_calls_that_were_tried() {
    let p = Project::new();
    p.script(
        "down.sh",
        "#!/bin/sh\ncat > /dev/null\necho 'kb is down' >&2\nexit 66\n",
    );
    p.write(
        "tools.toml",
        "[tools.kb]\ndescription = \"kb\"\ninput_schema = { type = \"object\" }\ncommand = [\"./down.sh\"]\n",
    );
    let call = json!({"tool_calls": [{"name": "kb", "args": {"q": "x"}}]});
    p.model_script(json!([call, call, call, call, {"text": "done"}]));
    p.task("", "Search.");
    let v: Value = p.run(&["start", "task.md", "--json"]).expect_code(3).json();
    let esc = v["escalation_id"].as_str().expect("escalation");
    let show = p.run(&["escalations", "show", esc]);
    assert!(!show.stdout.contains("nothing yet"), "{show}");
    assert_eq!(
        show.stdout.matches("kb({\"q\":\"x\"}) ✗ not_found").count(),
        3,
        "{show}"
    );
}

#[test]
fn ctrl_c_during_a_non_idempotent_call_says_resume_will_ask_a_person() {
    let p = Project::new();
    p.script(
        "send.sh",
        "#!/bin/sh\ncat > /dev/null\ntouch started\nwhile [ -f hold ]; do sleep 0.02; done\necho '\"sent\"'\n",
    );
    p.write(
        "tools.toml",
        "[tools.send]\ndescription = \"send\"\ninput_schema = { type = \"object\" }\ncommand = [\"./send.sh\"]\n",
    );
    p.model_script(json!([{"tool_calls": [{"name": "send"}]}, {"text": "done"}]));
    p.task("", "Send.");
    p.write("hold", "");
    let child = p
        .command(&["start", "task.md", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let started = p.path().join("started");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !started.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(started.exists(), "the tool never started");
    // SAFETY: plain kill(2) on the child we spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = Run::from_output(child.wait_with_output().expect("wait"));
    out.expect_code(130);
    let reason = out.json()["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        reason.contains("`send` was running; it is not idempotent, so resume will ask a person"),
        "{out}"
    );
}
