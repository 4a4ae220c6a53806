//! One room event in: decrypted (or why not, told once), classified, judged by the access
//! rules, answered locally (pairing codes) or put on the bus; and invitations accepted or not.
//!
//! The sync position is saved only after every message of a sync response was taken by the
//! bus (see `sync`), so a message is retried here while the bus refuses it and comes back
//! after a crash; its id (room and event) makes the second copy a duplicate the bus drops.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::Utc;
use matrix_sdk::deserialized_responses::{TimelineEvent, TimelineEventKind};
use matrix_sdk::ruma::events::room::message::OriginalSyncRoomMessageEvent;
use matrix_sdk::ruma::events::{AnySyncMessageLikeEvent, AnySyncTimelineEvent, SyncMessageLikeEvent};
use matrix_sdk::ruma::{OwnedRoomId, OwnedUserId};
use matrix_sdk::{Client, Room, RoomState};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::buttons;
use super::download::fetch_attachment;
use super::gate::{self, InviteVerdict, Message, Verdict};
use super::inbound::{Incoming, Skip, classify};
use super::members::{display_name, is_direct};
use super::platform::{Directory, say_notice};
use super::presses::Presses;
use super::{CHANNEL, MatrixSettings};
use crate::bus::{Bus, BusError, BusExt};
use crate::contract::{InboundMessage, Sender};
use crate::control::OwnerLink;
use crate::delivery::group_context::GroupContext;
use crate::delivery::pairing::{PairingCheck, Stranger};
use crate::pairing::PairingAnswer;

/// Backoff while the bus refuses a message: doubles up to the cap.
const BUS_BACKOFF_START: Duration = Duration::from_millis(500);
const BUS_BACKOFF_CAP: Duration = Duration::from_secs(30);
/// What a room is told, once, when a message there could not be decrypted.
const UNDECRYPTABLE: &str = "I could not read a message here: it is end-to-end encrypted and my device did not \
     receive its key. If you verify or re-share keys with my device (or send it again), I can answer.";

/// The inbound half of the Matrix channel.
pub(crate) struct Ingress {
    bus: Arc<dyn Bus>,
    settings: Arc<MatrixSettings>,
    pairing: PairingCheck,
    directory: Arc<Directory>,
    /// Recent room messages that did not address the bot, for the next one that does.
    context: Mutex<GroupContext>,
    /// Rooms told that a message could not be decrypted (once each while the process runs).
    told_undecryptable: Mutex<HashSet<OwnedRoomId>>,
    /// Reactions that press the owner's buttons.
    presses: Arc<Presses>,
    shutdown: CancellationToken,
}

impl Ingress {
    pub fn new(
        bus: Arc<dyn Bus>,
        settings: Arc<MatrixSettings>,
        owner: OwnerLink,
        directory: Arc<Directory>,
        shutdown: CancellationToken,
    ) -> Self {
        let presses = Arc::new(Presses::new(owner.desk.clone()));
        let pairing = PairingCheck::new(CHANNEL, owner, settings.pairing_ttl, settings.pairing_max_pending);
        let context = Mutex::new(GroupContext::new(settings.group_context_messages));
        let told_undecryptable = Mutex::new(HashSet::new());
        Self { bus, settings, pairing, directory, context, told_undecryptable, presses, shutdown }
    }

