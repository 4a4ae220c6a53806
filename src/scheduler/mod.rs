//! Work switchboard starts by itself, on a clock: heartbeat wake-ups.

pub mod heartbeat;
