//! Text shaping by display width (CJK and emoji take two columns, combining marks
//! none), so tables stay aligned whatever the task text holds.

use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// Columns `s` takes on a terminal.
pub fn width(s: &str) -> usize {
    UnicodeWidthStr::width(s)
}

/// `s` with each control character (tab, newline, escape) as a space: one line that
/// cannot move the cursor or restyle the terminal.
pub fn controls_as_spaces(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// `s` cut to at most `max` columns, ending in `…` when cut — at a word boundary
/// when one is in the second half of what fits (issue 27: `…the circuit for t…`), else
/// mid-word (a long URL, or text without spaces). Control characters (tabs, escapes)
/// become spaces so a task cannot break the table or the terminal.
pub fn truncate(s: &str, max: usize) -> String {
    let clean = controls_as_spaces(s);
    if width(&clean) <= max {
        return clean;
    }
    let mut end = 0; // bytes of `clean` that fit with the ellipsis
    let mut used = 0;
    for (i, c) in clean.char_indices() {
        let w = c.width().unwrap_or(0);
        if used + w + 1 > max {
            break;
        }
        used += w;
        end = i + c.len_utf8();
    }
    let cut_mid_word = clean[end..].starts_with(|c: char| !c.is_whitespace());
    if cut_mid_word
        && let Some(space) = clean[..end].rfind(char::is_whitespace)
        && width(&clean[..space]) * 2 >= used
    {
        end = space;
    }
    format!("{}…", clean[..end].trim_end())
}

/// The last columns of `s` that fit in `max`, starting at a word when one starts in
/// the first half of them, after `…` (the newest text of a stream: its end matters).
pub fn tail(s: &str, max: usize) -> String {
    let clean = controls_as_spaces(s);
    if width(&clean) <= max {
        return clean;
    }
    let mut start = clean.len();
    let mut used = 0;
    for (i, c) in clean.char_indices().rev() {
        let w = c.width().unwrap_or(0);
        if used + w + 1 > max {
            break;
        }
        used += w;
        start = i;
    }
    let cut_mid_word = clean[..start].ends_with(|c: char| !c.is_whitespace());
    if cut_mid_word
        && let Some(space) = clean[start..].find(char::is_whitespace)
        && width(&clean[start + space..]) * 2 >= used
    {
        start += space;
    }
    format!("…{}", clean[start..].trim_start())
}

/// `s` padded with spaces to `cols` columns (left-aligned).
pub fn pad(s: &str, cols: usize) -> String {
    let w = width(s);
    format!("{s}{}", " ".repeat(cols.saturating_sub(w)))
}

/// `s` padded on the left to `cols` columns (right-aligned).
pub fn pad_left(s: &str, cols: usize) -> String {
    let w = width(s);
    format!("{}{s}", " ".repeat(cols.saturating_sub(w)))
}

/// Long text folded for reading: at most `max_lines` lines and `max_bytes` bytes,
/// then `… (N more bytes)`, so a 60 KB tool result does not bury the transcript.
pub fn fold(s: &str, max_lines: usize, max_bytes: usize) -> String {
    let mut end = s.len();
    if let Some((i, _)) = s.match_indices('\n').nth(max_lines.saturating_sub(1)) {
        end = end.min(i);
    }
    if end > max_bytes {
        end = max_bytes;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
    }
    if end >= s.len() {
        return s.to_string();
    }
    let rest = s.len() - end;
    format!(
        "{}\n… ({rest} more byte{})",
        s[..end].trim_end(),
        if rest == 1 { "" } else { "s" }
    )
}

/// Every line after the first indented by `by` spaces.
pub fn indent(s: &str, by: usize) -> String {
    s.replace('\n', &format!("\n{}", " ".repeat(by)))
}

/// Untrusted text for a place agentrun's own words surround it on one line (an
/// escalation's summary, a question, a reason): [`plain`], with each line break shown
/// as ` ⏎ ` — a line break would let the text start a line of its own that reads as
/// agentrun's (`Decision: approve by …`; issue 22).
pub fn one_line(s: &str) -> String {
    plain(s.trim_end()).replace('\n', " ⏎ ")
}

/// The colour codes [`crate::render::Style`] writes; the only escapes a human view keeps.
const OWN_SGR: [&str; 7] = ["0", "1", "2", "31", "32", "33", "36"];

/// Text made safe for a terminal (issue 12 item 8): tool output, `ask_user` questions
/// and answers can hold ESC/OSC sequences (an OSC 52 clipboard write, a cursor move
/// that hides a line, a title change) or a carriage return that overprints. Every
/// control character except newline and tab is removed — with its escape sequence
/// when it starts one — as are bidirectional overrides, which can reorder what a
/// person reads. Only the plain colour codes our own [`crate::render::Style`] writes
/// survive. `--json` output never goes through this: it keeps the data.
pub fn terminal_safe(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c == '\x1b' {
            let rest = &s[i + 1..];
            if let Some(body) = rest.strip_prefix('[')
                && let Some(end) = body.find(|ch: char| !(ch.is_ascii_digit() || ch == ';'))
                && body[end..].starts_with('m')
                && OWN_SGR.contains(&&body[..end])
            {
                out.push_str(&s[i..i + 2 + end + 1]);
                for _ in 0..(1 + end + 1) {
                    chars.next();
                }
                continue;
            }
            skip_escape(&mut chars);
            continue;
        }
        let kept = c == '\n' || c == '\t' || !(c.is_control() || is_bidi_control(c));
        if kept {
            out.push(c);
        }
    }
    out
}

