//! Inbound attachments: downloaded into the media directory (inside the agent's workspace, so
//! its file tools can read them) and passed on as [`Media`]; a failure becomes a text marker.

use std::path::{Path, PathBuf};

use super::inbound::{Attachment, Incoming};
use crate::contract::Media;
use crate::delivery::download::{DownloadError, save_stream};
use crate::media_files::saved_file_name;

const PLATFORM: &str = "Discord";

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
    // Attachment URLs are signed; the error text leaves them out of the logs.
    let failed = |err| DownloadError::from_http(PLATFORM, err);
    let response = client.get(&attachment.url).send().await.map_err(failed)?.error_for_status().map_err(failed)?;
    save_stream(PLATFORM, target, max_bytes, response.bytes_stream()).await
}

fn file_name(message_id: u64, index: usize, attachment: &Attachment) -> PathBuf {
    saved_file_name(message_id, index, Some(&attachment.file_name), "file")
}
