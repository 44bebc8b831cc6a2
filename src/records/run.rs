//! A run's identity and its row: the id, the status every command and the machine
//! speak of, and what a run's row holds.

use std::fmt;

/// A run's id: 12 lowercase hex digits. Commands accept any unique prefix.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunId(pub String);

impl RunId {
    pub fn generate() -> RunId {
        RunId(format!("{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The `LIKE` pattern for ids starting with `prefix`, or `None` when `prefix` cannot
    /// begin an id: empty, or holding anything but letters, digits, `-` and `_` (issue
    /// 22: `runs rm "%"` and `runs show ""` selected a run). `_` is a LIKE wildcard, so
    /// it is escaped with `\\` (the `ESCAPE` both backends' queries name).
    pub fn prefix_pattern(prefix: &str) -> Option<String> {
        let ok = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        if prefix.is_empty() || !prefix.chars().all(ok) {
            return None;
        }
        Some(format!("{}%", prefix.replace('_', "\\_")))
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    /// Submitted (`agentrun submit`), or handed back to the queue: a worker takes it.
    Queued,
    Running,
    Completed,
    AwaitingApproval,
    Escalated,
    BudgetExhausted,
    Interrupted,
    Failed,
    /// Cancelled by a person (`agentrun runs cancel`): final, never resumed or
    /// claimed (issue 21); `runs fork` starts anew from it.
    Cancelled,
}

impl RunStatus {
    pub const ALL: [RunStatus; 9] = [
        RunStatus::Running,
        RunStatus::Completed,
        RunStatus::AwaitingApproval,
        RunStatus::Escalated,
        RunStatus::BudgetExhausted,
        RunStatus::Interrupted,
        RunStatus::Failed,
        RunStatus::Queued,
        RunStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::AwaitingApproval => "awaiting_approval",
            RunStatus::Escalated => "escalated",
            RunStatus::BudgetExhausted => "budget_exhausted",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<RunStatus> {
        RunStatus::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    pub id: RunId,
    pub task: String,
    pub task_path: String,
    pub status: RunStatus,
    pub max_steps: u32,
    pub max_tokens: u64,
    pub steps: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub answer: Option<String>,
    pub error: Option<String>,
    pub lease_pid: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    /// The worker holding the run (`agentrun worker --name`), if a worker holds it.
    pub worker: Option<String>,
    /// The lease's last heartbeat (ms since the epoch).
    pub heartbeat: Option<i64>,
    /// Money spent on model calls so far (USD, from the price table), as of the last
    /// committed step (issue 27).
    pub cost_usd: f64,
    /// The run and call that started this run as a sub-agent (issue 26).
    pub parent: Option<ParentLink>,
    /// The run this one was forked from, and at which step (`runs fork`, issue 21).
    pub fork: Option<ForkOrigin>,
}

/// A child run's parent: the run, and the model's id of the call that started it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParentLink {
    pub run: RunId,
    pub call: String,
}

impl ParentLink {
    /// The link from a run row's two columns: both set, or none.
    pub fn from_columns(run: Option<String>, call: Option<String>) -> Option<ParentLink> {
        Some(ParentLink {
            run: RunId(run?),
            call: call?,
        })
    }
}

/// What a child run spent (issue 26), counted against its parent's budgets.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Spent {
    pub steps: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
}

impl Spent {
    pub fn add(&mut self, other: &Spent) {
        self.steps += other.steps;
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cost_usd += other.cost_usd;
    }

    pub fn tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    pub fn is_zero(&self) -> bool {
        *self == Spent::default()
    }
}

/// Where a forked run's history came from: the original run, up to the end of `step`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkOrigin {
    pub run: RunId,
    pub step: u32,
}