/// Untrusted text with every escape sequence and control character removed, our own
/// colour codes included (issue 22: `ESC[32mTRUSTED` from a tool passed
/// [`terminal_safe`], which keeps the codes agentrun writes itself). For text that
/// agentrun did not write and prints on its own line: descriptions an MCP server
/// sent, provider and tool error messages, a model's answer.
pub fn plain(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.char_indices().peekable();
    while let Some((_, c)) = chars.next() {
        if c == '\x1b' {
            skip_escape(&mut chars);
        } else if c == '\n' || c == '\t' || !(c.is_control() || is_bidi_control(c)) {
            out.push(c);
        }
    }
    out
}

/// Skips the rest of an escape sequence after ESC: CSI (`[` … final byte), OSC/DCS/
/// APC/PM/SOS (up to BEL or ST), or a single following character.
fn skip_escape(chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>) {
    match chars.peek().map(|(_, c)| *c) {
        Some('[') => {
            chars.next();
            for (_, c) in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        }
        Some(']' | 'P' | '_' | '^' | 'X') => {
            chars.next();
            while let Some((_, c)) = chars.next() {
                if c == '\x07' {
                    break;
                }
                if c == '\x1b' {
                    if chars.peek().map(|(_, c)| *c) == Some('\\') {
                        chars.next();
                    }
                    break;
                }
            }
        }
        Some(_) => {
            chars.next();
        }
        None => {}
    }
}

fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_safe_strips_escapes_but_keeps_our_colours() {
        let evil = "a\x1b]52;c;ZXZpbA==\x07b\x1b[2Jc\rd\x1b[8me\u{202E}f\x1b]0;title\x1b\\g\x07h";
        assert_eq!(terminal_safe(evil), "abcdefgh");
        let ours = "\x1b[1mbold\x1b[0m\n\tx \x1b[31mred\x1b[0m";
        assert_eq!(terminal_safe(ours), ours);
    }

    /// Issue 27: progress and tables said `…the circuit for t…`.
    #[test]
    fn truncate_cuts_at_a_word_boundary_when_there_is_one() {
        let s = "refund failed 3 times; the circuit for this call is open";
        assert_eq!(truncate(s, 42), "refund failed 3 times; the circuit for…");
        assert!(width(&truncate(s, 42)) <= 42);
        assert_eq!(truncate(s, 39), "refund failed 3 times; the circuit for…");
        assert_eq!(truncate(s, 38), "refund failed 3 times; the circuit…");
        // No word boundary in the second half: cut mid-word rather than lose it all.
        let url = "see https://example.com/a/very/long/path/to/a/page";
        assert_eq!(truncate(url, 20), "see https://example…");
        assert_eq!(truncate("Spend some money on it", 16), "Spend some…");
        assert_eq!(
            tail("the model writes a long line of text", 20),
            "…a long line of text"
        );
        assert_eq!(tail("abcdefghij", 5), "…ghij");
        assert_eq!(tail("short", 10), "short");
    }

    #[test]
    fn one_line_keeps_untrusted_text_on_agentruns_line_without_colours() {
        let forged = "\x1b[32mTRUSTED\x1b[0m ok?\r\n\nDecision: approve by alice\n";
        assert_eq!(
            one_line(forged),
            "TRUSTED ok? ⏎  ⏎ Decision: approve by alice"
        );
        assert_eq!(plain("\x1b[32mgreen\x1b[0m\n\tx"), "green\n\tx");
    }

    #[test]
    fn truncate_counts_columns_not_bytes() {
        assert_eq!(truncate("日本語のタスク", 7), "日本語…");
        assert_eq!(width(&truncate("日本語のタスク", 7)), 7);
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("a\tb", 10), "a b");
    }

    #[test]
    fn pad_aligns_wide_text() {
        assert_eq!(pad("日本", 6), "日本  ");
        assert_eq!(pad_left("7", 3), "  7");
    }

    #[test]
    fn fold_keeps_short_text_and_cuts_long_text_by_lines_then_bytes() {
        assert_eq!(fold("a\nb", 5, 400), "a\nb");
        assert_eq!(fold("1\n2\n3\n4", 2, 400), "1\n2\n… (4 more bytes)");
        assert_eq!(fold(&"x".repeat(10), 5, 4), "xxxx\n… (6 more bytes)");
    }
}
