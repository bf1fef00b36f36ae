//! `From<Error> for rmcp::ErrorData` (the `rmcp` feature), and which errors a model reads.
//!
//! An idem error reaches an MCP client in one of two ways:
//!
//! * **A tool result the model reads** (`isError: true`): the errors that say something true
//!   about the action and what to do next ([`Error::is_for_model`]) — [`Error::BudgetExhausted`],
//!   [`Error::TurnBudgetExhausted`], [`Error::ToolBudgetExhausted`], [`Error::PayloadMismatch`],
//!   [`Error::InFlight`], [`Error::Interrupted`], [`Error::NotReplayable`],
//!   [`Error::LeaseLost`] (the call was stopped before its result was recorded: the action may
//!   or may not have taken effect, and the model must not call it again blindly),
//!   [`Error::TransactionEnded`], [`Error::CommitFailed`] and [`Error::RunOverlap`]. Their text ([`model_message`],
//!   [`Error::model_text`]) is written for a model: it names no Rust API.
//! * **A protocol error** (JSON-RPC `error`): everything else — a missing turn, a store that is
//!   down, a record that does not decode, a duplicate tool name. These are the server's
//!   problem, not the model's; the message is the developer-facing `Display` text.
//!
//! `rmcp::ErrorData` is always a protocol error, so the conversion marks the first kind in its
//! `data` (`{"idem": {"error": "budget_exhausted", "forModel": true, …}}`); `idem_tools::mcp`'s
//! server wrapper and its `ToolError` turn those into `isError` tool results.

use rmcp::ErrorData;
use rmcp::model::ErrorCode;
use serde_json::json;

use crate::error::Error;

/// A short, stable name of the error's kind (`"budget_exhausted"`, `"store"`, …), as put in
/// `data.idem.error` of an [`ErrorData`]: [`Error::code`].
pub fn error_kind(error: &Error) -> &'static str {
    error.code()
}

/// The text a model reads for an error that is a tool result (`isError: true`), or `None` for
/// an error that is a protocol error: [`Error::model_text`] if [`Error::is_for_model`].
///
/// ```
/// # extern crate idem_tools_runtime as idem_tools;
/// use idem_tools::{Error, Key};
/// use idem_tools::mcp::model_message;
///
/// let key = Key::from_bytes([7; 32]).short();
/// let stuck = Error::BudgetExhausted { tool: "send", key, attempts: 3, limit: 3 };
/// assert!(model_message(&stuck).unwrap().contains("Stop retrying"));
/// assert!(model_message(&Error::NoTurn { tool: "send" }).is_none());
/// ```
pub fn model_message(error: &Error) -> Option<String> {
    error.is_for_model().then(|| error.model_text())
}

/// A protocol error carrying `data.idem = {"error": kind, "forModel": bool, "tool": …}`; for an
/// error the model reads, the message is [`model_message`] and the code `-32602` (invalid
/// params) for [`Error::PayloadMismatch`], else `-32603` (internal error).
impl From<Error> for ErrorData {
    fn from(error: Error) -> Self {
        let kind = error_kind(&error);
        let tool = match &error {
            Error::NoTurn { tool }
            | Error::BudgetExhausted { tool, .. }
            | Error::TurnBudgetExhausted { tool, .. }
            | Error::ToolBudgetExhausted { tool, .. }
            | Error::PayloadMismatch { tool, .. }
            | Error::InFlight { tool, .. }
            | Error::Decode { tool, .. }
            | Error::Encode { tool, .. }
            | Error::Reentrant { tool, .. }
            | Error::Interrupted { tool, .. }
            | Error::NotReplayable { tool, .. }
            | Error::TransactionEnded { tool, .. }
            | Error::CommitFailed { tool, .. }
            | Error::NameClash { tool, .. } => Some(*tool),
            Error::DuplicateTool { name } | Error::SharedAcrossTypes { name, .. } => Some(*name),
            Error::Store { .. }
            | Error::LeaseLost { .. }
            | Error::CorruptRecord { .. }
            | Error::UnreadableRecord { .. }
            | Error::ModelStepDiverged { .. }
            | Error::RunOverlap { .. }
            | Error::TokenBudgetExhausted { .. }
            | Error::ModelStepsExhausted { .. }
            | Error::Config(_) => None,
        };
        let code = match &error {
            Error::PayloadMismatch { .. } => ErrorCode::INVALID_PARAMS,
            _ => ErrorCode::INTERNAL_ERROR,
        };
        let (message, for_model) = match model_message(&error) {
            Some(text) => (text, true),
            None => (error.to_string(), false),
        };
        let data = json!({ "idem": { "error": kind, "forModel": for_model, "tool": tool } });
        ErrorData::new(code, message, Some(data))
    }
}

