//! Matrix's side of the delivery core: room events for replies, drafts (edited by `m.replace`),
//! redactions and typing, and the decisions only Matrix can make (room ids, threads, replies,
//! transaction ids, which errors are final).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use matrix_sdk::attachment::AttachmentConfig;
use matrix_sdk::ruma::api::client::error::{ErrorKind, RetryAfter};
use matrix_sdk::ruma::events::Mentions;
use matrix_sdk::ruma::events::reaction::ReactionEventContent;
use matrix_sdk::ruma::events::relation::Annotation;
use matrix_sdk::ruma::events::relation::{InReplyTo, Thread};
use matrix_sdk::ruma::events::room::message::{
    Relation, ReplacementMetadata, RoomMessageEventContent, RoomMessageEventContentWithoutRelation,
};
use matrix_sdk::ruma::{OwnedEventId, OwnedRoomId, OwnedTransactionId, OwnedUserId, RoomId, TransactionId};
use matrix_sdk::{Client, Room, RoomState};
use tokio_util::sync::CancellationToken;

use super::buttons::{self, Choice};
use super::format::{PART_CHARS, Part, parts};
use super::{CHANNEL, MatrixSettings};
use crate::contract::{Media, OutboundKind, OutboundMessage, RunEvent};
use crate::delivery::{DraftLimits, Platform, Unreachable};

/// Where a message goes: a room, the thread in it, and the message the first part answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub room: OwnedRoomId,
    pub thread: Option<OwnedEventId>,
    pub reply_to: Option<OwnedEventId>,
    /// Sent as `m.notice`, the type Matrix gives what a bot says by itself (and other bots do
    /// not answer): switchboard's notices, not the model's replies.
    pub notice: bool,
}

/// One message of a delivery.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    Text(Part),
    /// The part that lists the message's buttons, sent with them and the bot's reactions.
    Choose(Part, Vec<Choice>),
    File(Media),
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    #[error("not logged in to the homeserver yet")]
    NotConnected,
    #[error("the bot is not in room {0}")]
    NotInRoom(OwnedRoomId),
    #[error("cannot read the file to send: {0}")]
    File(std::io::Error),
    #[error("cannot write a message's buttons: {0}")]
    Buttons(serde_json::Error),
    #[error(transparent)]
    Matrix(#[from] matrix_sdk::Error),
}

