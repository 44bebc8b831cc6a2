//! Helpers: a temp dir for tool scripts, tool definitions in one line, a call context
//! with a fake clock and an event buffer.

use agentrun::clock::FakeClock;
use agentrun::config::types::{
    Approval, CommandSpec, DEFAULT_OUTPUT_CAP, FallbackStep, HttpSpec, OnUnknown, RetryPolicy,
    ToolDef, ToolKind, ToolsConfig,
};
use agentrun::prompts::Prompts;
use agentrun::recovery::{self, CallOutcome, Execution, Gate};
use agentrun::tools::outcome::AttemptResult;
use agentrun::tools::{self, CallContext};
use agentrun::trace::{EventBuffer, TraceEvent};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Once;
use std::time::Duration;

/// Variables some tests read through the child's environment or a header template.
pub const SECRET_ENV: [(&str, &str); 3] = [
    ("MY_API_KEY", "must-not-leak"),
    ("AGENTRUN_TEST_LISTED_TOKEN", "listed"),
    ("AGENTRUN_TEST_KB_TOKEN", "s3cret"),
];

/// Sets [`SECRET_ENV`] once for the whole test binary.
pub fn set_test_env() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for (k, v) in SECRET_ENV {
            // SAFETY: set once, before any test reads these names; std's own readers
            // (Command spawning, env::var) take the same lock as set_var.
            unsafe { std::env::set_var(k, v) };
        }
    });
}

/// Fast retries so nothing waits long even with the real clock.
pub fn test_retry() -> RetryPolicy {
    RetryPolicy {
        timeout: Duration::from_secs(5),
        attempts: 3,
        backoff: Duration::from_millis(100),
        max_backoff: Duration::from_secs(1),
        max_retry_after: Duration::from_secs(60),
    }
}

pub fn tool(name: &str, kind: ToolKind) -> ToolDef {
    ToolDef {
        name: name.to_string(),
        description: format!("test tool {name}"),
        input_schema: json!({"type": "object"}),
        kind,
        retry: test_retry(),
        idempotent: true,
        fallback: Vec::new(),
        stale: false,
        approval: Approval::Never,
        on_unknown: OnUnknown::Escalate,
    }
}

pub fn http_tool(name: &str, method: &str, url: &str) -> ToolDef {
    tool(
        name,
        ToolKind::Http(HttpSpec {
            method: method.to_string(),
            url: url.to_string(),
            headers: BTreeMap::new(),
            output_cap: DEFAULT_OUTPUT_CAP,
        }),
    )
}

pub fn fallback_to(tool: &str, map: &[(&str, &str)]) -> FallbackStep {
    FallbackStep {
        tool: tool.to_string(),
        map: map
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect(),
    }
}

pub fn config(defs: Vec<ToolDef>) -> ToolsConfig {
    ToolsConfig {
        tools: defs.into_iter().map(|d| (d.name.clone(), d)).collect(),
        ..ToolsConfig::default()
    }
}

pub struct Harness {
    pub dir: tempfile::TempDir,
    pub clock: FakeClock,
    pub events: EventBuffer,
    pub prompts: Prompts,
    /// `AGENTRUN_CALL_ID`: unique per harness, as it is per call in a run. The tests
    /// share one process, which is the subreaper of all their tools, and an attempt's
    /// clean-up kills every orphan that carries its key.
    pub key: String,
}

