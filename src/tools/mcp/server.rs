//! A run's MCP server connections, on a thread of their own.
//!
//! Why a thread: `start` discovers tools before the run's runtime exists, and the run
//! must keep using the servers discovery started ("start once per run, not per call").
//! A connection belongs to the runtime that made it, so the pool owns one: a small
//! current-thread runtime on a dedicated thread, reached through channels that work from
//! any runtime or from blocking code.
//!
//! Lifecycle. A server is started on first use (discovery at `start`, or the first call
//! after a resume), its tools listed, and kept. When it dies — between calls or during
//! one — the next attempt starts it again: the first restart at once, later ones after
//! a backoff (500ms doubling, at most 30s) that resets after a successful call. An
//! attempt that comes too early fails `unavailable` with the remaining wait as its
//! `retry_after`, so the recovery chain waits on the run's clock, not here. Stdio
//! servers run under a supervisor of their own (`tools::supervise`), told to end the
//! server when it is restarted and when the pool is dropped (the run stopped): `npx`
//! and whatever it started go with it, `setsid` escapees and daemons included, and the
//! same happens when agentrun dies, even killed with -9.

use super::DiscoveredTool;
use crate::config::types::{McpServer, McpTransport};
use crate::redact::Secrets;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{Peer, RoleClient, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio::sync::{Mutex, mpsc, oneshot};

/// Bound on starting a server and listing its tools (`npx` may fetch and compile).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// The last bytes of a stdio server's stderr, kept for error messages.
const STDERR_TAIL: usize = 2048;
/// How long a stopped server's supervisor may take to end everything and exit.
const STOP_WITHIN: Duration = Duration::from_secs(2);
/// How long a server that failed to start may take to finish writing its stderr.
const STDERR_GRACE: Duration = Duration::from_millis(500);

/// One call, as the pool runs it.
pub struct CallRequest {
    pub server: String,
    /// The server's name for the tool.
    pub tool: String,
    pub args: Value,
    /// Sent as the request's `_meta` (the idempotency key).
    pub meta: Value,
    pub timeout: Duration,
}

/// How a call ended, before classification (`result.rs`).
#[derive(Debug)]
pub enum CallEnded {
    /// The server answered the call; `CallToolResult` as JSON. `restarted`: the server
    /// had stopped and was started again for this attempt (the how-many-th start).
    Answered {
        result: Value,
        restarted: Option<u32>,
    },
    /// A JSON-RPC error response.
    Rpc {
        code: i32,
        message: String,
    },
    /// Nothing was sent: the server could not be started or reached.
    Unreachable {
        message: String,
        retry_after: Option<Duration>,
    },
    /// The server went away after the request was sent.
    Lost {
        message: String,
    },
    TimedOut,
    /// The server's current tool list lacks the tool.
    NotOffered {
        offered: Vec<String>,
    },
}

enum Request {
    List {
        server: String,
        reply: std::sync::mpsc::Sender<Result<Vec<DiscoveredTool>, String>>,
    },
    Call {
        call: CallRequest,
        reply: oneshot::Sender<CallEnded>,
    },
}

/// Supervisors (each its process group's leader) of running stdio servers, shared with
/// `Drop` so stopping never waits on the pool thread to signal them.
type Groups = Arc<StdMutex<BTreeMap<String, i32>>>;

pub struct Pool {
    servers: BTreeMap<String, McpServer>,
    tx: Option<mpsc::UnboundedSender<Request>>,
    thread: Option<std::thread::JoinHandle<()>>,
    groups: Groups,
}

impl Pool {
    /// Starts the pool's thread; servers start on first use.
    pub fn start(servers: BTreeMap<String, McpServer>) -> Pool {
        let (tx, rx) = mpsc::unbounded_channel();
        let groups: Groups = Arc::default();
        let shared = groups.clone();
        let defs = servers.clone();
        let thread = std::thread::Builder::new()
            .name("agentrun-mcp".into())
            .spawn(move || serve(defs, rx, shared))
            .ok();
        Pool {
            servers,
            tx: Some(tx),
            thread,
            groups,
        }
    }

    /// Starts `server` if needed and returns its tools (blocking).
    pub fn list_blocking(
        &self,
        server: &str,
        timeout: Duration,
    ) -> Result<Vec<DiscoveredTool>, String> {
        let (reply, rx) = std::sync::mpsc::channel();
        let request = Request::List {
            server: server.to_string(),
            reply,
        };
        self.send(request)?;
        rx.recv_timeout(timeout).map_err(|_| {
            format!(
                "no tool list within {}",
                humantime::format_duration(timeout)
            )
        })?
    }

    pub async fn call(&self, call: CallRequest) -> CallEnded {
        let (reply, rx) = oneshot::channel();
        if let Err(message) = self.send(Request::Call { call, reply }) {
            return CallEnded::Unreachable {
                message,
                retry_after: None,
            };
        }
        rx.await.unwrap_or(CallEnded::Lost {
            message: "the MCP connection pool stopped during the call".into(),
        })
    }

    /// The secret values a server was given (secret-named variables it may see, secret
    /// arguments, `${VAR}` header values, the URL's userinfo and the `Basic` value sent
    /// for it): replaced by `[redacted]` in whatever it answers or an error says
    /// (docs/ARCHITECTURE.md §5, issue 22).
    pub fn secrets(&self, server: &str) -> Secrets {
        self.servers.get(server).map(secrets_of).unwrap_or_default()
    }

    fn send(&self, request: Request) -> Result<(), String> {
        self.tx
            .as_ref()
            .and_then(|tx| tx.send(request).ok())
            .ok_or_else(|| "the MCP connection pool is not running".to_string())
    }
}

/// See [`Pool::secrets`].
pub fn secrets_of(def: &McpServer) -> Secrets {
    let mut secrets = Secrets::default();
    match &def.transport {
        McpTransport::Stdio(spec) => {
            secrets = crate::tools::command::child_env(std::env::vars_os(), spec).secrets;
            for (_, value) in crate::redact::secret_args(&spec.argv) {
                secrets.add(value);
            }
        }
        McpTransport::Http { url, headers } => {
            secrets.add_url(url);
            for template in headers.values() {
                if let Ok(value) = expand_env(template) {
                    secrets.add(&value);
                    // The token alone, as servers echo it without its scheme.
                    if let Some((_, token)) = value.split_once(' ') {
                        secrets.add(token);
                    }
                }
            }
        }
    }
    secrets
}

impl Drop for Pool {
    fn drop(&mut self) {
        kill_all(&self.groups);
        self.tx.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Tells every server's supervisor to end it and all it started; the pool thread then
/// waits for each ([`State::stop`]).
fn kill_all(groups: &Groups) {
    let groups = groups.lock().unwrap_or_else(|p| p.into_inner());
    for pid in groups.values() {
        signal(*pid, libc::SIGTERM);
    }
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) has no memory-safety preconditions. The pid (and group) is one we
    // created and have not reaped, so it cannot have been reused by a stranger.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// The pool thread: one task per request, one lock per server.
fn serve(
    servers: BTreeMap<String, McpServer>,
    mut rx: mpsc::UnboundedReceiver<Request>,
    groups: Groups,
) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return; // every request then fails "not running"
    };
    rt.block_on(async move {
        let states: BTreeMap<String, Arc<Mutex<State>>> = servers
            .into_iter()
            .map(|(name, def)| (name, Arc::new(Mutex::new(State::new(def, groups.clone())))))
            .collect();
        while let Some(request) = rx.recv().await {
            let name = match &request {
                Request::List { server, .. } => server,
                Request::Call { call, .. } => &call.server,
            };
            let Some(state) = states.get(name).cloned() else {
                continue; // the reply channel drops: the caller reports it
            };
            tokio::spawn(handle(state, request));
        }
        for state in states.values() {
            state.lock().await.stop();
        }
    });
}

async fn handle(state: Arc<Mutex<State>>, request: Request) {
    match request {
        Request::List { reply, .. } => {
            let mut s = state.lock().await;
            let listed = match s.ensure().await {
                Ok(_) => Ok(s.listed.clone()),
                Err(CallEnded::Unreachable { message, .. }) => Err(message),
                Err(other) => Err(format!("{other:?}")),
            };
            let _ = reply.send(listed);
        }
        Request::Call { call, reply } => {
            let _ = reply.send(run_call(&state, call).await);
        }
    }
}

async fn run_call(state: &Arc<Mutex<State>>, call: CallRequest) -> CallEnded {
    let (peer, restarted) = {
        let mut s = state.lock().await;
        let before = s.starts;
        let peer = match s.ensure().await {
            Ok(peer) => peer,
            Err(ended) => return ended,
        };
        let restarted = (before > 0 && s.starts > before).then_some(s.starts);
        if !s.offered.contains(&call.tool) {
            return CallEnded::NotOffered {
                offered: s.offered.iter().cloned().collect(),
            };
        }
        (peer, restarted)
    };
    let params: CallToolRequestParams = match serde_json::from_value(serde_json::json!({
        "name": call.tool, "arguments": call.args, "_meta": call.meta,
    })) {
        Ok(p) => p,
        Err(e) => {
            return CallEnded::Rpc {
                code: -32602,
                message: format!("arguments cannot be sent: {e}"),
            };
        }
    };
    let ended = tokio::time::timeout(call.timeout, peer.call_tool(params)).await;
    match ended {
        Err(_) => CallEnded::TimedOut,
        Ok(Ok(result)) => {
            state.lock().await.crashes = 0;
            match serde_json::to_value(result) {
                Ok(result) => CallEnded::Answered { result, restarted },
                Err(e) => CallEnded::Rpc {
                    code: -32603,
                    message: format!("unreadable result: {e}"),
                },
            }
        }
        Ok(Err(ServiceError::McpError(e))) => CallEnded::Rpc {
            code: e.code.0,
            message: e.message.to_string(),
        },
        Ok(Err(ServiceError::Timeout { .. })) => CallEnded::TimedOut,
        Ok(Err(ServiceError::TransportSend(e))) => {
            let mut s = state.lock().await;
            let why = s.crashed();
            CallEnded::Unreachable {
                message: format!("cannot send to the server: {e}{why}"),
                retry_after: None,
            }
        }
        Ok(Err(e)) => {
            let mut s = state.lock().await;
            let why = s.crashed();
            CallEnded::Lost {
                message: format!("{e}{why}"),
            }
        }
    }
}

/// One server: its connection when running, and its restart schedule.
struct State {
    def: McpServer,
    service: Option<RunningService<RoleClient, ()>>,
    /// Tools from the latest `tools/list`.
    listed: Vec<DiscoveredTool>,
    offered: BTreeSet<String>,
    /// Consecutive crashes (or failed starts) since the last successful call.
    crashes: u32,
    /// Successful starts in this run.
    starts: u32,
    not_before: Option<Instant>,
    stderr: Arc<StdMutex<Vec<u8>>>,
    groups: Groups,
    /// A running stdio server's process.
    child: Option<tokio::process::Child>,
}

impl State {
    fn new(def: McpServer, groups: Groups) -> State {
        State {
            def,
            service: None,
            listed: Vec::new(),
            offered: BTreeSet::new(),
            crashes: 0,
            starts: 0,
            not_before: None,
            stderr: Arc::default(),
            groups,
            child: None,
        }
    }

    /// A running server's peer, starting it first if it is not running.
    async fn ensure(&mut self) -> Result<Peer<RoleClient>, CallEnded> {
        if let Some(svc) = &self.service {
            if !svc.is_closed() {
                return Ok(svc.peer().clone());
            }
            self.crashed();
        }
        if let Some(at) = self.not_before
            && let Some(wait) = at.checked_duration_since(Instant::now())
            && !wait.is_zero()
        {
            return Err(CallEnded::Unreachable {
                message: format!(
                    "server {} is restarting after {} crash(es)",
                    self.def.name, self.crashes
                ),
                retry_after: Some(wait),
            });
        }
        match tokio::time::timeout(CONNECT_TIMEOUT, self.connect()).await {
            Ok(Ok(())) => Ok(self
                .service
                .as_ref()
                .map(|s| s.peer().clone())
                .ok_or_else(|| CallEnded::Unreachable {
                    message: "server stopped while starting".into(),
                    retry_after: None,
                })?),
            Ok(Err(e)) => {
                let why = self.crashed();
                Err(CallEnded::Unreachable {
                    message: format!("cannot start: {e}{why}"),
                    retry_after: None,
                })
            }
            Err(_) => {
                let why = self.crashed();
                let limit = humantime::format_duration(CONNECT_TIMEOUT);
                Err(CallEnded::Unreachable {
                    message: format!("did not start and list its tools within {limit}{why}"),
                    retry_after: None,
                })
            }
        }
    }

    async fn connect(&mut self) -> Result<(), String> {
        // A copy, as starting a stdio server records its process in `self`.
        let transport = self.def.transport.clone();
        let service = match &transport {
            McpTransport::Stdio(spec) => {
                let arg0 = spec.argv.first().map(String::as_str).unwrap_or_default();
                // Through the trampoline, under a supervisor: the server and all it
                // started die with agentrun, even killed with -9, and when the server
                // is stopped; it runs in its sandbox (issue 22).
                let before = crate::tools::spawn::Before {
                    tmp: None,
                    die_with_parent: true,
                    supervise: true,
                };
                let child = crate::tools::spawn::command(spec, &[], before)
                    .map_err(|e| format!("cannot run `{arg0}`: {e}"))?;
                let (pipes, stderr) = self
                    .spawn_stdio(child.cmd)
                    .map_err(|e| format!("cannot run `{arg0}`: {e}"))?;
                let tail = tokio::spawn(keep_tail(stderr, self.stderr.clone()));
                match ().serve(pipes).await {
                    Ok(service) => service,
                    Err(e) => {
                        // A server that fails at once usually said why on stderr; give
                        // the reader a moment to reach the end of it. `ensure` adds it
                        // to the message, once (issue 27: it was there twice).
                        let _ = tokio::time::timeout(STDERR_GRACE, tail).await;
                        return Err(e.to_string());
                    }
                }
            }
            McpTransport::Http { url, headers } => {
                let client = http_client(headers)?;
                let config = rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url.as_str());
                let transport = StreamableHttpClientTransport::with_client(client, config);
                ().serve(transport).await.map_err(|e| e.to_string())?
            }
        };
        self.listed = list_tools(&service).await?;
        self.offered = self.listed.iter().map(|t| t.name.clone()).collect();
        self.service = Some(service);
        self.starts += 1;
        Ok(())
    }

    /// Starts a stdio server: its stdout reaches the SDK through [`depth::pump`], its
    /// stderr is returned. The child is kept (killed when dropped) and its process
    /// group recorded, so stopping the server or the pool kills it and all it started.
    fn spawn_stdio(
        &mut self,
        mut cmd: tokio::process::Command,
    ) -> std::io::Result<(
        (tokio::io::DuplexStream, tokio::process::ChildStdin),
        tokio::process::ChildStderr,
    )> {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn()?;
        let pipes = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let (Some(stdin), Some(stdout), Some(stderr)) = pipes else {
            return Err(std::io::Error::other("the server's pipes are missing"));
        };
        if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
            let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
            groups.insert(self.def.name.clone(), pid);
        }
        let (reader, writer) = tokio::io::duplex(64 * 1024);
        tokio::spawn(super::depth::pump(stdout, writer));
        self.child = Some(child);
        Ok(((reader, stdin), stderr))
    }

    /// Ends the current process (if any) and schedules the next start. Returns what the
    /// server last wrote to stderr, for the message.
    fn crashed(&mut self) -> String {
        self.stop();
        self.crashes += 1;
        let delay = restart_delay(self.crashes);
        self.not_before = Some(Instant::now() + delay);
        let tail = self.stderr_tail();
        if tail.is_empty() {
            String::new()
        } else {
            format!(" (server stderr: {tail})")
        }
    }

    /// Ends a stdio server through its supervisor (SIGTERM: it kills the server and
    /// everything the server started, then exits), waiting for that up to
    /// [`STOP_WITHIN`]; a supervisor that has not exited by then is killed with its
    /// process group.
    fn stop(&mut self) {
        let pid = {
            let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
            groups.remove(&self.def.name)
        };
        if let Some(pid) = pid {
            signal(pid, libc::SIGTERM);
        }
        if let Some(svc) = self.service.take() {
            // Dropping cancels the service task.
            drop(svc);
        }
        if let Some(mut child) = self.child.take() {
            let deadline = Instant::now() + STOP_WITHIN;
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            if matches!(child.try_wait(), Ok(None))
                && let Some(pid) = pid
            {
                signal(-pid, libc::SIGKILL);
            }
            // Killed on drop if still running, and then reaped by tokio.
            drop(child);
        }
    }

    fn stderr_tail(&self) -> String {
        let bytes = self.stderr.lock().unwrap_or_else(|p| p.into_inner());
        crate::tools::command::tail(&String::from_utf8_lossy(&bytes), 400).replace('\n', " ")
    }
}

