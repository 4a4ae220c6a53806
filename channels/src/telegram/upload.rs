//! Files sent with an outbound message, after its text: images as photos, everything else as
//! documents.
//!
//! The text always goes first as ordinary messages rather than as a caption: captions hold
//! only 1024 characters, and sending text the same way with or without files keeps rendering,
//! splitting and streamed drafts identical. A file that cannot be sent (missing, too large, an
//! invalid URL) becomes a one-line notice in the chat, so the user knows something is missing.

use std::path::Path;

use teloxide::RequestError;
use teloxide::prelude::*;
use teloxide::types::InputFile;
use tokio_util::sync::CancellationToken;

use super::retry::{Verdict, classify, describe, with_retry};
use super::send::send_plain;
use super::target::Target;
use crate::contract::Media;
use crate::media_files::too_large_note;

/// The Bot API's limit for photos; larger images go as documents.
const PHOTO_MAX_BYTES: u64 = 10 * 1024 * 1024;
/// The Bot API's limit for uploads.
const UPLOAD_MAX_BYTES: u64 = 50 * 1024 * 1024;
const IMAGE_EXTENSIONS: [&str; 5] = ["png", "jpg", "jpeg", "gif", "webp"];

/// Sends one file of an outbound message; `first` quotes the target's `reply_to`.
pub(crate) async fn send_media(
    bot: &Bot,
    target: &Target,
    media: &Media,
    first: bool,
    shutdown: &CancellationToken,
) -> Result<(), RequestError> {
    if let Some(path) = &media.path {
        return send_file(bot, target, media, Path::new(path), first, shutdown).await;
    }
    if let Some(url) = &media.url {
        return send_url(bot, target, url, first, shutdown).await;
    }
    tracing::warn!(chat = target.chat.0, "outbound media without a path or URL skipped");
    Ok(())
}

/// A local file: checked first, so that a missing file is said plainly instead of failing.
async fn send_file(
    bot: &Bot,
    target: &Target,
    media: &Media,
    path: &Path,
    first: bool,
    shutdown: &CancellationToken,
) -> Result<(), RequestError> {
    let name = media
        .file_name
        .clone()
        .or_else(|| path.file_name().map(|name| name.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "file".to_owned());
    let size = match tokio::fs::metadata(path).await {
        Ok(meta) if meta.is_file() => meta.len(),
        Ok(_) | Err(_) => {
            tracing::warn!(path = %path.display(), chat = target.chat.0, "outbound file not found");
            return notice(bot, target, &format!("(file not found: {name})"), first, shutdown).await;
        }
    };
    if size > UPLOAD_MAX_BYTES {
        tracing::warn!(path = %path.display(), size, "outbound file too large for Telegram");
        let note = too_large_note(&name, size, UPLOAD_MAX_BYTES, "Telegram accepts from bots");
        return notice(bot, target, &note, first, shutdown).await;
    }
    if is_image(media, path) && size <= PHOTO_MAX_BYTES {
        let photo = InputFile::file(path).file_name(name.clone());
        match send_photo(bot, target, photo, first, shutdown).await {
            // Telegram refuses some images as photos (dimensions, format): send the file as is.
            Err(err) if classify(&err) == Verdict::Final => {
                tracing::info!(error = %describe(&err), "image refused as a photo; sending it as a document");
            }
            other => return other,
        }
    }
    send_document(bot, target, InputFile::file(path).file_name(name), first, shutdown).await
}

async fn send_url(
    bot: &Bot,
    target: &Target,
    url: &str,
    first: bool,
    shutdown: &CancellationToken,
) -> Result<(), RequestError> {
    match reqwest::Url::parse(url) {
        Ok(url) => send_document(bot, target, InputFile::url(url), first, shutdown).await,
        Err(err) => {
            tracing::warn!(%err, url, "outbound media URL is invalid");
            notice(bot, target, &format!("(cannot send file: invalid URL {url})"), first, shutdown).await
        }
    }
}

fn is_image(media: &Media, path: &Path) -> bool {
    let extension = path.extension().map(|ext| ext.to_string_lossy().to_ascii_lowercase());
    media.kind == "photo" || extension.is_some_and(|ext| IMAGE_EXTENSIONS.contains(&ext.as_str()))
}

async fn send_photo(
    bot: &Bot,
    target: &Target,
    photo: InputFile,
    first: bool,
    shutdown: &CancellationToken,
) -> Result<(), RequestError> {
    with_retry("sendPhoto", shutdown, || {
        let mut request = bot.send_photo(target.chat, photo.clone());
        if let Some(thread) = target.thread {
            request = request.message_thread_id(thread);
        }
        if let Some(reply) = target.reply_parameters(first) {
            request = request.reply_parameters(reply);
        }
        request.send()
    })
    .await
    .map(drop)
}

async fn send_document(
    bot: &Bot,
    target: &Target,
    document: InputFile,
    first: bool,
    shutdown: &CancellationToken,
) -> Result<(), RequestError> {
    with_retry("sendDocument", shutdown, || {
        let mut request = bot.send_document(target.chat, document.clone());
        if let Some(thread) = target.thread {
            request = request.message_thread_id(thread);
        }
        if let Some(reply) = target.reply_parameters(first) {
            request = request.reply_parameters(reply);
        }
        request.send()
    })
    .await
    .map(drop)
}

async fn notice(
    bot: &Bot,
    target: &Target,
    text: &str,
    first: bool,
    shutdown: &CancellationToken,
) -> Result<(), RequestError> {
    send_plain(bot, target, text, first, shutdown).await.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_recognised_by_kind_or_extension() {
        let file = Media { kind: "file".into(), ..Media::default() };
        let photo = Media { kind: "photo".into(), ..Media::default() };
        assert!(is_image(&file, Path::new("/w/chart.PNG")));
        assert!(is_image(&file, Path::new("/w/a.webp")));
        assert!(!is_image(&file, Path::new("/w/notes.txt")));
        assert!(is_image(&photo, Path::new("/w/picture")));
    }
}
