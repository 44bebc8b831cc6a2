//! Command tools: stdin/stdout, sysexits mapping, self-reported errors, the cleaned
//! environment, timeouts that kill the process group, and the output cap.

use super::support::{Harness, set_test_env};
use agentrun::config::types::ToolKind;
use agentrun::tools::outcome::{ErrorKind, ToolError};
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test]
async fn json_on_stdout_is_the_result_and_args_arrive_on_stdin() {
    let h = Harness::new();
    let def = h.script_tool("echo_args", "cat");
    let args = json!({"q": "refund window", "n": 2});
    assert_eq!(h.attempt(&def, args.clone()).await, Ok(args));
}

#[tokio::test]
async fn text_on_stdout_is_a_string_without_the_final_newline() {
    let h = Harness::new();
    let def = h.command_tool("say", &["sh", "-c", "echo 'thirty days'"]);
    assert_eq!(h.attempt(&def, json!({})).await, Ok(json!("thirty days")));
}

#[tokio::test]
async fn sysexits_codes_name_the_error_kind() {
    use ErrorKind::*;
    let h = Harness::new();
    let cases = [
        (75, Unavailable),
        (69, Unavailable),
        (64, InvalidArguments),
        (65, InvalidArguments),
        (66, NotFound),
        (77, PermissionDenied),
        (70, ToolBug),
        (1, ToolBug),
        (3, ToolBug),
    ];
    for (code, kind) in cases {
        let def = h.script_tool(
            &format!("exit{code}"),
            &format!("echo 'why {code}' >&2; exit {code}"),
        );
        let mut want = ToolError::new(kind, format!("exit{code} exited with {code}: why {code}"));
        // 75 and 69 prove the tool did not act (issue 12: only they allow a retry of a
        // tool that is not idempotent).
        want.not_acted = matches!(code, 69 | 75);
        assert_eq!(h.attempt(&def, json!({})).await, Err(want), "exit {code}");
    }
}

#[tokio::test]
async fn a_tool_killed_by_a_signal_is_a_tool_bug() {
    let h = Harness::new();
    let def = h.script_tool("crash", "kill -9 $$");
    let want = ToolError::new(ErrorKind::ToolBug, "crash was killed by signal 9");
    assert_eq!(h.attempt(&def, json!({})).await, Err(want));
}

#[tokio::test]
async fn a_tool_names_its_error_kind_on_stdout() {
    let h = Harness::new();
    let body =
        r#"echo '{"error": "rate_limited", "message": "slow down", "retry_after": 2}'; exit 1"#;
    let def = h.script_tool("limited", body);
    let mut want = ToolError::new(ErrorKind::RateLimited, "slow down").not_acted();
    want.retry_after = Some(Duration::from_secs(2));
    assert_eq!(h.attempt(&def, json!({})).await, Err(want));

    let def = h.script_tool(
        "missing",
        r#"echo '{"error": "not_found", "message": "no order ORD-9"}'"#,
    );
    let want = ToolError::new(ErrorKind::NotFound, "no order ORD-9");
    assert_eq!(
        h.attempt(&def, json!({})).await,
        Err(want),
        "exit 0 with a report"
    );
}

