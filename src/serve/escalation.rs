//! The queue page, one escalation's page, and the decision it takes.

use super::auth::Session;
use super::html::{self, Tab, csrf_field, esc, pre};
use super::operate::name_field;
use super::{App, Reviewer, error_page, store_error};
use crate::decide::{self, DecideError};
use crate::render::transcript::describe_event;
use crate::store::{EscalationId, EscalationRow, Facts, Resolution};
use crate::timefmt::{age, rfc3339};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use std::fmt::Write;
use std::sync::Arc;

/// Trace events shown under a handover.
const RECENT_TRACE: usize = 10;
/// Resolved escalations listed under the open ones.
const RECENTLY_RESOLVED: usize = 20;

fn now() -> i64 {
    crate::clock::Clock::now_ms(&crate::clock::SystemClock)
}

/// `/`: open escalations first (oldest waiting first), then the last decisions;
/// followed live, so a new or decided escalation shows without a reload.
pub async fn queue(State(app): State<Arc<App>>, r: Reviewer) -> Response {
    let tables = match queue_body(&app) {
        Ok(t) => t,
        Err(e) => return store_error(&e),
    };
    let body = format!(
        "<h1>Queue</h1><div id=\"queue\" data-queue=\"/events/queue\" aria-live=\"polite\">{tables}</div>"
    );
    Html(html::page("Queue", Tab::Queue, Some(&r.0), &body)).into_response()
}

/// The queue's tables (the same for every reviewer: no forms).
pub fn queue_body(app: &App) -> Result<String, crate::store::StoreError> {
    let rows = app.store.list_escalations(true)?;
    let (mut open, done): (Vec<_>, Vec<_>) = rows.into_iter().partition(|e| e.open);
    open.sort_by_key(|e| (e.created_at, e.id.0));
    let now = now();
    let mut body = String::new();
    if let Some(oldest) = open.first() {
        let _ = write!(
            body,
            "<p class=\"summary\">{n} waiting for a decision; the oldest has waited {age}.</p>{t}",
            n = open.len(),
            age = esc(&age(now, oldest.created_at)),
            t = table(&open, now)
        );
    } else {
        body.push_str("<p class=\"empty\">Nothing waits for a person.</p>");
    }
    if !done.is_empty() {
        let recent: Vec<_> = done.into_iter().take(RECENTLY_RESOLVED).collect();
        let _ = write!(body, "<h2>Recently decided</h2>{}", table(&recent, now));
    }
    Ok(body)
}

fn table(rows: &[EscalationRow], now: i64) -> String {
    let mut t = String::from(
        "<table class=\"queue\"><thead><tr><th>#</th><th>Kind</th><th>Run</th><th>Age</th>\
         <th>Summary</th></tr></thead><tbody>",
    );
    for e in rows {
        let _ = write!(
            t,
            "<tr><td><a href=\"/escalations/{id}\">{id}</a></td><td>{kind}</td>\
             <td><a href=\"/runs/{run}\">{run}</a></td><td>{age}</td><td>{summary}</td></tr>",
            id = e.id,
            kind = esc(e.kind.as_str()),
            run = esc(e.run_id.as_str()),
            age = esc(&age(now, e.created_at)),
            summary = esc(&e.summary),
        );
    }
    t.push_str("</tbody></table>");
    t
}

/// What the decision form was filled with, to show it again beside an error.
#[derive(Debug, Default, serde::Deserialize)]
pub struct DecideForm {
    csrf: Option<String>,
    digest: Option<String>,
    #[serde(default)]
    by: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    text: String,
    args: Option<String>,
}

/// `/escalations/{id}`.
pub async fn page(State(app): State<Arc<App>>, r: Reviewer, Path(id): Path<i64>) -> Response {
    match app.store.escalation(EscalationId(id)) {
        Ok(e) => render(&app, &e, &r, None, &DecideForm::default(), StatusCode::OK),
        Err(e) => store_error(&e),
    }
}

fn render(
    app: &App,
    e: &EscalationRow,
    r: &Reviewer,
    error: Option<&str>,
    form: &DecideForm,
    status: StatusCode,
) -> Response {
    let mut b = String::new();
    let _ = write!(
        b,
        "<h1>Escalation {id} <span class=\"kind\">{kind}</span> <span class=\"state\">{state}</span></h1>\
         <p>Run <a href=\"/runs/{run}\">{run}</a>, step {step}, raised {at}.</p>",
        id = e.id,
        kind = esc(e.kind.as_str()),
        state = if e.open { "open" } else { "decided" },
        run = esc(e.run_id.as_str()),
        step = e.step,
        at = esc(&rfc3339(e.created_at)),
    );
    b.push_str(&facts(e));
    b.push_str(&handover_html(e));
    if let (Some(res), Some(by), Some(at)) = (&e.resolution, &e.resolved_by, e.resolved_at) {
        let _ = write!(
            b,
            "<h2>Decision</h2><p class=\"decision\">{} by {} at {}</p>",
            esc(&res.describe()),
            esc(by),
            esc(&rfc3339(at))
        );
        b.push_str(&super::runs::resume_form(app, &e.run_id, &r.0.csrf));
    } else {
        b.push_str(&decision_form(e, &r.0, error, form));
    }
    b.push_str(&trace(app, e));
    let title = format!("Escalation {}", e.id);
    (status, Html(html::page(&title, Tab::Queue, Some(&r.0), &b))).into_response()
}

