//! `agentrun test DIR…` (recorded runs as regression tests) and the hidden
//! `agentrun replay-tool`, which answers a replayed tool's call from a case.

use super::{BadInput, Cli, Exit, output};
use crate::evals::diff::Line;
use crate::evals::testrun::{self, Options, Verdict};
use clap::Args;
use std::path::{Path, PathBuf};

/// Re-run recorded cases (from `agentrun runs export RUN --as-test DIR`) against the
/// current tools.toml, prompts and policy.
///
/// The model's turns come from the recording; tools answer from the recording too
/// (no side effects) unless --live-tools. A case fails, with a diff of what changed,
/// when the run now calls differently, validates differently, escalates where it did
/// not, or ends otherwise. A folder holding case folders runs each of them.
///
/// Exit codes: 0 every case passed, 1 a case failed, 2 bad input (no such case, a
/// damaged case file, no tools.toml).
///
/// Examples:
///   agentrun runs export 3f9a --as-test tests/cases/refund
///   agentrun test tests/cases
///   agentrun test tests/cases/refund --live-tools
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct TestArgs {
    /// Case folders (holding case.json), or folders of case folders.
    #[arg(value_name = "DIR", required = true)]
    pub dirs: Vec<PathBuf>,
    /// Test against this tools.toml instead of the one each case names.
    #[arg(long, value_name = "PATH")]
    pub tools: Option<PathBuf>,
    /// Run the tools for real (side effects!) instead of replaying their recorded results.
    #[arg(long)]
    pub live_tools: bool,
}

/// Answers one call of a replayed tool from a case (used by `agentrun test`).
#[derive(Debug, Args)]
pub struct ReplayToolArgs {
    /// The case folder.
    pub case: PathBuf,
    /// The tool being called.
    pub tool: String,
}

pub fn test(cli: &Cli, args: &TestArgs) -> anyhow::Result<Exit> {
    let cases = expand(&args.dirs)?;
    let opts = Options {
        live_tools: args.live_tools,
        tools: args.tools.clone(),
    };
    let mut results = Vec::new();
    for dir in &cases {
        let verdict = testrun::run(dir, &opts).map_err(|e| match e {
            e if e.is_bad_input() => anyhow::Error::from(BadInput(e.to_string())),
            e => anyhow::Error::from(e),
        })?;
        if !cli.json {
            say(dir, &verdict)?;
        }
        results.push((dir, verdict));
    }
    let failed = results
        .iter()
        .filter(|(_, v)| matches!(v, Verdict::Failed { .. }))
        .count();
    if cli.json {
        let cases: Vec<_> = results.iter().map(|(d, v)| case_json(d, v)).collect();
        output::print_json(&serde_json::json!({
            "cases": cases,
            "passed": results.len() - failed,
            "failed": failed,
        }))?;
    } else if !cli.quiet {
        crate::errln!("{} passed, {failed} failed", results.len() - failed);
    }
    Ok(if failed == 0 {
        Exit::Completed
    } else {
        Exit::Failed
    })
}

/// Each argument as a case folder, or the case folders directly inside it (sorted).
fn expand(dirs: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for dir in dirs {
        if dir.join(crate::evals::case::CASE_FILE).is_file() {
            out.push(dir.clone());
            continue;
        }
        let entries =
            std::fs::read_dir(dir).map_err(|e| BadInput(format!("{}: {e}", dir.display())))?;
        let mut inner: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join(crate::evals::case::CASE_FILE).is_file())
            .collect();
        if inner.is_empty() {
            return Err(BadInput(format!(
                "{}: no case here (a case folder holds case.json; make one with `agentrun runs export RUN --as-test DIR`)",
                dir.display()
            ))
            .into());
        }
        inner.sort();
        out.extend(inner);
    }
    Ok(out)
}

fn say(dir: &Path, verdict: &Verdict) -> anyhow::Result<()> {
    match verdict {
        Verdict::Passed => crate::outln!("ok   {}", dir.display())?,
        Verdict::Failed { diff, note } => {
            crate::outln!("FAIL {}", dir.display())?;
            if let Some(note) = note {
                crate::outln!("     {}", crate::text::plain(note))?;
            }
            crate::outln!("     (- recorded, + now)")?;
            for line in diff {
                crate::outln!("     {}", crate::text::plain(&line.to_string()))?;
            }
        }
    }
    Ok(())
}

fn case_json(dir: &Path, verdict: &Verdict) -> serde_json::Value {
    match verdict {
        Verdict::Passed => serde_json::json!({"case": dir.display().to_string(), "passed": true}),
        Verdict::Failed { diff, note } => serde_json::json!({
            "case": dir.display().to_string(),
            "passed": false,
            "note": note,
            "diff": diff.iter().map(|l| match l {
                Line::Same(t) => serde_json::json!({"op": "same", "line": t}),
                Line::Gone(t) => serde_json::json!({"op": "recorded", "line": t}),
                Line::New(t) => serde_json::json!({"op": "now", "line": t}),
            }).collect::<Vec<_>>(),
        }),
    }
}

/// Prints the recorded answer for the call on stdin (its arguments as JSON). Always
/// exits 0: a failure is reported as the tool's own error object, as tools do.
pub fn replay_tool(args: &ReplayToolArgs) -> anyhow::Result<Exit> {
    let mut input = String::new();
    let _ = std::io::Read::read_to_string(&mut std::io::stdin(), &mut input);
    let call_args: serde_json::Value = serde_json::from_str(&input).unwrap_or_default();
    let key = std::env::var("AGENTRUN_CALL_ID").unwrap_or_default();
    let call_id = key.rsplit(':').next().unwrap_or_default();
    let answer = match crate::evals::case::load(&args.case) {
        Ok(case) => crate::evals::replay::answer(&case, &args.tool, &call_args, call_id),
        Err(e) => {
            serde_json::json!({"error": "tool_bug", "message": format!("replay: {e}")}).to_string()
        }
    };
    crate::outln!("{answer}")?;
    Ok(Exit::Completed)
}
