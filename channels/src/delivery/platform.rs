//! What the delivery core needs from a chat platform: a handful of calls (send, edit, delete,
//! typing) and a few decisions only the platform can make (where a message goes, which errors
//! are final). Everything else (queues, redelivery bookkeeping, drafts, typing loops) is the
//! core's.

use std::fmt::{Debug, Display};
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::contract::{OutboundMessage, RunEvent};

/// How long and how much of a streamed draft a platform shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DraftLimits {
    /// Streamed text kept per draft: more than the visible part can need.
    pub kept_bytes: usize,
}

/// Why a person's direct chat cannot be reached.
#[derive(Debug)]
pub enum Unreachable<A, E> {
    /// Their id is not the platform's: the message can never be delivered.
    Address(A),
    /// Opening their direct chat failed, like a send (final, or worth another try later).
    Failed(E),
}

/// A chat platform's side of delivering replies and live feedback.
#[async_trait]
pub trait Platform: Send + Sync + 'static {
    /// The platform's name in log lines (`Telegram`).
    const NAME: &'static str;
    /// The adapter's channel name on the bus (`telegram`).
    const CHANNEL: &'static str;
    /// How often typing is repeated while a run goes on.
    const TYPING_INTERVAL: Duration;
    const DRAFT: DraftLimits;

    /// Where a message goes (chat, thread, message to quote), in the platform's ids.
    type Target: Debug + Clone + Send + Sync + 'static;
    /// A message the platform posted.
    type MessageId: Debug + Clone + Send + Sync + 'static;
    /// One message of a delivery: a rendered part of the text, a file, or both.
    type Step: Send + Sync + 'static;
    type Error: Send + Sync + 'static;
    /// Why a message has no target (a chat id that is not the platform's).
    type AddressError: Display + Send;

    // Replies.

    /// The target of an outbound message.
    fn target_of(&self, msg: &OutboundMessage) -> Result<Self::Target, Self::AddressError>;

    /// The target of a message to a person ([`OutboundMessage::to_user`]: `chat_id` is their
    /// user id). By default a person's id names their direct chat too (Telegram); a platform
    /// that must first open one (Discord's DM channel) does it here.
    async fn person_target(
        &self,
        msg: &OutboundMessage,
        _shutdown: &CancellationToken,
    ) -> Result<Self::Target, Unreachable<Self::AddressError, Self::Error>> {
        self.target_of(msg).map_err(Unreachable::Address)
    }

    /// The sequence a message is delivered in: messages with the same key go out one after
    /// the other in arrival order. The chat, unless the platform orders per thread.
    fn queue_key(&self, msg: &OutboundMessage) -> String {
        msg.chat_id.clone()
    }

    /// The messages that deliver `msg`, in order (none for empty content without files).
    async fn plan(&self, msg: &OutboundMessage) -> Vec<Self::Step>;

    /// Sends step `index` of the delivery of outbound message `id`; the first step quotes the
    /// target's message. Retries what is worth retrying.
    async fn send_step(
        &self,
        target: &Self::Target,
        id: &str,
        index: usize,
        step: &Self::Step,
        shutdown: &CancellationToken,
    ) -> Result<(), Self::Error>;

    /// The chat moved (a Telegram group became a supergroup): points `target` at its new
    /// place and says so; the failed step is then sent there, once per message.
    fn redirect(&self, _target: &mut Self::Target, _err: &Self::Error) -> bool {
        false
    }

    /// Whether a streamed draft can be edited into `step` (files cannot be added by editing).
    fn can_edit_into(&self, step: &Self::Step) -> bool;

    /// Edits a draft message into the (first) step of a reply.
    async fn edit_into(
        &self,
        target: &Self::Target,
        message: &Self::MessageId,
        step: &Self::Step,
        shutdown: &CancellationToken,
    ) -> Result<(), Self::Error>;

    async fn delete(&self, target: &Self::Target, message: &Self::MessageId) -> Result<(), Self::Error>;

    /// The error can never go away for this message (bad address, no access): give it up
    /// rather than have the bus offer it again.
    fn is_final(&self, err: &Self::Error) -> bool;

    /// The error for a log line (without secrets such as a token in a URL).
    fn describe(&self, err: &Self::Error) -> String;

    // Live feedback.

    /// Where a run's typing and draft show, or `None` when its chat is not the platform's.
    fn live_target(&self, event: &RunEvent) -> Option<Self::Target>;
    fn typing_enabled(&self) -> bool;
    /// Whether replies stream into drafts in this chat.
    fn streams_in(&self, target: &Self::Target) -> bool;
    /// Shortest time between two edits of a draft.
    fn edit_interval(&self) -> Duration;
    async fn typing(&self, target: &Self::Target) -> Result<(), Self::Error>;

    /// The visible start of a draft's text (trimmed by the core).
    fn visible_draft(&self, text: &str) -> String;
    /// Posts a draft's first text (plain, quoting the target's message), once.
    async fn post_draft(&self, target: &Self::Target, text: &str) -> Result<Self::MessageId, Self::Error>;
    /// Edits a draft to its current text (plain), once; an unchanged text is no error.
    async fn edit_draft(&self, target: &Self::Target, message: &Self::MessageId, text: &str)
    -> Result<(), Self::Error>;
    /// A failed draft call that only asks to wait (flood control): how long. `None`: streaming
    /// stops for the run.
    fn draft_pause(&self, _err: &Self::Error) -> Option<Duration> {
        None
    }
}