fn facts(e: &EscalationRow) -> String {
    let mut b = String::from("<dl class=\"facts\">");
    if let Facts::AllToolsFailed(f) = &e.detail.facts {
        let tools: Vec<String> = f
            .tools
            .iter()
            .map(|t| format!("{} ({} failures)", t.tool, t.failures))
            .collect();
        let _ = write!(b, "<dt>Tools</dt><dd>{}</dd>", esc(&tools.join(", ")));
    } else {
        let _ = write!(
            b,
            "<dt>Tool</dt><dd><code>{}</code></dd>",
            esc(e.detail.facts.tool())
        );
    }
    if let Facts::Question(q) = &e.detail.facts {
        let _ = write!(
            b,
            "<dt>Question</dt><dd class=\"question\">{}</dd>",
            pre(&q.question)
        );
    }
    if let Some(args) = e.detail.facts.args() {
        let text = serde_json::to_string_pretty(args).unwrap_or_else(|_| args.to_string());
        let _ = write!(
            b,
            "<dt>Arguments</dt><dd class=\"args\">{}</dd>",
            pre(&text)
        );
    }
    let _ = write!(b, "<dt>Summary</dt><dd>{}</dd></dl>", esc(&e.summary));
    b
}

fn handover_html(e: &EscalationRow) -> String {
    let h = &e.detail.handover;
    let mut b = String::from("<section class=\"handover\"><h2>Handover</h2>");
    let _ = write!(b, "<h3>The request</h3>{}", pre(&h.request));
    b.push_str("<h3>What was checked</h3>");
    if h.checked.is_empty() {
        b.push_str("<p>Nothing yet.</p>");
    } else {
        b.push_str("<ul>");
        for c in &h.checked {
            let _ = write!(b, "<li>{}</li>", pre(c));
        }
        b.push_str("</ul>");
    }
    let _ = write!(
        b,
        "<h3>The problem</h3>{}<h3>Suggested next step</h3>{}</section>",
        pre(&h.problem),
        pre(&page_words(&h.next_step))
    );
    b
}

fn trace(app: &App, e: &EscalationRow) -> String {
    let Ok(events) = app.store.events(&e.run_id) else {
        return String::new();
    };
    let recent = &events[events.len().saturating_sub(RECENT_TRACE)..];
    if recent.is_empty() {
        return String::new();
    }
    let mut b = String::from("<h2>Recent trace</h2><ol class=\"trace\">");
    for ev in recent {
        let _ = write!(
            b,
            "<li>step {}: {}</li>",
            ev.step,
            esc(&describe_event(&ev.event))
        );
    }
    b.push_str("</ol>");
    b
}

/// The one decision form: reviewer name, the fields each decision needs, and a button
/// per decision that applies to this kind. It carries the binding it was drawn for.
fn decision_form(e: &EscalationRow, who: &Session, error: Option<&str>, f: &DecideForm) -> String {
    let kind = e.kind;
    let can = |r: Resolution| decide::applies(kind, &r);
    let mut b = String::from("<h2>Decide</h2>");
    if let Some(msg) = error {
        let _ = write!(
            b,
            "<p class=\"error\" role=\"alert\">{}</p>",
            esc(&page_words(msg))
        );
    }
    let _ = write!(
        b,
        "<form method=\"post\" action=\"/escalations/{id}/decide\" class=\"decide\">{csrf}\
         <input type=\"hidden\" name=\"digest\" value=\"{digest}\"><p>{name}</p>",
        id = e.id,
        csrf = csrf_field(&who.csrf),
        digest = esc(&decide::binding(e)),
        name = name_field(who, "decide", &f.by),
    );
    if can(Resolution::Modify {
        args: serde_json::Value::Null,
    }) {
        let current = f.args.clone().unwrap_or_else(|| {
            e.detail
                .facts
                .args()
                .map(|a| serde_json::to_string_pretty(a).unwrap_or_default())
                .unwrap_or_default()
        });
        let _ = write!(
            b,
            "<p><label>Arguments (JSON, for Modify)<br><textarea name=\"args\" rows=\"8\" cols=\"70\">{}</textarea></label></p>",
            esc(&current)
        );
    }
    if can(Resolution::Reply {
        text: String::new(),
    }) {
        let _ = write!(
            b,
            "<p><label>Reply<br><textarea name=\"text\" rows=\"3\" cols=\"70\">{}</textarea></label></p>",
            esc(&f.text)
        );
    }
    let _ = write!(
        b,
        "<p><label>Reason (for Deny)<br><input name=\"reason\" size=\"70\" value=\"{}\"></label></p><p class=\"buttons\">",
        esc(&f.reason)
    );
    let mut button = |action: &str, label: &str| {
        let _ = write!(
            b,
            "<button type=\"submit\" name=\"action\" value=\"{action}\">{label}</button> "
        );
    };
    if can(Resolution::Approve) {
        button("approve", "Approve");
        if kind.pauses() {
            button("approve_resume", "Approve and resume");
        }
    }
    if can(Resolution::Modify {
        args: serde_json::Value::Null,
    }) {
        button("modify", "Modify");
    }
    if can(Resolution::Reply {
        text: String::new(),
    }) {
        button("reply", "Reply");
    }
    if can(Resolution::Deny {
        reason: String::new(),
    }) {
        button("deny", "Deny");
    }
    b.push_str("</p></form>");
    b
}

