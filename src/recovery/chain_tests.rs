//! Transition tests of the recovery chain: one per row of the seeds' failure matrix
//! (temporary failure, persistent outage, wrong identifier, permission denied, invalid
//! arguments), plus fallback, approvals and outcome_unknown. Each feeds scripted
//! attempt results as events and asserts the whole list of effects returned: no
//! process, no network, no clock.

use super::Gate;
use super::chain::{Chain, ChainEffect, ChainEvent, Guards, HookAnswer};
use super::retry::Backoff;
use crate::config::types::{ToolDef, ToolsConfig};
use crate::prompts::Prompts;
use crate::taxonomy::{ErrorClass, ErrorKind};
use crate::tools::outcome::{AttemptResult, ToolError};
use crate::trace::{NoteKind, TraceEvent};
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::time::Duration;

const TOOLS: &str = r#"
[defaults]
backoff = "100ms"
max_backoff = "1s"

[tools.search_kb]
description = "search"
input_schema = { type = "object", properties = { q = { type = "string" } }, required = ["q"] }
command = ["true"]
idempotent = true
fallback = [{ tool = "kb_cache", map = { q = "query" } }]

[tools.kb_cache]
description = "cache"
input_schema = { type = "object", properties = { query = { type = "string" } }, required = ["query"] }
command = ["true"]
idempotent = true
stale = true

[tools.lookup]
description = "lookup"
input_schema = { type = "object", properties = { id = { type = "string" } }, required = ["id"] }
command = ["true"]
idempotent = true

[tools.refund]
description = "refund"
input_schema = { type = "object" }
command = ["true"]
"#;

fn cfg() -> ToolsConfig {
    crate::config::parse(TOOLS, Path::new("tools.toml")).expect("test tools.toml")
}

/// What the driver saw, comparable as a whole.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Attempt(String, u32),
    Trace(TraceEvent),
    Delay(Backoff),
    Sleep(Duration),
    Done(Value, u32, Option<String>),
    Paused(String, Value),
}

/// Guards decided by the test: a fixed approval answer per tool, a refusal per tool.
#[derive(Default)]
struct Fixed {
    approval: HashMap<&'static str, fn() -> Gate>,
    breaker: HashMap<&'static str, ErrorKind>,
}

impl Guards for Fixed {
    fn approval(&self, def: &ToolDef, _: &Value) -> Gate {
        self.approval
            .get(def.name.as_str())
            .map_or(Gate::Run, |g| g())
    }

    fn breaker(&self, def: &ToolDef, _: &Value) -> Option<ToolError> {
        let kind = self.breaker.get(def.name.as_str())?;
        Some(ToolError::new(*kind, "refused"))
    }
}

/// Runs a chain to its end, answering each attempt from `script` (per tool, in order)
/// and each wait with its ceiling (the fake clock's jitter).
fn run(chain: &mut Chain<'_>, script: &[(&str, AttemptResult)]) -> Vec<Seen> {
    run_hooked(chain, script, &|_, args| HookAnswer::Run(args))
}

/// [`run`], with the `before_tool` hooks of each hop answered by `hooks`.
fn run_hooked(
    chain: &mut Chain<'_>,
    script: &[(&str, AttemptResult)],
    hooks: &dyn Fn(&str, Value) -> HookAnswer,
) -> Vec<Seen> {
    let mut results: HashMap<&str, VecDeque<AttemptResult>> = HashMap::new();
    for (tool, r) in script {
        results.entry(tool).or_default().push_back(r.clone());
    }
    let mut seen = Vec::new();
    let mut pending: VecDeque<ChainEffect<'_>> = chain.handle(ChainEvent::Start).into();
    while let Some(effect) = pending.pop_front() {
        let event = match effect {
            ChainEffect::Trace(e) => {
                seen.push(Seen::Trace(e));
                continue;
            }
            ChainEffect::Attempt { def, attempt, .. } => {
                seen.push(Seen::Attempt(def.name.clone(), attempt));
                let result = results
                    .get_mut(def.name.as_str())
                    .and_then(VecDeque::pop_front)
                    .unwrap_or_else(|| panic!("no scripted result for {}", def.name));
                ChainEvent::AttemptFinished {
                    result,
                    elapsed: Duration::ZERO,
                }
            }
            ChainEffect::ChooseDelay(b) => {
                seen.push(Seen::Delay(b));
                let (base, max) = (b.policy.base, b.policy.max_backoff);
                let ceiling = base.saturating_mul(1 << b.retry).min(max);
                ChainEvent::DelayChosen(b.server_delay.map_or(ceiling, |d| d.min(max)))
            }
            ChainEffect::Sleep(d) => {
                seen.push(Seen::Sleep(d));
                ChainEvent::Slept
            }
            ChainEffect::Done(o) => {
                seen.push(Seen::Done(o.content, o.attempts, o.via));
                break;
            }
            ChainEffect::Hooks { def, args } => ChainEvent::HooksDecided(hooks(&def.name, args)),
            ChainEffect::Paused { tool, args, .. } => {
                seen.push(Seen::Paused(tool, args));
                break;
            }
        };
        pending.extend(chain.handle(event));
    }
    assert!(pending.is_empty(), "effects after the end: {pending:?}");
    seen
}