/// First restart at once; then 500ms doubling, at most 30s.
fn restart_delay(crashes: u32) -> Duration {
    if crashes <= 1 {
        return Duration::ZERO;
    }
    let exp = (crashes - 2).min(16);
    Duration::from_millis(500)
        .saturating_mul(1 << exp)
        .min(Duration::from_secs(30))
}

/// Reads the server's stderr to its end (so it never blocks on a full pipe), keeping
/// the last bytes.
async fn keep_tail(mut pipe: tokio::process::ChildStderr, tail: Arc<StdMutex<Vec<u8>>>) {
    let mut buf = [0u8; 1024];
    while let Ok(n) = pipe.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
        t.extend_from_slice(&buf[..n]);
        if t.len() > STDERR_TAIL {
            let cut = t.len() - STDERR_TAIL;
            t.drain(..cut);
        }
    }
}

/// The HTTP client, with the configured headers (`${VAR}` read from the environment
/// now, never stored).
fn http_client(headers: &BTreeMap<String, String>) -> Result<reqwest::Client, String> {
    let mut map = reqwest::header::HeaderMap::new();
    for (name, template) in headers {
        let value = expand_env(template)?;
        let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|e| format!("header `{name}`: {e}"))?;
        let mut value = reqwest::header::HeaderValue::from_str(&value)
            .map_err(|_| format!("header `{name}`: value is not a valid header value"))?;
        value.set_sensitive(true);
        map.insert(name, value);
    }
    crate::net::tls_builder()
        .default_headers(map)
        // Never follow a redirect: headers (tokens) must not go to another origin.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// `${VAR}` from the environment; a missing variable is an error naming it.
