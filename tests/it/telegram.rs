//! The Telegram channel's inbound side against the fake Bot API, with a real in-process bus and
//! a real SQLite store for pairing: what reaches the agent, what is answered locally, and that
//! Telegram is told an update was received only once the bus has it.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use switchboard::store::Database;
use switchboard::store::sqlite::SqliteStore;
use switchboard_channels::bus::in_process::InProcessBus;
use switchboard_channels::control::{ControlDesk, OwnerLink, PairingNotice, Press, PressAnswer};
use switchboard_channels::delivery::DeliveryPolicy;
use switchboard_channels::pairing::PairingStore;
use switchboard_channels::telegram::{DmPolicy, GroupPolicy, Receive, TelegramChannel, TelegramSettings};
use switchboard_channels::{Bus, Deliveries, InboundMessage};
use switchboard_testkit::fake_telegram::{Failure, FakeTelegram, updates};
use tokio_util::sync::CancellationToken;

const GROUP: i64 = -1001234;
const ALICE: i64 = 111;
const BOT: &str = "switchboard_test_bot";

struct Rig {
    fake: FakeTelegram,
    inbound: Deliveries,
    store: Arc<dyn Database>,
    shutdown: CancellationToken,
    channel: Option<TelegramChannel>,
    dir: tempfile::TempDir,
}

impl Rig {
    async fn start(configure: impl FnOnce(&mut TelegramSettings)) -> Rig {
        Self::start_with_capacity(64, configure).await
    }

    async fn start_with_capacity(capacity: usize, configure: impl FnOnce(&mut TelegramSettings)) -> Rig {
        Self::start_with(capacity, None, configure).await
    }

    /// A channel whose button presses go to `desk`.
    async fn start_with(
        capacity: usize,
        desk: Option<Arc<dyn ControlDesk>>,
        configure: impl FnOnce(&mut TelegramSettings),
    ) -> Rig {
        Self::start_on(FakeTelegram::start().await, capacity, desk, configure).await
    }

    async fn start_on(
        fake: FakeTelegram,
        capacity: usize,
        desk: Option<Arc<dyn ControlDesk>>,
        configure: impl FnOnce(&mut TelegramSettings),
    ) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(&dir.path().join("store.db")).await.unwrap());
        let bus = Arc::new(InProcessBus::new(capacity));
        let inbound = bus.inbound().await.unwrap();
        let mut settings = crate::common::fake_telegram_settings(&fake, dir.path(), ALICE);
        configure(&mut settings);
        let shutdown = CancellationToken::new();
        let owner = OwnerLink { pairing: Some(Arc::clone(&store) as Arc<dyn PairingStore>), desk };
        let channel =
            TelegramChannel::start(bus, settings, owner, DeliveryPolicy::default(), shutdown.clone()).await.unwrap();
        Rig { fake, inbound, store, shutdown, channel: Some(channel), dir }
    }

    /// The next message the agent would get.
    async fn next(&mut self) -> InboundMessage {
        let delivery = tokio::time::timeout(Duration::from_secs(5), self.inbound.next())
            .await
            .expect("no inbound message within 5 s")
            .unwrap()
            .unwrap();
        let message = delivery.decode().unwrap();
        delivery.ack().await.unwrap();
        message
    }

    /// Asserts nothing reaches the agent for a moment (after the fake served every update).
    async fn nothing_more(&mut self) {
        self.wait_until_fetched().await;
        let next = tokio::time::timeout(Duration::from_millis(300), self.inbound.next()).await;
        if let Ok(Some(Ok(delivery))) = next {
            panic!("unexpected inbound message: {}", String::from_utf8_lossy(&delivery.payload));
        }
    }

    /// Waits until every pushed update was fetched and confirmed.
    async fn wait_until_fetched(&self) {
        for _ in 0..100 {
            if self.fake.pending_updates() == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("updates never fetched: {} pending", self.fake.pending_updates());
    }

    async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(channel) = self.channel.take() {
            channel.stop().await;
        }
    }
}