fn err(kind: ErrorKind, message: &str) -> AttemptResult {
    Err(ToolError::new(kind, message))
}

fn attempt(tool: &str, n: u32, e: Option<(ErrorKind, &str)>) -> Seen {
    Seen::Trace(TraceEvent::ToolAttempt {
        call_id: "c1".into(),
        tool: tool.into(),
        attempt: n,
        elapsed_ms: 0,
        error: e.map(|(k, _)| k),
        class: e.map(|(k, _)| k.class()),
        message: e.map(|(_, m)| m.to_string()),
        at_ms: None,
    })
}

fn wait(tool: &str, before: u32, ms: u64) -> [Seen; 3] {
    let retry = before - 2;
    [
        Seen::Delay(Backoff {
            policy: crate::backoff::Backoff {
                base: Duration::from_millis(100),
                max_backoff: Duration::from_secs(1),
                max_retry_after: Duration::from_secs(60),
                jitter: crate::backoff::Jitter::Full,
            },
            retry,
            server_delay: None,
        }),
        Seen::Trace(TraceEvent::Backoff {
            call_id: "c1".into(),
            tool: tool.into(),
            attempt: before,
            delay_ms: ms,
            retry_after: false,
            at_ms: None,
        }),
        Seen::Sleep(Duration::from_millis(ms)),
    ]
}

fn failure(kind: ErrorKind, message: &str, attempts: u32) -> Value {
    json!({
        "error": kind.as_str(),
        "class": kind.class().as_str(),
        "message": message,
        "retryable": kind.class() == ErrorClass::Transient,
        "attempts": attempts,
        "hint": Prompts::builtin().hint(kind),
    })
}

fn chain<'a>(cfg: &'a ToolsConfig, g: &'a Fixed, tool: &str, args: Value) -> Chain<'a> {
    static PROMPTS: std::sync::OnceLock<Prompts> = std::sync::OnceLock::new();
    let prompts = PROMPTS.get_or_init(Prompts::builtin);
    Chain::new(cfg, prompts, g, "c1", tool, args)
}

#[test]
fn a_temporary_failure_is_retried_and_the_success_returned() {
    let (cfg, g) = (cfg(), Fixed::default());
    let mut c = chain(&cfg, &g, "lookup", json!({"id": "1"}));
    let seen = run(
        &mut c,
        &[
            ("lookup", err(ErrorKind::Unavailable, "down")),
            ("lookup", Ok(json!({"found": true}))),
        ],
    );
    let mut want = vec![
        Seen::Attempt("lookup".into(), 1),
        attempt("lookup", 1, Some((ErrorKind::Unavailable, "down"))),
    ];
    want.extend(wait("lookup", 2, 100));
    want.extend([
        Seen::Attempt("lookup".into(), 2),
        attempt("lookup", 2, None),
        Seen::Done(json!({"found": true}), 2, None),
    ]);
    assert_eq!(seen, want);
}

