//! `message`: lets the agent send a message now — to the current chat (a progress note during
//! a long task) or to another chat by `channel:chat_id` — through the bus, like any reply.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use switchboard_channels::contract::{Media, OutboundKind, OutboundMessage};
use switchboard_channels::{Bus, BusExt};

use super::fs::workspace::{Workspace, io_error};
use super::{Tool, ToolContext, ToolError};
use crate::workspace::outbox;

/// Sends messages through the bus.
pub struct MessageTool {
    bus: Arc<dyn Bus>,
}

impl MessageTool {
    pub fn new(bus: Arc<dyn Bus>) -> Self {
        Self { bus }
    }
}

#[async_trait]
impl Tool for MessageTool {
    fn name(&self) -> &str {
        "message"
    }

    fn description(&self) -> &str {
        "Sends a message right away, to the current chat (default) or to another chat given as \
         `channel:chat_id`, optionally with files from the workspace (images are sent as photos). \
         Use it for progress notes during long tasks, to notify another chat, or to send a file \
         you made; your final answer is sent automatically, do not repeat it here."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "content": {"type": "string", "description": "The text to send (Markdown)"},
                "target": {"type": "string", "description": "`channel:chat_id`, e.g. telegram:-1001234; default: the current chat"},
                "thread_id": {"type": "string", "description": "Topic or thread in the target chat, if any"},
                "files": {"type": "array", "items": {"type": "string"}, "description": "Workspace files to attach (paths relative to the workspace)"}
            },
            "required": ["content"]
        })
    }

    async fn execute(&self, arguments: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let content = arguments.get("content").and_then(Value::as_str).unwrap_or_default();
        // A turn redone after a worker crash asks the model again, which may send again:
        // side effects of tools are at-least-once, only the final reply is at-most-once.
        let id = format!("{}:message:{}", ctx.run_id, next_sequence());
        let media = attachments(&arguments, ctx, &id)?;
        if content.trim().is_empty() && media.is_empty() {
            return Err(ToolError::InvalidArguments("`content` must not be empty".into()));
        }
        let target = arguments.get("target").and_then(Value::as_str).filter(|t| !t.is_empty());
        let (channel, chat_id, thread_id) = match target {
            None => (ctx.channel.clone(), ctx.chat_id.clone(), ctx.thread_id.clone()),
            Some(target) => {
                let (channel, chat_id) = parse_target(target)?;
                let thread_id = arguments.get("thread_id").and_then(Value::as_str).map(str::to_owned);
                (channel.to_owned(), chat_id.to_owned(), thread_id)
            }
        };
        let msg = OutboundMessage {
            id,
            channel: channel.clone(),
            chat_id: chat_id.clone(),
            thread_id,
            content: content.to_owned(),
            media,
            kind: OutboundKind::Reply,
            ..OutboundMessage::default()
        };
        self.bus.publish_outbound(&msg).await.map_err(|err| ToolError::Transient(format!("cannot send: {err}")))?;
        Ok(format!("sent to {channel}:{chat_id}"))
    }
}

/// Most files one message carries.
const MAX_FILES: usize = 10;

/// The `files` argument as media: each a regular file inside the workspace. Files from the
/// run's `outbox/` leave it now (`id` names where they are kept), so the reply does not carry
/// them again.
fn attachments(arguments: &Value, ctx: &ToolContext, id: &str) -> Result<Vec<Media>, ToolError> {
    let Some(files) = arguments.get("files").filter(|files| !files.is_null()) else { return Ok(Vec::new()) };
    let paths = files
        .as_array()
        .filter(|paths| paths.len() <= MAX_FILES)
        .and_then(|paths| paths.iter().map(Value::as_str).collect::<Option<Vec<&str>>>())
        .ok_or_else(|| ToolError::InvalidArguments(format!("`files` must be a list of at most {MAX_FILES} paths")))?;
    // Checked against the memory scope: a file sent is a file read.
    let workspace = Workspace::for_run(ctx, false)?;
    let outbox = ctx.outbox.as_ref().map(|folder| workspace.root().join(folder));
    let attach = |requested: &str| {
        let (path, size) = checked_file(&workspace, requested)?;
        if outbox.as_ref().is_none_or(|outbox| !path.starts_with(outbox)) {
            let name = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
            return Ok(file_media(&path, name, size));
        }
        let sent = outbox::send_files(workspace.root(), id, &ctx.session_key, std::slice::from_ref(&path))
            .map_err(|err| ToolError::Failed(format!("cannot send `{requested}` from the outbox: {err}")))?;
        let file = sent.into_iter().next().ok_or_else(|| ToolError::Failed(format!("`{requested}` vanished")))?;
        Ok(file_media(&file.path, file.name, file.size))
    };
    paths.into_iter().map(attach).collect()
}

/// A regular file of the workspace, and its size.
fn checked_file(workspace: &Workspace, requested: &str) -> Result<(PathBuf, u64), ToolError> {
    let resolved = workspace.resolve(requested)?;
    let meta = std::fs::metadata(&resolved.path).map_err(|err| io_error("read", &resolved.shown, &err))?;
    if !meta.is_file() {
        return Err(ToolError::InvalidArguments(format!("`{}` is not a file", resolved.shown)));
    }
    Ok((resolved.path, meta.len()))
}

/// A file to send as `name`: images as photos (`png`, `jpg`, `gif`, `webp`), anything else as
/// a document; the adapters decide what the platform takes.
pub fn file_media(path: &Path, name: String, size: u64) -> Media {
    let extension = path.extension().and_then(|ext| ext.to_str()).unwrap_or_default().to_ascii_lowercase();
    let kind = if matches!(extension.as_str(), "png" | "jpg" | "jpeg" | "gif" | "webp") { "photo" } else { "document" };
    Media {
        kind: kind.to_owned(),
        path: Some(path.display().to_string()),
        file_name: Some(name),
        size: Some(size),
        ..Media::default()
    }
}

