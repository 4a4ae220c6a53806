//! Group chats as their members see them, end to end in-process: the real Telegram and Discord
//! adapters against their fakes, the worker on the same bus, and the scripted model's request
//! log. The model must tell speakers apart across turns (each message's context line names its
//! author, and stays as it was first sent), see what a reply answers (and the quoted part), and
//! see the chatter that did not address the bot.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use switchboard_channels::control::OwnerLink;
use switchboard_channels::delivery::DeliveryPolicy;
use switchboard_channels::discord::{DiscordChannel, DiscordSettings, DmPolicy};
use switchboard_channels::telegram::TelegramChannel;
use switchboard_testkit::fake_discord::{BOT_ID as DISCORD_BOT, FakeDiscord, events};
use switchboard_testkit::fake_llm;
use switchboard_testkit::fake_telegram::{BOT_USERNAME, FakeTelegram, updates};
use tokio_util::sync::CancellationToken;

use crate::common::{BusKind, Harness, Setup};

const WAIT: Duration = Duration::from_secs(10);
const GROUP: i64 = -1001234;
const ALICE: i64 = 111;
const BOB: i64 = 222;
const GUILD: u64 = 100;
const CHANNEL: u64 = 200;

/// The user messages of the `n`-th model request (from 1), as the model got them: who the
/// context line says wrote each (`Alice (id 111)`, or `-` for a message without one), then its
/// text. The context lines of the earlier messages must be those of the request that
/// answered them, byte for byte: a provider's prompt cache serves them only then.
async fn user_texts(h: &Harness, n: usize) -> Vec<String> {
    let requests = h.llm.wait_for_requests(n, WAIT).await;
    assert!(requests.len() >= n, "{} model requests, expected {n}", requests.len());
    let lines = fake_llm::context_lines(&requests[n - 1]);
    let texts = fake_llm::user_texts(&requests[n - 1]);
    // The earlier requests of the same conversation (it starts with the same message).
    for earlier in requests[..n - 1].iter().filter(|earlier| fake_llm::user_texts(earlier).first() == texts.first()) {
        let before = fake_llm::context_lines(earlier);
        assert_eq!(lines[..before.len()], before, "an earlier message was sent with another context line");
    }
    lines.iter().zip(texts).map(|(line, text)| format!("{}: {text}", speaker(line.as_deref()))).collect()
}

/// `Alice (id 111)` of `[context: … | from Alice (id 111), level guest | …]`.
fn speaker(line: Option<&str>) -> &str {
    let from = line.and_then(|line| line.split(" | from ").nth(1));
    from.and_then(|from| from.split(", level").next()).unwrap_or("-")
}

struct TelegramRig {
    h: Harness,
    fake: FakeTelegram,
    channel: TelegramChannel,
    shutdown: CancellationToken,
}

impl TelegramRig {
    async fn start() -> TelegramRig {
        let h = Setup::new(BusKind::InProcess).start().await;
        let fake = FakeTelegram::start().await;
        let settings = crate::common::fake_telegram_settings(&fake, h.dir.path(), ALICE);
        let shutdown = CancellationToken::new();
        let channel = TelegramChannel::start(
            Arc::clone(&h.bus),
            settings,
            OwnerLink::default(),
            DeliveryPolicy::default(),
            shutdown.clone(),
        )
        .await
        .unwrap();
        TelegramRig { h, fake, channel, shutdown }
    }

    /// Pushes a message and waits for the bot's `replies`-th answer, so its turn is stored.
    async fn say(&self, message: Value, replies: usize) {
        self.fake.push_message(message);
        let sent = self.fake.wait_for_calls("sendmessage", replies, WAIT).await;
        assert_eq!(sent.len(), replies, "the bot did not answer");
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.channel.stop().await;
        self.h.stop().await;
    }
}

fn mentioning(user: i64, name: &str, id: i64, text: &str) -> Value {
    let text = format!("@{BOT_USERNAME} {text}");
    updates::mention_of(updates::group_text(GROUP, user, name, id, &text), BOT_USERNAME)
}

#[tokio::test]
async fn telegram_group_requests_name_every_speaker_across_turns() {
    let rig = TelegramRig::start().await;
    rig.say(mentioning(ALICE, "alice", 1, "shall we meet at six?"), 1).await;
    rig.say(mentioning(BOB, "bob", 2, "I can only at seven"), 2).await;
    let second = user_texts(&rig.h, 2).await;
    assert_eq!(
        second,
        [
            "Alice (id 111): @switchboard_test_bot shall we meet at six?",
            "Bob (id 222): @switchboard_test_bot I can only at seven"
        ]
    );
    rig.stop().await;
}

#[tokio::test]
async fn telegram_direct_chat_requests_carry_no_names() {
    let rig = TelegramRig::start().await;
    rig.say(updates::private_text(ALICE, "alice", 1, "hello"), 1).await;
    rig.say(updates::private_text(ALICE, "alice", 2, "how are you?"), 2).await;
    assert_eq!(user_texts(&rig.h, 2).await, ["Alice (id 111): hello", "Alice (id 111): how are you?"]);
    rig.stop().await;
}

