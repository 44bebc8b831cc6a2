//! The context the next request needs (issue 15): the messages a model request is
//! built from, as opposed to the full transcript the store keeps for `runs show`.
//!
//! **This is the one place that says what the next request needs.** Without a
//! compaction it is the whole transcript. After one it is the opening (system prompt
//! and task, step 0), the summary (the compaction step's message), the steps kept
//! verbatim (`kept_from` up to the compaction step) and every step since; tool results
//! of steps before [`LoopState::shortened_before`] are shortened. A loader that wants
//! to read less than the whole transcript reads step 0 and the steps from
//! [`first_step_needed`] on, and hands them to [`Context::from_stored`].
//!
//! **When to compact** ([`decide`], pure): the next request's size is estimated as the
//! input tokens the provider reported for the last request plus bytes/4 of what was
//! added since (the last assistant turn and its results); with no reported usage (a
//! model that reports none, or right after a compaction) it is bytes/4 of the whole
//! context, the system prompt and the tool schemas, plus a margin for the budget line.
//! Past [`COMPACT_AT`] of the room the window leaves for input (the window minus the
//! output cap), old tool results are shortened first (every step but the last two);
//! if that is not enough, the earlier turns are summarised by the model into one
//! message — a step of its own, journaled and committed like any other, so a resumed
//! run reads the same compacted context and does not pay for the summary again.

pub use super::state::Compaction;
use super::state::LoopState;
use crate::model::estimate::{approx_tokens, message_bytes};
use crate::model::{Message, Part, Role};
use serde_json::Value;

/// Compact when the estimate passes this share of the room for input.
pub const COMPACT_AT: f64 = 0.75;
/// A shortened tool result keeps this many bytes of its text.
pub const SHORT_RESULT_BYTES: usize = 400;
/// In the summary request, one tool result keeps at most this many bytes.
const SUMMARY_RESULT_BYTES: usize = 1500;
/// Tokens kept for the budget line and message framing in an estimate from bytes.
const MARGIN_TOKENS: u64 = 64;

/// The system prompt of a compaction request.
pub const COMPACT_PROMPT: &str = "You are compacting the context of a long-running agent. \
The agent will read your summary instead of the turns below, so it must be able to finish \
its task from the summary alone. Write one message with three parts:\n\
1. Facts found: every value, identifier, number and result the task may still need — copy \
them exactly.\n\
2. Effects done: every tool call that changed something outside (sent, wrote, deleted, \
paid…), with its call id and outcome, so that it is not done again.\n\
3. Open questions and the next step.\n\
An earlier summary, if there is one, comes first: carry its facts and effects forward. \
Be brief. Do not call tools.";

/// The first step (after the opening, step 0) a loader must read to rebuild the
/// context: all of them when the run was never compacted.
pub fn first_step_needed(state: &LoopState) -> u32 {
    state
        .compaction
        .as_ref()
        .map_or(1, |c| c.kept_from.min(c.step))
}

/// The messages the next request is built from, each with the step it belongs to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Context {
    messages: Vec<Message>,
    steps: Vec<u32>,
}

impl Context {
    /// A run's opening (system prompt first, then the task), step 0.
    pub fn opening(messages: Vec<Message>) -> Context {
        let steps = vec![0; messages.len()];
        Context { messages, steps }
    }

