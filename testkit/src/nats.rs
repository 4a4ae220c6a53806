//! An isolated nats-server per test (to be written).
