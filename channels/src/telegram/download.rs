//! Inbound media: photos, documents and voice notes are downloaded into the media directory
//! (which lives in the agent's workspace, so its file tools can read them) and passed on as
//! [`Media`] with a text marker the model can see.

use std::path::{Path, PathBuf};

use futures_util::StreamExt;
use teloxide::Bot;
use teloxide::net::Download;
use teloxide::prelude::Requester;
use teloxide::types::FileId;
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

use super::inbound::{Attachment, Incoming};
use super::retry::{describe, with_retry};
use crate::contract::Media;
use crate::media_files::saved_file_name;

/// Why an attachment was not saved; the reason goes into the marker the model sees.
#[derive(Debug, thiserror::Error)]
enum DownloadError {
    #[error("too large to download ({0} bytes)")]
    TooLarge(u64),
    #[error("Telegram would not serve it: {0}")]
    Telegram(String),
    #[error("cannot save it: {0}")]
    Save(#[from] std::io::Error),
}

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
        .map_err(|err| DownloadError::Telegram(describe(&err)))?;
    if u64::from(file.meta.size) > max_bytes {
        return Err(DownloadError::TooLarge(u64::from(file.meta.size)));
    }
    if let Some(parent) = target.parent() {
        tokio::fs::create_dir_all(parent).await?;
    }
    // Written under a temporary name and renamed, so a half-written file is never shown.
    let partial = target.with_extension("part");
    let result = stream_to(bot, &file.path, &partial, max_bytes).await;
    match result {
        Ok(size) => {
            tokio::fs::rename(&partial, target).await?;
            Ok(size)
        }
        Err(err) => {
            let _ = tokio::fs::remove_file(&partial).await;
            Err(err)
        }
    }
}

async fn stream_to(bot: &Bot, remote: &str, local: &Path, max_bytes: u64) -> Result<u64, DownloadError> {
    let mut out = tokio::fs::File::create(local).await?;
    let mut stream = bot.download_file_stream(remote);
    let mut written = 0u64;
    while let Some(chunk) = stream.next().await {
        // reqwest's error would show the download URL, which holds the bot token.
        let chunk = chunk.map_err(|err| DownloadError::Telegram(err.without_url().to_string()))?;
        written += chunk.len() as u64;
        if written > max_bytes {
            return Err(DownloadError::TooLarge(written));
        }
        out.write_all(&chunk).await?;
    }
    out.flush().await?;
    Ok(written)
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