fn expand_env(template: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let end = after.find('}').ok_or("unclosed `${` in a header")?;
        let name = &after[..end];
        let value = std::env::var(name)
            .map_err(|_| format!("header needs ${{{name}}}, which is not set"))?;
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Bounds on what a server's `tools/list` may bring into the run (issue 22: 20 pages of
/// 10 MB and 10,003 tools were accepted, and a 12 MB description went into every model
/// request). Far above what a real server lists; beyond them discovery fails, naming
/// the server and the bound.
pub const MAX_PAGES: usize = 16;
pub const MAX_TOOLS: usize = 256;
pub const MAX_DESCRIPTION_BYTES: usize = 8 * 1024;
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;

/// Every page of `tools/list`, within the bounds above.
async fn list_tools(
    service: &RunningService<RoleClient, ()>,
) -> Result<Vec<DiscoveredTool>, String> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = cursor
            .take()
            .map(|c| rmcp::model::PaginatedRequestParams::default().with_cursor(Some(c)));
        let page = service
            .list_tools(params)
            .await
            .map_err(|e| format!("tools/list failed: {e}"))?;
        for tool in page.tools {
            let Some(t) = serde_json::to_value(tool).ok().and_then(discovered) else {
                continue;
            };
            check_bounds(&t)?;
            out.push(t);
            if out.len() > MAX_TOOLS {
                return Err(format!(
                    "tools/list: more than {MAX_TOOLS} tools; offer fewer (agentrun refuses \
                     the list rather than send them all to the model)"
                ));
            }
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(out),
        }
    }
    Err(format!("tools/list: more than {MAX_PAGES} pages; refused"))
}

