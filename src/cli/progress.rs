//! What a live run tells the person watching it, on stderr. stdout stays for the
//! answer or the `--json` object.
//!
//! On a terminal a status line (indicatif) shows the step, tokens against the budget,
//! the tool being called with its attempt, and a countdown while a retry waits; the
//! lines above it are the run's history. Elsewhere (pipes, CI logs, `TERM=dumb`) the
//! same facts come as plain `agentrun: …` lines, one per event.
//!
//! The status line is shown only while something is in flight: a plain `say` is a
//! complete statement, so it clears the line. That keeps the last line clean for
//! whatever the command prints after the run.

use crate::model::{Delta, LiveSink};
use crate::render::Style;
use crate::render::summary::final_line;
use crate::render::transcript::describe_event;
use crate::runner::RunOutcome;
use crate::runner::observe::{CallFinished, Notice, Observer, StepStart};
use crate::text::controls_as_spaces;
use crate::trace::TraceEvent;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `--quiet` or `--json`: nothing on stderr but errors.
    Quiet,
    /// For a person: a live status line when stderr is a terminal, plain lines
    /// otherwise.
    Lines,
    /// Plain lines even on a terminal.
    Plain,
}

pub struct Progress {
    out: Out,
    started: Instant,
    /// `--stream-json`: each streamed delta as one JSON line on stdout.
    stream_json: bool,
    /// What the run is waiting for (the model being asked, and where), and how much of
    /// its answer has arrived: for the heartbeat line off a terminal.
    asking: Mutex<Asking>,
}

#[derive(Default)]
struct Asking {
    what: String,
    received: usize,
    /// The streamed text's unfinished last line (terminal view).
    line: String,
    /// A retry's wait: until when, and why (`connection refused`): the run is in
    /// backoff then, not waiting for an answer (issue 27).
    retry: Option<(Instant, String)>,
}

impl Asking {
    /// The heartbeat line off a terminal, `elapsed` into the call, at `now`.
    fn heartbeat(&self, elapsed: Duration, now: Instant) -> String {
        if let Some((until, why)) = &self.retry
            && *until > now
        {
            let left = until.duration_since(now).as_secs_f64().ceil();
            return format!("agentrun:   retrying {} in {left}s ({why})", self.what);
        }
        let got = match self.received {
            0 => "nothing received yet".to_string(),
            n => format!("{n} characters received"),
        };
        format!(
            "agentrun:   still waiting for {} ({}s, {got})",
            self.what,
            elapsed.as_secs()
        )
    }
}

enum Out {
    Quiet,
    Plain,
    Live(Live),
}

impl Progress {
    pub fn new(mode: Mode) -> Progress {
        let out = match mode {
            Mode::Quiet => Out::Quiet,
            Mode::Plain => Out::Plain,
            Mode::Lines if live_terminal() => Out::Live(Live::new()),
            Mode::Lines => Out::Plain,
        };
        Progress {
            out,
            started: Instant::now(),
            stream_json: false,
            asking: Mutex::default(),
        }
    }

    /// Also print each streamed delta as a JSON line on stdout (`--stream-json`).
    pub fn with_stream_json(mut self, on: bool) -> Progress {
        self.stream_json = on;
        self
    }

    /// Off a terminal, one line saying what the run waits for (called every
    /// heartbeat while a model call is in flight).
    fn say_waiting(&self, elapsed: Duration) {
        if let Out::Plain = &self.out {
            let line = lock(&self.asking).heartbeat(elapsed, Instant::now());
            print_line(&line);
        }
    }

    /// A line for the person watching.
    pub fn say(&self, line: impl AsRef<str>) {
        match &self.out {
            Out::Quiet => {}
            Out::Plain => print_line(line.as_ref()),
            Out::Live(live) => {
                live.println(line.as_ref());
                live.clear();
            }
        }
    }

