//! A rig `Tool` impl: its `call` says what of `self` identifies the action, once on
//! `#[tool_impl(...)]` or on the method.
use idem_tools::{idempotent, tool_impl};
use rig_core::tool::{Tool, ToolContext};

#[derive(Clone)]
struct SendMessage {
    account: String,
}

#[tool_impl]
impl Tool for SendMessage {
    const NAME: &'static str = "send_message";
    type Args = String;
    type Output = u64;
    type Error = idem_tools::Error;

    fn description(&self) -> String {
        "Send a message".into()
    }

    fn parameters(&self) -> rig_core::serde_json::Value {
        rig_core::serde_json::json!({ "type": "string" })
    }

    #[idempotent(ignore(context))]
    async fn call(&self, context: &mut ToolContext, text: String) -> Result<u64, idem_tools::Error> {
        let _ = (context, &self.account);
        Ok(text.len() as u64)
    }
}

fn main() {}
