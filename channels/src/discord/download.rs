//! Inbound attachments: downloaded into the media directory (inside the agent's workspace, so
//! its file tools can read them) and passed on as [`Media`]; a failure becomes a text marker.

use std::path::{Path, PathBuf};

use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

use super::inbound::{Attachment, Incoming};
use crate::contract::Media;
use crate::media_files::saved_file_name;

/// Why an attachment was not saved; the reason goes into the marker the model sees.
#[derive(Debug, thiserror::Error)]
enum DownloadError {
    #[error("too large to download ({0} bytes)")]
    TooLarge(u64),
    #[error("Discord would not serve it: {0}")]
    Discord(String),
    #[error("cannot save it: {0}")]
    Save(#[from] std::io::Error),
}

/// Downloads every attachment of `msg` (those within `max_bytes`) into `dir/<channel>/` and
/// returns the media, and marker lines for the message text about those that could not be
/// saved: the message still reaches the agent. (The worker lists saved media for the model.)
pub(crate) async fn fetch_attachments(
    client: &reqwest::Client,
    msg: &Incoming,
    dir: &Path,
    max_bytes: u64,
) -> (Vec<Media>, Vec<String>) {
    let mut media = Vec::new();
    let mut markers = Vec::new();
    for (index, attachment) in msg.attachments.iter().enumerate() {
        let target = dir.join(msg.channel_id.to_string()).join(file_name(msg.message_id, index, attachment));
        match fetch(client, attachment, &target, max_bytes).await {
            Ok(size) => {
                media.push(Media {
                    kind: attachment.kind.to_owned(),
                    path: Some(target.display().to_string()),
                    url: None,
                    mime_type: attachment.mime_type.clone(),
                    file_name: Some(attachment.file_name.clone()),
                    size: Some(size),
                });
            }
            Err(err) => {
                tracing::warn!(kind = attachment.kind, channel_id = msg.channel_id, %err, "attachment not saved");
                markers.push(format!("[{} {} not saved: {err}]", attachment.kind, attachment.file_name));
            }
        }
    }
    (media, markers)
}

async fn fetch(
    client: &reqwest::Client,
    attachment: &Attachment,
    target: &Path,
    max_bytes: u64,
) -> Result<u64, DownloadError> {
    if attachment.size > max_bytes {
        return Err(DownloadError::TooLarge(attachment.size));
    }
    if let Some(parent) = target.parent() {
        tokio::fs::create_dir_all(parent).await?;
    }
    // Written under a temporary name and renamed, so a half-written file is never shown.
    let partial = target.with_extension("part");
    match stream_to(client, &attachment.url, &partial, max_bytes).await {
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

async fn stream_to(client: &reqwest::Client, url: &str, local: &Path, max_bytes: u64) -> Result<u64, DownloadError> {
    // Attachment URLs are signed; the error text leaves them out of the logs.
    let failed = |err: reqwest::Error| DownloadError::Discord(err.without_url().to_string());
    let response = client.get(url).send().await.map_err(failed)?.error_for_status().map_err(failed)?;
    let mut out = tokio::fs::File::create(local).await?;
    let mut stream = response.bytes_stream();
    let mut written = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(failed)?;
        written += chunk.len() as u64;
        if written > max_bytes {
            return Err(DownloadError::TooLarge(written));
        }
        out.write_all(&chunk).await?;
    }
    out.flush().await?;
    Ok(written)
}

fn file_name(message_id: u64, index: usize, attachment: &Attachment) -> PathBuf {
    saved_file_name(message_id, index, Some(&attachment.file_name), "file")
}
