//! The runs list, one run's page, and resuming a run from the console.

use super::html::{self, Tab, csrf_field, esc};
use super::{App, Reviewer, error_page, store_error};
use crate::render::Style;
use crate::store::{RunId, RunRow, RunStatus};
use crate::timefmt::age;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use std::fmt::Write;
use std::sync::Arc;

/// Runs shown on one page of the list.
pub const PAGE: usize = 50;

#[derive(Debug, Default, serde::Deserialize)]
pub struct ListQuery {
    #[serde(default)]
    status: String,
    /// Words that must all appear in the task (any case).
    #[serde(default)]
    q: String,
    /// First and last day (YYYY-MM-DD, UTC) a run was created on.
    #[serde(default)]
    from: String,
    #[serde(default)]
    to: String,
    #[serde(default)]
    page: Option<usize>,
}

/// What the list shows: the runs that match all of these.
#[derive(Debug, Default)]
pub struct Filter {
    pub status: Option<RunStatus>,
    pub words: Vec<String>,
    /// Created at or after, and before (ms since the epoch).
    pub from_ms: Option<i64>,
    pub until_ms: Option<i64>,
}

const DAY_MS: i64 = 86_400_000;

impl Filter {
    fn parse(q: &ListQuery) -> Result<Filter, String> {
        let status = match q.status.trim() {
            "" => None,
            s => Some(RunStatus::parse(s).ok_or_else(|| format!("There is no run status “{s}”."))?),
        };
        let day = |s: &str, what: &str| -> Result<Option<i64>, String> {
            match s.trim() {
                "" => Ok(None),
                d => day_ms(d).map(Some).ok_or_else(|| {
                    format!("“{what}” must be a date like 2026-12-03; “{d}” is not one.")
                }),
            }
        };
        Ok(Filter {
            status,
            words: q.q.split_whitespace().map(str::to_lowercase).collect(),
            from_ms: day(&q.from, "From")?,
            until_ms: day(&q.to, "To")?.map(|d| d + DAY_MS),
        })
    }

    pub fn keeps(&self, r: &RunRow) -> bool {
        let task = r.task.to_lowercase();
        self.status.is_none_or(|s| r.status == s)
            && self.words.iter().all(|w| task.contains(w.as_str()))
            && self.from_ms.is_none_or(|f| r.created_at >= f)
            && self.until_ms.is_none_or(|u| r.created_at < u)
    }
}

/// Midnight UTC of a `YYYY-MM-DD` day, in ms since the epoch.
fn day_ms(s: &str) -> Option<i64> {
    let mut it = s.splitn(3, '-');
    let (y, m, d): (i64, i64, i64) = (
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
    );
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    // Days from the civil date (proleptic Gregorian), after H. Hinnant.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some((era * 146_097 + doe - 719_468) * DAY_MS)
}

/// The runs that match, their totals, and one page of them.
pub struct Listing<'a> {
    pub matched: usize,
    pub tokens: u64,
    pub cost: f64,
    pub page: Vec<&'a RunRow>,
    pub pages: usize,
}

pub fn select<'a>(rows: &'a [RunRow], f: &Filter, page: usize) -> Listing<'a> {
    let kept: Vec<&RunRow> = rows.iter().filter(|r| f.keeps(r)).collect();
    let pages = kept.len().div_ceil(PAGE).max(1);
    let page = page.clamp(1, pages);
    Listing {
        matched: kept.len(),
        tokens: kept.iter().map(|r| r.input_tokens + r.output_tokens).sum(),
        cost: kept.iter().map(|r| r.cost_usd).sum(),
        page: kept
            .iter()
            .skip((page - 1) * PAGE)
            .take(PAGE)
            .copied()
            .collect(),
        pages,
    }
}

/// `/runs?status=&q=&from=&to=&page=`: newest first, filtered, with totals.
pub async fn list(
    State(app): State<Arc<App>>,
    r: Reviewer,
    Query(q): Query<ListQuery>,
) -> Response {
    let filter = match Filter::parse(&q) {
        Ok(f) => f,
        Err(msg) => return error_page(StatusCode::BAD_REQUEST, &msg),
    };
    let rows = match app.store.recent_runs(filter.status, None) {
        Ok(rows) => rows,
        Err(e) => return store_error(&e),
    };
    let page = q.page.unwrap_or(1);
    let l = select(&rows, &filter, page);
    let mut b = String::from("<h1>Runs</h1>");
    b.push_str(&filter_form(&q, filter.status));
    let _ = write!(
        b,
        "<p class=\"summary\" role=\"status\">{n} runs · {t} tokens · ${c:.4}</p>",
        n = l.matched,
        t = l.tokens,
        c = l.cost
    );
    if l.page.is_empty() {
        b.push_str("<p class=\"empty\">No runs match.</p>");
    } else {
        b.push_str(&table(&app, &l.page));
        b.push_str(&pager(&q, page.clamp(1, l.pages), l.pages));
    }
    Html(html::page("Runs", Tab::Runs, Some(&r.0), &b)).into_response()
}

fn filter_form(q: &ListQuery, status: Option<RunStatus>) -> String {
    let mut b = String::from(
        "<form method=\"get\" action=\"/runs\" class=\"filter\" role=\"search\">\
         <label>Status <select name=\"status\"><option value=\"\">any</option>",
    );
    for st in RunStatus::ALL {
        let sel = if Some(st) == status { " selected" } else { "" };
        let _ = write!(b, "<option{sel}>{}</option>", st.as_str());
    }
    let _ = write!(
        b,
        "</select></label> <label>Task contains <input name=\"q\" type=\"search\" value=\"{q}\"></label> \
         <label>From <input name=\"from\" type=\"date\" value=\"{from}\"></label> \
         <label>To <input name=\"to\" type=\"date\" value=\"{to}\"></label> \
         <button type=\"submit\">Show</button></form>",
        q = esc(&q.q),
        from = esc(&q.from),
        to = esc(&q.to),
    );
    b
}

