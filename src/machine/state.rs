//! The loop state saved with every checkpoint: counters, and everything the recovery
//! policies (breaker, stuck detector, degradation) remember between steps.

use crate::money::usd;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LoopState {
    /// Model steps completed.
    pub steps: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Of `input_tokens`, those read from the provider's prompt cache and those written
    /// to it (issue 23).
    #[serde(skip_serializing_if = "is_zero")]
    pub cached_input_tokens: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
    /// Some step's provider reported no usage: the token counts (and the cost) hold
    /// agentrun's estimate for it (`model::estimate`, issue 22).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub usage_estimated: bool,
    /// Failed calls per tool (any arguments), for withdrawing a tool.
    pub tool_failures: BTreeMap<String, u32>,
    /// Failed calls per (tool, args digest), for the circuit breaker.
    pub call_failures: BTreeMap<String, u32>,
    /// Circuit keys (tool + digest) that are open for the rest of the run.
    pub open_circuits: BTreeSet<String>,
    /// Tools withdrawn from the model.
    pub disabled: BTreeSet<String>,
    /// Recent call signatures and error signatures, newest last, for stuck detection.
    pub recent_calls: Vec<String>,
    pub recent_errors: Vec<String>,
    /// The stuck nudge has been given once.
    pub nudged: bool,
    /// The model has been asked for a degraded (tool-less) answer.
    pub degraded: bool,
    /// Input tokens the provider reported for the last request (0: unknown, or the
    /// context changed since): the base of the next request's size estimate.
    #[serde(skip_serializing_if = "is_zero")]
    pub last_input: u64,
    /// Tool results of steps before this one are shortened in the context (issue 15).
    #[serde(skip_serializing_if = "is_zero_u32")]
    pub shortened_before: u32,
    /// The last compaction, when earlier turns were summarised (issue 15).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compaction: Option<Compaction>,
    /// Money spent on model calls, in USD, from the price table (issue 15).
    #[serde(skip_serializing_if = "is_zero_f64")]
    pub cost_usd: f64,
    /// Wall-clock time the run has been driven, in ms, summed over the processes that
    /// drove it, as of this commit (time paused for a person is not in it).
    #[serde(skip_serializing_if = "is_zero")]
    pub active_ms: u64,
    /// Final answers that failed the task's output schema (issue 26).
    #[serde(skip_serializing_if = "is_zero_u32")]
    pub output_failures: u32,
    /// What this run's sub-agents spent (issue 26): counted against its budgets.
    #[serde(default, skip_serializing_if = "crate::records::Spent::is_zero")]
    pub children: crate::records::Spent,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

fn is_zero_f64(v: &f64) -> bool {
    *v == 0.0
}

impl LoopState {
    /// Tokens spent, the sub-agents' included.
    pub fn tokens_used(&self) -> u64 {
        self.input_tokens + self.output_tokens + self.children.tokens()
    }

    /// Model steps taken, the sub-agents' included.
    pub fn steps_used(&self) -> u32 {
        self.steps + self.children.steps
    }

    /// Money spent, the sub-agents' included.
    pub fn cost_used(&self) -> f64 {
        self.cost_usd + self.children.cost_usd
    }
}

/// Why the budget guard stops a run (never retried as a failure).
#[derive(Debug, Clone, PartialEq)]
pub enum BudgetStop {
    Steps {
        used: u32,
        max: u32,
    },
    Tokens {
        used: u64,
        max: u64,
    },
    /// USD (issue 15).
    Cost {
        used: f64,
        max: f64,
    },
    /// Milliseconds the run has been driven (issue 15).
    Duration {
        used: u64,
        max: u64,
    },
}

impl BudgetStop {
    pub fn message(&self) -> String {
        match self {
            BudgetStop::Steps { used, max } => {
                format!("step budget spent: {used} of {max} steps used")
            }
            BudgetStop::Tokens { used, max } => {
                format!("token budget spent: {used} of {max} tokens used")
            }
            BudgetStop::Cost { used, max } => {
                format!("cost budget spent: {} of {} used", usd(*used), usd(*max))
            }
            BudgetStop::Duration { used, max } => format!(
                "time budget spent: {} of {} used",
                seconds(*used),
                seconds(*max)
            ),
        }
    }
}

/// The guard: may another model step start?
pub fn check_budget(state: &LoopState, max_steps: u32, max_tokens: u64) -> Option<BudgetStop> {
    if state.steps_used() >= max_steps {
        return Some(BudgetStop::Steps {
            used: state.steps_used(),
            max: max_steps,
        });
    }
    if state.tokens_used() >= max_tokens {
        return Some(BudgetStop::Tokens {
            used: state.tokens_used(),
            max: max_tokens,
        });
    }
    None
}

/// The money and time guard (issue 15): cost so far, and time driven so far.
pub fn check_spend(state: &LoopState, active_ms: u64, spend: &Spend) -> Option<BudgetStop> {
    if let Some(max) = spend.max_cost
        && state.cost_used() >= max
    {
        return Some(BudgetStop::Cost {
            used: state.cost_used(),
            max,
        });
    }
    if let Some(max) = spend.max_duration_ms
        && active_ms >= max
    {
        return Some(BudgetStop::Duration {
            used: active_ms,
            max,
        });
    }
    None
}

/// The budget line's money and time part, when those budgets are set.
pub fn spend_note(state: &LoopState, active_ms: u64, spend: &Spend) -> String {
    let mut out = String::new();
    if let Some(max) = spend.max_cost {
        let left = (max - state.cost_used()).max(0.0);
        out += &format!(" {} of {} left.", usd(left), usd(max));
    }
    if let Some(max) = spend.max_duration_ms {
        let left = max.saturating_sub(active_ms);
        out += &format!(" {} of {} time left.", seconds(left), seconds(max));
    }
    out
}

/// A duration as shown to people: whole seconds, or milliseconds under ten seconds.
fn seconds(ms: u64) -> String {
    let d = if ms < 10_000 {
        std::time::Duration::from_millis(ms)
    } else {
        std::time::Duration::from_secs(ms / 1000)
    };
    humantime::format_duration(d).to_string()
}

/// The line appended to the system prompt of every request so the model can wrap up
/// before the guard fires.
pub fn budget_note(state: &LoopState, max_steps: u32, max_tokens: u64) -> String {
    let steps_left = max_steps.saturating_sub(state.steps_used());
    let tokens_left = max_tokens.saturating_sub(state.tokens_used());
    format!(
        "Budget: step {} of {max_steps}, {steps_left} left including this one; \
         {tokens_left} of {max_tokens} tokens left.",
        state.steps + 1
    )
}

/// Where the last compaction left the context (stored in the loop state).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compaction {
    /// The step whose message is the summary.
    pub step: u32,
    /// Steps from this one up to `step` are kept verbatim after the summary.
    pub kept_from: u32,
    /// Assistant turns no longer in the context (all compactions so far): a scripted
    /// model counts them to pick its turn.
    pub turns_left_out: u32,
}

/// The money and time budgets, and the prices they are counted in.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spend {
    pub max_cost: Option<f64>,
    pub max_duration_ms: Option<u64>,
    pub pricing: crate::model::prices::Pricing,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guard_fires_on_steps_then_tokens() {
        let mut s = LoopState {
            steps: 2,
            ..Default::default()
        };
        assert_eq!(check_budget(&s, 3, 100), None);
        s.steps = 3;
        assert_eq!(
            check_budget(&s, 3, 100),
            Some(BudgetStop::Steps { used: 3, max: 3 })
        );
        s.steps = 1;
        s.input_tokens = 90;
        s.output_tokens = 10;
        assert_eq!(
            check_budget(&s, 3, 100),
            Some(BudgetStop::Tokens {
                used: 100,
                max: 100
            })
        );
    }

    #[test]
    fn the_note_counts_the_current_step() {
        let s = LoopState {
            steps: 1,
            input_tokens: 30,
            ..Default::default()
        };
        assert_eq!(
            budget_note(&s, 3, 100),
            "Budget: step 2 of 3, 2 left including this one; 70 of 100 tokens left."
        );
    }
}
