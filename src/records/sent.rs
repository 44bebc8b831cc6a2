//! A person's message for a run (`runs send`, issue 21): what was sent, by whom, and
//! where it went in the transcript once the run delivered it.

use super::run::{RunId, RunStatus};
use crate::model::{Message, Role};

/// A person's message for a run, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct SentMessage {
    pub id: i64,
    pub run: RunId,
    pub text: String,
    /// Who sent it (`--by`, else the user's login name).
    pub by: String,
    /// When it was sent (ms since the epoch).
    pub at: i64,
    /// Where it is in the transcript, once delivered.
    pub delivered: Option<Delivery>,
}

/// Where a sent message went: after step `step`, as transcript message `seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    pub step: u32,
    pub seq: i64,
}

impl RunStatus {
    /// Whether a person's message may still be delivered: the run is running, queued
    /// or waiting (for a person, a budget, a resume). A finished run — completed, or
    /// cancelled (never resumed) — never reads it.
    pub fn accepts_messages(self) -> bool {
        !matches!(self, RunStatus::Completed | RunStatus::Cancelled)
    }
}

/// The message the model reads for a person's message.
pub fn note(sent: &SentMessage) -> Message {
    Message::text(
        Role::User,
        format!("[A person ({}) sent a message] {}", sent.by, sent.text),
    )
}