#[tokio::test]
async fn a_direct_message_reaches_the_agent_with_stable_ids() {
    let mut rig = Rig::start(|_| {}).await;
    rig.fake.push_message(updates::private_text(ALICE, "alice", 7, "hello there"));
    let msg = rig.next().await;
    assert_eq!(msg.id, format!("telegram:{ALICE}:7"));
    assert_eq!((msg.channel.as_str(), msg.chat_id.as_str()), ("telegram", "111"));
    assert_eq!(msg.session_key(), "telegram:111");
    assert_eq!(msg.content, "hello there");
    assert_eq!(msg.sender.id, "111");
    assert_eq!(msg.sender.name, "Alice");
    assert!(!msg.is_group && msg.mentioned);
    assert_eq!(msg.metadata["message_id"], "7");
    assert_eq!(msg.metadata["username"], "alice");
    // The command menu was registered at start (aside: the first poll does not wait for it).
    let commands = rig.fake.wait_for_calls("setmycommands", 1, Duration::from_secs(5)).await;
    let names: Vec<&str> =
        commands[0].params["commands"].as_array().unwrap().iter().map(|c| c["command"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["start", "help", "new", "reset", "stop", "compact", "status", "usage", "queue", "model", "verbose"]
    );
    rig.stop().await;
}

/// A webhook left from an earlier setup blocks polling (Telegram answers 409): it is removed
/// once Telegram says so, and messages come in.
#[tokio::test]
async fn a_webhook_left_from_an_earlier_setup_is_removed_and_polling_goes_on() {
    let fake = FakeTelegram::start().await;
    fake.set_webhook("https://old.example.org/hook");
    let mut rig = Rig::start_on(fake, 64, None, |_| {}).await;
    rig.fake.push_message(updates::private_text(ALICE, "alice", 7, "after the webhook"));
    assert_eq!(rig.next().await.content, "after the webhook");
    assert_eq!(rig.fake.count_calls("deletewebhook"), 1);
    // Asked only because Telegram refused the poll, not before it.
    assert_eq!(rig.fake.count_calls("getwebhookinfo"), 0);
    rig.stop().await;
}

/// A configured owner's direct chat has a menu of its own: everyone's commands, then the
/// owner's, which nobody else's menu shows.
#[tokio::test]
async fn an_owners_menu_has_the_owners_commands_too() {
    let rig = Rig::start(|settings| settings.owners = vec!["555".into()]).await;
    let calls = rig.fake.wait_for_calls("setmycommands", 2, Duration::from_secs(5)).await;
    let names = |call: &switchboard_testkit::fake_telegram::Call| -> Vec<String> {
        let commands = call.params["commands"].as_array().unwrap();
        commands.iter().map(|command| command["command"].as_str().unwrap().to_owned()).collect()
    };
    assert!(calls[0].params.get("scope").is_none() && !names(&calls[0]).contains(&"spend".to_owned()));
    assert_eq!(calls[1].params["scope"], serde_json::json!({"type": "chat", "chat_id": 555}));
    let owners = names(&calls[1]);
    assert_eq!(owners[..names(&calls[0]).len()], names(&calls[0])[..]);
    assert!(owners.ends_with(&["pending", "approve", "deny", "users", "level", "cron", "spend"].map(String::from)));
    rig.stop().await;
}

/// Every way of addressing the bot in a group, and the ways that are not.
#[tokio::test]
async fn group_messages_are_answered_only_when_they_address_the_bot() {
    let mut rig = Rig::start(|_| {}).await;
    let group = |id: i64, text: &str| updates::group_text(GROUP, ALICE, "alice", id, text);
    let cases: Vec<(Value, Option<&str>)> = vec![
        (group(1, "just chatting"), None),
        (
            updates::mention_of(group(2, &format!("hey @{BOT} what's up")), BOT),
            Some("hey @switchboard_test_bot what's up"),
        ),
        (updates::mention_of(group(3, "hey @someone_else"), "someone_else"), None),
        (
            updates::text_mention_of(group(4, "Switchboard, help"), 4242, "Switchboard", 0, 11),
            Some("Switchboard, help"),
        ),
        (updates::reply_to(group(5, "and then?"), updates::from_bot(GROUP, 900, "earlier answer")), Some("and then?")),
        (updates::reply_to(group(6, "you too"), updates::group_text(GROUP, 222, "bob", 901, "hi")), None),
        (updates::bot_command(group(7, &format!("/stop@{BOT}"))), Some("/stop")),
        (updates::bot_command(group(8, "/stop@other_bot")), None),
        (updates::bot_command(group(9, "/status")), Some("/status")),
        (updates::bot_command(group(10, "/weather")), None),
    ];
    for (message, _) in &cases {
        rig.fake.push_message(message.clone());
    }
    for (message, expected) in &cases {
        let Some(expected) = expected else { continue };
        let msg = rig.next().await;
        assert_eq!(msg.id, format!("telegram:{GROUP}:{}", message["message_id"]));
        assert!(msg.is_group && msg.mentioned);
        assert!(msg.content.ends_with(expected), "{:?} should end with {expected:?}", msg.content);
    }
    rig.nothing_more().await;
    rig.stop().await;
}

/// Unaddressed messages come along as context with the next addressed one, once.
#[tokio::test]
async fn unaddressed_group_messages_become_context_for_the_next_mention() {
    let mut rig = Rig::start(|_| {}).await;
    rig.fake.push_message(updates::group_text(GROUP, 222, "bob", 1, "let's meet at 6"));
    rig.fake.push_message(updates::group_text(GROUP, 333, "carol", 2, "6 is too early"));
    let ask = |id: i64| {
        updates::mention_of(updates::group_text(GROUP, ALICE, "alice", id, &format!("@{BOT} thoughts?")), BOT)
    };
    rig.fake.push_message(ask(3));
    let first = rig.next().await;
    assert!(first.content.contains("Bob: let's meet at 6\nCarol: 6 is too early"), "{}", first.content);
    assert!(first.content.ends_with("@switchboard_test_bot thoughts?"), "{}", first.content);
    rig.fake.push_message(ask(4));
    let second = rig.next().await;
    assert_eq!(second.content, "@switchboard_test_bot thoughts?", "context is shown once");
    rig.stop().await;
}

/// Updates fetched in one getUpdates answer go to a journaled bus in one write, in order:
/// each mention carries the chatter before it and none that an earlier mention of the batch
/// already carried.
#[tokio::test]
async fn a_fetched_batch_keeps_its_order_and_each_mention_its_own_context() {
    let fake = FakeTelegram::start().await;
    let mention = |id: i64, text: &str| {
        updates::mention_of(updates::group_text(GROUP, ALICE, "alice", id, &format!("@{BOT} {text}")), BOT)
    };
    // All waiting before the channel starts: the first poll takes them together.
    fake.push_message(updates::group_text(GROUP, 222, "bob", 1, "let's meet at 6"));
    fake.push_message(mention(2, "first"));
    fake.push_message(mention(3, "second"));
    fake.push_message(updates::group_text(GROUP, 333, "carol", 4, "6 is too early"));
    fake.push_message(mention(5, "third"));
    fake.push_message(updates::private_text(ALICE, "alice", 6, "and a direct one"));
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(&dir.path().join("store.db")).await.unwrap());
    let bus = Arc::new(InProcessBus::with_journal(64, store.clone()).await.unwrap());
    let mut inbound = bus.inbound().await.unwrap();
    let settings = crate::common::fake_telegram_settings(&fake, dir.path(), ALICE);
    let shutdown = CancellationToken::new();
    let channel =
        TelegramChannel::start(bus, settings, OwnerLink::default(), DeliveryPolicy::default(), shutdown.clone())
            .await
            .unwrap();
    let mut contents = Vec::new();
    for _ in 0..4 {
        let delivery = tokio::time::timeout(Duration::from_secs(5), inbound.next()).await.unwrap().unwrap().unwrap();
        contents.push(delivery.decode::<InboundMessage>().unwrap().content);
        delivery.ack().await.unwrap();
    }
    assert!(contents[0].contains("Bob: let's meet at 6") && contents[0].ends_with("first"), "{}", contents[0]);
    assert_eq!(contents[1], format!("@{BOT} second"), "the context went with the first mention");
    assert!(!contents[2].contains("Bob") && contents[2].contains("Carol: 6 is too early"), "{}", contents[2]);
    assert!(contents[2].ends_with("third"), "{}", contents[2]);
    assert_eq!(contents[3], "and a direct one");
    shutdown.cancel();
    channel.stop().await;
}

