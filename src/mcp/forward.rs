//! `ServerHandler for IdemServer<S>`: `tools/call`, `tools/list` and `get_tool` go through
//! idem, every other method is forwarded to the wrapped server as is.
//!
//! Every method of rmcp's `ServerHandler` is listed here, so none silently falls back to
//! rmcp's default instead of the wrapped server's own. rmcp is a caret requirement:
//! `tests/mcp_forwarding.rs` checks this list against the `ServerHandler` of the rmcp in use,
//! and CI runs it with the lowest and the newest rmcp the requirement admits.
// Logging, `subscribe` and `unsubscribe` are deprecated in rmcp (SEP-2577); still forwarded.
#![allow(deprecated)]

use std::borrow::Cow;
use std::future::Future;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CancelledNotificationParam,
    CompleteRequestParams, CompleteResult, CustomNotification, CustomRequest, CustomResult,
    DiscoverResult, GetPromptRequestParams, GetPromptResponse, GetSkillRequestParams,
    GetSkillResult, GetTaskParams, GetTaskResult, InitializeRequestParams, InitializeResult,
    JsonObject, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListSkillsResult, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ProtocolVersion, ReadResourceDirectoryRequestParams, ReadResourceDirectoryResult,
    ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, ServerConfig,
    SetLevelRequestParams, SubscribeRequestParams, SubscriptionFilter, Tool,
    UnsubscribeRequestParams, UpdateTaskParams,
};
use rmcp::service::{MaybeSendFuture, NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};

use super::{
    CLIENT_ID_META, IDEMPOTENCY_EXTENSION, IDEMPOTENCY_KEY_META, IdemServer, TURN_ID_META,
};

/// Declares [`IDEMPOTENCY_EXTENSION`] in `capabilities`, with the `_meta` entries it reads.
fn declare(capabilities: &mut ServerCapabilities) {
    let mut settings = JsonObject::new();
    settings.insert("turnIdMeta".to_owned(), TURN_ID_META.into());
    settings.insert("idempotencyKeyMeta".to_owned(), IDEMPOTENCY_KEY_META.into());
    settings.insert("clientIdMeta".to_owned(), CLIENT_ID_META.into());
    capabilities
        .extensions
        .get_or_insert_with(Default::default)
        .insert(IDEMPOTENCY_EXTENSION.to_owned(), settings);
}

/// Forwards request methods `name(request?, context) -> Result<Out, ErrorData>` to `inner`.
macro_rules! forward {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $out:ty;)*) => {
        $(
            fn $name(
                &self,
                $($arg: $ty),*
            ) -> impl Future<Output = $out> + MaybeSendFuture + '_ {
                self.inner().$name($($arg),*)
            }
        )*
    };
}

impl<S: ServerHandler> ServerHandler for IdemServer<S> {
    fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<CallToolResponse, ErrorData>> + MaybeSendFuture + '_ {
        self.call_tool_in_turn(request, context)
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let client = context.clone();
        let list = self.inner().list_tools(request, context).await?;
        Ok(self.annotate_list(list, &client))
    }

    /// With the hints true for any client (`idempotentHint` false on a write: the client is
    /// not known here).
    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.inner()
            .get_tool(name)
            .map(|tool| self.annotate(tool, false))
    }

    fn negotiate_initialize(
        &self,
        request: &InitializeRequestParams,
    ) -> Result<InitializeResult, ErrorData> {
        let mut result = self.inner().negotiate_initialize(request)?;
        declare(&mut result.capabilities);
        Ok(result)
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        // One `IdemServer` serves one client: its namespace is its own (see `mark_initialized`).
        self.mark_initialized()?;
        let mut result = self.inner().initialize(request, context).await?;
        declare(&mut result.capabilities);
        Ok(result)
    }

    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        let mut result = self.inner().discover(context).await?;
        declare(&mut result.capabilities);
        Ok(result)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        self.inner().supported_protocol_versions()
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        self.inner().accepted_subscription_filter(requested)
    }

    fn get_info(&self) -> ServerConfig {
        let mut info = self.inner().get_info();
        declare(&mut info.capabilities);
        info
    }

    forward! {
        ping(context: RequestContext<RoleServer>) -> Result<(), ErrorData>;
        complete(request: CompleteRequestParams, context: RequestContext<RoleServer>)
            -> Result<CompleteResult, ErrorData>;
        set_level(request: SetLevelRequestParams, context: RequestContext<RoleServer>)
            -> Result<(), ErrorData>;
        get_prompt(request: GetPromptRequestParams, context: RequestContext<RoleServer>)
            -> Result<GetPromptResponse, ErrorData>;
        list_prompts(request: Option<PaginatedRequestParams>, context: RequestContext<RoleServer>)
            -> Result<ListPromptsResult, ErrorData>;
        list_resources(request: Option<PaginatedRequestParams>, context: RequestContext<RoleServer>)
            -> Result<ListResourcesResult, ErrorData>;
        list_resource_templates(
            request: Option<PaginatedRequestParams>,
            context: RequestContext<RoleServer>
        ) -> Result<ListResourceTemplatesResult, ErrorData>;
        read_resource(request: ReadResourceRequestParams, context: RequestContext<RoleServer>)
            -> Result<ReadResourceResponse, ErrorData>;
        listen(context: SubscriptionContext) -> Result<(), ErrorData>;
        subscribe(request: SubscribeRequestParams, context: RequestContext<RoleServer>)
            -> Result<(), ErrorData>;
        unsubscribe(request: UnsubscribeRequestParams, context: RequestContext<RoleServer>)
            -> Result<(), ErrorData>;
        on_custom_request(request: CustomRequest, context: RequestContext<RoleServer>)
            -> Result<CustomResult, ErrorData>;
        on_cancelled(
            notification: CancelledNotificationParam,
            context: NotificationContext<RoleServer>
        ) -> ();
        on_progress(
            notification: ProgressNotificationParam,
            context: NotificationContext<RoleServer>
        ) -> ();
        on_initialized(context: NotificationContext<RoleServer>) -> ();
        on_roots_list_changed(context: NotificationContext<RoleServer>) -> ();
        on_custom_notification(
            notification: CustomNotification,
            context: NotificationContext<RoleServer>
        ) -> ();
        get_task(request: GetTaskParams, context: RequestContext<RoleServer>)
            -> Result<GetTaskResult, ErrorData>;
        update_task(request: UpdateTaskParams, context: RequestContext<RoleServer>)
            -> Result<(), ErrorData>;
        cancel_task(request: CancelTaskParams, context: RequestContext<RoleServer>)
            -> Result<(), ErrorData>;
        list_skills(request: Option<PaginatedRequestParams>, context: RequestContext<RoleServer>)
            -> Result<ListSkillsResult, ErrorData>;
        get_skill(request: GetSkillRequestParams, context: RequestContext<RoleServer>)
            -> Result<GetSkillResult, ErrorData>;
        read_resource_directory(
            request: ReadResourceDirectoryRequestParams,
            context: RequestContext<RoleServer>
        ) -> Result<ReadResourceDirectoryResult, ErrorData>;
    }
}