    /// The run stopped: clear the status line and print the final one (status, steps,
    /// tokens, elapsed time).
    pub fn finished(&self, o: &RunOutcome) {
        let elapsed = self.started.elapsed();
        match &self.out {
            Out::Quiet => {}
            Out::Plain => print_line(&final_line(o, Some(elapsed), Style::PLAIN)),
            Out::Live(live) => {
                live.clear();
                // Our colours kept; other escapes go.
                crate::errln!(
                    "{}",
                    crate::text::terminal_safe(&final_line(o, Some(elapsed), live.style))
                );
            }
        }
    }
}

impl Observer for Progress {
    fn model_delta(&self, model: &str, delta: &Delta) {
        LiveSink::delta(self, model, delta);
    }

    fn waiting(&self, elapsed: Duration) {
        self.say_waiting(elapsed);
    }

    /// The loop is about to ask the model for step `s.step`.
    fn step_started(&self, s: &StepStart<'_>) {
        {
            let mut a = lock(&self.asking);
            a.what = s.model.to_string();
            a.received = 0;
            a.retry = None;
            a.line.clear();
        }
        match &self.out {
            Out::Quiet => {}
            Out::Plain => print_line(&format!(
                "agentrun: step {}/{}: asking {} ({}/{} tokens used{})",
                s.step,
                s.max_steps,
                s.model,
                s.tokens,
                s.max_tokens,
                cost_part(s, ", ")
            )),
            Out::Live(live) => live.update(|st| {
                st.step = Some(format!(
                    "step {}/{} · {}/{} tokens{}",
                    s.step,
                    s.max_steps,
                    s.tokens,
                    s.max_tokens,
                    cost_part(s, " · ")
                ));
                st.doing = format!("asking {}", s.model);
            }),
        }
    }

    /// A tool call is about to run (it may take up to `max_attempts` attempts).
    fn call_started(&self, tool: &str, max_attempts: u32) {
        if let Out::Live(live) = &self.out {
            live.update(|st| st.call_started(tool, max_attempts));
        }
    }

    /// A tool call finished; `line` says how (kept in the history above the status).
    fn call_finished(&self, c: &CallFinished) {
        let line = call_line(c);
        match &self.out {
            Out::Quiet => {}
            Out::Plain => print_line(&line),
            Out::Live(live) => {
                live.println(&line);
                live.update(LiveState::call_finished);
            }
        }
    }

    /// A trace event as it happens (attempts, backoff waits, fallback hops, notes).
    fn event(&self, e: &TraceEvent) {
        match e {
            TraceEvent::ModelFallback { to, .. } => {
                let mut a = lock(&self.asking);
                a.what = to.clone();
                a.received = 0;
                a.line.clear();
            }
            // A retried stream starts over: what was shown of it is void.
            TraceEvent::ModelRetry {
                delay_ms, reason, ..
            } => {
                let mut a = lock(&self.asking);
                a.received = 0;
                a.line.clear();
                let why = reason.clone().unwrap_or_else(|| "failed".into());
                a.retry = Some((Instant::now() + Duration::from_millis(*delay_ms), why));
            }
            _ => {}
        }
        if self.stream_json
            && let TraceEvent::ModelRetry { model, .. } = e
        {
            json_line(&serde_json::json!({"type": "restart", "model": model}));
        }
        match &self.out {
            Out::Quiet => {}
            Out::Plain if worth_a_line(e) => {
                print_line(&format!("agentrun:   {}", describe_event(e)))
            }
            Out::Plain => {}
            Out::Live(live) => live.event(e),
        }
    }

    fn notice(&self, n: &Notice) {
        self.say(notice_line(n));
    }
}

