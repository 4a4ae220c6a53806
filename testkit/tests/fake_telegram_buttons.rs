//! Inline keyboards and callback queries of the fake Telegram server, driven by teloxide's real
//! client: the keyboard round-trips, a press arrives as teloxide's `CallbackQuery`, and the
//! answer rules (once, within the limit) hold.

use std::time::Duration;

use futures_util::StreamExt;
use switchboard_testkit::fake_telegram::{FakeTelegram, InlineButton, updates};
use teloxide::prelude::*;
use teloxide::types::{InlineKeyboardButton, InlineKeyboardMarkup, MaybeInaccessibleMessage, UpdateKind};
use teloxide::update_listeners::{AsUpdateStream, Polling};
use teloxide::{ApiError, RequestError};

const WAIT: Duration = Duration::from_secs(5);
const CHAT: i64 = 7;

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

fn approve_deny() -> InlineKeyboardMarkup {
    InlineKeyboardMarkup::new([[
        InlineKeyboardButton::callback("Approve", "approve:42"),
        InlineKeyboardButton::callback("Deny", "deny:42"),
    ]])
}

fn button(text: &str, data: &str) -> InlineButton {
    InlineButton { text: text.to_owned(), callback_data: Some(data.to_owned()), url: None }
}

/// Sends "Run it?" with Approve/Deny buttons; returns the message.
async fn ask(bot: &Bot) -> Message {
    bot.send_message(ChatId(CHAT), "Run it?").reply_markup(approve_deny()).await.expect("sendMessage with buttons")
}

/// The callback query of the next update.
async fn next_callback_query(bot: &Bot, offset: i32) -> CallbackQuery {
    let updates = bot.get_updates().offset(offset).await.expect("getUpdates");
    match updates.into_iter().next().map(|update| update.kind) {
        Some(UpdateKind::CallbackQuery(query)) => query,
        other => panic!("expected a callback query, got {other:?}"),
    }
}

#[tokio::test]
async fn an_inline_keyboard_comes_back_and_is_recorded() {
    let fake = FakeTelegram::start().await;
    let sent = ask(&bot(&fake)).await;
    assert_eq!(sent.reply_markup(), Some(&approve_deny()));
    let expected = vec![vec![button("Approve", "approve:42"), button("Deny", "deny:42")]];
    assert_eq!(fake.buttons(CHAT, sent.id.0.into()), expected);
    let recorded = fake.sent_messages();
    assert_eq!(
        recorded[0].reply_markup.as_ref().map(|markup| markup["inline_keyboard"][0][1]["text"].clone()),
        Some("Deny".into())
    );
}

#[tokio::test]
async fn callback_data_must_be_1_to_64_bytes() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    let long = InlineKeyboardMarkup::new([[InlineKeyboardButton::callback("x", "d".repeat(65))]]);
    let error = api_error(bot.send_message(ChatId(CHAT), "x").reply_markup(long).await);
    assert_eq!(error, ApiError::ButtonDataInvalid);
    let empty = InlineKeyboardMarkup::new([[InlineKeyboardButton::callback("x", "")]]);
    let error = api_error(bot.send_message(ChatId(CHAT), "x").reply_markup(empty).await);
    assert_eq!(error, ApiError::ButtonDataInvalid);
    let exact = InlineKeyboardMarkup::new([[InlineKeyboardButton::callback("x", "d".repeat(64))]]);
    bot.send_message(ChatId(CHAT), "x").reply_markup(exact).await.expect("64 bytes are fine");
    assert_eq!(fake.sent_messages().len(), 1);
}

#[tokio::test]
async fn a_press_arrives_as_a_teloxide_callback_query_and_is_answered_once() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    let sent = ask(&bot).await;
    let query_id = fake.press_button(CHAT, sent.id.0.into(), updates::user(CHAT, "ann"), "approve:42");
    let query = next_callback_query(&bot, 0).await;
    assert_eq!((query.id.0.as_str(), query.data.as_deref()), (query_id.as_str(), Some("approve:42")));
    assert_eq!((query.from.id.0, query.from.username.as_deref()), (CHAT as u64, Some("ann")));
    match &query.message {
        Some(MaybeInaccessibleMessage::Regular(message)) => {
            assert_eq!((message.id, message.reply_markup()), (sent.id, Some(&approve_deny())));
        }
        other => panic!("expected the bot's message, got {other:?}"),
    }
    assert!(!query.chat_instance.is_empty());
    assert_eq!(fake.unanswered_callback_queries(), std::slice::from_ref(&query_id));

    bot.answer_callback_query(query.id.clone()).text("Approved").await.expect("answerCallbackQuery");
    fake.assert_callback_queries_answered();
    let answers = fake.callback_answers();
    assert_eq!((answers[0].query_id.as_str(), answers[0].text.as_deref()), (query_id.as_str(), Some("Approved")));
    // A query is answered once; the real server's text spells "query ID", which teloxide 0.17
    // does not map to `InvalidQueryId`.
    let error = api_error(bot.answer_callback_query(query.id).await);
    assert!(matches!(&error, ApiError::Unknown(text) if text.contains("query is too old")), "{error:?}");
}