/// A reply carries the message it answers: its id, author, text and the quoted part; in a
/// forum topic, the topic's creation message is not taken for one.
#[tokio::test]
async fn a_reply_carries_the_replied_message_and_its_quote() {
    let mut rig = Rig::start(|s| s.group_policy = GroupPolicy::Open).await;
    let bobs = updates::group_text(GROUP, 222, "bob", 5, "the launch moves to friday");
    let reply = updates::with_quote(
        updates::reply_to(updates::group_text(GROUP, ALICE, "alice", 6, "sure?"), bobs),
        "friday",
        20,
    );
    rig.fake.push_message(reply);
    rig.fake.push_message(updates::topic_text(GROUP, 55, ALICE, "alice", 60, "in the topic"));
    let msg = rig.next().await;
    assert_eq!(msg.reply_to.as_deref(), Some("5"));
    let replied = msg.replied_to.unwrap();
    assert_eq!(
        (replied.message_id.as_str(), replied.sender.id.as_str(), replied.sender.name.as_str()),
        ("5", "222", "Bob")
    );
    assert_eq!(
        (replied.text.as_str(), replied.quote.as_deref(), replied.from_self),
        ("the launch moves to friday", Some("friday"), false)
    );
    let in_topic = rig.next().await;
    assert_eq!((in_topic.reply_to, in_topic.replied_to), (None, None));
    rig.stop().await;
}

