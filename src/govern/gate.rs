//! A run's way in under a limit key: take a place in the key's line (a hold in the
//! store, tied to the run's lease), wait until the schedule gives it a start, sleep
//! until then, and settle after. Every step on the key is one store transaction
//! running [`schedule`]'s rules, so all processes on the database share one line.
//!
//! A waiter asks the store again only when its turn may have come: at the start the
//! last pass expected for it (less the horizon), or — waiting for a concurrency slot,
//! which no schedule predicts — sooner the nearer it is to the head. A store that
//! cannot be reached never stops a run: the caller goes on ungoverned.

use super::schedule::{self, KeyState, Limit, Reason, Wait};
use super::{Limits, ModelLimit};
use crate::clock::Clock;
use crate::config::{ToolDef, ToolKind};
use crate::store::{HoldWrite, Lease, LimitHold, LimitView, LimitWrite, Store, StoreError};
use crate::trace::{EventSink, NoteKind, TraceEvent};
use std::sync::Arc;
use std::time::Duration;

/// What a run brings to the limits: the store they live in, its lease (holds live and
/// die with it), the run's configured limits and priority, its clock and trace.
pub struct Gate<'a> {
    pub store: &'a Arc<Store>,
    pub lease: &'a Lease,
    pub limits: &'a Limits,
    /// Higher goes first; first come, first served within a priority.
    pub priority: i64,
    pub clock: &'a dyn Clock,
    pub events: &'a dyn EventSink,
}

/// One governed key: its name in the store, what people call it, and its limits.
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    pub key: String,
    pub label: String,
    pub limit: Limit,
}

/// A place under a key that has started; settle it with [`Gate::settle`].
#[derive(Debug)]
pub struct Ticket {
    key: Key,
    hold: LimitHold,
}

impl Ticket {
    /// When its place in line was first taken (store clock): a request the provider
    /// refused takes the line again from there, ahead of those who came later.
    pub fn place(&self) -> i64 {
        self.hold.created_at
    }
}

/// What the provider said about the key: nothing may start before `after` from now;
/// `lower` (a refusal) also cuts the rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pause {
    pub after: Duration,
    pub lower: bool,
}

#[derive(Debug)]
enum Turn {
    Go {
        hold: LimitHold,
        now: i64,
    },
    Wait {
        wait: Wait,
        text: String,
        position: usize,
    },
}