#[test]
fn a_persistent_outage_gives_up_after_three_attempts_with_an_honest_error() {
    let (cfg, g) = (cfg(), Fixed::default());
    let mut c = chain(&cfg, &g, "lookup", json!({"id": "1"}));
    let t = || ("lookup", err(ErrorKind::Timeout, "lookup exceeded 8s"));
    let seen = run(&mut c, &[t(), t(), t()]);
    let e = Some((ErrorKind::Timeout, "lookup exceeded 8s"));
    let mut want = vec![Seen::Attempt("lookup".into(), 1), attempt("lookup", 1, e)];
    want.extend(wait("lookup", 2, 100));
    want.extend([Seen::Attempt("lookup".into(), 2), attempt("lookup", 2, e)]);
    want.extend(wait("lookup", 3, 200));
    want.extend([
        Seen::Attempt("lookup".into(), 3),
        attempt("lookup", 3, e),
        Seen::Done(
            failure(ErrorKind::Timeout, "lookup exceeded 8s", 3),
            3,
            None,
        ),
    ]);
    assert_eq!(seen, want);
}

#[test]
fn a_wrong_identifier_is_tried_once() {
    let (cfg, g) = (cfg(), Fixed::default());
    let mut c = chain(&cfg, &g, "lookup", json!({"id": "ORD-9"}));
    let seen = run(&mut c, &[("lookup", err(ErrorKind::NotFound, "no ORD-9"))]);
    assert_eq!(
        seen,
        vec![
            Seen::Attempt("lookup".into(), 1),
            attempt("lookup", 1, Some((ErrorKind::NotFound, "no ORD-9"))),
            Seen::Done(failure(ErrorKind::NotFound, "no ORD-9", 1), 1, None),
        ]
    );
}

#[test]
fn permission_denied_is_tried_once_and_starts_no_fallback() {
    let (cfg, g) = (cfg(), Fixed::default());
    let mut c = chain(&cfg, &g, "search_kb", json!({"q": "x"}));
    let seen = run(
        &mut c,
        &[("search_kb", err(ErrorKind::PermissionDenied, "403"))],
    );
    assert_eq!(
        seen,
        vec![
            Seen::Attempt("search_kb".into(), 1),
            attempt("search_kb", 1, Some((ErrorKind::PermissionDenied, "403"))),
            Seen::Done(failure(ErrorKind::PermissionDenied, "403", 1), 1, None),
        ]
    );
}

#[test]
fn invalid_arguments_make_no_call() {
    let (cfg, g) = (cfg(), Fixed::default());
    let mut c = chain(&cfg, &g, "lookup", json!({"id": 7}));
    let seen = run(&mut c, &[]);
    let [Seen::Done(content, 0, None)] = seen.as_slice() else {
        panic!("{seen:?}")
    };
    assert_eq!(
        (content["error"].as_str(), content["class"].as_str()),
        (Some("schema_violation"), Some("malformed"))
    );
}

#[test]
fn an_unknown_tool_makes_no_call() {
    let (cfg, g) = (cfg(), Fixed::default());
    let mut c = chain(&cfg, &g, "nope", json!({}));
    assert_eq!(
        run(&mut c, &[]),
        vec![Seen::Done(
            failure(ErrorKind::UnknownTool, "no tool named `nope`", 0),
            0,
            None
        )]
    );
}

#[test]
fn an_outage_falls_back_with_mapped_arguments_and_the_result_is_wrapped() {
    let (cfg, g) = (cfg(), Fixed::default());
    let mut c = chain(&cfg, &g, "search_kb", json!({"q": "refund"}));
    let down = || ("search_kb", err(ErrorKind::Unavailable, "down"));
    let seen = run(
        &mut c,
        &[down(), down(), down(), ("kb_cache", Ok(json!("30 days")))],
    );
    let tail = &seen[seen.len() - 4..];
    assert_eq!(
        tail,
        &[
            Seen::Trace(TraceEvent::Fallback {
                call_id: "c1".into(),
                from: "search_kb".into(),
                to: "kb_cache".into(),
                at_ms: None,
            }),
            Seen::Attempt("kb_cache".into(), 1),
            attempt("kb_cache", 1, None),
            Seen::Done(
                json!({"result": "30 days", "via": "kb_cache", "stale": true}),
                4,
                Some("kb_cache".into())
            ),
        ]
    );
}

