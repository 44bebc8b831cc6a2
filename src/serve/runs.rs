//! The runs list, one run's page, and resuming a run from the console.

use super::html::{self, Tab, csrf_field, esc};
use super::{App, Reviewer, error_page, store_error};
use crate::machine::state::LoopState;
use crate::render::Style;
use crate::store::{RunId, RunRow, RunStatus};
use crate::timefmt::age;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use std::fmt::Write;
use std::sync::Arc;

/// Runs shown on the list page.
const LIST_LIMIT: u32 = 200;

#[derive(Debug, Default, serde::Deserialize)]
pub struct ListQuery {
    status: Option<String>,
}

/// `/runs[?status=S]`.
pub async fn list(
    State(app): State<Arc<App>>,
    r: Reviewer,
    Query(q): Query<ListQuery>,
) -> Response {
    let status = match q.status.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => match RunStatus::parse(s) {
            Some(st) => Some(st),
            None => return error_page(StatusCode::BAD_REQUEST, &format!("no run status `{s}`")),
        },
    };
    let rows = match app.store.recent_runs(status, Some(LIST_LIMIT)) {
        Ok(rows) => rows,
        Err(e) => return store_error(&e),
    };
    let mut b = String::from(
        "<h1>Runs</h1><form method=\"get\" action=\"/runs\" class=\"filter\"><label>Status <select name=\"status\"><option value=\"\">any</option>",
    );
    for st in RunStatus::ALL {
        let sel = if Some(st) == status { " selected" } else { "" };
        let _ = write!(b, "<option{sel}>{}</option>", st.as_str());
    }
    b.push_str("</select></label> <button type=\"submit\">Filter</button></form>");
    if rows.is_empty() {
        b.push_str("<p class=\"empty\">No runs.</p>");
    } else {
        b.push_str(&table(&app, &rows));
    }
    Html(html::page("Runs", Tab::Runs, Some(&r.0), &b)).into_response()
}

fn table(app: &App, rows: &[RunRow]) -> String {
    let now = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
    let mut t = String::from(
        "<table class=\"runs\"><thead><tr><th>Run</th><th>Status</th><th>Model</th><th>Steps</th>\
         <th>Tokens</th><th>Cost</th><th>Age</th><th>Task</th></tr></thead><tbody>",
    );
    for r in rows {
        let model = models(app, &r.id).first().cloned().unwrap_or_default();
        let cost = state(app, &r.id).map(|s| s.cost_usd).unwrap_or(0.0);
        let _ = write!(
            t,
            "<tr><td><a href=\"/runs/{id}\">{id}</a></td><td class=\"status\">{st}</td><td>{model}</td>\
             <td>{steps}</td><td>{tin} in / {tout} out</td><td>${cost:.4}</td><td>{age}</td><td>{task}</td></tr>",
            id = esc(r.id.as_str()),
            st = r.status.as_str(),
            model = esc(&model),
            steps = r.steps,
            tin = r.input_tokens,
            tout = r.output_tokens,
            age = esc(&age(now, r.created_at)),
            task = esc(&crate::render::text::truncate(
                r.task.lines().next().unwrap_or(""),
                80
            )),
        );
    }
    t.push_str("</tbody></table>");
    t
}

fn models(app: &App, id: &RunId) -> Vec<String> {
    app.store
        .snapshot_models(id)
        .ok()
        .flatten()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default()
}

fn state(app: &App, id: &RunId) -> Option<LoopState> {
    let (_, json) = app.store.checkpoint(id).ok()?;
    serde_json::from_str(&json).ok()
}

/// The run's `runs show` text, without colour.
pub fn text(app: &App, id: &RunId) -> String {
    (app.render)(&app.store, id, Style::PLAIN)
        .unwrap_or_else(|e| format!("cannot render the run: {e:#}"))
}

/// Whether a run with this status is done for good: nothing will change it (a
/// waiting, failed or interrupted run can still be resumed, by anyone).
pub fn is_final(status: RunStatus) -> bool {
    !status.accepts_messages()
}

