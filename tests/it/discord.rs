//! The Discord channel's inbound side against the fake Discord (REST and gateway, driven by
//! serenity), with a real in-process bus and a real SQLite store for pairing: what reaches the
//! agent, with which ids and session, what is ignored, and what is answered locally.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;
use switchboard::store::Database;
use switchboard::store::sqlite::SqliteStore;
use switchboard_channels::bus::in_process::InProcessBus;
use switchboard_channels::control::OwnerLink;
use switchboard_channels::delivery::DeliveryPolicy;
use switchboard_channels::discord::{DiscordChannel, DiscordError, DiscordSettings, DmPolicy};
use switchboard_channels::pairing::PairingStore;
use switchboard_channels::{Bus, Deliveries, InboundMessage};
use switchboard_testkit::fake_discord::{BOT_ID, FakeDiscord, events};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(5);
const GUILD: u64 = 100;
const CHANNEL: u64 = 200;
const OTHER_CHANNEL: u64 = 201;
const THREAD: u64 = 400;
const DM: u64 = 300;
const ALICE: u64 = 111;
const BOB: u64 = 222;
/// A role the bot holds in GUILD, and one it does not.
const BOT_ROLE: u64 = 70;
const OTHER_ROLE: u64 = 71;

struct Rig {
    fake: FakeDiscord,
    inbound: Deliveries,
    store: Arc<dyn Database>,
    shutdown: CancellationToken,
    channel: Option<DiscordChannel>,
    dir: tempfile::TempDir,
}

impl Rig {
    async fn start(configure: impl FnOnce(&mut DiscordSettings)) -> Rig {
        let fake = FakeDiscord::start().await;
        fake.add_guild(GUILD, &[BOT_ROLE]);
        fake.add_channel(events::text_channel(GUILD, CHANNEL));
        fake.add_channel(events::text_channel(GUILD, OTHER_CHANNEL));
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(&dir.path().join("store.db")).await.unwrap());
        let bus = Arc::new(InProcessBus::new(64));
        let inbound = bus.inbound().await.unwrap();
        let mut settings = settings(&fake, &dir);
        configure(&mut settings);
        let shutdown = CancellationToken::new();
        let owner = OwnerLink { pairing: Some(Arc::clone(&store) as Arc<dyn PairingStore>), desk: None };
        let channel =
            DiscordChannel::start(bus, settings, owner, DeliveryPolicy::default(), shutdown.clone()).await.unwrap();
        fake.wait_connected(1, WAIT).await;
        Rig { fake, inbound, store, shutdown, channel: Some(channel), dir }
    }

    /// The next message the agent would get.
    async fn next(&mut self) -> InboundMessage {
        let delivery = tokio::time::timeout(WAIT, self.inbound.next())
            .await
            .expect("no inbound message within 5 s")
            .unwrap()
            .unwrap();
        let message = delivery.decode().unwrap();
        delivery.ack().await.unwrap();
        message
    }

    /// Every message that reaches the agent until none came for a moment.
    async fn drain(&mut self) -> Vec<InboundMessage> {
        let mut messages = Vec::new();
        while let Ok(Some(delivery)) = tokio::time::timeout(Duration::from_millis(700), self.inbound.next()).await {
            let delivery = delivery.unwrap();
            messages.push(delivery.decode().unwrap());
            delivery.ack().await.unwrap();
        }
        messages
    }

    async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(channel) = self.channel.take() {
            tokio::time::timeout(WAIT, channel.stop()).await.expect("the channel stops in time");
        }
    }
}

fn settings(fake: &FakeDiscord, dir: &tempfile::TempDir) -> DiscordSettings {
    DiscordSettings {
        token: FakeDiscord::TOKEN.into(),
        proxy_url: Some(fake.url()),
        allow_from: vec![ALICE.to_string()],
        media_dir: dir.path().join("media"),
        ..DiscordSettings::default()
    }
}