fn pager(q: &ListQuery, page: usize, pages: usize) -> String {
    if pages <= 1 {
        return String::new();
    }
    let enc = |s: &str| {
        percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
    };
    let href = |p: usize| {
        format!(
            "/runs?status={}&amp;q={}&amp;from={}&amp;to={}&amp;page={p}",
            enc(&q.status),
            enc(&q.q),
            enc(&q.from),
            enc(&q.to)
        )
    };
    let mut b = String::from("<nav class=\"pager\" aria-label=\"Pages\">");
    if page > 1 {
        let _ = write!(b, "<a href=\"{}\" rel=\"prev\">Newer</a> ", href(page - 1));
    }
    let _ = write!(b, "Page {page} of {pages}");
    if page < pages {
        let _ = write!(b, " <a href=\"{}\" rel=\"next\">Older</a>", href(page + 1));
    }
    b.push_str("</nav>");
    b
}

fn table(app: &App, rows: &[&RunRow]) -> String {
    let now = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
    let mut t = String::from(
        "<table class=\"runs\"><thead><tr><th>Run</th><th>Status</th><th>Model</th><th>Steps</th>\
         <th class=\"num\">Tokens</th><th>Cost</th><th>Age</th><th>Task</th></tr></thead><tbody>",
    );
    for r in rows {
        let model = models(app, &r.id).first().cloned().unwrap_or_default();
        let mut marks = String::new();
        if r.parent.is_some() {
            marks.push_str(" <span class=\"tag\">sub-agent</span>");
        }
        if r.fork.is_some() {
            marks.push_str(" <span class=\"tag\">fork</span>");
        }
        let _ = write!(
            t,
            "<tr><td><a href=\"/runs/{id}\">{id}</a>{marks}</td><td class=\"status\">{st}</td><td>{model}</td>\
             <td>{steps}</td><td class=\"num\">{tin} in / {tout} out</td><td>${cost:.4}</td><td>{age}</td><td>{task}</td></tr>",
            id = esc(r.id.as_str()),
            st = r.status.as_str(),
            model = esc(&model),
            steps = r.steps,
            tin = r.input_tokens,
            tout = r.output_tokens,
            cost = r.cost_usd,
            age = esc(&age(now, r.created_at)),
            task = esc(&crate::text::truncate(
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(n: usize) -> RunRow {
        let status = if n.is_multiple_of(3) {
            RunStatus::Completed
        } else {
            RunStatus::Failed
        };
        RunRow {
            id: RunId(format!("r{n:04}")),
            task: if n % 10 == 7 {
                format!("Refund order {n} for Dana")
            } else {
                format!("Summarise ticket {n}")
            },
            task_path: String::new(),
            status,
            max_steps: 10,
            max_tokens: 0,
            steps: 1,
            input_tokens: 10,
            output_tokens: 2,
            answer: None,
            error: None,
            lease_pid: None,
            // One run an hour from 2026-12-01T00:00Z.
            created_at: day_ms("2026-12-01").unwrap() + n as i64 * 3_600_000,
            updated_at: 0,
            worker: None,
            heartbeat: None,
            cost_usd: 0.01,
            parent: None,
            fork: None,
        }
    }

    fn query(status: &str, q: &str, from: &str, to: &str) -> ListQuery {
        ListQuery {
            status: status.into(),
            q: q.into(),
            from: from.into(),
            to: to.into(),
            page: None,
        }
    }

    #[test]
    fn filters_and_search_over_a_thousand_runs_return_exactly_the_matching_ones_with_totals() {
        let rows: Vec<RunRow> = (0..1000).map(row).collect();
        let f = Filter::parse(&query(
            "completed",
            "REFUND dana",
            "2026-12-02",
            "2026-12-03",
        ))
        .unwrap();
        let l = select(&rows, &f, 1);
        // Completed (n % 3 == 0), a refund (n % 10 == 7), created on Dec 2 or 3 (n in 24..72).
        let want: Vec<String> = (24..72)
            .filter(|n: &usize| n.is_multiple_of(3) && n % 10 == 7)
            .map(|n| format!("r{n:04}"))
            .collect();
        let got: Vec<String> = l.page.iter().map(|r| r.id.0.clone()).collect();
        assert_eq!(got, want);
        assert_eq!(l.matched, want.len());
        assert_eq!(l.tokens, 12 * want.len() as u64);
        assert!((l.cost - 0.01 * want.len() as f64).abs() < 1e-9);

        let all = select(&rows, &Filter::default(), 3);
        assert_eq!((all.matched, all.pages), (1000, 20));
        assert_eq!(all.page.len(), PAGE);
        assert_eq!(all.page[0].id.0, "r0100", "page 3 starts at the 101st");
        assert_eq!(
            select(&rows, &Filter::default(), 99).page[0].id.0,
            "r0950",
            "past the end: the last page"
        );
    }

    #[test]
    fn a_bad_status_or_date_is_refused_in_the_page_s_words() {
        assert!(
            Filter::parse(&query("nope", "", "", ""))
                .unwrap_err()
                .contains("no run status")
        );
        let e = Filter::parse(&query("", "", "2026-13-01", "")).unwrap_err();
        assert!(e.contains("“From” must be a date"), "{e}");
        assert_eq!(day_ms("1970-01-02"), Some(DAY_MS));
        assert_eq!(day_ms("2000-03-01"), Some(951_868_800_000));
    }
}