impl SendError {
    fn kind(&self) -> Option<&ErrorKind> {
        match self {
            SendError::Matrix(err) => err.client_api_error_kind(),
            _ => None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a Matrix room id")]
pub(crate) struct AddressError(String);

/// The rooms the ingress saw, and whether each is direct: replies quote and drafts stream by it.
#[derive(Debug, Default)]
pub(crate) struct Directory {
    direct: Mutex<HashMap<OwnedRoomId, bool>>,
}

impl Directory {
    pub fn record(&self, room: &RoomId, direct: bool) {
        self.direct.lock().unwrap_or_else(PoisonError::into_inner).insert(room.to_owned(), direct);
    }

    fn is_direct(&self, room: &RoomId) -> bool {
        self.direct.lock().unwrap_or_else(PoisonError::into_inner).get(room).copied().unwrap_or(false)
    }
}

/// The client (once logged in), the directory and the settings, as the delivery core uses them.
pub(crate) struct MatrixPlatform {
    client: Arc<OnceLock<Client>>,
    directory: Arc<Directory>,
    settings: Arc<MatrixSettings>,
    /// Held while a person's direct room is looked up or created, so two messages to them at
    /// once do not open two rooms.
    opening: tokio::sync::Mutex<()>,
}

impl MatrixPlatform {
    pub fn new(client: Arc<OnceLock<Client>>, directory: Arc<Directory>, settings: Arc<MatrixSettings>) -> Self {
        Self { client, directory, settings, opening: tokio::sync::Mutex::new(()) }
    }

    fn room(&self, id: &RoomId) -> Result<Room, SendError> {
        let client = self.client.get().ok_or(SendError::NotConnected)?;
        let room = client.get_room(id).filter(|room| room.state() == RoomState::Joined);
        room.ok_or_else(|| SendError::NotInRoom(id.to_owned()))
    }

    /// The relation of a message to `target`: in its thread (answering the trigger, for the
    /// first part), or answering the trigger outside direct rooms.
    fn relation(&self, target: &Target, first: bool) -> Option<Relation<RoomMessageEventContentWithoutRelation>> {
        let reply_to = target.reply_to.clone().filter(|_| first);
        match (&target.thread, reply_to) {
            (Some(root), Some(reply_to)) => Some(Relation::Thread(Thread::reply(root.clone(), reply_to))),
            (Some(root), None) => Some(Relation::Thread(Thread::without_fallback(root.clone()))),
            (None, Some(reply_to)) if !self.directory.is_direct(&target.room) => {
                Some(Relation::Reply { in_reply_to: InReplyTo::new(reply_to) })
            }
            (None, _) => None,
        }
    }

    fn content(&self, target: &Target, part: &Part, first: bool) -> RoomMessageEventContent {
        let (body, html) = (part.body.clone(), part.html.clone());
        let mut content = match (html, target.notice) {
            (Some(html), false) => RoomMessageEventContent::text_html(body, html),
            (None, false) => RoomMessageEventContent::text_plain(body),
            (Some(html), true) => RoomMessageEventContent::notice_html(body, html),
            (None, true) => RoomMessageEventContent::notice_plain(body),
        };
        content.relates_to = self.relation(target, first);
        // Nobody is pinged by an answer, not even the person it answers.
        content.mentions = Some(Mentions::new());
        content
    }

    /// The bot's own reaction with each choice's key under `message`, for the owner to tap.
    /// Their transaction ids follow the message's, so a retried step reacts once.
    async fn offer(
        &self,
        room: &Room,
        message: &OwnedEventId,
        choices: &[Choice],
        txn: &TransactionId,
    ) -> Result<(), SendError> {
        for (n, choice) in choices.iter().enumerate() {
            let reaction = ReactionEventContent::new(Annotation::new(message.clone(), choice.key.clone()));
            let txn = OwnedTransactionId::from(transaction_id(txn.as_str(), n));
            room.send(reaction).with_transaction_id(txn).await?;
        }
        Ok(())
    }

    async fn send_file(&self, room: &Room, media: &Media, txn: &TransactionId) -> Result<(), SendError> {
        let Some(path) = media.path.as_deref() else { return Ok(()) };
        let data = tokio::fs::read(path).await.map_err(SendError::File)?;
        let name = media.file_name.clone().unwrap_or_else(|| file_name(path));
        let mime = media
            .mime_type
            .as_deref()
            .and_then(|mime| mime.parse::<mime::Mime>().ok())
            .unwrap_or(mime::APPLICATION_OCTET_STREAM);
        let config = AttachmentConfig::new().txn_id(txn.to_owned());
        room.send_attachment(name, &mime, data, config).await?;
        Ok(())
    }
}

/// The transaction id of part `part` of the message known as `key`: the same for every attempt
/// and redelivery, so the homeserver, which answers a repeated transaction id with the event it
/// made the first time, posts it once.
pub(crate) fn transaction_id(key: &str, part: usize) -> String {
    format!("sb{}", crate::delivery::idempotency_key(key, part))
}

/// A rate limit that outlasted the client library's own waits (it honours `retry_after_ms`
/// up to three times) counts in `switchboard_rate_limited_total{channel="matrix"}`.
fn count_rate_limit(err: &SendError) {
    if matches!(err.kind(), Some(ErrorKind::LimitExceeded { .. })) {
        crate::meters::meters().told_to_wait(CHANNEL);
    }
}

/// Sends a short notice that needs no agent (a pairing code, a press's answer), pinging nobody;
/// its transaction id comes from `key`, so the same notice given again (a replayed event after a
/// restart) is one message. Best effort: a failure is logged.
pub(crate) async fn say_notice(room: &Room, key: &str, text: &str) {
    let part = super::format::render(text);
    let mut content = match part.html {
        Some(html) => RoomMessageEventContent::notice_html(part.body, html),
        None => RoomMessageEventContent::notice_plain(part.body),
    };
    content.mentions = Some(Mentions::new());
    let txn = OwnedTransactionId::from(transaction_id(key, 0));
    if let Err(err) = room.send(content).with_transaction_id(txn).await {
        tracing::warn!(room = %room.room_id(), %err, "cannot send a notice");
    }
}

fn file_name(path: &str) -> String {
    std::path::Path::new(path).file_name().map_or_else(|| "file".to_owned(), |name| name.to_string_lossy().into_owned())
}

#[async_trait]
impl Platform for MatrixPlatform {
    const NAME: &'static str = "Matrix";
    const CHANNEL: &'static str = CHANNEL;
    /// The client library marks typing for 4 s and repeats it no sooner than after 3 s.
    const TYPING_INTERVAL: Duration = Duration::from_secs(3);
    const DRAFT: DraftLimits = DraftLimits { kept_bytes: 4 * PART_CHARS };
    type Target = Target;
    type MessageId = OwnedEventId;
    type Step = Step;
    type Error = SendError;
    type AddressError = AddressError;

    fn target_of(&self, msg: &OutboundMessage) -> Result<Target, AddressError> {
        let room = OwnedRoomId::try_from(msg.chat_id.as_str()).map_err(|_| AddressError(msg.chat_id.clone()))?;
        let thread = msg.thread_id.as_deref().and_then(|id| OwnedEventId::try_from(id).ok());
        let reply_to = msg.reply_to.as_deref().and_then(|id| OwnedEventId::try_from(id).ok());
        Ok(Target { room, thread, reply_to, notice: msg.kind == OutboundKind::Notice })
    }

    /// The person's direct room with the bot: the one the account's `m.direct` names, else
    /// a new encrypted one they are invited to.
    async fn person_target(
        &self,
        msg: &OutboundMessage,
        _shutdown: &CancellationToken,
    ) -> Result<Target, Unreachable<AddressError, SendError>> {
        let user = OwnedUserId::try_from(msg.chat_id.as_str())
            .map_err(|_| Unreachable::Address(AddressError(msg.chat_id.clone())))?;
        let client = self.client.get().ok_or(Unreachable::Failed(SendError::NotConnected))?;
        let _opening = self.opening.lock().await;
        let room = match client.get_dm_room(&user) {
            Some(room) => room,
            None => {
                let room = client.create_dm(&user).await.map_err(|err| Unreachable::Failed(err.into()))?;
                tracing::info!(%user, room = %room.room_id(), "opened a Matrix direct room");
                room
            }
        };
        self.directory.record(room.room_id(), true);
        let notice = msg.kind == OutboundKind::Notice;
        Ok(Target { room: room.room_id().to_owned(), thread: None, reply_to: None, notice })
    }

    /// The text's parts, the last one listing the buttons, if any; then the files.
    async fn plan(&self, msg: &OutboundMessage) -> Vec<Step> {
        let choices = buttons::choices(&msg.buttons);
        let mut steps: Vec<Step> = if choices.is_empty() {
            parts(&msg.content).into_iter().map(Step::Text).collect()
        } else {
            let mut text: Vec<Step> =
                buttons::with_legend(parts(&msg.content), &choices).into_iter().map(Step::Text).collect();
            if let Some(Step::Text(last)) = text.pop() {
                text.push(Step::Choose(last, choices));
            }
            text
        };
        steps.extend(msg.media.iter().filter(|media| media.path.is_some()).cloned().map(Step::File));
        steps
    }

    /// Retries and redeliveries carry the same transaction id, so a send whose answer was lost
    /// is not posted twice.
    async fn send_step(
        &self,
        target: &Target,
        id: &str,
        index: usize,
        step: &Step,
        _shutdown: &CancellationToken,
    ) -> Result<(), SendError> {
        let room = self.room(&target.room)?;
        let txn = OwnedTransactionId::from(transaction_id(id, index));
        let sent = match step {
            Step::Text(part) => {
                room.send(self.content(target, part, index == 0)).with_transaction_id(txn).await?;
                Ok(())
            }
            Step::Choose(part, choices) => {
                let content = self.content(target, part, index == 0);
                let content = buttons::carrying(&content, choices).map_err(SendError::Buttons)?;
                let sent = room.send_raw("m.room.message", content).with_transaction_id(&txn).await?;
                self.offer(&room, &sent.event_id, choices, &txn).await
            }
            Step::File(media) => self.send_file(&room, media, &txn).await,
        };
        sent.inspect_err(count_rate_limit)
    }

    fn can_edit_into(&self, step: &Step) -> bool {
        matches!(step, Step::Text(_))
    }

    async fn edit_into(
        &self,
        target: &Target,
        message: &OwnedEventId,
        step: &Step,
        _shutdown: &CancellationToken,
    ) -> Result<(), SendError> {
        let Step::Text(part) = step else { return Ok(()) };
        let room = self.room(&target.room)?;
        let mut replacement = self.content(target, part, true);
        replacement.relates_to = None;
        let edit = replacement.make_replacement(ReplacementMetadata::new(message.clone(), Some(Mentions::new())));
        room.send(edit).await?;
        Ok(())
    }

    async fn delete(&self, target: &Target, message: &OwnedEventId) -> Result<(), SendError> {
        let room = self.room(&target.room)?;
        room.redact(message, None, None).await.map_err(|err| SendError::Matrix(err.into()))?;
        Ok(())
    }

    fn is_final(&self, err: &SendError) -> bool {
        match err {
            SendError::NotInRoom(_) | SendError::File(_) | SendError::Buttons(_) => true,
            SendError::NotConnected => false,
            SendError::Matrix(_) => matches!(
                err.kind(),
                Some(ErrorKind::Forbidden { .. } | ErrorKind::NotFound | ErrorKind::TooLarge | ErrorKind::BadJson)
            ),
        }
    }

    fn describe(&self, err: &SendError) -> String {
        err.to_string()
    }

    fn live_target(&self, event: &RunEvent) -> Option<Target> {
        let room = OwnedRoomId::try_from(event.chat_id.as_str()).ok()?;
        let thread = event.thread_id.as_deref().and_then(|id| OwnedEventId::try_from(id).ok());
        let reply_to = event.reply_to.as_deref().and_then(|id| OwnedEventId::try_from(id).ok());
        Some(Target { room, thread, reply_to, notice: false })
    }

    fn typing_enabled(&self) -> bool {
        self.settings.typing
    }

    fn streams_in(&self, target: &Target) -> bool {
        let stream = &self.settings.stream;
        if self.directory.is_direct(&target.room) { stream.private } else { stream.groups }
    }

    fn edit_interval(&self) -> Duration {
        self.settings.stream.edit_interval
    }

    async fn typing(&self, target: &Target) -> Result<(), SendError> {
        self.room(&target.room)?.typing_notice(true).await?;
        Ok(())
    }

    /// The draft stops growing at one event's worth; the final reply shows everything.
    fn visible_draft(&self, text: &str) -> String {
        text.chars().take(PART_CHARS).collect()
    }

    async fn post_draft(&self, target: &Target, text: &str) -> Result<OwnedEventId, SendError> {
        let room = self.room(&target.room)?;
        let part = Part { body: text.to_owned(), html: None };
        Ok(room.send(self.content(target, &part, true)).await?.event_id)
    }

    async fn edit_draft(&self, target: &Target, message: &OwnedEventId, text: &str) -> Result<(), SendError> {
        let room = self.room(&target.room)?;
        let content = RoomMessageEventContent::text_plain(text);
        let edit = content.make_replacement(ReplacementMetadata::new(message.clone(), Some(Mentions::new())));
        room.send(edit).await?;
        Ok(())
    }

    /// Rate limited: streaming waits as long as the homeserver asks.
    fn draft_pause(&self, err: &SendError) -> Option<Duration> {
        count_rate_limit(err);
        match err.kind() {
            Some(ErrorKind::LimitExceeded { retry_after }) => Some(match retry_after {
                Some(RetryAfter::Delay(delay)) => *delay,
                _ => Duration::from_secs(1),
            }),
            _ => None,
        }
    }
}