impl Gate<'_> {
    /// The key of a model's requests, when `[models."SPEC"]` limits it.
    pub fn model_key(&self, spec: &str, endpoint: &str) -> Option<Key> {
        let ModelLimit { limit, limit_key } = self.limits.models.get(spec)?;
        let key = match limit_key {
            Some(k) => format!("key:{k}"),
            None => format!("model:{spec}@{endpoint}"),
        };
        Some(Key {
            key,
            label: limit_key.clone().unwrap_or_else(|| spec.to_string()),
            limit: *limit,
        })
    }

    /// The key of a tool's calls: its MCP server's, or its own.
    pub fn tool_key(&self, def: &ToolDef) -> Option<Key> {
        let (key, label, limit) = match &def.kind {
            ToolKind::Mcp(spec) => (
                format!("mcp:{}", spec.server),
                format!("mcp:{}", spec.server),
                self.limits.mcp.get(&spec.server)?,
            ),
            _ => (
                format!("tool:{}", def.name),
                def.name.clone(),
                self.limits.tools.get(&def.name)?,
            ),
        };
        Some(Key {
            key,
            label,
            limit: *limit,
        })
    }

    /// Waits for a place under `key` for a request of `tokens`, then until its start.
    /// `place`: a place in line kept from a refused request.
    pub async fn enter(
        &self,
        key: &Key,
        tokens: i64,
        place: Option<i64>,
    ) -> Result<Ticket, StoreError> {
        let id = format!(
            "{:016x}{:016x}",
            rand::random::<u64>(),
            rand::random::<u64>()
        );
        let mut said: Option<String> = None;
        loop {
            match self.turn(key, &id, tokens, place).await? {
                Turn::Go { hold, now } => {
                    if self.sleep_until_start(&id, hold.start_at, now).await? {
                        return Ok(Ticket {
                            key: key.clone(),
                            hold,
                        });
                    }
                }
                Turn::Wait {
                    wait,
                    text,
                    position,
                } => {
                    // One line per change of what it waits for, not one per look.
                    let what = text.split(", ~").next().unwrap_or(&text).to_string();
                    if said.as_deref() != Some(what.as_str()) {
                        self.events.emit(TraceEvent::Note {
                            kind: NoteKind::RateLimit,
                            message: text,
                            at_ms: None,
                        });
                        said = Some(what);
                    }
                    self.clock
                        .sleep(poll_after(&key.limit, &wait, position))
                        .await;
                }
            }
        }
    }

    /// One look at the line: the pass of [`schedule::pass`] with this hold in it.
    async fn turn(
        &self,
        key: &Key,
        id: &str,
        tokens: i64,
        place: Option<i64>,
    ) -> Result<Turn, StoreError> {
        let me = LimitHold {
            id: id.to_string(),
            run: self.lease.run.clone(),
            lease_token: self.lease.token,
            priority: self.priority,
            tokens,
            cost: 0.0,
            start_at: None,
            created_at: place.unwrap_or(0),
            waiting_for: None,
        };
        let key_for_step = key.clone();
        self.store
            .limit_step(&key.key, move |view| decide(&key_for_step, view, me))
            .await
    }

    /// Sleeps until the hold's start, following it if a pause moved it. False when the
    /// hold is gone (its lease lapsed meanwhile): the caller takes the line again.
    async fn sleep_until_start(
        &self,
        id: &str,
        start: Option<i64>,
        now: i64,
    ) -> Result<bool, StoreError> {
        let mut left = start.unwrap_or(now) - now;
        while left > 0 {
            self.clock.sleep(Duration::from_millis(left as u64)).await;
            match self.store.limit_hold_start(id).await? {
                (Some(Some(start)), now) => left = start - now,
                _ => return Ok(false),
            }
        }
        Ok(true)
    }

    /// The request is done: it used `used` tokens (`None`: unknown, the reservation
    /// stands), and the provider may have asked for a `pause`. Never fails the caller.
    pub async fn settle(&self, ticket: Ticket, used: Option<i64>, pause: Option<Pause>) {
        let Ticket { key, hold } = ticket;
        let limit = key.limit;
        let label = key.label.clone();
        let name = key.key.clone();
        let step = self.store.limit_step(&name, move |view| {
            let now = view.now_ms;
            let mut state = read_state(&view);
            let mut holds = view.holds;
            let before = holds.clone();
            if let Some(p) = pause {
                let until = now + p.after.as_millis() as i64;
                schedule::pause(&limit, &mut state, &mut holds, now, until, p.lower);
            }
            schedule::settle(&limit, &mut state, &hold, used, now);
            let mut writes = changed(&before, &holds);
            writes.push(HoldWrite::Delete(hold.id.clone()));
            (write(&key, &label, &state, writes), ())
        });
        // A settle that fails leaves the hold to die with the lease, and the
        // reservation to age out of the schedule: nothing a run must stop for.
        let _ = step.await;
    }
}

/// How long a waiter sleeps before it looks again.
fn poll_after(limit: &Limit, wait: &Wait, position: usize) -> Duration {
    let horizon = schedule::horizon(limit);
    let ms = match (wait.expected, wait.reason) {
        (Some(_), _) => wait_ms(wait) - horizon / 2.0,
        // No schedule predicts when a slot comes free: the head looks often, the
        // rest less the further back they are.
        (None, _) => {
            let behind = position as f64 / f64::from(limit.max_concurrent.unwrap_or(1).max(1));
            (25.0 * (1.0 + behind)).min(1000.0)
        }
    };
    Duration::from_millis(ms.clamp(5.0, 60_000.0) as u64)
}

/// The wait the pass expected, in ms (relative: `expected` minus the pass's time is
/// kept in `Wait` by [`decide`]).
fn wait_ms(wait: &Wait) -> f64 {
    wait.expected.unwrap_or(0).max(0) as f64
}

fn read_state(view: &LimitView) -> KeyState {
    view.state
        .as_deref()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default()
}

fn write(key: &Key, label: &str, state: &KeyState, holds: Vec<HoldWrite>) -> LimitWrite {
    LimitWrite {
        label: label.to_string(),
        config: serde_json::to_string(&key.limit).unwrap_or_default(),
        state: serde_json::to_string(state).unwrap_or_default(),
        holds,
    }
}

/// The holds of `after` that differ from `before` (same order; new ones at the end).
fn changed(before: &[LimitHold], after: &[LimitHold]) -> Vec<HoldWrite> {
    after
        .iter()
        .enumerate()
        .filter(|(i, h)| before.get(*i) != Some(h))
        .map(|(_, h)| HoldWrite::Put(h.clone()))
        .collect()
}

