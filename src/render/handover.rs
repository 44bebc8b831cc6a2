//! An escalation's handover as people read it (`escalations show`).

use crate::records::Handover;
use crate::text::one_line;

/// Each field on its own line, untrusted text made [`one_line`]: a tool's error in
/// `problem` cannot start a line that reads as agentrun's (issue 22).
pub fn render(h: &Handover) -> String {
    let mut out = format!("Request: {}\n", one_line(&h.request));
    if h.checked.is_empty() {
        out.push_str("Checked: nothing yet\n");
    } else {
        out.push_str("Checked:\n");
        for c in &h.checked {
            out.push_str(&format!("  - {}\n", one_line(c)));
        }
    }
    out.push_str(&format!("Problem: {}\n", one_line(&h.problem)));
    out.push_str(&format!(
        "Suggested next step: {}\n",
        one_line(&h.next_step)
    ));
    out
}