#[tokio::test]
async fn forum_topics_are_sessions_of_their_own() {
    let mut rig = Rig::start(|s| s.group_policy = GroupPolicy::Open).await;
    rig.fake.push_message(updates::topic_text(GROUP, 55, ALICE, "alice", 60, "in the topic"));
    rig.fake.push_message(updates::group_text(GROUP, ALICE, "alice", 61, "in general"));
    let topic = rig.next().await;
    assert_eq!(topic.thread_id.as_deref(), Some("55"));
    assert_eq!(topic.session_key(), format!("telegram:{GROUP}:topic:55"));
    // The topic's creation message is not a reply to the bot, and open groups need no mention.
    assert_eq!(topic.content, "in the topic");
    let general = rig.next().await;
    assert_eq!(general.session_key(), format!("telegram:{GROUP}"));
    rig.stop().await;
}

#[tokio::test]
async fn policies_and_allowlists_decide_who_is_answered() {
    let mut rig = Rig::start(|s| {
        s.dm_policy = DmPolicy::Allowlist;
        s.allow_from = vec!["@Alice".into()];
        s.groups = vec![GROUP.to_string()];
    })
    .await;
    rig.fake.push_message(updates::private_text(222, "bob", 1, "let me in"));
    rig.fake.push_message(updates::private_text(ALICE, "alice", 2, "by username"));
    let other_group = updates::mention_of(updates::group_text(-999, ALICE, "alice", 3, &format!("@{BOT} hi")), BOT);
    rig.fake.push_message(other_group);
    assert_eq!(rig.next().await.content, "by username");
    rig.nothing_more().await;
    assert!(rig.fake.sent_messages().is_empty(), "strangers under allowlist get no answer");
    rig.stop().await;
}

