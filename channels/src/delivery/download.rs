//! Saving an inbound attachment: streamed to a temporary file within a size limit, then renamed,
//! so a half-written file is never shown to the agent.

use std::path::Path;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tokio::io::AsyncWriteExt;

/// Why an attachment was not saved; the reason goes into the marker the model sees.
#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    #[error("too large to download ({0} bytes)")]
    TooLarge(u64),
    #[error("{platform} would not serve it: {reason}")]
    NotServed { platform: &'static str, reason: String },
    #[error("cannot save it: {0}")]
    Save(#[from] std::io::Error),
}

impl DownloadError {
    /// A failed HTTP download, described without its URL: platform file URLs hold a bot token
    /// or a signature that must stay out of the logs.
    pub fn from_http(platform: &'static str, err: reqwest::Error) -> Self {
        DownloadError::NotServed { platform, reason: err.without_url().to_string() }
    }
}

/// Writes `chunks` to `target` (creating its directory), refusing more than `max_bytes`;
/// the number of bytes saved.
pub async fn save_stream(
    platform: &'static str,
    target: &Path,
    max_bytes: u64,
    chunks: impl Stream<Item = Result<Bytes, reqwest::Error>>,
) -> Result<u64, DownloadError> {
    if let Some(parent) = target.parent() {
        tokio::fs::create_dir_all(parent).await?;
    }
    let partial = target.with_extension("part");
    match write_limited(platform, &partial, max_bytes, chunks).await {
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

async fn write_limited(
    platform: &'static str,
    local: &Path,
    max_bytes: u64,
    chunks: impl Stream<Item = Result<Bytes, reqwest::Error>>,
) -> Result<u64, DownloadError> {
    let mut out = tokio::fs::File::create(local).await?;
    let mut chunks = std::pin::pin!(chunks);
    let mut written = 0u64;
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|err| DownloadError::from_http(platform, err))?;
        written += chunk.len() as u64;
        if written > max_bytes {
            return Err(DownloadError::TooLarge(written));
        }
        out.write_all(&chunk).await?;
    }
    out.flush().await?;
    Ok(written)
}
