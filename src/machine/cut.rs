//! A response cut off at the output-token limit (issue 15), decided here rather than
//! in the driver: it is not an answer, and its last tool call may be incomplete. The
//! first cut of a step is dropped (its tokens still count, added to the next
//! response's) and the model is asked once more with a note and the retry cap; a
//! second cut ends the run in [`Machine::reply`] (text only, so no call is left
//! without a result). Nothing of the dropped response is journaled, so a resumed run
//! simply asks again.

use super::Machine;
use super::effects::{AfterCut, Effect};
use crate::model::{Message, ModelResponse, Role};
use crate::trace::{NoteKind, TraceEvent};

/// The output cap of a request, and of the one retry after a cut (`None`: the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputCap {
    pub first: u32,
    pub retry: Option<u32>,
}

impl Default for OutputCap {
    fn default() -> Self {
        OutputCap {
            first: crate::model::settings::DEFAULT_MAX_OUTPUT_TOKENS,
            retry: None,
        }
    }
}

impl OutputCap {
    /// The retry's cap: never below the first.
    pub fn retry_cap(&self) -> u32 {
        self.retry.unwrap_or(self.first).max(self.first)
    }
}

impl Machine<'_> {
    /// The step's first response was cut off: drop it, say so, ask again once.
    pub(super) fn ask_after_cut(&mut self, response: ModelResponse) -> Vec<Effect> {
        // (A summary cut at its cap never comes here: it is still a summary, shorter
        // than asked for, and `handle` commits it.)
        self.cut = Some(response.usage);
        let cap = self.rules.output_cap;
        let (first, retry) = (cap.first, cap.retry_cap());
        let note = self.cut_note();
        let mut ask = self.ask();
        ask.after_cut = Some(AfterCut {
            note,
            max_output_tokens: retry,
        });
        vec![
            Effect::Trace(TraceEvent::Note {
                kind: NoteKind::Truncated,
                message: format!(
                    "the response was cut off at its output limit ({first} tokens); asked \
                     again once with a limit of {retry}"
                ),
                at_ms: None,
            }),
            Effect::AskModel(ask),
        ]
    }
}

impl Machine<'_> {
    /// What the retry after a cut tells the model.
    pub(super) fn cut_note(&self) -> Message {
        let cap = self.rules.output_cap;
        let (first, retry) = (cap.first, cap.retry_cap());
        Message::text(
            Role::System,
            format!(
                "[agentrun] Your previous reply was cut off at the output limit of {first} tokens \
                 and was discarded. Reply again within {retry} tokens: make fewer tool calls in \
                 one turn (the rest can follow in later turns), or answer more briefly."
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::context::Context;
    use super::super::effects::{Effect, Event};
    use super::super::state::LoopState;
    use super::super::{Machine, Rules};
    use super::OutputCap;
    use crate::config::types::ToolsConfig;
    use crate::model::{Message, ModelResponse, Part, Role, StopReason, Usage};
    use crate::prompts::Prompts;
    use crate::records::RunStatus;
    use crate::trace::{NoteKind, TraceEvent};
    use serde_json::json;

    fn cut_turn(text: &str) -> ModelResponse {
        ModelResponse {
            message: Message {
                role: Role::Assistant,
                content: vec![
                    Part::Text { text: text.into() },
                    Part::ToolCall {
                        id: "c1".into(),
                        name: "lookup".into(),
                        args: json!({"q": "cut"}),
                    },
                ],
            },
            usage: Usage {
                input: 100,
                output: 50,
                cached: 0,
                cache_write: 0,
                ..Default::default()
            },
            stop: StopReason::MaxTokens,
            model: "script:s".into(),
        }
    }

    #[test]
    fn a_first_cut_is_asked_again_with_a_note_and_the_retry_cap_and_a_second_fails_text_only() {
        let (tools, prompts) = (ToolsConfig::default(), Prompts::builtin());
        let rules = Rules {
            max_steps: 10,
            max_tokens: 100_000,
            output_cap: OutputCap {
                first: 200,
                retry: Some(400),
            },
            ..Rules::for_tests(&tools, &prompts)
        };
        let opening = Context::opening(vec![
            Message::text(Role::System, "sys"),
            Message::text(Role::User, "Go."),
        ]);
        let mut m = Machine::new(rules, LoopState::default(), opening);
        m.handle(Event::Start {
            escalations: Vec::new(),
        });
        let out = m.handle(Event::ModelReplied(cut_turn("first")));
        let [
            Effect::Trace(TraceEvent::Note { kind, message, .. }),
            Effect::AskModel(ask),
        ] = out.as_slice()
        else {
            panic!("{out:?}")
        };
        assert_eq!(*kind, NoteKind::Truncated);
        assert_eq!(
            message,
            "the response was cut off at its output limit (200 tokens); asked again once \
             with a limit of 400"
        );
        let again = ask.after_cut.as_ref().expect("a retry");
        assert_eq!(again.max_output_tokens, 400);
        assert!(
            again
                .note
                .joined_text()
                .contains("cut off at the output limit of 200")
        );
        // Nothing of the cut response was journaled or kept.
        assert_eq!(m.messages().len(), 2);

        let out = m.handle(Event::ModelReplied(cut_turn("second")));
        let Some(Effect::Commit(c)) = out.iter().find(|e| matches!(e, Effect::Commit(_))) else {
            panic!("{out:?}")
        };
        assert_eq!(c.status, RunStatus::Failed);
        // Both responses' tokens count; the kept reply is the text only.
        assert_eq!((c.state.input_tokens, c.state.output_tokens), (200, 100));
        assert_eq!(
            c.messages[0].content,
            vec![Part::Text {
                text: "second".into()
            }]
        );
        assert_eq!(
            out.first(),
            Some(&Effect::RecordModelTurn {
                step: 1,
                response: ModelResponse {
                    usage: Usage {
                        input: 200,
                        output: 100,
                        cached: 0,
                        cache_write: 0,
                        ..Default::default()
                    },
                    ..cut_turn("second")
                }
            })
        );
    }
}