/// Splits `channel:chat_id` at the first colon: chat ids may contain colons, channel names not.
fn parse_target(target: &str) -> Result<(&str, &str), ToolError> {
    match target.split_once(':') {
        Some((channel, chat)) if !channel.is_empty() && !chat.is_empty() => Ok((channel, chat)),
        _ => Err(ToolError::InvalidArguments(format!("target `{target}` is not `channel:chat_id`"))),
    }
}

/// A per-process counter that tells apart several messages of one run.
fn next_sequence() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures_util::StreamExt;
    use switchboard_channels::bus::in_process::InProcessBus;

    use super::*;

    fn ctx() -> ToolContext {
        ToolContext {
            channel: "telegram".into(),
            chat_id: "-100".into(),
            thread_id: Some("7".into()),
            run_id: "r1".into(),
            ..ToolContext::default()
        }
    }

    async fn sent(bus: &InProcessBus, channel: &str) -> OutboundMessage {
        let mut out = bus.outbound(channel).await.unwrap();
        let delivery = tokio::time::timeout(Duration::from_secs(2), out.next()).await.unwrap().unwrap().unwrap();
        delivery.decode().unwrap()
    }

    #[tokio::test]
    async fn sends_to_the_current_chat_and_topic_by_default() {
        let bus = Arc::new(InProcessBus::new(8));
        let tool = MessageTool::new(bus.clone());
        let result = tool.execute(json!({"content": "working on it"}), &ctx()).await.unwrap();
        assert_eq!(result, "sent to telegram:-100");
        let msg = sent(&bus, "telegram").await;
        assert_eq!((msg.chat_id.as_str(), msg.thread_id.as_deref()), ("-100", Some("7")));
        assert_eq!(msg.content, "working on it");
        assert!(msg.id.starts_with("r1:message:"));
    }

    #[tokio::test]
    async fn sends_to_another_chat_whose_id_has_colons() {
        let bus = Arc::new(InProcessBus::new(8));
        let tool = MessageTool::new(bus.clone());
        tool.execute(json!({"content": "hello", "target": "api:team:ops"}), &ctx()).await.unwrap();
        let msg = sent(&bus, "api").await;
        assert_eq!((msg.chat_id.as_str(), msg.thread_id), ("team:ops", None));
    }

    #[tokio::test]
    async fn bad_targets_and_empty_content_are_argument_errors() {
        let tool = MessageTool::new(Arc::new(InProcessBus::new(8)));
        for args in [json!({"content": "x", "target": "nochannel"}), json!({"content": "  "}), json!({})] {
            let err = tool.execute(args.clone(), &ctx()).await.unwrap_err();
            assert!(matches!(err, ToolError::InvalidArguments(_)), "{args}: {err}");
        }
    }

    #[tokio::test]
    async fn attaches_workspace_files_and_refuses_others() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("chart.PNG"), b"png").unwrap();
        std::fs::write(dir.path().join("notes.txt"), b"text").unwrap();
        let ctx = ToolContext { workspace: dir.path().to_path_buf(), ..ctx() };
        let bus = Arc::new(InProcessBus::new(8));
        let tool = MessageTool::new(bus.clone());
        tool.execute(json!({"content": "", "files": ["chart.PNG", "notes.txt"]}), &ctx).await.unwrap();
        let msg = sent(&bus, "telegram").await;
        let kinds: Vec<(&str, Option<&str>)> =
            msg.media.iter().map(|m| (m.kind.as_str(), m.file_name.as_deref())).collect();
        assert_eq!(kinds, [("photo", Some("chart.PNG")), ("document", Some("notes.txt"))]);
        assert!(msg.media[0].path.as_deref().unwrap().ends_with("chart.PNG"));
        assert_eq!(msg.media[1].size, Some(4));
        for files in [json!(["../outside.txt"]), json!(["missing.txt"]), json!(["."]), json!("notes.txt")] {
            let result = tool.execute(json!({"content": "x", "files": files.clone()}), &ctx).await;
            assert!(result.is_err(), "{files} should be refused");
        }
    }

    #[tokio::test]
    async fn a_file_from_the_outbox_is_sent_now_and_not_again_with_the_reply() {
        let dir = tempfile::tempdir().unwrap();
        let folder = crate::workspace::outbox::run_folder("r1");
        std::fs::create_dir_all(dir.path().join(&folder)).unwrap();
        std::fs::write(dir.path().join(&folder).join("chart.png"), b"png").unwrap();
        let ctx = ToolContext { workspace: dir.path().to_path_buf(), outbox: Some(folder.clone()), ..ctx() };
        let bus = Arc::new(InProcessBus::new(8));
        let tool = MessageTool::new(bus.clone());
        tool.execute(json!({"content": "the chart", "files": ["outbox/chart.png"]}), &ctx).await.unwrap();
        let msg = sent(&bus, "telegram").await;
        let path = msg.media[0].path.clone().unwrap();
        assert!(path.contains("/outbox/sent/") && path.ends_with("/chart.png"), "{path}");
        assert_eq!((msg.media[0].kind.as_str(), msg.media[0].size), ("photo", Some(3)));
        let scope = crate::workspace::memory::MemoryScope::Owner;
        let left = crate::workspace::outbox::collect(
            dir.path(),
            "r1",
            &scope,
            &switchboard_channels::contract::SessionKey::stored("telegram:-100"),
        )
        .unwrap();
        assert!(left.files.is_empty(), "sent once: {left:?}");
    }
}
