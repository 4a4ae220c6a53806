//! What the publisher of an inbound message expects of the worker beyond an ordinary chat
//! message: set by request/response adapters (the HTTP API), whose client waits for the
//! answer to each request. The worker acts on these flags and never asks which adapter a
//! message came from.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{InboundKind, InboundMessage};

/// The metadata key the HTTP API of earlier versions set instead of
/// [`MessageFlags::resend_reply`] (`metadata.resend_reply: true`).
const LEGACY_RESEND_REPLY: &str = "resend_reply";
/// The channel whose messages earlier versions treated as if they carried
/// [`MessageFlags::awaits_reply`] and [`MessageFlags::claimed_sender`] (see
/// [`InboundMessage::flags`]).
const LEGACY_REQUEST_CHANNEL: &str = "api";

/// The flags of an [`InboundMessage`] (`flags` on the wire; each left out when false, and the
/// object left out when none is set, so other adapters' messages keep their JSON).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MessageFlags {
    /// The sender waits for the answer to this message itself (an HTTP request): it is never
    /// merged with the sender's next messages into one turn, and when the queue cannot take it,
    /// or a newer message replaces it, it is answered at once with why.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub awaits_reply: bool,
    /// `sender.id` is what the client says, not an identity the platform vouches for: no
    /// per-sender rate limit applies (a client could name a new sender for each message), so
    /// the adapter must limit its clients itself.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub claimed_sender: bool,
    /// A retry of a message whose answer may already have gone out: when it arrives after its
    /// turn finished, the worker publishes the stored reply again instead of ignoring it as a
    /// duplicate.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub resend_reply: bool,
}

impl MessageFlags {
    /// The flags of a request whose client waits for its answer and names its own sender.
    pub fn request() -> Self {
        Self { awaits_reply: true, claimed_sender: true, resend_reply: false }
    }

    /// No flag is set: an ordinary chat message.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

impl InboundMessage {
    /// The flags the worker acts on: [`InboundMessage::flags`] as published, or, for a message
    /// without any from the `api` channel, what the HTTP API of earlier versions meant without
    /// saying it. Channel processes are upgraded after the workers (docs/operations.md), so a
    /// worker still meets messages of an older API process for a while; without this, their
    /// bursts would be merged, rate-limited per claimed sender and their retries left
    /// unanswered.
    pub fn effective_flags(&self) -> MessageFlags {
        let legacy_resend = self.metadata.get(LEGACY_RESEND_REPLY).and_then(Value::as_bool) == Some(true);
        if !self.flags.is_empty() || self.channel != LEGACY_REQUEST_CHANNEL {
            return MessageFlags { resend_reply: self.flags.resend_reply || legacy_resend, ..self.flags };
        }
        MessageFlags { resend_reply: legacy_resend, ..MessageFlags::request() }
    }

    /// Whether a person waits for this message's own answer ([`MessageFlags::awaits_reply`]).
    pub fn awaits_reply(&self) -> bool {
        self.kind == InboundKind::User && self.effective_flags().awaits_reply
    }

    /// Whether `sender.id` is the client's claim ([`MessageFlags::claimed_sender`]).
    pub fn sender_is_claimed(&self) -> bool {
        self.effective_flags().claimed_sender
    }

    /// Whether the stored reply is to be sent again when this message comes after its turn
    /// ([`MessageFlags::resend_reply`]).
    pub fn wants_reply_again(&self) -> bool {
        self.effective_flags().resend_reply
    }
}
