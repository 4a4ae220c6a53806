//! The fake Telegram server driven by teloxide's real client: proves it speaks the wire protocol.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchboard_testkit::fake_telegram::{Failure, FakeTelegram, updates};
use teloxide::net::Download;
use teloxide::prelude::*;
use teloxide::types::{
    FileId, InputFile, MessageEntityKind, MessageId, ParseMode, ReplyParameters, ThreadId, UpdateKind,
};
use teloxide::{ApiError, RequestError};

const WAIT: Duration = Duration::from_secs(5);

fn bot(fake: &FakeTelegram) -> Bot {
    let url = fake.api_url().parse().expect("fake api url");
    Bot::new(FakeTelegram::TOKEN).set_api_url(url)
}

fn api_error(result: Result<impl std::fmt::Debug, RequestError>) -> ApiError {
    match result {
        Err(RequestError::Api(error)) => error,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Parses an update the way teloxide does (from text: `Update` cannot be read from a `Value`).
fn as_message(message: Value) -> Message {
    let text = json!({ "update_id": 1, "message": message }).to_string();
    let update: Update = serde_json::from_str(&text).expect("an Update");
    match update.kind {
        UpdateKind::Message(message) => message,
        other => panic!("expected a message update, got {other:?}"),
    }
}

#[tokio::test]
async fn get_me_reports_the_bot() {
    let fake = FakeTelegram::start().await;
    let me = bot(&fake).get_me().await.expect("getMe");
    assert_eq!(me.id.0 as i64, fake.bot().id);
    assert_eq!(me.username(), "switchboard_test_bot");
    assert_eq!(me.first_name, "Switchboard");
    assert!(me.is_bot);
    assert_eq!(fake.calls_to("GetMe").len(), 1);
}

#[tokio::test]
async fn confirmed_updates_are_never_served_again() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    let first = fake.push_message(updates::private_text(7, "ann", 1, "one"));
    let second = fake.push_message(updates::private_text(7, "ann", 2, "two"));
    assert_eq!((first, second, fake.pending_updates()), (1, 2, 2));

    let batch = bot.get_updates().await.expect("getUpdates");
    assert_eq!(batch.iter().map(|update| update.id.0).collect::<Vec<_>>(), [1, 2]);
    match &batch[1].kind {
        UpdateKind::Message(message) => assert_eq!(message.text(), Some("two")),
        other => panic!("expected a message, got {other:?}"),
    }
    let batch = bot.get_updates().offset(2).limit(1).await.expect("getUpdates offset 2");
    assert_eq!(batch.iter().map(|update| update.id.0).collect::<Vec<_>>(), [2]);
    assert_eq!((fake.confirmed_offset(), fake.pending_updates()), (2, 1));

    let batch = bot.get_updates().offset(3).await.expect("getUpdates offset 3");
    assert!(batch.is_empty());
    let batch = bot.get_updates().offset(1).await.expect("getUpdates with an older offset");
    assert!(batch.is_empty(), "confirmed updates came back: {batch:?}");
    assert_eq!((fake.confirmed_offset(), fake.pending_updates()), (3, 0));
}

#[tokio::test]
async fn long_poll_returns_when_an_update_is_pushed() {
    let fake = FakeTelegram::start().await;
    let poll = tokio::spawn({
        let bot = bot(&fake);
        async move { bot.get_updates().timeout(10).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!poll.is_finished(), "getUpdates answered before anything was pushed");
    let started = Instant::now();
    fake.push_message(updates::group_text(-1001, 7, "ann", 5, "hello"));
    let batch = poll.await.expect("poll task").expect("getUpdates");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(batch.len(), 1);

    let started = Instant::now();
    let empty = bot(&fake).get_updates().offset(2).timeout(1).await.expect("getUpdates");
    assert!(empty.is_empty());
    assert!(started.elapsed() >= Duration::from_millis(900), "timeout 1 returned after {:?}", started.elapsed());
}

#[tokio::test]
async fn send_message_records_html_reply_and_thread() {
    let fake = FakeTelegram::start().await;
    fake.push_message(updates::topic_text(-1005, 77, 7, "ann", 10, "question"));
    let sent = bot(&fake)
        .send_message(ChatId(-1005), "<b>answer</b> &amp; more")
        .parse_mode(ParseMode::Html)
        .reply_parameters(ReplyParameters::new(MessageId(10)))
        .message_thread_id(ThreadId(MessageId(77)))
        .await
        .expect("sendMessage");
    assert_eq!(sent.id, MessageId(1000));
    assert_eq!(sent.text(), Some("answer & more"));
    assert_eq!(sent.thread_id, Some(ThreadId(MessageId(77))));
    assert_eq!(sent.from.as_ref().map(|from| from.id.0), Some(4242));
    assert_eq!(sent.reply_to_message().map(|replied| replied.id), Some(MessageId(10)));
    assert!(sent.chat.is_supergroup());

    let recorded = fake.sent_messages();
    assert_eq!(recorded.len(), 1);
    let message = &recorded[0];
    assert_eq!((message.method.as_str(), message.message_id, message.chat_id), ("sendmessage", 1000, -1005));
    assert_eq!(message.text.as_deref(), Some("<b>answer</b> &amp; more"));
    assert_eq!(message.parse_mode.as_deref(), Some("HTML"));
    assert_eq!((message.message_thread_id, message.reply_to_message_id), (Some(77), Some(10)));
    let next = bot(&fake).send_message(ChatId(7), "again").await.expect("second sendMessage");
    assert_eq!(next.id, MessageId(1001));
    assert!(next.chat.is_private());
}

#[tokio::test]
async fn queued_429_surfaces_as_retry_after_then_succeeds() {
    let fake = FakeTelegram::start().await;
    fake.fail_next("sendMessage", Failure::TooManyRequests { retry_after: 3 });
    let bot = bot(&fake);
    match bot.send_message(ChatId(7), "hi").await {
        Err(RequestError::RetryAfter(seconds)) => assert_eq!(seconds.duration(), Duration::from_secs(3)),
        other => panic!("expected RetryAfter, got {other:?}"),
    }
    bot.send_message(ChatId(7), "hi").await.expect("the retry succeeds");
    let calls = fake.calls_to("sendmessage");
    assert_eq!(calls.iter().map(|call| call.failed).collect::<Vec<_>>(), [true, false]);
    assert_eq!(fake.sent_messages().len(), 1);
}

#[tokio::test]
async fn conflict_surfaces_as_terminated_by_other_get_updates() {
    let fake = FakeTelegram::start().await;
    fake.push_message(updates::private_text(7, "ann", 1, "kept"));
    fake.fail_next("getUpdates", Failure::Conflict);
    let error = api_error(bot(&fake).get_updates().offset(5).await);
    assert_eq!(error, ApiError::TerminatedByOtherGetUpdates);
    assert_eq!((fake.confirmed_offset(), fake.pending_updates()), (0, 1), "a failed poll confirms nothing");
}

#[tokio::test]
async fn unparsable_html_surfaces_as_cant_parse_entities() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    fake.fail_next("sendmessage", Failure::CantParseEntities);
    let error = api_error(bot.send_message(ChatId(7), "<b>x</b>").parse_mode(ParseMode::Html).await);
    assert!(matches!(error, ApiError::CantParseEntities(_)), "{error:?}");

    fake.reject_html_containing("<foo>");
    let error = api_error(bot.send_message(ChatId(7), "a <foo> b").parse_mode(ParseMode::Html).await);
    assert!(matches!(error, ApiError::CantParseEntities(_)), "{error:?}");
    bot.send_message(ChatId(7), "a <foo> b").await.expect("plain text is not parsed");
    let sent = bot.send_message(ChatId(7), "fine").parse_mode(ParseMode::Html).await.expect("other HTML");

    let error = api_error(bot.edit_message_text(ChatId(7), sent.id, "<foo>").parse_mode(ParseMode::Html).await);
    assert!(matches!(error, ApiError::CantParseEntities(_)), "{error:?}");
    assert_eq!(fake.sent_messages().len(), 2);
}

#[tokio::test]
async fn editing_with_the_same_text_twice_is_not_modified() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    let sent = bot.send_message(ChatId(7), "draft").await.expect("sendMessage");
    let edited = bot.edit_message_text(ChatId(7), sent.id, "final").await.expect("first edit");
    assert_eq!((edited.id, edited.text()), (sent.id, Some("final")));
    let error = api_error(bot.edit_message_text(ChatId(7), sent.id, "final").await);
    assert_eq!(error, ApiError::MessageNotModified);
    let error = api_error(bot.edit_message_text(ChatId(7), MessageId(999), "x").await);
    assert_eq!(error, ApiError::MessageToEditNotFound);
    assert_eq!(fake.edits().len(), 1);
    assert_eq!(fake.edits()[0].params["text"], "final");
    fake.fail_next("editMessageText", Failure::NotModified);
    let error = api_error(bot.edit_message_text(ChatId(7), sent.id, "new").await);
    assert_eq!(error, ApiError::MessageNotModified);
}

#[tokio::test]
async fn send_document_records_the_uploaded_file() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    let file = InputFile::memory(b"report body".to_vec()).file_name("report.txt");
    let sent = bot
        .send_document(ChatId(-1009), file)
        .caption("the report")
        .message_thread_id(ThreadId(MessageId(3)))
        .await
        .expect("sendDocument");
    let document = sent.document().expect("a document");
    assert_eq!(document.file_name.as_deref(), Some("report.txt"));
    assert_eq!(sent.caption(), Some("the report"));

    let recorded = &fake.sent_messages()[0];
    assert_eq!(recorded.method, "senddocument");
    assert_eq!(recorded.file_name.as_deref(), Some("report.txt"));
    assert_eq!((recorded.text.as_deref(), recorded.message_thread_id), (Some("the report"), Some(3)));
    let call = &fake.calls_to("sendDocument")[0];
    assert_eq!(call.params["document"], json!({ "file_name": "report.txt", "bytes_len": 11 }));
    assert_eq!(call.params["chat_id"], "-1009");

    let file = bot.get_file(document.file.id.clone()).await.expect("the upload is downloadable");
    let mut bytes = Vec::new();
    bot.download_file(&file.path, &mut bytes).await.expect("download");
    assert_eq!(bytes, b"report body");
}

