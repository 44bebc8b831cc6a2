//! The console's eval pages (docs/testing-changes.md): `/evals` lists the stored evals,
//! `/evals/{name}` shows the pass rate of each task × model with its 95% interval and
//! a link to every run. Read-only; every stored name and text is escaped.

use super::html::{self, Tab, esc};
use super::{App, Reviewer, error_page, store_error};
use crate::evals::eval::{Plan, shown_model};
use crate::evals::report;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use std::fmt::Write;
use std::sync::Arc;

/// `/evals`.
pub async fn list(State(app): State<Arc<App>>, r: Reviewer) -> Response {
    let evals = match app.store.evals() {
        Ok(e) => e,
        Err(e) => return store_error(&e),
    };
    let mut b = String::from("<h1>Evals</h1>");
    if evals.is_empty() {
        b.push_str("<p class=\"empty\">No evals yet: <code>agentrun eval SUITE.toml</code>.</p>");
    } else {
        b.push_str(
            "<table class=\"runs\"><thead><tr><th>Eval</th><th>Suite</th><th>Started</th>\
             <th>State</th></tr></thead><tbody>",
        );
        for e in &evals {
            let state = if e.finished_at.is_some() {
                "finished"
            } else {
                "unfinished"
            };
            let _ = write!(
                b,
                "<tr><td><a href=\"/evals/{}\">{}</a></td><td>{}</td><td>{}</td><td>{state}</td></tr>",
                esc(&percent(&e.name)),
                esc(&e.name),
                esc(&e.suite),
                esc(&crate::timefmt::rfc3339(e.created_at)),
            );
        }
        b.push_str("</tbody></table>");
    }
    Html(html::page("Evals", Tab::None, Some(&r.0), &b)).into_response()
}

/// `/evals/{name}`.
pub async fn page(State(app): State<Arc<App>>, r: Reviewer, Path(name): Path<String>) -> Response {
    let row = match app.store.eval(&name) {
        Ok(Some(r)) => r,
        Ok(None) => return error_page(StatusCode::NOT_FOUND, &format!("no eval `{name}`")),
        Err(e) => return store_error(&e),
    };
    let Ok(plan) = serde_json::from_str::<Plan>(&row.plan) else {
        return error_page(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the eval's stored plan is damaged",
        );
    };
    let slots = match app.store.eval_slots(&name) {
        Ok(s) => s,
        Err(e) => return store_error(&e),
    };
    let mut b = format!(
        "<h1>Eval {}</h1><p>{} · {} repeat(s) per task and model</p>",
        esc(&name),
        esc(&row.suite),
        plan.repeat
    );
    b.push_str(
        "<table class=\"runs\"><thead><tr><th>Task</th><th>Model</th><th>Pass</th>\
         <th>95% CI</th><th>Steps</th><th>Tokens</th><th>Runs</th></tr></thead><tbody>",
    );
    for c in report::cells(&plan, &slots) {
        let runs: Vec<String> = c
            .run_ids
            .iter()
            .map(|id| format!("<a href=\"/runs/{0}\">{0}</a>", esc(id)))
            .collect();
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}/{} ({:.0}%)</td><td>{:.0}%–{:.0}%</td>\
             <td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&c.task),
            esc(shown_model(&c.model)),
            c.passed,
            c.runs,
            c.pass_rate * 100.0,
            c.ci.0 * 100.0,
            c.ci.1 * 100.0,
            c.median_steps,
            c.median_tokens,
            runs.join(" "),
        );
    }
    b.push_str("</tbody></table>");
    Html(html::page(
        &format!("Eval {name}"),
        Tab::None,
        Some(&r.0),
        &b,
    ))
    .into_response()
}

/// A name as one path segment.
fn percent(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}