impl Harness {
    pub fn new() -> Harness {
        // Tools start sandboxed (the default) through agentrun's trampoline, which
        // this test binary is not.
        agentrun::tools::trampoline::use_program(&crate::common::bin());
        if !crate::common::can_sandbox() {
            agentrun::config::set_base_sandbox(agentrun::config::SandboxMode::Off);
        }
        Harness {
            dir: tempfile::tempdir().expect("tempdir"),
            clock: FakeClock::new(0),
            events: EventBuffer::default(),
            prompts: Prompts::builtin(),
            key: {
                static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                format!("run-1:{n}:call-1")
            },
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A command tool running a `/bin/sh` script with `body`, in the temp dir.
    pub fn script_tool(&self, name: &str, body: &str) -> ToolDef {
        let file = format!("{name}.sh");
        let path = self.path().join(&file);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write script");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        self.command_tool(name, &[&format!("./{file}")])
    }

    pub fn command_tool(&self, name: &str, argv: &[&str]) -> ToolDef {
        tool(
            name,
            ToolKind::Command(CommandSpec {
                argv: argv.iter().map(|s| s.to_string()).collect(),
                program: None,
                env: Vec::new(),
                set: Default::default(),
                inherit_all: false,
                cwd: self.path().to_path_buf(),
                output_cap: DEFAULT_OUTPUT_CAP,
                sandbox: agentrun::config::Sandbox::base(),
            }),
        )
    }

    pub fn ctx(&self) -> CallContext<'_> {
        CallContext {
            run_id: "run-1",
            call_id: "call-1",
            key: &self.key,
            clock: &self.clock,
            events: &self.events,
            mcp: None,
            hooks: None,
            limits: None,
        }
    }

    pub async fn attempt(&self, def: &ToolDef, args: Value) -> AttemptResult {
        tools::attempt(def, &args, &self.ctx()).await
    }

    /// The attempts step of the recovery chain alone (no schema, gate or fallback):
    /// attempts through the one executor, each decided by the chain's own retry rule
    /// ([`recovery::retry::after_attempt`]) and waited on the fake clock. Returns the
    /// final result and the number of attempts made.
    pub async fn with_retry(&self, def: &ToolDef, args: Value) -> (AttemptResult, u32) {
        use recovery::retry::{AfterAttempt, after_attempt, attempt_event, backoff_event};
        let ctx = self.ctx();
        let mut made = 0;
        loop {
            made += 1;
            let started = std::time::Instant::now();
            let result = tools::attempt(def, &args, &ctx).await;
            let elapsed = started.elapsed();
            ctx.events
                .emit(attempt_event(ctx.call_id, def, made, elapsed, &result));
            let b = match after_attempt(def, made, result) {
                AfterAttempt::Final(result) => return (result, made),
                AfterAttempt::Retry(b) => b,
            };
            let delay = b.draw(ctx.clock);
            let server = b.server_delay.is_some();
            ctx.events
                .emit(backoff_event(ctx.call_id, def, made + 1, delay, server));
            ctx.clock.sleep(delay).await;
        }
    }

    pub async fn execute_gated(
        &self,
        cfg: &ToolsConfig,
        tool: &str,
        args: Value,
        gate: &dyn Fn(&ToolDef, &Value) -> Gate,
    ) -> Execution {
        recovery::execute(cfg, &self.prompts, tool, &args, &self.ctx(), gate).await
    }

    /// Executes with a gate that lets everything run; panics if it paused.
    pub async fn execute(&self, cfg: &ToolsConfig, tool: &str, args: Value) -> CallOutcome {
        match self.execute_gated(cfg, tool, args, &|_, _| Gate::Run).await {
            Execution::Done(outcome) => outcome,
            Execution::Paused { tool, args, .. } => panic!("paused before {tool} {args}"),
            Execution::ChildWaiting { reason } => panic!("waiting for a child: {reason}"),
        }
    }

    pub fn read(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.path().join(name)).ok()
    }

    pub fn sleeps_ms(&self) -> Vec<u128> {
        self.clock.sleeps().iter().map(|d| d.as_millis()).collect()
    }

    /// The kinds of the trace events so far, in order.
    pub fn event_kinds(&self) -> Vec<&'static str> {
        self.events.take().iter().map(TraceEvent::kind).collect()
    }

    /// The model-facing error JSON for `kind` with the built-in hint.
    pub fn error_json(
        &self,
        kind: agentrun::tools::outcome::ErrorKind,
        message: &str,
        attempts: u32,
    ) -> Value {
        let err = agentrun::tools::outcome::ToolError::new(kind, message);
        err.to_model_json(attempts, self.prompts.hint(kind))
    }
}

/// A shell snippet that counts its runs in `file` and exits with `code` for the first
/// `failures` runs, then prints `{"ok": true}`.
pub fn flaky_body(file: &str, failures: u32, code: i32) -> String {
    format!(
        "n=$(cat {file} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {file}\n\
         if [ $n -le {failures} ]; then echo \"attempt $n failed\" >&2; exit {code}; fi\n\
         echo '{{\"ok\": true}}'"
    )
}
