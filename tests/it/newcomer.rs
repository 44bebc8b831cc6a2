//! What a new user trips on in the first hour, second pass (issue 27): `--json` errors,
//! the same answer from every list without a database, help that teaches, and error
//! lines that name the fix.

use crate::common::{Db, Project, Run};
use serde_json::json;

/// `{"error": {"kind", "message"}}` and nothing else on stdout.
fn error_object(r: &Run, kind: &str) -> String {
    let v = r.json();
    assert_eq!(v["error"]["kind"], kind, "{r}");
    assert_eq!(v.as_object().map(|o| o.len()), Some(1), "{r}");
    v["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no message\n{r}"))
        .to_string()
}

#[test]
fn json_prints_an_error_object_when_a_command_fails_before_its_output() {
    let p = Project::new();
    p.model_script(json!([{"text": "done"}]));
    p.task("tools = []", "x");
    p.run(&["start", "task.md"]).expect_code(0);
    for args in [
        &["start", "missing.md", "--json"][..],
        &["resume", "nosuchrun", "--json"],
        &["runs", "show", "nosuchrun", "--json"],
        &["escalations", "show", "99", "--json"],
        &["escalations", "resolve", "99", "--approve", "--json"],
        &["runs", "list", "--since", "yesterday-ish", "--json"],
        &["runs", "cancel", "nosuchrun", "--json"],
        &["notify", "list", "--db", "missing.db", "--json"],
        &["db", "check", "--db", "missing.db", "--json"],
    ] {
        let r = p.run(args);
        r.expect_code(2);
        let message = error_object(&r, "bad_input");
        assert!(
            r.stderr.contains(&message),
            "the same message on stderr\n{r}"
        );
    }
    // Usage errors found by the argument parser, too.
    let r = p.run(&["start", "--json", "--max-steps", "many"]);
    r.expect_code(2);
    assert!(error_object(&r, "usage").contains("many"), "{r}");
    // A command with an error shape of its own keeps it, as one object.
    let r = p.run(&["tools", "check", "--tools", "missing.toml", "--json"]);
    r.expect_code(2);
    assert_eq!(r.json()["ok"], false, "{r}");
}

/// `escalations list` and `runs list` agree where no run was ever started: a note on
/// stderr naming the database, exit 0, and `[]` with --json (issue 27: escalations
/// exited 2 with "no such file").
#[test]
fn both_lists_say_nothing_yet_the_same_way_without_a_database() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |args: &[&str]| {
        Run::from_output(
            std::process::Command::new(crate::common::bin())
                .current_dir(dir.path())
                .env_remove("AGENTRUN_DB")
                .env_remove("AGENTRUN_CONFIG")
                .args(args)
                .output()
                .expect("spawn agentrun"),
        )
    };
    for (list, note) in [
        ("runs", "no runs yet in .agentrun/agentrun.db"),
        (
            "escalations",
            "no open escalations in .agentrun/agentrun.db",
        ),
        (
            "notify",
            "no failed notification events in .agentrun/agentrun.db",
        ),
    ] {
        let r = run(&[list, "list"]);
        r.expect_code(0);
        assert_eq!(r.stdout, "", "{r}");
        assert!(r.stderr.starts_with(note), "{r}");
        let r = run(&[list, "list", "--json"]);
        r.expect_code(0);
        assert_eq!(r.json(), json!([]), "{r}");
    }
    assert!(!dir.path().join(".agentrun").exists(), "nothing created");
}

/// The header lines up with the rows, and the summary is cut to `COLUMNS` as `runs
/// list`'s task is (issue 27: fixed widths, wrapped at 100).
#[test]
fn escalations_list_is_aligned_and_fits_columns() {
    let p = Project::new();
    p.write(
        "tools.toml",
        "[tools.send]\ndescription = \"send\"\ninput_schema = { type = \"object\" }\ncommand = [\"sh\", \"-c\", \"cat >/dev/null; echo '\\\"sent\\\"'\"]\napproval = \"always\"\n",
    );
    p.model_script(json!([{"tool_calls": [{"name": "send", "args": {"to": "a-rather-long-address@example.com", "body": "a long body that makes the summary much longer than sixty columns"}}]}]));
    p.task("", "Send it.");
    p.run(&["start", "task.md"]).expect_code(3);
    for columns in [60, 200] {
        let r = p.run_env(
            &["escalations", "list"],
            &[("COLUMNS", &columns.to_string())],
        );
        r.expect_code(0);
        let lines: Vec<&str> = r.stdout.lines().collect();
        assert_eq!(lines.len(), 2, "{r}");
        for line in &lines {
            assert!(
                line.chars().count() <= columns,
                "wider than {columns}: {line:?}"
            );
        }
        // Every header word starts where its column does in the row.
        for (name, cell) in [("RUN", 1), ("KIND", 2), ("STATUS", 3), ("SUMMARY", 5)] {
            let at = lines[0].find(name).expect(name);
            let row: Vec<&str> = lines[1].split_whitespace().collect();
            assert_eq!(lines[1].find(row[cell]), Some(at), "{name}:\n{}", r.stdout);
        }
    }
}

