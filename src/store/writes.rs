//! The store's writes that change several rows of a run at once — creating or queueing
//! a run, the journal inside a step, the step commit, an escalation, a person's
//! decision carried in — written once for both backends (issue 25): each builds its
//! [`Plan`] (`store/plan.rs`) and the backend runs it in one transaction.
//!
//! A step is written in at most a few transactions:
//! 1. the model's response, as soon as it arrives, with one journal row per tool call
//!    (`pending`) — a finished model call is never paid for twice;
//! 2. before a non-idempotent call runs, its row is marked started (after a crash, a
//!    started call without an outcome may have had its effect, so it is never re-run;
//!    an idempotent call needs no mark: it may simply run again);
//! 3. each call's outcome as it finishes — except an idempotent last call's, which
//!    rides in (a lost commit just runs that call again)
//! 4. the step commit: the step's messages, the loop state and the run's counters.
//!
//! **What each write costs, and what a power cut can cost (issue 14).** Only (2) and
//! (4) are fsynced ([`Durability::PowerCut`]); (1) and (3) are
//! [`Durability::Process`]: they survive a killed process at once, and a power cut
//! as soon as the next fsynced commit returns (see `store/durability.rs`). So a
//! step with idempotent calls costs one fsync (the step commit), a step with
//! non-idempotent calls one more per such call (its started mark, which also makes
//! the response journaled before it durable), and a final-answer step one.
//!
//! A killed process loses nothing that was committed. A power cut (or an OS crash)
//! rolls the database back to its last fsynced commit, which can cost, for the one
//! step that was in flight:
//! - its model turn, asked again (and paid again) on resume — at most one turn;
//! - its idempotent calls' outcomes: they run again, with the same
//!   `AGENTRUN_CALL_ID` (what `idempotent = true` allows);
//! - the outcome of a non-idempotent call that finished after its started mark: the
//!   mark is durable (fsynced before the call ran), so the call is *not* run again;
//!   it is handled as `outcome_unknown` (escalated, or told to the model), exactly as
//!   after a crash while it ran;
//! - its trace events.
//!
//! It never costs a committed step, and never repeats a non-idempotent call.
//!
//! The step writes are `async` (issue 23): on SQLite a busy process queues them for
//! the file's committer thread (`store/sqlite/group.rs`), so the thread driving a run
//! goes on with its other runs while the write commits, and the writes of every run in
//! flight share one transaction; each still returns only once its own write committed.

use super::plan::Plan;
use super::{
    Durability, EscalationId, Lease, NewEscalation, NewRun, ParentLink, Result, RunId, RunStatus,
    SentMessage, StepCommit, Store, StoreError,
};
use crate::model::{Message, ModelResponse};
use crate::records::CallRecord;
use crate::trace::TraceEvent;

impl Store {
    /// Runs `plan` in one transaction at `durability` on this store's backend;
    /// returns the escalation it queued, if any.
    fn run_plan(&self, durability: Durability, plan: Plan) -> Result<Option<EscalationId>> {
        match self {
            Store::Sqlite(s) => s.run_plan(durability, plan),
            Store::Postgres(s) => s.run_plan(durability, plan),
        }
    }

    /// [`Store::run_plan`] for a run's own writes while it is driven: on SQLite the
    /// write is queued for the file's committer thread and awaited, so the driving
    /// thread goes on with its other runs meanwhile (`store/sqlite/group.rs`); on
    /// PostgreSQL it runs here, on a pooled connection.
    async fn run_plan_queued(
        &self,
        durability: Durability,
        plan: Plan,
    ) -> Result<Option<EscalationId>> {
        match self {
            Store::Sqlite(s) => s.run_plan_queued(durability, plan).await,
            Store::Postgres(s) => s.run_plan_async(durability, plan).await,
        }
    }

    /// [`Store::claim`] from a worker's slot: on SQLite queued for the committer
    /// thread, so slots claiming at once share a transaction and their thread goes on.
    pub async fn claim_queued(
        &self,
        worker: &str,
        ttl: std::time::Duration,
    ) -> Result<Option<Lease>> {
        match self {
            Store::Sqlite(s) => s.claim_queued(worker, ttl).await,
            Store::Postgres(s) => s.claim_async(worker, ttl).await,
        }
    }

    /// [`Store::release`] as a driven run ends: on SQLite queued for the committer
    /// thread.
    pub async fn release_queued(&self, lease: &Lease) -> Result<()> {
        match self {
            Store::Sqlite(s) => s.release_queued(lease).await,
            Store::Postgres(s) => s.release_async(lease).await,
        }
    }

    /// Marks every pending notification event of `run` skipped (a run without
    /// `[notify]`), in one write; on SQLite queued for the committer thread.
    pub async fn skip_notices_of(&self, run: &RunId) -> Result<()> {
        match self {
            Store::Sqlite(s) => s.skip_notices_of(run).await,
            Store::Postgres(s) => s.skip_notices_of(run).await,
        }
    }

