//! What a stdio MCP server writes, checked before the MCP SDK reads it (issue 22).
//!
//! The SDK parses each line with serde_json, whose recursion limit (128) makes a deeper
//! message unparseable, and it drops a line over 16 MiB unread; either way the line is
//! ignored as noise, so a call whose answer nested ~125 levels deep (or was too long)
//! waited out its whole timeout. The SDK has no hook for either, so every line from the
//! server passes through [`pump`] first: an answer nested deeper than [`MAX_DEPTH`] or
//! longer than [`MAX_LINE`] is replaced by a JSON-RPC error for the same request id,
//! which fails the call `tool_bug` at once. Other lines pass unchanged; the check is
//! one pass over the bytes, without parsing, that skips through strings with `memchr`
//! (docs/bench.md, "MCP line check", gives its cost next to the SDK's parse).

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

/// Far deeper than any tool result a model can use, and below serde_json's limit with
/// the JSON-RPC envelope around it.
pub const MAX_DEPTH: usize = 100;

/// The SDK's own bound on a line (`DEFAULT_MAX_LINE_LENGTH`): longer lines it drops.
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// The JSON-RPC code of the replacement error: "parse error", which classifies as
/// `tool_bug` (the server sent what no client can read).
pub const UNREADABLE: i32 = -32700;

/// Copies `from` to `to` line by line, replacing each answer too deep or too long to
/// read (see the module doc). Ends at EOF or when either side fails.
pub async fn pump(from: impl AsyncRead + Unpin, mut to: impl AsyncWrite + Unpin) {
    let mut from = BufReader::with_capacity(64 * 1024, from);
    let mut line = Vec::new();
    loop {
        line.clear();
        let Some(scan) = read_line(&mut from, &mut line).await else {
            break;
        };
        let why = if scan.len > MAX_LINE {
            Some(format!(
                "is {} bytes long, over agentrun's limit of {} MiB",
                scan.len,
                MAX_LINE >> 20
            ))
        } else if scan.max > MAX_DEPTH {
            Some(format!(
                "is nested {} levels deep, over agentrun's limit of {MAX_DEPTH}",
                scan.max
            ))
        } else {
            None
        };
        let replaced = why.map(|why| replacement(&line, &why));
        let out = replaced.as_deref().unwrap_or(&line);
        if to.write_all(out).await.is_err() || to.flush().await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// Reads one line (its first [`MAX_LINE`] bytes into `line`, the rest skipped), scanning
/// all of it. `None` at EOF or on a read error.
async fn read_line(from: &mut (impl AsyncBufReadExt + Unpin), line: &mut Vec<u8>) -> Option<Scan> {
    let mut scan = Scan::default();
    loop {
        let buf = from.fill_buf().await.ok()?;
        if buf.is_empty() {
            // A last line without its newline is still delivered.
            return (scan.len > 0).then_some(scan);
        }
        let (chunk, done) = match memchr::memchr(b'\n', buf) {
            Some(i) => (&buf[..=i], true),
            None => (buf, false),
        };
        scan.extend(chunk);
        let room = MAX_LINE.saturating_sub(line.len());
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = chunk.len();
        from.consume(used);
        if done {
            return Some(scan);
        }
    }
}

/// A JSON-RPC error answering the request `line` answers; nothing when it answers none
/// (no top-level id, or a request or notification from the server: a made-up answer
/// could settle one of ours that happens to share its id).
fn replacement(line: &[u8], why: &str) -> Vec<u8> {
    let Some(id) = answered_id(line) else {
        return Vec::new();
    };
    let message = format!("the server's answer {why}");
    let mut out = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": UNREADABLE, "message": message},
    })
    .to_string()
    .into_bytes();
    out.push(b'\n');
    out
}

/// The top-level `"id"` of an answer (a number or a string), when the line has one and
/// no top-level `"method"`.
fn answered_id(line: &[u8]) -> Option<serde_json::Value> {
    let mut scan = Scan::default();
    let mut id = None;
    for (i, &b) in line.iter().enumerate() {
        // A key of the top-level object starts with a quote at depth 1, outside strings.
        if scan.depth == 1 && !scan.in_string && b == b'"' {
            let rest = &line[i..];
            if let Some(value) = key_value(rest, br#""id""#) {
                id = first_value(value);
            } else if key_value(rest, br#""method""#).is_some() {
                return None;
            }
        }
        scan.push(b);
    }
    id.filter(|v| v.is_number() || v.is_string())
}

/// What follows `key` and its colon, when `text` starts with that key.
fn key_value<'a>(text: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    text.strip_prefix(key)?
        .trim_ascii_start()
        .strip_prefix(b":")
}

/// The JSON value at the start of `text` (whatever follows it is ignored).
fn first_value(text: &[u8]) -> Option<serde_json::Value> {
    let mut values = serde_json::Deserializer::from_slice(text).into_iter();
    values.next()?.ok()
}

