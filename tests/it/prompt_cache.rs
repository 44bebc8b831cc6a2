//! Requests a prompt cache can reuse (issue 23): within a run every request starts
//! with the same bytes — system prompt and tool list — and the whole of one request
//! is the start of the next; the budget line, when one is told, comes last as
//! user-role text and stays in the later requests where it was. Checked on what a local server really received from
//! `agentrun start`, answering with the recorded OpenAI and Anthropic responses.
//!
//! [`Caching`] bills those responses as a provider with a prompt cache would: a
//! request's prefix is read from the cache only when it matches, block for block and
//! byte for byte, a prefix an earlier request wrote (Anthropic: at a `cache_control`
//! breakpoint, found up to 20 blocks back; OpenAI: any earlier request with the same
//! `prompt_cache_key`). Tokens are counted as 4 bytes each, the same way for every
//! part, so the shares are exact.

use crate::common::{Project, Run, events};
use serde_json::{Value, json};
use std::sync::Mutex;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/providers");
const OPENAI: [&str; 3] = [
    "openai/01_single_tool_call",
    "openai/02_tool_result_then_second_tool_call",
    "openai/03_tool_results_final_answer",
];
const ANTHROPIC: [&str; 3] = [
    "anthropic/01_single_tool_use",
    "anthropic/02_tool_result_then_tool_use",
    "anthropic/03_tool_results_final_answer",
];

/// A recorded response body.
fn recorded(name: &str) -> Value {
    let file = format!("{FIXTURES}/{name}.json");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
    v["response"]["body"].clone()
}

/// Answers each request with the next recorded body, keeping every request body.
struct Replay {
    answers: Vec<Value>,
    seen: Mutex<Vec<Value>>,
}

impl Respond for &'static Replay {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).expect("JSON request");
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.push(body);
        match self.answers.get(seen.len() - 1) {
            Some(answer) => ResponseTemplate::new(200).set_body_json(answer),
            None => ResponseTemplate::new(500).set_body_string("no more recorded answers"),
        }
    }
}

const TOOLS: &str = r#"
[defaults]
timeout = "5s"

[tools.lookup_population]
description = "Returns the current population of the specified fictional country"
input_schema = { type = "object", properties = { country = { type = "string" } }, required = ["country"] }
command = ["sh", "-c", "cat >/dev/null; echo 123124"]

[tools.can_have_dragons]
description = "Whether a country of that population can have dragons"
input_schema = { type = "object", properties = { population = { type = "integer" } } }
command = ["sh", "-c", "cat >/dev/null; echo true"]

[tools.passphrase_test_tool]
description = "Returns the secret phrase for a passphrase"
input_schema = { type = "object", properties = { passphrase = { type = "string" } }, required = ["passphrase"] }
command = ["sh", "-c", "cat >/dev/null; printf 'The cake is a lie.'"]
"#;

/// `agentrun start` of a three-step task on `model` against `responder`, with `front`
/// added to the front matter and `system` as the project's system prompt.
fn start_against(
    model: &str,
    api_path: &str,
    responder: impl Respond + 'static,
    front: &str,
    system: Option<&str>,
) -> (Project, Run) {
    let rt = crate::common::runtime();
    let server = rt.block_on(MockServer::start());
    rt.block_on(
        Mock::given(method("POST"))
            .and(path(api_path))
            .respond_with(responder)
            .mount(&server),
    );
    let p = Project::new();
    p.write("tools.toml", TOOLS);
    if let Some(text) = system {
        p.write("prompts/system.md", text);
    }
    p.write(
        "task.md",
        &format!(
            "+++\nmodel = \"{model}\"\nmax_steps = 5\nstream = false\n{front}\n+++\n\
             Can the country of Crumpet have dragons?\n"
        ),
    );
    let mut cmd = p.command(&["start", "task.md", "--json"]);
    cmd.env("OPENAI_BASE_URL", format!("{}/v1", server.uri()))
        .env("OPENAI_API_KEY", "sk-test")
        .env("ANTHROPIC_BASE_URL", server.uri())
        .env("ANTHROPIC_API_KEY", "sk-ant-test");
    let run = Run::from_output(cmd.output().expect("spawn agentrun"));
    (p, run)
}

/// [`start_against`] a [`Replay`]; the run and the request bodies received.
fn run_against(model: &str, api_path: &str, answers: &[&str]) -> (Project, Run, Vec<Value>) {
    let replay: &'static Replay = Box::leak(Box::new(Replay {
        answers: answers.iter().map(|a| recorded(a)).collect(),
        seen: Mutex::new(Vec::new()),
    }));
    let (p, run) = start_against(model, api_path, replay, "", None);
    let seen = replay
        .seen
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    (p, run, seen)
}