#[test]
fn front_matter_typos_get_a_suggestion_and_syntax_errors_a_line() {
    let p = Project::new();
    p.write("typo.md", "+++\ntool = [\"x\"]\n+++\nhi\n");
    p.write(
        "unquoted.md",
        "+++\nmax_steps = 3\nmodel = script:x.json\n+++\nhi\n",
    );
    let r = p.run(&["start", "typo.md"]);
    r.expect_code(2);
    assert_eq!(
        r.stderr.trim(),
        "agentrun: typo.md: front matter: unknown key `tool`; did you mean `tools`?"
    );
    let r = p.run(&["start", "unquoted.md"]);
    r.expect_code(2);
    assert_eq!(
        r.stderr.trim(),
        "agentrun: unquoted.md: front matter: line 3: string values must be quoted, expected literal string"
    );
}

#[test]
fn start_prompt_without_a_model_names_every_way_to_give_one() {
    let p = Project::new();
    p.write("tools.toml", "");
    let r = p.run(&["start", "--prompt", "hello"]);
    r.expect_code(2);
    assert_eq!(
        r.stderr.trim(),
        "agentrun: (prompt): no model: pass --model openai:gpt-4o-mini (or anthropic:…, script:…), or set a default with AGENTRUN_MODEL or `model` in .agentrun/config.toml"
    );
}

/// Help says the thing itself: no issue numbers, no "see README section", and an
/// example for every command that runs something (issue 27: `submit --help`).
#[test]
fn help_says_the_thing_with_an_example_and_no_issue_numbers() {
    let p = Project::new();
    for cmd in [
        &["start"][..],
        &["resume"],
        &["submit"],
        &["worker"],
        &["runs", "list"],
        &["runs", "show"],
        &["escalations", "resolve"],
        &["init"],
    ] {
        let mut args = cmd.to_vec();
        args.push("--help");
        let r = p.run(&args);
        r.expect_code(0);
        assert!(!r.stdout.contains("(issue"), "{r}");
        assert!(!r.stdout.contains("README"), "{r}");
        assert!(r.stdout.contains("Example"), "{r}");
    }
}

/// A project whose scripted model has a price: two turns of 10,000 input and 1,000
/// output tokens at $2.50 / $10 per million, $0.035 each.
fn priced(db: &Db) -> Project {
    let p = Project::on(db);
    p.write("tools.toml", "");
    let turn = json!({"usage": {"input": 10_000, "output": 1_000}});
    let mut call = turn.clone();
    call["tool_calls"] = json!([{"name": "nothing", "args": {}}]);
    let mut answer = turn;
    answer["text"] = json!("done");
    p.model_script(json!([call, answer]));
    p.task(
        "tools = []\nprice = { input = 2.5, output = 10 }",
        "Spend some money on a task whose first line is long enough to be cut.",
    );
    p
}

/// Issue 27: `runs show` said `duration 2.5s` (creation to last update) beside `driven
/// 0.5s`, and `--json` had `duration_ms` holding the driven time. Both times are named
/// for what they are, in both outputs, and `duration_ms` is the wall time.
#[test]
fn runs_show_names_wall_time_and_driven_time_in_both_outputs() {
    let p = priced(&Db::Sqlite);
    p.run(&["start", "task.md"]).expect_code(0);
    let id = p.only_run();
    let v = p.show(&id);
    let (wall, driven) = (v["wall_ms"].as_u64(), v["driven_ms"].as_u64());
    let (Some(wall), Some(driven)) = (wall, driven) else {
        panic!("wall_ms and driven_ms: {v}");
    };
    assert!(wall >= driven, "wall {wall} < driven {driven}");
    assert_eq!(
        v["duration_ms"], v["wall_ms"],
        "a run's duration is its wall time"
    );
    let r = p.run(&["runs", "show", &id]);
    r.expect_code(0);
    let field = |name: &str| {
        r.stdout
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no `{name}` line\n{r}"))
            .to_string()
    };
    assert!(
        field("wall time").ends_with("(created to last update)"),
        "{r}"
    );
    assert!(
        field("driven").ends_with("(time agentrun worked on it)"),
        "{r}"
    );
    assert!(!r.stdout.contains("  duration "), "{r}");
}

/// Issue 27: the line that ends a run dropped the cost the progress lines showed, and
/// `runs list` had no cost: both have it now, `--json` too, and the table still fits
/// 60 columns (TOKENS gives way first).
#[test]
fn the_cost_is_in_the_final_line_and_in_runs_list() {
    cost_in_the_final_line_and_runs_list(&Db::Sqlite);
}

