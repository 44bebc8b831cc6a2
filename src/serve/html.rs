//! HTML for the console: escaping and the page frame.
//!
//! Every piece of stored text (task, tool outputs, model words, summaries, names) is
//! untrusted and goes through [`esc`] before it reaches a page; pages are built from
//! `format!` with escaped values only, so there is no template engine to misconfigure.
//! The frame links the embedded stylesheet and script and carries no inline script or
//! style, so the strict Content-Security-Policy (`super::SECURITY_HEADERS`) holds.

use std::fmt::Write;

/// Escapes text for an HTML text node or a double-quoted attribute value.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Which tab of the navigation is current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    Queue,
    Runs,
    None,
}

/// A whole page: `title` is escaped here, `body` must already be safe HTML. With a
/// session, the header says who is signed in and offers Log out.
pub fn page(title: &str, tab: Tab, who: Option<&super::auth::Session>, body: &str) -> String {
    let link = |href: &str, label: &str, t: Tab| {
        let current = if t == tab {
            " aria-current=\"page\""
        } else {
            ""
        };
        format!("<a href=\"{href}\"{current}>{label}</a>")
    };
    let mut out = String::with_capacity(body.len() + 600);
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · agentrun</title>\
         <link rel=\"stylesheet\" href=\"/assets/app.css\">\
         <script src=\"/assets/app.js\" defer></script></head>\
         <body><header><strong>agentrun</strong> <nav aria-label=\"Console\">{} {}</nav>{}</header>\
         <main>{body}</main></body></html>\n",
        esc(title),
        link("/", "Queue", Tab::Queue),
        link("/runs", "Runs", Tab::Runs),
        who.map(signed_in).unwrap_or_default(),
    );
    out
}

/// Who is signed in, and the Log out button.
fn signed_in(s: &super::auth::Session) -> String {
    let name = s
        .name
        .as_deref()
        .map(|n| format!("Signed in as <span class=\"who\">{}</span> ", esc(n)))
        .unwrap_or_else(|| "Signed in ".to_string());
    format!(
        "<form method=\"post\" action=\"/logout\" class=\"logout\">{name}{}\
         <button type=\"submit\">Log out</button></form>",
        csrf_field(&s.csrf)
    )
}

/// A `<pre>` of untrusted text.
pub fn pre(text: &str) -> String {
    format!("<pre>{}</pre>", esc(text))
}

/// The hidden fields every state-changing form carries.
pub fn csrf_field(csrf: &str) -> String {
    format!(
        "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        esc(csrf)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_in_untrusted_text_is_escaped() {
        assert_eq!(
            esc("<img src=x onerror=\"alert('1')\">&"),
            "&lt;img src=x onerror=&quot;alert(&#39;1&#39;)&quot;&gt;&amp;"
        );
    }

    #[test]
    fn the_title_is_escaped_and_the_frame_has_no_inline_script() {
        let p = page("<script>", Tab::None, None, "");
        assert!(p.contains("<title>&lt;script&gt; · agentrun</title>"));
        assert!(!p.contains("<script>"));
        assert!(!p.contains(" on"));
    }
}
