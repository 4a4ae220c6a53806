//! The NATS JetStream bus (to be written).
