//! The HTTP API channel.