    /// The context from stored messages `(step, message)` in transcript order: the
    /// whole transcript or any suffix of it from [`first_step_needed`] on, with step 0.
    pub fn from_stored(
        stored: impl IntoIterator<Item = (u32, Message)>,
        state: &LoopState,
    ) -> Self {
        let mut ctx = Context::default();
        let Some(c) = &state.compaction else {
            for (step, m) in stored {
                ctx.push(step, m);
            }
            ctx.shorten_before(state.shortened_before);
            return ctx;
        };
        let (mut summary, mut kept, mut since) = (Context::default(), Vec::new(), Vec::new());
        for (step, m) in stored {
            if step == 0 {
                ctx.push(step, m);
            } else if step == c.step {
                summary.push(step, m);
            } else if step >= c.kept_from && step < c.step {
                kept.push((step, m));
            } else if step > c.step {
                since.push((step, m));
            }
        }
        ctx.append(summary);
        for (step, m) in kept.into_iter().chain(since) {
            ctx.push(step, m);
        }
        ctx.shorten_before(state.shortened_before);
        ctx
    }

    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    pub fn push(&mut self, step: u32, message: Message) {
        self.messages.push(message);
        self.steps.push(step);
    }

    pub fn extend(&mut self, step: u32, messages: &[Message]) {
        for m in messages {
            self.push(step, m.clone());
        }
    }

    fn append(&mut self, mut other: Context) {
        self.messages.append(&mut other.messages);
        self.steps.append(&mut other.steps);
    }

    /// Drops the messages of steps `1..step` (the opening stays); returns how many of
    /// them were the model's turns (issue 14: the scripted model's window).
    pub fn drop_steps_before(&mut self, step: u32) -> u32 {
        let keep = |s: u32| s == 0 || s >= step;
        if self.steps.iter().all(|s| keep(*s)) {
            return 0;
        }
        // In place (issue 14: this runs after every commit of a windowed run; moving
        // the kept messages into new vectors grew them push by push).
        let (mut turns, mut at) = (0, 0);
        let steps = &self.steps;
        self.messages.retain(|m| {
            let kept = keep(steps[at]);
            at += 1;
            if !kept && m.role == Role::Assistant {
                turns += 1;
            }
            kept
        });
        self.steps.retain(|s| keep(*s));
        turns
    }

    /// Shortens the tool results of steps before `step` (idempotent).
    pub fn shorten_before(&mut self, step: u32) {
        for (m, s) in self.messages.iter_mut().zip(&self.steps) {
            if *s == 0 || *s >= step {
                continue;
            }
            for part in &mut m.content {
                if let Part::ToolResult { content, .. } = part
                    && let Some(short) = shortened(content)
                {
                    *content = short;
                }
            }
        }
    }

    /// The estimated size in tokens of the next request (see the module doc);
    /// `fixed_bytes`: the tool schemas, sent with every request.
    pub fn estimate(&self, state: &LoopState, fixed_bytes: usize) -> u64 {
        let bytes = |ms: &[Message]| ms.iter().map(message_bytes).sum::<usize>();
        if state.last_input > 0 {
            let from = self
                .messages
                .iter()
                .rposition(|m| m.role == Role::Assistant)
                .unwrap_or(0);
            return state.last_input + approx_tokens(bytes(&self.messages[from..]));
        }
        approx_tokens(fixed_bytes + bytes(&self.messages)) + MARGIN_TOKENS
    }

    /// The size (bytes/4) of the messages of steps from `step` on.
    fn tokens_from(&self, step: u32) -> u64 {
        let bytes = self
            .messages
            .iter()
            .zip(&self.steps)
            .filter(|(_, s)| **s >= step)
            .map(|(m, _)| message_bytes(m))
            .sum();
        approx_tokens(bytes)
    }

    /// The messages a summary replaces: everything but the opening and the steps
    /// from `kept_from` on.
    fn summarised(&self, kept_from: u32) -> impl Iterator<Item = &Message> {
        self.messages
            .iter()
            .zip(&self.steps)
            .filter(move |(_, s)| **s != 0 && **s < kept_from)
            .map(|(m, _)| m)
    }

    /// The context after a compaction at `step`: the opening, the summary, the kept
    /// steps — exactly what [`Context::from_stored`] rebuilds from the store.
    pub fn compact_at(&mut self, summary: Message, step: u32, kept_from: u32) {
        let old = std::mem::take(self);
        let mut kept = Context::default();
        for (m, s) in old.messages.into_iter().zip(old.steps) {
            if s == 0 {
                self.push(s, m);
            } else if s >= kept_from {
                kept.push(s, m);
            }
        }
        self.push(step, summary);
        self.append(kept);
    }
}

