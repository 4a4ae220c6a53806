#![cfg(feature = "telegram")]
//! The Telegram outbound side against the fake Bot API: replies from a real `InProcessBus`
//! delivered by `run_outbound`, typing and streamed drafts driven by `run_live`, wired the way
//! `TelegramChannel::start` wires them.
//!
//! Waits are on the fake's recorded calls, under timeouts. Where a test proves that something
//! was *not* sent, it publishes a later message to the same chat as a barrier: messages of one
//! chat are delivered in order, so once the barrier arrived, the earlier one was handled.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::json;
use switchboard_channels::bus::in_process::InProcessBus;
use switchboard_channels::contract::{Media, RunEventBody, Usage};
use switchboard_channels::delivery::DeliveryPolicy;
use switchboard_channels::subject::Flow;
use switchboard_channels::telegram::live::{LiveRuns, run_live};
use switchboard_channels::telegram::outbound::run_outbound;
use switchboard_channels::telegram::{StreamSettings, TelegramSettings};
use switchboard_channels::{Bus, BusExt, OutboundMessage, RunEvent};
use switchboard_testkit::fake_telegram::{Failure, FakeTelegram, SentMessage};
use teloxide::Bot;
use tokio_util::sync::CancellationToken;

const PATIENCE: Duration = Duration::from_secs(4);
const GROUP: &str = "-1001234";
const PRIVATE: &str = "5550001";

/// The fake, the bus, and the outbound and live tasks of the channel.
struct Harness {
    fake: FakeTelegram,
    bus: Arc<InProcessBus>,
    shutdown: CancellationToken,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn start(settings: TelegramSettings) -> Harness {
    start_with(settings, LiveRuns::new()).await
}

async fn start_with(settings: TelegramSettings, live: LiveRuns) -> Harness {
    let fake = FakeTelegram::start().await;
    let bus = Arc::new(InProcessBus::new(64));
    let url = reqwest::Url::parse(&fake.api_url()).unwrap();
    let bot = Bot::new(FakeTelegram::TOKEN).set_api_url(url);
    let settings = Arc::new(TelegramSettings { token: FakeTelegram::TOKEN.into(), ..settings });
    let (live, shutdown) = (Arc::new(live), CancellationToken::new());
    let replies = bus.outbound("telegram").await.unwrap();
    let events = bus.events("telegram", None).await.unwrap();
    tokio::spawn(run_outbound(
        bot.clone(),
        Arc::clone(&settings),
        replies,
        Arc::clone(&live),
        DeliveryPolicy::default(),
        shutdown.clone(),
    ));
    tokio::spawn(run_live(bot, settings, events, live, shutdown.clone()));
    Harness { fake, bus, shutdown }
}

fn streaming(interval_ms: u64) -> TelegramSettings {
    let stream = StreamSettings { private: true, groups: true, edit_interval: Duration::from_millis(interval_ms) };
    TelegramSettings { stream, typing: false, ..TelegramSettings::default() }
}

fn reply(id: &str, chat: &str, content: &str) -> OutboundMessage {
    OutboundMessage {
        id: id.into(),
        in_reply_to: Some(format!("telegram:{chat}:42")),
        channel: "telegram".into(),
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
        channel: "telegram".into(),
        chat_id: chat.into(),
        inbound_id: Some(format!("telegram:{chat}:42")),
        // As the worker addresses it: the inbound message's thread and platform message id.
        thread_id: session_key.rsplit_once(":topic:").map(|(_, thread)| thread.to_owned()),
        reply_to: Some("42".into()),
        at: chrono::Utc::now(),
        body,
    }
}

fn chunk(chat: &str, text: &str) -> RunEvent {
    event(chat, &format!("telegram:{chat}"), RunEventBody::Chunk { text: text.into() })
}

impl Harness {
    async fn publish(&self, msg: &OutboundMessage) {
        self.bus.publish_outbound(msg).await.unwrap();
    }

    async fn emit(&self, event: &RunEvent) {
        self.bus.publish_event(event).await.unwrap();
    }

    /// Waits until `n` messages were sent successfully, and returns them.
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