/// A request as a list of (role, block) strings in the order a model reads them, cache
/// markers left out (they move to the newest message by design).
fn blocks(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove("cache_control");
        }
        v.to_string()
    };
    for t in body["tools"].as_array().into_iter().flatten() {
        out.push(format!("tool {}", strip(t)));
    }
    match &body["system"] {
        Value::String(s) => out.push(format!("system {s}")),
        Value::Array(parts) => out.extend(parts.iter().map(|p| format!("system {}", strip(p)))),
        _ => {}
    }
    for m in body["messages"].as_array().into_iter().flatten() {
        let role = m["role"].as_str().unwrap_or("?");
        match &m["content"] {
            Value::Array(parts) => {
                out.extend(parts.iter().map(|p| format!("{role} {}", strip(p))));
            }
            _ => out.push(format!("{role} {}", strip(m))),
        }
    }
    out
}

/// Every request of the run: no system message but the first; a budget line at the
/// first step and at each of the last three (five steps), always the end of the
/// request; and each request, whole and byte for byte, is the start of the next
/// (append-only: the budget line stays where it was sent).
fn assert_stable_prefix(bodies: &[Value]) {
    assert!(bodies.len() >= 3, "three steps: {bodies:#?}");
    for (i, b) in bodies.iter().enumerate() {
        let text = b.to_string();
        let all = blocks(b);
        let last = all.last().expect("a message");
        let told = [1, 3].contains(&(i + 1));
        assert_eq!(
            last.contains(&format!("Budget: step {} of 5,", i + 1)),
            told,
            "request {}: the budget line comes last, when told: {last}",
            i + 1
        );
        let lines = usize::from(i >= 2) + 1;
        assert_eq!(
            text.matches("Budget: step").count(),
            lines,
            "request {}: the earlier lines stay where they were: {b:#}",
            i + 1
        );
        let systems = b["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "system").count());
        assert!(systems <= 1, "one system message at most: {b:#}");
        if let Some(next) = bodies.get(i + 1) {
            let next = blocks(next);
            assert_eq!(
                all[..],
                next[..all.len()],
                "request {} is not the start of the next",
                i + 1
            );
        }
    }
}

#[test]
fn openai_requests_keep_one_prefix_and_put_the_budget_line_last() {
    let (_p, run, bodies) = run_against("openai:gpt-4o-mini", "/v1/chat/completions", &OPENAI);
    assert_eq!(run.expect_code(0).json()["answer"], json!("YES"), "{run}");
    assert_stable_prefix(&bodies);
}

#[test]
fn anthropic_requests_keep_one_prefix_and_put_the_budget_line_last() {
    let (_p, run, bodies) = run_against("anthropic:claude-sonnet-4-5", "/v1/messages", &ANTHROPIC);
    run.expect_code(0);
    assert_stable_prefix(&bodies);
}

// ---- a provider's prompt cache -----------------------------------------------------

/// Tokens of a block: 4 bytes each, rounded up.
fn tokens(block: &str) -> u64 {
    (block.len() as u64).div_ceil(4)
}

fn sum(blocks: &[String]) -> u64 {
    blocks.iter().map(|b| tokens(b)).sum()
}

/// How far back from a breakpoint Anthropic looks for an earlier cache entry.
const LOOKBACK: usize = 20;

/// What the cache billed one request: (input in total, read from the cache, written).
type Bill = (u64, u64, u64);

/// Replays recorded responses with the usage a prompt-caching provider would bill.
struct Caching {
    anthropic: bool,
    answers: Vec<Value>,
    /// Prefixes written to the cache (Anthropic: up to each breakpoint; OpenAI: every
    /// request, by `prompt_cache_key`).
    written: Mutex<Vec<(String, Vec<String>)>>,
    bills: Mutex<Vec<Bill>>,
}

impl Caching {
    fn new(anthropic: bool, answers: &[&str]) -> &'static Caching {
        Box::leak(Box::new(Caching {
            anthropic,
            answers: answers.iter().map(|a| recorded(a)).collect(),
            written: Mutex::new(Vec::new()),
            bills: Mutex::new(Vec::new()),
        }))
    }

    fn bills(&self) -> Vec<Bill> {
        self.bills.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The longest written prefix of `blocks` (for `key`) whose length is in `ends`.
    fn hit(&self, key: &str, blocks: &[String], ends: std::ops::RangeInclusive<usize>) -> usize {
        let written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        written
            .iter()
            .filter(|(k, p)| k == key && ends.contains(&p.len()) && blocks.starts_with(p))
            .map(|(_, p)| p.len())
            .max()
            .unwrap_or(0)
    }

    fn write(&self, key: &str, prefix: &[String]) {
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        written.push((key.to_string(), prefix.to_vec()));
    }

    /// Anthropic: a read up to the longest earlier entry found from a breakpoint, a
    /// write from there to the last breakpoint, the rest plain input.
    fn bill_anthropic(&self, body: &Value) -> Bill {
        let all = blocks(body);
        let marked = breakpoints(body);
        let total = sum(&all);
        let Some(&last) = marked.last() else {
            return (total, 0, 0);
        };
        let read = marked
            .iter()
            .map(|&b| self.hit("", &all, (b + 1).saturating_sub(LOOKBACK)..=b + 1))
            .max()
            .unwrap_or(0);
        for &b in &marked {
            self.write("", &all[..=b]);
        }
        let written = sum(&all[read..=last]);
        (total, sum(&all[..read]), written)
    }

    /// OpenAI: the longest prefix this request shares with an earlier one with the
    /// same key (OpenAI caches the prefixes of what it was sent).
    fn bill_openai(&self, body: &Value) -> Bill {
        let all = blocks(body);
        let key = body["prompt_cache_key"].as_str().unwrap_or("");
        let read = {
            let written = self.written.lock().unwrap_or_else(|e| e.into_inner());
            written
                .iter()
                .filter(|(k, _)| k == key)
                .map(|(_, p)| p.iter().zip(&all).take_while(|(a, b)| a == b).count())
                .max()
                .unwrap_or(0)
        };
        self.write(key, &all);
        (sum(&all), sum(&all[..read]), 0)
    }
}

/// Indices (in [`blocks`] order) of the blocks carrying `cache_control`.
fn breakpoints(body: &Value) -> Vec<usize> {
    let mut parts: Vec<Value> = Vec::new();
    parts.extend(body["tools"].as_array().into_iter().flatten().cloned());
    match &body["system"] {
        Value::Array(p) => parts.extend(p.iter().cloned()),
        Value::String(_) => parts.push(Value::Null),
        _ => {}
    }
    for m in body["messages"].as_array().into_iter().flatten() {
        match &m["content"] {
            Value::Array(p) => parts.extend(p.iter().cloned()),
            _ => parts.push(Value::Null),
        }
    }
    (0..parts.len())
        .filter(|&i| parts[i].get("cache_control").is_some())
        .collect()
}

impl Respond for &'static Caching {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).expect("JSON request");
        let (total, read, written) = if self.anthropic {
            self.bill_anthropic(&body)
        } else {
            self.bill_openai(&body)
        };
        let mut bills = self.bills.lock().unwrap_or_else(|e| e.into_inner());
        bills.push((total, read, written));
        let Some(mut answer) = self.answers.get(bills.len() - 1).cloned() else {
            return ResponseTemplate::new(500).set_body_string("no more recorded answers");
        };
        let usage = &mut answer["usage"];
        if self.anthropic {
            usage["input_tokens"] = json!(total - read - written);
            usage["cache_read_input_tokens"] = json!(read);
            usage["cache_creation_input_tokens"] = json!(written);
        } else {
            usage["prompt_tokens"] = json!(total);
            usage["prompt_tokens_details"]["cached_tokens"] = json!(read);
        }
        ResponseTemplate::new(200).set_body_json(answer)
    }
}