/// `POST /escalations/{id}/decide`.
pub async fn decide(
    State(app): State<Arc<App>>,
    r: Reviewer,
    Path(id): Path<i64>,
    axum::Form(f): axum::Form<DecideForm>,
) -> Response {
    if let Some(res) = r.refuse_without_csrf(f.csrf.as_deref()) {
        return res;
    }
    let e = match app.store.escalation(EscalationId(id)) {
        Ok(e) => e,
        Err(e) => return store_error(&e),
    };
    let again = |msg: &str| {
        render(
            &app,
            &e,
            &r,
            Some(msg),
            &f,
            StatusCode::UNPROCESSABLE_ENTITY,
        )
    };
    let Some(digest) = f.digest.as_deref() else {
        return again("The form carries no call digest; reload the page.");
    };
    let Some(by) = r.acting_as(&app, &f.by) else {
        return again("Your name is needed: it is recorded with the decision.");
    };
    let resolution = match resolution(&f) {
        Ok(res) => res,
        Err(msg) => return again(&msg),
    };
    match decide::decide(&app.store, e.id, &resolution, &by, Some(digest)) {
        Ok(_) => {}
        Err(DecideError::Store(err)) if !err.is_bad_input() => return store_error(&err),
        Err(DecideError::Changed(_)) => {
            return error_page(
                StatusCode::CONFLICT,
                &format!(
                    "Escalation {id} changed since the page was shown (its call digest no longer matches); look at it again before deciding."
                ),
            );
        }
        Err(err) => return again(&in_page(&err)),
    }
    // A queue run goes back to the queue, as after `escalations resolve`.
    let _ = app.store.requeue(&e.run_id);
    if f.action == "approve_resume" {
        return super::runs::continue_run(&app, &e.run_id);
    }
    Redirect::to(&format!("/escalations/{id}")).into_response()
}

fn resolution(f: &DecideForm) -> Result<Resolution, String> {
    Ok(match f.action.as_str() {
        "approve" | "approve_resume" => Resolution::Approve,
        "deny" if f.reason.trim().is_empty() => {
            return Err("Deny needs a reason (the model is told it).".into());
        }
        "deny" => Resolution::Deny {
            reason: f.reason.trim().to_string(),
        },
        "reply" if f.text.trim().is_empty() => return Err("Reply needs a text.".into()),
        "reply" => Resolution::Reply {
            text: f.text.trim().to_string(),
        },
        "modify" => Resolution::Modify {
            args: decide::parse_modified(f.args.as_deref().unwrap_or(""))
                .map_err(|e| in_page(&e))?,
        },
        other => return Err(format!("Unknown decision `{other}`.")),
    })
}

/// A refused decision in the page's words: the buttons and fields, not the command
/// line's flags.
fn in_page(e: &DecideError) -> String {
    match e {
        DecideError::NotAllowed { kind, .. } => {
            format!(
                "That decision does not apply to a {kind} escalation; use one of the buttons below."
            )
        }
        DecideError::ModifyFallback(_, tool) => format!(
            "Modify changes a call the model made; {tool} was reached through a fallback, so Approve or Deny it."
        ),
        DecideError::BadArgs(why) => format!("Arguments: {why}."),
        DecideError::NoReviewer => "Your name is needed: it is recorded with the decision.".into(),
        other => page_words(&other.to_string()),
    }
}

/// Text written for the command line (a stored handover's next step, an error), with
/// each decision flag replaced by the button that takes that decision here.
pub fn page_words(text: &str) -> String {
    [
        ("--modify JSON", "Modify"),
        ("--deny REASON", "Deny (with a reason)"),
        ("--reply TEXT", "Reply"),
        ("--approve", "Approve"),
        ("--modify", "Modify"),
        ("--deny", "Deny"),
        ("--reply", "Reply"),
        ("--resume", "Approve and resume"),
    ]
    .iter()
    .fold(text.to_string(), |t, (flag, button)| {
        t.replace(flag, &format!("“{button}”"))
    })
}
