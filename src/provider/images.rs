//! Images for vision models. A provider entry with `vision = true` sends the images attached
//! to the conversation's newest user message (the turn being answered) as image parts;
//! older messages keep only their `[photo attached: <path>]` line, since an image in history
//! would cost its tokens again on every call. Each image is read from disk here, bounded:
//! at most [`MAX_IMAGES`] per message and [`MAX_IMAGE_BYTES`] each, JPEG, PNG, GIF or WebP
//! (told by the file's first bytes, not its name). An image that does not qualify is not
//! sent: a note in the message's text tells the model why, and its path line stays.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use thiserror::Error;
use tokio::io::AsyncReadExt;

use super::{ChatMessage, ImageRef, Role};

/// Images sent with one message; further ones get a note.
pub const MAX_IMAGES: usize = 4;
/// The largest image sent, in bytes (5 MiB: the Anthropic API's limit per image).
pub const MAX_IMAGE_BYTES: u64 = 5 * 1024 * 1024;

/// Why an attached image is not sent.
#[derive(Debug, Error)]
pub enum ImageError {
    #[error("larger than {} MiB", MAX_IMAGE_BYTES / (1024 * 1024))]
    TooLarge,
    #[error("only the first {MAX_IMAGES} images of a message are shown")]
    TooMany,
    #[error("cannot be read: {0}")]
    Unreadable(#[from] std::io::Error),
    #[error("not a JPEG, PNG, GIF or WebP image")]
    UnknownFormat,
}

/// One image, ready for the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlineImage {
    /// `image/jpeg`, `image/png`, `image/gif` or `image/webp`.
    pub media_type: &'static str,
    /// The file's bytes, base64 (standard alphabet, padded).
    pub data: String,
}

impl InlineImage {
    /// The image as a `data:` URL (OpenAI's `image_url`).
    pub fn data_url(&self) -> String {
        format!("data:{};base64,{}", self.media_type, self.data)
    }
}

/// The images of one message, read for a vision model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attached {
    /// The index of the message in the request.
    pub message: usize,
    pub images: Vec<InlineImage>,
    /// One line per image not sent, saying why.
    pub notes: Vec<String>,
}

impl Attached {
    /// The images for the message at `index`, if these are its.
    pub fn of(attached: Option<&Attached>, index: usize) -> Option<&Attached> {
        attached.filter(|a| a.message == index)
    }

    /// The message's text with the notes appended, one a line.
    pub fn text(&self, content: &str) -> String {
        let mut text = content.to_owned();
        for note in &self.notes {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(note);
        }
        text
    }
}

/// Reads the images of the newest user message; none when it has none.
pub async fn attach(messages: &[ChatMessage]) -> Option<Attached> {
    let index = messages.iter().rposition(|m| m.role == Role::User)?;
    let refs = &messages[index].images;
    if refs.is_empty() {
        return None;
    }
    let mut attached = Attached { message: index, ..Attached::default() };
    for (position, image) in refs.iter().enumerate() {
        let loaded = if position >= MAX_IMAGES { Err(ImageError::TooMany) } else { load(image).await };
        match loaded {
            Ok(image) => attached.images.push(image),
            Err(why) => {
                tracing::info!(path = %image.path, %why, "image not sent to the model");
                attached.notes.push(format!("[image {} not shown to you: {why}]", image.path));
            }
        }
    }
    Some(attached)
}

/// Reads one image (never more than the limit, should the file grow meanwhile).
async fn load(image: &ImageRef) -> Result<InlineImage, ImageError> {
    let file = tokio::fs::File::open(&image.path).await?;
    if file.metadata().await?.len() > MAX_IMAGE_BYTES {
        return Err(ImageError::TooLarge);
    }
    let mut bytes = Vec::new();
    file.take(MAX_IMAGE_BYTES + 1).read_to_end(&mut bytes).await?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_IMAGE_BYTES {
        return Err(ImageError::TooLarge);
    }
    let media_type = sniff(&bytes).ok_or(ImageError::UnknownFormat)?;
    Ok(InlineImage { media_type, data: STANDARD.encode(&bytes) })
}

/// The image type the bytes begin with; the APIs refuse a media type that does not match.
pub fn sniff(bytes: &[u8]) -> Option<&'static str> {
    match bytes {
        [0xFF, 0xD8, 0xFF, ..] => Some("image/jpeg"),
        [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1A, b'\n', ..] => Some("image/png"),
        [b'G', b'I', b'F', b'8', b'7' | b'9', b'a', ..] => Some("image/gif"),
        [b'R', b'I', b'F', b'F', _, _, _, _, b'W', b'E', b'B', b'P', ..] => Some("image/webp"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest PNG header there is; enough for the type check.
    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";

    fn photo(path: &std::path::Path) -> ImageRef {
        ImageRef { path: path.display().to_string(), mime_type: Some("image/png".into()) }
    }

    #[tokio::test]
    async fn only_the_newest_user_message_is_read_and_bad_files_get_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("a.png");
        std::fs::write(&good, PNG).unwrap();
        let text = dir.path().join("b.png");
        std::fs::write(&text, "not an image").unwrap();
        let big = dir.path().join("c.png");
        let mut bytes = PNG.to_vec();
        bytes.resize(usize::try_from(MAX_IMAGE_BYTES).unwrap() + 1, 0);
        std::fs::write(&big, bytes).unwrap();
        let old = ChatMessage::user("old").with_images(vec![photo(&good)]);
        let new = ChatMessage::user("look").with_images(vec![photo(&good), photo(&text), photo(&big)]);
        let messages = vec![old, ChatMessage::assistant("ok", vec![]), new, ChatMessage::assistant("", vec![])];
        let attached = attach(&messages).await.unwrap();
        assert_eq!(attached.message, 2);
        assert_eq!(attached.images, vec![InlineImage { media_type: "image/png", data: STANDARD.encode(PNG) }]);
        assert_eq!(attached.notes.len(), 2);
        assert!(
            attached.notes[0].contains("b.png") && attached.notes[0].contains("not a JPEG"),
            "{:?}",
            attached.notes
        );
        assert!(attached.notes[1].contains("c.png") && attached.notes[1].contains("larger than 5 MiB"));
        assert!(attached.text("look").starts_with("look\n[image "));
        assert_eq!(attach(&messages[..2]).await.unwrap().message, 0);
        assert_eq!(attach(&[ChatMessage::user("no images")]).await, None);
    }

    #[tokio::test]
    async fn a_fifth_image_is_not_sent() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("a.png");
        std::fs::write(&good, PNG).unwrap();
        let message = ChatMessage::user("five").with_images(vec![photo(&good); 5]);
        let attached = attach(&[message]).await.unwrap();
        assert_eq!((attached.images.len(), attached.notes.len()), (4, 1));
        assert!(attached.notes[0].contains("first 4 images"));
    }

    #[test]
    fn types_are_told_by_their_first_bytes() {
        assert_eq!(sniff(b"\xFF\xD8\xFF\xE0rest"), Some("image/jpeg"));
        assert_eq!(sniff(PNG), Some("image/png"));
        assert_eq!(sniff(b"GIF89a..."), Some("image/gif"));
        assert_eq!(sniff(b"RIFF\x10\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(sniff(b"%PDF-1.7"), None);
    }
}