#[tokio::test]
async fn get_file_and_download_return_the_bytes() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    let path = fake.add_file("voice-1", b"OggS fake audio".to_vec());
    let file = bot.get_file(FileId("voice-1".into())).await.expect("getFile");
    assert_eq!((file.path.as_str(), file.meta.size), (path.as_str(), 15));
    let mut bytes = Vec::new();
    bot.download_file(&file.path, &mut bytes).await.expect("download");
    assert_eq!(bytes, b"OggS fake audio");
    assert_eq!(fake.calls_to("download_file").len(), 1);

    let error = api_error(bot.get_file(FileId("nope".into())).await);
    assert_eq!(error, ApiError::FileIdInvalid);
    let missing = bot.download_file("files/missing", &mut Vec::new()).await;
    assert!(missing.is_err(), "an unknown path is a 404");
}

#[tokio::test]
async fn builders_deserialize_as_teloxide_updates() {
    let private = as_message(updates::private_text(7, "ann", 1, "hi"));
    assert!(private.chat.is_private());
    assert_eq!((private.from.as_ref().map(|user| user.id.0), private.text()), (Some(7), Some("hi")));

    let group = as_message(updates::group_text(-1001, 7, "ann", 2, "hey"));
    assert!(group.chat.is_supergroup() && !group.chat.is_group());

    let topic = as_message(updates::topic_text(-1002, 42, 7, "ann", 3, "in topic"));
    assert_eq!(topic.thread_id, Some(ThreadId(MessageId(42))));
    assert!(topic.is_topic_message);
    assert!(topic.reply_to_message().is_some_and(|root| root.from.as_ref().is_some_and(|from| from.id.0 == 7)));
}

