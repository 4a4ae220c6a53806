//! An incremental server-sent-events parser: bytes arrive in arbitrary chunks (a line, a
//! multi-byte character or a `\r\n` pair may be split between two of them), events come out.
//!
//! Follows the WHATWG event-stream rules that matter for model APIs: `data:` lines of one
//! event are joined with `\n`, lines starting with `:` are comments (keep-alives), a blank
//! line ends an event, and lines may end with `\n`, `\r\n` or `\r`.

use thiserror::Error;

/// One dispatched event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if the server named the event type.
    pub event: Option<String>,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
    /// The `id:` field, if any.
    pub id: Option<String>,
}

impl SseEvent {
    /// The OpenAI-style end-of-stream marker `data: [DONE]`.
    pub fn is_done(&self) -> bool {
        self.data.trim() == "[DONE]"
    }
}

/// Why a stream is unfinished when it carried nothing at all (see [`StreamEnd::Unfinished`]).
pub const NO_DATA: &str = "the stream ended before any data";

/// How a streamed answer ended.
#[derive(Debug)]
pub enum StreamEnd {
    /// The answer arrived whole.
    Complete(super::ChatResponse),
    /// The stream ended before the answer was whole: empty (llama.cpp-style servers answer a
    /// request over their context window with a 200 and an empty stream), or broken off.
    /// Asked once more without streaming, which gets the whole answer or the real error.
    Unfinished {
        /// Whether some of its text already reached the sink.
        streamed: bool,
        why: String,
    },
}

/// Before asking again without streaming: logs why, and gives the sink the whole answer may go
/// to. Text already streamed stays in the live view until the reply replaces it, so after any
/// the sink hears nothing more, or the start would show twice.
pub(crate) fn resume_sink<'a>(
    provider: &str,
    streamed: bool,
    why: &str,
    sink: Option<super::TextSink<'a>>,
) -> Option<super::TextSink<'a>> {
    tracing::warn!(provider, why, "the streamed answer ended unfinished; asking once more without streaming");
    if streamed { None } else { sink }
}

/// The stream sent a line or an event larger than the parser accepts.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("server-sent event larger than {0} bytes")]
pub(crate) struct SseTooLarge(pub usize);

