//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`), for what is not public
//! otherwise. Not part of the API.

use crate::provider::sse::SseParser;

/// One event as the SSE parser dispatched it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
    pub id: Option<String>,
}

/// Feeds `chunks` to a new SSE parser one after the other, then ends the stream; the events
/// in order, or the size bound the parser refused the stream at.
pub fn sse_events<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Result<Vec<SseEvent>, usize> {
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    for chunk in chunks {
        events.extend(parser.push(chunk).map_err(|too_large| too_large.0)?);
    }
    events.extend(parser.finish());
    Ok(events.into_iter().map(|event| SseEvent { event: event.event, data: event.data, id: event.id }).collect())
}