fn guild_message(message_id: u64, content: &str) -> Value {
    events::guild_message(GUILD, CHANNEL, ALICE, "alice", message_id, content)
}

fn message_ids(messages: &[InboundMessage]) -> BTreeSet<String> {
    messages.iter().map(|m| m.metadata["message_id"].as_str().unwrap_or_default().to_owned()).collect()
}

fn ids(ids: &[u64]) -> BTreeSet<String> {
    ids.iter().map(u64::to_string).collect()
}

#[tokio::test]
async fn a_dm_from_an_allowlisted_user_reaches_the_bus() {
    let mut rig = Rig::start(|_| {}).await;
    rig.fake.send_message_create(events::dm_message(DM, ALICE, "alice", 10, "hello bot"));
    let msg = rig.next().await;
    assert_eq!(msg.id, "discord:300:10");
    assert_eq!(msg.channel, "discord");
    assert_eq!(msg.chat_id, "300");
    assert_eq!(msg.thread_id, None);
    assert_eq!(msg.session_key(), "discord:300");
    assert_eq!(msg.content, "hello bot");
    assert_eq!((msg.sender.id.as_str(), msg.sender.name.as_str(), msg.sender.is_bot), ("111", "Alice", false));
    assert!(!msg.is_group && msg.mentioned);
    assert_eq!(msg.metadata["message_id"], "10");
    assert_eq!(msg.metadata["channel_id"], "300");
    assert_eq!(msg.metadata["username"], "alice");
    assert!(msg.metadata.get("guild_id").is_none());
    rig.stop().await;
}

#[tokio::test]
async fn guild_messages_are_answered_only_when_addressed() {
    let mut rig = Rig::start(|settings| settings.answer_all_in = vec![OTHER_CHANNEL.to_string()]).await;
    let bot_said = events::from_bot(guild_message(1, "earlier answer"));
    let bob_said = events::guild_message(GUILD, CHANNEL, BOB, "bob", 2, "bob's words");
    let cases = [
        (guild_message(11, "plain chatter"), false),
        (events::mentioning_user(guild_message(12, "<@5000> hi"), BOT_ID), true),
        (events::mentioning_role(guild_message(13, "<@&70> hi"), BOT_ROLE), true),
        (events::mentioning_role(guild_message(14, "<@&71> hi"), OTHER_ROLE), false),
        (events::replying_to(guild_message(15, "thanks"), bot_said), true),
        (events::replying_to(guild_message(16, "agreed"), bob_said), false),
        (events::guild_message(GUILD, OTHER_CHANNEL, ALICE, "alice", 17, "no mention needed"), true),
    ];
    let expected: Vec<u64> = (11..=17).zip(&cases).filter(|(_, (_, answered))| *answered).map(|(id, _)| id).collect();
    for (message, _) in cases {
        rig.fake.send_message_create(message);
    }
    let received = rig.drain().await;
    assert_eq!(message_ids(&received), ids(&expected));
    let mentioned = received.iter().find(|m| m.metadata["message_id"] == "12").unwrap();
    // The chatter before it comes along as context; the mention stays in the text.
    assert!(
        mentioned.content.ends_with("Alice: plain chatter\n[End of recent messages]\n\n<@5000> hi"),
        "{}",
        mentioned.content
    );
    assert_eq!((mentioned.chat_id.as_str(), mentioned.id.as_str()), ("200", "discord:200:12"));
    assert!(mentioned.is_group && mentioned.mentioned);
    assert_eq!(mentioned.metadata["guild_id"], "100");
    let unmentioned = received.iter().find(|m| m.metadata["message_id"] == "17").unwrap();
    assert!(!unmentioned.mentioned, "answered in an answer_all_in channel without a mention");
    assert_eq!(rig.fake.calls_to("GET /guilds/{id}/members/{id}").len(), 1, "the bot's roles are cached");
    rig.stop().await;
}

