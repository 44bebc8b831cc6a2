//! A person's decision on an escalation, checked and recorded the same way whichever
//! door it comes through: `agentrun escalations resolve` or the web console (issue 24).
//!
//! The checks, in order: the escalation is still open; the form was rendered for the
//! call it now shows (its [`binding`] still matches — no approving a call that changed
//! under the reviewer); the decision applies to the kind; modified arguments are a
//! JSON object that fits the tool's schema as the run's snapshot defines it. Only then
//! is the decision recorded, with the reviewer's name.

use crate::setup::Snapshot;
use crate::store::{
    EscalationId, EscalationKind, EscalationRow, Facts, Resolution, Store, StoreError,
};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Why a decision was refused. Every variant but `Store` is about what the person
/// asked for (exit 2 in the CLI, the form shown again with the message in the console).
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    #[error("escalation {id} is {kind}: {given} does not apply; use {allowed}")]
    NotAllowed {
        id: i64,
        kind: EscalationKind,
        given: &'static str,
        allowed: String,
    },
    #[error(
        "escalation {0}: --modify applies to a call the model made; {1} was reached through a fallback — use --approve or --deny"
    )]
    ModifyFallback(i64, String),
    #[error("--modify: {0}")]
    BadArgs(String),
    #[error(
        "escalation {0} changed since the page was shown (its call digest no longer matches); look again before deciding"
    )]
    Changed(i64),
    #[error("the decision needs a reviewer name")]
    NoReviewer,
    #[error("the run's stored configuration cannot be read: {0}")]
    Snapshot(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl DecideError {
    pub fn is_bad_input(&self) -> bool {
        match self {
            DecideError::Store(e) => e.is_bad_input(),
            DecideError::Snapshot(_) => false,
            _ => true,
        }
    }
}

/// The decisions a person can take on an escalation of `kind`, as CLI flags.
pub fn allowed(kind: EscalationKind) -> &'static [&'static str] {
    match kind {
        EscalationKind::ApprovalRequired => &["--approve", "--modify JSON", "--deny REASON"],
        EscalationKind::Question => &["--reply TEXT", "--deny REASON"],
        EscalationKind::OutcomeUnknown | EscalationKind::BreakerOpen | EscalationKind::Stuck => {
            &["--approve", "--reply TEXT", "--deny REASON"]
        }
        EscalationKind::ToolBug | EscalationKind::AllToolsFailed => &["--reply TEXT", "--approve"],
    }
}

/// The CLI flag of a decision.
pub fn flag(r: &Resolution) -> &'static str {
    match r {
        Resolution::Approve => "--approve",
        Resolution::Deny { .. } => "--deny",
        Resolution::Modify { .. } => "--modify",
        Resolution::Reply { .. } => "--reply",
    }
}

/// Whether `r` is one of the decisions [`allowed`] for the escalation's kind.
pub fn applies(kind: EscalationKind, r: &Resolution) -> bool {
    let f = flag(r);
    allowed(kind).iter().any(|a| a.split(' ').next() == Some(f))
}

/// What a decision form is bound to: the call's digest (tool + arguments) where the
/// escalation has one — the digest an approval is recorded against — else a digest
/// of everything the escalation shows (facts and handover).
pub fn binding(e: &EscalationRow) -> String {
    match &e.detail.facts {
        Facts::ApprovalRequired(f) => f.digest.clone(),
        Facts::BreakerOpen(f) => f.digest.clone(),
        _ => {
            let hash = Sha256::digest(e.detail.to_json().to_string().as_bytes());
            hash.iter().take(16).map(|b| format!("{b:02x}")).collect()
        }
    }
}

/// Parses `--modify`'s text: a JSON object.
pub fn parse_modified(text: &str) -> Result<Value, DecideError> {
    let v: Value = serde_json::from_str(text)
        .map_err(|err| DecideError::BadArgs(format!("not valid JSON: {err}")))?;
    if !v.is_object() {
        return Err(DecideError::BadArgs(
            "the arguments must be a JSON object".into(),
        ));
    }
    Ok(v)
}

/// Checks and records a decision. `expected` is the binding the deciding form was
/// rendered with (`None` from the CLI, which shows and decides in one command).
pub fn decide(
    store: &Store,
    id: EscalationId,
    resolution: &Resolution,
    by: &str,
    expected: Option<&str>,
) -> Result<EscalationRow, DecideError> {
    let e = store.escalation(id)?;
    if e.status() == "cancelled" {
        return Err(StoreError::EscalationCancelled(e.id.0).into());
    }
    if !e.open {
        return Err(StoreError::AlreadyResolved(e.id.0).into());
    }
    if expected.is_some_and(|b| b != binding(&e)) {
        return Err(DecideError::Changed(e.id.0));
    }
    if by.trim().is_empty() {
        return Err(DecideError::NoReviewer);
    }
    if !applies(e.kind, resolution) {
        return Err(DecideError::NotAllowed {
            id: e.id.0,
            kind: e.kind,
            given: flag(resolution),
            allowed: allowed(e.kind).join(" | "),
        });
    }
    if let Resolution::Modify { args } = resolution {
        check_modified_args(store, &e, args)?;
    }
    let (resolution, by) = redacted(store, &e, resolution, by.trim())?;
    store.resolve_escalation(e.id, &resolution, &by)?;
    Ok(e)
}

/// The person's text in `resolution`, and their name, with the secrets the run's
/// config knows replaced, as everything else stored for the run is (docs/ARCHITECTURE.md §5).
fn redacted(
    store: &Store,
    e: &EscalationRow,
    resolution: &Resolution,
    by: &str,
) -> Result<(Resolution, String), DecideError> {
    let snapshot = crate::runner::worker::stored_snapshot(store, &e.run_id)
        .map_err(|err| DecideError::Snapshot(err.to_string()))?;
    let secrets = crate::runner::secrets::known(&snapshot);
    let resolution = match resolution {
        Resolution::Approve => Resolution::Approve,
        Resolution::Deny { reason } => Resolution::Deny {
            reason: secrets.text(reason),
        },
        Resolution::Reply { text } => Resolution::Reply {
            text: secrets.text(text),
        },
        Resolution::Modify { args } => {
            let mut args = args.clone();
            secrets.json(&mut args);
            Resolution::Modify { args }
        }
    };
    Ok((resolution, secrets.text(by)))
}

/// Modified arguments must fit the tool's schema, as the run's snapshot defines it.
fn check_modified_args(store: &Store, e: &EscalationRow, args: &Value) -> Result<(), DecideError> {
    let tool = e.detail.facts.tool();
    let requested = match &e.detail.facts {
        Facts::ApprovalRequired(f) => Some(f.requested_tool.as_str()),
        _ => None,
    };
    if requested != Some(tool) {
        return Err(DecideError::ModifyFallback(e.id.0, tool.to_string()));
    }
    let snapshot: Snapshot = serde_json::from_str(&store.snapshot(&e.run_id)?)
        .map_err(|err| DecideError::Snapshot(err.to_string()))?;
    let cfg = crate::config::parse(
        &snapshot.tools_toml,
        std::path::Path::new(&snapshot.tools_path),
    )
    .map_err(|err| DecideError::Snapshot(format!("{err:#}")))?;
    let def = cfg.tools.get(tool).ok_or_else(|| {
        DecideError::BadArgs(format!("tool {tool} is not in the run's tools.toml"))
    })?;
    let problems = crate::schema::validate(&def.input_schema, args);
    if !problems.is_empty() {
        return Err(DecideError::BadArgs(format!(
            "the arguments do not fit {tool}'s input_schema: {}",
            problems.join("; ")
        )));
    }
    Ok(())
}