    async fn calls(&self, method: &str, n: usize) -> usize {
        self.fake.wait_for_calls(method, n, PATIENCE).await.len()
    }
}

/// Telegram's visible text of an HTML message (what the limit counts), in UTF-16 units.
fn visible_len(html: &str) -> usize {
    let mut visible = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            c if !in_tag => visible.push(c),
            _ => {}
        }
    }
    let visible = visible.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&amp;", "&");
    visible.encode_utf16().count()
}

#[tokio::test]
async fn group_reply_quotes_the_trigger_and_posts_in_its_topic() {
    let h = start(TelegramSettings::default()).await;
    let msg = OutboundMessage { thread_id: Some("7".into()), ..reply("r1", GROUP, "hello group") };
    h.publish(&msg).await;
    let sent = h.sent(1).await;
    assert_eq!(sent[0].chat_id, -1001234);
    assert_eq!(sent[0].reply_to_message_id, Some(42));
    assert_eq!(sent[0].message_thread_id, Some(7));
    assert_eq!(sent[0].text.as_deref(), Some("hello group"));
}

#[tokio::test]
async fn private_reply_does_not_quote() {
    let h = start(TelegramSettings::default()).await;
    h.publish(&reply("r1", PRIVATE, "hello you")).await;
    let sent = h.sent(1).await;
    assert_eq!(sent[0].chat_id, 5550001);
    assert_eq!(sent[0].reply_to_message_id, None);
    assert_eq!(sent[0].message_thread_id, None);
}

