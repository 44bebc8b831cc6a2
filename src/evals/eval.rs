//! `agentrun eval`: each task of a suite, N times per model, as ordinary durable runs.
//!
//! One slot per task × model × repeat, in that order. A slot's life, each step stored
//! before the next begins (`store/evals.rs`):
//!
//! 1. no run yet: `agentrun submit` checks and stores the run (queued) and prints its
//!    id, which the slot records at once;
//! 2. the run not ended (queued, running with its holder gone, interrupted):
//!    `agentrun resume` drives it to its end, as for any run;
//! 3. ended: its `runs show --json` is scored ([`super::checks`]) and the slot keeps
//!    the result.
//!
//! An eval killed anywhere resumes from there: scored slots are kept, a begun run is
//! resumed from its last committed step (never started anew), and the rest begin.
//! `K` slots run at once (`--concurrency`).

use super::checks::CheckResult;
use super::child::{Agentrun, ChildError};
use super::suite::{SuiteTask, TaskSource};
use crate::store::Store;
use crate::store::evals::SlotKey;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Mutex;

/// What an eval runs, as resolved when it began (stored with it).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Plan {
    pub suite: super::suite::Suite,
    /// Model specs; `""` runs each task with its own front matter's model.
    pub models: Vec<String>,
    pub repeat: u32,
    /// Where scorers run (the suite's folder).
    pub dir: PathBuf,
}

/// A scored run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Scored {
    pub run_id: String,
    pub passed: bool,
    pub status: String,
    pub steps: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
    /// The time a process drove the run.
    pub ms: u64,
    pub checks: Vec<CheckResult>,
}

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("{task} × {model} #{repeat}: {source}")]
    Slot {
        task: String,
        model: String,
        repeat: u32,
        source: ChildError,
    },
    /// A run was interrupted (Ctrl-C): the eval stops; running it again resumes.
    #[error("interrupted")]
    Interrupted,
}

/// One slot to fill.
#[derive(Debug, Clone)]
struct Slot {
    task: usize,
    model: usize,
    repeat: u32,
    run_id: Option<String>,
}

pub struct Eval<'a> {
    pub store: &'a Store,
    pub agentrun: Agentrun,
    pub name: String,
    pub plan: Plan,
    pub concurrency: usize,
}

