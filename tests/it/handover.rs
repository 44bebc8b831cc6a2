//! Escalation handovers: what a person reads to act without redoing the agent's work.

use agentrun::machine::escalate::Raise;
use agentrun::model::{Message, Part, Role};
use agentrun::store::Facts;
use serde_json::json;

#[test]
fn a_handover_names_request_checks_problem_and_next_step() {
    let messages = vec![
        Message::text(Role::System, "sys"),
        Message::text(Role::User, "Refund order ORD-1001."),
        Message {
            role: Role::Assistant,
            content: vec![Part::ToolCall {
                id: "c1".into(),
                name: "lookup".into(),
                args: json!({"id": "ORD-1001"}),
            }],
        },
        Message::tool_result("c1", json!({"status": "delivered"}), false),
    ];
    let (summary, detail) = Raise {
        messages: &messages,
        problem: "refund failed 3 times with unavailable (3 attempts each)".into(),
        facts: Facts::BreakerOpen(agentrun::store::BreakerFacts {
            call_id: "c2".into(),
            tool: "refund".into(),
            args: json!({}),
            digest: "refund#00".into(),
        }),
    }
    .build();
    assert_eq!(
        summary,
        "refund failed 3 times with unavailable (3 attempts each)"
    );
    let text = agentrun::render::handover::render(&detail.handover);
    assert!(text.starts_with("Request: Refund order ORD-1001.\nChecked:\n  - lookup({\"id\":\"ORD-1001\"}) → {\"status\":\"delivered\"}\n"), "{text}");
    assert!(
        text.contains("Suggested next step: Check refund's service."),
        "{text}"
    );
}