#[tokio::test]
async fn entity_builders_deserialize() {
    let text = "🎉 @switchboard_test_bot hello";
    let mention = as_message(updates::mention_of(updates::group_text(-1, 7, "ann", 1, text), "switchboard_test_bot"));
    let entities = mention.parse_entities().expect("entities");
    assert_eq!(entities[0].kind(), &MessageEntityKind::Mention);
    assert_eq!(entities[0].text(), "@switchboard_test_bot");

    let command =
        as_message(updates::bot_command(updates::group_text(-1, 7, "ann", 2, "/reset@switchboard_test_bot now")));
    let entities = command.parse_entities().expect("entities");
    assert_eq!(
        (entities[0].kind(), entities[0].text()),
        (&MessageEntityKind::BotCommand, "/reset@switchboard_test_bot")
    );

    let named = as_message(updates::text_mention_of(
        updates::group_text(-1, 7, "ann", 3, "Switchboard, hi"),
        4242,
        "Switchboard",
        0,
        11,
    ));
    match named.entities().expect("entities")[0].kind {
        MessageEntityKind::TextMention { ref user } => assert_eq!(user.id.0, 4242),
        ref other => panic!("expected a text mention, got {other:?}"),
    }

    let bold = as_message(updates::with_entities(
        updates::private_text(7, "ann", 4, "bold"),
        json!([{ "type": "bold", "offset": 0, "length": 4 }]),
    ));
    assert_eq!(bold.entities().expect("entities")[0].kind, MessageEntityKind::Bold);
}

