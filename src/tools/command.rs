//! Command tools (DESIGN §3). PLACEHOLDER: minimal; to be replaced by the full version
//! (sysexits mapping, timeout killing the process group, output cap, clean env).

use super::CallContext;
use super::outcome::{AttemptResult, ErrorKind, ToolError};
use crate::config::types::{CommandSpec, ToolDef};
use serde_json::Value;
use std::process::Stdio;
use tokio::io::AsyncWriteExt;

pub async fn run(
    spec: &CommandSpec,
    _def: &ToolDef,
    args: &Value,
    ctx: &CallContext<'_>,
) -> AttemptResult {
    let mut cmd = tokio::process::Command::new(&spec.argv[0]);
    cmd.args(&spec.argv[1..])
        .current_dir(&spec.cwd)
        .env("AGENTRUN_RUN_ID", ctx.run_id)
        .env("AGENTRUN_CALL_ID", ctx.call_id)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| ToolError::new(ErrorKind::ToolBug, format!("cannot start: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(args.to_string().as_bytes()).await;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| ToolError::new(ErrorKind::ToolBug, e.to_string()))?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    if out.status.success() {
        Ok(serde_json::from_str(&text).unwrap_or(Value::String(text)))
    } else {
        Err(ToolError::new(
            ErrorKind::ToolBug,
            format!("exit {:?}", out.status.code()),
        ))
    }
}
