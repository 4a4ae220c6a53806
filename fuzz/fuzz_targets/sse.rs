//! The SSE parser, fed arbitrary bytes: whole, split in two at every boundary, and byte by byte,
//! it dispatches the same events, and those are the events a line-by-line reading of the
//! event-stream rules gives.

#![no_main]

use libfuzzer_sys::fuzz_target;
use switchboard::fuzzing::{SseEvent, sse_events};

/// A straightforward reading of the rules the parser follows (see src/provider/sse.rs).
fn reference(stream: &[u8]) -> Vec<SseEvent> {
    let mut events = Vec::new();
    let mut event = SseEvent { event: None, data: String::new(), id: None };
    let mut has_data = false;
    let mut lines: Vec<&[u8]> = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < stream.len() {
        match stream[i] {
            b'\r' | b'\n' => {
                lines.push(&stream[start..i]);
                i += if stream[i] == b'\r' && stream.get(i + 1) == Some(&b'\n') { 2 } else { 1 };
                start = i;
            }
            _ => i += 1,
        }
    }
    let unterminated = &stream[start..];
    let dispatch = |event: &mut SseEvent, has_data: &mut bool, events: &mut Vec<SseEvent>| {
        let taken = std::mem::replace(event, SseEvent { event: None, data: String::new(), id: None });
        if std::mem::take(has_data) {
            events.push(taken);
        }
    };
    for line in lines.iter().copied().chain((!unterminated.is_empty()).then_some(unterminated)) {
        if line.is_empty() {
            dispatch(&mut event, &mut has_data, &mut events);
            continue;
        }
        if line[0] == b':' {
            continue;
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.find(':') {
            Some(at) => (&line[..at], line[at + 1..].strip_prefix(' ').unwrap_or(&line[at + 1..])),
            None => (&line[..], ""),
        };
        match field {
            "data" => {
                if has_data {
                    event.data.push('\n');
                }
                event.data.push_str(value);
                has_data = true;
            }
            "event" => event.event = Some(value.to_owned()),
            "id" if !value.contains('\0') => event.id = Some(value.to_owned()),
            _ => {}
        }
    }
    dispatch(&mut event, &mut has_data, &mut events);
    events
}

fuzz_target!(|stream: &[u8]| {
    let whole = sse_events([stream]).expect("small streams are within the bound");
    assert_eq!(whole, reference(stream), "parser and reference differ");
    for split in 0..=stream.len() {
        let (a, b) = stream.split_at(split);
        assert_eq!(sse_events([a, b]).as_ref(), Ok(&whole), "split at {split} changed the events");
    }
    assert_eq!(sse_events(stream.chunks(1)).as_ref(), Ok(&whole), "byte-by-byte feeding changed the events");
});
