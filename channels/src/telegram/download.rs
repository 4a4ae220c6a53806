//! Inbound media: photos, documents and voice notes are downloaded into the media directory
//! (which lives in the agent's workspace, so its file tools can read them) and passed on as
//! [`Media`] with a text marker the model can see.

use std::path::{Path, PathBuf};

use teloxide::Bot;
use teloxide::net::Download;
use teloxide::prelude::Requester;
use teloxide::types::FileId;
use tokio_util::sync::CancellationToken;

use super::inbound::{Attachment, Incoming};
use super::retry::{describe, with_retry};
use crate::contract::Media;
use crate::delivery::download::{DownloadError, save_stream};
use crate::media_files::saved_file_name;

const PLATFORM: &str = "Telegram";

/// Downloads every attachment of `msg` (those within `max_bytes`) into `dir/<chat>/` and
/// returns the media, and marker lines for the message text about those that could not be saved. A failed download becomes a
/// marker saying so: the message still reaches the agent.
pub(crate) async fn fetch_attachments(
    bot: &Bot,
    msg: &Incoming,
    dir: &Path,
    max_bytes: u64,
    shutdown: &CancellationToken,
) -> (Vec<Media>, Vec<String>) {
    let mut media = Vec::new();
    let mut markers = Vec::new();
    for (index, attachment) in msg.attachments.iter().enumerate() {
        let target = dir.join(msg.chat_id.to_string()).join(file_name(msg.message_id, index, attachment));
        match fetch(bot, attachment, &target, max_bytes, shutdown).await {
            // The worker lists saved media for the model; only failures need a marker here.
            Ok(size) => {
                media.push(Media {
                    kind: attachment.kind.to_owned(),
                    path: Some(target.display().to_string()),
                    url: None,
                    mime_type: attachment.mime_type.clone(),
                    file_name: attachment.file_name.clone(),
                    size: Some(size),
                });
            }
            Err(err) => {
                tracing::warn!(kind = attachment.kind, chat_id = msg.chat_id, %err, "attachment not saved");
                let name = attachment.file_name.as_deref().map(|n| format!(" {n}")).unwrap_or_default();
                markers.push(format!("[{}{name} not saved: {err}]", attachment.kind));
            }
        }
    }
    (media, markers)
}

async fn fetch(
    bot: &Bot,
    attachment: &Attachment,
    target: &Path,
    max_bytes: u64,
    shutdown: &CancellationToken,
) -> Result<u64, DownloadError> {
    if attachment.size > max_bytes {
        return Err(DownloadError::TooLarge(attachment.size));
    }
    let file = with_retry("getFile", shutdown, || bot.get_file(FileId(attachment.file_id.clone())).into_future())
        .await
        .map_err(|err| DownloadError::NotServed { platform: PLATFORM, reason: describe(&err) })?;
    if u64::from(file.meta.size) > max_bytes {
        return Err(DownloadError::TooLarge(u64::from(file.meta.size)));
    }
    save_stream(PLATFORM, target, max_bytes, bot.download_file_stream(&file.path)).await
}

fn file_name(message_id: i32, index: usize, attachment: &Attachment) -> PathBuf {
    let fallback = match attachment.kind {
        "photo" => "photo.jpg",
        "voice" => "voice.ogg",
        "audio" => "audio",
        "video" => "video.mp4",
        _ => "file",
    };
    saved_file_name(message_id, index, attachment.file_name.as_deref(), fallback)
}
