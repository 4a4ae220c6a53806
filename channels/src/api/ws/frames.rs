//! The frames of the API's WebSocket: what a client sends, and what it receives.

use std::collections::HashSet;
use std::sync::Arc;

use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::api::access::Caller;
use crate::api::compose::new_message;
use crate::api::exchange::{self, Sent};
use crate::api::openai::resolve_agent;
use crate::api::state::AppState;
use crate::contract::{InboundMessage, MAX_CHAT_ID_BYTES, OutboundMessage, RunEvent, check_length, reply};

/// Longest tool result a frame carries; the run's details have more.
const TOOL_RESULT_CHARS: usize = 2000;

/// What a client sends, tagged by `type`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub(super) enum ClientFrame {
    Ping,
    /// Receive the run events and messages of a chat.
    Subscribe {
        chat_id: String,
    },
    Unsubscribe {
        chat_id: String,
    },
    /// Receive the run events of every session, of every channel (admin tokens only).
    WatchAll,
    /// Send a message to a chat (and subscribe to it).
    Message(SendFrame),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SendFrame {
    chat_id: String,
    content: String,
    /// The agent to answer, as for the OpenAI endpoint; none: the chat's own.
    #[serde(default)]
    model: Option<String>,
    /// The client's own id for the message, repeated in the frames about it.
    #[serde(default)]
    pub(super) client_id: Option<String>,
}

pub(super) fn error_frame(code: &str, message: &str, client_id: Option<&str>) -> Value {
    json!({"type": "error", "error": {"code": code, "message": message}, "client_id": client_id})
}

/// The inbound message a send frame asks for, or why there is none.
pub(super) fn message_for(state: &AppState, caller: &Caller, send: &SendFrame) -> Result<InboundMessage, String> {
    if !caller.scopes.chat {
        return Err(crate::api::access::NO_CHAT_SCOPE.into());
    }
    if send.chat_id.trim().is_empty() || send.content.trim().is_empty() {
        return Err("chat_id and content must not be empty".into());
    }
    let chat_id = caller.chat_id(&send.chat_id);
    check_length("chat_id", &chat_id, MAX_CHAT_ID_BYTES).map_err(|err| err.to_string())?;
    let mut msg = new_message(state, &chat_id, &caller.identity, &send.content);
    if let Some(model) = send.model.as_deref().filter(|model| !model.trim().is_empty()) {
        let agent = resolve_agent(&state.settings.agents, caller, model).map_err(|refusal| refusal.text)?;
        msg.set_api_agent(&agent);
    }
    Ok(msg)
}

/// The chat id a client knows: a chat token's chats without its identity's prefix.
fn client_chat<'a>(caller: &Caller, chat_id: &'a str) -> &'a str {
    caller.own_chat(chat_id).unwrap_or(chat_id)
}

/// Publishes a socket's message and sends `accepted`, then `reply` (or `error`) to `tx`.
pub(super) async fn exchange(
    state: Arc<AppState>,
    caller: Caller,
    msg: InboundMessage,
    client_id: Option<String>,
    tx: mpsc::Sender<Value>,
) {
    let timeout = state.settings.reply_timeout;
    let deadline = Instant::now() + timeout;
    let client_id = client_id.as_deref();
    // Watched before publishing, so no event of the run comes before the watch.
    let watch = state.feed.watch(&msg.id);
    let mut waiting = match exchange::send(&state, &msg, None, deadline).await {
        Ok(Sent::Waiting(waiting)) => waiting,
        Ok(Sent::Replayed(reply)) => {
            let _ = tx.send(reply_frame(&caller, &msg, &reply, client_id)).await;
            return;
        }
        Err(response) => {
            let _ = tx.send(refusal_frame(response, client_id).await).await;
            return;
        }
    };
    let chat = client_chat(&caller, &msg.chat_id);
    let accepted = json!({"type": "accepted", "chat_id": chat, "message_id": msg.id, "client_id": client_id});
    if tx.send(accepted).await.is_err() {
        return;
    }
    let frame = tokio::select! {
        reply = exchange::reply_while_alive(&mut waiting, &watch, deadline, timeout) => match reply {
            Ok(Some(reply)) => reply_frame(&caller, &msg, &reply, client_id),
            Ok(None) => error_frame("shutting_down", "switchboard is stopping; the message is answered after restart", client_id),
            Err(_) => error_frame("reply_timeout", "no reply in time; the message was accepted and may still be answered", client_id),
        },
        // The socket closed: stop waiting, so the reply goes to the outbox.
        () = tx.closed() => return,
    };
    let _ = tx.send(frame).await;
}

fn reply_frame(caller: &Caller, msg: &InboundMessage, reply: &OutboundMessage, client_id: Option<&str>) -> Value {
    let mut frame = json!({
        "type": "reply",
        "chat_id": client_chat(caller, &msg.chat_id),
        "message_id": msg.id,
        "reply_id": reply.id,
        "content": reply.content,
        "kind": reply.kind,
        "session_key": reply.metadata.get(reply::SESSION_KEY),
        "client_id": client_id,
        "attachments": crate::api::files::attachments(&reply.media),
    });
    for key in reply::API_FIELDS {
        if let Some(value) = reply.metadata.get(key) {
            frame[key] = value.clone();
        }
    }
    frame
}