/// The window a run's model has, and the output cap each request reserves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub tokens: u64,
    pub max_output_tokens: u32,
}

impl Window {
    /// The room a request's input has: the window minus the output cap (at least half
    /// the window, should the cap be set larger than it).
    pub fn room(&self) -> u64 {
        self.tokens
            .saturating_sub(u64::from(self.max_output_tokens))
            .max(self.tokens / 2)
    }

    pub fn threshold(&self) -> u64 {
        (self.room() as f64 * COMPACT_AT) as u64
    }

    /// The output cap of a summary: short enough to leave room for the turns after it.
    pub fn summary_output_tokens(&self) -> u32 {
        let quarter = u32::try_from(self.room() / 4).unwrap_or(u32::MAX);
        self.max_output_tokens.min(quarter).max(1)
    }
}

/// What [`decide`] says before a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The request fits.
    Fits,
    /// Shortening old tool results makes it fit: nothing to ask.
    Shortened { before: u32 },
    /// Summarise the turns before `kept_from` (after shortening to `before`).
    Summarise {
        shortened_before: u32,
        kept_from: u32,
        estimate: u64,
    },
}

/// Whether (and how) to compact before the next step; pure. `ctx` is left shortened
/// when that was decided (the caller records the mark in the loop state).
pub fn decide(
    ctx: &mut Context,
    state: &LoopState,
    window: Window,
    fixed_bytes: usize,
) -> Decision {
    let threshold = window.threshold();
    let estimate = ctx.estimate(state, fixed_bytes);
    // Just compacted: the summary is as small as it gets; ask, and let the provider
    // judge (a second summary in a row would only summarise the first).
    let just_compacted = state
        .compaction
        .as_ref()
        .is_some_and(|c| c.step == state.steps);
    if estimate <= threshold || just_compacted || state.steps == 0 {
        return Decision::Fits;
    }
    let before = state.steps.saturating_sub(1).max(state.shortened_before);
    let mut shortened = state.clone();
    if before > state.shortened_before {
        ctx.shorten_before(before);
        shortened.shortened_before = before;
        shortened.last_input = 0;
        if ctx.estimate(&shortened, fixed_bytes) <= threshold {
            return Decision::Shortened { before };
        }
    }
    // Keep the last step verbatim when it is small, so the model sees its latest
    // results as they were.
    let kept_from = if ctx.tokens_from(state.steps) <= window.room() / 4 {
        state.steps
    } else {
        state.steps + 1
    };
    if ctx.summarised(kept_from).next().is_none() {
        return if before > state.shortened_before {
            Decision::Shortened { before }
        } else {
            Decision::Fits
        };
    }
    Decision::Summarise {
        shortened_before: before,
        kept_from,
        estimate: ctx.estimate(&shortened, fixed_bytes),
    }
}

/// The compaction request's messages: one user message with the task and the turns
/// to summarise, rendered as text (no tool calls: no tools are offered), cut to fit
/// the window's room.
pub fn summary_request(ctx: &Context, kept_from: u32, window: Window) -> Vec<Message> {
    let task = ctx
        .messages
        .iter()
        .zip(&ctx.steps)
        .find(|(m, s)| **s == 0 && m.role == Role::User)
        .map(|(m, _)| cut(&m.joined_text(), 4000))
        .unwrap_or_default();
    let mut lines: Vec<String> = ctx.summarised(kept_from).flat_map(render).collect();
    let room = window.room().saturating_sub(
        u64::from(window.summary_output_tokens())
            + approx_tokens(COMPACT_PROMPT.len() + task.len())
            + MARGIN_TOKENS,
    );
    let room_bytes = usize::try_from(room * 4).unwrap_or(usize::MAX);
    let mut total: usize = lines.iter().map(|l| l.len() + 1).sum();
    let mut dropped = 0;
    // The oldest lines go first; an earlier summary (the first line) stays.
    while total > room_bytes && lines.len() > 1 {
        total -= lines.remove(1).len() + 1;
        dropped += 1;
    }
    if dropped > 0 {
        lines.insert(
            1,
            format!("[{dropped} earlier line(s) left out to fit the window]"),
        );
    }
    vec![Message::text(
        Role::User,
        format!(
            "The task:\n{task}\n\nThe turns to summarise:\n{}\n\nWrite the summary now.",
            lines.join("\n")
        ),
    )]
}