/// Nesting depth and length of JSON text read byte by byte (strings and escapes skipped).
#[derive(Default)]
struct Scan {
    len: usize,
    depth: usize,
    max: usize,
    in_string: bool,
    escaped: bool,
}

impl Scan {
    /// [`Scan::push`] for every byte of `bytes`, skipping through strings to the next
    /// quote or backslash (most of a tool's answer is text).
    fn extend(&mut self, bytes: &[u8]) {
        self.len += bytes.len();
        let mut i = 0;
        while i < bytes.len() {
            if self.in_string && !self.escaped {
                match memchr::memchr2(b'"', b'\\', &bytes[i..]) {
                    Some(j) => i += j,
                    None => return,
                }
            }
            self.step(bytes[i]);
            i += 1;
        }
    }

    fn push(&mut self, b: u8) {
        self.len += 1;
        self.step(b);
    }

    fn step(&mut self, b: u8) {
        if self.in_string {
            match (self.escaped, b) {
                (true, _) => self.escaped = false,
                (false, b'\\') => self.escaped = true,
                (false, b'"') => self.in_string = false,
                _ => {}
            }
            return;
        }
        match b {
            b'"' => self.in_string = true,
            b'{' | b'[' => {
                self.depth += 1;
                self.max = self.max.max(self.depth);
            }
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(levels: usize, id: &str) -> String {
        let inner = format!("{}1{}", "[".repeat(levels), "]".repeat(levels));
        format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"x":{inner}}}}}"#)
    }

    async fn through(text: &str) -> String {
        let mut out = Vec::new();
        pump(text.as_bytes(), &mut out).await;
        String::from_utf8(out).unwrap()
    }

    #[tokio::test]
    async fn lines_within_the_bounds_pass_unchanged() {
        let line = nested(50, "7");
        let two = format!("{line}\n{line}\n");
        assert_eq!(through(&two).await, two);
        // Brackets inside strings do not count, escaped quotes included.
        let quoted = format!(r#"{{"id":1,"result":"\"{}"}}"#, "[{".repeat(500));
        assert_eq!(through(&format!("{quoted}\n")).await, format!("{quoted}\n"));
        // A last line without its newline.
        assert_eq!(through(&line).await, line);
    }

    #[tokio::test]
    async fn a_deeper_answer_becomes_an_error_for_the_same_id() {
        for id in ["3", r#""req-9""#, r#""a,b}""#] {
            let out = through(&format!("{}\n", nested(125, id))).await;
            let out: serde_json::Value = serde_json::from_str(&out).expect("it parses");
            assert_eq!(out["id"].to_string(), id);
            assert_eq!(out["error"]["code"], UNREADABLE);
            let message = out["error"]["message"].as_str().unwrap();
            assert!(message.contains("nested 127 levels deep"), "{message}");
        }
        // An id after the result, and ids nested inside it, are told apart.
        let late = format!(
            r#"{{"result":{{"id":99,"x":{}}},"id":4}}"#,
            nested(120, "5")
        );
        let out: serde_json::Value = serde_json::from_str(&through(&late).await).unwrap();
        assert_eq!(out["id"], 4);
    }

    #[tokio::test]
    async fn a_longer_answer_becomes_an_error_and_the_next_line_still_passes() {
        let big = format!(
            r#"{{"jsonrpc":"2.0","id":8,"result":{{"text":"{}"}}}}"#,
            "x".repeat(MAX_LINE)
        );
        let next = nested(3, "9");
        let out = through(&format!("{big}\n{next}\n")).await;
        let (first, rest) = out.split_once('\n').unwrap();
        let first: serde_json::Value = serde_json::from_str(first).unwrap();
        assert_eq!(first["id"], 8);
        let message = first["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("over agentrun's limit of 16 MiB"),
            "{message}"
        );
        assert_eq!(rest, format!("{next}\n"));
    }

    #[test]
    fn skipping_through_strings_counts_as_byte_by_byte_does() {
        let text = br#"{"a":"x\\\"[{","b":[[{"c":"]]\\"}]],"d":"\\"}"#;
        let mut one = Scan::default();
        text.iter().for_each(|&b| one.push(b));
        // Any split into two pieces, as reads may cut a line.
        for cut in 0..=text.len() {
            let mut two = Scan::default();
            two.extend(&text[..cut]);
            two.extend(&text[cut..]);
            let state = |s: &Scan| (s.len, s.depth, s.max, s.in_string, s.escaped);
            assert_eq!(state(&two), state(&one), "cut at {cut}");
        }
        assert_eq!((one.max, one.depth, one.in_string), (4, 0, false));
    }

    #[tokio::test]
    async fn a_deep_line_that_answers_nothing_is_dropped() {
        let deep = "[".repeat(200);
        let notification = format!(r#"{{"method":"x","params":{deep}}}"#);
        assert_eq!(through(&format!("{notification}\n")).await, "");
        // A request from the server: an answer made up for its id could settle ours.
        let request = format!(r#"{{"id":1,"method":"sampling/createMessage","params":{deep}}}"#);
        assert_eq!(through(&format!("{request}\n")).await, "");
    }
}