fn check_bounds(t: &DiscoveredTool) -> Result<(), String> {
    if t.description.len() > MAX_DESCRIPTION_BYTES {
        return Err(format!(
            "tools/list: the description of `{}` is {} bytes, over the {} KiB limit",
            t.name,
            t.description.len(),
            MAX_DESCRIPTION_BYTES / 1024
        ));
    }
    let schema = t.input_schema.to_string().len();
    if schema > MAX_SCHEMA_BYTES {
        return Err(format!(
            "tools/list: the input schema of `{}` is {schema} bytes, over the {} KiB limit",
            t.name,
            MAX_SCHEMA_BYTES / 1024
        ));
    }
    Ok(())
}

fn discovered(tool: Value) -> Option<DiscoveredTool> {
    Some(DiscoveredTool {
        name: tool.get("name")?.as_str()?.to_string(),
        description: tool
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        input_schema: tool.get("inputSchema")?.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_tool_over_a_bound_is_refused_naming_it() {
        let tool = |description: usize, schema: usize| DiscoveredTool {
            name: "big".into(),
            description: "d".repeat(description),
            input_schema: serde_json::json!({"type": "object", "description": "s".repeat(schema)}),
        };
        assert!(check_bounds(&tool(100, 100)).is_ok());
        let long = check_bounds(&tool(12 * 1024 * 1024, 10)).unwrap_err();
        assert!(
            long.contains("description of `big`") && long.contains("8 KiB"),
            "{long}"
        );
        let wide = check_bounds(&tool(10, 100 * 1024)).unwrap_err();
        assert!(
            wide.contains("input schema of `big`") && wide.contains("64 KiB"),
            "{wide}"
        );
    }

    #[test]
    fn restarts_back_off_after_the_first() {
        let ms = |n| restart_delay(n).as_millis();
        assert_eq!([ms(1), ms(2), ms(3), ms(4)], [0, 500, 1000, 2000]);
        assert_eq!(ms(40), 30_000);
    }

    #[test]
    fn header_templates_read_the_environment() {
        assert_eq!(expand_env("plain").unwrap(), "plain");
        let missing = expand_env("Bearer ${AGENTRUN_TEST_SURELY_UNSET_VAR}").unwrap_err();
        assert_eq!(
            missing,
            "header needs ${AGENTRUN_TEST_SURELY_UNSET_VAR}, which is not set"
        );
    }
}