#[tokio::test]
async fn markdown_arrives_as_html() {
    let h = start(TelegramSettings::default()).await;
    h.publish(&reply("r1", PRIVATE, "**Done.** See:\n\n```rust\nfn main() {}\n```")).await;
    let sent = h.sent(1).await;
    let text = sent[0].text.as_deref().unwrap_or_default();
    assert_eq!(sent[0].parse_mode.as_deref(), Some("HTML"));
    assert!(text.contains("<b>Done.</b>"), "{text}");
    assert!(text.contains(r#"<pre><code class="language-rust">fn main() {}"#), "{text}");
}

#[tokio::test]
async fn rejected_html_is_resent_as_plain_text_once() {
    let h = start(TelegramSettings::default()).await;
    h.fake.reject_html_containing("<b>");
    h.publish(&reply("r1", PRIVATE, "a **bold** claim")).await;
    h.publish(&reply("r2", PRIVATE, "barrier")).await;
    let sent = h.sent(2).await;
    assert_eq!(sent[0].text.as_deref(), Some("a bold claim"));
    assert_eq!(sent[0].parse_mode, None);
    assert_eq!(sent[1].text.as_deref(), Some("barrier"));
    assert_eq!(h.fake.calls_to("sendmessage").len(), 3, "one refused HTML, one plain, one barrier");
}

#[tokio::test]
async fn a_long_reply_arrives_in_ordered_parts_within_the_limit() {
    let h = start(TelegramSettings::default()).await;
    let prose: String = (0..60).map(|n| format!("Paragraph {n:03} says something worth reading.\n\n")).collect();
    let code: String = (0..120).map(|n| format!("let line_{n:03} = \"{}\";\n", "x".repeat(40))).collect();
    let content = format!("{prose}```rust\n{code}```\n\nThe end.");
    assert!(content.chars().count() > 9000);
    h.publish(&reply("r1", PRIVATE, &content)).await;
    h.publish(&reply("r2", PRIVATE, "barrier")).await;
    let sent = h.sent(4).await;
    let parts: Vec<&str> = sent.iter().map(|m| m.text.as_deref().unwrap_or_default()).collect();
    let (barrier, parts) = parts.split_last().unwrap();
    assert_eq!(*barrier, "barrier");
    assert!(parts.len() >= 3, "{} parts", parts.len());
    for part in parts {
        assert!(visible_len(part) <= 4096, "part of {} visible units", visible_len(part));
        assert_eq!(part.matches("<pre>").count(), part.matches("</pre>").count(), "unbalanced fence in {part}");
        assert_eq!(part.matches("<code").count(), part.matches("</code>").count());
    }
    let joined = parts.concat();
    let positions: Vec<usize> = ["Paragraph 000", "Paragraph 059", "let line_000", "let line_119", "The end."]
        .iter()
        .map(|needle| joined.find(needle).unwrap_or_else(|| panic!("{needle} missing")))
        .collect();
    assert!(positions.is_sorted(), "parts out of order: {positions:?}");
    assert_eq!(sent[0].reply_to_message_id, None);
}

#[tokio::test]
async fn flood_control_is_waited_out_and_the_message_sent_once() {
    let h = start(TelegramSettings::default()).await;
    h.fake.fail_next("sendMessage", Failure::TooManyRequests { retry_after: 1 });
    h.publish(&reply("r1", PRIVATE, "patience")).await;
    let calls = h.fake.wait_for_calls("sendmessage", 2, PATIENCE).await;
    assert!(calls[1].at.duration_since(calls[0].at) >= Duration::from_secs(1));
    h.publish(&reply("r2", PRIVATE, "barrier")).await;
    let sent = h.sent(2).await;
    assert_eq!(sent.iter().filter(|m| m.text.as_deref() == Some("patience")).count(), 1);
}

#[tokio::test]
async fn server_errors_are_retried_and_the_message_sent_once() {
    let h = start(TelegramSettings::default()).await;
    // A 502's body, answered with HTTP 200: teloxide sleeps 10 s before returning an HTTP 5xx
    // error and ignores `error_code`, so the retry policy sees exactly this error either way.
    // (`server_error_with_real_status` below shows the real thing, slowly.)
    for _ in 0..2 {
        h.fake.fail_next("sendMessage", Failure::Status { code: 200, description: "Bad Gateway".into() });
    }
    h.publish(&reply("r1", PRIVATE, "eventually")).await;
    h.calls("sendmessage", 3).await;
    h.publish(&reply("r2", PRIVATE, "barrier")).await;
    let sent = h.sent(2).await;
    let texts: Vec<_> = sent.iter().map(|m| m.text.clone().unwrap_or_default()).collect();
    assert_eq!(texts, ["eventually", "barrier"]);
}

#[tokio::test]
#[ignore = "slow: teloxide waits 10 s on an HTTP 5xx answer"]
async fn server_error_with_real_status() {
    let h = start(TelegramSettings::default()).await;
    h.fake.fail_next("sendMessage", Failure::ServerError);
    h.publish(&reply("r1", PRIVATE, "eventually")).await;
    let calls = h.fake.wait_for_calls("sendmessage", 2, Duration::from_secs(20)).await;
    assert!(calls[0].failed && !calls[1].failed);
}

#[tokio::test]
async fn a_redelivered_reply_is_not_sent_twice() {
    let h = start(TelegramSettings::default()).await;
    let msg = reply("run-1:reply", PRIVATE, "only once");
    h.publish(&msg).await;
    h.sent(1).await;
    // The same id again, past the bus's own publish dedupe: as after a worker's redelivery.
    let payload = Bytes::from(serde_json::to_vec(&msg).unwrap());
    h.bus.publish_raw(Flow::Out, "telegram", PRIVATE, None, payload).await.unwrap();
    h.publish(&reply("r2", PRIVATE, "barrier")).await;
    let sent = h.sent(2).await;
    let texts: Vec<_> = sent.iter().map(|m| m.text.clone().unwrap_or_default()).collect();
    assert_eq!(texts, ["only once", "barrier"]);
}

#[tokio::test]
async fn suppressed_and_unaddressable_replies_send_nothing() {
    let h = start(TelegramSettings::default()).await;
    let mut suppressed = reply("r1", PRIVATE, "");
    suppressed.metadata.insert("suppressed".into(), json!(true));
    h.publish(&suppressed).await;
    h.publish(&reply("r2", PRIVATE, "   ")).await;
    h.publish(&reply("r3", "not-a-chat", "lost")).await;
    h.bus.publish_raw(Flow::Out, "telegram", PRIVATE, None, Bytes::from_static(b"{not json")).await.unwrap();
    h.publish(&reply("r4", PRIVATE, "barrier")).await;
    let sent = h.sent(1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(h.fake.calls_to("sendmessage").len(), 1);
    assert_eq!(sent[0].text.as_deref(), Some("barrier"));
}

#[tokio::test]
async fn a_blocked_bot_gives_up_without_retrying() {
    let h = start(TelegramSettings::default()).await;
    let blocked = Failure::Status { code: 403, description: "Forbidden: bot was blocked by the user".into() };
    h.fake.fail_next("sendMessage", blocked);
    h.publish(&reply("r1", PRIVATE, "unwanted")).await;
    h.publish(&reply("r2", PRIVATE, "barrier")).await;
    let sent = h.sent(1).await;
    assert_eq!(sent[0].text.as_deref(), Some("barrier"));
    assert_eq!(h.fake.calls_to("sendmessage").len(), 2);
}

#[tokio::test]
async fn a_slow_chat_does_not_hold_up_another() {
    let h = start(TelegramSettings::default()).await;
    h.fake.fail_next("sendMessage", Failure::TooManyRequests { retry_after: 1 });
    h.publish(&reply("r1", GROUP, "slow")).await;
    h.calls("sendmessage", 1).await;
    h.publish(&reply("r2", PRIVATE, "fast")).await;
    let sent = h.sent(2).await;
    let texts: Vec<_> = sent.iter().map(|m| m.text.clone().unwrap_or_default()).collect();
    assert_eq!(texts, ["fast", "slow"]);
}

#[tokio::test]
async fn typing_repeats_while_the_run_lasts_and_stops_when_it_completes() {
    let live = LiveRuns::new().with_typing_interval(Duration::from_millis(100));
    let h = start_with(TelegramSettings::default(), live).await;
    let key = format!("telegram:{GROUP}:topic:9");
    h.emit(&event(GROUP, &key, RunEventBody::Started)).await;
    let actions = h.fake.wait_for_calls("sendChatAction", 3, PATIENCE).await;
    assert_eq!(actions[0].params["action"], "typing");
    assert_eq!(actions[0].params["message_thread_id"], 9);
    let completed = RunEventBody::completed("done", Usage::default(), "m", None);
    h.emit(&event(GROUP, &key, completed)).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    let after_completion = h.fake.calls_to("sendChatAction").len();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(h.fake.calls_to("sendChatAction").len(), after_completion);
}

#[tokio::test]
async fn typing_stops_when_the_reply_is_delivered() {
    let live = LiveRuns::new().with_typing_interval(Duration::from_millis(100));
    let h = start_with(TelegramSettings::default(), live).await;
    h.emit(&event(PRIVATE, &format!("telegram:{PRIVATE}"), RunEventBody::Started)).await;
    h.calls("sendChatAction", 2).await;
    h.publish(&reply("r1", PRIVATE, "here")).await;
    h.sent(1).await;
    let after_reply = h.fake.calls_to("sendChatAction").len();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(h.fake.calls_to("sendChatAction").len(), after_reply);
}

#[tokio::test]
async fn a_streamed_reply_is_edited_in_place_and_finished_as_html() {
    let h = start(streaming(300)).await;
    let words = ["Hello", " there", ", this", " is", " **a", " streamed**", " reply"];
    for _ in 0..3 {
        for word in words {
            h.emit(&chunk(PRIVATE, word)).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    h.fake.wait_for_calls("editMessageText", 2, PATIENCE).await;
    let streamed = h.fake.edits().len();
    h.publish(&reply("r1", PRIVATE, "Hello there, this is **a streamed** reply")).await;
    let edits = h.fake.wait_for_calls("editMessageText", streamed + 1, PATIENCE).await;

    let sent = h.fake.sent_messages();
    assert_eq!(sent.len(), 1, "{sent:#?}");
    assert_eq!(sent[0].parse_mode, None);
    let (last, streaming_edits) = edits.split_last().unwrap();
    for pair in streaming_edits.windows(2) {
        assert!(pair[1].at.duration_since(pair[0].at) >= Duration::from_millis(280), "edits too close");
    }
    assert_eq!(last.params["message_id"], sent[0].message_id);
    assert_eq!(last.params["parse_mode"], "HTML");
    assert_eq!(last.params["text"], "Hello there, this is <b>a streamed</b> reply");
}

#[tokio::test]
async fn a_failed_stream_edit_falls_back_to_a_normal_reply() {
    let h = start(streaming(200)).await;
    let gone = Failure::Status { code: 400, description: "Bad Request: message to edit not found".into() };
    h.fake.fail_next("editMessageText", gone);
    h.emit(&chunk(GROUP, "Draft")).await;
    h.sent(1).await;
    h.emit(&chunk(GROUP, " text")).await;
    h.calls("editMessageText", 1).await;
    h.publish(&reply("r1", GROUP, "Final **text**")).await;
    let sent = h.sent(2).await;
    h.calls("deleteMessage", 1).await;

    assert_eq!(sent.len(), 2, "{sent:#?}");
    assert_eq!(sent[0].text.as_deref(), Some("Draft"));
    assert_eq!(sent[0].reply_to_message_id, Some(42), "a draft quotes like the reply");
    assert_eq!(sent[1].text.as_deref(), Some("Final <b>text</b>"));
    assert_eq!(sent[1].reply_to_message_id, Some(42));
    let deleted = &h.fake.calls_to("deleteMessage")[0];
    assert_eq!(deleted.params["message_id"], sent[0].message_id);
    assert!(h.fake.edits().is_empty());
}

#[tokio::test]
async fn files_follow_the_text_as_photos_documents_or_notices() {
    let h = start(TelegramSettings::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let (png, txt) = (dir.path().join("chart.png"), dir.path().join("notes.txt"));
    std::fs::write(&png, b"\x89PNG\r\n\x1a\nnot really").unwrap();
    std::fs::write(&txt, b"some notes").unwrap();
    let file = |path: &std::path::Path| Media {
        kind: "file".into(),
        path: Some(path.to_string_lossy().into_owned()),
        ..Media::default()
    };
    let mut msg = reply("r1", GROUP, "Here you go");
    msg.media = vec![file(&png), file(&txt), file(&dir.path().join("missing.csv"))];
    h.publish(&msg).await;
    let sent = h.sent(4).await;

    let methods: Vec<&str> = sent.iter().map(|m| m.method.as_str()).collect();
    assert_eq!(methods, ["sendmessage", "sendphoto", "senddocument", "sendmessage"]);
    assert_eq!(sent[0].reply_to_message_id, Some(42));
    assert_eq!(sent[1].reply_to_message_id, None);
    assert_eq!(sent[2].file_name.as_deref(), Some("notes.txt"));
    assert!(sent[3].text.as_deref().unwrap_or_default().contains("file not found: missing.csv"));
}

#[tokio::test]
async fn flood_control_on_a_stream_edit_pauses_the_edits_and_the_reply_still_lands() {
    let h = start(streaming(200)).await;
    h.fake.fail_next("editMessageText", Failure::TooManyRequests { retry_after: 1 });
    h.emit(&chunk(PRIVATE, "One")).await;
    h.sent(1).await;
    for word in [" two", " three", " four", " five", " six", " seven", " eight"] {
        tokio::time::sleep(Duration::from_millis(100)).await;
        h.emit(&chunk(PRIVATE, word)).await;
    }
    let calls = h.fake.wait_for_calls("editMessageText", 2, PATIENCE).await;
    assert!(calls[0].failed && !calls[1].failed);
    assert!(calls[1].at.duration_since(calls[0].at) >= Duration::from_secs(1), "edited during flood control");
    assert_eq!(calls[1].params["text"], "One two three four five six seven eight", "intermediate edits skipped");
    h.publish(&reply("r1", PRIVATE, "One *two*")).await;
    let edits = h.fake.wait_for_calls("editMessageText", 3, PATIENCE).await;
    assert_eq!(edits[2].params["text"], "One <i>two</i>");
    assert_eq!(h.fake.sent_messages().len(), 1);
}
