//! What the store's multi-row writes do, decided once for both backends (issue 25).
//!
//! Creating or queueing a run, journaling a model turn or a call's outcome, committing
//! a step and carrying a person's decision into a run are each a [`Plan`]: the row
//! writes, in order, with every JSON value encoded here on the caller's thread. A
//! driver runs a plan in one transaction, turning each [`Write`] into its own SQL
//! (`sqlite/plan.rs`, `pg/plan.rs`): what is written, in which order, and what fences
//! it is therefore the same on SQLite and PostgreSQL, and only the SQL dialect differs.

use super::error::Result;
use super::input::{NewEscalation, NewRun, StepCommit};
use super::lease::Lease;
use super::rows::corrupt;
use crate::model::{Message, ModelResponse};
use crate::records::{CallRecord, ParentLink, RunId, RunStatus};
use crate::store::durability::now_ms;
use crate::trace::TraceEvent;
use std::collections::BTreeMap;

/// The row writes of one transaction on one run, in order.
pub(crate) struct Plan {
    pub run: RunId,
    pub writes: Vec<Write>,
    /// A crash point the tests can stop the process at, once every write is made and
    /// before the transaction commits.
    pub fault: Option<&'static str>,
}

/// One row write (or a few rows of one table) of a [`Plan`].
pub(crate) enum Write {
    /// The run's row, leased to this process with token 1 (`queued: false`), or
    /// queued for the workers, held by nobody (`queued: true`).
    NewRun(NewRunRow),
    /// A child run's link to the call that started it; `key` (the call's idempotency
    /// key) is unique, so one call makes one child.
    Parent { link: ParentLink, key: String },
    /// The run's config snapshot and the scripts kept beside it.
    Snapshot {
        snapshot: String,
        scripts: BTreeMap<String, String>,
    },
    /// The opening transcript (seq 0 on, step 0) and the checkpoint at step 0.
    Opening {
        messages: Vec<Encoded>,
        state: String,
    },
    /// Fails with `LeaseLost` unless the lease is still the run's; refreshes the
    /// heartbeat (every write proves the holder is alive).
    Fence(Lease),
    /// [`Write::Fence`] without the heartbeat, where a heartbeat-refreshing commit soon
    /// follows (SQLite saves rewriting the run's row; PostgreSQL fences as `Fence`,
    /// which also locks the row until the transaction ends).
    Holds(Lease),
    /// The run's counters after a step, fenced by `lease` in the same statement.
    Counters { lease: Lease, counters: Counters },
    /// The run's status set outside a step (a person's decision ended it).
    Status { status: RunStatus, reason: String },
    /// The run paused for a person (its escalation queued in the same plan).
    Pause { status: RunStatus },
    /// The run-ended notification, when `status` ends the run (issue 24).
    Ended {
        status: RunStatus,
        text: Option<String>,
    },
    /// A model response journaled for `step`, with its tool calls as pending rows.
    ModelTurn {
        step: i64,
        response: String,
        calls: Vec<PendingCall>,
    },
    /// A call's journal row marked begun.
    Started { step: i64, call_id: String },
    /// A blocked call's start mark cleared: it did not run, it waits for a decision.
    Unstarted { step: i64, call_id: String },
    /// A call's outcome in its journal row.
    Outcome { step: i64, record: CallRecord },
    /// Messages after the transcript's last, with the loop state after them (in the
    /// checkpoint and the step's kept state); `advance` moves the checkpoint to `step`.
    Append {
        step: i64,
        messages: Vec<Encoded>,
        state: String,
        advance: bool,
    },
    /// The journaled response of `step`, now part of the transcript: spent.
    SpendTurn { step: i64 },
    /// Trace events under `step`.
    Events {
        step: i64,
        events: Vec<EncodedEvent>,
    },
    /// An escalation, queued (its id is what the plan returns).
    Escalation(EncodedEscalation),
    /// A between-step escalation's decision, carried into the run.
    Applied(i64),
}

/// A new run's row.
pub(crate) struct NewRunRow {
    pub task: String,
    pub task_path: String,
    pub max_steps: i64,
    pub max_tokens: i64,
    pub queued: bool,
    pub now: i64,
}