/// Bob's unaddressed message is context; Alice replies to it, quoting a part, and mentions the
/// bot: the model sees whom she answers, what Bob wrote, the quote, and the chatter.
#[tokio::test]
async fn telegram_reply_with_a_quote_shows_the_replied_message_to_the_model() {
    let rig = TelegramRig::start().await;
    let bobs = updates::group_text(GROUP, BOB, "bob", 5, "the launch moves to friday");
    rig.fake.push_message(bobs.clone());
    let reply =
        updates::with_quote(updates::reply_to(mentioning(ALICE, "alice", 6, "is that true?"), bobs), "friday", 20);
    rig.say(reply, 1).await;
    let input = user_texts(&rig.h, 1).await.pop().unwrap_or_default();
    let expected_head = "Alice (id 111): [Replying to a message by Bob (id 222): the launch moves to friday]\n\
                         [Quoting from it: friday]\n\
                         [Recent messages in this chat, not addressed to you, for context]\n\
                         Bob: the launch moves to friday\n";
    assert!(input.starts_with(expected_head), "{input}");
    assert!(input.ends_with("@switchboard_test_bot is that true?"), "{input}");
    // A reply to the bot's own answer says so.
    let answer = updates::from_bot(GROUP, 900, "Six works for me.");
    rig.say(updates::reply_to(updates::group_text(GROUP, BOB, "bob", 7, "why six?"), answer), 2).await;
    let input = user_texts(&rig.h, 2).await.pop().unwrap_or_default();
    assert_eq!(input, "Bob (id 222): [Replying to your earlier message: Six works for me.]\nwhy six?");
    rig.stop().await;
}

struct DiscordRig {
    h: Harness,
    fake: FakeDiscord,
    channel: DiscordChannel,
    shutdown: CancellationToken,
}

impl DiscordRig {
    async fn start() -> DiscordRig {
        let h = Setup::new(BusKind::InProcess).start().await;
        let fake = FakeDiscord::start().await;
        fake.add_guild(GUILD, &[]);
        fake.add_channel(events::text_channel(GUILD, CHANNEL));
        let settings = DiscordSettings {
            token: FakeDiscord::TOKEN.into(),
            proxy_url: Some(fake.url()),
            dm_policy: DmPolicy::Open,
            media_dir: h.dir.path().join("media"),
            ..DiscordSettings::default()
        };
        let shutdown = CancellationToken::new();
        let channel = DiscordChannel::start(
            Arc::clone(&h.bus),
            settings,
            OwnerLink::default(),
            DeliveryPolicy::default(),
            shutdown.clone(),
        )
        .await
        .unwrap();
        fake.wait_connected(1, WAIT).await;
        DiscordRig { h, fake, channel, shutdown }
    }

    /// Sends a message and waits for the bot's `replies`-th answer, so its turn is stored.
    async fn say(&self, message: Value, replies: usize) {
        self.fake.send_message_create(message);
        let sent = self.fake.wait_for_calls("POST /channels/{id}/messages", replies, WAIT).await;
        assert_eq!(sent.len(), replies, "the bot did not answer");
    }

    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(WAIT, self.channel.stop()).await.expect("the channel stops in time");
        self.h.stop().await;
    }
}

fn guild_message(author: u64, name: &str, id: u64, text: &str) -> Value {
    events::guild_message(GUILD, CHANNEL, author, name, id, text)
}

fn mention(author: u64, name: &str, id: u64, text: &str) -> Value {
    events::mentioning_user(guild_message(author, name, id, &format!("<@{DISCORD_BOT}> {text}")), DISCORD_BOT)
}

#[tokio::test]
async fn discord_guild_requests_name_every_speaker_across_turns() {
    let rig = DiscordRig::start().await;
    rig.say(mention(ALICE as u64, "alice", 10, "shall we meet at six?"), 1).await;
    rig.say(mention(BOB as u64, "bob", 11, "I can only at seven"), 2).await;
    let second = user_texts(&rig.h, 2).await;
    assert_eq!(second, ["Alice (id 111): <@5000> shall we meet at six?", "Bob (id 222): <@5000> I can only at seven"]);
    rig.say(events::dm_message(300, ALICE as u64, "alice", 12, "just us"), 3).await;
    assert_eq!(user_texts(&rig.h, 3).await, ["Alice (id 111): just us"]);
    rig.stop().await;
}

/// Bob's unaddressed message is kept as context (not answered); Alice replies to it with a
/// mention: the model sees Bob's name and text, and the chatter, once.
#[tokio::test]
async fn discord_keeps_unaddressed_messages_and_shows_replies_to_the_model() {
    let rig = DiscordRig::start().await;
    let bobs = guild_message(BOB as u64, "bob", 20, "the launch moves to friday");
    rig.fake.send_message_create(bobs.clone());
    rig.say(events::replying_to(mention(ALICE as u64, "alice", 21, "is that true?"), bobs), 1).await;
    let input = user_texts(&rig.h, 1).await.pop().unwrap_or_default();
    let expected = "Alice (id 111): [Replying to a message by Bob (id 222): the launch moves to friday]\n\
                    [Recent messages in this chat, not addressed to you, for context]\n\
                    Bob: the launch moves to friday\n[End of recent messages]\n\n<@5000> is that true?";
    assert_eq!(input, expected);
    rig.say(mention(ALICE as u64, "alice", 22, "thanks"), 2).await;
    let second = user_texts(&rig.h, 2).await.pop().unwrap_or_default();
    assert_eq!(second, "Alice (id 111): <@5000> thanks", "the context is shown once");
    assert_eq!(rig.h.llm.requests().len(), 2, "the unaddressed message got no answer of its own");
    rig.stop().await;
}