/// Whether `error` came from an idem error that the model should read as a tool result
/// (`data.idem.forModel`).
pub fn is_for_model(error: &ErrorData) -> bool {
    error
        .data
        .as_ref()
        .and_then(|data| data.pointer("/idem/forModel"))
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Key;
    use crate::error::Mismatch;

    fn key() -> crate::key::ShortKey {
        Key::from_bytes([1; 32]).short()
    }

    #[test]
    fn the_errors_a_model_reads_are_marked_and_worded_for_a_model() {
        let for_model: Vec<Error> = crate::model_text::every_error()
            .into_iter()
            .filter(Error::is_for_model)
            .collect();
        assert_eq!(for_model.len(), 11);
        for error in for_model {
            let kind = error_kind(&error);
            let text = error.model_text();
            let data = ErrorData::from(error);
            assert!(is_for_model(&data), "{kind}");
            assert_eq!(data.message, text, "{kind}");
            assert_eq!(data.data.unwrap()["idem"]["error"], kind);
        }
    }

    /// A call stopped before its result was recorded (its lease lost) may have acted: the
    /// model reads that, as a tool result, rather than a protocol error telling the developer
    /// to raise a lease (a client that retries protocol errors would run it again).
    #[test]
    fn a_call_that_lost_its_lease_is_a_result_the_model_reads() {
        let data = ErrorData::from(Error::LeaseLost { key: key() });
        assert!(is_for_model(&data));
        assert!(
            data.message.contains("may or may not have taken effect"),
            "{}",
            data.message
        );
        assert!(!data.message.contains("lease"), "{}", data.message);
    }

    #[test]
    fn server_side_failures_are_protocol_errors_with_the_developer_message() {
        let errors = [
            Error::NoTurn { tool: "t" },
            Error::store("begin", "connection refused"),
            Error::DuplicateTool { name: "t" },
            Error::NameClash {
                tool: "t",
                key: crate::Key::from_bytes([1; 32]).short(),
            },
            Error::SharedAcrossTypes {
                name: "t",
                first: "<A as T>::t::{{closure}}",
                now: "<B as T>::t::{{closure}}",
            },
            Error::Config("bad".into()),
        ];
        for error in errors {
            let text = error.to_string();
            let data = ErrorData::from(error);
            assert!(!is_for_model(&data));
            assert_eq!(data.code, ErrorCode::INTERNAL_ERROR);
            assert_eq!(data.message, text);
        }
    }

    #[test]
    fn a_mismatch_of_a_derived_key_names_what_differs_in_a_models_words() {
        let mismatch = |skipped: &'static [&'static str], present| Error::PayloadMismatch {
            tool: "t",
            key: key(),
            differs: Mismatch::Unkeyed(crate::Unkeyed::new(skipped, present)),
            running: false,
            earlier: crate::Earlier::Done,
            refused: 1,
        };
        let one = model_message(&mismatch(&["client", "memo"], 0b10)).unwrap();
        assert!(one.contains("except that \"memo\" differs"), "{one}");
        assert!(
            one.contains("call it again with the earlier \"memo\""),
            "{one}"
        );
        let two = model_message(&mismatch(&["memo", "reason"], u32::MAX)).unwrap();
        assert!(two.contains("one of \"memo\", \"reason\" differs"), "{two}");
        for text in [&one, &two] {
            for rust in ["skip", "ignore", "client", "idempotency key", "#[", "`"] {
                assert!(!text.contains(rust), "{text}");
            }
        }
        let caller = model_message(&Error::PayloadMismatch {
            tool: "t",
            key: key(),
            differs: Mismatch::ClientKey,
            running: false,
            earlier: crate::Earlier::Done,
            refused: 1,
        })
        .unwrap();
        assert!(caller.contains("not one of your arguments"), "{caller}");
        assert!(!caller.contains("new idempotency key"), "{caller}");
    }

    #[test]
    fn a_payload_mismatch_is_an_invalid_params_error() {
        let data = ErrorData::from(Error::PayloadMismatch {
            tool: "t",
            key: key(),
            differs: Mismatch::ClientKey,
            running: false,
            earlier: crate::Earlier::Done,
            refused: 1,
        });
        assert_eq!(data.code, ErrorCode::INVALID_PARAMS);
    }
}
