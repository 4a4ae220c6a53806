//! The shared suite on the fake Telegram Bot API, and what only Telegram does: HTML from the
//! model's Markdown and its plain-text fallback, the 4096-unit limit, flood control, photos and
//! documents.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use switchboard_channels::OutboundMessage;
use switchboard_channels::contract::Media;
use switchboard_channels::delivery::DeliveryPolicy;
use switchboard_channels::telegram::live::{LiveRuns, run_live};
use switchboard_channels::telegram::outbound::run_outbound;
use switchboard_channels::telegram::{StreamSettings, TelegramSettings};
use switchboard_testkit::fake_telegram::{Call, Failure, FakeTelegram, SentMessage};
use teloxide::Bot;

use crate::{Edit, FakePlatform, PATIENCE, Sent, TYPING_INTERVAL, Tasks, Trouble, start, start_streaming};

fn reply(id: &str, chat: &str, content: &str) -> OutboundMessage {
    crate::reply::<FakeTelegram>(id, chat, content)
}

const PRIVATE: &str = <FakeTelegram as FakePlatform>::PRIVATE;
const GROUP: &str = <FakeTelegram as FakePlatform>::GROUP;

fn id_of(value: &Value) -> String {
    value.as_i64().map(|id| id.to_string()).unwrap_or_else(|| value.as_str().unwrap_or_default().to_owned())
}

/// A chat, or a forum topic of it.
fn place(chat: &Value, thread: Option<i64>) -> String {
    let chat = id_of(chat);
    match thread {
        Some(thread) => format!("{chat}:topic:{thread}"),
        None => chat,
    }
}

fn edit_of(call: Call) -> Edit {
    Edit {
        at: call.at,
        place: id_of(&call.params["chat_id"]),
        message: call.params["message_id"].as_u64().unwrap_or_default(),
        text: call.params["text"].as_str().unwrap_or_default().to_owned(),
        format: call.params["parse_mode"].as_str().map(str::to_owned),
        failed: call.failed,
    }
}

