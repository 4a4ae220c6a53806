//! Reading a response body under the byte cap, decoding gzip on the way.
//!
//! web_fetch asks for `Accept-Encoding: gzip`, and some servers send gzip without being asked;
//! either way a body marked `Content-Encoding: gzip` is decoded here, chunk by chunk, and the
//! cap counts decoded bytes: a small gzip that expands to gigabytes (a gzip bomb) stops at the
//! cap, its connection closed, with at most the cap in memory. Other encodings (br, zstd…) are
//! refused by name rather than shown to the model as bytes.

use std::io::{self, Write};

use flate2::write::GzDecoder;
use reqwest::header::CONTENT_ENCODING;
use reqwest::{Response, Url};

use crate::tools::ToolError;

/// A body read up to the cap, and where it was cut when it was longer.
pub(super) struct Body {
    pub bytes: Vec<u8>,
    pub cut_at_bytes: Option<usize>,
}

/// How the body is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Identity,
    Gzip,
}

/// Reads the body until its end or `max_bytes` decoded bytes, whichever comes first.
pub(super) async fn read_capped(mut response: Response, max_bytes: usize) -> Result<Body, ToolError> {
    let url = response.url().clone();
    let failed = |error: reqwest::Error| request_error(&url, &error);
    let encoding = encoding(&response).map_err(|name| {
        ToolError::Failed(format!("{url} sent its body encoded as {name}; web_fetch decodes only gzip"))
    })?;
    let mut sink = Capped { bytes: Vec::new(), max_bytes, full: false };
    if encoding == Encoding::Identity {
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            if sink.write_all(&chunk).is_err() {
                // Dropping the response here closes the connection: the rest is never read.
                return Ok(sink.cut());
            }
        }
        return Ok(sink.done());
    }
    let mut decoder = GzDecoder::new(sink);
    let mut received = 0usize;
    while let Some(chunk) = response.chunk().await.map_err(failed)? {
        received += chunk.len();
        let written = decoder.write_all(&chunk);
        if decoder.get_ref().full || received > max_bytes {
            return Ok(into_sink(decoder).cut());
        }
        written.map_err(|error| bad_gzip(&url, &error))?;
    }
    let finished = decoder.try_finish();
    if decoder.get_ref().full {
        return Ok(into_sink(decoder).cut());
    }
    finished.map_err(|error| bad_gzip(&url, &error))?;
    Ok(into_sink(decoder).done())
}

/// The encoding `Content-Encoding` names: `Err(name)` for one web_fetch cannot decode.
fn encoding(response: &Response) -> Result<Encoding, String> {
    let names: Vec<String> = response
        .headers()
        .get_all(CONTENT_ENCODING)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|name| name.trim().to_ascii_lowercase())
        .filter(|name| !name.is_empty() && name != "identity")
        .collect();
    match names.as_slice() {
        [] => Ok(Encoding::Identity),
        [name] if name == "gzip" || name == "x-gzip" => Ok(Encoding::Gzip),
        _ => Err(names.join(", ")),
    }
}

fn bad_gzip(url: &reqwest::Url, error: &io::Error) -> ToolError {
    ToolError::Failed(format!("{url} sent a gzip body that does not decode: {error}"))
}

/// The decoded bytes, without the decoder's buffered rest (after a cut, the rest is unwanted).
fn into_sink(mut decoder: GzDecoder<Capped>) -> Capped {
    std::mem::replace(decoder.get_mut(), Capped { bytes: Vec::new(), max_bytes: 0, full: false })
}

/// Keeps at most `max_bytes`; a write past them keeps what fits and fails, to stop the caller.
struct Capped {
    bytes: Vec<u8>,
    max_bytes: usize,
    full: bool,
}

impl Capped {
    fn cut(self) -> Body {
        Body { cut_at_bytes: Some(self.max_bytes), bytes: self.bytes }
    }

    fn done(self) -> Body {
        Body { bytes: self.bytes, cut_at_bytes: None }
    }
}

impl Write for Capped {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let room = self.max_bytes.saturating_sub(self.bytes.len());
        if data.len() > room {
            self.bytes.extend_from_slice(&data[..room]);
            self.full = true;
            return Err(io::Error::other("the byte cap is reached"));
        }
        self.bytes.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Connection failures and timeouts may pass: worth the registry's one retry.
pub(super) fn request_error(url: &Url, error: &reqwest::Error) -> ToolError {
    let mut message = format!("cannot fetch {url}");
    // reqwest's own message repeats the URL and says little; the cause (refused, reset,
    // TLS…) is further down the chain.
    let mut source = std::error::Error::source(error);
    if source.is_none() {
        message.push_str(&format!(": {error}"));
    }
    while let Some(cause) = source {
        message.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    ToolError::Transient(message)
}