/// Unaddressed messages are kept per channel or thread and come along with the next mention
/// there, once, with their authors' display names; a reply also says what it answers.
#[tokio::test]
async fn unaddressed_guild_messages_become_context_for_the_next_mention_in_their_place() {
    let mut rig = Rig::start(|_| {}).await;
    rig.fake.add_channel(events::thread(GUILD, THREAD, CHANNEL));
    rig.fake.send_message_create(events::guild_message(GUILD, CHANNEL, BOB, "bob", 30, "let's meet at 6"));
    rig.fake.send_message_create(events::guild_message(GUILD, THREAD, BOB, "bob", 31, "in the thread"));
    let in_channel = events::mentioning_user(guild_message(32, "<@5000> thoughts?"), BOT_ID);
    let reply =
        events::replying_to(in_channel, events::guild_message(GUILD, CHANNEL, BOB, "bob", 30, "let's meet at 6"));
    rig.fake.send_message_create(reply);
    let first = rig.next().await;
    let expected = "[Recent messages in this chat, not addressed to you, for context]\nBob: let's meet at 6\n\
                    [End of recent messages]\n\n<@5000> thoughts?";
    assert_eq!(first.content, expected, "the thread's message stays in the thread");
    assert_eq!(first.reply_to.as_deref(), Some("30"));
    let replied = first.replied_to.unwrap();
    assert_eq!((replied.sender.name.as_str(), replied.text.as_str()), ("Bob", "let's meet at 6"));
    rig.fake.send_message_create(events::mentioning_user(guild_message(33, "<@5000> again"), BOT_ID));
    assert_eq!(rig.next().await.content, "<@5000> again", "context is shown once");
    let in_thread = events::guild_message(GUILD, THREAD, ALICE, "alice", 34, "<@5000> and here?");
    rig.fake.send_message_create(events::mentioning_user(in_thread, BOT_ID));
    assert!(rig.next().await.content.contains("Bob: in the thread\n"));
    rig.stop().await;
}

#[tokio::test]
async fn thread_messages_have_a_thread_session_and_follow_their_parent_channel() {
    let mut rig = Rig::start(|settings| settings.channels = vec![CHANNEL.to_string()]).await;
    rig.fake.add_channel(events::thread(GUILD, THREAD, CHANNEL));
    rig.fake.add_channel(events::thread(GUILD, THREAD + 1, OTHER_CHANNEL));
    let in_thread = events::guild_message(GUILD, THREAD, ALICE, "alice", 21, "<@5000> in a thread");
    rig.fake.send_message_create(events::mentioning_user(in_thread, BOT_ID));
    let msg = rig.next().await;
    assert_eq!(msg.id, "discord:400:21");
    assert_eq!((msg.chat_id.as_str(), msg.thread_id.as_deref()), ("200", Some("400")));
    assert_eq!(msg.session_key(), "discord:200:thread:400");
    assert_eq!(msg.metadata["channel_id"], "400");
    let elsewhere = events::guild_message(GUILD, THREAD + 1, ALICE, "alice", 22, "<@5000> other thread");
    rig.fake.send_message_create(events::mentioning_user(elsewhere, BOT_ID));
    let second = events::guild_message(GUILD, THREAD, ALICE, "alice", 23, "<@5000> again");
    rig.fake.send_message_create(events::mentioning_user(second, BOT_ID));
    assert_eq!(message_ids(&rig.drain().await), ids(&[23]));
    let lookups = rig.fake.calls_to("GET /channels/{id}");
    assert_eq!(lookups.iter().filter(|call| call.path == "/channels/400").count(), 1, "the thread is looked up once");
    rig.stop().await;
}