impl Eval<'_> {
    /// Fills every slot without a result; `say` gets a line per scored run.
    pub fn run(&self, say: &(dyn Fn(String) + Sync)) -> Result<(), EvalError> {
        let todo = Mutex::new(self.todo()?);
        let first_error = Mutex::new(None);
        std::thread::scope(|s| {
            for _ in 0..self.concurrency.max(1) {
                s.spawn(|| {
                    loop {
                        let next = todo.lock().unwrap_or_else(|e| e.into_inner()).pop();
                        let Some(slot) = next else { break };
                        if let Err(e) = self.fill(&slot, say) {
                            let mut first = first_error.lock().unwrap_or_else(|e| e.into_inner());
                            first.get_or_insert(e);
                            // Stop taking slots; the ones running finish.
                            todo.lock().unwrap_or_else(|e| e.into_inner()).clear();
                        }
                    }
                });
            }
        });
        match first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Slots without a result, last first (workers pop from the end).
    fn todo(&self) -> Result<Vec<Slot>, EvalError> {
        let stored = self.store.eval_slots(&self.name)?;
        let mut out = Vec::new();
        for (t, task) in self.plan.suite.tasks.iter().enumerate() {
            for (m, model) in self.plan.models.iter().enumerate() {
                for repeat in 0..self.plan.repeat {
                    let row = stored
                        .iter()
                        .find(|r| r.task == task.name && r.model == *model && r.repeat == repeat);
                    if row.is_some_and(|r| r.result.is_some()) {
                        continue;
                    }
                    out.push(Slot {
                        task: t,
                        model: m,
                        repeat,
                        run_id: row.and_then(|r| r.run_id.clone()),
                    });
                }
            }
        }
        out.reverse();
        Ok(out)
    }

    fn fill(&self, slot: &Slot, say: &(dyn Fn(String) + Sync)) -> Result<(), EvalError> {
        let task = &self.plan.suite.tasks[slot.task];
        let model = &self.plan.models[slot.model];
        let key = SlotKey {
            eval: &self.name,
            task: &task.name,
            model,
            repeat: slot.repeat,
        };
        let slot_err = |source| EvalError::Slot {
            task: task.name.clone(),
            model: model.clone(),
            repeat: slot.repeat,
            source,
        };
        let id = match &slot.run_id {
            Some(id) => id.clone(),
            None => {
                let id = self.submit(task, model).map_err(slot_err)?;
                self.store.set_eval_run(key, &id)?;
                id
            }
        };
        let run = self
            .drive(&id)
            .map_err(slot_err)?
            .ok_or(EvalError::Interrupted)?;
        let scored = score(task, &run, &self.plan.dir);
        say(format!(
            "{} × {} #{}: {} ({}, run {id})",
            task.name,
            shown_model(model),
            slot.repeat + 1,
            if scored.passed { "passed" } else { "failed" },
            scored.status
        ));
        let json = serde_json::to_string(&scored).unwrap_or_default();
        self.store.set_eval_result(key, &json)?;
        Ok(())
    }

    /// `agentrun submit` for the task with the model: the run's id.
    fn submit(&self, task: &SuiteTask, model: &str) -> Result<String, ChildError> {
        let mut args: Vec<OsString> = vec!["submit".into()];
        match &task.source {
            TaskSource::File(f) => args.push(f.into()),
            TaskSource::Prompt(p) => args.extend(["--prompt".into(), p.into()]),
        }
        if let Some(tools) = &self.plan.suite.tools {
            args.extend(["--tools".into(), tools.into()]);
        }
        if !model.is_empty() {
            args.extend(["--model".into(), model.into()]);
        }
        let out = self.agentrun.json(&args)?;
        Ok(out.json["run_id"].as_str().unwrap_or_default().to_string())
    }

    /// Drives the run to its end (resuming it when it has not ended) and reads it;
    /// `None` when the drive was interrupted (Ctrl-C).
    fn drive(&self, id: &str) -> Result<Option<Value>, ChildError> {
        let show = self.agentrun.show(id)?;
        if !matches!(
            show["status"].as_str(),
            Some("queued" | "running" | "interrupted")
        ) {
            return Ok(Some(show));
        }
        let out = self.agentrun.json(&["resume".into(), id.into()])?;
        if out.code == crate::cli::Exit::Interrupted as i32 {
            return Ok(None);
        }
        self.agentrun.show(id).map(Some)
    }
}

/// A model as shown in reports: `(task's own)` for the front matter's.
pub fn shown_model(model: &str) -> &str {
    if model.is_empty() {
        "(task's own)"
    } else {
        model
    }
}

/// Scores an ended run: its status must be the task's, and every check must pass.
pub fn score(task: &SuiteTask, run: &Value, dir: &std::path::Path) -> Scored {
    let status = run["status"].as_str().unwrap_or_default().to_string();
    let mut checks = vec![CheckResult {
        check: format!("status {}", task.status),
        passed: status == task.status,
        detail: (status != task.status).then(|| {
            let why = run["error"].as_str().unwrap_or_default();
            format!("ended {status} {why}").trim().to_string()
        }),
    }];
    checks.extend(task.checks.iter().map(|c| c.score(run, dir)));
    let n = |k: &str| run["tokens"][k].as_u64().unwrap_or(0);
    Scored {
        run_id: run["id"].as_str().unwrap_or_default().to_string(),
        passed: checks.iter().all(|c| c.passed),
        status,
        steps: run["steps"].as_u64().unwrap_or(0),
        input_tokens: n("input"),
        output_tokens: n("output"),
        cost_usd: run["cost_usd"].as_f64().unwrap_or(0.0),
        ms: run["driven_ms"].as_u64().unwrap_or(0),
        checks,
    }
}
