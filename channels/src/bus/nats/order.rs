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

use async_nats::header;
use async_nats::jetstream::stream::{DeleteMessageErrorKind, RawMessageErrorKind};
use async_nats::jetstream::{self, ErrorCode};

use crate::bus::{BusError, StoredInbound};

/// The first message stored on `subject` at or after `from`, `None` when there is none.
pub(super) async fn first_stored(
    js: &jetstream::Context,
    stream: &str,
    subject: &str,
    from: u64,
) -> Result<Option<StoredInbound>, BusError> {
    let failed = |reason: String| BusError::Receive(format!("looking up the oldest message on {subject}: {reason}"));
    let stream = js.get_stream_no_info(stream).await.map_err(|err| failed(err.to_string()))?;
    match stream.get_first_raw_message_by_subject(subject, from.max(1)).await {
        Ok(message) => {
            let id = message.headers.get(header::NATS_MESSAGE_ID).map(|id| id.as_str().to_owned());
            Ok(Some(StoredInbound { seq: message.sequence, id }))
        }
        Err(err) if matches!(err.kind(), RawMessageErrorKind::NoMessageFound) => Ok(None),
        Err(err) => Err(failed(err.to_string())),
    }
}

/// Deletes the message at `seq`; one already gone is no error.
pub(super) async fn discard(js: &jetstream::Context, stream: &str, seq: u64) -> Result<(), BusError> {
    let failed = |reason: String| BusError::Ack(format!("removing inbound message {seq}: {reason}"));
    let stream = js.get_stream_no_info(stream).await.map_err(|err| failed(err.to_string()))?;
    match stream.delete_message(seq).await {
        Ok(_) => Ok(()),
        Err(err) => match err.kind() {
            // nats-server 2.9 answers a delete of a message already gone in one of two ways:
            // 10043, "sequence N not found" (its worker's ack removed it between our lookup and
            // this delete), or 10057, "no message found"; other failures of a delete carry
            // 10057 with another text.
            DeleteMessageErrorKind::JetStream(error)
                if error.error_code() == ErrorCode::SEQUENCE_NOT_FOUND
                    || (error.error_code() == ErrorCode::STREAM_MESSAGE_DELETE_FAILED
                        && error.to_string().contains("no message found")) =>
            {
                Ok(())
            }
            _ => Err(failed(err.to_string())),
        },
    }
}