/// A system prompt of the size real ones have (~3,000 tokens here): what the cache is
/// for.
fn long_system_prompt() -> String {
    let rule = "Check every figure against the tool's answer before you repeat it; say \
                which tool said what, and never guess a population or a passphrase.\n";
    rule.repeat(80)
}

/// The output tokens of each recorded answer.
fn outputs(answers: &[&str], key: &str) -> Vec<u64> {
    answers
        .iter()
        .map(|a| recorded(a)["usage"][key].as_u64().expect("output tokens"))
        .collect()
}

/// From the second request on, at least 90% of the input is read from the cache; the
/// run's cost is what the provider's own usage numbers say, to the cent (and closer);
/// `runs show --json` gives the same figures per step and per run.
fn assert_billed_from_cache(
    p: &Project,
    run: &Run,
    bills: &[Bill],
    price: impl Fn(&Bill, u64) -> f64,
    outputs: &[u64],
) {
    run.expect_code(0);
    assert_eq!(bills.len(), 3, "{run}");
    for (i, (total, read, _)) in bills.iter().enumerate().skip(1) {
        let share = *read as f64 / *total as f64;
        assert!(
            share >= 0.9,
            "request {}: {read} of {total} tokens from the cache",
            i + 1
        );
    }
    let want: f64 = bills
        .iter()
        .zip(outputs)
        .map(|(b, out)| price(b, *out))
        .sum();
    let cost = run.json()["cost_usd"].as_f64().expect("cost_usd");
    assert!(
        (cost - want).abs() < 1e-9,
        "cost {cost} vs the provider's usage {want}"
    );
    let show = p.show(run.json()["run_id"].as_str().expect("run id"));
    let per_step: Vec<Bill> = events(&show, "model_usage")
        .iter()
        .map(|e| {
            let n = |k: &str| e[k].as_u64().unwrap_or_else(|| panic!("{k} in {e}"));
            (n("input"), n("cached_input"), n("cache_write"))
        })
        .collect();
    assert_eq!(per_step, bills, "{show:#}");
    let usage = &show["usage"];
    let (input, cached) = bills.iter().fold((0, 0), |(i, c), b| (i + b.0, c + b.1));
    assert_eq!(
        (usage["input"].as_u64(), usage["cached_input"].as_u64()),
        (Some(input), Some(cached)),
        "{usage}"
    );
    let id = run.json()["run_id"].as_str().expect("run id").to_string();
    let human = p.run(&["runs", "show", &id]);
    let pct = format!("{:.0}%", cached as f64 * 100.0 / input as f64);
    assert!(
        human.stdout.contains(&format!(
            "{pct} of {input} input tokens read from the prompt cache"
        )),
        "{human}"
    );
    let ratio = usage["cache_hit_ratio"].as_f64().expect("cache_hit_ratio");
    assert!(
        (ratio - cached as f64 / input as f64).abs() < 1e-9,
        "{usage}"
    );
}

