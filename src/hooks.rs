//! Hooks (issue 26): what a hook is told, how its answer is read, and how its decision
//! is journaled. `config::hooks` says which hooks run; the driver (`runner`) runs them
//! through the one command spawn ([`crate::tools::command::run_hook`]).
//!
//! The protocol is Claude Code's where it fits, so existing hook scripts work with few
//! changes. The hook gets one JSON object on stdin:
//!
//! | field | value |
//! | --- | --- |
//! | `hook_event_name` | `PreToolUse` (before_tool), `PostToolUse` (after_tool), `BeforeModel`, `SessionEnd` (run_end) |
//! | `session_id` | the run id |
//! | `tool_name`, `tool_input`, `tool_use_id` | the call (tool hooks) |
//! | `tool_response` | what the tool returned, as the model would see it (after_tool) |
//! | `cwd` | the tools.toml folder, where the hook runs |
//!
//! and answers with its exit code and, on exit 0, optionally one JSON object on stdout:
//! exit 0 with nothing allows; exit 2 blocks, its stderr the reason; any other exit, a
//! timeout or a failure to start is a failed hook, which blocks unless the hook says
//! `on_error = "allow"`. The JSON may say `"decision": "block"` with a `"reason"`, or
//! `"permissionDecision": "allow" | "deny" | "ask"` (with `"permissionDecisionReason"`)
//! and `"updatedInput"` — at the top level or inside `"hookSpecificOutput"`, as Claude
//! Code writes them; `"continue": false` with a `"stopReason"` blocks too.
//!
//! **Gating hooks fail closed** (docs/security.md, Hooks). For `before_tool` and
//! `before_model` anything on stdout that is not a well-formed decision — text, JSON
//! that does not parse (an answer cut at the output cap included), a known field of the
//! wrong type or with an unknown value — is a failed hook, so its `on_error` decides
//! and the default blocks. A model that inflates an argument the hook quotes cannot
//! turn a deny into an allow by making the answer too long to read. `after_tool` and
//! `run_end` read text as Claude Code does (shown, not a decision), but a cut answer
//! fails them too.
//!
//! Each decision is journaled as a [`TraceEvent::Hook`] under the call's step before
//! anything acts on it, and a `started` record before the hook is spawned: a resumed
//! run reuses a stored decision, and treats a hook that started but left no decision
//! (the process died while it ran) as failed — it never runs a hook twice for a call.

use crate::config::hooks::{HookEvent, OnHookError};
use crate::store::StoredEvent;
use crate::tools::command::HookExit;
use crate::tools::outcome::ToolError;
use crate::trace::TraceEvent;
use serde_json::{Value, json};
use std::collections::HashMap;

/// What a hook decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Go on; `updated_input` replaces the tool's arguments (before_tool only).
    Allow {
        updated_input: Option<Value>,
    },
    Block {
        reason: String,
    },
    /// A person must approve the call (an `approval_required` escalation).
    Ask {
        reason: Option<String>,
    },
    /// The hook failed, timed out, or its decision was lost in a crash: its
    /// `on_error` decides ([`Verdict::settled`]).
    Failed {
        message: String,
    },
}

/// Longest reason kept from a hook's stderr or JSON.
const MAX_REASON: usize = 1000;

impl Verdict {
    /// Reads a finished hook (exit code, stdout, stderr); `gating`: a `before_tool` or
    /// `before_model` hook, whose stdout must be nothing or a well-formed decision.
    pub fn from_exit(hook: &str, exit: &HookExit, gating: bool) -> Verdict {
        match exit.code {
            Some(0) if exit.cut => Verdict::Failed {
                message: format!(
                    "hook {hook} answered with more than its output cap; a cut answer is \
                     not a decision"
                ),
            },
            Some(0) if gating => {
                from_stdout_strict(&exit.stdout).unwrap_or_else(|why| Verdict::Failed {
                    message: clip(format!("hook {hook} gave no well-formed decision: {why}")),
                })
            }
            Some(0) => from_stdout(&exit.stdout),
            Some(2) => Verdict::Block {
                reason: clip(if exit.stderr.trim().is_empty() {
                    format!("blocked by hook {hook}")
                } else {
                    exit.stderr.trim().to_string()
                }),
            },
            code => {
                let how = code.map_or("was killed by a signal".to_string(), |c| {
                    format!("exited with {c}")
                });
                let stderr = exit.stderr.trim();
                let message = if stderr.is_empty() {
                    format!("hook {hook} {how}")
                } else {
                    format!("hook {hook} {how}: {stderr}")
                };
                Verdict::Failed {
                    message: clip(message),
                }
            }
        }
    }