/// `agentrun: step 2: search_kb error timeout via kb_cache (3 attempts)`.
fn call_line(c: &CallFinished) -> String {
    let attempts = match c.attempts {
        1 => "1 attempt".to_string(),
        n => format!("{n} attempts"),
    };
    let via = c
        .via
        .as_deref()
        .map(|v| format!(" via {v}"))
        .unwrap_or_default();
    let what = match c.failed {
        None => "ok".to_string(),
        Some(kind) => format!("error {}", kind.map_or("error", |k| k.as_str())),
    };
    format!(
        "agentrun: step {}: {} {what}{via} ({attempts})",
        c.step, c.tool
    )
}

/// The money spent (and its budget), when the run prices its calls (issue 15).
fn cost_part(s: &StepStart<'_>, sep: &str) -> String {
    use crate::money::usd;
    match s.max_cost {
        Some(max) => format!("{sep}{} of {}", usd(s.cost_usd), usd(max)),
        None if s.cost_usd > 0.0 => format!("{sep}{}", usd(s.cost_usd)),
        None => String::new(),
    }
}

fn notice_line(n: &Notice) -> String {
    match n {
        Notice::Stopped { reason } => format!("agentrun: stopped: {reason}"),
        Notice::MessageDelivered { step, by } => {
            format!("agentrun: after step {step}: a message from {by} was delivered")
        }
        Notice::FinalAnswer { step, degraded } => format!(
            "agentrun: step {step}: final answer{}",
            if *degraded {
                " (degraded: no tools were left)"
            } else {
                ""
            }
        ),
        Notice::Escalated { id, kind, summary } => {
            format!("agentrun: escalation {id} ({kind}): {summary}")
        }
        Notice::ToolBugQueued { id, kind } => match kind {
            crate::store::EscalationKind::ToolBug => format!(
                "agentrun: escalation {id} (tool_bug) queued for the tool's owner; the run goes on"
            ),
            _ => format!("agentrun: escalation {id} ({kind}) queued; the run goes on"),
        },
        Notice::Nudged { step, what } => format!("agentrun: step {step}: nudged: {what}"),
        Notice::Degraded => {
            "agentrun: every tool was withdrawn; asking for an answer without tools".into()
        }
        Notice::Failed { reason } => format!("agentrun: {reason}"),
        Notice::Compacted {
            step,
            before,
            after,
        } => format!(
            "agentrun: step {step}: context compacted to fit the model's window \
             (about {before} → {after} tokens)"
        ),
        Notice::AnswerRejected {
            step,
            attempt,
            attempts,
            problem,
        } => format!(
            "agentrun: step {step}: answer {attempt} of {attempts} failed the output schema: \
             {problem}; asking again"
        ),
    }
}

impl LiveSink for Progress {
    fn delta(&self, model: &str, delta: &Delta) {
        if self.stream_json {
            json_line(&match delta {
                Delta::Text(text) => {
                    serde_json::json!({"type": "text", "model": model, "text": text})
                }
                Delta::ToolCall { name } => {
                    serde_json::json!({"type": "tool_call", "model": model, "name": name})
                }
            });
        }
        let mut a = lock(&self.asking);
        let Out::Live(live) = &self.out else {
            if let Delta::Text(t) = delta {
                a.received += t.chars().count();
            }
            return;
        };
        // On a terminal: each finished line of the answer above the status line, the
        // line being written in the status line itself.
        match delta {
            Delta::Text(t) => {
                a.received += t.chars().count();
                a.line.push_str(t);
                while let Some(at) = a.line.find('\n') {
                    let done: String = a.line.drain(..=at).collect();
                    live.println(&format!("  {}", controls_as_spaces(done.trim_end())));
                }
                // The newest of it: the status line shows as much as fits.
                let text: String = {
                    let chars: Vec<char> = a.line.chars().collect();
                    chars[chars.len().saturating_sub(LIVE_TEXT)..]
                        .iter()
                        .collect()
                };
                let text = controls_as_spaces(&text);
                live.update(|st| {
                    st.doing = format!("{model} writing:");
                    st.writing = Some(text);
                });
            }
            Delta::ToolCall { name } => {
                live.update(|st| st.doing = format!("{model} calls {name}"));
            }
        }
    }
}

