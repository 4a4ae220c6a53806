//! Files sent with an outbound message. Local files are uploaded as attachments of the
//! reply's last part (Discord takes up to 10 per message and, for bots by default, 25 MiB per
//! message in all; more go in further messages). URLs are appended to the text as links, which
//! Discord previews. A file that cannot be sent (missing, too large) becomes a one-line notice
//! in the text, so the user knows something is missing.

use std::path::Path;

use serenity::all::CreateAttachment;

use crate::contract::Media;

/// Attachments one message may carry.
const MAX_FILES_PER_MESSAGE: usize = 10;
/// The upload limit of a message (all its files together) for bots by default.
const MAX_MESSAGE_BYTES: u64 = 25 * 1024 * 1024;

/// The files of an outbound message, read and ready to go.
#[derive(Debug, Default)]
pub(crate) struct Uploads {
    /// Attachments grouped per message, each group within Discord's limits.
    pub batches: Vec<Vec<CreateAttachment>>,
    /// Lines for the text: links to URL media and notices about files that cannot be sent.
    pub lines: Vec<String>,
}

/// Reads the files of `media` and sorts them into batches, links and notices.
pub(crate) async fn prepare(media: &[Media]) -> Uploads {
    let mut uploads = Uploads::default();
    let mut batch_bytes = 0u64;
    for item in media {
        if let Some(path) = &item.path {
            match read_file(item, Path::new(path)).await {
                Ok((file, size)) => {
                    let full = uploads.batches.last().is_none_or(|batch| {
                        batch.len() == MAX_FILES_PER_MESSAGE || batch_bytes + size > MAX_MESSAGE_BYTES
                    });
                    if full {
                        uploads.batches.push(Vec::new());
                        batch_bytes = 0;
                    }
                    batch_bytes += size;
                    if let Some(batch) = uploads.batches.last_mut() {
                        batch.push(file);
                    }
                }
                Err(notice) => uploads.lines.push(notice),
            }
        } else if let Some(url) = &item.url {
            uploads.lines.push(url.clone());
        } else {
            tracing::warn!("outbound media without a path or URL skipped");
        }
    }
    uploads
}

/// One local file as an attachment with its size, or the notice saying why it cannot be sent.
async fn read_file(media: &Media, path: &Path) -> Result<(CreateAttachment, u64), String> {
    let name = media
        .file_name
        .clone()
        .or_else(|| path.file_name().map(|name| name.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "file".to_owned());
    let size = match tokio::fs::metadata(path).await {
        Ok(meta) if meta.is_file() => meta.len(),
        Ok(_) | Err(_) => {
            tracing::warn!(path = %path.display(), "outbound file not found");
            return Err(format!("(file not found: {name})"));
        }
    };
    if size > MAX_MESSAGE_BYTES {
        tracing::warn!(path = %path.display(), size, "outbound file too large for Discord");
        return Err(format!("(file too large to send: {name}, {} MB)", size / (1024 * 1024)));
    }
    match tokio::fs::read(path).await {
        Ok(bytes) => Ok((CreateAttachment::bytes(bytes, name), size)),
        Err(err) => {
            tracing::warn!(path = %path.display(), %err, "outbound file unreadable");
            Err(format!("(cannot read file: {name})"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &Path) -> Media {
        Media { kind: "file".into(), path: Some(path.to_string_lossy().into_owned()), ..Media::default() }
    }

    #[tokio::test]
    async fn files_are_batched_ten_per_message_and_problems_become_lines() {
        let dir = tempfile::tempdir().unwrap();
        let mut media = Vec::new();
        for n in 0..12 {
            let path = dir.path().join(format!("f{n}.txt"));
            std::fs::write(&path, b"x").unwrap();
            media.push(file(&path));
        }
        media.push(file(&dir.path().join("missing.csv")));
        media.push(Media { kind: "photo".into(), url: Some("https://example.com/a.png".into()), ..Media::default() });
        let uploads = prepare(&media).await;
        let sizes: Vec<usize> = uploads.batches.iter().map(Vec::len).collect();
        assert_eq!(sizes, [10, 2]);
        assert_eq!(uploads.batches[0][0].filename, "f0.txt");
        assert_eq!(uploads.lines, ["(file not found: missing.csv)", "https://example.com/a.png"]);
    }
}