/// An HTTP error answer as an `error` frame.
async fn refusal_frame(response: Response, client_id: Option<&str>) -> Value {
    let status = response.status().as_u16();
    let body = axum::body::to_bytes(response.into_body(), 64 * 1024).await.unwrap_or_default();
    let error = serde_json::from_slice::<Value>(&body).map(|body| body["error"].clone()).unwrap_or(Value::Null);
    json!({"type": "error", "status": status, "error": error, "client_id": client_id})
}

/// The frame for a run event, when it is for one of the socket's API chats, or for any session
/// when the socket watches them all (then with its `channel`, and the chat id as it is). Files
/// show as `attachments` (see `files`).
pub(super) fn event_frame(caller: &Caller, chats: &HashSet<String>, all: bool, event: &RunEvent) -> Option<Value> {
    let own = event.channel == crate::api::CHANNEL && chats.contains(&event.chat_id);
    if !own && !all {
        return None;
    }
    let mut frame = serde_json::to_value(event).ok()?;
    let fields = frame.as_object_mut()?;
    for noise in ["v", "thread_id", "reply_to"] {
        fields.remove(noise);
    }
    crate::api::files::show_event_media(fields);
    if !all {
        fields.remove("channel");
        fields.insert("chat_id".into(), Value::from(client_chat(caller, &event.chat_id)));
    }
    let tool_result = fields.get("type").and_then(Value::as_str) == Some("tool.result");
    if let Some(Value::String(content)) = fields.get_mut("content")
        && tool_result
        && let Some((end, _)) = content.char_indices().nth(TOOL_RESULT_CHARS)
    {
        content.truncate(end);
        content.push('…');
    }
    Some(frame)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::access::Scopes;
    use crate::contract::RunEventBody;

    fn alice() -> Caller {
        Caller {
            token: Some("alice".into()),
            scopes: Scopes { chat: true, admin: false },
            identity: "alice".into(),
            agents: Vec::new(),
        }
    }

    fn event(chat: &str, body: RunEventBody) -> RunEvent {
        let msg = InboundMessage::user("api", chat, Default::default(), "hi");
        RunEvent::answering(&msg, "r1", &format!("api:{chat}"), body)
    }

    #[test]
    fn a_socket_gets_its_chats_events_under_the_names_it_knows() {
        let chats = HashSet::from(["alice/kitchen".to_owned()]);
        let chunk = event("alice/kitchen", RunEventBody::Chunk { text: "he".into() });
        let frame = event_frame(&alice(), &chats, false, &chunk).unwrap();
        assert_eq!(
            (frame["type"].as_str(), frame["chat_id"].as_str(), frame["text"].as_str()),
            (Some("chunk"), Some("kitchen"), Some("he"))
        );
        assert!(frame.get("channel").is_none());
        assert!(event_frame(&alice(), &chats, false, &event("bob/kitchen", RunEventBody::Started)).is_none());
        let long = "x".repeat(TOOL_RESULT_CHARS + 10);
        let result =
            RunEventBody::ToolResult { call_id: "1".into(), name: "read".into(), content: long, is_error: false };
        let frame = event_frame(&alice(), &chats, false, &event("alice/kitchen", result)).unwrap();
        assert_eq!(frame["content"].as_str().unwrap().chars().count(), TOOL_RESULT_CHARS + 1);
    }

    #[test]
    fn a_chat_subscription_gets_api_events_only_and_watching_all_gets_every_channel() {
        let chats = HashSet::from(["111".to_owned()]);
        let inbound = InboundMessage::user("telegram", "111", Default::default(), "hi");
        let telegram = RunEvent::answering(&inbound, "r2", "telegram:111", RunEventBody::Started);
        assert!(event_frame(&alice(), &chats, false, &telegram).is_none(), "a Telegram chat is no API chat");
        let frame = event_frame(&alice(), &HashSet::new(), true, &telegram).unwrap();
        assert_eq!(
            (frame["channel"].as_str(), frame["chat_id"].as_str(), frame["session_key"].as_str()),
            (Some("telegram"), Some("111"), Some("telegram:111"))
        );
    }

    #[test]
    fn files_show_as_attachments_without_their_paths() {
        let chats = HashSet::from(["alice/kitchen".to_owned()]);
        let token = "0123456789abcdef0123456789abcdef";
        let media = vec![crate::contract::Media {
            kind: "document".into(),
            path: Some(format!("/srv/ws/outbox/sent/{token}/a.csv")),
            file_name: Some("a.csv".into()),
            size: Some(3),
            ..Default::default()
        }];
        let done = RunEventBody::Completed {
            reply: "here".into(),
            usage: Default::default(),
            model: "m".into(),
            cost_usd: None,
            media,
        };
        let frame = event_frame(&alice(), &chats, false, &event("alice/kitchen", done)).unwrap();
        assert_eq!(frame["attachments"][0]["url"], format!("/v1/files/{token}/a.csv"));
        assert!(frame.get("media").is_none() && !frame.to_string().contains("/srv"), "{frame}");
    }

    #[test]
    fn client_frames_parse_by_type() {
        let send: ClientFrame =
            serde_json::from_str(r#"{"type":"message","chat_id":"k","content":"hi","client_id":"c1"}"#).unwrap();
        assert!(
            matches!(send, ClientFrame::Message(SendFrame { ref client_id, .. }) if client_id.as_deref() == Some("c1"))
        );
        assert!(matches!(serde_json::from_str(r#"{"type":"ping"}"#).unwrap(), ClientFrame::Ping));
        assert!(serde_json::from_str::<ClientFrame>(r#"{"type":"shout"}"#).is_err());
    }
}
