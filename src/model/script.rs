//! The scripted model (`script:PATH`): a deterministic stand-in for an LLM, for offline
//! demos and tests.
//!
//! It picks its turn by the number of assistant messages already in the transcript, so
//! a run that is killed and resumed asks for — and gets — exactly the turn it would have
//! got without the crash.

use super::{Message, ModelError, ModelRequest, ModelResponse, Part, Role, StopReason, Usage};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use std::collections::HashSet;
use std::ops::Range;
use std::sync::Mutex;

/// The file's shape, read without parsing the turns: each is kept as the slice of
/// text it was written as.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptFile<'a> {
    #[serde(borrow)]
    turns: Vec<&'a RawValue>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Turn {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ScriptCall>,
    #[serde(default)]
    usage: ScriptUsage,
    /// Simulate an API error on this turn's first attempt.
    #[serde(default)]
    fail: Option<ScriptFail>,
    /// Simulate a stop reason other than a finished turn (e.g. "max_tokens").
    #[serde(default)]
    stop: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptCall {
    #[serde(default)]
    id: Option<String>,
    name: String,
    #[serde(default = "empty_object")]
    args: Value,
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptUsage {
    #[serde(default)]
    input: u64,
    #[serde(default)]
    output: u64,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptFail {
    status: u16,
    /// Seconds.
    #[serde(default)]
    retry_after: Option<f64>,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// A script is read once and its turns parsed when their turn comes: a 100,000-turn
/// script then costs its text and 8 bytes a turn, not a parsed tree of ~290 bytes a
/// turn (issue 14: a long run's memory must not grow with its script).
pub struct ScriptModel {
    /// As written in the spec, for messages.
    path: String,
    text: String,
    /// Where each turn's JSON lies in `text`.
    turns: Vec<Range<u32>>,
    /// Turns whose simulated failure has been delivered (in this process).
    failed: Mutex<HashSet<usize>>,
}

impl ScriptModel {
    /// Parses a script's text and checks every turn; `path` is only used in messages.
    pub fn parse(path: &str, text: &str) -> Result<ScriptModel, String> {
        Self::check(path, text)?;
        Self::from_snapshot(path, text.to_string())
    }

    /// Checks a script whole, turn by turn, without keeping it (at start, so a bad
    /// script is an error before anything is stored).
    pub fn check(path: &str, text: &str) -> Result<(), String> {
        for (i, range) in outline(path, text)?.into_iter().enumerate() {
            parse_turn(path, text, i, range)?;
        }
        Ok(())
    }

    /// A script checked when its run started (stored with the run): only its outline
    /// is read now, each turn when it comes. This keeps resuming a 100,000-step run
    /// cheap.
    pub fn from_snapshot(path: &str, text: String) -> Result<ScriptModel, String> {
        Ok(ScriptModel {
            path: path.to_string(),
            turns: outline(path, &text)?,
            text,
            failed: Mutex::new(HashSet::new()),
        })
    }

    fn turn(&self, i: usize) -> Result<Turn, String> {
        parse_turn(&self.path, &self.text, i, self.turns[i].clone())
    }

    pub fn name(&self) -> String {
        format!("script:{}", self.path)
    }

    pub fn complete(&self, req: &ModelRequest<'_>) -> Result<ModelResponse, ModelError> {
        if req.purpose == super::Purpose::Summary {
            return Ok(self.summary(req));
        }
        // Turns compacted away are not in the request, but they were taken (issue 15).
        let index = req
            .messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count()
            + req.turns_left_out as usize;
        // Lets the durability tests check that a stored turn is never asked for again.
        crate::fault::observe(|| format!("turn {index}"));
        // Every run a script drives checks the transcript invariant on every request.
        if let Some(why) = super::pairing::unpaired(req.messages) {
            return Err(ModelError::Config(format!(
                "script {}: request for turn {index} breaks the transcript: {why}",
                self.path
            )));
        }
        if index >= self.turns.len() {
            return Err(ModelError::ScriptExhausted {
                path: self.path.clone(),
                turn: index,
                len: self.turns.len(),
            });
        }
        // Checked at start; only a snapshot edited since could fail here.
        let turn = self.turn(index).map_err(ModelError::Config)?;
        if let Some(fail) = turn.fail {
            let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
            if failed.insert(index) {
                return Err(ModelError::Status {
                    provider: "script",
                    status: fail.status,
                    message: format!("simulated HTTP {} on turn {index}", fail.status),
                    retry_after: fail
                        .retry_after
                        .map(|s| std::time::Duration::from_secs_f64(s.max(0.0))),
                    should_retry: None,
                });
            }
        }
        Ok(self.response(index, turn))
    }

    /// A compaction's summary, written mechanically so it is deterministic: every
    /// distinct `FACT:word` in the request, in order (scripts mark what must survive a
    /// compaction that way). Usage is bytes/4 of the request and of the summary.
    fn summary(&self, req: &ModelRequest<'_>) -> ModelResponse {
        crate::fault::observe(|| "summary".to_string());
        let mut facts: Vec<String> = Vec::new();
        let mut bytes = req.system.len();
        for m in req.messages {
            let text = m.joined_text();
            bytes += text.len();
            for (i, _) in text.match_indices("FACT:") {
                let fact: String = text[i..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || "FACT:=_-.".contains(*c))
                    .collect();
                if !facts.contains(&fact) {
                    facts.push(fact);
                }
            }
        }
        let text = format!("Facts found: {}", facts.join(" "));
        ModelResponse {
            usage: Usage {
                input: (bytes as u64).div_ceil(4),
                output: (text.len() as u64).div_ceil(4),
                cached: 0,
                cache_write: 0,
                ..Default::default()
            },
            message: Message::text(Role::Assistant, text),
            stop: StopReason::EndTurn,
            model: self.name(),
        }
    }

    fn response(&self, index: usize, turn: Turn) -> ModelResponse {
        let stop = match turn.stop.as_deref() {
            Some("max_tokens") => StopReason::MaxTokens,
            _ if turn.tool_calls.is_empty() => StopReason::EndTurn,
            _ => StopReason::ToolUse,
        };
        let mut content = Vec::new();
        if let Some(text) = turn.text {
            content.push(Part::Text { text });
        }
        for (i, call) in turn.tool_calls.into_iter().enumerate() {
            content.push(Part::ToolCall {
                id: call.id.unwrap_or_else(|| format!("call_{index}_{i}")),
                name: call.name,
                args: call.args,
            });
        }
        ModelResponse {
            message: Message {
                role: Role::Assistant,
                content,
            },
            usage: Usage {
                input: turn.usage.input,
                output: turn.usage.output,
                cached: 0,
                cache_write: 0,
                ..Default::default()
            },
            stop,
            model: self.name(),
        }
    }
}

/// Where each turn's JSON lies in `text`.
fn outline(path: &str, text: &str) -> Result<Vec<Range<u32>>, String> {
    if u32::try_from(text.len()).is_err() {
        return Err(format!("{path}: a script must be smaller than 4 GiB"));
    }
    let file: ScriptFile = serde_json::from_str(text).map_err(|e| format!("{path}: {e}"))?;
    if file.turns.is_empty() {
        return Err(format!("{path}: `turns` is empty"));
    }
    let base = text.as_ptr() as usize;
    Ok(file
        .turns
        .iter()
        .map(|raw| {
            // Each raw value borrows a slice of `text`, so the offsets are in bounds.
            let start = (raw.get().as_ptr() as usize - base) as u32;
            start..start + raw.get().len() as u32
        })
        .collect())
}

/// Turn `i` (at `range` in `text`), parsed and checked; errors name the turn and its
/// line in the file.
fn parse_turn(path: &str, text: &str, i: usize, range: Range<u32>) -> Result<Turn, String> {
    let (start, end) = (range.start as usize, range.end as usize);
    let turn: Turn = serde_json::from_str(&text[start..end]).map_err(|e| {
        let line = text[..start].matches('\n').count() + e.line();
        let message = e.to_string();
        let bare = message
            .strip_suffix(&format!(" at line {} column {}", e.line(), e.column()))
            .unwrap_or(&message);
        format!("{path}: turn {i} (line {line}): {bare}")
    })?;
    check(&turn).map_err(|why| format!("{path}: turn {i}: {why}"))?;
    Ok(turn)
}

/// What a turn must be beyond its JSON shape.
fn check(turn: &Turn) -> Result<(), String> {
    if turn.text.is_none() && turn.tool_calls.is_empty() {
        return Err("neither `text` nor `tool_calls`".into());
    }
    if let Some(call) = turn.tool_calls.iter().find(|c| !c.args.is_object()) {
        return Err(format!("args of `{}` must be a JSON object", call.name));
    }
    match turn.stop.as_deref() {
        None | Some("max_tokens") | Some("end_turn") => Ok(()),
        Some(stop) => Err(format!(
            "stop must be \"max_tokens\" or \"end_turn\", not {stop:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(messages: &[Message]) -> ModelRequest<'_> {
        ModelRequest {
            system: "",
            messages,
            note: "",
            cache_key: "",
            tools: &[],
            max_output_tokens: 1024,
            live: None,
            purpose: crate::model::Purpose::Step,
            turns_left_out: 0,
            output: None,
            limits: None,
        }
    }

    const SCRIPT: &str = r#"{"turns": [
        {"tool_calls": [{"name": "a", "args": {"q": 1}}, {"id": "x", "name": "b"}],
         "usage": {"input": 10, "output": 2}},
        {"text": "done", "fail": {"status": 429, "retry_after": 1}}
    ]}"#;

    #[test]
    fn picks_the_turn_by_counting_assistant_messages() {
        let m = ScriptModel::parse("s.json", SCRIPT).unwrap();
        let first = m.complete(&request(&[])).unwrap();
        assert_eq!(
            first
                .message
                .tool_calls()
                .iter()
                .map(|c| c.id.as_str())
                .collect::<Vec<_>>(),
            ["call_0_0", "x"]
        );
        assert_eq!(
            first.usage,
            Usage {
                input: 10,
                output: 2,
                cached: 0,
                cache_write: 0,
                ..Default::default()
            }
        );
        assert_eq!(first.stop, StopReason::ToolUse);
    }

    #[test]
    fn arguments_come_back_as_written_and_must_be_objects() {
        let m = ScriptModel::parse("s.json", SCRIPT).unwrap();
        let first = m.complete(&request(&[])).unwrap();
        let args: Vec<_> = first
            .message
            .tool_calls()
            .iter()
            .map(|c| c.args.clone())
            .collect();
        assert_eq!(args, [serde_json::json!({"q": 1}), serde_json::json!({})]);
        let bad = r#"{"turns": [{"tool_calls": [{"name": "a", "args": [1]}]}]}"#;
        let err = ScriptModel::parse("s.json", bad).err().unwrap();
        assert!(err.contains("args of `a` must be a JSON object"), "{err}");
    }

    #[test]
    fn a_fail_turn_fails_once_then_answers() {
        let m = ScriptModel::parse("s.json", SCRIPT).unwrap();
        let history = [Message::text(Role::Assistant, "t0")];
        let err = m.complete(&request(&history)).unwrap_err();
        assert!(err.is_transient());
        assert_eq!(err.retry_after(), Some(std::time::Duration::from_secs(1)));
        let ok = m.complete(&request(&history)).unwrap();
        assert_eq!(ok.message.joined_text(), "done");
    }

    #[test]
    fn running_out_of_turns_is_a_permanent_error() {
        let m = ScriptModel::parse("s.json", SCRIPT).unwrap();
        let history = [
            Message::text(Role::Assistant, "t0"),
            Message::text(Role::Assistant, "t1"),
        ];
        let err = m.complete(&request(&history)).unwrap_err();
        assert!(!err.is_transient());
        assert_eq!(err.to_string(), "script s.json has no turn 2 (it has 2)");
    }

    #[test]
    fn rejects_a_turn_with_nothing_in_it() {
        let err = ScriptModel::parse("s.json", r#"{"turns": [{}]}"#)
            .err()
            .unwrap();
        assert_eq!(err, "s.json: turn 0: neither `text` nor `tool_calls`");
    }

    #[test]
    fn a_bad_turn_is_named_with_its_line_at_start_and_when_it_comes_after() {
        let text = "{\"turns\": [\n{\"text\": \"a\"},\n{\"text\": \"b\", \"colour\": 1}\n]}";
        let err = ScriptModel::parse("s.json", text).err().unwrap();
        assert!(
            err.starts_with("s.json: turn 1 (line 3): unknown field `colour`"),
            "{err}"
        );
        // A stored script is only outlined; its turns are read when they come.
        let m = ScriptModel::from_snapshot("s.json", text.to_string()).unwrap();
        let first = m.complete(&request(&[])).unwrap();
        assert_eq!(first.message.joined_text(), "a");
        let history = [Message::text(Role::Assistant, "a")];
        let err = m.complete(&request(&history)).unwrap_err();
        assert!(matches!(err, ModelError::Config(_)), "{err}");
        assert!(!err.is_transient());
    }

    #[test]
    fn a_script_that_is_not_the_expected_shape_is_rejected_whole() {
        let err = ScriptModel::parse("s.json", r#"{"turns": {"text": "a"}}"#)
            .err()
            .unwrap();
        assert!(err.starts_with("s.json: invalid type: map"), "{err}");
        let err = ScriptModel::parse("s.json", r#"{"turns": [], "extra": 1}"#)
            .err()
            .unwrap();
        assert!(err.contains("unknown field `extra`"), "{err}");
    }
}