/// A stranger gets a code once; after the owner approves it, their messages go through.
#[tokio::test]
async fn pairing_gives_a_code_and_approval_lets_the_user_in() {
    let mut rig = Rig::start(|_| {}).await;
    rig.fake.push_message(updates::private_text(222, "bob", 1, "hi bot"));
    rig.fake.push_message(updates::private_text(222, "bob", 2, "hello??"));
    let sent = rig.fake.wait_for_calls("sendmessage", 1, Duration::from_secs(5)).await;
    let text = sent[0].params["text"].as_str().unwrap().to_owned();
    assert_eq!(sent[0].params["chat_id"], 222);
    let code = text.split("pairing code: ").nth(1).unwrap().split_whitespace().next().unwrap().to_owned();
    assert_eq!(code.len(), 8, "{text}");
    assert!(text.contains(&format!("switchboard pairing approve telegram {code}")), "{text}");
    rig.nothing_more().await;
    assert_eq!(rig.fake.calls_to("sendmessage").len(), 1, "the second message gets no second code");

    let approved = rig
        .store
        .approve_pairing("telegram", &code.to_lowercase(), switchboard::config::Level::User, "cli")
        .await
        .unwrap();
    assert_eq!(approved.sender_id, "222");
    rig.fake.push_message(updates::private_text(222, "bob", 3, "now?"));
    assert_eq!(rig.next().await.content, "now?");
    rig.stop().await;
}

#[tokio::test]
async fn start_and_help_are_answered_without_the_agent() {
    let mut rig = Rig::start(|_| {}).await;
    rig.fake.push_message(updates::bot_command(updates::private_text(ALICE, "alice", 1, "/start")));
    let help = updates::bot_command(updates::group_text(GROUP, ALICE, "alice", 2, &format!("/help@{BOT}")));
    rig.fake.push_message(help);
    let sent = rig.fake.wait_for_calls("sendmessage", 2, Duration::from_secs(5)).await;
    assert!(sent[0].params["text"].as_str().unwrap().starts_with("Hello! I'm @switchboard_test_bot"));
    assert!(sent[1].params["text"].as_str().unwrap().contains("/stop"));
    // In the group, the answer quotes the command.
    assert_eq!(sent[1].params["reply_parameters"]["message_id"], 2);
    rig.nothing_more().await;
    rig.stop().await;
}

