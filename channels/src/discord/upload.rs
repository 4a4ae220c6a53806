//! Files sent with an outbound message. Local files are uploaded as attachments of the
//! reply's last part (Discord takes up to 10 per message and, for bots, 10 MiB per message in
//! all, 50 or 100 MiB in servers at boost level 2 or 3; more go in further messages). URLs are
//! appended to the text as links, which Discord previews. A file that cannot be sent (missing,
//! too large) becomes a one-line notice in the text, so the user knows something is missing.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serenity::all::{CreateAttachment, GuildId};

use super::rest::Rest;

use crate::contract::Media;
use crate::media_files::too_large_note;

/// Attachments one message may carry.
const MAX_FILES_PER_MESSAGE: usize = 10;
/// The upload limit of a message (all its files together) for bots, in DMs and servers
/// without boosts.
pub(crate) const DEFAULT_MAX_BYTES: u64 = 10 * 1024 * 1024;

/// The upload limit of a server at boost level `tier` (Discord's `premium_tier`), at least
/// `base`.
pub(crate) fn limit_of_tier(tier: u8, base: u64) -> u64 {
    let boosted = match tier {
        2 => 50 * 1024 * 1024,
        3 => 100 * 1024 * 1024,
        _ => DEFAULT_MAX_BYTES,
    };
    boosted.max(base)
}

/// How long a server's boost level is trusted before Discord is asked again.
const TIER_KEPT: Duration = Duration::from_secs(3600);

/// The boost levels of the servers the bot sent large files to, as Discord reported them.
#[derive(Debug, Default)]
pub(crate) struct ServerLimits {
    tiers: Mutex<HashMap<u64, (u8, Instant)>>,
}

impl ServerLimits {
    /// The upload limit for files of at most `largest` bytes in server `guild` (`None`: a DM
    /// or a channel not known): `base`, unless a file is larger and the server's boost level
    /// (asked once an hour at most) allows more.
    pub(crate) async fn limit(&self, rest: &Rest, guild: Option<u64>, base: u64, largest: u64) -> u64 {
        let Some(guild) = guild.filter(|_| largest > base) else { return base };
        let known = self.tiers.lock().unwrap_or_else(PoisonError::into_inner).get(&guild).copied();
        let tier = match known {
            Some((tier, at)) if at.elapsed() < TIER_KEPT => tier,
            _ => match rest.guild_tier(GuildId::new(guild.max(1))).await {
                Ok(tier) => {
                    self.tiers.lock().unwrap_or_else(PoisonError::into_inner).insert(guild, (tier, Instant::now()));
                    tier
                }
                Err(err) => {
                    tracing::info!(guild, %err, "cannot ask Discord for a server's boost level; using the base upload limit");
                    0
                }
            },
        };
        limit_of_tier(tier, base)
    }
}

/// The files of an outbound message, read and ready to go.
#[derive(Debug, Default)]
pub(crate) struct Uploads {
    /// Attachments grouped per message, each group within Discord's limits.
    pub batches: Vec<Vec<CreateAttachment>>,
    /// Lines for the text: links to URL media and notices about files that cannot be sent.
    pub lines: Vec<String>,
}

/// Reads the files of `media` and sorts them into batches of at most `limit` bytes, links and
/// notices.
pub(crate) async fn prepare(media: &[Media], limit: u64) -> Uploads {
    let mut uploads = Uploads::default();
    let mut batch_bytes = 0u64;
    for item in media {
        if let Some(path) = &item.path {
            match read_file(item, Path::new(path), limit).await {
                Ok((file, size)) => {
                    let full = uploads
                        .batches
                        .last()
                        .is_none_or(|batch| batch.len() == MAX_FILES_PER_MESSAGE || batch_bytes + size > limit);
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
async fn read_file(media: &Media, path: &Path, limit: u64) -> Result<(CreateAttachment, u64), String> {
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
    if size > limit {
        tracing::warn!(path = %path.display(), size, limit, "outbound file too large for Discord");
        return Err(too_large_note(&name, size, limit, "Discord accepts here"));
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
        let uploads = prepare(&media, DEFAULT_MAX_BYTES).await;
        let sizes: Vec<usize> = uploads.batches.iter().map(Vec::len).collect();
        assert_eq!(sizes, [10, 2]);
        assert_eq!(uploads.batches[0][0].filename, "f0.txt");
        assert_eq!(uploads.lines, ["(file not found: missing.csv)", "https://example.com/a.png"]);
    }

    #[tokio::test]
    async fn a_file_over_the_limit_is_named_with_its_size_and_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("video.mp4");
        std::fs::File::create(&path).unwrap().set_len(12 * 1024 * 1024).unwrap();
        let uploads = prepare(&[file(&path)], DEFAULT_MAX_BYTES).await;
        assert!(uploads.batches.is_empty());
        assert_eq!(uploads.lines, ["(video.mp4 was not sent: it is 12 MB, more than the 10 MB Discord accepts here)"]);
        let boosted = prepare(&[file(&path)], limit_of_tier(2, DEFAULT_MAX_BYTES)).await;
        assert_eq!(boosted.batches.len(), 1, "a server at boost level 2 takes 50 MB");
        assert_eq!(limit_of_tier(1, 20 * 1024 * 1024), 20 * 1024 * 1024, "never below the configured limit");
    }
}
