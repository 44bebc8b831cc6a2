//! Server-sent events, as the two streaming APIs send them: bytes in, whole events out.
//!
//! Only what the providers use is handled (WHATWG "event stream" rules, reduced):
//! `event:` and `data:` fields, several `data:` lines joined by `\n`, comment lines
//! (`: OPENROUTER PROCESSING` keep-alives) ignored, LF, CRLF or CR line ends, and an
//! event ends at a blank line. Bytes may arrive split anywhere, even inside a UTF-8
//! character, so lines are cut from raw bytes and decoded whole.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; `None` when absent (OpenAI sends only `data:`).
    pub event: Option<String>,
    pub data: String,
}

/// An incremental parser. Feed it chunks; it returns the events they completed.
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    event: Option<String>,
    data: Vec<String>,
    /// A CR ended the last line: a following LF belongs to it.
    after_cr: bool,
}

impl SseParser {
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        for &b in bytes {
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    let line = std::mem::take(&mut self.buf);
                    if let Some(ev) = self.line(&String::from_utf8_lossy(&line)) {
                        out.push(ev);
                    }
                }
                _ => self.buf.push(b),
            }
        }
        out
    }

    /// The stream ended: an event not closed by a blank line is still dispatched when
    /// it has data (some servers close right after the last `data:` line).
    pub fn finish(&mut self) -> Option<SseEvent> {
        if !self.buf.is_empty() {
            let line = std::mem::take(&mut self.buf);
            if let Some(ev) = self.line(&String::from_utf8_lossy(&line)) {
                return Some(ev);
            }
        }
        self.dispatch()
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_string()),
            "data" => self.data.push(value.to_string()),
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = self.event.take();
        if self.data.is_empty() {
            return None;
        }
        let data = std::mem::take(&mut self.data).join("\n");
        Some(SseEvent { event, data })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: event.map(str::to_string),
            data: data.to_string(),
        }
    }

    #[test]
    fn events_split_anywhere_come_out_whole() {
        let text = "event: a\ndata: {\"x\":\"é\"}\n\n: keep-alive\n\ndata: 1\ndata: 2\r\n\r\ndata: [DONE]\n\n";
        let bytes = text.as_bytes();
        for cut in 0..bytes.len() {
            let mut p = SseParser::default();
            let mut got = p.feed(&bytes[..cut]);
            got.extend(p.feed(&bytes[cut..]));
            assert_eq!(
                got,
                [
                    ev(Some("a"), "{\"x\":\"é\"}"),
                    ev(None, "1\n2"),
                    ev(None, "[DONE]")
                ],
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn an_unterminated_last_event_is_dispatched_at_the_end() {
        let mut p = SseParser::default();
        assert!(p.feed(b"data: last").is_empty());
        assert_eq!(p.finish(), Some(ev(None, "last")));
        assert_eq!(p.finish(), None);
    }
}
