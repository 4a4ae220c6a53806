//! Which inbound message of a chat comes first.
//!
//! The inbound stream is a work queue: an acked message is gone from it. So the oldest message
//! still stored on a chat's subject is the one that must be answered next, whether it waits,
//! runs at some worker, or waits to be redelivered because the worker that had it died. A
//! worker asks before running a message; if an older one is still stored it leaves this one
//! for later (see the worker's intake). This holds for any number of workers, and across
//! crashes, where JetStream's own delivery order does not: a redelivery after `ack_wait` comes
//! after messages delivered in the meantime.
//!
//! The lookup is the stream's "get message" request (`next_by_subj`), answered by the stream
//! leader, so it sees acks the moment they are made (a direct get may be served by a replica
//! that lags behind).

use async_nats::jetstream::{self, stream::RawMessageErrorKind};

use crate::bus::BusError;

/// The stream sequence of the first message stored on `subject` at or after `from`, `None`
/// when there is none.
pub(super) async fn first_stored(
    js: &jetstream::Context,
    stream: &str,
    subject: &str,
    from: u64,
) -> Result<Option<u64>, BusError> {
    let failed = |reason: String| BusError::Receive(format!("looking up the oldest message on {subject}: {reason}"));
    let stream = js.get_stream_no_info(stream).await.map_err(|err| failed(err.to_string()))?;
    match stream.get_first_raw_message_by_subject(subject, from.max(1)).await {
        Ok(message) => Ok(Some(message.sequence)),
        Err(err) if matches!(err.kind(), RawMessageErrorKind::NoMessageFound) => Ok(None),
        Err(err) => Err(failed(err.to_string())),
    }
}
