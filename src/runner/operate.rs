//! Forking a run and sending it a person's message, for every front end (the CLI's
//! `runs fork` and `runs send`, the console): the checks, the config a fork runs
//! with, and the store's one transaction each (issue 21).
//!
//! A fork is created `interrupted` and held by nobody; whoever starts it drives it
//! through the one lifecycle ([`super::lifecycle::drive`]) like any resumed run: the
//! CLI's `resume` path, or the console's driver thread. A sent message is only
//! stored here; the run's holder delivers it at its next step boundary.

use super::worker::{SnapshotError, stored_snapshot};
use crate::fault;
use crate::machine::state::LoopState;
use crate::setup::{self, SetupError};
use crate::store::{ForkRun, Forked, ReadSpent, RunId, SentMessage, Spent, Store, StoreError};
use std::path::Path;

/// Why a fork or a message was refused.
#[derive(Debug, thiserror::Error)]
pub enum OperateError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Setup(#[from] SetupError),
    #[error(transparent)]
    Snapshot(SnapshotError),
    #[error("the message is empty; give the text to send")]
    EmptyMessage,
    #[error("--by: give a name")]
    NoSender,
    #[error("cannot store the new config snapshot: {0}")]
    Encode(#[from] serde_json::Error),
}

impl From<SnapshotError> for OperateError {
    fn from(e: SnapshotError) -> Self {
        match e {
            SnapshotError::Store(e) => OperateError::Store(e),
            SnapshotError::Setup(e) => OperateError::Setup(e),
            other => OperateError::Snapshot(other),
        }
    }
}

impl OperateError {
    /// Whether the person asked for something that cannot be done (exit 2, a form
    /// error) rather than the system failing.
    pub fn is_bad_input(&self) -> bool {
        match self {
            OperateError::Store(e) => e.is_bad_input(),
            OperateError::Setup(_) | OperateError::EmptyMessage | OperateError::NoSender => true,
            OperateError::Snapshot(_) | OperateError::Encode(_) => false,
        }
    }
}

/// A fork as an operator asks for it.
#[derive(Debug, Clone, Default)]
pub struct ForkOrder<'a> {
    /// The last step copied; `None`: the source's last committed step.
    pub at_step: Option<u32>,
    /// A model spec replacing the source's models.
    pub model: Option<&'a str>,
    /// A tools.toml replacing the source's tools (checked by the caller first when it
    /// wants every problem listed, as `runs fork` does).
    pub tools: Option<&'a Path>,
    pub max_steps: Option<u32>,
    pub max_tokens: Option<u64>,
}

impl ForkOrder<'_> {
    /// Whether the fork runs with a config other than the source's.
    pub fn replaces_config(&self) -> bool {
        self.model.is_some() || self.tools.is_some()
    }
}

/// Creates a fork of `source` (not started): a new run whose history is the source's
/// up to the end of a committed step, with the source's config or the one the order
/// gives, checked as `start` checks it before anything is written.
pub fn fork(store: &Store, source: &RunId, order: &ForkOrder<'_>) -> Result<Forked, OperateError> {
    let config = replaced_config(store, source, order)?;
    let forked = store.fork_run(&ForkRun {
        source: source.clone(),
        id: RunId::generate(),
        at_step: order.at_step,
        config: config.as_ref().map(|(s, scripts)| (s.as_str(), scripts)),
        max_steps: order.max_steps,
        max_tokens: order.max_tokens,
        spent: spent_by as ReadSpent,
    })?;
    fault::point("after_fork");
    Ok(forked)
}

/// What a stored loop state says was spent (the store asks; it does not read the
/// machine's state itself).
fn spent_by(state: &str) -> Result<Spent, String> {
    let s: LoopState = serde_json::from_str(state).map_err(|e| e.to_string())?;
    Ok(Spent {
        input_tokens: s.input_tokens,
        output_tokens: s.output_tokens,
        cost_usd: s.cost_usd,
        ..Spent::default()
    })
}

type Config = (String, std::collections::BTreeMap<String, String>);

/// The snapshot (JSON) and scripts a fork runs with when the order replaces the
/// model or tools; `None` keeps the source's.
fn replaced_config(
    store: &Store,
    source: &RunId,
    order: &ForkOrder<'_>,
) -> Result<Option<Config>, OperateError> {
    if !order.replaces_config() {
        return Ok(None);
    }
    let mut snapshot = stored_snapshot(store, source)?;
    if let Some(path) = order.tools {
        setup::retool(&mut snapshot, path)?;
    }
    if let Some(spec) = order.model {
        setup::switch_model(&mut snapshot, spec, &store.run(source)?.task_path)?;
    }
    // Everything a resume will check, now, before anything is written.
    let resolved = setup::resolve(snapshot)?;
    let json = serde_json::to_string(&resolved.snapshot)?;
    Ok(Some((json, resolved.snapshot.scripts)))
}

/// Stores a person's message for `run`, delivered once at its next step boundary;
/// refused for a run that will read no more (completed or cancelled). A secret the
/// run's config knows is stored (and so shown to the model) as `[redacted]`.
pub fn send(store: &Store, run: &RunId, text: &str, by: &str) -> Result<SentMessage, OperateError> {
    if text.trim().is_empty() {
        return Err(OperateError::EmptyMessage);
    }
    let by = by.trim();
    if by.is_empty() {
        return Err(OperateError::NoSender);
    }
    let secrets = super::secrets::known(&stored_snapshot(store, run)?);
    // The sender's name is stored and shown like the text (docs/security.md).
    let (text, by) = (secrets.text(text), secrets.text(by));
    let sent = store.send_message(run, &text, &by)?;
    fault::point("after_send");
    Ok(sent)
}