#[test]
fn a_failed_chain_names_every_tool_tried() {
    let (cfg, g) = (cfg(), Fixed::default());
    let mut c = chain(&cfg, &g, "search_kb", json!({"q": "refund"}));
    let down = || ("search_kb", err(ErrorKind::Unavailable, "down"));
    let seen = run(
        &mut c,
        &[
            down(),
            down(),
            down(),
            ("kb_cache", err(ErrorKind::NotFound, "miss")),
        ],
    );
    assert_eq!(
        seen.last(),
        Some(&Seen::Done(
            failure(
                ErrorKind::AllToolsFailed,
                "search_kb: unavailable after 3 attempts; kb_cache: not_found after 1 attempt",
                4
            ),
            4,
            None
        ))
    );
}

#[test]
fn a_call_that_needs_approval_pauses_before_any_attempt() {
    let cfg = cfg();
    let g = Fixed {
        approval: HashMap::from([("refund", (|| Gate::Pause) as fn() -> Gate)]),
        ..Fixed::default()
    };
    let mut c = chain(&cfg, &g, "refund", json!({"order": 1}));
    assert_eq!(
        run(&mut c, &[]),
        vec![Seen::Paused("refund".into(), json!({"order": 1}))]
    );
}

#[test]
fn a_denied_call_is_not_made_and_no_fallback_works_around_it() {
    let cfg = cfg();
    let deny = || Gate::Block(ToolError::new(ErrorKind::ApprovalDenied, "no"));
    let g = Fixed {
        approval: HashMap::from([("search_kb", deny as fn() -> Gate)]),
        ..Fixed::default()
    };
    let mut c = chain(&cfg, &g, "search_kb", json!({"q": "x"}));
    assert_eq!(
        run(&mut c, &[]),
        vec![Seen::Done(
            failure(ErrorKind::ApprovalDenied, "no", 0),
            0,
            None
        )]
    );
}

#[test]
fn a_fallback_hop_that_needs_approval_pauses_at_that_hop() {
    let cfg = cfg();
    let g = Fixed {
        approval: HashMap::from([("kb_cache", (|| Gate::Pause) as fn() -> Gate)]),
        ..Fixed::default()
    };
    let mut c = chain(&cfg, &g, "search_kb", json!({"q": "x"}));
    let seen = run(&mut c, &[("search_kb", err(ErrorKind::ToolBug, "crashed"))]);
    assert_eq!(
        seen.last(),
        Some(&Seen::Paused("kb_cache".into(), json!({"query": "x"})))
    );
}

#[test]
fn an_open_circuit_refuses_the_call_after_the_approval_gate() {
    let cfg = cfg();
    let g = Fixed {
        breaker: HashMap::from([("lookup", ErrorKind::CircuitOpen)]),
        ..Fixed::default()
    };
    let mut c = chain(&cfg, &g, "lookup", json!({"id": "1"}));
    assert_eq!(
        run(&mut c, &[]),
        vec![Seen::Done(
            failure(ErrorKind::CircuitOpen, "refused", 0),
            0,
            None
        )]
    );
}

#[test]
fn a_refused_hop_is_traced_as_skipped_and_the_chain_fails() {
    let cfg = cfg();
    let g = Fixed {
        breaker: HashMap::from([("kb_cache", ErrorKind::ToolDisabled)]),
        ..Fixed::default()
    };
    let mut c = chain(&cfg, &g, "search_kb", json!({"q": "x"}));
    let seen = run(&mut c, &[("search_kb", err(ErrorKind::ToolBug, "crashed"))]);
    assert_eq!(
        &seen[seen.len() - 2..],
        &[
            Seen::Trace(TraceEvent::Note {
                kind: NoteKind::FallbackSkipped,
                message: "kb_cache: tool_disabled: refused".into(),
                at_ms: None,
            }),
            Seen::Done(
                failure(
                    ErrorKind::AllToolsFailed,
                    "search_kb: tool_bug after 1 attempt; kb_cache: tool_disabled, not called",
                    1
                ),
                1,
                None
            ),
        ]
    );
}

