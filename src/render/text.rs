//! Text shaping by display width (CJK and emoji take two columns, combining marks
//! none), so tables stay aligned whatever the task text holds.

use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// Columns `s` takes on a terminal.
pub fn width(s: &str) -> usize {
    UnicodeWidthStr::width(s)
}

/// `s` cut to at most `max` columns, ending in `…` when cut. Control characters
/// (tabs, escapes) become spaces so a task cannot break the table or the terminal.
pub fn truncate(s: &str, max: usize) -> String {
    let clean: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if width(&clean) <= max {
        return clean;
    }
    let mut out = String::new();
    let mut used = 0;
    for c in clean.chars() {
        let w = c.width().unwrap_or(0);
        if used + w + 1 > max {
            break;
        }
        used += w;
        out.push(c);
    }
    out.push('…');
    out
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

#[cfg(test)]
mod tests {
    use super::*;

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
