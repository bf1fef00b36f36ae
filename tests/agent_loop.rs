//! `examples/agent_loop.rs`: the dispatch loop with a scripted model that retries sends one
//! email per user message (the example checks its own claims).

#[allow(dead_code)]
#[path = "../examples/agent_loop.rs"]
mod example;

#[test]
fn the_agent_loop_sends_one_email_per_user_message_despite_the_retries() {
    example::main().expect("the example's claims hold");
}

#[tokio::test]
async fn an_unknown_tool_and_bad_arguments_are_errors_the_model_reads() {
    let unknown = example::ToolCall {
        name: "drop_database".into(),
        arguments: serde_json::json!({}),
    };
    let error = example::dispatch(&unknown).await.unwrap_err();
    assert!(error.contains("no tool named"), "{error}");
    let bad = example::ToolCall {
        name: "find_contact".into(),
        arguments: serde_json::json!({ "nom": "Ada" }),
    };
    let error = example::dispatch(&bad).await.unwrap_err();
    assert!(error.contains("bad arguments"), "{error}");
}

/// The model reads idem's words for a model, not the developer's: here a write outside any
/// turn.
#[tokio::test]
async fn the_model_reads_the_model_text_of_an_idem_error() {
    let send = example::ToolCall {
        name: "send_email".into(),
        arguments: serde_json::json!({ "to": "ada@example.com", "subject": "hi" }),
    };
    let error = example::dispatch(&send).await.unwrap_err();
    let expected = idem_tools::Error::NoTurn { tool: "send_email" };
    assert_eq!(error, expected.model_text());
    assert_ne!(error, expected.to_string());
    assert!(!error.contains("Turn::") && !error.contains('`'), "{error}");
}
