//! One tool of an MCP server as the registry runs it: `<server>__<tool>`, with the server's
//! description and schema, called on the server's current session.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rmcp::ServiceError;
use rmcp::model::{CallToolRequestParams, CallToolResult, RawContent, ResourceContents};
use serde_json::Value;

use super::Server;
use crate::config::MCP_SEPARATOR;
use crate::tools::{Tool, ToolContext, ToolError};

pub(super) struct McpTool {
    server: Arc<Server>,
    /// `<server>__<tool>`.
    name: String,
    /// The tool's own name, as the server knows it.
    remote: String,
    description: String,
    schema: Value,
}

impl McpTool {
    pub(super) fn new(server: Arc<Server>, tool: &rmcp::model::Tool) -> Self {
        let description = tool.description.as_deref().or(tool.title.as_deref()).unwrap_or_default();
        Self {
            name: offered_name(&server.name, &tool.name),
            remote: tool.name.to_string(),
            description: description.to_owned(),
            schema: Value::Object((*tool.input_schema).clone()),
            server,
        }
    }
}

/// Longest tool name the model APIs take (OpenAI: 64, `^[a-zA-Z0-9_-]+$`).
const MAX_NAME: usize = 64;

/// `<server>__<tool>`, with characters the model APIs refuse in names (`.`, `/`, spaces)
/// replaced by `_` and cut to their length limit.
pub(super) fn offered_name(server: &str, tool: &str) -> String {
    let name = format!("{server}{MCP_SEPARATOR}{tool}");
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .take(MAX_NAME)
        .collect()
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.schema.clone()
    }

    fn timeout(&self) -> Option<Duration> {
        self.server.call_timeout
    }

    async fn execute(&self, arguments: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        let arguments = match arguments {
            Value::Object(map) => Some(map),
            Value::Null => None,
            other => return Err(ToolError::InvalidArguments(format!("expected an object, got {other}"))),
        };
        let peer = self.server.peer().ok_or_else(|| {
            ToolError::Transient(format!("the MCP server `{}` is not running; it is being restarted", self.server.name))
        })?;
        let request = CallToolRequestParams { meta: None, name: self.remote.clone().into(), arguments, task: None };
        let result = peer.call_tool(request).await.map_err(|err| call_error(&self.server.name, err))?;
        let text = render(&result);
        match result.is_error {
            Some(true) => Err(ToolError::Failed(text)),
            _ => Ok(text),
        }
    }
}

/// A failed call: the server's own error goes back to the model; a broken connection is
/// temporary (the supervisor restarts the server).
fn call_error(server: &str, err: ServiceError) -> ToolError {
    match err {
        ServiceError::McpError(error) => {
            ToolError::Failed(format!("the MCP server `{server}` refused: {}", error.message))
        }
        ServiceError::TransportClosed | ServiceError::TransportSend(_) | ServiceError::Cancelled { .. } => {
            ToolError::Transient(format!("the connection to the MCP server `{server}` broke: {err}"))
        }
        other => ToolError::Failed(format!("the MCP server `{server}`: {other}")),
    }
}

/// A result as text for the model: text parts as they are, other parts described, and the
/// structured result when there is no text.
pub(super) fn render(result: &CallToolResult) -> String {
    let mut parts: Vec<String> = result.content.iter().map(|content| describe(&content.raw)).collect();
    if parts.iter().all(String::is_empty)
        && let Some(structured) = &result.structured_content
    {
        parts = vec![structured.to_string()];
    }
    let text = parts.into_iter().filter(|part| !part.is_empty()).collect::<Vec<_>>().join("\n");
    if text.is_empty() { "(the tool returned nothing)".into() } else { text }
}

fn describe(content: &RawContent) -> String {
    match content {
        RawContent::Text(text) => text.text.clone(),
        RawContent::Image(image) => format!("[an image, {}, {} bytes base64]", image.mime_type, image.data.len()),
        RawContent::Audio(audio) => format!("[audio, {}, {} bytes base64]", audio.mime_type, audio.data.len()),
        RawContent::Resource(embedded) => match &embedded.resource {
            ResourceContents::TextResourceContents { uri, text, .. } => format!("[resource {uri}]\n{text}"),
            ResourceContents::BlobResourceContents { uri, mime_type, blob, .. } => {
                let kind = mime_type.as_deref().unwrap_or("binary");
                format!("[resource {uri}: {kind}, {} bytes base64]", blob.len())
            }
        },
        RawContent::ResourceLink(link) => format!("[link to resource {} ({})]", link.uri, link.name),
    }
}
