//! Images in requests to the model fakes, checked the way the real APIs check them: a
//! supported type (JPEG, PNG, GIF, WebP), valid base64, and bytes of the type declared.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

/// An image a request carried: its declared media type and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentImage {
    pub media_type: String,
    pub bytes: Vec<u8>,
}

/// Decodes base64 image data declared as `media_type`; the error says what the API would.
pub(crate) fn decode(media_type: &str, data: &str) -> Result<SentImage, String> {
    if !matches!(media_type, "image/jpeg" | "image/png" | "image/gif" | "image/webp") {
        return Err(format!("media type {media_type:?} is not one of image/jpeg, image/png, image/gif, image/webp"));
    }
    let bytes = STANDARD.decode(data).map_err(|e| format!("the image data is not valid base64: {e}"))?;
    if sniff(&bytes) != Some(media_type) {
        return Err(format!("the image was specified using the {media_type} media type, but its bytes do not match"));
    }
    Ok(SentImage { media_type: media_type.to_owned(), bytes })
}

/// `data:<type>;base64,<data>`, as OpenAI's `image_url` takes it.
pub(crate) fn decode_data_url(url: &str) -> Result<SentImage, String> {
    let rest = url.strip_prefix("data:").ok_or("only data: URLs are served by this fake")?;
    let (media_type, data) = rest.split_once(";base64,").ok_or("a data URL must be base64 (data:<type>;base64,…)")?;
    decode(media_type, data)
}

fn sniff(bytes: &[u8]) -> Option<&'static str> {
    match bytes {
        [0xFF, 0xD8, 0xFF, ..] => Some("image/jpeg"),
        [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1A, b'\n', ..] => Some("image/png"),
        [b'G', b'I', b'F', b'8', b'7' | b'9', b'a', ..] => Some("image/gif"),
        [b'R', b'I', b'F', b'F', _, _, _, _, b'W', b'E', b'B', b'P', ..] => Some("image/webp"),
        _ => None,
    }
}

/// The content parts or blocks of every message of a request.
pub(crate) fn parts(request: &Value) -> impl Iterator<Item = &Value> {
    let messages = request.get("messages").and_then(Value::as_array).into_iter().flatten();
    messages.filter_map(|m| m.get("content")?.as_array()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_refused_as_the_apis_refuse_them() {
        let png = STANDARD.encode(b"\x89PNG\r\n\x1a\n....");
        assert_eq!(decode("image/png", &png).unwrap().media_type, "image/png");
        assert!(decode("image/jpeg", &png).unwrap_err().contains("do not match"));
        assert!(decode("image/bmp", &png).unwrap_err().contains("not one of"));
        assert!(decode("image/png", "%%%").unwrap_err().contains("base64"));
        assert!(decode_data_url(&format!("data:image/png;base64,{png}")).is_ok());
        assert!(decode_data_url("https://example.com/cat.png").is_err());
    }
}