#[tokio::test]
async fn reply_and_media_builders_deserialize() {
    let replied = updates::from_bot(-1001, 1000, "earlier answer");
    let reply = as_message(updates::reply_to(updates::group_text(-1001, 7, "ann", 9, "and?"), replied));
    let parent = reply.reply_to_message().expect("a reply");
    assert_eq!(parent.from.as_ref().map(|from| from.id.0), Some(4242));

    let photo = as_message(updates::with_caption(
        updates::photo(updates::private_text(7, "ann", 10, ""), "ph-1", 5000),
        "look",
    ));
    let sizes = photo.photo().expect("photo sizes");
    assert_eq!((sizes.last().map(|size| size.file.id.0.as_str()), photo.caption()), (Some("ph-1"), Some("look")));

    let document =
        updates::document(updates::private_text(7, "ann", 11, "the file"), "doc-1", "a.pdf", "application/pdf", 9);
    let document = as_message(document);
    let file = document.document().expect("a document");
    assert_eq!((file.file.id.0.as_str(), file.file_name.as_deref()), ("doc-1", Some("a.pdf")));
    assert_eq!(document.caption(), Some("the file"));

    let voice = as_message(updates::voice(updates::private_text(7, "ann", 12, ""), "vo-1", 4, 3000));
    let file = voice.voice().expect("a voice note");
    assert_eq!((file.file.id.0.as_str(), file.duration.seconds()), ("vo-1", 4));
}

#[tokio::test]
async fn wrong_token_is_unauthorized() {
    let fake = FakeTelegram::start().await;
    let stranger = Bot::new("999:WRONG").set_api_url(fake.api_url().parse().expect("url"));
    assert_eq!(api_error(stranger.get_me().await), ApiError::InvalidToken);
    let call = &fake.calls()[0];
    assert!(call.failed && call.method == "getme");
}

