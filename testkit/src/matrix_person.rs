//! A person on Matrix for tests: a real client (matrix-sdk, end-to-end encryption included)
//! logged in to a test's [`Synapse`](crate::synapse::Synapse), syncing in the background, with
//! the room messages it sees collected for the test to wait on.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use matrix_sdk::config::SyncSettings;
use matrix_sdk::ruma::events::room::message::{OriginalSyncRoomMessageEvent, RoomMessageEventContent};
use matrix_sdk::ruma::{OwnedEventId, OwnedRoomId, OwnedUserId, UserId};
use matrix_sdk::{Client, Room};
pub use matrix_sdk_crypto::CollectStrategy;
use tempfile::TempDir;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

pub use matrix_sdk;

use crate::synapse::Account;

/// A room message a person's client received (decrypted when the room is encrypted).
#[derive(Debug, Clone)]
pub struct Seen {
    pub room: OwnedRoomId,
    pub sender: OwnedUserId,
    pub event_id: OwnedEventId,
    /// The plain `body`.
    pub body: String,
    /// The `formatted_body` (HTML), when there is one.
    pub html: Option<String>,
    /// The event this one replaces (`m.replace`), for edits, and the new text.
    pub replaces: Option<OwnedEventId>,
    pub new_body: Option<String>,
    /// The thread it is in (its root), and the message it answers (`m.in_reply_to`).
    pub thread: Option<OwnedEventId>,
    pub reply_to: Option<OwnedEventId>,
    /// Whether it came encrypted.
    pub encrypted: bool,
    /// Whether it is an `m.notice` (what bots say by themselves), not an `m.text`.
    pub notice: bool,
}

/// A reaction (`m.annotation`) a person's client received.
#[derive(Debug, Clone)]
pub struct Reaction {
    pub room: OwnedRoomId,
    pub sender: OwnedUserId,
    pub event_id: OwnedEventId,
    /// The message it is under, and its key.
    pub to: OwnedEventId,
    pub key: String,
}

/// A logged-in client, syncing until dropped.
pub struct Person {
    pub client: Client,
    seen: Arc<Mutex<Vec<Seen>>>,
    reactions: Arc<Mutex<Vec<Reaction>>>,
    /// Events redacted since the login.
    redacted: Arc<Mutex<Vec<OwnedEventId>>>,
    arrived: Arc<Notify>,
    sync: JoinHandle<()>,
    _store: TempDir,
}

impl Drop for Person {
    fn drop(&mut self) {
        self.sync.abort();
    }
}

impl Person {
    /// Logs `account` in at `homeserver` (a device of its own, its crypto store in a temporary
    /// directory), syncs once, and keeps syncing in the background.
    pub async fn login(homeserver: &str, account: &Account) -> Person {
        Self::login_sharing_keys(homeserver, account, CollectStrategy::AllDevices).await
    }