#[test]
fn anthropic_steps_after_the_first_are_read_from_the_cache_and_priced_as_billed() {
    let cache = Caching::new(true, &ANTHROPIC);
    let system = long_system_prompt();
    let (p, run) = start_against(
        "anthropic:claude-sonnet-4-5",
        "/v1/messages",
        cache,
        "max_cost = 5.0",
        Some(&system),
    );
    // claude-sonnet-4's list price per million: $3 in, $0.30 read, $3.75 written, $15 out.
    let price = |&(total, read, written): &Bill, out: u64| {
        ((total - read - written) as f64 * 3.0
            + read as f64 * 0.3
            + written as f64 * 3.75
            + out as f64 * 15.0)
            / 1e6
    };
    let outs = outputs(&ANTHROPIC, "output_tokens");
    assert_billed_from_cache(&p, &run, &cache.bills(), price, &outs);
}

#[test]
fn openai_steps_after_the_first_are_read_from_the_cache_and_priced_as_billed() {
    let cache = Caching::new(false, &OPENAI);
    let system = long_system_prompt();
    // A local server is not api.openai.com: the cache key must be asked for.
    let (p, run) = start_against(
        "openai:gpt-4o-mini",
        "/v1/chat/completions",
        cache,
        "max_cost = 5.0\nprompt_cache = true",
        Some(&system),
    );
    // gpt-4o-mini's list price per million: $0.15 in, $0.075 cached, $0.60 out.
    let price = |&(total, read, _): &Bill, out: u64| {
        ((total - read) as f64 * 0.15 + read as f64 * 0.075 + out as f64 * 0.6) / 1e6
    };
    let outs = outputs(&OPENAI, "completion_tokens");
    assert_billed_from_cache(&p, &run, &cache.bills(), price, &outs);
}

/// `prompt_cache = false` removes Anthropic's breakpoints: nothing is read from the
/// cache or written to it; a local OpenAI-compatible server gets no
/// `prompt_cache_key` unless the task asks for one.
#[test]
fn without_cache_hints_nothing_is_cached_and_local_servers_get_no_cache_key() {
    let cache = Caching::new(true, &ANTHROPIC);
    let (_p, run) = start_against(
        "anthropic:claude-sonnet-4-5",
        "/v1/messages",
        cache,
        "prompt_cache = false",
        Some(&long_system_prompt()),
    );
    run.expect_code(0);
    let bills = cache.bills();
    assert_eq!(bills.len(), 3);
    assert!(
        bills
            .iter()
            .all(|&(_, read, written)| read == 0 && written == 0)
    );
    let (_p, run, bodies) = run_against("openai:gpt-4o-mini", "/v1/chat/completions", &OPENAI);
    run.expect_code(0);
    assert!(
        bodies.iter().all(|b| b.get("prompt_cache_key").is_none()),
        "{bodies:#?}"
    );
}