/// What a run page shows besides the transcript, read once per change of the run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunView {
    pub row: RunRow,
    /// The open escalations: (id, kind, summary).
    pub waiting: Vec<(i64, String, String)>,
    /// Whether the run waits for nothing but a push (Resume applies).
    pub resumable: bool,
}

/// Reads a run's [`RunView`]: its row and its escalations.
pub fn view(app: &App, id: &RunId) -> Result<RunView, crate::store::StoreError> {
    let row = app.store.run(id)?;
    let escalations = app.store.escalations_for_run(id)?;
    let resumable = matches!(
        row.status,
        RunStatus::AwaitingApproval | RunStatus::Escalated | RunStatus::Interrupted
    ) && !escalations.iter().any(|e| e.open && e.kind.pauses());
    let waiting = escalations
        .iter()
        .filter(|e| e.open)
        .map(|e| (e.id.0, e.kind.as_str().to_string(), e.summary.clone()))
        .collect();
    Ok(RunView {
        row,
        waiting,
        resumable,
    })
}

/// What can be done to the run now, for this reviewer: what it waits for, Resume,
/// Send, Cancel, Fork. Sent again whenever the run changes, so the controls follow
/// its status without a reload.
pub fn controls(v: &RunView, who: &super::auth::Session) -> String {
    let mut b = String::new();
    for (n, kind, summary) in &v.waiting {
        let _ = write!(
            b,
            "<p class=\"waiting\">Waiting for <a href=\"/escalations/{n}\">escalation {n}</a> ({k}): {s}</p>",
            k = esc(kind),
            s = esc(summary)
        );
    }
    if v.resumable {
        let _ = write!(
            b,
            "<form method=\"post\" action=\"/runs/{id}/resume\" class=\"resume\">{}\
             <button type=\"submit\">Resume</button></form>",
            csrf_field(&who.csrf),
            id = esc(v.row.id.as_str())
        );
    }
    b.push_str(&super::operate::forms(&v.row, who));
    b
}

/// `/runs/{id}`: the run's links, its controls and its transcript, all followed live
/// whatever the status (a waiting run can be resumed by anyone, anywhere).
pub async fn page(State(app): State<Arc<App>>, r: Reviewer, Path(id): Path<String>) -> Response {
    let id = match app.store.find_run(&id) {
        Ok(id) => id,
        Err(e) => return store_error(&e),
    };
    let v = match view(&app, &id) {
        Ok(v) => v,
        Err(e) => return store_error(&e),
    };
    let mut b = String::new();
    let _ = write!(
        b,
        "<h1>Run {id}</h1><p>Status: <strong id=\"status\" class=\"status\">{st}</strong></p>{links}",
        id = esc(id.as_str()),
        st = v.row.status.as_str(),
        links = links(&app, &v.row),
    );
    // The script follows `data-live` with server-sent events until the run is final.
    let live = if is_final(v.row.status) {
        String::new()
    } else {
        format!(" data-live=\"/runs/{}/events\"", esc(id.as_str()))
    };
    let _ = write!(
        b,
        "<div id=\"run\"{live}><div id=\"controls\">{}</div>\
         <h2>Transcript</h2><pre id=\"transcript\" class=\"transcript\">{}</pre></div>",
        controls(&v, &r.0),
        esc(&text(&app, &id))
    );
    Html(html::page(&format!("Run {id}"), Tab::Runs, Some(&r.0), &b)).into_response()
}