#[tokio::test]
async fn raw_wire_shapes_for_webhook_unknown_methods_and_429() {
    let fake = FakeTelegram::start().await;
    let http = reqwest::Client::new();
    let url = |method: &str| format!("{}/bot{}/{method}", fake.api_url(), FakeTelegram::TOKEN);
    let post = |method: &str, body: Value| http.post(url(method)).json(&body).send();

    let info: Value = post("getWebhookInfo", json!({})).await.expect("post").json().await.expect("json");
    assert_eq!(
        info,
        json!({ "ok": true, "result": { "url": "", "has_custom_certificate": false, "pending_update_count": 0 } })
    );

    let unknown = post("frobnicate", json!({})).await.expect("post");
    assert_eq!(unknown.status(), 404);
    let body: Value = unknown.json().await.expect("json");
    assert_eq!(body, json!({ "ok": false, "error_code": 404, "description": "Not Found" }));

    fake.fail_next("sendchataction", Failure::TooManyRequests { retry_after: 7 });
    let limited = post("sendChatAction", json!({ "chat_id": 1, "action": "typing" })).await.expect("post");
    assert_eq!(limited.status(), 429);
    let body: Value = limited.json().await.expect("json");
    assert_eq!(body["description"], "Too Many Requests: retry after 7");
    assert_eq!(body["parameters"], json!({ "retry_after": 7 }));

    fake.fail_next(
        "getme",
        Failure::Status { code: 403, description: "Forbidden: bot was blocked by the user".into() },
    );
    assert_eq!(api_error(bot(&fake).get_me().await), ApiError::BotBlocked);
}

#[tokio::test]
async fn wait_for_calls_returns_once_the_calls_arrive() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _ = bot.send_chat_action(ChatId(7), teloxide::types::ChatAction::Typing).await;
    });
    let calls = fake.wait_for_calls("sendChatAction", 1, WAIT).await;
    assert_eq!(calls[0].params["action"], "typing");
}

#[tokio::test]
#[should_panic(expected = "wanted 1 `sendmessage` call(s)")]
async fn wait_for_calls_panics_with_a_listing() {
    let fake = FakeTelegram::start().await;
    bot(&fake).get_me().await.expect("getMe");
    fake.wait_for_calls("sendmessage", 1, Duration::from_millis(100)).await;
}

#[tokio::test]
async fn teloxide_polling_listener_receives_pushed_updates() {
    use futures_util::StreamExt;
    use teloxide::update_listeners::{AsUpdateStream, Polling};

    let fake = FakeTelegram::start().await;
    let mut listener = Polling::builder(bot(&fake)).timeout(Duration::from_secs(2)).build();
    let stream = listener.as_stream();
    tokio::pin!(stream);
    fake.push_message(updates::private_text(7, "ann", 1, "first"));
    let first = tokio::time::timeout(WAIT, stream.next()).await.expect("first update in time");
    assert_eq!(first.expect("an item").expect("an update").id.0, 1);
    fake.push_message(updates::private_text(7, "ann", 2, "second"));
    let second = tokio::time::timeout(WAIT, stream.next()).await.expect("second update in time");
    assert_eq!(second.expect("an item").expect("an update").id.0, 2);
    assert!(fake.confirmed_offset() >= 2, "polling confirmed update 1");
    let poll = &fake.calls_to("getupdates")[0];
    assert_eq!(poll.params["timeout"], 2);
}

#[tokio::test]
async fn send_photo_and_voice_uploads_come_back_as_media() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    let photo = InputFile::memory(vec![0xFF, 0xD8, 0xFF]).file_name("chart.png");
    let sent =
        bot.send_photo(ChatId(7), photo).caption("<i>chart</i>").parse_mode(ParseMode::Html).await.expect("sendPhoto");
    assert_eq!((sent.photo().map(<[_]>::len), sent.caption()), (Some(1), Some("chart")));
    let voice = InputFile::memory(b"OggS".to_vec()).file_name("reply.ogg");
    let sent = bot.send_voice(ChatId(7), voice).await.expect("sendVoice");
    assert_eq!(sent.voice().map(|voice| voice.file.size), Some(4));

    let recorded = fake.sent_messages();
    let names: Vec<_> = recorded.iter().map(|sent| (sent.method.as_str(), sent.file_name.as_deref())).collect();
    assert_eq!(names, [("sendphoto", Some("chart.png")), ("sendvoice", Some("reply.ogg"))]);
    assert_eq!(recorded[0].text.as_deref(), Some("<i>chart</i>"));
}
