//! switchboard's bus contract, the [`bus::Bus`] trait with its in-process and NATS JetStream
//! implementations, and the channel adapters.

// matrix-sdk's futures nest deeper than the compiler's default limit when spawned.
#![recursion_limit = "256"]

pub mod bus;
pub mod chunking;
pub mod contract;
pub mod control;
pub mod delivery;
pub mod gauge;
pub mod hex;
pub mod media_files;
pub mod meters;
pub mod pairing;
pub mod policy;
pub mod subject;

#[cfg(feature = "api")]
pub mod api;
#[cfg(feature = "discord")]
pub mod discord;
#[cfg(feature = "matrix")]
pub mod matrix;
#[cfg(feature = "telegram")]
pub mod telegram;

pub use bus::{Bus, BusError, BusExt, Deliveries, Delivery};
pub use contract::{InboundMessage, OutboundMessage, RunEvent, RunEventBody};
pub use gauge::Gauge;