#[test]
fn a_non_idempotent_timeout_is_not_retried_and_its_outcome_is_unknown() {
    let (cfg, g) = (cfg(), Fixed::default());
    let mut c = chain(&cfg, &g, "refund", json!({}));
    let seen = run(
        &mut c,
        &[("refund", err(ErrorKind::Timeout, "refund exceeded 5s"))],
    );
    let [_, _, Seen::Done(content, 1, None)] = seen.as_slice() else {
        panic!("{seen:?}")
    };
    assert_eq!(content["error"], "outcome_unknown");
}

#[test]
fn a_non_idempotent_failure_that_proves_no_effect_is_retried() {
    let (cfg, g) = (cfg(), Fixed::default());
    let mut c = chain(&cfg, &g, "refund", json!({}));
    let refused = Err(ToolError::new(ErrorKind::Unavailable, "refused").not_acted());
    let seen = run(&mut c, &[("refund", refused), ("refund", Ok(json!("ok")))]);
    assert_eq!(seen.last(), Some(&Seen::Done(json!("ok"), 2, None)));
}

#[test]
fn an_approved_hop_runs_alone_and_is_wrapped() {
    let (cfg, g) = (cfg(), Fixed::default());
    static PROMPTS: std::sync::OnceLock<Prompts> = std::sync::OnceLock::new();
    let prompts = PROMPTS.get_or_init(Prompts::builtin);
    let mut c = Chain::approved_hop(&cfg, prompts, &g, "c1", "kb_cache", json!({"query": "x"}));
    let seen = run(&mut c, &[("kb_cache", Ok(json!("cached")))]);
    assert_eq!(
        seen,
        vec![
            Seen::Attempt("kb_cache".into(), 1),
            attempt("kb_cache", 1, None),
            Seen::Done(
                json!({"result": "cached", "via": "kb_cache", "stale": true}),
                1,
                Some("kb_cache".into())
            ),
        ]
    );
}

/// A `before_tool` hook is asked about every hop, with the mapped arguments; its
/// block skips the hop exactly as a refused guard does (docs/security.md, Hooks).
#[test]
fn a_hooks_block_on_a_fallback_hop_keeps_the_hop_from_running() {
    let (cfg, g) = (cfg(), Fixed::default());
    let mut c = chain(&cfg, &g, "search_kb", json!({"q": "x"}));
    let asked = std::cell::RefCell::new(Vec::new());
    let hooks = |tool: &str, args: Value| {
        asked.borrow_mut().push((tool.to_string(), args));
        HookAnswer::Refused(ToolError::new(ErrorKind::BlockedByHook, "no caches"))
    };
    let seen = run_hooked(
        &mut c,
        &[("search_kb", err(ErrorKind::ToolBug, "crashed"))],
        &hooks,
    );
    assert_eq!(
        asked.into_inner(),
        vec![("kb_cache".to_string(), json!({"query": "x"}))]
    );
    assert!(
        !seen.contains(&Seen::Attempt("kb_cache".into(), 1)),
        "{seen:?}"
    );
    let Some(Seen::Done(content, 1, None)) = seen.last() else {
        panic!("{seen:?}")
    };
    assert_eq!(content["error"], "all_tools_failed", "{content}");
}

/// An approved hop still asks its hooks (a person approved the hop, the hooks did not
/// stop deciding); a block ends the call.
#[test]
fn an_approved_hop_is_still_asked_of_its_hooks() {
    let (cfg, g) = (cfg(), Fixed::default());
    static PROMPTS: std::sync::OnceLock<Prompts> = std::sync::OnceLock::new();
    let prompts = PROMPTS.get_or_init(Prompts::builtin);
    let mut c = Chain::approved_hop(&cfg, prompts, &g, "c1", "kb_cache", json!({"query": "x"}));
    let seen = run_hooked(&mut c, &[], &|_, _| {
        HookAnswer::Refused(ToolError::new(ErrorKind::BlockedByHook, "no caches"))
    });
    let [Seen::Done(content, 0, None)] = seen.as_slice() else {
        panic!("{seen:?}")
    };
    assert_eq!(content["error"], "blocked_by_hook", "{content}");
}