    /// A hook that could not run to its end (timeout, could not start).
    pub fn from_error(hook: &str, err: &ToolError) -> Verdict {
        Verdict::Failed {
            message: clip(format!("hook {hook}: {}", err.message)),
        }
    }

    /// What a failed hook means under its `on_error`; any other verdict as it is.
    pub fn settled(self, on_error: OnHookError) -> Verdict {
        match (self, on_error) {
            (Verdict::Failed { .. }, OnHookError::Allow) => Verdict::Allow {
                updated_input: None,
            },
            (Verdict::Failed { message }, OnHookError::Block) => Verdict::Block {
                reason: format!("{message} (a hook that fails blocks the call)"),
            },
            (v, _) => v,
        }
    }

    fn decision(&self) -> &'static str {
        match self {
            Verdict::Allow { .. } => "allow",
            Verdict::Block { .. } => "block",
            Verdict::Ask { .. } => "ask",
            Verdict::Failed { .. } => "failed",
        }
    }

    /// The journal record of this decision.
    pub fn to_event(&self, at: &HookAt<'_>) -> TraceEvent {
        let (reason, updated_input) = match self {
            Verdict::Allow { updated_input } => (None, updated_input.clone()),
            Verdict::Block { reason } => (Some(reason.clone()), None),
            Verdict::Ask { reason } => (reason.clone(), None),
            Verdict::Failed { message } => (Some(message.clone()), None),
        };
        TraceEvent::Hook {
            hook: at.hook.clone(),
            call_id: at.call_id.map(str::to_string),
            tool: at.tool.map(str::to_string),
            decision: self.decision().to_string(),
            reason,
            updated_input,
            at_ms: None,
        }
    }
}

/// Which hook, for which call: what its journal records are keyed by.
pub struct HookAt<'a> {
    /// `before_tool[0]`.
    pub hook: String,
    pub call_id: Option<&'a str>,
    pub tool: Option<&'a str>,
}

impl HookAt<'_> {
    pub fn new<'a>(
        event: HookEvent,
        index: usize,
        call_id: Option<&'a str>,
        tool: Option<&'a str>,
    ) -> HookAt<'a> {
        HookAt {
            hook: format!("{}[{index}]", event.key()),
            call_id,
            tool,
        }
    }

    /// The record written before the hook is spawned.
    pub fn started(&self) -> TraceEvent {
        TraceEvent::Hook {
            hook: self.hook.clone(),
            call_id: self.call_id.map(str::to_string),
            tool: self.tool.map(str::to_string),
            decision: STARTED.to_string(),
            reason: None,
            updated_input: None,
            at_ms: None,
        }
    }
}

const STARTED: &str = "started";

/// What the journal holds for a hook and a call.
#[derive(Debug, Clone, PartialEq)]
pub enum Journaled {
    /// Spawned, and no decision stored: the process died while the hook ran.
    Started,
    Decided(Verdict),
}

/// The hooks' journal of one step, by (hook, call id).
pub fn journaled(events: &[StoredEvent]) -> HashMap<(String, Option<String>), Journaled> {
    let mut out = HashMap::new();
    for e in events {
        let TraceEvent::Hook {
            hook,
            call_id,
            decision,
            reason,
            updated_input,
            ..
        } = &e.event
        else {
            continue;
        };
        let reason = reason.clone();
        let entry = match decision.as_str() {
            STARTED => Journaled::Started,
            "allow" => Journaled::Decided(Verdict::Allow {
                updated_input: updated_input.clone(),
            }),
            "block" => Journaled::Decided(Verdict::Block {
                reason: reason.unwrap_or_default(),
            }),
            "ask" => Journaled::Decided(Verdict::Ask { reason }),
            _ => Journaled::Decided(Verdict::Failed {
                message: reason.unwrap_or_default(),
            }),
        };
        // Later records win: a decision after its `started`.
        out.insert((hook.clone(), call_id.clone()), entry);
    }
    out
}

/// Claude Code's name for the event, in `hook_event_name`.
pub fn event_name(event: HookEvent) -> &'static str {
    match event {
        HookEvent::BeforeTool => "PreToolUse",
        HookEvent::AfterTool => "PostToolUse",
        HookEvent::BeforeModel => "BeforeModel",
        HookEvent::RunEnd => "SessionEnd",
    }
}

/// The JSON a hook reads on stdin: the common fields and the event's own.
pub fn input(event: HookEvent, run_id: &str, cwd: &std::path::Path, fields: Value) -> Value {
    let mut v = json!({
        "hook_event_name": event_name(event),
        "session_id": run_id,
        "cwd": cwd.display().to_string(),
    });
    if let (Some(obj), Value::Object(extra)) = (v.as_object_mut(), fields) {
        obj.extend(extra);
    }
    v
}

