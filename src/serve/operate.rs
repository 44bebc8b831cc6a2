//! The operator's controls on a run's page (issues 21, 24): Cancel, Send a message and
//! Fork, each a plain form (no script needed) with the session's CSRF token, and each
//! done by the same library function as the CLI's `runs cancel`, `runs send` and
//! `runs fork` ([`crate::runner::cancel`], [`crate::runner::operate`]). The reviewer's
//! name is recorded as `by`. A fork is started at once, driven in this process
//! through the one lifecycle, like a run resumed here.

use super::auth::Session;
use super::html::{csrf_field, esc};
use super::{App, Reviewer, error_page, store_error};
use crate::records::RunRow;
use crate::runner::cancel::{self, CancelBy, Cancelled};
use crate::runner::operate::{self, ForkOrder, OperateError};
use crate::store::{RunId, StoreError};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use std::fmt::Write;
use std::sync::Arc;
use std::time::Duration;

/// How long a cancel waits for a live holder to stop the run before the page returns
/// (the cancel stands either way; the run page shows where it is).
const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// The reviewer's name in a form: asked while the session has none (the first
/// action; `given` refills it when the form comes back with an error), said after —
/// never asked twice in one session.
pub fn name_field(who: &Session, prefix: &str, given: &str) -> String {
    match &who.name {
        Some(n) => format!("<span class=\"acting\">As {}.</span>", esc(n)),
        None => format!(
            "<label for=\"{prefix}-by\">Your name</label> <input id=\"{prefix}-by\" name=\"by\" value=\"{}\" required autocomplete=\"name\"> \
             <span class=\"hint\">(asked once; recorded with what you do)</span>",
            esc(given.trim())
        ),
    }
}

/// The forms that apply to `row`: Cancel and Send for a run that is not finished,
/// Fork for any run that has a committed step.
pub fn forms(row: &RunRow, who: &Session) -> String {
    let id = esc(row.id.as_str());
    let csrf = csrf_field(&who.csrf);
    let mut b = String::new();
    if row.status.accepts_messages() {
        let _ = write!(
            b,
            "<section class=\"operate\"><h2>Send a message</h2>\
             <p>The run reads it once, at its next step (a waiting run when it is resumed).</p>\
             <form method=\"post\" action=\"/runs/{id}/send\" class=\"send\">{csrf}\
             <p>{name}</p><p><label>Message<br><textarea name=\"text\" rows=\"3\" cols=\"70\" required></textarea></label></p>\
             <p><button type=\"submit\">Send</button></p></form></section>",
            name = name_field(who, "send", ""),
        );
        let _ = write!(
            b,
            "<section class=\"operate\"><h2>Cancel</h2>\
             <p>Stops the run for good (a running run within a second); it can be forked afterwards.</p>\
             <form method=\"post\" action=\"/runs/{id}/cancel\" class=\"cancel\">{csrf}\
             <p>{name}</p><p><label>Reason (optional) <input name=\"reason\" size=\"40\"></label></p>\
             <p><button type=\"submit\">Cancel the run</button></p></form></section>",
            name = name_field(who, "cancel", ""),
        );
    }
    if row.steps > 0 {
        let _ = write!(
            b,
            "<section class=\"operate\"><h2>Fork</h2>\
             <p>A new run with this run's history up to the end of a step (its effects are not repeated), continued here at once.</p>\
             <p>A call that was running when this run stopped may have taken effect: forking at the last step (the default) never runs it again on its own — the fork first asks a person what happened (an <code>outcome_unknown</code> escalation), and if they say to run it, it runs under its original call id. Forking at an earlier step starts from there with new calls.</p>\
             <form method=\"post\" action=\"/runs/{id}/fork\" class=\"fork\">{csrf}\
             <p><label>At step <input name=\"at_step\" type=\"number\" min=\"0\" max=\"{last}\" placeholder=\"{last}\"></label> \
             <label>Model <input name=\"model\" size=\"30\" placeholder=\"the run's own\"></label></p>\
             <p><button type=\"submit\">Fork</button></p></form></section>",
            last = row.steps
        );
    }
    b
}

#[derive(Debug, Default, serde::Deserialize)]
pub struct CancelForm {
    csrf: Option<String>,
    #[serde(default)]
    by: String,
    #[serde(default)]
    reason: String,
}