    /// The same, with a client that shares room keys only with the devices `strategy` picks:
    /// Element's "never send encrypted messages to unverified sessions" is
    /// `OnlyTrustedDevices`, Element X's exclusion of insecure devices `IdentityBasedStrategy`.
    pub async fn login_sharing_keys(homeserver: &str, account: &Account, strategy: CollectStrategy) -> Person {
        let store = tempfile::tempdir().unwrap_or_else(|err| panic!("temp dir: {err}"));
        let client = Client::builder()
            .homeserver_url(homeserver)
            .sqlite_store(store.path(), None)
            .with_room_key_recipient_strategy(strategy)
            .with_encryption_settings(matrix_sdk::encryption::EncryptionSettings {
                auto_enable_cross_signing: true,
                ..Default::default()
            })
            .build()
            .await
            .unwrap_or_else(|err| panic!("client for {}: {err}", account.user_id));
        client
            .matrix_auth()
            .login_username(&account.user_id, &account.password)
            .initial_device_display_name("test person")
            .send()
            .await
            .unwrap_or_else(|err| panic!("login of {}: {err}", account.user_id));
        let quick = SyncSettings::default().timeout(Duration::ZERO);
        client.sync_once(quick).await.unwrap_or_else(|err| panic!("first sync of {}: {err}", account.user_id));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let arrived = Arc::new(Notify::new());
        let (log, notify) = (Arc::clone(&seen), Arc::clone(&arrived));
        client.add_event_handler(
            move |event: OriginalSyncRoomMessageEvent, room: Room, raw: matrix_sdk::event_handler::RawEvent| {
                let (log, notify) = (Arc::clone(&log), Arc::clone(&notify));
                async move {
                    let encrypted =
                        raw.get().contains("\"m.room.encrypted\"") || room.encryption_state().is_encrypted();
                    log.lock().unwrap_or_else(PoisonError::into_inner).push(seen_of(&event, &room, encrypted));
                    notify.notify_waiters();
                }
            },
        );
        let (reactions, redacted) = watch_reactions(&client, &arrived);
        let syncing = client.clone();
        // `sync` returns at the first failed request (a restarted homeserver): start it again,
        // as a client app does.
        let sync = tokio::spawn(async move {
            loop {
                let settings = SyncSettings::default().timeout(Duration::from_millis(500));
                let _ = syncing.sync(settings).await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        Person { client, seen, reactions, redacted, arrived, sync, _store: store }
    }

    pub fn user_id(&self) -> OwnedUserId {
        self.client.user_id().map(ToOwned::to_owned).unwrap_or_else(|| panic!("a logged-in client has a user id"))
    }

    /// Creates an encrypted direct room with `other` (as Element does) and waits until they
    /// joined it.
    pub async fn open_dm(&self, other: &UserId) -> Room {
        let room = self.client.create_dm(other).await.unwrap_or_else(|err| panic!("create_dm: {err}"));
        self.wait_for_member(&room, other).await;
        room
    }

    /// Creates an encrypted group room (not direct) and invites `others`.
    pub async fn open_group(&self, others: &[&UserId]) -> Room {
        use matrix_sdk::ruma::api::client::room::create_room::v3::Request;
        use matrix_sdk::ruma::events::InitialStateEvent;
        use matrix_sdk::ruma::events::room::encryption::RoomEncryptionEventContent;
        let mut request = Request::new();
        request.name = Some("Dinner".to_owned());
        request.invite = others.iter().map(|user| (*user).to_owned()).collect();
        let encryption =
            InitialStateEvent::with_empty_state_key(RoomEncryptionEventContent::with_recommended_defaults());
        request.initial_state = vec![encryption.to_raw_any()];
        self.client.create_room(request).await.unwrap_or_else(|err| panic!("create_room: {err}"))
    }

    /// Accepts the invitation to `room` (waiting until the sync shows it).
    pub async fn join(&self, room: &matrix_sdk::ruma::RoomId) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(invited) = self.client.get_room(room) {
                invited.join().await.unwrap_or_else(|err| panic!("joining {room}: {err}"));
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "no invitation to {room}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until `user` is a joined member of `room`.
    pub async fn wait_for_member(&self, room: &Room, user: &UserId) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let _ = room.sync_members().await;
            if let Ok(Some(member)) = room.get_member_no_sync(user).await
                && *member.membership() == matrix_sdk::ruma::events::room::member::MembershipState::Join
            {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "{user} never joined {}", room.room_id());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Sends `text` to `room`; returns the event id.
    pub async fn say(&self, room: &Room, text: &str) -> OwnedEventId {
        let sent = room.send(RoomMessageEventContent::text_plain(text)).await;
        sent.unwrap_or_else(|err| panic!("sending to {}: {err}", room.room_id())).event_id
    }

    /// Sends `text` to `room` mentioning `user` (`m.mentions`, as Element's pills do).
    pub async fn say_to(&self, room: &Room, user: &UserId, text: &str) -> OwnedEventId {
        let mut content = RoomMessageEventContent::text_plain(text);
        content.mentions = Some(matrix_sdk::ruma::events::Mentions::with_user_ids([user.to_owned()]));
        let sent = room.send(content).await;
        sent.unwrap_or_else(|err| panic!("sending to {}: {err}", room.room_id())).event_id
    }

    /// Sends `text` into the thread of `root`, mentioning `user`.
    pub async fn say_in_thread(
        &self,
        room: &Room,
        root: &matrix_sdk::ruma::EventId,
        user: &UserId,
        text: &str,
    ) -> OwnedEventId {
        use matrix_sdk::ruma::events::relation::Thread;
        use matrix_sdk::ruma::events::room::message::Relation;
        let mut content = RoomMessageEventContent::text_plain(text);
        content.mentions = Some(matrix_sdk::ruma::events::Mentions::with_user_ids([user.to_owned()]));
        content.relates_to = Some(Relation::Thread(Thread::without_fallback(root.to_owned())));
        let sent = room.send(content).await;
        sent.unwrap_or_else(|err| panic!("sending to {}: {err}", room.room_id())).event_id
    }

    /// Sends an image (encrypted in an encrypted room, as Element does).
    pub async fn send_image(&self, room: &Room, name: &str, png: &[u8]) -> OwnedEventId {
        let config = matrix_sdk::attachment::AttachmentConfig::new();
        let sent = room.send_attachment(name, &mime::IMAGE_PNG, png.to_vec(), config).await;
        sent.unwrap_or_else(|err| panic!("sending an image to {}: {err}", room.room_id())).event_id
    }

    /// Reacts to `message` with `key`, as tapping a reaction (or picking an emoji) does.
    pub async fn react(&self, room: &Room, message: &matrix_sdk::ruma::EventId, key: &str) -> OwnedEventId {
        use matrix_sdk::ruma::events::reaction::ReactionEventContent;
        use matrix_sdk::ruma::events::relation::Annotation;
        let content = ReactionEventContent::new(Annotation::new(message.to_owned(), key.to_owned()));
        let sent = room.send(content).await;
        sent.unwrap_or_else(|err| panic!("reacting in {}: {err}", room.room_id())).event_id
    }

    /// The reactions under `message` that are still there (not redacted).
    pub fn reactions_to(&self, message: &matrix_sdk::ruma::EventId) -> Vec<Reaction> {
        let redacted = self.redacted.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let reactions = self.reactions.lock().unwrap_or_else(PoisonError::into_inner);
        reactions
            .iter()
            .filter(|reaction| reaction.to == message && !redacted.contains(&reaction.event_id))
            .cloned()
            .collect()
    }

    /// Waits until `check` finds what it looks for in what this person saw; panics after
    /// `within`, naming `what`.
    pub async fn wait_for<T>(&self, what: &str, within: Duration, check: impl Fn(&Person) -> Option<T>) -> T {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let arrived = self.arrived.notified();
            if let Some(found) = check(self) {
                return found;
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            assert!(!left.is_zero(), "{what}: not seen within {within:?}");
            let _ = tokio::time::timeout(left.min(Duration::from_millis(200)), arrived).await;
        }
    }

    /// Sends a voice message (`m.audio` marked as voice, as Element's recorder does).
    pub async fn send_voice(&self, room: &Room, ogg: &[u8]) -> OwnedEventId {
        use matrix_sdk::attachment::{AttachmentConfig, AttachmentInfo, BaseAudioInfo};
        let info = BaseAudioInfo { duration: Some(Duration::from_millis(2300)), ..BaseAudioInfo::default() };
        let config = AttachmentConfig::new().info(AttachmentInfo::Voice(info));
        let mime: mime::Mime = "audio/ogg".parse().unwrap_or(mime::APPLICATION_OCTET_STREAM);
        let sent = room.send_attachment("Voice message.ogg", &mime, ogg.to_vec(), config).await;
        sent.unwrap_or_else(|err| panic!("sending a voice message to {}: {err}", room.room_id())).event_id
    }

    /// Everything seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Waits until a message from `sender` in `room` is seen (beyond the first `after` of
    /// them) and returns it; panics after `within`.
    pub async fn next_from(&self, room: &Room, sender: &UserId, after: usize, within: Duration) -> Seen {
        let seen = self.try_next_from(room, sender, after, within).await;
        seen.unwrap_or_else(|| panic!("no message {after} from {sender} in {} within {within:?}", room.room_id()))
    }

    /// The same, `None` after `within` (for a test that shows more on failure).
    pub async fn try_next_from(&self, room: &Room, sender: &UserId, after: usize, within: Duration) -> Option<Seen> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let arrived = self.arrived.notified();
            let from: Vec<Seen> =
                self.seen().into_iter().filter(|seen| seen.room == room.room_id() && seen.sender == sender).collect();
            if let Some(seen) = from.get(after) {
                return Some(seen.clone());
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return None;
            }
            let _ = tokio::time::timeout(left.min(Duration::from_millis(200)), arrived).await;
        }
    }
}

/// Collects the reactions and redactions the client receives.
#[allow(clippy::type_complexity)]
fn watch_reactions(
    client: &Client,
    arrived: &Arc<Notify>,
) -> (Arc<Mutex<Vec<Reaction>>>, Arc<Mutex<Vec<OwnedEventId>>>) {
    use matrix_sdk::ruma::events::reaction::OriginalSyncReactionEvent;
    use matrix_sdk::ruma::events::room::redaction::OriginalSyncRoomRedactionEvent;
    let reactions = Arc::new(Mutex::new(Vec::new()));
    let redacted = Arc::new(Mutex::new(Vec::new()));
    let (log, notify) = (Arc::clone(&reactions), Arc::clone(arrived));
    client.add_event_handler(move |event: OriginalSyncReactionEvent, room: Room| {
        let (log, notify) = (Arc::clone(&log), Arc::clone(&notify));
        async move {
            let reaction = Reaction {
                room: room.room_id().to_owned(),
                sender: event.sender,
                event_id: event.event_id,
                to: event.content.relates_to.event_id,
                key: event.content.relates_to.key,
            };
            log.lock().unwrap_or_else(PoisonError::into_inner).push(reaction);
            notify.notify_waiters();
        }
    });
    let (log, notify) = (Arc::clone(&redacted), Arc::clone(arrived));
    // The redacted event's id is at the top (room versions up to 10) or in the content (11).
    client.add_event_handler(move |event: OriginalSyncRoomRedactionEvent| {
        let (log, notify) = (Arc::clone(&log), Arc::clone(&notify));
        async move {
            if let Some(redacts) = event.redacts.or(event.content.redacts) {
                log.lock().unwrap_or_else(PoisonError::into_inner).push(redacts);
                notify.notify_waiters();
            }
        }
    });
    (reactions, redacted)
}

fn seen_of(event: &OriginalSyncRoomMessageEvent, room: &Room, encrypted: bool) -> Seen {
    use matrix_sdk::ruma::events::room::message::{MessageType, Relation};
    let (body, html) = match &event.content.msgtype {
        MessageType::Text(text) => (text.body.clone(), text.formatted.as_ref().map(|f| f.body.clone())),
        MessageType::Notice(notice) => (notice.body.clone(), notice.formatted.as_ref().map(|f| f.body.clone())),
        other => (other.body().to_owned(), None),
    };
    let (mut replaces, mut new_body, mut thread, mut reply_to) = (None, None, None, None);
    match &event.content.relates_to {
        Some(Relation::Replacement(replacement)) => {
            replaces = Some(replacement.event_id.clone());
            new_body = Some(replacement.new_content.msgtype.body().to_owned());
        }
        Some(Relation::Thread(in_thread)) => {
            thread = Some(in_thread.event_id.clone());
            reply_to =
                in_thread.in_reply_to.as_ref().filter(|_| !in_thread.is_falling_back).map(|r| r.event_id.clone());
        }
        Some(Relation::Reply { in_reply_to }) => reply_to = Some(in_reply_to.event_id.clone()),
        _ => {}
    }
    Seen {
        room: room.room_id().to_owned(),
        sender: event.sender.clone(),
        event_id: event.event_id.clone(),
        body,
        html,
        replaces,
        new_body,
        thread,
        reply_to,
        encrypted,
        notice: matches!(event.content.msgtype, MessageType::Notice(_)),
    }
}