/// Where the run comes from and what came of it: its parent (it is a sub-agent), the
/// run it was forked from, its children, its forks.
fn links(app: &App, row: &RunRow) -> String {
    let a = |id: &RunId| format!("<a href=\"/runs/{id}\">{id}</a>", id = esc(id.as_str()));
    let mut items = Vec::new();
    if let Some(p) = &row.parent {
        items.push(format!("Sub-agent of run {}", a(&p.run)));
    }
    if let Some(f) = &row.fork {
        items.push(format!("Forked from run {} at step {}", a(&f.run), f.step));
    }
    let children = app.store.children(&row.id).unwrap_or_default();
    if !children.is_empty() {
        let list: Vec<String> = children.iter().map(|c| a(&c.id)).collect();
        items.push(format!("Sub-agents: {}", list.join(", ")));
    }
    let forks = forks_of(app, &row.id);
    if !forks.is_empty() {
        let list: Vec<String> = forks
            .iter()
            .map(|(id, step)| format!("{} (at step {step})", a(id)))
            .collect();
        items.push(format!("Forks: {}", list.join(", ")));
    }
    if items.is_empty() {
        return String::new();
    }
    let lis: String = items.iter().map(|i| format!("<li>{i}</li>")).collect();
    format!("<ul class=\"links\" aria-label=\"Related runs\">{lis}</ul>")
}

/// The runs forked from `id`, with the step each was forked at.
fn forks_of(app: &App, id: &RunId) -> Vec<(RunId, u32)> {
    app.store
        .recent_runs(None, Some(FORK_SCAN))
        .unwrap_or_default()
        .into_iter()
        .filter_map(|r| r.fork.filter(|f| f.run == *id).map(|f| (r.id, f.step)))
        .collect()
}

/// How many recent runs are looked through for a run's forks.
const FORK_SCAN: u32 = 1000;

/// Why a run cannot be resumed now, or `None` when it can.
fn not_resumable(app: &App, id: &RunId) -> Option<String> {
    let row = app.store.run(id).ok()?;
    if !matches!(
        row.status,
        RunStatus::AwaitingApproval | RunStatus::Escalated | RunStatus::Interrupted
    ) {
        return Some(format!("run {id} is {}", row.status.as_str()));
    }
    let open = app.store.escalations_for_run(id).ok()?;
    open.iter()
        .find(|e| e.open && e.kind.pauses())
        .map(|e| format!("run {id} still waits for escalation {}", e.id))
}

/// The Resume button, when the run waits for nothing but a push.
pub fn resume_form(app: &App, id: &RunId, csrf: &str) -> String {
    if not_resumable(app, id).is_some() {
        return String::new();
    }
    format!(
        "<form method=\"post\" action=\"/runs/{id}/resume\" class=\"resume\">{}\
         <button type=\"submit\">Resume</button></form>",
        csrf_field(csrf),
        id = esc(id.as_str())
    )
}

#[derive(Debug, Default, serde::Deserialize)]
pub struct CsrfForm {
    csrf: Option<String>,
}

/// `POST /runs/{id}/resume`.
pub async fn resume(
    State(app): State<Arc<App>>,
    r: Reviewer,
    Path(id): Path<String>,
    axum::Form(f): axum::Form<CsrfForm>,
) -> Response {
    if let Some(res) = r.refuse_without_csrf(f.csrf.as_deref()) {
        return res;
    }
    match app.store.find_run(&id) {
        Ok(id) => continue_run(&app, &id),
        Err(e) => store_error(&e),
    }
}

/// After a decision: a run submitted for workers goes back to the queue (a worker
/// continues it); any other run continues here, in the server process.
pub fn continue_run(app: &App, id: &RunId) -> Response {
    match app.store.requeue(id) {
        Ok(true) => return Redirect::to(&format!("/runs/{id}")).into_response(),
        Ok(false) => {}
        Err(e) => return store_error(&e),
    }
    if let Some(why) = not_resumable(app, id) {
        return error_page(StatusCode::CONFLICT, &format!("Cannot resume: {why}."));
    }
    if let Err(e) = app.drivers.start(&app.db, id) {
        return error_page(
            StatusCode::CONFLICT,
            &format!("Cannot resume run {id}: {e:#}"),
        );
    }
    Redirect::to(&format!("/runs/{id}")).into_response()
}
