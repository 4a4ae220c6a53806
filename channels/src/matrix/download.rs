//! Inbound attachments: fetched from the media repository (decrypted when the room is
//! encrypted), saved into the media directory (inside the agent's workspace, so its file tools
//! can read them) and passed on as [`Media`]; a failure becomes a text marker.

use std::path::Path;

use bytes::Bytes;
use matrix_sdk::Client;
use matrix_sdk::media::{MediaFormat, MediaRequestParameters};
use matrix_sdk::ruma::RoomId;

use super::inbound::{Attachment, AttachmentKind, Incoming};
use crate::contract::Media;
use crate::delivery::download::{DownloadError, save_stream};
use crate::media_files::saved_file_name;

const PLATFORM: &str = "Matrix";

/// Downloads the attachment of `msg`, if any and within `max_bytes`, into
/// `dir/<room>/`: the media, or a marker line for the message text saying why it is not there.
pub(crate) async fn fetch_attachment(
    client: &Client,
    room: &RoomId,
    msg: &Incoming,
    dir: &Path,
    max_bytes: u64,
) -> (Vec<Media>, Option<String>) {
    let Some(attachment) = &msg.attachment else { return (Vec::new(), None) };
    let local = saved_file_name(msg.event_id.as_str().trim_start_matches('$'), 0, Some(&attachment.name), "file");
    let target = dir.join(crate::media_files::safe_name(room.as_str())).join(local);
    match fetch(client, attachment, &target, max_bytes).await {
        Ok(size) => {
            let media = Media {
                kind: kind_name(attachment.kind).to_owned(),
                path: Some(target.display().to_string()),
                url: None,
                mime_type: attachment.mimetype.clone(),
                file_name: Some(attachment.name.clone()),
                size: Some(size),
            };
            (vec![media], None)
        }
        Err(err) => {
            let kind = kind_name(attachment.kind);
            tracing::warn!(kind, room = %room, %err, "attachment not saved");
            (Vec::new(), Some(format!("[{kind} {} not saved: {err}]", attachment.name)))
        }
    }
}

async fn fetch(client: &Client, attachment: &Attachment, target: &Path, max_bytes: u64) -> Result<u64, DownloadError> {
    if let Some(size) = attachment.size.filter(|size| *size > max_bytes) {
        return Err(DownloadError::TooLarge(size));
    }
    let request = MediaRequestParameters { source: attachment.source.media_source(), format: MediaFormat::File };
    let data = client
        .media()
        .get_media_content(&request, false)
        .await
        .map_err(|err| DownloadError::NotServed { platform: PLATFORM, reason: err.to_string() })?;
    let chunks = futures_util::stream::iter([Ok::<_, reqwest::Error>(Bytes::from(data))]);
    save_stream(PLATFORM, target, max_bytes, chunks).await
}

/// The kind of media as the worker names it (what it tells the model and hands transcription).
fn kind_name(kind: AttachmentKind) -> &'static str {
    match kind {
        AttachmentKind::Image => "photo",
        AttachmentKind::File => "document",
        AttachmentKind::Audio => "audio",
        AttachmentKind::Voice => "voice",
        AttachmentKind::Video => "video",
    }
}