impl FakePlatform for FakeTelegram {
    const CHANNEL: &'static str = "telegram";
    const GROUP: &'static str = "-1001234";
    const PRIVATE: &'static str = "5550001";
    const THREAD: &'static str = "9";
    const THREAD_PLACE: &'static str = "-1001234:topic:9";
    const THREAD_IN_KEY: &'static str = ":topic:";
    const UNADDRESSABLE: &'static str = "not-a-chat";
    const MARKUP: Option<&'static str> = Some("HTML");
    const BOLD: [&'static str; 2] = ["<b>", "</b>"];
    const QUOTE_NOTIFIES: Option<bool> = None;

    async fn start() -> Self {
        FakeTelegram::start().await
    }

    fn spawn(&self, Tasks { stream_interval, replies, events, shutdown }: Tasks) {
        let url = reqwest::Url::parse(&self.api_url()).unwrap();
        let bot = Bot::new(FakeTelegram::TOKEN).set_api_url(url);
        let mut settings = TelegramSettings { token: FakeTelegram::TOKEN.into(), ..TelegramSettings::default() };
        if let Some(edit_interval) = stream_interval {
            (settings.stream, settings.typing) = (StreamSettings { private: true, groups: true, edit_interval }, false);
        }
        let settings = Arc::new(settings);
        let live = Arc::new(LiveRuns::new().with_typing_interval(TYPING_INTERVAL));
        let policy = DeliveryPolicy::default();
        tokio::spawn(run_outbound(
            bot.clone(),
            Arc::clone(&settings),
            replies,
            Arc::clone(&live),
            policy,
            shutdown.clone(),
        ));
        tokio::spawn(run_live(bot, settings, events, live, shutdown));
    }

    fn sent(&self) -> Vec<Sent> {
        let sent = self.sent_messages().into_iter();
        sent.map(|m| Sent {
            place: place(&m.chat_id.into(), m.message_thread_id),
            id: m.message_id.try_into().unwrap(),
            quote: m.reply_to_message_id.map(|id| id.try_into().unwrap()),
            text: m.text.unwrap_or_default(),
            format: m.parse_mode,
            notifies_quoted: None,
        })
        .collect()
    }

    fn send_calls(&self) -> usize {
        self.count_calls("sendMessage")
    }

    fn fail_next_send(&self, trouble: Trouble) -> usize {
        match trouble {
            // A 502's body, answered with HTTP 200: teloxide sleeps 10 s before returning an
            // HTTP 5xx error and ignores `error_code`, so the retry policy sees exactly this
            // error either way (`server_error_with_real_status` shows the real thing, slowly).
            // Twice, so that the backoff grows.
            Trouble::ServerError => {
                for _ in 0..2 {
                    self.fail_next("sendMessage", Failure::Status { code: 200, description: "Bad Gateway".into() });
                }
                2
            }
            Trouble::Refusal => {
                let blocked = "Forbidden: bot was blocked by the user".into();
                self.fail_next("sendMessage", Failure::Status { code: 403, description: blocked });
                1
            }
            Trouble::Holdup => {
                self.fail_next("sendMessage", Failure::TooManyRequests { retry_after: 1 });
                1
            }
        }
    }

    fn break_next_edit(&self) {
        let gone = Failure::Status { code: 400, description: "Bad Request: message to edit not found".into() };
        self.fail_next("editMessageText", gone);
    }

    fn edit_calls(&self) -> Vec<Edit> {
        self.calls_to("editMessageText").into_iter().map(edit_of).collect()
    }

    fn deleted(&self) -> Vec<(String, u64)> {
        let deleted = self.calls_to("deleteMessage").into_iter();
        deleted.map(|call| (id_of(&call.params["chat_id"]), call.params["message_id"].as_u64().unwrap())).collect()
    }

    /// Only `typing` actions count.
    fn typing(&self) -> Vec<String> {
        let actions = self.calls_to("sendChatAction").into_iter().filter(|call| call.params["action"] == "typing");
        actions.map(|call| place(&call.params["chat_id"], call.params["message_thread_id"].as_i64())).collect()
    }
}

shared_suite!(FakeTelegram);

/// Waits until `n` messages were sent successfully, and returns them as the fake has them.
async fn sent(fake: &FakeTelegram, n: usize) -> Vec<SentMessage> {
    crate::until(&format!("{n} sent messages"), || fake.sent_messages().len() >= n).await;
    fake.sent_messages()
}

#[tokio::test]
async fn markdown_arrives_as_html() {
    let h = start::<FakeTelegram>().await;
    h.publish(&reply("r1", PRIVATE, "**Done.** See:\n\n```rust\nfn main() {}\n```")).await;
    let sent = sent(&h.fake, 1).await;
    let text = sent[0].text.as_deref().unwrap_or_default();
    assert_eq!(sent[0].parse_mode.as_deref(), Some("HTML"));
    assert!(text.contains("<b>Done.</b>"), "{text}");
    assert!(text.contains(r#"<pre><code class="language-rust">fn main() {}"#), "{text}");
}

#[tokio::test]
async fn rejected_html_is_resent_as_plain_text_once() {
    let h = start::<FakeTelegram>().await;
    h.fake.reject_html_containing("<b>");
    h.publish(&reply("r1", PRIVATE, "a **bold** claim")).await;
    h.publish(&reply("r2", PRIVATE, "barrier")).await;
    let sent = sent(&h.fake, 2).await;
    assert_eq!(sent[0].text.as_deref(), Some("a bold claim"));
    assert_eq!(sent[0].parse_mode, None);
    assert_eq!(sent[1].text.as_deref(), Some("barrier"));
    assert_eq!(h.fake.calls_to("sendmessage").len(), 3, "one refused HTML, one plain, one barrier");
}

#[tokio::test]
async fn a_long_reply_arrives_in_ordered_parts_within_the_limit() {
    let h = start::<FakeTelegram>().await;
    let prose: String = (0..60).map(|n| format!("Paragraph {n:03} says something worth reading.\n\n")).collect();
    let code: String = (0..120).map(|n| format!("let line_{n:03} = \"{}\";\n", "x".repeat(40))).collect();
    let content = format!("{prose}```rust\n{code}```\n\nThe end.");
    assert!(content.chars().count() > 9000);
    h.publish(&reply("r1", PRIVATE, &content)).await;
    h.publish(&reply("r2", PRIVATE, "barrier")).await;
    let sent = sent(&h.fake, 4).await;
    let (barrier, parts) = sent.split_last().unwrap();
    assert_eq!(barrier.text.as_deref(), Some("barrier"));
    assert!(parts.len() >= 3, "{} parts", parts.len());
    for part in parts {
        // What the limit counts: the text Telegram shows, in UTF-16 units.
        let visible = part.shown().encode_utf16().count();
        assert!(visible <= 4096, "part of {visible} visible units");
        let part = part.text.as_deref().unwrap_or_default();
        assert_eq!(part.matches("<pre>").count(), part.matches("</pre>").count(), "unbalanced fence in {part}");
        assert_eq!(part.matches("<code").count(), part.matches("</code>").count());
    }
    let joined: String = parts.iter().map(|m| m.text.as_deref().unwrap_or_default()).collect();
    let positions: Vec<usize> = ["Paragraph 000", "Paragraph 059", "let line_000", "let line_119", "The end."]
        .iter()
        .map(|needle| joined.find(needle).unwrap_or_else(|| panic!("{needle} missing")))
        .collect();
    assert!(positions.is_sorted(), "parts out of order: {positions:?}");
    assert_eq!(sent[0].reply_to_message_id, None);
}

#[tokio::test]
async fn flood_control_is_waited_out_and_the_message_sent_once() {
    let h = start::<FakeTelegram>().await;
    h.fake.fail_next("sendMessage", Failure::TooManyRequests { retry_after: 1 });
    h.publish(&reply("r1", PRIVATE, "patience")).await;
    let calls = h.fake.wait_for_calls("sendmessage", 2, PATIENCE).await;
    assert!(calls[1].at.duration_since(calls[0].at) >= Duration::from_secs(1));
    h.publish(&reply("r2", PRIVATE, "barrier")).await;
    let sent = sent(&h.fake, 2).await;
    assert_eq!(sent.iter().filter(|m| m.text.as_deref() == Some("patience")).count(), 1);
}

#[tokio::test]
#[ignore = "slow: teloxide waits 10 s on an HTTP 5xx answer"]
async fn server_error_with_real_status() {
    let h = start::<FakeTelegram>().await;
    h.fake.fail_next("sendMessage", Failure::ServerError);
    h.publish(&reply("r1", PRIVATE, "eventually")).await;
    let calls = h.fake.wait_for_calls("sendmessage", 2, Duration::from_secs(20)).await;
    assert!(calls[0].failed && !calls[1].failed);
}

#[tokio::test]
async fn files_follow_the_text_as_photos_documents_or_notices() {
    let h = start::<FakeTelegram>().await;
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
    let sent = sent(&h.fake, 4).await;

    let methods: Vec<&str> = sent.iter().map(|m| m.method.as_str()).collect();
    assert_eq!(methods, ["sendmessage", "sendphoto", "senddocument", "sendmessage"]);
    assert_eq!(sent[0].reply_to_message_id, Some(42));
    assert_eq!(sent[1].reply_to_message_id, None);
    assert_eq!(sent[2].file_name.as_deref(), Some("notes.txt"));
    assert!(sent[3].text.as_deref().unwrap_or_default().contains("file not found: missing.csv"));
}

#[tokio::test]
async fn flood_control_on_a_stream_edit_pauses_the_edits_and_the_reply_still_lands() {
    let h = start_streaming::<FakeTelegram>(200).await;
    h.fake.fail_next("editMessageText", Failure::TooManyRequests { retry_after: 1 });
    h.emit(&crate::chunk::<FakeTelegram>(PRIVATE, "One")).await;
    sent(&h.fake, 1).await;
    for word in [" two", " three", " four", " five", " six", " seven", " eight"] {
        tokio::time::sleep(Duration::from_millis(100)).await;
        h.emit(&crate::chunk::<FakeTelegram>(PRIVATE, word)).await;
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
