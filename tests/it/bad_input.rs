//! Malformed task files, tools.toml files and scripts: each gives one line naming the
//! file and the problem, exit 2, and leaves the database exactly as it was.

use crate::common::Project;
use serde_json::json;

const GOOD_TOOLS: &str = r#"
[tools.echo]
description = "Echo"
input_schema = { type = "object", properties = { x = { type = "string" } } }
command = ["sh", "-c", "cat"]
"#;

const GOOD_SCRIPT: &str = r#"{"turns": [{"text": "hi"}]}"#;
const GOOD_TASK: &str = "+++\nmodel = \"script:script.json\"\n+++\nSay hi.\n";

struct Case {
    name: &'static str,
    task: &'static str,
    tools: &'static str,
    script: &'static str,
    /// Substrings the one-line error must contain (the file, then the problem).
    want: &'static [&'static str],
}

const CASES: &[Case] = &[
    Case {
        name: "unclosed front matter",
        task: "+++\nmodel = \"script:script.json\"\nSay hi.\n",
        tools: GOOD_TOOLS,
        script: GOOD_SCRIPT,
        want: &["task.md", "never closed"],
    },
    Case {
        name: "unknown front matter key",
        task: "+++\nmodel = \"script:script.json\"\nmax_stepz = 3\n+++\nSay hi.\n",
        tools: GOOD_TOOLS,
        script: GOOD_SCRIPT,
        want: &["task.md", "max_stepz"],
    },
    Case {
        name: "zero max_steps",
        task: "+++\nmodel = \"script:script.json\"\nmax_steps = 0\n+++\nSay hi.\n",
        tools: GOOD_TOOLS,
        script: GOOD_SCRIPT,
        want: &["task.md", "max_steps", "positive"],
    },
    Case {
        name: "model without provider",
        task: "+++\nmodel = \"gpt-4o\"\n+++\nSay hi.\n",
        tools: GOOD_TOOLS,
        script: GOOD_SCRIPT,
        want: &["task.md", "gpt-4o", "no provider"],
    },
    Case {
        name: "empty task body",
        task: "+++\nmodel = \"script:script.json\"\n+++\n\n",
        tools: GOOD_TOOLS,
        script: GOOD_SCRIPT,
        want: &["task.md", "no text"],
    },
    Case {
        name: "no model at all",
        task: "Say hi.\n",
        tools: GOOD_TOOLS,
        script: GOOD_SCRIPT,
        want: &["task.md", "no model"],
    },
    Case {
        name: "task names an unknown tool",
        task: "+++\nmodel = \"script:script.json\"\ntools = [\"nope\"]\n+++\nSay hi.\n",
        tools: GOOD_TOOLS,
        script: GOOD_SCRIPT,
        want: &["tools.toml", "nope"],
    },
    Case {
        name: "tools.toml syntax error",
        task: GOOD_TASK,
        tools: "[tools.echo\ndescription = 1\n",
        script: GOOD_SCRIPT,
        want: &["tools.toml"],
    },
    Case {
        name: "tools.toml unknown key",
        task: GOOD_TASK,
        tools: "[tools.echo]\ndescription = \"e\"\ninput_schema = { type = \"object\" }\ncommand = [\"cat\"]\ntimeuot = \"1s\"\n",
        script: GOOD_SCRIPT,
        want: &["tools.toml", "echo", "timeuot"],
    },
    Case {
        name: "bad duration",
        task: GOOD_TASK,
        tools: "[tools.echo]\ndescription = \"e\"\ninput_schema = { type = \"object\" }\ncommand = [\"cat\"]\ntimeout = \"8 parsecs\"\n",
        script: GOOD_SCRIPT,
        want: &["tools.toml", "echo", "timeout"],
    },
    Case {
        name: "fallback to a missing tool",
        task: GOOD_TASK,
        tools: "[tools.echo]\ndescription = \"e\"\ninput_schema = { type = \"object\" }\ncommand = [\"cat\"]\nfallback = [{ tool = \"ghost\" }]\n",
        script: GOOD_SCRIPT,
        want: &["tools.toml", "echo", "ghost"],
    },
    Case {
        name: "fallback cycle",
        task: GOOD_TASK,
        tools: "[tools.a]\ndescription = \"a\"\ninput_schema = { type = \"object\" }\ncommand = [\"cat\"]\nfallback = [{ tool = \"b\" }]\n[tools.b]\ndescription = \"b\"\ninput_schema = { type = \"object\" }\ncommand = [\"cat\"]\nfallback = [{ tool = \"a\" }]\n",
        script: GOOD_SCRIPT,
        want: &["tools.toml", "cycle"],
    },
    Case {
        name: "command and http both",
        task: GOOD_TASK,
        tools: "[tools.echo]\ndescription = \"e\"\ninput_schema = { type = \"object\" }\ncommand = [\"cat\"]\nhttp = { url = \"http://127.0.0.1:1/x\" }\n",
        script: GOOD_SCRIPT,
        want: &["tools.toml", "echo"],
    },
    Case {
        name: "script is not JSON",
        task: GOOD_TASK,
        tools: GOOD_TOOLS,
        script: "{\"turns\": [",
        want: &["script.json"],
    },
    Case {
        name: "script with no turns",
        task: GOOD_TASK,
        tools: GOOD_TOOLS,
        script: "{\"turns\": []}",
        want: &["script.json", "empty"],
    },
    Case {
        name: "script turn with nothing in it",
        task: GOOD_TASK,
        tools: GOOD_TOOLS,
        script: "{\"turns\": [{\"usage\": {\"input\": 1}}]}",
        want: &["script.json", "turn 0"],
    },
];

