//! What checking a stdio MCP server's lines costs (issue 22): every line a server
//! writes goes through `tools::mcp::depth::pump` (a byte scan for depth and length, and
//! one more copy) before the MCP SDK parses it. `cargo bench --bench mcp_lines` prints,
//! per line size, the median time per line through the pump, through a plain copy
//! (what the bytes cost without the check), and parsed by serde_json (what the SDK does
//! with each line anyway), with the pump's extra cost as a share of that parse.
//! Results: docs/bench.md, "MCP line check".

use agentrun::tools::mcp::depth::pump;
use serde_json::{Value, json};
use std::time::Instant;

/// Samples per size; the median is reported.
const SAMPLES: usize = 31;

/// A `tools/call` answer of about `bytes`: half text, half structured content.
fn line(bytes: usize) -> Vec<u8> {
    let n = (bytes / 2 / 60).max(1);
    let items: Vec<Value> = (0..n)
        .map(|i| json!({"name": format!("item-{i}"), "value": i, "tags": ["a", "b"], "ok": true}))
        .collect();
    let text =
        "lorem ipsum dolor sit amet, \\\"quoted\\\" [not a bracket] ".repeat(bytes / 2 / 56 + 1);
    let answer = json!({
        "jsonrpc": "2.0", "id": 7,
        "result": {"content": [{"type": "text", "text": text}], "structuredContent": {"items": items}},
    });
    let mut out = answer.to_string().into_bytes();
    out.push(b'\n');
    out
}

/// Median seconds per line of `f` over `SAMPLES` runs, each handling `lines` lines.
fn per_line(lines: usize, mut f: impl FnMut()) -> f64 {
    let mut samples: Vec<f64> = (0..SAMPLES)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64() / lines as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[SAMPLES / 2]
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let mut table = String::from(
        "| line | pump | plain copy | serde_json parse | pump − copy, share of the parse |\n",
    );
    table.push_str("|---|---|---|---|---|\n");
    let sizes = [
        ("1 KiB", 1 << 10, 2000),
        ("64 KiB", 64 << 10, 100),
        ("1 MiB", 1 << 20, 8),
    ];
    for (label, bytes, reps) in sizes {
        let line = line(bytes);
        // One stream of `reps` lines, as a server writes them.
        let stream = line.repeat(reps);
        let mut sink = Vec::with_capacity(stream.len());
        let pumped = per_line(reps, || {
            sink.clear();
            rt.block_on(pump(stream.as_slice(), &mut sink));
        });
        assert_eq!(sink, stream, "the pump passes the lines unchanged");
        let copied = per_line(reps, || {
            sink.clear();
            rt.block_on(async {
                let _ = tokio::io::copy(&mut stream.as_slice(), &mut sink).await;
            });
        });
        let parsed = per_line(reps, || {
            for one in stream.chunks(line.len()) {
                let v: Value = serde_json::from_slice(one).expect("it parses");
                std::hint::black_box(v);
            }
        });
        let us = |s: f64| format!("{:.1} µs", s * 1e6);
        table.push_str(&format!(
            "| {label} | {} | {} | {} | {:.0} % |\n",
            us(pumped),
            us(copied),
            us(parsed),
            (pumped - copied) / parsed * 100.0
        ));
    }
    let _ = agentrun::outln!("{table}");
}
