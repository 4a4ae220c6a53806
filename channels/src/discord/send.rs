//! Sending and editing text on Discord: Markdown kept as is (Discord renders it), split at
//! 2000 characters without breaking code blocks, files and buttons on the last part.

use serenity::all::{ChannelId, CreateActionRow, CreateAttachment, EditMessage, MessageId, Nonce};
use tokio_util::sync::CancellationToken;

use super::MESSAGE_LIMIT;
use super::rest::Rest;
use super::retry::{RetryPolicy, SendError, with_retry};
use super::target::{Target, allowed_mentions, nonce};
use super::upload::Uploads;
use crate::chunking::split_markdown;

/// Splits `markdown` at the message limit and sends the parts in order; the first references
/// `target.reply_to`. `key` names what is sent (the message answered), for the parts' nonces.
/// Returns the ids of the messages sent.
pub(crate) async fn send_markdown(
    rest: &Rest,
    target: &Target,
    key: &str,
    markdown: &str,
    shutdown: &CancellationToken,
) -> Result<Vec<MessageId>, SendError> {
    let mut sent = Vec::new();
    for (index, text) in split_markdown(markdown, MESSAGE_LIMIT).into_iter().enumerate() {
        let step = Step { text, ..Step::default() };
        sent.push(
            send_part(rest, &RetryPolicy::DEFAULT, target, &step, &nonce(key, index), index == 0, shutdown).await?,
        );
    }
    Ok(sent)
}

/// Sends one part (at most the limit) with its files. Retries carry the same nonce, so a
/// create whose answer was lost is not posted twice.
pub(crate) async fn send_part(
    rest: &Rest,
    retry: &RetryPolicy,
    target: &Target,
    step: &Step,
    nonce: &str,
    first: bool,
    shutdown: &CancellationToken,
) -> Result<MessageId, SendError> {
    let mut message = target.message(&step.text, first).nonce(Nonce::String(nonce.to_owned())).enforce_nonce(true);
    if !step.buttons.is_empty() {
        message = message.components(step.buttons.clone());
    }
    with_retry(retry, "create message", shutdown, || rest.create_message(target.channel, &message, &step.files)).await
}

/// Edits a message into a step's text and buttons (a streamed draft into a reply's first part).
pub(crate) async fn edit_into_step(
    rest: &Rest,
    retry: &RetryPolicy,
    channel: ChannelId,
    message: MessageId,
    step: &Step,
    shutdown: &CancellationToken,
) -> Result<(), SendError> {
    let mut edit = EditMessage::new().content(&step.text).allowed_mentions(allowed_mentions());
    if !step.buttons.is_empty() {
        edit = edit.components(step.buttons.clone());
    }
    with_retry(retry, "edit message", shutdown, || rest.edit_message(channel, message, &edit)).await
}

/// One message of a delivery: a part of the text and the files and buttons it carries.
#[derive(Default)]
pub(crate) struct Step {
    pub text: String,
    pub files: Vec<CreateAttachment>,
    pub buttons: Vec<CreateActionRow>,
}

/// The messages of a reply in order: the text parts, files on the last one, further file
/// batches (beyond ten files) after it; the buttons under the very last message, where the
/// reader ends up.
pub(crate) fn plan_steps(content: &str, uploads: Uploads, buttons: Vec<CreateActionRow>) -> Vec<Step> {
    let mut text = content.trim_end().to_owned();
    if !uploads.lines.is_empty() {
        if !text.trim().is_empty() {
            text.push_str("\n\n");
        }
        text.push_str(&uploads.lines.join("\n"));
    }
    let mut steps: Vec<Step> = if text.trim().is_empty() {
        Vec::new()
    } else {
        split_markdown(&text, MESSAGE_LIMIT).into_iter().map(|text| Step { text, ..Step::default() }).collect()
    };
    let mut batches = uploads.batches.into_iter();
    if let Some(last) = steps.last_mut()
        && let Some(batch) = batches.next()
    {
        last.files = batch;
    }
    steps.extend(batches.map(|files| Step { files, ..Step::default() }));
    if let Some(last) = steps.last_mut() {
        last.buttons = buttons;
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_ride_the_last_part_and_lines_follow_the_text() {
        let uploads = Uploads {
            batches: vec![vec![CreateAttachment::bytes(b"a".to_vec(), "a.txt")]],
            lines: vec!["https://example.com/x.png".into()],
        };
        let steps = plan_steps("Here", uploads, Vec::new());
        assert_eq!(steps.len(), 1);
        assert_eq!(steps[0].text, "Here\n\nhttps://example.com/x.png");
        assert_eq!(steps[0].files.len(), 1);
        let only_files =
            plan_steps("", Uploads { batches: vec![Vec::new(), Vec::new()], lines: Vec::new() }, Vec::new());
        assert_eq!(only_files.len(), 2);
    }

    #[test]
    fn buttons_ride_the_last_part_of_a_split_text() {
        let buttons = crate::discord::components::action_rows(&[vec![crate::contract::Button::new("Approve", "pa:X")]]);
        let steps = plan_steps(&"word ".repeat(1000), Uploads::default(), buttons);
        assert_eq!(steps.len(), 3);
        assert!(steps[..2].iter().all(|step| step.buttons.is_empty()));
        assert_eq!(steps[2].buttons.len(), 1);
    }
}
