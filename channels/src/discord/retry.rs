//! Retrying Discord REST calls: rate limits (429), server errors and network failures.
//!
//! A 429 is waited out for as long as Discord says (`retry_after`; a global limit also holds
//! back the adapter's other calls, see [`super::rest`]): calling earlier only earns another
//! 429, and Discord bans clients that collect too many. 5xx answers and network failures are
//! retried with exponential backoff from 1 s, capped. All of them count toward a bounded number
//! of attempts. Every other 4xx (50001 Missing Access, 50013 Missing Permissions, 10003 Unknown
//! Channel, …) is final and returned at once.
//!
//! A retried message create is safe because it carries a nonce with `enforce_nonce` (see
//! [`super::outbound`]): when the first attempt created the message and only its answer was
//! lost, Discord returns that message instead of posting it again.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::rest::RestError;

/// How long and how often a call is retried.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryPolicy {
    /// The first backoff after a server or network error; doubled after each further one.
    pub first_backoff: Duration,
    pub max_backoff: Duration,
    /// Attempts in all before giving up (1 s + 2 s + 4 s + 8 s + 16 s of backoff by default).
    pub max_attempts: u32,
}

impl RetryPolicy {
    pub(crate) const DEFAULT: RetryPolicy =
        RetryPolicy { first_backoff: Duration::from_secs(1), max_backoff: Duration::from_secs(16), max_attempts: 6 };

    fn backoff(&self, failures: u32) -> Duration {
        let factor = 2u32.saturating_pow(failures.saturating_sub(1));
        self.first_backoff.saturating_mul(factor).min(self.max_backoff)
    }
}

/// What to do about a failed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Rate limited: call again after exactly this long, not earlier.
    RetryAfter(Duration),
    /// A server error or no answer: worth another try after a backoff.
    Transient,
    /// Repeating the call cannot help.
    Final,
}

/// Sorts a failed call into a [`Verdict`].
pub(crate) fn classify(err: &RestError) -> Verdict {
    match err {
        RestError::RateLimited { retry_after, .. } => Verdict::RetryAfter(*retry_after),
        RestError::Status { status, .. } if *status >= 500 => Verdict::Transient,
        RestError::Network(_) => Verdict::Transient,
        RestError::Status { .. } | RestError::Unexpected(_) => Verdict::Final,
    }
}

