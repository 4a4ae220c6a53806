//! The shared suite on the fake Discord, and what only Discord does: mentions, the
//! 2000-character limit, rate limits as long as Discord says, nonces against lost answers,
//! files uploaded with the last part.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use serenity::all::{Http, HttpBuilder};
use switchboard_channels::OutboundMessage;
use switchboard_channels::contract::Media;
use switchboard_channels::discord::testing::{self, KnownChannel};
use switchboard_channels::discord::{DiscordSettings, StreamSettings};
use switchboard_testkit::fake_discord::{Call, Failure, FakeDiscord, LostAnswer, SentMessage};

use crate::{Edit, FakePlatform, PATIENCE, Sent, TYPING_INTERVAL, Tasks, Trouble, start, start_streaming};

const CREATE: &str = "POST /channels/{id}/messages";
const EDIT: &str = "PATCH /channels/{id}/messages/{id}";
const DELETE: &str = "DELETE /channels/{id}/messages/{id}";
const TYPING: &str = "POST /channels/{id}/typing";
/// A guild text channel.
const GUILD_CHANNEL: &str = <FakeDiscord as FakePlatform>::GROUP;
/// A DM channel (the directory knows it as one).
const DM: &str = <FakeDiscord as FakePlatform>::PRIVATE;

fn reply(id: &str, chat: &str, content: &str) -> OutboundMessage {
    crate::reply::<FakeDiscord>(id, chat, content)
}

fn http(fake: &FakeDiscord) -> Arc<Http> {
    Arc::new(HttpBuilder::new(FakeDiscord::TOKEN).proxy(fake.url()).ratelimiter_disabled(true).build())
}

/// The channel and message of a call to `/channels/{channel}/messages/{message}`.
fn message_of(call: &Call) -> (String, u64) {
    let mut ids = call.path.split('/').filter(|part| part.bytes().all(|b| b.is_ascii_digit()) && !part.is_empty());
    let channel = ids.next().unwrap_or_default().to_owned();
    (channel, ids.next().and_then(|id| id.parse().ok()).unwrap_or_default())
}