/// The cost test on a backend (`tests/it/pg.rs` runs it on PostgreSQL: the column and
/// its migration exist on both).
pub fn cost_in_the_final_line_and_runs_list(db: &Db) {
    let p = priced(db);
    let r = p.run(&["start", "task.md"]);
    r.expect_code(0);
    assert!(
        r.stderr.contains("(11000/200000 tokens used, $0.0350)"),
        "progress: {r}"
    );
    let last = r.stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains("completed after 2 steps (20000 tokens in, 2000 out, $0.0700) in "),
        "{last}"
    );
    let list = p.run(&["runs", "list", "--json"]);
    assert_eq!(list.expect_code(0).json()[0]["cost_usd"], 0.07, "{list}");
    for (columns, tokens) in [(60, false), (100, true)] {
        let r = p.run_env(&["runs", "list"], &[("COLUMNS", &columns.to_string())]);
        r.expect_code(0);
        let lines: Vec<&str> = r.stdout.lines().collect();
        assert_eq!(lines.len(), 2, "{r}");
        for line in &lines {
            assert!(
                line.chars().count() <= columns,
                "wider than {columns}: {line:?}"
            );
        }
        let header: Vec<&str> = lines[0].split_whitespace().collect();
        let cell = |name: &str| {
            let at = header.iter().position(|h| *h == name).expect(name);
            lines[1]
                .split_whitespace()
                .nth(at)
                .unwrap_or_default()
                .to_string()
        };
        assert_eq!(cell("COST"), "$0.07", "{r}");
        assert_eq!(header.contains(&"TOKENS"), tokens, "{columns}: {r}");
        assert!(lines[1].contains("Spend some"), "{r}");
    }
    // A run without a price has no COST column (its cost is unknown, not zero).
    let q = Project::on(db);
    q.write("tools.toml", "");
    q.model_script(json!([{"text": "done"}]));
    q.task("tools = []", "Free.");
    let r = q.run(&["start", "task.md"]);
    assert!(!r.stderr.contains('$'), "{r}");
    let r = q.run(&["runs", "list"]);
    assert!(!r.stdout.contains("COST"), "{r}");
}

/// Issue 27: off a terminal, the breaker's escalation line ended `…the circuit for
/// t…`. Every cut in progress, the `--json` reason and `escalations list` ends at a
/// word now: what comes before `…` is followed, in the whole text, by a space.
#[test]
fn messages_are_cut_at_a_word_boundary() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |args: &[&str], columns: &str| {
        Run::from_output(
            std::process::Command::new(crate::common::bin())
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .env("AGENTRUN_DB", dir.path().join("a.db"))
                .env("COLUMNS", columns)
                .args(args)
                .output()
                .expect("spawn agentrun"),
        )
    };
    let r = run(&["start", "examples/breaker/task.md", "--json"], "80");
    r.expect_code(3);
    let reason = r.json()["reason"].as_str().unwrap_or_default().to_string();
    let r = run(&["start", "examples/breaker/task.md"], "80");
    r.expect_code(3);
    let line = r
        .stderr
        .lines()
        .find(|l| l.contains("(breaker_open)"))
        .unwrap_or_else(|| panic!("no escalation line\n{r}"))
        .to_string();
    assert!(line.ends_with(&reason), "{line}\n{reason}");
    assert!(reason.ends_with(" the circuit for…"), "{reason}");
    // What the breaker says in full (the escalation keeps its first 160 columns).
    let full = "refund failed 3 times with the same arguments (last: unavailable, 1 \
                attempt(s): refund exited with 69: connection refused by kb.internal:443); \
                the circuit for this call is open";
    let ends_at_a_word = |cut: &str| {
        let kept = cut.trim_end_matches('…').trim_end();
        full.starts_with(kept) && full[kept.len()..].starts_with(char::is_whitespace)
    };
    assert!(ends_at_a_word(&reason), "{reason}\n{full}");
    for columns in ["60", "80", "100"] {
        let list = run(&["escalations", "list"], columns);
        let row = list.stdout.lines().nth(1).unwrap_or_default();
        let cell = &row[row.find("refund").unwrap_or(0)..];
        assert!(
            cell.ends_with('…') && ends_at_a_word(cell),
            "{columns}: {row}\n{full}"
        );
    }
}

/// Issue 27: the tools section says where a tool runs, and it is so: in the folder
/// holding tools.toml, whatever folder agentrun is started from.
#[test]
fn a_tool_runs_in_the_folder_holding_tools_toml_as_the_readme_says() {
    let section = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/tools.md"))
        .expect("docs/tools.md");
    let words = section.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("its working folder is the folder holding tools.toml"),
        "the tools section does not say where a tool runs"
    );
    let p = Project::new();
    p.write(
        "conf/tools.toml",
        "[tools.where]\ndescription = \"where\"\ninput_schema = { type = \"object\" }\n\
         command = [\"sh\", \"-c\", \"cat >/dev/null; printf '\\\"%s\\\"' \\\"$(pwd -P)\\\"\"]\n",
    );
    p.model_script(json!([{"tool_calls": [{"name": "where", "args": {}}]}, {"text": "ok"}]));
    p.task("tools = [\"where\"]", "Where?");
    p.run(&["start", "task.md", "--tools", "conf/tools.toml"])
        .expect_code(0);
    let results = crate::common::tool_results(&p.show(&p.only_run()));
    let conf = p.path().join("conf").canonicalize().expect("conf");
    assert_eq!(results, vec![json!(conf.display().to_string())]);
}
