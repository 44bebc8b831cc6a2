//! The transcript invariant every provider relies on (docs/ARCHITECTURE.md §5): each tool call has
//! exactly one result, and each result answers a call made before it. The scripted
//! model checks it on every request, so every test that drives a run guards it.

use super::{Message, Part};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// FNV-1a, for the check's map of call ids. SipHash (std's default) was most of the
/// check's cost (issue 14: a few dozen short ids hashed three times a request); its
/// resistance to chosen collisions buys nothing here: the ids come from a script or
/// a model answering us, and the worst case is a slower check of one request.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// The first violation in `messages`, described; `None` when every call is paired.
pub fn unpaired(messages: &[Message]) -> Option<String> {
    // Call id → results seen so far.
    // Sized up front (issue 14: the scripted model checks every request; growing the
    // map step by step was most of the check's cost).
    let parts = messages.iter().map(|m| m.content.len()).sum();
    let mut calls: HashMap<&str, u32, BuildHasherDefault<Fnv>> =
        HashMap::with_capacity_and_hasher(parts, BuildHasherDefault::default());
    let mut order = Vec::with_capacity(parts);
    for part in messages.iter().flat_map(|m| &m.content) {
        match part {
            Part::ToolCall { id, .. } => {
                if calls.insert(id, 0).is_some() {
                    return Some(format!("tool call `{id}` appears twice"));
                }
                order.push(id.as_str());
            }
            Part::ToolResult { call_id, .. } => match calls.get_mut(call_id.as_str()) {
                None => return Some(format!("result for `{call_id}` answers no call before it")),
                Some(n) if *n > 0 => return Some(format!("call `{call_id}` has two results")),
                Some(n) => *n += 1,
            },
            _ => {}
        }
    }
    order
        .into_iter()
        .find(|id| calls[id] == 0)
        .map(|id| format!("tool call `{id}` has no result"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Role;
    use serde_json::json;

    fn call(id: &str) -> Message {
        Message {
            role: Role::Assistant,
            content: vec![Part::ToolCall {
                id: id.into(),
                name: "t".into(),
                args: json!({}),
            }],
        }
    }

    fn result(id: &str) -> Message {
        Message::tool_result(id, json!("ok"), false)
    }

    #[test]
    fn every_call_needs_exactly_one_result_and_every_result_a_call() {
        assert_eq!(unpaired(&[call("a"), result("a")]), None);
        assert_eq!(
            unpaired(&[call("a")]),
            Some("tool call `a` has no result".into())
        );
        assert_eq!(
            unpaired(&[result("a"), call("a")]),
            Some("result for `a` answers no call before it".into())
        );
        assert_eq!(
            unpaired(&[call("a"), result("a"), result("a")]),
            Some("call `a` has two results".into())
        );
    }
}