/// The offset that tells Telegram an update was received moves past an update only once the
/// bus took its message: here the bus is full, so the second update stays unconfirmed.
#[tokio::test]
async fn the_offset_advances_only_after_the_bus_accepted_the_message() {
    let mut rig = Rig::start_with_capacity(1, |_| {}).await;
    let first = rig.fake.push_message(updates::private_text(ALICE, "alice", 1, "one"));
    let second = rig.fake.push_message(updates::private_text(ALICE, "alice", 2, "two"));
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(rig.fake.confirmed_offset() <= second, "update {second} confirmed before the bus took it");
    assert_eq!(rig.next().await.content, "one");
    assert_eq!(rig.next().await.content, "two");
    for _ in 0..100 {
        if rig.fake.confirmed_offset() > second {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(rig.fake.confirmed_offset() > second && second > first);
    rig.stop().await;
}

/// A re-served update and a second update for the same message both carry the same inbound
/// id, so the bus keeps one.
#[tokio::test]
async fn two_updates_for_one_message_reach_the_agent_once() {
    let mut rig = Rig::start(|_| {}).await;
    rig.fake.push_message(updates::private_text(ALICE, "alice", 9, "once"));
    rig.fake.push_message(updates::private_text(ALICE, "alice", 9, "once"));
    assert_eq!(rig.next().await.id, format!("telegram:{ALICE}:9"));
    rig.nothing_more().await;
    rig.stop().await;
}

/// Button presses are asked for, and one with no control desk behind the channel is answered
/// at once, never reaches the agent, and is confirmed like a message.
#[tokio::test]
async fn a_press_without_a_desk_is_answered_and_goes_no_further() {
    let mut rig = Rig::start(|_| {}).await;
    let message = updates::from_bot(ALICE, 900, "Approve?");
    let pressed = rig.fake.push_callback_query(updates::callback_query(
        "",
        updates::user(ALICE, "alice"),
        message,
        "pa:ABCD2345",
    ));
    rig.fake.wait_for_calls("answercallbackquery", 1, Duration::from_secs(5)).await;
    let answers = rig.fake.callback_answers();
    assert_eq!(
        (answers[0].query_id.as_str(), answers[0].text.as_deref()),
        (pressed.as_str(), Some("These buttons don't work here."))
    );
    rig.nothing_more().await;
    let polls = rig.fake.calls_to("getupdates");
    assert_eq!(polls[0].params["allowed_updates"], json!(["message", "callback_query"]));
    assert!(rig.fake.edits().is_empty());
    rig.fake.assert_callback_queries_answered();
    rig.stop().await;
}

/// A desk that decides only once the test lets it: slower than the channel waits.
struct SlowDesk {
    release: tokio::sync::Notify,
}

#[async_trait::async_trait]
impl ControlDesk for SlowDesk {
    async fn press(&self, _press: &Press) -> PressAnswer {
        self.release.notified().await;
        PressAnswer { toast: "Approved.".into(), outcome: Some("✅ Approved by alice".into()) }
    }

    async fn pairing_requested(&self, _notice: &PairingNotice) {}
}

/// When the decision takes longer than the channel waits, the presser's spinner is stopped with
/// "Working on it…" at once, and the message shows the outcome when the decision comes.
#[tokio::test]
async fn a_slow_decision_is_answered_working_on_it_then_shown_on_the_message() {
    let desk = Arc::new(SlowDesk { release: tokio::sync::Notify::new() });
    let rig = Rig::start_with(64, Some(Arc::clone(&desk) as Arc<dyn ControlDesk>), |settings| {
        settings.press_answer_within = Duration::from_millis(200);
    })
    .await;
    // The owner's notice with its buttons, as the bot sends it.
    let keyboard = json!({"inline_keyboard": [[{"text": "Approve", "callback_data": "pa:ABCD2345"}]]});
    let url = format!("{}/bot{}/sendMessage", rig.fake.api_url(), FakeTelegram::TOKEN);
    let body = json!({"chat_id": ALICE, "text": "bob asks to pair", "reply_markup": keyboard});
    let sent: Value = reqwest::Client::new().post(url).json(&body).send().await.unwrap().json().await.unwrap();
    let message_id = sent["result"]["message_id"].as_i64().unwrap();

    let pressed = rig.fake.press_button(ALICE, message_id, updates::user(ALICE, "alice"), "pa:ABCD2345");
    rig.fake.wait_for_calls("answercallbackquery", 1, Duration::from_secs(5)).await;
    let answers = rig.fake.callback_answers();
    assert_eq!((answers[0].query_id.as_str(), answers[0].text.as_deref()), (pressed.as_str(), Some("Working on it…")));
    assert!(rig.fake.edits().is_empty(), "nothing is decided yet");

    desk.release.notify_one();
    let edits = rig.fake.wait_for_calls("editmessagetext", 1, Duration::from_secs(5)).await;
    let text = edits[0].params["text"].as_str().unwrap_or_default();
    assert!(text.contains("bob asks to pair") && text.contains("✅ Approved by alice"), "{text}");
    assert!(rig.fake.buttons(ALICE, message_id).is_empty(), "the decided message keeps no buttons");
    assert_eq!(rig.fake.callback_answers().len(), 1, "the press is answered once");
    rig.fake.assert_callback_queries_answered();
    rig.stop().await;
}

/// 409 Conflict (another poller on the token) does not become a hot loop.
#[tokio::test]
async fn a_second_poller_conflict_backs_off() {
    let rig = Rig::start(|_| {}).await;
    rig.fake.wait_for_calls("getupdates", 1, Duration::from_secs(5)).await;
    rig.fake.fail_next("getupdates", Failure::Conflict);
    rig.fake.fail_next("getupdates", Failure::Conflict);
    // The long poll in flight returns within a second; then the conflict answers at once.
    // A rate over a window of time is the claim, so the window has to pass.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let polls = rig.fake.calls_to("getupdates");
    assert!(polls.iter().any(|c| c.failed), "the conflict was served");
    assert!(polls.len() <= 3, "{} getUpdates calls in 3 s: a hot loop", polls.len());
    rig.stop().await;
}

#[tokio::test]
async fn photos_and_documents_are_saved_into_the_media_dir() {
    let mut rig = Rig::start(|s| s.media_max_bytes = 1000).await;
    rig.fake.add_file("photo-1", vec![7u8; 300]);
    rig.fake.add_file("big-doc", vec![1u8; 5000]);
    let photo = updates::photo(updates::private_text(ALICE, "alice", 5, "look at this"), "photo-1", 300);
    rig.fake.push_message(photo);
    let doc = updates::document(
        updates::private_text(ALICE, "alice", 6, ""),
        "big-doc",
        "report.pdf",
        "application/pdf",
        5000,
    );
    rig.fake.push_message(doc);

    let with_photo = rig.next().await;
    assert_eq!(with_photo.content, "look at this");
    let path = with_photo.media[0].path.clone().unwrap();
    assert!(path.starts_with(rig.dir.path().join("media").to_str().unwrap()), "{path}");
    assert_eq!(std::fs::read(&path).unwrap(), vec![7u8; 300]);
    assert_eq!(with_photo.media[0].kind, "photo");

    let too_big = rig.next().await;
    assert!(too_big.media.is_empty());
    assert!(too_big.content.contains("[document report.pdf not saved: too large"), "{}", too_big.content);
    rig.stop().await;
}

#[tokio::test]
async fn webhook_mode_checks_the_secret_and_answers_after_the_bus_took_the_update() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut rig = Rig::start(|s| {
        s.receive = Receive::Webhook {
            public_url: format!("http://127.0.0.1:{port}/hook/telegram"),
            listen: format!("127.0.0.1:{port}").parse().unwrap(),
            secret: "s3cret".into(),
        }
    })
    .await;
    let registered = rig.fake.wait_for_calls("setwebhook", 1, Duration::from_secs(5)).await;
    assert_eq!(registered[0].params["secret_token"], "s3cret");
    assert_eq!(registered[0].params["url"], format!("http://127.0.0.1:{port}/hook/telegram"));
    // setWebhook goes as multipart: the list is a JSON text.
    assert_eq!(registered[0].params["allowed_updates"], r#"["message","callback_query"]"#);
    let update = json!({"update_id": 1, "message": updates::private_text(ALICE, "alice", 3, "via webhook")});
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}/hook/telegram");
    let post =
        |secret: &'static str| client.post(&url).header("X-Telegram-Bot-Api-Secret-Token", secret).json(&update).send();
    assert_eq!(post("wrong").await.unwrap().status(), 401);
    assert_eq!(post("s3cret").await.unwrap().status(), 200);
    assert_eq!(rig.next().await.content, "via webhook");
    assert!(rig.fake.calls_to("getupdates").is_empty(), "no polling in webhook mode");
    rig.stop().await;
}

#[tokio::test]
async fn a_rejected_token_fails_the_start_with_a_clear_error() {
    let fake = FakeTelegram::start().await;
    let bus = Arc::new(InProcessBus::new(8));
    let settings =
        TelegramSettings { token: "999:WRONG".into(), api_url: Some(fake.api_url()), ..TelegramSettings::default() };
    let err = TelegramChannel::start(
        bus,
        settings,
        OwnerLink::default(),
        DeliveryPolicy::default(),
        CancellationToken::new(),
    )
    .await
    .err()
    .unwrap();
    assert!(err.to_string().contains("TELEGRAM_BOT_TOKEN"), "{err}");
}