    /// The messages to deliver as a step begins ([`Store::undelivered_messages`]),
    /// read from the driver: on SQLite queued for the committer thread like the
    /// step's writes, so the driving thread does not wait out a commit to read.
    pub async fn messages_to_deliver(&self, run: &RunId) -> Result<Vec<SentMessage>> {
        match self {
            Store::Sqlite(s) => s.messages_to_deliver(run).await,
            Store::Postgres(s) => s.messages_to_deliver(run).await,
        }
    }

    /// Creates a run, already leased to this process, with its opening messages.
    pub fn create_run(&self, new: &NewRun<'_>) -> Result<Lease> {
        self.run_plan(Durability::PowerCut, Plan::new_run(new, false, None)?)?;
        Ok(Lease {
            run: new.id.clone(),
            token: 1,
        })
    }

    /// Creates a child run (issue 26), leased to this process, linked to its parent
    /// call in the same transaction; `key` (the call's idempotency key) is unique: one
    /// call, one child.
    pub fn create_child_run(
        &self,
        new: &NewRun<'_>,
        parent: &ParentLink,
        key: &str,
    ) -> Result<Lease> {
        let plan = Plan::new_run(new, false, Some((parent, key)))?;
        self.run_plan(Durability::PowerCut, plan)?;
        Ok(Lease {
            run: new.id.clone(),
            token: 1,
        })
    }

    /// Queues a run for the workers (`agentrun submit`): `queued`, held by nobody, and
    /// marked as the queue's (see [`Store::claim`]).
    pub fn submit_run(&self, new: &NewRun<'_>) -> Result<()> {
        self.run_plan(Durability::PowerCut, Plan::new_run(new, true, None)?)?;
        Ok(())
    }

    /// Journals a model response for `step` with its tool calls as pending rows. Not
    /// fsynced ([`Durability::Process`]): the step commit, or an earlier started mark,
    /// makes it durable against a power cut.
    pub async fn record_model_turn(
        &self,
        lease: &Lease,
        step: u32,
        response: &ModelResponse,
        events: &[TraceEvent],
    ) -> Result<()> {
        let plan = Plan::model_turn(lease, step, response, events)?;
        self.run_plan_queued(Durability::Process, plan).await?;
        Ok(())
    }

    /// Marks a call as begun, durably ([`Durability::PowerCut`]): it returns only once
    /// the mark (and everything journaled before it) survives a power cut, so a call
    /// that may have had its effect is never taken for one that did not run.
    pub async fn mark_started(&self, lease: &Lease, step: u32, call_id: &str) -> Result<()> {
        self.run_plan_queued(Durability::PowerCut, Plan::started(lease, step, call_id))
            .await?;
        Ok(())
    }

    /// A call's outcome. Not fsynced: lost only to a power cut, after which an
    /// idempotent call runs again and a non-idempotent one (its started mark durable)
    /// is `outcome_unknown`.
    pub async fn record_outcome(
        &self,
        lease: &Lease,
        step: u32,
        record: &CallRecord,
        events: &[TraceEvent],
    ) -> Result<()> {
        let plan = Plan::outcome(lease, step, record, events)?;
        self.run_plan_queued(Durability::Process, plan).await?;
        Ok(())
    }

    /// Commits a finished step in one transaction: its messages, the loop state and the
    /// run's counters, and the escalation it raised (whose id is returned).
    pub async fn commit_step(
        &self,
        lease: &Lease,
        c: &StepCommit<'_>,
    ) -> Result<Option<EscalationId>> {
        self.run_plan_queued(Durability::PowerCut, Plan::step(lease, c)?)
            .await
    }

    /// Appends messages between steps (a person's reply carried into the transcript)
    /// with the new loop state, and marks the escalation that caused it as applied.
    pub async fn apply_resolution(
        &self,
        lease: &Lease,
        escalation: i64,
        step: u32,
        messages: &[Message],
        state: &str,
        status: Option<(RunStatus, &str)>,
    ) -> Result<()> {
        let plan = Plan::resolution(lease, escalation, step, messages, state, status)?;
        self.run_plan_queued(Durability::PowerCut, plan).await?;
        Ok(())
    }

    /// Appends trace events outside a step commit (e.g. while pausing).
    pub async fn record_events(
        &self,
        lease: &Lease,
        step: u32,
        events: &[TraceEvent],
    ) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        self.run_plan_queued(Durability::PowerCut, Plan::events(lease, step, events)?)
            .await?;
        Ok(())
    }

    /// Queues an escalation. When it pauses the run, the run's status becomes
    /// `pause_as` in the same commit; a blocked call's start mark is cleared, since the
    /// call did not run (it waits for the decision).
    pub async fn create_escalation(
        &self,
        lease: &Lease,
        new: &NewEscalation<'_>,
        pause_as: Option<RunStatus>,
        events: &[TraceEvent],
    ) -> Result<EscalationId> {
        let plan = Plan::escalation(lease, new, pause_as, events)?;
        self.run_plan_queued(Durability::PowerCut, plan)
            .await?
            .ok_or_else(|| StoreError::Corrupt {
                run: lease.run.0.clone(),
                message: "the escalation was not queued".into(),
            })
    }
}
