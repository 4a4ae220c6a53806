//! A run's time limit that stands still while the run waits for a person (an approver): the
//! wait is the owner's time, not the run's, so `agent.run_timeout_secs` counts only the rest.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Shared by the worker, which waits for the limit, and the tools, which pause it.
#[derive(Debug, Clone, Default)]
pub struct RunClock(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    state: Mutex<State>,
    changed: Notify,
}

#[derive(Debug, Default)]
struct State {
    /// Time spent paused so far, added to the limit.
    paused_for: Duration,
    /// Since when it is paused, and by how many waits at once.
    paused_since: Option<Instant>,
    pauses: usize,
}

/// Holds the clock still until dropped.
#[derive(Debug)]
pub struct Pause(RunClock);

impl RunClock {
    /// Stops the clock until the returned guard is dropped.
    pub fn pause(&self) -> Pause {
        let mut state = self.0.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.pauses += 1;
        state.paused_since.get_or_insert_with(Instant::now);
        drop(state);
        self.0.changed.notify_waiters();
        Pause(self.clone())
    }

    /// Resolves when `limit` of unpaused time has passed since `started`.
    pub async fn expired(&self, started: Instant, limit: Duration) {
        loop {
            let changed = self.0.changed.notified();
            let deadline = {
                let state = self.0.state.lock().unwrap_or_else(PoisonError::into_inner);
                state.paused_since.is_none().then(|| started + limit + state.paused_for)
            };
            match deadline {
                Some(deadline) => tokio::select! {
                    () = tokio::time::sleep_until(deadline) => return,
                    () = changed => {}
                },
                None => changed.await,
            }
        }
    }
}

impl Drop for Pause {
    fn drop(&mut self) {
        let mut state = self.0.0.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.pauses = state.pauses.saturating_sub(1);
        if state.pauses == 0
            && let Some(since) = state.paused_since.take()
        {
            state.paused_for += since.elapsed();
        }
        drop(state);
        self.0.0.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_pause_moves_the_limit_by_its_length() {
        let clock = RunClock::default();
        let started = Instant::now();
        let waiting = tokio::spawn({
            let clock = clock.clone();
            async move {
                clock.expired(started, Duration::from_secs(10)).await;
                started.elapsed()
            }
        });
        tokio::time::sleep(Duration::from_secs(4)).await;
        let pause = clock.pause();
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(!waiting.is_finished(), "the limit passed while paused");
        drop(pause);
        let took = waiting.await.unwrap();
        assert_eq!(took.as_secs(), 40, "10 s of run time and 30 s paused");
    }
}
