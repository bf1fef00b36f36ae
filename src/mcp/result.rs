//! What an rmcp tool under `#[idempotent]` returns: [`ToolError`] and [`Json`].

use std::borrow::Cow;
use std::fmt;

use rmcp::ErrorData;
use rmcp::handler::server::tool::IntoCallToolResult;
use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock};
use rmcp::schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

use crate::Error;

/// The error type of an rmcp tool under `#[idempotent]`: it has `From<idem_tools::Error>` (so
/// budget, turn and store failures flow out of the tool) and implements rmcp's
/// `IntoCallToolResult`, so `Result<String, ToolError>` or `Result<Json<T>, ToolError>` is a
/// valid `#[tool]` return type.
///
/// What the client gets:
///
/// * [`ToolError::new`] (or a `String` / `&str` via `?`): a tool result with `isError: true`
///   and the message as its text — a failure the model reads and can act on;
/// * an idem error the model should read ([`model_message`](super::model_message) says which):
///   the same, worded for a model;
/// * any other idem error, or an [`ErrorData`] (`ToolError::from(ErrorData)`): a protocol
///   error, not shown to the model.
///
/// An `Err` is not recorded: a retry of the call runs the tool again (within its budget). Nor
/// is rmcp's other way to report a failure, `Ok(CallToolResult::error(..))`: idem reads its
/// `isError: true` and gives the key back.
///
/// ```
/// use idem_tools::mcp::ToolError;
/// use rmcp::handler::server::tool::IntoCallToolResult;
/// use rmcp::model::CallToolResponse;
///
/// let failed = ToolError::new("the ticket system is down, try again later");
/// let Ok(CallToolResponse::Complete(result)) = failed.into_call_tool_result() else {
///     panic!("a tool failure is a tool result")
/// };
/// assert_eq!(result.is_error, Some(true));
/// ```
pub struct ToolError(Kind);

enum Kind {
    Message(String),
    Idem(Error),
    Protocol(ErrorData),
}

impl ToolError {
    /// A failure of the tool that the model reads (`isError: true`).
    pub fn new(message: impl fmt::Display) -> Self {
        ToolError(Kind::Message(message.to_string()))
    }

    /// The idem error inside, if this is one.
    pub fn as_idem(&self) -> Option<&Error> {
        match &self.0 {
            Kind::Idem(error) => Some(error),
            Kind::Message(_) | Kind::Protocol(_) => None,
        }
    }

    /// The result or protocol error the client gets (see [`ToolError`]).
    ///
    /// # Errors
    /// The protocol error, for an error that is not the model's to read.
    pub fn into_result(self) -> Result<CallToolResult, ErrorData> {
        match self.0 {
            Kind::Message(text) => Ok(error_result(text)),
            Kind::Idem(error) => into_tool_result(ErrorData::from(error)),
            Kind::Protocol(error) => into_tool_result(error),
        }
    }
}

/// A tool result with `isError: true` and `text`.
fn error_result(text: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

/// `error` as a tool result if it is an idem error for the model, else as itself.
pub(crate) fn into_tool_result(error: ErrorData) -> Result<CallToolResult, ErrorData> {
    if super::is_for_model(&error) {
        Ok(error_result(error.message.into_owned()))
    } else {
        Err(error)
    }
}

impl From<Error> for ToolError {
    fn from(error: Error) -> Self {
        ToolError(Kind::Idem(error))
    }
}

impl From<ErrorData> for ToolError {
    fn from(error: ErrorData) -> Self {
        ToolError(Kind::Protocol(error))
    }
}

impl From<String> for ToolError {
    fn from(message: String) -> Self {
        ToolError(Kind::Message(message))
    }
}

impl From<&str> for ToolError {
    fn from(message: &str) -> Self {
        ToolError(Kind::Message(message.to_owned()))
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Kind::Message(text) => f.write_str(text),
            Kind::Idem(error) => error.fmt(f),
            Kind::Protocol(error) => f.write_str(&error.message),
        }
    }
}

impl fmt::Debug for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Kind::Message(text) => f.debug_tuple("ToolError::Message").field(text).finish(),
            Kind::Idem(error) => f.debug_tuple("ToolError::Idem").field(error).finish(),
            Kind::Protocol(error) => f.debug_tuple("ToolError::Protocol").field(error).finish(),
        }
    }
}

impl std::error::Error for ToolError {}

impl IntoCallToolResult for ToolError {
    fn into_call_tool_result(self) -> Result<CallToolResponse, ErrorData> {
        self.into_result().map(CallToolResponse::from)
    }
}

/// Structured tool output, like `rmcp::Json`, that can also be recorded and replayed: it
/// (de)serializes as `T` does. `#[tool]` sees a return type `Json<T>` or
/// `Result<Json<T>, E>` and lists `T`'s schema as the tool's `outputSchema`; the client gets
/// `T` as `structuredContent` (and as text).
///
/// ```
/// use idem_tools::mcp::Json;
///
/// #[derive(serde::Serialize, serde::Deserialize, rmcp::schemars::JsonSchema)]
/// #[schemars(crate = "rmcp::schemars")]
/// struct Ticket { id: u64 }
///
/// let recorded = serde_json::to_string(&Json(Ticket { id: 7 }))?;
/// assert_eq!(recorded, r#"{"id":7}"#);
/// let Json(replayed): Json<Ticket> = serde_json::from_str(&recorded)?;
/// assert_eq!(replayed.id, 7);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Json<T>(pub T);

impl<T: JsonSchema> JsonSchema for Json<T> {
    fn schema_name() -> Cow<'static, str> {
        T::schema_name()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        T::json_schema(generator)
    }
}

impl<T: Serialize + JsonSchema + 'static> IntoCallToolResult for Json<T> {
    fn into_call_tool_result(self) -> Result<CallToolResponse, ErrorData> {
        rmcp::Json(self.0).into_call_tool_result()
    }
}