    /// Hands the event over, retrying while the bus refuses it. `false`: shutting down before
    /// the bus took it (the sync position must then not move past it).
    pub async fn handle_until_accepted(&self, room: &Room, event: &TimelineEvent) -> bool {
        let mut backoff = BUS_BACKOFF_START;
        loop {
            let Err(err) = self.handle(room, event).await else { return true };
            tracing::warn!(room = %room.room_id(), %err, wait = ?backoff, "the bus did not take a Matrix message; retrying");
            tokio::select! {
                _ = self.shutdown.cancelled() => return false,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(BUS_BACKOFF_CAP);
        }
    }

    /// Handles one timeline event. `Err` means the bus did not take it.
    async fn handle(&self, room: &Room, event: &TimelineEvent) -> Result<(), BusError> {
        if let TimelineEventKind::UnableToDecrypt { utd_info, .. } = &event.kind {
            self.undecryptable(room, &format!("{:?}", utd_info.reason)).await;
            return Ok(());
        }
        let message = match event.raw().deserialize() {
            Ok(AnySyncTimelineEvent::MessageLike(AnySyncMessageLikeEvent::RoomMessage(
                SyncMessageLikeEvent::Original(message),
            ))) => message,
            Ok(AnySyncTimelineEvent::MessageLike(AnySyncMessageLikeEvent::Reaction(
                SyncMessageLikeEvent::Original(reaction),
            ))) => {
                // Reactions are not answered; one with a button's key may press it.
                let key = &reaction.content.relates_to.key;
                if reaction.sender != room.own_user_id() && buttons::may_be_button(key) {
                    self.presses.spawn(room.clone(), reaction);
                }
                return Ok(());
            }
            // Redactions, state and the rest are not answered.
            Ok(_) => return Ok(()),
            Err(err) => {
                tracing::debug!(room = %room.room_id(), %err, "a Matrix event that does not parse; skipped");
                return Ok(());
            }
        };
        self.handle_message(room, &message).await
    }

    async fn handle_message(&self, room: &Room, event: &OriginalSyncRoomMessageEvent) -> Result<(), BusError> {
        let bot = room.own_user_id().to_owned();
        let bot_name = display_name(room, &bot).await;
        let msg = match classify(event, &bot, bot_name.as_deref()) {
            Ok(msg) => msg,
            Err(skip) => {
                if skip != Skip::OwnMessage {
                    tracing::debug!(room = %room.room_id(), event = %event.event_id, ?skip, "matrix message skipped");
                }
                return Ok(());
            }
        };
        let direct = is_direct(room).await;
        self.directory.record(room.room_id(), direct);
        let addressed = direct || msg.mentions_bot || msg.text.trim_start().starts_with('/') || {
            self.replies_to_bot(room, &msg, &bot).await
        };
        let rules = Message {
            sender: msg.sender.as_str(),
            room: room.room_id().as_str(),
            direct,
            addressed,
            notice: msg.notice,
        };
        match gate::judge(&rules, &self.settings) {
            Verdict::Forward => self.forward(room, &msg, direct, addressed).await,
            Verdict::KeepAsContext => {
                let name = display_name(room, &msg.sender).await.unwrap_or_else(|| msg.sender.to_string());
                self.lock_context().remember(conversation(room, &msg), &name, &msg.text, msg.sent_at);
                Ok(())
            }
            Verdict::CheckPairing => self.check_pairing(room, &msg, direct).await,
            Verdict::Ignore(reason) => {
                tracing::debug!(room = %room.room_id(), sender = %msg.sender, reason, "matrix message ignored");
                Ok(())
            }
        }
    }

    /// Whether the message answers one of the bot's (fetched from the homeserver when it is
    /// not in the client's cache).
    async fn replies_to_bot(&self, room: &Room, msg: &Incoming, bot: &OwnedUserId) -> bool {
        let Some(reply_to) = &msg.reply_to else { return false };
        match room.load_or_fetch_event(reply_to, None).await {
            Ok(event) => event.raw().get_field::<OwnedUserId>("sender").ok().flatten().as_ref() == Some(bot),
            Err(err) => {
                tracing::debug!(room = %room.room_id(), %err, "cannot look up the message a reply answers");
                false
            }
        }
    }

    async fn forward(&self, room: &Room, msg: &Incoming, direct: bool, mentioned: bool) -> Result<(), BusError> {
        let place = conversation(room, msg);
        let mut content = msg.text.clone();
        let takes_context = !direct && !content.trim_start().starts_with('/');
        if takes_context {
            content = self.lock_context().before(&place, content, Utc::now());
        }
        let client = room.client();
        let (media, marker) =
            fetch_attachment(&client, room.room_id(), msg, &self.settings.media_dir, self.settings.media_max_bytes)
                .await;
        if let Some(marker) = marker {
            content = if content.is_empty() { marker } else { format!("{content}\n{marker}") };
        }
        let name = display_name(room, &msg.sender).await.unwrap_or_else(|| msg.sender.localpart().to_owned());
        let inbound = InboundMessage { media, ..inbound_message(room, msg, direct, mentioned, content, name) };
        self.bus.publish_inbound(&inbound).await?;
        // Only now: a message the bus did not take keeps its context for the retry.
        if takes_context {
            self.lock_context().clear(&place);
        }
        tracing::debug!(id = %inbound.id, "matrix message accepted");
        Ok(())
    }

    async fn check_pairing(&self, room: &Room, msg: &Incoming, direct: bool) -> Result<(), BusError> {
        let name = display_name(room, &msg.sender).await.unwrap_or_else(|| msg.sender.localpart().to_owned());
        let sender = Sender { id: msg.sender.to_string(), name, is_bot: false };
        let chat_id = room.room_id().to_string();
        let stranger = Stranger { sender: &sender, username: None, chat_id: &chat_id, text: &msg.text };
        match self.pairing.check(stranger).await {
            PairingAnswer::Approved => return self.forward(room, msg, direct, true).await,
            PairingAnswer::Reply(text) => {
                let key = format!("{}:{}", room.room_id(), msg.event_id);
                say_notice(room, &key, &text).await;
            }
            PairingAnswer::Silent => {}
        }
        Ok(())
    }

    /// Logs why a message could not be decrypted, and tells its room once.
    async fn undecryptable(&self, room: &Room, reason: &str) {
        tracing::warn!(
            room = %room.room_id(),
            reason,
            "a Matrix message could not be decrypted: this device did not get its key"
        );
        let first =
            self.told_undecryptable.lock().unwrap_or_else(PoisonError::into_inner).insert(room.room_id().to_owned());
        if first {
            let key = format!("{}:undecryptable", room.room_id());
            say_notice(room, &key, UNDECRYPTABLE).await;
        }
    }

    /// An invitation: joined, declined or left pending as the rules say.
    pub async fn invitation(&self, client: &Client, room_id: &OwnedRoomId) {
        let Some(room) = client.get_room(room_id).filter(|room| room.state() == RoomState::Invited) else { return };
        let inviter = match room.invite_details().await {
            Ok(invite) => invite.inviter.map(|member| member.user_id().to_owned()),
            Err(err) => {
                tracing::warn!(room = %room_id, %err, "cannot read a Matrix invitation");
                return;
            }
        };
        let Some(inviter) = inviter else { return };
        let direct = room.is_direct().await.unwrap_or(false);
        let verdict = gate::judge_invite(inviter.as_str(), room_id.as_str(), direct, &self.settings);
        let outcome = match verdict {
            InviteVerdict::Join => room.join().await.map(|()| "joined"),
            InviteVerdict::Decline(reason) => {
                tracing::info!(room = %room_id, %inviter, reason, "declining a Matrix invitation");
                room.leave().await.map(|()| "declined")
            }
            InviteVerdict::Leave(reason) => {
                tracing::info!(room = %room_id, %inviter, reason, "leaving a Matrix invitation pending");
                return;
            }
        };
        match outcome {
            Ok(done) => tracing::info!(room = %room_id, %inviter, direct, "{done} a Matrix invitation"),
            Err(err) => tracing::warn!(room = %room_id, %inviter, %err, "cannot answer a Matrix invitation"),
        }
    }

    fn lock_context(&self) -> std::sync::MutexGuard<'_, GroupContext> {
        self.context.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The conversation a message belongs to, as its session key (the group context's key).
fn conversation(room: &Room, msg: &Incoming) -> String {
    let thread = msg.thread.as_ref().map(|root| root.to_string());
    crate::contract::session_key(CHANNEL, room.room_id().as_str(), thread.as_deref())
}

/// The bus message for a classified message, with its content (text and context) put together.
fn inbound_message(
    room: &Room,
    msg: &Incoming,
    direct: bool,
    mentioned: bool,
    content: String,
    name: String,
) -> InboundMessage {
    let mut metadata = Map::new();
    metadata.insert(crate::contract::MESSAGE_ID.into(), Value::String(msg.event_id.to_string()));
    if let Some(room_name) = room.name() {
        metadata.insert("room_name".into(), Value::String(room_name));
    }
    InboundMessage {
        id: format!("{CHANNEL}:{}:{}", room.room_id(), msg.event_id),
        channel: CHANNEL.to_owned(),
        chat_id: room.room_id().to_string(),
        sender: Sender { id: msg.sender.to_string(), name, is_bot: false },
        content,
        reply_to: msg.reply_to.as_ref().map(ToString::to_string),
        thread_id: msg.thread.as_ref().map(ToString::to_string),
        is_group: !direct,
        mentioned,
        received_at: Utc::now(),
        metadata,
        ..InboundMessage::default()
    }
}
