//! Sending and editing text on Telegram: Markdown rendered to Telegram HTML and split to the
//! message limit, with a plain-text fallback when Telegram cannot parse the HTML.

use teloxide::prelude::*;
use teloxide::types::{InlineKeyboardMarkup, MessageId, ParseMode};
use teloxide::{ApiError, RequestError};
use tokio_util::sync::CancellationToken;

use super::format::{MESSAGE_LIMIT, Part, render_parts};
use super::retry::with_retry;
use super::target::Target;

/// Renders `markdown` and sends it as one or more messages in order; the first quotes
/// `target.reply_to`. Returns the ids of the messages sent.
pub async fn send_markdown(
    bot: &Bot,
    target: &Target,
    markdown: &str,
    shutdown: &CancellationToken,
) -> Result<Vec<MessageId>, RequestError> {
    let mut sent = Vec::new();
    for (index, part) in render_parts(markdown, MESSAGE_LIMIT).iter().enumerate() {
        sent.push(send_part(bot, target, part, None, index == 0, shutdown).await?);
    }
    Ok(sent)
}

/// Sends one rendered part as HTML, with `keyboard` under it; if Telegram cannot parse the
/// HTML, sends its plain text instead.
pub(crate) async fn send_part(
    bot: &Bot,
    target: &Target,
    part: &Part,
    keyboard: Option<&InlineKeyboardMarkup>,
    first: bool,
    shutdown: &CancellationToken,
) -> Result<MessageId, RequestError> {
    let html = Text { text: &part.html, parse_mode: Some(ParseMode::Html), keyboard };
    match send_text(bot, target, html, first, shutdown).await {
        Err(RequestError::Api(ApiError::CantParseEntities(reason))) => {
            tracing::warn!(chat = target.chat.0, %reason, "Telegram refused the HTML; sending plain text");
            send_text(bot, target, Text { text: &part.plain, parse_mode: None, keyboard }, first, shutdown).await
        }
        other => other,
    }
}

/// Sends plain text as one message (it must fit the limit).
pub(crate) async fn send_plain(
    bot: &Bot,
    target: &Target,
    text: &str,
    first: bool,
    shutdown: &CancellationToken,
) -> Result<MessageId, RequestError> {
    send_text(bot, target, Text { text, parse_mode: None, keyboard: None }, first, shutdown).await
}

/// A message's text, how Telegram should read it, and the buttons under it.
#[derive(Clone, Copy)]
pub(crate) struct Text<'a> {
    pub text: &'a str,
    pub parse_mode: Option<ParseMode>,
    pub keyboard: Option<&'a InlineKeyboardMarkup>,
}

async fn send_text(
    bot: &Bot,
    target: &Target,
    text: Text<'_>,
    first: bool,
    shutdown: &CancellationToken,
) -> Result<MessageId, RequestError> {
    let sent = with_retry("sendMessage", shutdown, || {
        let mut request = bot.send_message(target.chat, text.text);
        if let Some(mode) = text.parse_mode {
            request = request.parse_mode(mode);
        }
        if let Some(keyboard) = text.keyboard {
            request = request.reply_markup(keyboard.clone());
        }
        if let Some(thread) = target.thread {
            request = request.message_thread_id(thread);
        }
        if let Some(reply) = target.reply_parameters(first) {
            request = request.reply_parameters(reply);
        }
        request.send()
    })
    .await?;
    Ok(sent.id)
}

/// Edits a message into a rendered part with `keyboard` under it (none: the message's buttons
/// go), with the same plain-text fallback as [`send_part`].
pub(crate) async fn edit_part(
    bot: &Bot,
    chat: ChatId,
    message: MessageId,
    part: &Part,
    keyboard: Option<&InlineKeyboardMarkup>,
    shutdown: &CancellationToken,
) -> Result<(), RequestError> {
    let html = Text { text: &part.html, parse_mode: Some(ParseMode::Html), keyboard };
    let result = match edit_text(bot, chat, message, html, shutdown).await {
        Err(RequestError::Api(ApiError::CantParseEntities(reason))) => {
            tracing::warn!(chat = chat.0, %reason, "Telegram refused the HTML of an edit; using plain text");
            edit_text(bot, chat, message, Text { text: &part.plain, parse_mode: None, keyboard }, shutdown).await
        }
        other => other,
    };
    match result {
        Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => Ok(()),
        Err(err) => Err(err),
    }
}

pub(crate) async fn edit_text(
    bot: &Bot,
    chat: ChatId,
    message: MessageId,
    text: Text<'_>,
    shutdown: &CancellationToken,
) -> Result<(), RequestError> {
    let edited = with_retry("editMessageText", shutdown, || {
        let mut request = bot.edit_message_text(chat, message, text.text);
        if let Some(mode) = text.parse_mode {
            request = request.parse_mode(mode);
        }
        if let Some(keyboard) = text.keyboard {
            request = request.reply_markup(keyboard.clone());
        }
        request.send()
    });
    edited.await.map(drop)
}
