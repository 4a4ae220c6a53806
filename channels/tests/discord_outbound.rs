#![cfg(feature = "discord")]
//! The Discord outbound side against the fake Discord: replies from a real `InProcessBus`
//! delivered by `run_outbound`, typing and streamed drafts driven by `run_live`, wired the way
//! `DiscordChannel::start` will wire them (through `discord::testing::spawn_outbound`).
//!
//! Waits are on the fake's recorded calls, under timeouts. Where a test proves that something
//! was *not* sent, it publishes a later message to the same channel as a barrier: messages of
//! one channel are delivered in order, so once the barrier arrived, the earlier one was handled.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::json;
use serenity::all::{Http, HttpBuilder};
use switchboard_channels::bus::in_process::InProcessBus;
use switchboard_channels::contract::{Media, RunEventBody, Usage};
use switchboard_channels::discord::testing::{self, KnownChannel};
use switchboard_channels::discord::{DiscordSettings, StreamSettings};
use switchboard_channels::subject::Flow;
use switchboard_channels::{Bus, BusExt, OutboundMessage, RunEvent};
use switchboard_testkit::fake_discord::{Failure, FakeDiscord, LostAnswer, SentMessage};
use tokio_util::sync::CancellationToken;

const PATIENCE: Duration = Duration::from_secs(4);
const CREATE: &str = "POST /channels/{id}/messages";
const EDIT: &str = "PATCH /channels/{id}/messages/{id}";
const DELETE: &str = "DELETE /channels/{id}/messages/{id}";
const TYPING: &str = "POST /channels/{id}/typing";
/// A guild text channel.
const GUILD_CHANNEL: &str = "200";
/// A DM channel (the directory knows it as one).
const DM: &str = "300";

/// The fake, the bus, and the outbound and live tasks of the channel.
struct Harness {
    fake: FakeDiscord,
    bus: Arc<InProcessBus>,
    http: Arc<Http>,
    shutdown: CancellationToken,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn start(settings: DiscordSettings) -> Harness {
    let fake = FakeDiscord::start().await;
    let bus = Arc::new(InProcessBus::new(64));
    let http = Arc::new(HttpBuilder::new(FakeDiscord::TOKEN).proxy(fake.url()).ratelimiter_disabled(true).build());
    let settings = DiscordSettings { token: FakeDiscord::TOKEN.into(), proxy_url: Some(fake.url()), ..settings };
    let shutdown = CancellationToken::new();
    let replies = bus.outbound("discord").await.unwrap();
    let events = bus.events("discord", None).await.unwrap();
    let typing_interval = Duration::from_millis(100);
    let channels = [
        KnownChannel::Direct { channel: 300 },
        KnownChannel::Guild { channel: 200, guild: 100 },
        KnownChannel::Thread { channel: 201, parent: 200, guild: 100 },
    ];
    testing::spawn_outbound(Arc::clone(&http), settings, replies, events, &channels, typing_interval, shutdown.clone());
    Harness { fake, bus, http, shutdown }
}

fn streaming(interval_ms: u64) -> DiscordSettings {
    let stream = StreamSettings { private: true, groups: true, edit_interval: Duration::from_millis(interval_ms) };
    DiscordSettings { stream, typing: false, ..DiscordSettings::default() }
}

fn reply(id: &str, chat: &str, content: &str) -> OutboundMessage {
    OutboundMessage {
        id: id.into(),
        in_reply_to: Some(format!("discord:{chat}:42")),
        channel: "discord".into(),
        chat_id: chat.into(),
        content: content.into(),
        reply_to: Some("42".into()),
        ..OutboundMessage::default()
    }
}

fn event(chat: &str, session_key: &str, body: RunEventBody) -> RunEvent {
    RunEvent {
        v: 1,
        run_id: "run-1".into(),
        session_key: session_key.into(),
        channel: "discord".into(),
        chat_id: chat.into(),
        inbound_id: Some(format!("discord:{chat}:42")),
        // As the worker addresses it: the inbound message's thread and platform message id.
        thread_id: session_key.rsplit_once(":thread:").map(|(_, thread)| thread.to_owned()),
        reply_to: Some("42".into()),
        at: chrono::Utc::now(),
        body,
    }
}

fn chunk(chat: &str, text: &str) -> RunEvent {
    event(chat, &format!("discord:{chat}"), RunEventBody::Chunk { text: text.into() })
}

impl Harness {
    async fn publish(&self, msg: &OutboundMessage) {
        self.bus.publish_outbound(msg).await.unwrap();
    }