#[tokio::test]
async fn a_late_or_unknown_answer_is_too_old_and_the_press_stays_unanswered() {
    let fake = FakeTelegram::start().await;
    fake.set_callback_answer_limit(Duration::from_millis(50));
    let bot = bot(&fake);
    let sent = ask(&bot).await;
    let query_id = fake.press_button(CHAT, sent.id.0.into(), updates::user(CHAT, "ann"), "deny:42");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let error = api_error(bot.answer_callback_query(query_id.clone().into()).await);
    assert!(matches!(&error, ApiError::Unknown(text) if text.contains("query is too old")), "{error:?}");
    let error = api_error(bot.answer_callback_query("no-such-query".to_owned().into()).await);
    assert!(matches!(&error, ApiError::Unknown(_)), "{error:?}");
    assert_eq!(fake.unanswered_callback_queries(), [query_id]);
    assert!(fake.callback_answers().is_empty());
    let check = std::panic::catch_unwind(|| fake.assert_callback_queries_answered());
    assert!(check.is_err(), "an unanswered press must fail the check");
}

#[tokio::test]
async fn edits_replace_or_remove_the_keyboard() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    let sent = ask(&bot).await;
    let id = i64::from(sent.id.0);
    let done = InlineKeyboardMarkup::new([[InlineKeyboardButton::callback("Undo", "undo:42")]]);
    let edited = bot.edit_message_reply_markup(ChatId(CHAT), sent.id).reply_markup(done.clone()).await.expect("edit");
    assert_eq!(edited.reply_markup(), Some(&done));
    assert_eq!(fake.buttons(CHAT, id), vec![vec![button("Undo", "undo:42")]]);
    let error = api_error(bot.edit_message_reply_markup(ChatId(CHAT), sent.id).reply_markup(done.clone()).await);
    assert_eq!(error, ApiError::MessageNotModified);

    let edited = bot.edit_message_text(ChatId(CHAT), sent.id, "Approved").reply_markup(done).await.expect("edit text");
    assert_eq!((edited.text(), fake.buttons(CHAT, id).len()), (Some("Approved"), 1));
    // Telegram drops the keyboard of a text edit that does not repeat it.
    let edited = bot.edit_message_text(ChatId(CHAT), sent.id, "Approved.").await.expect("edit text alone");
    assert_eq!((edited.reply_markup(), fake.buttons(CHAT, id)), (None, Vec::new()));

    bot.edit_message_reply_markup(ChatId(CHAT), sent.id).reply_markup(approve_deny()).await.expect("buttons back");
    let removed = bot.edit_message_reply_markup(ChatId(CHAT), sent.id).await.expect("remove the keyboard");
    assert_eq!((removed.reply_markup(), fake.buttons(CHAT, id)), (None, Vec::new()));
}

#[tokio::test]
#[should_panic(expected = "no button")]
async fn pressing_a_button_the_message_lacks_panics() {
    let fake = FakeTelegram::start().await;
    let sent = ask(&bot(&fake)).await;
    fake.press_button(CHAT, sent.id.0.into(), updates::user(CHAT, "ann"), "maybe:42");
}

/// A tiny teloxide bot: long polling, and every callback query answered with its data.
#[tokio::test]
async fn a_polling_teloxide_bot_answers_presses() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    let sent = ask(&bot).await;
    let worker = tokio::spawn({
        let bot = bot.clone();
        async move {
            let mut listener = Polling::builder(bot.clone()).timeout(Duration::from_secs(2)).build();
            let stream = listener.as_stream();
            tokio::pin!(stream);
            while let Some(Ok(update)) = stream.next().await {
                if let UpdateKind::CallbackQuery(query) = update.kind {
                    let text = query.data.clone().unwrap_or_default();
                    bot.answer_callback_query(query.id).text(text).await.expect("answer in time");
                }
            }
        }
    });
    let from = updates::user(11, "bob");
    let first = fake.press_button(CHAT, sent.id.0.into(), from.clone(), "approve:42");
    let second = fake.press_button(CHAT, sent.id.0.into(), from, "deny:42");
    fake.wait_for_calls("answerCallbackQuery", 2, WAIT).await;
    worker.abort();
    fake.assert_callback_queries_answered();
    let answers: Vec<_> = fake.callback_answers().into_iter().map(|answer| (answer.query_id, answer.text)).collect();
    assert_eq!(answers, [(first, Some("approve:42".to_owned())), (second, Some("deny:42".to_owned()))]);
}
