//! The calls a fake received, in order, with a count tests can wait on.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

use super::lock;

/// How a call is listed when a wait for calls times out.
pub(crate) trait Describe {
    fn describe(&self) -> String;
}

pub(crate) struct CallLog<C> {
    calls: Mutex<Vec<C>>,
    /// Calls recorded over the fake's life, forgotten ones included.
    recorded: watch::Sender<usize>,
}

impl<C: Clone> CallLog<C> {
    pub(crate) fn new() -> Self {
        Self { calls: Mutex::new(Vec::new()), recorded: watch::Sender::new(0) }
    }

    /// Appends a call; returns its number, counted from 1 over the fake's life.
    pub(crate) fn record(&self, call: C) -> usize {
        let mut calls = lock(&self.calls);
        calls.push(call);
        // Under the lock, so that numbers follow the order of the log.
        let mut number = 0;
        self.recorded.send_modify(|count| {
            *count += 1;
            number = *count;
        });
        number
    }

    /// Every call still held, in order.
    pub(crate) fn all(&self) -> Vec<C> {
        lock(&self.calls).clone()
    }

    /// Looks at the calls without copying them.
    pub(crate) fn with<R>(&self, read: impl FnOnce(&[C]) -> R) -> R {
        read(&lock(&self.calls))
    }

    /// The calls that `wanted` picks, in order.
    pub(crate) fn matching(&self, wanted: impl Fn(&C) -> bool) -> Vec<C> {
        self.with(|calls| calls.iter().filter(|call| wanted(call)).cloned().collect())
    }

    /// Drops the calls held; the count keeps growing.
    pub(crate) fn forget(&self) {
        lock(&self.calls).clear();
    }

    /// Waits until `n` calls were recorded in all or `timeout` passed.
    pub(crate) async fn wait_for_count(&self, n: usize, timeout: Duration) {
        let mut recorded = self.recorded.subscribe();
        let _ = tokio::time::timeout(timeout, recorded.wait_for(|count| *count >= n)).await;
    }

    /// Waits until `n` calls that `wanted` picks were recorded; panics on timeout, listing every
    /// call, with `fake` and `what` saying which were wanted.
    pub(crate) async fn wait_for(
        &self,
        (fake, what): (&str, &str),
        wanted: impl Fn(&C) -> bool,
        n: usize,
        timeout: Duration,
    ) -> Vec<C>
    where
        C: Describe,
    {
        let mut recorded = self.recorded.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let calls = self.matching(&wanted);
            if calls.len() >= n {
                return calls;
            }
            if tokio::time::timeout_at(deadline, recorded.changed()).await.is_err() {
                let mut report =
                    format!("{fake}: wanted {n} `{what}` call(s) within {timeout:?}, got {}. All calls:", calls.len());
                for (index, call) in self.all().iter().enumerate() {
                    report.push_str(&format!("\n  #{index} {}", call.describe()));
                }
                panic!("{report}");
            }
        }
    }
}