/// `POST /runs/{id}/cancel`: cancels the run, waiting a little for a live holder.
pub async fn cancel(
    State(app): State<Arc<App>>,
    r: Reviewer,
    Path(id): Path<String>,
    axum::Form(f): axum::Form<CancelForm>,
) -> Response {
    if let Some(res) = r.refuse_without_csrf(f.csrf.as_deref()) {
        return res;
    }
    let Some(by) = r.acting_as(&app, &f.by) else {
        return error_page(StatusCode::UNPROCESSABLE_ENTITY, "Cancel needs your name.");
    };
    let id = match app.store.find_run(&id) {
        Ok(id) => id,
        Err(e) => return store_error(&e),
    };
    let store = app.store.clone();
    let run = id.clone();
    let reason = Some(f.reason.trim().to_string()).filter(|r| !r.is_empty());
    // The wait polls the store with blocking sleeps: off the server's thread.
    let done = tokio::task::spawn_blocking(move || {
        let who = CancelBy {
            by: &by,
            reason: reason.as_deref(),
        };
        cancel::cancel(&store, &run, &who, CANCEL_WAIT)
    })
    .await;
    match done {
        Ok(Ok(Cancelled::Finished(status))) => error_page(
            StatusCode::CONFLICT,
            &format!("Run {id} is {status}: there is nothing to cancel."),
        ),
        Ok(Ok(_)) => to_run(&id),
        Ok(Err(e)) => store_error(&e),
        Err(e) => error_page(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

#[derive(Debug, Default, serde::Deserialize)]
pub struct SendForm {
    csrf: Option<String>,
    #[serde(default)]
    by: String,
    #[serde(default)]
    text: String,
}

/// `POST /runs/{id}/send`: stores the message for the run's next step boundary.
pub async fn send(
    State(app): State<Arc<App>>,
    r: Reviewer,
    Path(id): Path<String>,
    axum::Form(f): axum::Form<SendForm>,
) -> Response {
    if let Some(res) = r.refuse_without_csrf(f.csrf.as_deref()) {
        return res;
    }
    let Some(by) = r.acting_as(&app, &f.by) else {
        return error_page(StatusCode::UNPROCESSABLE_ENTITY, "Send needs your name.");
    };
    let id = match app.store.find_run(&id) {
        Ok(id) => id,
        Err(e) => return store_error(&e),
    };
    match operate::send(&app.store, &id, &f.text, &by) {
        Ok(_) => to_run(&id),
        Err(e) => refused(&e),
    }
}

#[derive(Debug, Default, serde::Deserialize)]
pub struct ForkForm {
    csrf: Option<String>,
    #[serde(default)]
    at_step: String,
    #[serde(default)]
    model: String,
}

/// `POST /runs/{id}/fork`: creates the fork and drives it here; the page of the new
/// run follows it.
pub async fn fork(
    State(app): State<Arc<App>>,
    r: Reviewer,
    Path(id): Path<String>,
    axum::Form(f): axum::Form<ForkForm>,
) -> Response {
    if let Some(res) = r.refuse_without_csrf(f.csrf.as_deref()) {
        return res;
    }
    let at_step = match f.at_step.trim() {
        "" => None,
        n => match n.parse::<u32>() {
            Ok(n) => Some(n),
            Err(_) => {
                return error_page(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    &format!("“At step” must be a step number; `{n}` is not one."),
                );
            }
        },
    };
    let source = match app.store.find_run(&id) {
        Ok(id) => id,
        Err(e) => return store_error(&e),
    };
    let order = ForkOrder {
        at_step,
        model: Some(f.model.trim()).filter(|m| !m.is_empty()),
        ..ForkOrder::default()
    };
    let forked = match operate::fork(&app.store, &source, &order) {
        Ok(forked) => forked,
        Err(e) => return refused(&e),
    };
    if let Err(e) = app.drivers.start(&app.db, &forked.id) {
        return error_page(
            StatusCode::CONFLICT,
            &format!(
                "Run {} was forked but could not be started: {e:#}",
                forked.id
            ),
        );
    }
    to_run(&forked.id)
}

fn to_run(id: &RunId) -> Response {
    Redirect::to(&format!("/runs/{id}")).into_response()
}

/// A refused fork or message: what the person asked cannot be done (422, or 404 for
/// a run that is gone), or the system failed (500).
fn refused(e: &OperateError) -> Response {
    match e {
        OperateError::Store(s @ StoreError::RunNotFound(_)) => store_error(s),
        e if e.is_bad_input() => error_page(StatusCode::UNPROCESSABLE_ENTITY, &e.to_string()),
        e => error_page(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}
