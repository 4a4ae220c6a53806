//! A gap in a room's timeline: more happened in a room than one sync response carries (the
//! homeserver sends the newest few events and marks the timeline `limited`), as after the
//! daemon was down while a group talked. The gap's events are read back with `/messages`, from
//! the response's `prev_batch` back to where the previous sync ended, so a mention in it is
//! still answered and the talk around it is still context.

use matrix_sdk::Room;
use matrix_sdk::deserialized_responses::TimelineEvent;
use matrix_sdk::room::MessagesOptions;
use matrix_sdk::ruma::UInt;

/// Events read back per request.
const PAGE: u32 = 100;
/// Events read back per gap at most: a bound for a room flooded while the daemon was down.
const MOST: usize = 1000;

/// The events of the gap before `prev_batch`, back to `since`, oldest first. What cannot be
/// read (the request fails, or the gap is larger than [`MOST`]) is logged and left out.
pub(crate) async fn read_gap(room: &Room, prev_batch: &str, since: &str) -> Vec<TimelineEvent> {
    let mut events = Vec::new();
    let mut from = prev_batch.to_owned();
    loop {
        let mut options = MessagesOptions::backward();
        options.from = Some(from);
        options.to = Some(since.to_owned());
        options.limit = UInt::from(PAGE);
        let page = match room.messages(options).await {
            Ok(page) => page,
            Err(err) => {
                tracing::warn!(room = %room.room_id(), %err, read = events.len(), "cannot read back a gap in a Matrix room; its older messages are not answered");
                break;
            }
        };
        let last_page = page.chunk.is_empty();
        events.extend(page.chunk);
        if events.len() >= MOST {
            tracing::warn!(room = %room.room_id(), read = events.len(), "a gap of more than {MOST} events in a Matrix room; older messages are not answered");
            break;
        }
        match page.end {
            Some(end) if !last_page => from = end,
            _ => break,
        }
    }
    events.reverse();
    if !events.is_empty() {
        tracing::info!(room = %room.room_id(), events = events.len(), "read back a gap in a Matrix room's timeline");
    }
    events
}