#[tokio::test]
async fn own_messages_and_other_bots_are_ignored() {
    let mut rig = Rig::start(|settings| settings.require_mention = false).await;
    rig.fake.send_message_create(events::from_bot(guild_message(31, "my own words")));
    rig.fake.send_message_create(events::by_other_bot(guild_message(32, "beep")));
    rig.fake.send_message_create(guild_message(33, "a human"));
    assert_eq!(message_ids(&rig.drain().await), ids(&[33]));
    rig.stop().await;

    let mut rig = Rig::start(|settings| {
        settings.require_mention = false;
        settings.allow_bots = true;
    })
    .await;
    rig.fake.send_message_create(events::from_bot(guild_message(34, "my own words")));
    rig.fake.send_message_create(events::by_other_bot(guild_message(35, "beep")));
    let received = rig.drain().await;
    assert_eq!(message_ids(&received), ids(&[35]));
    assert!(received[0].sender.is_bot);
    rig.stop().await;
}

#[tokio::test]
async fn a_stranger_gets_a_pairing_code_once_and_is_answered_after_approval() {
    let mut rig = Rig::start(|settings| settings.dm_policy = DmPolicy::Pairing).await;
    rig.fake.send_message_create(events::dm_message(DM, BOB, "bob", 41, "hello?"));
    let sent = rig.fake.wait_for_calls("POST /channels/{id}/messages", 1, WAIT).await;
    assert_eq!(sent[0].path, format!("/channels/{DM}/messages"));
    let text = sent[0].body["content"].as_str().unwrap().to_owned();
    let code = text.split("Your pairing code: ").nth(1).and_then(|rest| rest.split_whitespace().next()).unwrap();
    assert!(text.contains(&format!("switchboard pairing approve discord {code}")), "{text}");
    assert!(sent[0].body.get("message_reference").is_none_or(Value::is_null), "no reply reference in a DM");

    rig.fake.send_message_create(events::dm_message(DM, BOB, "bob", 42, "hello??"));
    assert!(rig.drain().await.is_empty(), "nothing reaches the agent before approval");
    assert_eq!(rig.fake.sent_messages().len(), 1, "the code is not repeated at once");

    rig.store.approve_pairing("discord", code, switchboard::config::Level::User, "cli").await.unwrap();
    rig.fake.send_message_create(events::dm_message(DM, BOB, "bob", 43, "approved now?"));
    let msg = rig.next().await;
    assert_eq!((msg.id.as_str(), msg.sender.id.as_str()), ("discord:300:43", "222"));
    rig.stop().await;
}

#[tokio::test]
async fn attachments_are_saved_in_the_media_directory() {
    let mut rig = Rig::start(|_| {}).await;
    let png = vec![0x89, b'P', b'N', b'G', 1, 2, 3];
    let url = rig.fake.add_attachment("cat.png", png.clone());
    let message = events::with_attachment(events::dm_message(DM, ALICE, "alice", 51, "look"), 1, "cat.png", 7, &url);
    rig.fake.send_message_create(message);
    let msg = rig.next().await;
    let path = rig.dir.path().join("media").join("300").join("51-0-cat.png");
    assert_eq!(msg.content, "look", "the worker lists saved media; no marker here");
    assert_eq!(msg.media.len(), 1);
    assert_eq!(msg.media[0].kind, "photo");
    assert_eq!(msg.media[0].mime_type.as_deref(), Some("image/png"));
    assert_eq!(msg.media[0].file_name.as_deref(), Some("cat.png"));
    assert_eq!(msg.media[0].size, Some(7));
    assert_eq!(msg.media[0].path.as_deref(), Some(path.display().to_string().as_str()));
    assert_eq!(std::fs::read(&path).unwrap(), png);

    let too_big = events::with_attachment(events::dm_message(DM, ALICE, "alice", 52, ""), 2, "big.bin", 1 << 30, &url);
    rig.fake.send_message_create(too_big);
    let msg = rig.next().await;
    assert!(msg.media.is_empty());
    assert!(msg.content.starts_with("[document big.bin not saved: too large"), "{}", msg.content);
    rig.stop().await;
}