/// Whether a hook of this event gates what runs (its failure blocks by default, and
/// its stdout must be a well-formed decision).
pub fn gates(event: HookEvent) -> bool {
    matches!(event, HookEvent::BeforeTool | HookEvent::BeforeModel)
}

/// Reads the stdout of a gating hook that exited 0: nothing (allow), or one JSON object
/// whose known fields have the types and values Claude Code gives them. Anything else
/// is `Err(why)`: not a decision.
fn from_stdout_strict(stdout: &str) -> Result<Verdict, String> {
    let text = stdout.trim();
    if text.is_empty() {
        return Ok(Verdict::Allow {
            updated_input: None,
        });
    }
    let top = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(top)) => top,
        Ok(_) => return Err("stdout is JSON but not an object".into()),
        Err(e) => return Err(format!("stdout is not one JSON object ({e})")),
    };
    let specific = match top.get("hookSpecificOutput") {
        None | Some(Value::Null) => None,
        Some(Value::Object(o)) => Some(o),
        Some(_) => return Err("`hookSpecificOutput` is not an object".into()),
    };
    let field = |name: &str| {
        specific
            .and_then(|s| s.get(name))
            .or_else(|| top.get(name))
            .filter(|v| !v.is_null())
    };
    let string = |name: &str| match field(name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(clip(s.clone()))),
        Some(_) => Err(format!("`{name}` is not a string")),
    };
    let reason = match string("permissionDecisionReason")? {
        Some(r) => Some(r),
        None => string("reason")?,
    };
    match field("continue") {
        None | Some(Value::Bool(true)) => {}
        Some(Value::Bool(false)) => {
            return Ok(Verdict::Block {
                reason: string("stopReason")?
                    .or(reason)
                    .unwrap_or_else(|| "the hook said not to continue".into()),
            });
        }
        Some(_) => return Err("`continue` is not true or false".into()),
    }
    let updated_input = match field("updatedInput") {
        None => None,
        Some(v @ Value::Object(_)) => Some(v.clone()),
        Some(_) => return Err("`updatedInput` is not an object".into()),
    };
    let permission = string("permissionDecision")?;
    let decision = string("decision")?;
    match (permission.as_deref(), decision.as_deref()) {
        (Some("deny"), _) | (None, Some("block")) => Ok(Verdict::Block {
            reason: reason.unwrap_or_else(|| "blocked by a hook".into()),
        }),
        (Some("ask"), _) => Ok(Verdict::Ask { reason }),
        (Some("allow"), _) | (None, None | Some("approve" | "allow")) => {
            Ok(Verdict::Allow { updated_input })
        }
        (Some(other), _) => Err(format!(
            "`permissionDecision` is {other:?}, not allow, deny or ask"
        )),
        (None, Some(other)) => Err(format!("`decision` is {other:?}, not block or approve")),
    }
}

/// Reads the stdout of a hook that exited 0 and does not gate: text is shown, not a
/// decision.
fn from_stdout(stdout: &str) -> Verdict {
    let allow = Verdict::Allow {
        updated_input: None,
    };
    let Ok(Value::Object(top)) = serde_json::from_str::<Value>(stdout.trim()) else {
        // Nothing, or text: Claude Code shows it and goes on.
        return allow;
    };
    let specific = top.get("hookSpecificOutput").and_then(Value::as_object);
    let field = |name: &str| {
        specific
            .and_then(|s| s.get(name))
            .or_else(|| top.get(name))
            .filter(|v| !v.is_null())
    };
    let text = |name: &str| {
        field(name)
            .and_then(Value::as_str)
            .map(|s| clip(s.to_string()))
    };
    let reason = text("permissionDecisionReason").or_else(|| text("reason"));
    if top.get("continue") == Some(&Value::Bool(false)) {
        return Verdict::Block {
            reason: text("stopReason")
                .or(reason)
                .unwrap_or_else(|| "the hook said not to continue".into()),
        };
    }
    let updated_input = field("updatedInput").cloned();
    match (
        text("permissionDecision").as_deref(),
        text("decision").as_deref(),
    ) {
        (Some("deny"), _) | (None, Some("block")) => Verdict::Block {
            reason: reason.unwrap_or_else(|| "blocked by a hook".into()),
        },
        (Some("ask"), _) => Verdict::Ask { reason },
        _ => Verdict::Allow { updated_input },
    }
}

