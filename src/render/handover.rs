//! An escalation's handover as people read it (`escalations show`).

use crate::records::Handover;

pub fn render(h: &Handover) -> String {
    let mut out = format!("Request: {}\n", h.request);
    if h.checked.is_empty() {
        out.push_str("Checked: nothing yet\n");
    } else {
        out.push_str("Checked:\n");
        for c in &h.checked {
            out.push_str(&format!("  - {c}\n"));
        }
    }
    out.push_str(&format!("Problem: {}\n", h.problem));
    out.push_str(&format!("Suggested next step: {}\n", h.next_step));
    out
}