/// One pass of the line with `me` in it, as one store transaction decides it.
fn decide(key: &Key, view: LimitView, me: LimitHold) -> (LimitWrite, Turn) {
    let now = view.now_ms;
    let mut state = read_state(&view);
    let mut holds = view.holds.clone();
    let before = holds.clone();
    let mine = match holds.iter().position(|h| h.id == me.id) {
        Some(i) => i,
        None => {
            let created_at = if me.created_at > 0 {
                me.created_at
            } else {
                now
            };
            holds.push(LimitHold { created_at, ..me });
            holds.len() - 1
        }
    };
    let waits = schedule::pass(&key.limit, &mut state, &mut holds, now);
    let turn = match holds[mine].start_at {
        Some(_) => Turn::Go {
            hold: holds[mine].clone(),
            now,
        },
        None => {
            let (position, wait) = waits
                .iter()
                .enumerate()
                .find(|(_, (i, _))| *i == mine)
                .map(|(p, (_, w))| (p, w.clone()))
                .unwrap_or((
                    0,
                    Wait {
                        expected: None,
                        reason: Reason::Concurrency,
                    },
                ));
            let text = waiting_text(&key.label, &wait, now);
            holds[mine].waiting_for = Some(text.clone());
            let relative = Wait {
                expected: wait.expected.map(|t| t - now),
                reason: wait.reason,
            };
            Turn::Wait {
                wait: relative,
                text,
                position,
            }
        }
    };
    let writes = changed(&before, &holds);
    (write(key, &key.label, &state, writes), turn)
}

/// "waiting for the openai:gpt-4o token limit, ~4 s".
pub fn waiting_text(label: &str, wait: &Wait, now: i64) -> String {
    let what = match wait.reason {
        Reason::Provider => format!("waiting for {label}: the provider asked to pause"),
        r => format!("waiting for the {label} {}", r.noun()),
    };
    match wait.expected {
        Some(t) => {
            let secs = ((t - now).max(0) as f64 / 1000.0).ceil().max(1.0);
            format!("{what}, ~{secs} s")
        }
        None => what,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::RunId;

    fn key(limit: Limit) -> Key {
        Key {
            key: "model:openai:gpt-4o@x".into(),
            label: "openai:gpt-4o".into(),
            limit,
        }
    }

    fn hold(id: &str, tokens: i64) -> LimitHold {
        LimitHold {
            id: id.into(),
            run: RunId("r".into()),
            lease_token: 1,
            priority: 0,
            tokens,
            cost: 0.0,
            start_at: None,
            created_at: 0,
            waiting_for: None,
        }
    }

    #[test]
    fn a_waiter_is_told_which_limit_holds_it_and_for_how_long() {
        let k = key(Limit {
            requests: Some(60),
            tokens: Some(40_000),
            max_concurrent: None,
            window_ms: 60_000,
        });
        let state = KeyState {
            tat: 10_000.0,
            ..KeyState::default()
        };
        let view = LimitView {
            now_ms: 6_000,
            state: Some(serde_json::to_string(&state).unwrap()),
            holds: vec![],
        };
        let (write, turn) = decide(&k, view, hold("a", 2_000));
        let Turn::Wait { text, wait, .. } = turn else {
            panic!("{turn:?}")
        };
        assert_eq!(text, "waiting for the openai:gpt-4o token limit, ~4 s");
        assert_eq!(wait.expected, Some(4_000));
        // The new hold is stored, saying what it waits for.
        assert!(
            matches!(&write.holds[..], [HoldWrite::Put(h)] if h.waiting_for.as_deref() == Some(text.as_str()))
        );
    }

    #[test]
    fn a_free_key_lets_the_request_go_at_once_and_books_its_cost() {
        let k = key(Limit {
            requests: Some(60),
            tokens: None,
            max_concurrent: None,
            window_ms: 60_000,
        });
        let view = LimitView {
            now_ms: 5_000,
            state: Some(r#"{"tat":5000.0}"#.into()),
            holds: vec![],
        };
        let (write, turn) = decide(&k, view, hold("a", 10));
        assert!(matches!(turn, Turn::Go { ref hold, now: 5_000 } if hold.start_at == Some(5_000)));
        let state: KeyState = serde_json::from_str(&write.state).unwrap();
        assert_eq!(state.tat, 6_000.0);
    }
}