/// The run's row after a step.
pub(crate) struct Counters {
    pub step: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_usd: f64,
    pub status: RunStatus,
    pub answer: Option<String>,
    pub error: Option<String>,
    pub now: i64,
}

/// A message as stored: role and content JSON.
pub(crate) type Encoded = (&'static str, String);
/// A trace event as stored: kind, data JSON, time.
pub(crate) type EncodedEvent = (&'static str, String, i64);
/// A tool call of a model turn, as its pending journal row: id, tool, args JSON.
pub(crate) type PendingCall = (String, String, String);

/// An escalation as stored.
pub(crate) struct EncodedEscalation {
    pub step: i64,
    pub kind: &'static str,
    pub summary: String,
    pub detail: String,
}

impl Plan {
    fn on(run: &RunId, writes: Vec<Write>) -> Plan {
        Plan {
            run: run.clone(),
            writes,
            fault: None,
        }
    }

    /// A new run with its snapshot, scripts and opening transcript: leased to this
    /// process, or `queued` for the workers; a child run with its `parent` link.
    pub fn new_run(
        new: &NewRun<'_>,
        queued: bool,
        parent: Option<(&ParentLink, &str)>,
    ) -> Result<Plan> {
        let mut writes = vec![Write::NewRun(NewRunRow {
            task: new.task.to_string(),
            task_path: new.task_path.to_string(),
            max_steps: i64::from(new.max_steps),
            max_tokens: new.max_tokens as i64,
            queued,
            now: now_ms(),
        })];
        if let Some((link, key)) = parent {
            writes.push(Write::Parent {
                link: link.clone(),
                key: key.to_string(),
            });
        }
        writes.push(Write::Snapshot {
            snapshot: new.snapshot.to_string(),
            scripts: new.scripts.clone(),
        });
        writes.push(Write::Opening {
            messages: encode_messages(&new.id, new.messages)?,
            state: new.state.to_string(),
        });
        Ok(Plan::on(&new.id, writes))
    }

    /// A model response journaled for `step` (before its calls run).
    pub fn model_turn(
        lease: &Lease,
        step: u32,
        response: &ModelResponse,
        events: &[TraceEvent],
    ) -> Result<Plan> {
        let json = serde_json::to_string(response).map_err(|e| corrupt(&lease.run, e))?;
        let calls = response
            .message
            .tool_calls()
            .iter()
            .map(|c| (c.id.clone(), c.name.clone(), c.args.to_string()))
            .collect();
        let step = i64::from(step);
        let writes = vec![
            Write::Holds(lease.clone()),
            Write::ModelTurn {
                step,
                response: json,
                calls,
            },
            events_at(&lease.run, step, events)?,
        ];
        Ok(Plan::on(&lease.run, writes))
    }

    /// A call marked begun.
    pub fn started(lease: &Lease, step: u32, call_id: &str) -> Plan {
        let writes = vec![
            Write::Fence(lease.clone()),
            Write::Started {
                step: i64::from(step),
                call_id: call_id.to_string(),
            },
        ];
        Plan::on(&lease.run, writes)
    }

    /// A call's outcome, with the trace events of its running.
    pub fn outcome(
        lease: &Lease,
        step: u32,
        record: &CallRecord,
        events: &[TraceEvent],
    ) -> Result<Plan> {
        let step = i64::from(step);
        let writes = vec![
            Write::Fence(lease.clone()),
            Write::Outcome {
                step,
                record: record.clone(),
            },
            events_at(&lease.run, step, events)?,
        ];
        Ok(Plan::on(&lease.run, writes))
    }

    /// Trace events outside a step commit.
    pub fn events(lease: &Lease, step: u32, events: &[TraceEvent]) -> Result<Plan> {
        let writes = vec![
            Write::Fence(lease.clone()),
            events_at(&lease.run, i64::from(step), events)?,
        ];
        Ok(Plan::on(&lease.run, writes))
    }

    /// A finished step: the run's counters first (so a lost lease is what a fenced-off
    /// writer hears), the run-ended notice, the last call's outcome, the messages and
    /// loop state, the spent model turn, the trace, and the escalation it raised.
    pub fn step(lease: &Lease, c: &StepCommit<'_>) -> Result<Plan> {
        let run = &lease.run;
        let step = i64::from(c.step);
        let mut writes = vec![
            Write::Counters {
                lease: lease.clone(),
                counters: Counters {
                    step,
                    input_tokens: c.input_tokens as i64,
                    output_tokens: c.output_tokens as i64,
                    cost_usd: c.cost_usd,
                    status: c.status,
                    answer: c.answer.map(str::to_string),
                    error: c.error.map(str::to_string),
                    now: now_ms(),
                },
            },
            Write::Ended {
                status: c.status,
                text: c.answer.or(c.error).map(str::to_string),
            },
        ];
        if let Some(record) = c.outcome {
            writes.push(Write::Outcome {
                step,
                record: record.clone(),
            });
        }
        writes.push(Write::Append {
            step,
            messages: encode_messages(run, c.messages)?,
            state: c.state.to_string(),
            advance: true,
        });
        writes.push(Write::SpendTurn { step });
        writes.push(events_at(run, step, c.events)?);
        if let Some(e) = c.escalation {
            writes.push(Write::Escalation(encode_escalation(e)));
        }
        let mut plan = Plan::on(run, writes);
        plan.fault = Some("inside_commit");
        Ok(plan)
    }

    /// An escalation queued outside a step commit; the run paused as `pause_as`, and a
    /// blocked call's start mark cleared (the call did not run: it waits for the
    /// decision).
    pub fn escalation(
        lease: &Lease,
        new: &NewEscalation<'_>,
        pause_as: Option<RunStatus>,
        events: &[TraceEvent],
    ) -> Result<Plan> {
        let step = i64::from(new.step);
        let mut writes = vec![
            Write::Fence(lease.clone()),
            Write::Escalation(encode_escalation(new)),
        ];
        if let Some(status) = pause_as {
            writes.push(Write::Pause { status });
        }
        if let (true, Some(call)) = (new.kind().blocks_a_call(), new.detail.facts.call_id()) {
            writes.push(Write::Unstarted {
                step,
                call_id: call.as_str().to_string(),
            });
        }
        writes.push(events_at(&lease.run, step, events)?);
        Ok(Plan::on(&lease.run, writes))
    }

    /// A person's decision carried into the run between steps: its messages and the
    /// new loop state, the status it sets (if any), and the escalation marked applied.
    pub fn resolution(
        lease: &Lease,
        escalation: i64,
        step: u32,
        messages: &[Message],
        state: &str,
        status: Option<(RunStatus, &str)>,
    ) -> Result<Plan> {
        let mut writes = vec![
            Write::Fence(lease.clone()),
            Write::Append {
                step: i64::from(step),
                messages: encode_messages(&lease.run, messages)?,
                state: state.to_string(),
                advance: false,
            },
        ];
        if let Some((status, reason)) = status {
            writes.push(Write::Status {
                status,
                reason: reason.to_string(),
            });
            writes.push(Write::Ended {
                status,
                text: Some(reason.to_string()),
            });
        }
        writes.push(Write::Applied(escalation));
        Ok(Plan::on(&lease.run, writes))
    }
}

fn events_at(run: &RunId, step: i64, events: &[TraceEvent]) -> Result<Write> {
    Ok(Write::Events {
        step,
        events: encode_events(run, events)?,
    })
}

pub(crate) fn encode_messages(run: &RunId, messages: &[Message]) -> Result<Vec<Encoded>> {
    messages
        .iter()
        .map(|m| {
            let content = serde_json::to_string(&m.content).map_err(|e| corrupt(run, e))?;
            Ok((m.role.as_str(), content))
        })
        .collect()
}

/// Events as stored; one that carries its own time was written later than it happened.
pub(crate) fn encode_events(run: &RunId, events: &[TraceEvent]) -> Result<Vec<EncodedEvent>> {
    let now = now_ms();
    events
        .iter()
        .map(|e| {
            let data = serde_json::to_string(e).map_err(|err| corrupt(run, err))?;
            Ok((e.kind(), data, e.at_ms().unwrap_or(now)))
        })
        .collect()
}

pub(crate) fn encode_escalation(new: &NewEscalation<'_>) -> EncodedEscalation {
    EncodedEscalation {
        step: i64::from(new.step),
        kind: new.kind().as_str(),
        summary: new.summary.to_string(),
        detail: new.detail.to_json().to_string(),
    }
}