fn clip(s: String) -> String {
    if s.len() > MAX_REASON {
        // At a word boundary, as every cut for people (issue 27).
        return crate::text::truncate(&s, MAX_REASON);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit(code: i32, stdout: &str, stderr: &str) -> Verdict {
        let exit = HookExit {
            code: Some(code),
            stdout: stdout.into(),
            stderr: stderr.into(),
            cut: false,
        };
        Verdict::from_exit("before_tool[0]", &exit, true)
    }

    fn failed(v: &Verdict) -> bool {
        matches!(v, Verdict::Failed { .. })
    }

    #[test]
    fn a_gating_hooks_answer_that_is_not_a_decision_fails_it() {
        for stdout in [
            "checked, fine",
            r#"{"permissionDecision": "deny", "permissionDecisionReason": "no"#,
            "[1, 2]",
            r#"{"permissionDecision": "nope"}"#,
            r#"{"permissionDecision": ["deny"]}"#,
            r#"{"decision": "maybe"}"#,
            r#"{"continue": "no"}"#,
            r#"{"updatedInput": "rm -rf /"}"#,
            r#"{"hookSpecificOutput": "deny"}"#,
            r#"{"reason": 7, "decision": "block"}"#,
        ] {
            assert!(failed(&exit(0, stdout, "")), "{stdout}");
        }
        let cut = HookExit {
            code: Some(0),
            stdout: r#"{"permissionDecision": "deny"}"#.into(),
            stderr: String::new(),
            cut: true,
        };
        assert!(failed(&Verdict::from_exit("before_tool[0]", &cut, true)));
        assert!(failed(&Verdict::from_exit("after_tool[0]", &cut, false)));
        // A hook that is told, not asked, may print text as Claude Code's do.
        let text = HookExit {
            code: Some(0),
            stdout: "checked, fine\n".into(),
            stderr: String::new(),
            cut: false,
        };
        assert!(matches!(
            Verdict::from_exit("after_tool[0]", &text, false),
            Verdict::Allow { .. }
        ));
    }

    #[test]
    fn exit_codes_mean_what_they_mean_in_claude_code() {
        let allow = Verdict::Allow {
            updated_input: None,
        };
        assert_eq!(exit(0, "", ""), allow);
        assert_eq!(exit(0, "\n", ""), allow);
        assert_eq!(
            exit(2, "", "• Use rg\n"),
            Verdict::Block {
                reason: "• Use rg".into()
            }
        );
        assert_eq!(
            exit(1, "", "oops"),
            Verdict::Failed {
                message: "hook before_tool[0] exited with 1: oops".into()
            }
        );
    }

    #[test]
    fn json_answers_in_either_claude_code_shape() {
        assert_eq!(
            exit(0, r#"{"decision": "block", "reason": "no"}"#, ""),
            Verdict::Block {
                reason: "no".into()
            }
        );
        let nested = r#"{"hookSpecificOutput": {"hookEventName": "PreToolUse",
            "permissionDecision": "deny", "permissionDecisionReason": "not on Fridays"}}"#;
        assert_eq!(
            exit(0, nested, ""),
            Verdict::Block {
                reason: "not on Fridays".into()
            }
        );
        assert_eq!(
            exit(0, r#"{"permissionDecision": "ask"}"#, ""),
            Verdict::Ask { reason: None }
        );
        let rewrite = r#"{"hookSpecificOutput": {"permissionDecision": "allow",
            "updatedInput": {"q": "safe"}}}"#;
        assert_eq!(
            exit(0, rewrite, ""),
            Verdict::Allow {
                updated_input: Some(json!({"q": "safe"}))
            }
        );
        assert_eq!(
            exit(0, r#"{"continue": false, "stopReason": "halt"}"#, ""),
            Verdict::Block {
                reason: "halt".into()
            }
        );
    }

    #[test]
    fn a_failed_hook_blocks_unless_it_allows_errors() {
        let failed = Verdict::Failed {
            message: "hook x timed out".into(),
        };
        assert!(matches!(
            failed.clone().settled(OnHookError::Block),
            Verdict::Block { .. }
        ));
        assert_eq!(
            failed.settled(OnHookError::Allow),
            Verdict::Allow {
                updated_input: None
            }
        );
    }

    #[test]
    fn the_journal_reads_back_what_was_written() {
        let at = HookAt::new(HookEvent::BeforeTool, 0, Some("c1"), Some("t"));
        let v = Verdict::Allow {
            updated_input: Some(json!({"a": 1})),
        };
        let stored = |event| StoredEvent {
            step: 1,
            at: 0,
            event,
        };
        let key = ("before_tool[0]".to_string(), Some("c1".to_string()));
        let started = journaled(&[stored(at.started())]);
        assert_eq!(started[&key], Journaled::Started);
        let decided = journaled(&[stored(at.started()), stored(v.to_event(&at))]);
        assert_eq!(decided[&key], Journaled::Decided(v));
    }
}