/// The assistant turns a summary of the turns before `kept_from` leaves out.
pub fn turns_in_summary(ctx: &Context, kept_from: u32) -> u32 {
    let n = ctx
        .summarised(kept_from)
        .filter(|m| m.role == Role::Assistant)
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The message that replaces the summarised turns (it is also what `runs show` shows
/// at the compaction step). A user message, not a system one (issue 22): the summary
/// is the model's retelling of tool output and other untrusted text, and must not reach
/// the provider with a system prompt's authority.
pub fn summary_message(step: u32, summary: &str) -> Message {
    let summary = if summary.trim().is_empty() {
        "(the model returned an empty summary)"
    } else {
        summary.trim()
    };
    Message::text(
        Role::User,
        format!(
            "[agentrun] Context compacted at step {step}: the earlier turns were summarised \
             to fit the model's context window (the full transcript stays in the run's \
             database). Summary:\n\n{summary}"
        ),
    )
}

fn render(m: &Message) -> Vec<String> {
    let who = m.role.as_str();
    m.content
        .iter()
        .map(|p| match p {
            Part::Text { text } => format!("[{who}] {text}"),
            Part::ToolCall { id, name, args } => format!("[call {id}] {name} {args}"),
            Part::ToolResult {
                call_id,
                content,
                is_error,
            } => {
                let text = match content {
                    Value::String(s) => s.clone(),
                    v => v.to_string(),
                };
                let error = if *is_error { " (error)" } else { "" };
                format!(
                    "[result {call_id}{error}] {}",
                    cut(&text, SUMMARY_RESULT_BYTES)
                )
            }
        })
        .collect()
}

/// A long tool result, shortened; `None` when it is short already.
fn shortened(content: &Value) -> Option<Value> {
    let text = match content {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    };
    // The shortened form (head + note) is itself under this, so shortening is
    // idempotent.
    if text.len() <= SHORT_RESULT_BYTES + 200 {
        return None;
    }
    Some(Value::String(format!(
        "{} … [agentrun: shortened from {} bytes when the context was compacted; the full \
         result is in the run's journal]",
        cut(&text, SHORT_RESULT_BYTES),
        text.len()
    )))
}

/// The first `max` bytes of `s` (at a character boundary).
fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A context of `steps` steps, each a call and its result of `pad` bytes.
    fn run_of(steps: u32, pad: usize) -> Vec<(u32, Message)> {
        let mut out = vec![
            (0, Message::text(Role::System, "sys")),
            (0, Message::text(Role::User, "Find the code.")),
        ];
        for s in 1..=steps {
            out.push((
                s,
                Message {
                    role: Role::Assistant,
                    content: vec![Part::ToolCall {
                        id: format!("c{s}"),
                        name: "echo".into(),
                        args: json!({"i": s}),
                    }],
                },
            ));
            out.push((
                s,
                Message::tool_result(format!("c{s}"), json!("x".repeat(pad)), false),
            ));
        }
        out
    }

    fn state(steps: u32) -> LoopState {
        LoopState {
            steps,
            ..Default::default()
        }
    }

    const WINDOW: Window = Window {
        tokens: 2000,
        max_output_tokens: 200,
    };

    #[test]
    fn a_context_under_the_threshold_fits() {
        let mut ctx = Context::from_stored(run_of(3, 100), &state(3));
        assert_eq!(decide(&mut ctx, &state(3), WINDOW, 0), Decision::Fits);
    }

    #[test]
    fn long_old_results_are_shortened_before_anything_is_summarised() {
        // Five results of 1,500 bytes (~375 tokens each): over the threshold of 1,350;
        // shortening all but the last two brings it under.
        let st = state(5);
        let mut ctx = Context::from_stored(run_of(5, 1500), &st);
        assert_eq!(
            decide(&mut ctx, &st, WINDOW, 0),
            Decision::Shortened { before: 4 }
        );
        let short = ctx.messages()[3].content[0].clone();
        let Part::ToolResult { content, .. } = short else {
            panic!()
        };
        assert!(
            content
                .as_str()
                .unwrap()
                .contains("shortened from 1500 bytes")
        );
        // Idempotent, and the same context is rebuilt from the store with the mark.
        let again = ctx.clone();
        ctx.shorten_before(4);
        assert_eq!(ctx, again);
        let marked = LoopState {
            shortened_before: 4,
            ..st
        };
        assert_eq!(Context::from_stored(run_of(5, 1500), &marked), ctx);
    }

    #[test]
    fn many_small_turns_are_summarised_keeping_the_last_step() {
        let st = state(40);
        let mut ctx = Context::from_stored(run_of(40, 60), &st);
        let Decision::Summarise { kept_from, .. } = decide(&mut ctx, &st, WINDOW, 0) else {
            panic!("expected a summary")
        };
        assert_eq!(kept_from, 40);
        assert_eq!(turns_in_summary(&ctx, kept_from), 39);
        let request = summary_request(&ctx, kept_from, WINDOW);
        let text = request[0].joined_text();
        assert!(text.starts_with("The task:\nFind the code."), "{text}");
        assert!(text.contains("[call c1] echo {\"i\":1}"));
        assert!(!text.contains("[call c40]"));
    }

    #[test]
    fn the_compacted_context_is_what_the_store_rebuilds() {
        let st = state(40);
        let mut ctx = Context::from_stored(run_of(40, 60), &st);
        let summary = summary_message(41, "FACT:code=1");
        ctx.compact_at(summary.clone(), 41, 40);
        let mut stored = run_of(40, 60);
        stored.push((41, summary));
        stored.push((42, Message::text(Role::Assistant, "done")));
        ctx.push(42, Message::text(Role::Assistant, "done"));
        let after = LoopState {
            steps: 42,
            compaction: Some(Compaction {
                step: 41,
                kept_from: 40,
                turns_left_out: 39,
            }),
            ..Default::default()
        };
        assert_eq!(first_step_needed(&after), 40);
        assert_eq!(Context::from_stored(stored.clone(), &after), ctx);
        // A loader that reads only the steps needed gets the same.
        let needed = stored.into_iter().filter(|(s, _)| *s == 0 || *s >= 40);
        assert_eq!(Context::from_stored(needed, &after), ctx);
        let roles: Vec<Role> = ctx.messages().iter().map(|m| m.role).collect();
        use Role::*;
        // The summary goes as user text, never with a system prompt's authority
        // (issue 22: it retells tool output).
        assert_eq!(roles, [System, User, User, Assistant, Tool, Assistant]);
    }

    #[test]
    fn right_after_a_compaction_it_never_compacts_again() {
        let st = LoopState {
            steps: 41,
            compaction: Some(Compaction {
                step: 41,
                kept_from: 40,
                turns_left_out: 39,
            }),
            ..Default::default()
        };
        let mut ctx = Context::from_stored(run_of(40, 60), &state(40));
        assert_eq!(decide(&mut ctx, &st, WINDOW, 100_000), Decision::Fits);
    }
}
