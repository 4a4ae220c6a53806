//! Sending and editing text on Telegram: Markdown rendered to Telegram HTML and split to the
//! message limit, with a plain-text fallback when Telegram cannot parse the HTML.

use teloxide::prelude::*;
use teloxide::types::{MessageId, ParseMode};
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
        sent.push(send_part(bot, target, part, index == 0, shutdown).await?);
    }
    Ok(sent)
}

/// Sends one rendered part as HTML; if Telegram cannot parse it, sends its plain text instead.
pub(crate) async fn send_part(
    bot: &Bot,
    target: &Target,
    part: &Part,
    first: bool,
    shutdown: &CancellationToken,
) -> Result<MessageId, RequestError> {
    match send_text(bot, target, &part.html, Some(ParseMode::Html), first, shutdown).await {
        Err(RequestError::Api(ApiError::CantParseEntities(reason))) => {
            tracing::warn!(chat = target.chat.0, %reason, "Telegram refused the HTML; sending plain text");
            send_text(bot, target, &part.plain, None, first, shutdown).await
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
    send_text(bot, target, text, None, first, shutdown).await
}

async fn send_text(
    bot: &Bot,
    target: &Target,
    text: &str,
    parse_mode: Option<ParseMode>,
    first: bool,
    shutdown: &CancellationToken,
) -> Result<MessageId, RequestError> {
    let sent = with_retry("sendMessage", shutdown, || {
        let mut request = bot.send_message(target.chat, text);
        if let Some(mode) = parse_mode {
            request = request.parse_mode(mode);
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

/// Edits a message into a rendered part, with the same plain-text fallback as [`send_part`].
pub(crate) async fn edit_part(
    bot: &Bot,
    chat: ChatId,
    message: MessageId,
    part: &Part,
    shutdown: &CancellationToken,
) -> Result<(), RequestError> {
    let result = match edit_text(bot, chat, message, &part.html, Some(ParseMode::Html), shutdown).await {
        Err(RequestError::Api(ApiError::CantParseEntities(reason))) => {
            tracing::warn!(chat = chat.0, %reason, "Telegram refused the HTML of an edit; using plain text");
            edit_text(bot, chat, message, &part.plain, None, shutdown).await
        }
        other => other,
    };
    match result {
        Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => Ok(()),
        Err(err) => Err(err),
    }
}

async fn edit_text(
    bot: &Bot,
    chat: ChatId,
    message: MessageId,
    text: &str,
    parse_mode: Option<ParseMode>,
    shutdown: &CancellationToken,
) -> Result<(), RequestError> {
    let edited = with_retry("editMessageText", shutdown, || {
        let mut request = bot.edit_message_text(chat, message, text);
        if let Some(mode) = parse_mode {
            request = request.parse_mode(mode);
        }
        request.send()
    });
    edited.await.map(drop)
}