#[tokio::test]
async fn a_rejected_token_fails_the_start_clearly() {
    let fake = FakeDiscord::start().await;
    let dir = tempfile::tempdir().unwrap();
    let settings = DiscordSettings { token: "not-the-token".into(), ..settings(&fake, &dir) };
    let bus = Arc::new(InProcessBus::new(8));
    let result =
        DiscordChannel::start(bus, settings, OwnerLink::default(), DeliveryPolicy::default(), CancellationToken::new())
            .await;
    let err = result.err().expect("start fails");
    assert!(matches!(err, DiscordError::InvalidToken), "{err}");
    let text = err.to_string();
    assert!(text.contains("channels.discord.token") && text.contains("DISCORD_BOT_TOKEN"), "{text}");
    assert!(!text.contains("not-the-token"), "the token is never shown");
}

#[tokio::test]
async fn a_discord_down_at_start_is_tried_again_until_it_comes_up() {
    // An address where nothing listens yet: connections are refused, as when Discord (or the
    // proxy in front of it) is down.
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let settings = DiscordSettings {
        token: FakeDiscord::TOKEN.into(),
        proxy_url: Some(format!("http://{addr}")),
        allow_from: vec![ALICE.to_string()],
        media_dir: dir.path().join("media"),
        ..DiscordSettings::default()
    };
    let bus = Arc::new(InProcessBus::new(64));
    let mut inbound = bus.inbound().await.unwrap();
    let shutdown = CancellationToken::new();
    let starting =
        DiscordChannel::start(bus, settings, OwnerLink::default(), DeliveryPolicy::default(), shutdown.clone());
    let channel = tokio::time::timeout(WAIT, starting).await.expect("the start does not wait for Discord").unwrap();
    // Down for the first attempts (at start, then after 1 s), up before the one after 2 s more.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let fake = FakeDiscord::start_at(addr).await.unwrap();
    fake.wait_connected(1, Duration::from_secs(10)).await;

    let calls: Vec<String> = fake.calls().into_iter().map(|call| call.route).collect();
    assert_eq!(calls[..2], ["GET /users/@me", "GET /gateway"], "token checked, gateway URL asked through the proxy");
    fake.send_message_create(events::dm_message(DM, ALICE, "alice", 10, "are you there?"));
    let delivery = tokio::time::timeout(WAIT, inbound.next()).await.expect("the message arrives").unwrap().unwrap();
    assert_eq!(delivery.decode::<InboundMessage>().unwrap().content, "are you there?");
    shutdown.cancel();
    tokio::time::timeout(WAIT, channel.stop()).await.expect("the channel stops in time");
}

#[tokio::test]
async fn a_discord_down_at_start_does_not_delay_shutdown() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let settings = DiscordSettings {
        token: FakeDiscord::TOKEN.into(),
        proxy_url: Some(format!("http://{addr}")),
        media_dir: dir.path().join("media"),
        ..DiscordSettings::default()
    };
    let shutdown = CancellationToken::new();
    let channel = DiscordChannel::start(
        Arc::new(InProcessBus::new(8)),
        settings,
        OwnerLink::default(),
        DeliveryPolicy::default(),
        shutdown.clone(),
    )
    .await
    .unwrap();
    // Long enough to be in a backoff wait.
    tokio::time::sleep(Duration::from_millis(300)).await;
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(1), channel.stop()).await.expect("the retries end at shutdown");
}

#[tokio::test]
async fn a_message_sent_while_the_gateway_was_down_arrives_once_after_the_resume() {
    let mut rig = Rig::start(|_| {}).await;
    rig.fake.send_message_create(events::dm_message(DM, ALICE, "alice", 61, "before"));
    assert_eq!(rig.next().await.id, "discord:300:61");
    rig.fake.drop_connection();
    rig.fake.send_message_create(events::dm_message(DM, ALICE, "alice", 62, "while down"));
    rig.fake.wait_connected(2, WAIT).await;
    assert!(rig.fake.resumes() >= 1, "serenity resumed the session");
    let received = rig.drain().await;
    assert_eq!(message_ids(&received), ids(&[62]));
    assert_eq!(received.len(), 1, "exactly once");
    rig.stop().await;
}