impl FakePlatform for FakeDiscord {
    const CHANNEL: &'static str = "discord";
    const GROUP: &'static str = "200";
    const PRIVATE: &'static str = "300";
    const THREAD: &'static str = "201";
    const THREAD_PLACE: &'static str = "201";
    const THREAD_IN_KEY: &'static str = ":thread:";
    const UNADDRESSABLE: &'static str = "general";
    const MARKUP: Option<&'static str> = None;
    const BOLD: [&'static str; 2] = ["**", "**"];
    const QUOTE_NOTIFIES: Option<bool> = Some(false);

    async fn start() -> Self {
        FakeDiscord::start().await
    }

    fn spawn(&self, Tasks { stream_interval, replies, events, shutdown }: Tasks) {
        let mut settings =
            DiscordSettings { token: FakeDiscord::TOKEN.into(), proxy_url: Some(self.url()), ..Default::default() };
        if let Some(edit_interval) = stream_interval {
            (settings.stream, settings.typing) = (StreamSettings { private: true, groups: true, edit_interval }, false);
        }
        let channels = [
            KnownChannel::Direct { channel: 300 },
            KnownChannel::Guild { channel: 200, guild: 100 },
            KnownChannel::Thread { channel: 201, parent: 200, guild: 100 },
        ];
        testing::spawn_outbound(http(self), settings, replies, events, &channels, TYPING_INTERVAL, shutdown);
    }

    fn sent(&self) -> Vec<Sent> {
        let sent = self.sent_messages().into_iter();
        sent.map(|m| Sent {
            place: m.channel_id.to_string(),
            id: m.message_id,
            quote: m.message_reference,
            text: m.content,
            format: None,
            notifies_quoted: m.allowed_mentions.and_then(|mentions| mentions["replied_user"].as_bool()),
        })
        .collect()
    }

    fn send_calls(&self) -> usize {
        self.calls_to(CREATE).len()
    }

    fn fail_next_send(&self, trouble: Trouble) -> usize {
        let failure = match trouble {
            // Retried after 1 s, then 2 s: one is enough to hold a channel back.
            Trouble::ServerError | Trouble::Holdup => Failure::ServerError,
            Trouble::Refusal => {
                Failure::Status { code: 403, body: json!({ "message": "Missing Permissions", "code": 50013 }) }
            }
        };
        self.fail_next(CREATE, failure);
        1
    }

    fn break_next_edit(&self) {
        self.fail_next(EDIT, Failure::RateLimited { retry_after_secs: 0.5, global: false });
    }

    fn edit_calls(&self) -> Vec<Edit> {
        let edits = self.calls_to(EDIT).into_iter();
        edits
            .map(|call| {
                let (place, message) = message_of(&call);
                let text = call.body["content"].as_str().unwrap_or_default().to_owned();
                Edit { at: call.at, place, message, text, format: None, failed: call.failed }
            })
            .collect()
    }

    fn deleted(&self) -> Vec<(String, u64)> {
        self.calls_to(DELETE).iter().map(message_of).collect()
    }

    fn typing(&self) -> Vec<String> {
        self.calls_to(TYPING).iter().map(|call| message_of(call).0).collect()
    }
}

shared_suite!(FakeDiscord);

/// Waits until `n` messages were created successfully, and returns them as the fake has them.
async fn sent(fake: &FakeDiscord, n: usize) -> Vec<SentMessage> {
    crate::until(&format!("{n} sent messages"), || fake.sent_messages().len() >= n).await;
    fake.sent_messages()
}

fn contents(fake: &FakeDiscord) -> Vec<String> {
    fake.sent_messages().into_iter().map(|m| m.content).collect()
}

#[tokio::test]
async fn a_guild_reply_references_the_trigger_without_pinging_anyone_but_named_users() {
    let h = start::<FakeDiscord>().await;
    h.publish(&reply("r1", GUILD_CHANNEL, "@everyone look, <@77>")).await;
    let sent = sent(&h.fake, 1).await;
    assert_eq!(sent[0].channel_id, 200);
    assert_eq!(sent[0].message_reference, Some(42));
    let mentions = sent[0].allowed_mentions.clone().unwrap_or_default();
    assert_eq!(mentions["replied_user"], false);
    assert_eq!(mentions["parse"], json!(["users"]), "no everyone or role pings from model text");
}

#[tokio::test]
async fn a_long_reply_arrives_in_ordered_parts_with_balanced_fences() {
    let h = start::<FakeDiscord>().await;
    let prose: String = (0..20).map(|n| format!("Paragraph {n:02} says something more.\n\n")).collect();
    let code: String = (0..70).map(|n| format!("line_{n:02} = \"{}\"\n", "x".repeat(42))).collect();
    let content = format!("{prose}```python\n{code}```\n\nThe end.");
    assert!((4400..4700).contains(&content.chars().count()), "{}", content.chars().count());
    h.publish(&reply("r1", GUILD_CHANNEL, &content)).await;
    let sent = sent(&h.fake, 3).await;
    h.settled(1).await;
    let parts = contents(&h.fake);
    assert_eq!(parts.len(), 3);
    for part in &parts {
        assert!(part.chars().count() <= 2000, "part of {} chars", part.chars().count());
        assert_eq!(part.matches("```").count() % 2, 0, "unbalanced fence in {part}");
    }
    assert!(parts[1].starts_with("```python\n") || parts[2].starts_with("```python\n"), "block reopened");
    let joined = parts.concat();
    let positions: Vec<usize> = ["Paragraph 00", "Paragraph 19", "line_00", "line_69", "The end."]
        .iter()
        .map(|needle| joined.find(needle).unwrap_or_else(|| panic!("{needle} missing")))
        .collect();
    assert!(positions.is_sorted(), "parts out of order: {positions:?}");
    let references: Vec<Option<u64>> = sent.iter().map(|m| m.message_reference).collect();
    assert_eq!(references, [Some(42), None, None], "only the first part references");
}

#[tokio::test]
async fn a_rate_limit_is_waited_out_as_long_as_discord_says() {
    let h = start::<FakeDiscord>().await;
    h.fake.fail_next(CREATE, Failure::RateLimited { retry_after_secs: 0.3, global: false });
    h.fake.fail_next(CREATE, Failure::RateLimited { retry_after_secs: 0.45, global: false });
    h.publish(&reply("r1", DM, "patience")).await;
    let calls = h.fake.wait_for_calls(CREATE, 3, Duration::from_secs(5)).await;
    sent(&h.fake, 1).await;
    // The fake answers 429 again to a call made before retry_after has passed: none was.
    let statuses: Vec<u16> = calls.iter().map(|call| call.status).collect();
    assert_eq!(statuses, [429, 429, 200]);
    let waits = [calls[1].at.duration_since(calls[0].at), calls[2].at.duration_since(calls[1].at)];
    assert!(waits[0] >= Duration::from_millis(300) && waits[1] >= Duration::from_millis(450), "{waits:?}");
    // Not a fixed backoff (1 s, then 2 s) either.
    assert!(waits[0] < Duration::from_millis(900) && waits[1] < Duration::from_millis(1500), "{waits:?}");
    assert_eq!(contents(&h.fake), ["patience"]);
}

#[tokio::test]
async fn a_global_rate_limit_holds_back_every_channel() {
    let h = start::<FakeDiscord>().await;
    h.fake.fail_next(CREATE, Failure::RateLimited { retry_after_secs: 0.6, global: true });
    h.publish(&reply("r1", GUILD_CHANNEL, "first")).await;
    let limited = h.fake.wait_for_calls(CREATE, 1, PATIENCE).await.remove(0);
    // Not a wait for quiet: the second reply is meant to arrive while the global limit holds.
    tokio::time::sleep(Duration::from_millis(100)).await;
    h.publish(&reply("r2", DM, "elsewhere")).await;
    sent(&h.fake, 2).await;
    let calls = h.fake.calls_to(CREATE);
    assert_eq!(h.fake.rate_limited_calls(), 1, "no call went out while the global limit held: {calls:#?}");
    for call in &calls[1..] {
        assert!(call.at.duration_since(limited.at) >= Duration::from_millis(600), "{call:?}");
    }
    let mut contents = contents(&h.fake);
    contents.sort();
    assert_eq!(contents, ["elsewhere", "first"]);
}

#[tokio::test]
async fn a_reply_whose_answer_is_lost_appears_once() {
    for lost in [LostAnswer::ServerError, LostAnswer::ConnectionDropped] {
        let h = start::<FakeDiscord>().await;
        h.fake.fail_next(CREATE, Failure::AnswerLost(lost));
        h.publish(&reply("r1", GUILD_CHANNEL, "exactly once")).await;
        h.publish(&reply("r2", GUILD_CHANNEL, "barrier")).await;
        let calls = h.fake.wait_for_calls(CREATE, 3, PATIENCE).await;
        sent(&h.fake, 2).await;
        assert_eq!(contents(&h.fake), ["exactly once", "barrier"], "{lost:?}");
        assert_eq!(calls[1].body["nonce"], calls[0].body["nonce"], "the retry repeats the nonce");
        assert_eq!(calls[1].body["enforce_nonce"], true);
        assert_ne!(calls[2].body["nonce"], calls[0].body["nonce"], "another reply, another nonce");
    }
}

#[tokio::test]
async fn every_part_of_a_long_reply_appears_once_when_an_answer_is_lost() {
    let h = start::<FakeDiscord>().await;
    h.fake.fail_next(CREATE, Failure::AnswerLost(LostAnswer::ConnectionDropped));
    let content = format!("{}\n\n{}", "a".repeat(1500), "b".repeat(1500));
    h.publish(&reply("r1", GUILD_CHANNEL, &content)).await;
    let sent_parts = sent(&h.fake, 2).await;
    h.publish(&reply("r2", GUILD_CHANNEL, "barrier")).await;
    sent(&h.fake, 3).await;
    assert_eq!(contents(&h.fake), ["a".repeat(1500), "b".repeat(1500), "barrier".into()]);
    assert_ne!(sent_parts[0].nonce, sent_parts[1].nonce, "each part has its own nonce");
}

#[tokio::test]
async fn files_are_uploaded_with_the_last_part_and_problems_noted() {
    let h = start::<FakeDiscord>().await;
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, b"some notes").unwrap();
    let file = |path: &std::path::Path| Media {
        kind: "file".into(),
        path: Some(path.to_string_lossy().into_owned()),
        ..Media::default()
    };
    let mut msg = reply("r1", GUILD_CHANNEL, "Here you go");
    let link = Media { kind: "photo".into(), url: Some("https://example.com/chart.png".into()), ..Media::default() };
    msg.media = vec![file(&notes), file(&dir.path().join("missing.csv")), link];
    h.publish(&msg).await;
    let sent = sent(&h.fake, 1).await;

