//! What the worker's parts pass each other: a message waiting for its turn, and the handles
//! that control a running turn.

use switchboard_channels::contract::InboundMessage;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::keepalive::Held;
use crate::agent::SteerReceiver;
use crate::store::SessionHead;

/// A message taken from the bus and decoded, waiting for its session's turn.
pub(super) struct Job {
    pub msg: InboundMessage,
    pub held: Held,
    /// Arrival order across the worker: `/stop` drops only what arrived before it.
    pub seq: u64,
    /// When the worker took it: debouncing waits for quiet after the newest of a burst.
    pub arrived: Instant,
    pub _slot: OwnedSemaphorePermit,
}

/// What a session's running turn is controlled by.
pub(super) struct Control<'a> {
    pub cancel: &'a CancellationToken,
    pub steer: &'a mut SteerReceiver,
    /// What the chat chose for its session (`/model`, `/verbose`).
    pub choices: Choices,
    /// The session's head as its task read it on start, for a first turn that started at once.
    pub head: Option<SessionHead>,
}

/// A session's `/model` and `/verbose` choices, as its task knows them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Choices {
    /// The chain entry to ask first; `None` = the chain's order.
    pub model: Option<String>,
    /// Progress messages while tools run.
    pub verbose: bool,
}