/// A project with one finished run, so "untouched" means something.
fn project_with_history() -> Project {
    let p = Project::new();
    p.write("tools.toml", GOOD_TOOLS);
    p.write("script.json", GOOD_SCRIPT);
    p.write("task.md", GOOD_TASK);
    p.run(&["start", "task.md"]).expect_code(0);
    p
}

fn db_bytes(p: &Project) -> Vec<u8> {
    std::fs::read(p.db()).expect("db exists")
}

#[test]
fn every_defect_is_one_line_naming_the_file_with_exit_2() {
    assert!(CASES.len() >= 10);
    for case in CASES {
        let p = project_with_history();
        let runs_before = p.run(&["runs", "list", "--json"]).json();
        let bytes_before = db_bytes(&p);
        p.write("task.md", case.task);
        p.write("tools.toml", case.tools);
        p.write("script.json", case.script);
        let r = p.run(&["start", "task.md"]);
        assert_eq!(r.code, 2, "{}: {r}", case.name);
        let lines: Vec<&str> = r.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{}: expected one line\n{r}", case.name);
        for w in case.want {
            assert!(
                lines[0].contains(w),
                "{}: `{w}` missing from {:?}",
                case.name,
                lines[0]
            );
        }
        assert!(r.stdout.is_empty(), "{}: {r}", case.name);
        assert_eq!(
            db_bytes(&p),
            bytes_before,
            "{}: database changed",
            case.name
        );
        assert_eq!(
            p.run(&["runs", "list", "--json"]).json(),
            runs_before,
            "{}",
            case.name
        );
    }
}

#[test]
fn a_missing_task_file_is_exit_2() {
    let p = Project::new();
    let r = p.run(&["start", "nope.md"]);
    r.expect_code(2);
    assert!(
        r.stderr
            .starts_with("agentrun: nope.md: cannot read task file"),
        "{r}"
    );
    assert!(!p.db().exists(), "nothing is created for bad input");
}

#[test]
fn a_non_sqlite_database_is_reported_and_left_untouched() {
    let p = Project::new();
    p.write("tools.toml", GOOD_TOOLS);
    p.write("script.json", GOOD_SCRIPT);
    p.write("task.md", GOOD_TASK);
    let junk = "this is not a database, it is a grocery list\n".repeat(200);
    p.write_db(&junk);
    for args in [&["start", "task.md"][..], &["runs", "list"][..]] {
        let r = p.run(args);
        r.expect_code(2);
        assert!(r.stderr.contains("is not an agentrun database"), "{r}");
        assert_eq!(std::fs::read_to_string(p.db()).unwrap(), junk);
    }
}

#[test]
fn listing_without_a_database_says_how_to_make_one() {
    let p = Project::new();
    let r = p.run(&["runs", "list"]);
    r.expect_code(2);
    assert!(
        r.stderr
            .contains("no such file; `agentrun start` creates it"),
        "{r}"
    );
}

#[test]
fn bad_flags_are_usage_errors() {
    let p = Project::new();
    p.run(&["start", "task.md", "--max-steps", "0"])
        .expect_code(2);
    p.run(&["runs", "list", "--status", "done"]).expect_code(2);
    p.run(&["frobnicate"]).expect_code(2);
    let _ = json!(null);
}

#[test]
fn tools_check_reports_every_problem_with_the_file_and_the_tool() {
    let p = Project::new();
    p.write(
        "tools.toml",
        "[tools.a]\ndescription = \"a\"\ninput_schema = { type = \"object\" }\ncommand = [\"cat\"]\ntimeout = \"soon\"\nfallback = [{ tool = \"ghost\" }]\n\n[tools.b]\ninput_schema = { type = \"object\" }\nhttp = { url = \"http://{host}/x\" }\n",
    );
    let r = p.run(&["tools", "check"]);
    r.expect_code(2);
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert!(lines.len() >= 5, "{r}");
    for want in [
        "agentrun: tools.toml: tool `a`: timeout: bad duration \"soon\"",
        "agentrun: tools.toml: tool `a`: fallback[0].tool: unknown tool `ghost`",
        "agentrun: tools.toml: tool `b`: description: missing",
        "agentrun: tools.toml: tool `b`: http.url: placeholder `{host}` is in the host",
    ] {
        assert!(
            lines.iter().any(|l| l.starts_with(want)),
            "`{want}` missing:\n{r}"
        );
    }
    assert!(lines.last().unwrap().ends_with("4 problems found"), "{r}");
    p.write("tools.toml", GOOD_TOOLS);
    let ok = p.run(&["tools", "check"]);
    ok.expect_code(0);
    assert!(ok.stdout.starts_with("tools.toml: ok, 1 tool\n"), "{ok}");
}
