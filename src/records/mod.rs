//! The records a run is made of — its id and status, the transcript's messages, the
//! tool-call journal, escalations with their typed facts and handover — as plain data.
//!
//! Both the pure machine (`machine/`) and the store (`store/`) speak these types; this
//! module depends on neither, so the IO-free core imports no storage code and the
//! store depends on the core's types, never the other way round (issue 25).

mod detail;
mod escalation;
mod journal;
mod run;
mod sent;

pub use detail::{
    AllToolsFailedFacts, ApprovalFacts, BreakerFacts, CallFacts, CallId, EscalationDetail,
    EscalationKind, Facts, Handover, QuestionFacts, StuckFacts, ToolFailures,
};
pub use escalation::{EscalationId, EscalationRow, Resolution};
pub use journal::{CallRecord, CallStatus, JournalEntry, StoredEvent, StoredMessage};
pub use run::{ForkOrigin, ParentLink, RunId, RunRow, RunStatus, Spent};
pub use sent::{Delivery, SentMessage, note as sent_note};