    assert_eq!(sent[0].file_names, ["notes.txt"]);
    assert_eq!(sent[0].message_reference, Some(42));
    assert_eq!(sent[0].content, "Here you go\n\n(file not found: missing.csv)\nhttps://example.com/chart.png");
    let upload = &h.fake.calls_to(CREATE)[0].body["files"][0];
    assert_eq!(upload["bytes_len"], 10);
}

#[tokio::test]
async fn send_markdown_references_only_the_first_part() {
    let h = start::<FakeDiscord>().await;
    let text = format!("{}\n\n{}", "a".repeat(1500), "b".repeat(1500));
    let ids = testing::send_markdown(http(&h.fake), 200, Some(42), "discord:200:42", &text).await.unwrap();
    let sent = h.fake.sent_messages();
    assert_eq!(ids, sent.iter().map(|m| m.message_id).collect::<Vec<_>>());
    let references: Vec<Option<u64>> = sent.iter().map(|m| m.message_reference).collect();
    assert_eq!(references, [Some(42), None]);
}

#[tokio::test]
async fn a_long_streamed_reply_stops_at_the_limit_and_is_finished_in_parts() {
    let h = start_streaming::<FakeDiscord>(100).await;
    let paragraph = format!("{}\n\n", "word ".repeat(100).trim_end());
    h.emit(&crate::chunk::<FakeDiscord>(DM, &paragraph)).await;
    sent(&h.fake, 1).await;
    for _ in 0..5 {
        h.emit(&crate::chunk::<FakeDiscord>(DM, &paragraph)).await;
    }
    h.fake.wait_for_calls(EDIT, 1, PATIENCE).await;
    // Lets the draft run into the limit (a few edit intervals); no call says it got there.
    tokio::time::sleep(Duration::from_millis(250)).await;
    for edit in h.fake.edits() {
        let content = edit.body["content"].as_str().unwrap_or_default();
        assert!(content.chars().count() <= 2000, "draft of {} chars", content.chars().count());
    }
    let content = paragraph.repeat(6);
    let streamed = h.fake.edits().len();
    h.publish(&reply("r1", DM, &content)).await;
    let sent = sent(&h.fake, 2).await;
    let edits = h.fake.wait_for_calls(EDIT, streamed + 1, PATIENCE).await;

    let parts = switchboard_channels::chunking::split_markdown(&content, 2000);
    assert_eq!(parts.len(), 2);
    assert_eq!(edits.last().unwrap().body["content"], parts[0], "the draft became the first part");
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[1].content, parts[1]);
    assert_eq!(sent[0].message_reference, None, "no reference in a DM");
}
