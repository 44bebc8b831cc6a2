//! Parallel tool calls (issue 14): one turn of k calls to a tool that takes 100 ms,
//! then the answer, as a whole `agentrun start`. With the calls running together the
//! turn costs about one call; one by one (`max_parallel_calls = 1`) it costs k.

use super::procs::{self, Stdout};
use super::report::median;
use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::Duration;

/// argv[1] that turns the bench executable into a tool taking [`SLOW_MS`].
pub const SLOW_ARG: &str = "__agentrun_bench_slow_tool";
pub const SLOW_MS: u64 = 100;

/// The slow tool's `main`: read the arguments, wait, print `1`.
pub fn slow_main() -> ExitCode {
    use std::io::Read;
    let mut input = Vec::new();
    if std::io::stdin().read_to_end(&mut input).is_err() {
        return ExitCode::from(70);
    }
    std::thread::sleep(Duration::from_millis(SLOW_MS));
    println!("1");
    ExitCode::SUCCESS
}

/// Whole-run times, medians of `reps` (ms): (k calls together, one call, k calls one
/// by one).
pub struct Times {
    pub k: u32,
    pub together_ms: f64,
    pub one_ms: f64,
    pub one_by_one_ms: f64,
}

pub fn measure(bin: &Path, root: &Path, k: u32, reps: usize) -> Times {
    let dir = root.join("parallel");
    std::fs::create_dir_all(&dir).expect("create parallel folder");
    std::fs::write(
        dir.join("task.md"),
        "+++\nmax_steps = 5\n+++\nLook everything up.\n",
    )
    .expect("write task");
    let exe = std::env::current_exe().expect("path of the bench executable");
    let tools = |parallel: u32| {
        format!(
            "[policy]\nmax_parallel_calls = {parallel}\n[defaults]\ntimeout = \"60s\"\nattempts = 1\n\n\
             [tools.s]\ndescription = \"slow lookup\"\ninput_schema = {{ type = \"object\" }}\n\
             command = {}\nidempotent = true\n",
            serde_json::json!([exe.display().to_string(), SLOW_ARG])
        )
    };
    let script = |calls: u32| {
        let calls: Vec<serde_json::Value> = (0..calls)
            .map(|i| serde_json::json!({"name": "s", "args": {"i": i}}))
            .collect();
        serde_json::json!({"turns": [{"tool_calls": calls}, {"text": "done"}]}).to_string()
    };
    let time = |name: &str, parallel: u32, calls: u32| {
        let tools_path = dir.join(format!("{name}.toml"));
        let script_path = dir.join(format!("{name}.json"));
        std::fs::write(&tools_path, tools(parallel)).expect("write tools");
        std::fs::write(&script_path, script(calls)).expect("write script");
        let times: Vec<f64> = (0..reps)
            .map(|i| {
                let db = dir.join(format!("{name}-{i}.db"));
                let model = format!("script:{}", script_path.display());
                let m = procs::run(
                    Command::new(bin)
                        .current_dir(&dir)
                        .env("AGENTRUN_DB", &db)
                        .env_remove("AGENTRUN_CRASH_AT")
                        .args(["start", "task.md", "--json", "--model", &model, "--tools"])
                        .arg(&tools_path),
                    Stdout::Keep,
                )
                .expect_code(0, name);
                let _ = std::fs::remove_file(&db);
                m.wall.as_secs_f64() * 1e3
            })
            .collect();
        median(&times)
    };
    Times {
        k,
        together_ms: time("together", 8, k),
        one_ms: time("one", 8, 1),
        one_by_one_ms: time("one-by-one", 1, k),
    }
}