/// Why a message could not be sent.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    /// Discord refused the call; repeating it cannot help (access, permissions, unknown channel).
    #[error("Discord refused {what}: {source}")]
    Refused { what: &'static str, source: RestError },
    /// Retries were used up, or shutdown interrupted them: try again later.
    #[error("Discord unavailable for {what}: {source}")]
    Unavailable { what: &'static str, source: RestError },
    /// A call made once, without retries (typing, drafts: niceties).
    #[error("{what} failed: {source}")]
    Once { what: &'static str, source: RestError },
}

impl SendError {
    /// Repeating the message cannot help.
    pub(crate) fn is_final(&self) -> bool {
        match self {
            SendError::Refused { .. } => true,
            SendError::Unavailable { .. } => false,
            SendError::Once { source, .. } => classify(source) == Verdict::Final,
        }
    }
}

/// Makes one call, without retries.
pub(crate) async fn once<T>(
    what: &'static str,
    call: impl Future<Output = Result<T, RestError>>,
) -> Result<T, SendError> {
    call.await.map_err(|source| SendError::Once { what, source })
}

/// Calls `call` until it succeeds, fails for good or `policy`'s attempts are used up (see the
/// module docs). Cancelling `shutdown` ends any wait.
pub(crate) async fn with_retry<T, F, Fut>(
    policy: &RetryPolicy,
    what: &'static str,
    shutdown: &CancellationToken,
    mut call: F,
) -> Result<T, SendError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, RestError>>,
{
    let (mut attempts, mut failures) = (0u32, 0u32);
    loop {
        let source = match call().await {
            Ok(value) => return Ok(value),
            Err(err) => err,
        };
        attempts += 1;
        let wait = match classify(&source) {
            Verdict::Final => return Err(SendError::Refused { what, source }),
            Verdict::RetryAfter(wait) => wait,
            Verdict::Transient => {
                failures += 1;
                policy.backoff(failures)
            }
        };
        if attempts >= policy.max_attempts || shutdown.is_cancelled() {
            return Err(SendError::Unavailable { what, source });
        }
        tracing::warn!(what, attempt = attempts, wait_ms = wait.as_millis() as u64, error = %source, "Discord call failed; retrying");
        tokio::select! {
            _ = shutdown.cancelled() => return Err(SendError::Unavailable { what, source }),
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn fast_policy() -> RetryPolicy {
        RetryPolicy { first_backoff: Duration::from_millis(1), max_backoff: Duration::from_millis(4), max_attempts: 4 }
    }

    /// A call failing with network errors (transient) `transient` times, or once with a final error.
    fn scripted(
        transient: u32,
        final_error: bool,
    ) -> (Arc<AtomicU32>, impl FnMut() -> std::future::Ready<Result<u32, RestError>>) {
        let calls = Arc::new(AtomicU32::new(0));
        let counter = Arc::clone(&calls);
        let call = move || {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            std::future::ready(if final_error {
                Err(RestError::Status { status: 403, code: 50013, message: "Missing Permissions".into() })
            } else if n < transient {
                Err(RestError::Network("connection reset".into()))
            } else {
                Ok(n + 1)
            })
        };
        (calls, call)
    }

    #[test]
    fn backoff_doubles_from_one_second_up_to_the_cap() {
        let waits: Vec<u64> = (1..=7).map(|n| RetryPolicy::DEFAULT.backoff(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 16, 16]);
    }

    #[tokio::test]
    async fn transient_errors_are_retried_until_success() {
        let (calls, call) = scripted(2, false);
        let result = with_retry(&fast_policy(), "test", &CancellationToken::new(), call).await;
        assert_eq!(result.ok(), Some(3));
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn transient_errors_give_up_after_the_attempt_limit() {
        let (calls, call) = scripted(10, false);
        let result = with_retry(&fast_policy(), "test", &CancellationToken::new(), call).await;
        assert!(matches!(result, Err(SendError::Unavailable { .. })));
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }

    #[test]
    fn rate_limits_wait_as_told_and_only_server_errors_and_network_failures_back_off() {
        let limited = RestError::RateLimited { retry_after: Duration::from_millis(2500), global: false };
        assert_eq!(classify(&limited), Verdict::RetryAfter(Duration::from_millis(2500)));
        let status = |status| RestError::Status { status, code: 0, message: String::new() };
        assert_eq!(classify(&status(502)), Verdict::Transient);
        assert_eq!(classify(&RestError::Network("reset".into())), Verdict::Transient);
        assert_eq!(classify(&status(404)), Verdict::Final);
    }

    #[tokio::test]
    async fn a_rate_limit_is_waited_out_for_its_retry_after_not_a_backoff() {
        let started = std::time::Instant::now();
        let times = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&times);
        let call = move || {
            let mut times = seen.lock().unwrap();
            times.push(started.elapsed());
            let limited = RestError::RateLimited { retry_after: Duration::from_millis(300), global: false };
            std::future::ready(if times.len() == 1 { Err(limited) } else { Ok(()) })
        };
        with_retry(&RetryPolicy::DEFAULT, "test", &CancellationToken::new(), call).await.unwrap();
        let waited = times.lock().unwrap()[1];
        assert!(waited >= Duration::from_millis(300), "retried early: {waited:?}");
        assert!(waited < Duration::from_millis(900), "waited the 1 s backoff instead: {waited:?}");
    }

    #[tokio::test]
    async fn final_errors_are_returned_at_once() {
        let (calls, call) = scripted(0, true);
        let result = with_retry(&fast_policy(), "test", &CancellationToken::new(), call).await;
        assert!(matches!(result, Err(SendError::Refused { .. })));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
