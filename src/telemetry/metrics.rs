//! agentrun's metrics in Prometheus text (docs/observability.md, "Metrics"), served by
//! `agentrun worker --metrics-addr`: runs started and ended, steps, cost, tool attempts
//! by tool and error class, retries, escalations, and the GenAI client histograms
//! `gen_ai.client.token.usage` and `gen_ai.client.operation.duration`.
//!
//! Off unless a process serves them: then every record is one relaxed atomic load.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

static ON: AtomicBool = AtomicBool::new(false);

/// Label values in a fixed order: (name, value).
type Labels = Vec<(&'static str, String)>;

#[derive(Default)]
struct Registry {
    counters: BTreeMap<(&'static str, Labels), f64>,
    histograms: BTreeMap<(&'static str, Labels), Histogram>,
}

#[derive(Default, Clone)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

/// The GenAI conventions' advised bucket bounds.
const TOKEN_BUCKETS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];
const SECONDS_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];

/// Whether metrics are kept in this process.
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Starts keeping metrics (a process that serves them).
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

fn with(f: impl FnOnce(&mut Registry)) {
    if !on() {
        return;
    }
    let mut r = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    f(r.get_or_insert_with(Registry::default));
}

/// Adds `by` to counter `name` with `labels`.
pub fn add(name: &'static str, labels: Labels, by: f64) {
    with(|r| *r.counters.entry((name, labels)).or_default() += by);
}

fn observe(name: &'static str, labels: Labels, bounds: &[f64], v: f64) {
    with(|r| {
        let h = r.histograms.entry((name, labels)).or_default();
        if h.counts.is_empty() {
            h.counts = vec![0; bounds.len()];
        }
        for (i, b) in bounds.iter().enumerate() {
            if v <= *b {
                h.counts[i] += 1;
            }
        }
        h.sum += v;
        h.count += 1;
    });
}

/// One model request's tokens (`gen_ai.client.token.usage`).
pub fn tokens(provider: &str, model: &str, token_type: &'static str, n: u64) {
    let labels = vec![
        ("gen_ai_operation_name", "chat".to_string()),
        ("gen_ai_provider_name", provider.to_string()),
        ("gen_ai_request_model", model.to_string()),
        ("gen_ai_token_type", token_type.to_string()),
    ];
    observe(
        "gen_ai_client_token_usage",
        labels,
        &TOKEN_BUCKETS,
        n as f64,
    );
}

/// One model request's duration (`gen_ai.client.operation.duration`).
pub fn duration(provider: &str, model: &str, error: Option<&str>, seconds: f64) {
    let mut labels = vec![
        ("gen_ai_operation_name", "chat".to_string()),
        ("gen_ai_provider_name", provider.to_string()),
        ("gen_ai_request_model", model.to_string()),
    ];
    if let Some(e) = error {
        labels.push(("error_type", e.to_string()));
    }
    observe(
        "gen_ai_client_operation_duration_seconds",
        labels,
        &SECONDS_BUCKETS,
        seconds,
    );
}

/// Every metric, in the Prometheus text exposition format.
pub fn render() -> String {
    let r = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    let mut out = String::new();
    let Some(r) = r.as_ref() else {
        return out;
    };
    let mut typed = std::collections::BTreeSet::new();
    for ((name, labels), v) in &r.counters {
        if typed.insert(*name) {
            out.push_str(&format!("# TYPE {name} counter\n"));
        }
        out.push_str(&format!("{name}{} {v}\n", fmt_labels(labels, None)));
    }
    for ((name, labels), h) in &r.histograms {
        let bounds: &[f64] = if name.contains("token") {
            &TOKEN_BUCKETS
        } else {
            &SECONDS_BUCKETS
        };
        if typed.insert(*name) {
            out.push_str(&format!("# TYPE {name} histogram\n"));
        }
        for (b, c) in bounds.iter().zip(&h.counts) {
            let le = fmt_labels(labels, Some(&b.to_string()));
            out.push_str(&format!("{name}_bucket{le} {c}\n"));
        }
        let inf = fmt_labels(labels, Some("+Inf"));
        out.push_str(&format!("{name}_bucket{inf} {}\n", h.count));
        let l = fmt_labels(labels, None);
        out.push_str(&format!(
            "{name}_sum{l} {}\n{name}_count{l} {}\n",
            h.sum, h.count
        ));
    }
    out
}

fn fmt_labels(labels: &Labels, le: Option<&str>) -> String {
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

/// Label values come from tool names and model specs: escaped as the format says.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Serves `GET /metrics` on `listener` from a thread of its own, for as long as the
/// process lives. Anything else is answered 404; a slow or broken client costs only
/// its own connection's turn.
pub fn serve(listener: std::net::TcpListener) -> std::io::Result<()> {
    enable();
    std::thread::Builder::new()
        .name("agentrun-metrics".into())
        .spawn(move || {
            for conn in listener.incoming().flatten() {
                let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(5)));
                let _ = conn.set_write_timeout(Some(std::time::Duration::from_secs(5)));
                let _ = answer(conn);
            }
        })?;
    Ok(())
}

fn answer(conn: std::net::TcpStream) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    // The headers, up to the blank line (bounded: a client cannot hold the thread).
    let mut header = String::new();
    for _ in 0..100 {
        header.clear();
        if reader.read_line(&mut header)? == 0 || header.trim().is_empty() {
            break;
        }
    }
    let path = line.split_whitespace().nth(1).unwrap_or("");
    let mut conn = conn;
    if line.starts_with("GET ") && (path == "/metrics" || path.starts_with("/metrics?")) {
        let body = render();
        write!(
            conn,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    } else {
        write!(
            conn,
            "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_and_histograms_render_in_the_text_format() {
        enable();
        add("agentrun_test_total", vec![("tool", "a\"b".into())], 2.0);
        tokens("script", "m", "input", 100);
        let text = render();
        assert!(
            text.contains("# TYPE agentrun_test_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("agentrun_test_total{tool=\"a\\\"b\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("gen_ai_client_token_usage_bucket{gen_ai_operation_name=\"chat\",gen_ai_provider_name=\"script\",gen_ai_request_model=\"m\",gen_ai_token_type=\"input\",le=\"256\"} 1"), "{text}");
        assert!(text.contains("le=\"64\"} 0"), "{text}");
    }
}
