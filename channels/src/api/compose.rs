//! The inbound message a request makes: its sender, its chat, where its reply goes, and the id
//! an `Idempotency-Key` gives it.

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::errors::error;
use super::replies::Fingerprint;
use super::state::AppState;
use super::{CHANNEL, idempotency};
use crate::contract::reply::REPLY_CHANNEL;
use crate::contract::{InboundMessage, MessageFlags, Sender};

/// A user message from the API to chat `chat_id`, its replies routed to this process. Its
/// client waits for its own answer and named the sender itself ([`MessageFlags::request`]).
pub(super) fn new_message(state: &AppState, chat_id: &str, sender_id: &str, content: &str) -> InboundMessage {
    let sender = Sender { id: sender_id.to_owned(), name: sender_id.to_owned(), is_bot: false };
    let mut msg =
        InboundMessage { flags: MessageFlags::request(), ..InboundMessage::user(CHANNEL, chat_id, sender, content) };
    if let Some(own) = &state.settings.reply_channel {
        msg.metadata.insert(REPLY_CHANNEL.into(), own.clone().into());
    }
    msg
}

/// Applies the request's `Idempotency-Key`, if it has one: the message's id then stands for the
/// key, and the fingerprint of its content tells a retry from a reuse.
#[expect(clippy::result_large_err, reason = "the error is the answer to send; one per failed request")]
pub(super) fn keyed(headers: &HeaderMap, msg: &mut InboundMessage) -> Result<Option<Fingerprint>, Response> {
    match idempotency::key(headers) {
        Ok(Some(key)) => {
            idempotency::apply(msg, &key);
            Ok(Some(idempotency::fingerprint(&msg.content)))
        }
        Ok(None) => Ok(None),
        Err(text) => Err(error(StatusCode::BAD_REQUEST, "invalid_idempotency_key", &text)),
    }
}