/// Bound on one pending line or event, so a server that never sends a newline cannot make us
/// buffer without limit.
const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// Feed it chunks with [`SseParser::push`]; call [`SseParser::finish`] at end of stream.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    /// Bytes of the current, unfinished line (kept as bytes so a split UTF-8 character is
    /// decoded only once whole).
    line: Vec<u8>,
    /// The previous chunk ended with `\r`: a `\n` at the start of the next one belongs to it.
    after_cr: bool,
    event: SseEvent,
    has_data: bool,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Consumes one chunk and returns the events it completed.
    pub fn push(&mut self, mut chunk: &[u8]) -> Result<Vec<SseEvent>, SseTooLarge> {
        let mut events = Vec::new();
        while let Some(&first) = chunk.first() {
            if std::mem::take(&mut self.after_cr) && first == b'\n' {
                chunk = &chunk[1..];
                continue;
            }
            // Whole runs of a line at once: a stream is thousands of bytes per answer.
            let end = chunk.iter().position(|&byte| byte == b'\n' || byte == b'\r');
            let (part, rest) = chunk.split_at(end.unwrap_or(chunk.len()));
            self.line.extend_from_slice(part);
            self.check_size()?;
            let Some((&ending, rest)) = rest.split_first() else { break };
            chunk = rest;
            self.after_cr = ending == b'\r';
            // The line's buffer is kept for the next line.
            let line = std::mem::take(&mut self.line);
            if let Some(event) = self.process_line(&line) {
                events.push(event);
            }
            self.line = line;
            self.line.clear();
            self.check_size()?;
        }
        Ok(events)
    }

    fn check_size(&self) -> Result<(), SseTooLarge> {
        match self.line.len() + self.event.data.len() > MAX_EVENT_BYTES {
            true => Err(SseTooLarge(MAX_EVENT_BYTES)),
            false => Ok(()),
        }
    }

    /// End of stream: returns an event whose terminating blank line never came (servers
    /// that close right after the last `data:` line).
    pub fn finish(&mut self) -> Option<SseEvent> {
        let line = std::mem::take(&mut self.line);
        if !line.is_empty() {
            // The completed line cannot dispatch: only a blank line does.
            let _ = self.process_line(&line);
        }
        self.dispatch()
    }

    fn process_line(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line[0] == b':' {
            return None;
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_ref(), ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.event.data.push('\n');
                }
                self.event.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event.event = Some(value.to_owned()),
            // The spec ignores ids containing NUL.
            "id" if !value.contains('\0') => self.event.id = Some(value.to_owned()),
            // `retry:` and unknown fields are ignored, as the spec says.
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = std::mem::take(&mut self.event);
        // An event with no data line is not dispatched (spec), e.g. a lone `event:` line.
        std::mem::take(&mut self.has_data).then_some(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(events: &[SseEvent]) -> Vec<&str> {
        events.iter().map(|e| e.data.as_str()).collect()
    }

    fn parse_chunks(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        for chunk in chunks {
            events.extend(parser.push(chunk).unwrap());
        }
        events.extend(parser.finish());
        events
    }

    #[test]
    fn single_events() {
        let events = parse_chunks(&[b"data: {\"a\":1}\n\ndata: [DONE]\n\n"]);
        assert_eq!(data(&events), ["{\"a\":1}", "[DONE]"]);
        assert!(!events[0].is_done());
        assert!(events[1].is_done());
    }

    #[test]
    fn data_line_split_across_chunks() {
        let events = parse_chunks(&[b"da", b"ta: hel", b"lo\n", b"\n", b"data: x\n\n"]);
        assert_eq!(data(&events), ["hello", "x"]);
    }

    #[test]
    fn every_split_point_gives_the_same_events() {
        let input: &[u8] = b": ping\r\nevent: msg\r\ndata: one\r\ndata: two\r\n\r\ndata: \xc3\xa9t\xc3\xa9\r\n\r\n";
        let whole = parse_chunks(&[input]);
        assert_eq!(data(&whole), ["one\ntwo", "été"]);
        for split in 0..input.len() {
            let (a, b) = input.split_at(split);
            assert_eq!(parse_chunks(&[a, b]), whole, "split at {split}");
        }
        let bytewise: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(parse_chunks(&bytewise), whole);
    }

    #[test]
    fn multi_line_data_joined_with_newline() {
        let events = parse_chunks(&[b"data: a\ndata:b\ndata:  c\n\n"]);
        assert_eq!(data(&events), ["a\nb\n c"]);
    }

    #[test]
    fn comments_and_blank_lines_alone_dispatch_nothing() {
        let events = parse_chunks(&[b": keep-alive\n\n\n: another\n\nevent: x\n\n"]);
        assert!(events.is_empty());
    }

    #[test]
    fn crlf_and_lone_cr_line_endings() {
        let events = parse_chunks(&[b"data: a\r", b"\n\r", b"\ndata: b\r\rdata: c\n\n"]);
        assert_eq!(data(&events), ["a", "b", "c"]);
    }

    #[test]
    fn event_and_id_fields() {
        let events = parse_chunks(&[b"event: delta\nid: 7\ndata: x\n\ndata: y\n\n"]);
        assert_eq!(events[0], SseEvent { event: Some("delta".into()), data: "x".into(), id: Some("7".into()) });
        // Event type and id do not leak into the next event.
        assert_eq!(events[1], SseEvent { event: None, data: "y".into(), id: None });
    }

    #[test]
    fn field_without_colon_and_empty_data() {
        let events = parse_chunks(&[b"data\n\ndata:\n\n"]);
        assert_eq!(data(&events), ["", ""]);
    }

    #[test]
    fn unterminated_last_event_is_flushed_by_finish() {
        let events = parse_chunks(&[b"data: first\n\ndata: last"]);
        assert_eq!(data(&events), ["first", "last"]);
    }

    #[test]
    fn endless_line_is_refused() {
        let mut parser = SseParser::new();
        let chunk = vec![b'x'; 1024 * 1024];
        let result = (0..20).try_for_each(|_| parser.push(&chunk).map(drop));
        assert_eq!(result, Err(SseTooLarge(MAX_EVENT_BYTES)));
    }
}