fn json_line(v: &serde_json::Value) {
    let mut out = crate::out::stdout();
    // A closed stdout must not kill the run.
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

/// Attempts that succeed are not news; waits, hops and notes are.
fn worth_a_line(e: &TraceEvent) -> bool {
    !matches!(
        e,
        TraceEvent::ToolAttempt { error: None, .. } | TraceEvent::ModelUsage { .. }
    )
}

#[allow(clippy::disallowed_methods)] // only asks whether it is a terminal
fn live_terminal() -> bool {
    std::io::stderr().is_terminal() && std::env::var("TERM").map_or(true, |t| t != "dumb")
}

/// One plain line on stderr. Lines quote tool errors and model text: every escape
/// sequence goes (issue 22).
fn print_line(line: &str) {
    // A closed stderr must not kill the run.
    crate::errln!("{}", crate::text::plain(line));
}

/// Characters of a streamed line kept for the status line (more than any terminal
/// shows of it).
const LIVE_TEXT: usize = 300;

/// Columns the status line's template adds around the message: the spinner and a
/// space, ` in 12.3s` while waiting, a space and the elapsed time (`59m`), and one
/// spare, as a terminal wraps a line that fills its last column.
const LIVE_FRAME: usize = 17;

/// What the status line says; rebuilt on every change.
#[derive(Debug, Default)]
struct LiveState {
    step: Option<String>,
    /// The tool in flight: name, attempt, max attempts.
    tool: Option<(String, u32, u32)>,
    /// Calls in flight: a turn's independent calls run together (issue 14).
    running: usize,
    doing: String,
    /// The model's text being written, after `doing`; cleared by any other update.
    writing: Option<String>,
}

impl LiveState {
    fn call_started(&mut self, tool: &str, max_attempts: u32) {
        self.running += 1;
        self.tool = Some((tool.to_string(), 1, max_attempts));
        self.doing = match self.running {
            1 => format!("{tool} attempt 1/{max_attempts}"),
            n => format!("{n} calls running (latest {tool})"),
        };
    }

    fn call_finished(&mut self) {
        self.running = self.running.saturating_sub(1);
        match self.running {
            0 => {
                self.tool = None;
                self.doing.clear();
            }
            1 => self.doing = "1 call running".into(),
            n => self.doing = format!("{n} calls running"),
        }
    }

    /// The line in at most `cols` columns (issue 27: it wrapped and flickered at 60).
    /// When the whole does not fit, the step keeps only its number (tokens and cost
    /// go first), the streamed text its newest words, anything else is cut at a word.
    fn message(&self, cols: usize) -> String {
        use crate::text::{tail, truncate, width};
        let join = |step: Option<&str>, doing: &str| {
            [step, Some(doing)]
                .into_iter()
                .flatten()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(" · ")
        };
        let doing = match &self.writing {
            Some(text) => format!("{} {text}", self.doing),
            None => self.doing.clone(),
        };
        let full = join(self.step.as_deref(), &doing);
        if width(&full) <= cols {
            return full;
        }
        let step = self.step.as_deref().and_then(|s| s.split(" · ").next());
        let head = join(step, &self.doing);
        match &self.writing {
            Some(text) if width(&head) + 9 <= cols => {
                let room = cols - width(&head) - 1;
                format!("{head} {}", tail(text, room))
            }
            _ => truncate(&head, cols),
        }
    }
}

struct Live {
    bar: Mutex<Option<ProgressBar>>,
    state: Mutex<LiveState>,
    /// When the current retry wait ends; read by the spinner's `{wait}` key on every
    /// tick, which is how the countdown moves without us redrawing.
    wait_until: Arc<Mutex<Option<Instant>>>,
    style: Style,
}

impl Live {
    fn new() -> Live {
        Live {
            bar: Mutex::new(None),
            state: Mutex::default(),
            wait_until: Arc::default(),
            style: Style::for_stderr(),
        }
    }

    fn println(&self, line: &str) {
        // Untrusted text loses its escapes before our colours are added.
        let line = self.paint(&crate::text::plain(line));
        match &*lock(&self.bar) {
            Some(bar) => bar.println(line),
            None => print_line(&line),
        }
    }

    /// The `agentrun:` prefix dimmed, so the eye finds what happened.
    fn paint(&self, line: &str) -> String {
        match line.strip_prefix("agentrun:") {
            Some(rest) => format!("{}{rest}", self.style.dim("agentrun:")),
            None => line.to_string(),
        }
    }

    fn update(&self, f: impl FnOnce(&mut LiveState)) {
        let msg = {
            let mut st = lock(&self.state);
            st.writing = None;
            f(&mut st);
            let cols = super::output::stderr_width().saturating_sub(LIVE_FRAME);
            st.message(cols)
        };
        let mut bar = lock(&self.bar);
        bar.get_or_insert_with(|| self.new_bar()).set_message(msg);
    }

    fn clear(&self) {
        if let Some(bar) = lock(&self.bar).take() {
            bar.finish_and_clear();
        }
        *lock(&self.wait_until) = None;
    }

    fn new_bar(&self) -> ProgressBar {
        let wait = self.wait_until.clone();
        let style = ProgressStyle::with_template("{spinner:.cyan} {msg}{wait} {elapsed:.dim}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner())
            .with_key(
                "wait",
                move |_: &ProgressState, w: &mut dyn std::fmt::Write| {
                    if let Some(left) = remaining(*lock(&wait)) {
                        let _ = write!(w, " in {:.1}s", left.as_secs_f64());
                    }
                },
            );
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        bar.set_style(style);
        bar.enable_steady_tick(Duration::from_millis(100));
        bar
    }

    fn event(&self, e: &TraceEvent) {
        if worth_a_line(e) {
            self.println(&format!("agentrun:   {}", describe_event(e)));
        }
        match e {
            TraceEvent::Backoff {
                tool,
                attempt,
                delay_ms,
                ..
            } => self.wait(*delay_ms, |st| {
                let max = st.tool.as_ref().map_or(0, |t| t.2);
                // `attempt` is the one the wait comes before.
                st.tool = Some((tool.clone(), *attempt, max));
                st.doing = format!("{tool} attempt {attempt}{}", of(max));
            }),
            TraceEvent::ModelRetry {
                model,
                delay_ms,
                reason,
                ..
            } => self.wait(*delay_ms, |st| {
                st.doing = match reason {
                    Some(why) => format!("asking {model} again ({why})"),
                    None => format!("asking {model} again"),
                };
            }),
            TraceEvent::Fallback { to, .. } => self.update(|st| {
                st.tool = Some((to.clone(), 1, 0));
                st.doing = format!("falling back to {to}");
            }),
            TraceEvent::ModelFallback { to, .. } => self.update(|st| {
                st.doing = format!("asking {to} (fallback model)");
            }),
            TraceEvent::ToolAttempt { .. }
            | TraceEvent::Note { .. }
            | TraceEvent::Hook { .. }
            | TraceEvent::ModelUsage { .. } => {}
        }
    }

    fn wait(&self, delay_ms: u64, f: impl FnOnce(&mut LiveState)) {
        *lock(&self.wait_until) = Some(Instant::now() + Duration::from_millis(delay_ms));
        self.update(f);
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        // Never leave a half-drawn status line behind.
        self.clear();
    }
}

fn of(max: u32) -> String {
    if max == 0 {
        String::new()
    } else {
        format!("/{max}")
    }
}

fn remaining(until: Option<Instant>) -> Option<Duration> {
    until
        .map(|t| t.saturating_duration_since(Instant::now()))
        .filter(|d| !d.is_zero())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic elsewhere must not silence progress: the data is display-only.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 27: in backoff the heartbeat says it retries, and why, not "still
    /// waiting"; once the wait is over (a new attempt in flight) it waits again.
    #[test]
    fn the_heartbeat_says_retrying_during_a_backoff() {
        let now = Instant::now();
        let mut a = Asking {
            what: "openai:gpt-4o at 127.0.0.1:8080".into(),
            ..Asking::default()
        };
        a.retry = Some((
            now + Duration::from_millis(3500),
            "connection refused".into(),
        ));
        assert_eq!(
            a.heartbeat(Duration::from_secs(5), now),
            "agentrun:   retrying openai:gpt-4o at 127.0.0.1:8080 in 4s (connection refused)"
        );
        assert_eq!(
            a.heartbeat(Duration::from_secs(10), now + Duration::from_secs(4)),
            "agentrun:   still waiting for openai:gpt-4o at 127.0.0.1:8080 (10s, nothing received yet)"
        );
    }

    #[test]
    fn status_line_joins_step_and_current_action() {
        let st = LiveState {
            step: Some("step 2/10 · 930/20000 tokens".into()),
            tool: None,
            running: 1,
            doing: "search_kb attempt 2/3".into(),
            writing: None,
        };
        assert_eq!(
            st.message(200),
            "step 2/10 · 930/20000 tokens · search_kb attempt 2/3"
        );
        assert_eq!(LiveState::default().message(200), "");
    }

    /// Issue 27: at 60 columns the status line wrapped, and indicatif redrew it a line
    /// short (the flicker). It now fits what the terminal leaves it, keeping the step
    /// number, what is happening and the newest words of the model's text.
    #[test]
    fn the_status_line_fits_a_narrow_terminal() {
        use crate::text::width;
        let cols = 60 - LIVE_FRAME;
        let mut st = LiveState {
            step: Some("step 12/30 · 118000/200000 tokens · $0.4100 of $5.00".into()),
            doing: "llama writing:".into(),
            writing: Some("The parcel of customer C-9 left the depot on Monday and is due".into()),
            ..LiveState::default()
        };
        assert_eq!(st.message(cols), "step 12/30 · llama writing: …and is due");
        // A long model name leaves no room for its text: the name stays whole.
        st.doing = "openai:gpt-4o-mini writing:".into();
        assert_eq!(st.message(cols), "step 12/30 · openai:gpt-4o-mini writing:");
        st.writing = None;
        st.doing = "search_kb attempt 2/3".into();
        assert_eq!(st.message(cols), "step 12/30 · search_kb attempt 2/3");
        st.doing = "asking openai:gpt-4o-mini again (connection refused)".into();
        let line = st.message(cols);
        assert!(width(&line) <= cols, "{line}");
        assert_eq!(line, "step 12/30 · asking openai:gpt-4o-mini…");
        for cols in 0..120 {
            assert!(width(&st.message(cols)) <= cols.max(1), "{cols}");
        }
    }

    #[test]
    fn the_status_line_counts_calls_running_together() {
        let mut st = LiveState::default();
        st.call_started("a", 3);
        assert_eq!(st.message(200), "a attempt 1/3");
        st.call_started("b", 3);
        st.call_started("c", 1);
        assert_eq!(st.message(200), "3 calls running (latest c)");
        st.call_finished();
        assert_eq!(st.message(200), "2 calls running");
        st.call_finished();
        assert_eq!(st.message(200), "1 call running");
        st.call_finished();
        assert_eq!(st.message(200), "");
        assert_eq!(st.tool, None);
    }

    #[test]
    fn successful_attempts_are_not_worth_a_plain_line() {
        let ok = TraceEvent::ToolAttempt {
            call_id: "c".into(),
            tool: "t".into(),
            attempt: 1,
            elapsed_ms: 3,
            error: None,
            class: None,
            message: None,
            at_ms: None,
        };
        assert!(!worth_a_line(&ok));
    }
}
