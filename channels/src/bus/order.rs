//! What a bus whose inbound queue is a stream shared by several processes (JetStream) offers
//! its consumers beyond the core [`Bus`](super::Bus): a look at what is still stored, so a
//! worker runs a chat's message only when nothing older of that chat is left elsewhere. That
//! keeps a chat's order across crashes and workers. Buses that deliver in order by themselves
//! do not offer it (see [`Bus::stream_order`](super::Bus::stream_order)).

use async_trait::async_trait;

use super::BusError;

/// An inbound message still stored in the stream (see [`StreamOrder::stored_inbound`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredInbound {
    /// Its position in the stream.
    pub seq: u64,
    /// The id it was published with (the inbound message's id), when it has one.
    pub id: Option<String>,
}

#[async_trait]
pub trait StreamOrder: Send + Sync {
    /// The stream position of the first inbound message at or after position `from` still
    /// stored on `subject` (not acked yet: waiting, in flight at some worker, or waiting to be
    /// redelivered after a crash).
    async fn stored_inbound(&self, subject: &str, from: u64) -> Result<Option<StoredInbound>, BusError>;

    /// Removes the inbound message at stream position `seq`: one whose turn is known to be
    /// done but that the stream still holds (its ack was lost as the server went down), which
    /// would hold its chat up for good. A message already gone is no error.
    async fn discard_inbound(&self, seq: u64) -> Result<(), BusError>;
}
