//! Counts of what a long-running part keeps in memory (sessions, queues, dedupe windows,
//! caches), so that the metrics endpoint and the soak can show each one stays bounded however
//! long the process runs.

/// How many things of one kind a part holds right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gauge {
    /// The metric's name without the `switchboard_` prefix: lowercase words joined by `_`.
    pub name: &'static str,
    /// What is counted and what bounds it, in one line.
    pub help: &'static str,
    pub value: u64,
}

impl Gauge {
    pub fn new(name: &'static str, help: &'static str, count: usize) -> Self {
        Self { name, help, value: u64::try_from(count).unwrap_or(u64::MAX) }
    }
}