    async fn emit(&self, event: &RunEvent) {
        self.bus.publish_event(event).await.unwrap();
    }

    /// Waits until `n` messages were created successfully, and returns them.
    async fn sent(&self, n: usize) -> Vec<SentMessage> {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let sent = self.fake.sent_messages();
            if sent.len() >= n {
                return sent;
            }
            assert!(tokio::time::Instant::now() < deadline, "wanted {n} sent messages, got {sent:#?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn contents(&self) -> Vec<String> {
        self.fake.sent_messages().into_iter().map(|m| m.content).collect()
    }
}

#[tokio::test]
async fn a_guild_reply_references_the_trigger_without_pinging_anyone_but_named_users() {
    let h = start(DiscordSettings::default()).await;
    h.publish(&reply("r1", GUILD_CHANNEL, "@everyone look, <@77>")).await;
    let sent = h.sent(1).await;
    assert_eq!(sent[0].channel_id, 200);
    assert_eq!(sent[0].message_reference, Some(42));
    let mentions = sent[0].allowed_mentions.clone().unwrap_or_default();
    assert_eq!(mentions["replied_user"], false);
    assert_eq!(mentions["parse"], json!(["users"]), "no everyone or role pings from model text");
}

#[tokio::test]
async fn a_dm_reply_does_not_reference() {
    let h = start(DiscordSettings::default()).await;
    h.publish(&reply("r1", DM, "hello you")).await;
    let sent = h.sent(1).await;
    assert_eq!(sent[0].channel_id, 300);
    assert_eq!(sent[0].message_reference, None);
    assert_eq!(sent[0].content, "hello you");
}

#[tokio::test]
async fn a_thread_reply_goes_to_the_thread() {
    let h = start(DiscordSettings::default()).await;
    h.publish(&OutboundMessage { thread_id: Some("201".into()), ..reply("r1", GUILD_CHANNEL, "in the thread") }).await;
    let sent = h.sent(1).await;
    assert_eq!(sent[0].channel_id, 201);
    assert_eq!(sent[0].message_reference, Some(42));
}

#[tokio::test]
async fn a_long_reply_arrives_in_ordered_parts_with_balanced_fences() {
    let h = start(DiscordSettings::default()).await;
    let prose: String = (0..20).map(|n| format!("Paragraph {n:02} says something more.\n\n")).collect();
    let code: String = (0..70).map(|n| format!("line_{n:02} = \"{}\"\n", "x".repeat(42))).collect();
    let content = format!("{prose}```python\n{code}```\n\nThe end.");
    assert!((4400..4700).contains(&content.chars().count()), "{}", content.chars().count());
    h.publish(&reply("r1", GUILD_CHANNEL, &content)).await;
    let sent = h.sent(3).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let parts = h.contents();
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
    let h = start(DiscordSettings::default()).await;
    h.fake.fail_next(CREATE, Failure::RateLimited { retry_after_secs: 0.3, global: false });
    h.fake.fail_next(CREATE, Failure::RateLimited { retry_after_secs: 0.45, global: false });
    h.publish(&reply("r1", DM, "patience")).await;
    let calls = h.fake.wait_for_calls(CREATE, 3, Duration::from_secs(5)).await;
    h.sent(1).await;
    // The fake answers 429 again to a call made before retry_after has passed: none was.
    let statuses: Vec<u16> = calls.iter().map(|call| call.status).collect();
    assert_eq!(statuses, [429, 429, 200]);
    let waits = [calls[1].at.duration_since(calls[0].at), calls[2].at.duration_since(calls[1].at)];
    assert!(waits[0] >= Duration::from_millis(300) && waits[1] >= Duration::from_millis(450), "{waits:?}");
    // Not a fixed backoff (1 s, then 2 s) either.
    assert!(waits[0] < Duration::from_millis(900) && waits[1] < Duration::from_millis(1500), "{waits:?}");
    assert_eq!(h.contents(), ["patience"]);
}

#[tokio::test]
async fn a_global_rate_limit_holds_back_every_channel() {
    let h = start(DiscordSettings::default()).await;
    h.fake.fail_next(CREATE, Failure::RateLimited { retry_after_secs: 0.6, global: true });
    h.publish(&reply("r1", GUILD_CHANNEL, "first")).await;
    let limited = h.fake.wait_for_calls(CREATE, 1, PATIENCE).await.remove(0);
    tokio::time::sleep(Duration::from_millis(100)).await;
    h.publish(&reply("r2", DM, "elsewhere")).await;
    h.sent(2).await;
    let calls = h.fake.calls_to(CREATE);
    assert_eq!(h.fake.rate_limited_calls(), 1, "no call went out while the global limit held: {calls:#?}");
    for call in &calls[1..] {
        assert!(call.at.duration_since(limited.at) >= Duration::from_millis(600), "{call:?}");
    }
    let mut contents = h.contents();
    contents.sort();
    assert_eq!(contents, ["elsewhere", "first"]);
}

#[tokio::test]
async fn a_reply_whose_answer_is_lost_appears_once() {
    for lost in [LostAnswer::ServerError, LostAnswer::ConnectionDropped] {
        let h = start(DiscordSettings::default()).await;
        h.fake.fail_next(CREATE, Failure::AnswerLost(lost));
        h.publish(&reply("r1", GUILD_CHANNEL, "exactly once")).await;
        h.publish(&reply("r2", GUILD_CHANNEL, "barrier")).await;
        let calls = h.fake.wait_for_calls(CREATE, 3, PATIENCE).await;
        h.sent(2).await;
        assert_eq!(h.contents(), ["exactly once", "barrier"], "{lost:?}");
        assert_eq!(calls[1].body["nonce"], calls[0].body["nonce"], "the retry repeats the nonce");
        assert_eq!(calls[1].body["enforce_nonce"], true);
        assert_ne!(calls[2].body["nonce"], calls[0].body["nonce"], "another reply, another nonce");
    }
}

#[tokio::test]
async fn every_part_of_a_long_reply_appears_once_when_an_answer_is_lost() {
    let h = start(DiscordSettings::default()).await;
    h.fake.fail_next(CREATE, Failure::AnswerLost(LostAnswer::ConnectionDropped));
    let content = format!("{}\n\n{}", "a".repeat(1500), "b".repeat(1500));
    h.publish(&reply("r1", GUILD_CHANNEL, &content)).await;
    let sent = h.sent(2).await;
    h.publish(&reply("r2", GUILD_CHANNEL, "barrier")).await;
    h.sent(3).await;
    assert_eq!(h.contents(), ["a".repeat(1500), "b".repeat(1500), "barrier".into()]);
    assert_ne!(sent[0].nonce, sent[1].nonce, "each part has its own nonce");
}

#[tokio::test]
async fn server_errors_are_retried_and_the_message_sent_once() {
    let h = start(DiscordSettings::default()).await;
    h.fake.fail_next(CREATE, Failure::ServerError);
    h.publish(&reply("r1", DM, "eventually")).await;
    h.publish(&reply("r2", DM, "barrier")).await;
    h.sent(2).await;
    assert_eq!(h.contents(), ["eventually", "barrier"]);
    assert_eq!(h.fake.calls_to(CREATE).len(), 3);
}

#[tokio::test]
async fn a_redelivered_reply_is_not_sent_twice() {
    let h = start(DiscordSettings::default()).await;
    let msg = reply("run-1:reply", DM, "only once");
    h.publish(&msg).await;
    h.sent(1).await;
    // The same id again, past the bus's own publish dedupe: as after a worker's redelivery.
    let payload = Bytes::from(serde_json::to_vec(&msg).unwrap());
    h.bus.publish_raw(Flow::Out, "discord", DM, None, payload).await.unwrap();
    h.publish(&reply("r2", DM, "barrier")).await;
    h.sent(2).await;
    assert_eq!(h.contents(), ["only once", "barrier"]);
}

#[tokio::test]
async fn suppressed_empty_and_unaddressable_replies_send_nothing() {
    let h = start(DiscordSettings::default()).await;
    let mut suppressed = reply("r1", DM, "");
    suppressed.metadata.insert("suppressed".into(), json!(true));
    h.publish(&suppressed).await;
    h.publish(&reply("r2", DM, "   ")).await;
    h.publish(&reply("r3", "general", "lost")).await;
    h.bus.publish_raw(Flow::Out, "discord", DM, None, Bytes::from_static(b"{not json")).await.unwrap();
    h.publish(&reply("r4", DM, "barrier")).await;
    h.sent(1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(h.fake.calls_to(CREATE).len(), 1);
    assert_eq!(h.contents(), ["barrier"]);
}

#[tokio::test]
async fn missing_permissions_give_up_without_retrying() {
    let h = start(DiscordSettings::default()).await;
    let forbidden = Failure::Status { code: 403, body: json!({ "message": "Missing Permissions", "code": 50013 }) };
    h.fake.fail_next(CREATE, forbidden);
    h.publish(&reply("r1", GUILD_CHANNEL, "unwanted")).await;
    h.publish(&reply("r2", GUILD_CHANNEL, "barrier")).await;
    h.sent(1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(h.contents(), ["barrier"]);
    assert_eq!(h.fake.calls_to(CREATE).len(), 2, "the refused message was tried once");
}

#[tokio::test]
async fn a_slow_channel_does_not_hold_up_another() {
    let h = start(DiscordSettings::default()).await;
    h.fake.fail_next(CREATE, Failure::ServerError);
    h.publish(&reply("r1", GUILD_CHANNEL, "slow")).await;
    h.fake.wait_for_calls(CREATE, 1, PATIENCE).await;
    h.publish(&reply("r2", DM, "fast")).await;
    h.sent(2).await;
    assert_eq!(h.contents(), ["fast", "slow"]);
}

#[tokio::test]
async fn typing_repeats_in_the_thread_while_the_run_lasts_and_stops_when_it_completes() {
    let h = start(DiscordSettings::default()).await;
    let key = format!("discord:{GUILD_CHANNEL}:thread:201");
    h.emit(&event(GUILD_CHANNEL, &key, RunEventBody::Started)).await;
    let typing = h.fake.wait_for_calls(TYPING, 3, PATIENCE).await;
    assert!(typing.iter().all(|call| call.path == "/channels/201/typing"), "{typing:?}");
    let completed = RunEventBody::completed("done", Usage::default(), "m", None);
    h.emit(&event(GUILD_CHANNEL, &key, completed)).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    let after_completion = h.fake.calls_to(TYPING).len();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(h.fake.calls_to(TYPING).len(), after_completion);
}

#[tokio::test]
async fn typing_stops_when_the_run_is_stopped() {
    let h = start(DiscordSettings::default()).await;
    let key = format!("discord:{GUILD_CHANNEL}");
    h.emit(&event(GUILD_CHANNEL, &key, RunEventBody::Started)).await;
    let typing = h.fake.wait_for_calls(TYPING, 2, PATIENCE).await;
    assert_eq!(typing[0].path, "/channels/200/typing");
    h.emit(&event(GUILD_CHANNEL, &key, RunEventBody::Failed { error: "stopped".into() })).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    let after_stop = h.fake.calls_to(TYPING).len();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(h.fake.calls_to(TYPING).len(), after_stop);
}

#[tokio::test]
async fn typing_stops_when_the_reply_is_delivered() {
    let h = start(DiscordSettings::default()).await;
    h.emit(&event(DM, &format!("discord:{DM}"), RunEventBody::Started)).await;
    h.fake.wait_for_calls(TYPING, 2, PATIENCE).await;
    h.publish(&reply("r1", DM, "here")).await;
    h.sent(1).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let after_reply = h.fake.calls_to(TYPING).len();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(h.fake.calls_to(TYPING).len(), after_reply);
}

#[tokio::test]
async fn a_streamed_reply_is_edited_in_place_and_finished_as_the_reply() {
    let h = start(streaming(300)).await;
    let words = ["Hello", " there", ", this", " is", " **a", " streamed**", " reply"];
    for _ in 0..3 {
        for word in words {
            h.emit(&chunk(GUILD_CHANNEL, word)).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    h.fake.wait_for_calls(EDIT, 2, PATIENCE).await;
    let streamed = h.fake.edits().len();
    let final_text = "Hello there, this is **a streamed** reply";
    h.publish(&reply("r1", GUILD_CHANNEL, final_text)).await;
    let edits = h.fake.wait_for_calls(EDIT, streamed + 1, PATIENCE).await;

    let sent = h.fake.sent_messages();
    assert_eq!(sent.len(), 1, "{sent:#?}");
    assert_eq!(sent[0].message_reference, Some(42), "a draft references like the reply");
    assert_eq!(sent[0].allowed_mentions.clone().unwrap_or_default()["replied_user"], false);
    let (last, streaming_edits) = edits.split_last().unwrap();
    for pair in streaming_edits.windows(2) {
        assert!(pair[1].at.duration_since(pair[0].at) >= Duration::from_millis(280), "edits too close");
    }
    assert_eq!(last.path, format!("/channels/200/messages/{}", sent[0].message_id));
    assert_eq!(last.body["content"], final_text);
}

#[tokio::test]
async fn a_failed_stream_edit_falls_back_to_a_normal_reply() {
    let h = start(streaming(200)).await;
    h.fake.fail_next(EDIT, Failure::RateLimited { retry_after_secs: 0.5, global: false });
    h.emit(&chunk(GUILD_CHANNEL, "Draft")).await;
    h.sent(1).await;
    h.emit(&chunk(GUILD_CHANNEL, " text")).await;
    h.fake.wait_for_calls(EDIT, 1, PATIENCE).await;
    h.emit(&chunk(GUILD_CHANNEL, " more")).await;
    h.publish(&reply("r1", GUILD_CHANNEL, "Final **text**")).await;
    let sent = h.sent(2).await;
    h.fake.wait_for_calls(DELETE, 1, PATIENCE).await;

    assert_eq!(h.contents(), ["Draft", "Final **text**"]);
    assert_eq!(sent[1].message_reference, Some(42));
    assert_eq!(h.fake.calls_to(DELETE)[0].path, format!("/channels/200/messages/{}", sent[0].message_id));
    assert_eq!(h.fake.calls_to(EDIT).len(), 1, "no edits after the failed one");
}

#[tokio::test]
async fn files_are_uploaded_with_the_last_part_and_problems_noted() {
    let h = start(DiscordSettings::default()).await;
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
    let sent = h.sent(1).await;

    assert_eq!(sent[0].file_names, ["notes.txt"]);
    assert_eq!(sent[0].message_reference, Some(42));
    assert_eq!(sent[0].content, "Here you go\n\n(file not found: missing.csv)\nhttps://example.com/chart.png");
    let upload = &h.fake.calls_to(CREATE)[0].body["files"][0];
    assert_eq!(upload["bytes_len"], 10);
}

#[tokio::test]
async fn send_markdown_references_only_the_first_part() {
    let h = start(DiscordSettings::default()).await;
    let text = format!("{}\n\n{}", "a".repeat(1500), "b".repeat(1500));
    let ids = testing::send_markdown(Arc::clone(&h.http), 200, Some(42), "discord:200:42", &text).await.unwrap();
    let sent = h.fake.sent_messages();
    assert_eq!(ids, sent.iter().map(|m| m.message_id).collect::<Vec<_>>());
    let references: Vec<Option<u64>> = sent.iter().map(|m| m.message_reference).collect();
    assert_eq!(references, [Some(42), None]);
}

#[tokio::test]
async fn a_long_streamed_reply_stops_at_the_limit_and_is_finished_in_parts() {
    let h = start(streaming(100)).await;
    let paragraph = format!("{}\n\n", "word ".repeat(100).trim_end());
    h.emit(&chunk(DM, &paragraph)).await;
    h.sent(1).await;
    for _ in 0..5 {
        h.emit(&chunk(DM, &paragraph)).await;
    }
    h.fake.wait_for_calls(EDIT, 1, PATIENCE).await;
    tokio::time::sleep(Duration::from_millis(250)).await;
    for edit in h.fake.edits() {
        let content = edit.body["content"].as_str().unwrap_or_default();
        assert!(content.chars().count() <= 2000, "draft of {} chars", content.chars().count());
    }
    let content = paragraph.repeat(6);
    let streamed = h.fake.edits().len();
    h.publish(&reply("r1", DM, &content)).await;
    let sent = h.sent(2).await;
    let edits = h.fake.wait_for_calls(EDIT, streamed + 1, PATIENCE).await;

    let parts = chunking_of(&content);
    assert_eq!(parts.len(), 2);
    assert_eq!(edits.last().unwrap().body["content"], parts[0], "the draft became the first part");
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[1].content, parts[1]);
    assert_eq!(sent[0].message_reference, None, "no reference in a DM");
}

fn chunking_of(content: &str) -> Vec<String> {
    switchboard_channels::chunking::split_markdown(content, 2000)
}