#[tokio::test]
async fn an_error_field_that_is_no_kind_is_ordinary_output() {
    let h = Harness::new();
    let def = h.script_tool("data", r#"echo '{"error": "none found"}'"#);
    assert_eq!(
        h.attempt(&def, json!({})).await,
        Ok(json!({"error": "none found"}))
    );
}

#[tokio::test]
async fn secrets_are_cleaned_from_the_environment_unless_listed() {
    set_test_env();
    let h = Harness::new();
    let body = r#"printf '{"key":"%s","got":"%s","kb":"%s","run":"%s","call":"%s","path":%s}' \
        "${MY_API_KEY:-}" "${AGENTRUN_TEST_LISTED_TOKEN:-}" "${AGENTRUN_TEST_KB_TOKEN:-}" \
        "$AGENTRUN_RUN_ID" "$AGENTRUN_CALL_ID" "$([ -n "$PATH" ] && echo true || echo false)""#;
    let mut def = h.script_tool("env", body);
    if let ToolKind::Command(spec) = &mut def.kind {
        spec.env = vec!["AGENTRUN_TEST_LISTED_TOKEN".to_string()];
    }
    // The listed secret reaches the tool, and is redacted from what it prints.
    let want = json!({"key": "", "got": "[redacted]", "kb": "", "run": "run-1", "call": h.key, "path": true});
    assert_eq!(h.attempt(&def, json!({})).await, Ok(want));
}

#[tokio::test]
async fn a_timeout_kills_the_whole_process_group() {
    let h = Harness::new();
    let mut def = h.script_tool("hang", "sleep 30 & echo $! > grandchild.pid; wait");
    def.retry.timeout = Duration::from_millis(500);
    let started = Instant::now();
    let want = ToolError::new(ErrorKind::Timeout, "hang exceeded 500ms");
    assert_eq!(h.attempt(&def, json!({})).await, Err(want));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    let pid: i32 = h
        .read("grandchild.pid")
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid");
    assert!(
        wait_until_gone(pid),
        "grandchild {pid} survived the timeout"
    );
}

/// Polls for up to 5 s; a zombie awaiting its reaper counts as gone.
fn wait_until_gone(pid: i32) -> bool {
    for _ in 0..500 {
        // SAFETY: signal 0 only checks that the process exists.
        let exists = unsafe { libc::kill(pid, 0) } == 0;
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .is_some_and(|rest| rest.trim_start().starts_with('Z'))
            })
            .unwrap_or(false);
        if !exists || zombie {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

#[tokio::test]
async fn background_leftovers_do_not_hold_the_attempt_open() {
    let h = Harness::new();
    let def = h.script_tool("daemon", "sleep 30 & echo $! > leftover.pid; echo done");
    assert_eq!(h.attempt(&def, json!({})).await, Ok(json!("done")));
    let pid: i32 = h
        .read("leftover.pid")
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid");
    assert!(wait_until_gone(pid), "leftover {pid} outlived the attempt");
}

#[tokio::test]
async fn output_beyond_the_cap_is_cut_with_a_note() {
    let h = Harness::new();
    let mut def = h.script_tool("chatty", "head -c 300000 /dev/zero | tr '\\0' a");
    if let ToolKind::Command(spec) = &mut def.kind {
        spec.output_cap = 1000;
    }
    let want = format!("{}\n[output cut at 1000 bytes]", "a".repeat(1000));
    assert_eq!(h.attempt(&def, json!({})).await, Ok(json!(want)));
}

#[tokio::test]
async fn only_the_tail_of_stderr_goes_into_the_message() {
    let h = Harness::new();
    let def = h.script_tool(
        "noisy",
        "head -c 5000 /dev/zero | tr '\\0' e >&2; echo END >&2; exit 70",
    );
    let err = h.attempt(&def, json!({})).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::ToolBug);
    assert!(
        err.message.starts_with("noisy exited with 70: …"),
        "{}",
        err.message
    );
    assert!(err.message.ends_with("eeeEND"), "{}", err.message);
    assert!(
        err.message.chars().count() < 560,
        "{} chars",
        err.message.chars().count()
    );
}

#[tokio::test]
async fn a_missing_program_is_a_tool_bug() {
    let h = Harness::new();
    let def = h.command_tool("ghost", &["./no-such-tool.sh"]);
    let err = h.attempt(&def, json!({})).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::ToolBug);
    assert!(
        err.message
            .starts_with("ghost: cannot start `./no-such-tool.sh`: "),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn a_tool_that_ignores_stdin_still_succeeds() {
    let h = Harness::new();
    let def = h.script_tool("ignore", "echo '[1, 2]'");
    let big = json!({"blob": "x".repeat(200_000)});
    assert_eq!(h.attempt(&def, big).await, Ok(json!([1, 2])));
}
