//! Retrying Discord REST calls: rate limits (429), server errors and network failures.
//!
//! With a proxy, serenity's ratelimiter is off and a 429 reaches us as an unsuccessful request
//! without `retry_after` (serenity keeps neither the headers nor, as the 429 body has no
//! `code`, the body). So 429s, 5xx answers and network errors are all retried the same way:
//! exponential backoff from 1 s, capped, a bounded number of times. Without a proxy serenity
//! waits out 429s itself and this only sees the rest. Every other 4xx (50001 Missing Access,
//! 50013 Missing Permissions, 10003 Unknown Channel, …) is final and returned at once.

use std::future::Future;
use std::time::Duration;

use serenity::Error;
use serenity::http::HttpError;
use tokio_util::sync::CancellationToken;

/// How long and how often a call is retried.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryPolicy {
    /// The first backoff; doubled after each further failure.
    pub first_backoff: Duration,
    pub max_backoff: Duration,
    /// Attempts in all before giving up (1 s + 2 s + 4 s + 8 s + 16 s of waiting by default).
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
    /// Rate limited, a server error or no answer: worth another try after a backoff.
    Transient,
    /// Repeating the call cannot help.
    Final,
}

/// Sorts a serenity error into a [`Verdict`].
pub(crate) fn classify(err: &Error) -> Verdict {
    match err {
        Error::Http(HttpError::UnsuccessfulRequest(response)) => {
            let status = response.status_code;
            if status.as_u16() == 429 || status.is_server_error() { Verdict::Transient } else { Verdict::Final }
        }
        Error::Http(HttpError::Request(_)) | Error::Io(_) => Verdict::Transient,
        _ => Verdict::Final,
    }
}

/// A short description for log lines: status, Discord's code and message. It never contains
/// the token (which only travels in a header) nor request URLs.
pub(crate) fn describe(err: &Error) -> String {
    match err {
        Error::Http(HttpError::UnsuccessfulRequest(response)) => {
            let json = &response.error;
            format!("HTTP {} (code {}): {}", response.status_code.as_u16(), json.code, json.message)
        }
        Error::Http(HttpError::Request(source)) => {
            let text = source.to_string();
            format!("network error: {}", text.split(" for url (").next().unwrap_or_default())
        }
        other => other.to_string(),
    }
}

/// Why a message could not be sent.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    /// Discord refused the call; repeating it cannot help (access, permissions, unknown channel).
    #[error("Discord refused {what}: {detail}")]
    Refused { what: &'static str, detail: String },
    /// Retries were used up, or shutdown interrupted them: try again later.
    #[error("Discord unavailable for {what}: {detail}")]
    Unavailable { what: &'static str, detail: String },
}

/// Calls `call` until it succeeds, fails for good or `policy`'s retries are used up (see the
/// module docs). Cancelling `shutdown` ends any wait.
pub(crate) async fn with_retry<T, F, Fut>(
    policy: &RetryPolicy,
    what: &'static str,
    shutdown: &CancellationToken,
    mut call: F,
) -> Result<T, SendError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let mut failures = 0u32;
    loop {
        let err = match call().await {
            Ok(value) => return Ok(value),
            Err(err) => err,
        };
        let detail = describe(&err);
        if classify(&err) == Verdict::Final {
            return Err(SendError::Refused { what, detail });
        }
        failures += 1;
        if failures >= policy.max_attempts || shutdown.is_cancelled() {
            return Err(SendError::Unavailable { what, detail });
        }
        let wait = policy.backoff(failures);
        tracing::warn!(what, attempt = failures, wait_ms = wait.as_millis() as u64, error = %detail, "Discord call failed; retrying");
        tokio::select! {
            _ = shutdown.cancelled() => return Err(SendError::Unavailable { what, detail }),
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

    /// A call failing with `io` errors (transient) `transient` times, or once with a final error.
    fn scripted(
        transient: u32,
        final_error: bool,
    ) -> (Arc<AtomicU32>, impl FnMut() -> std::future::Ready<Result<u32, Error>>) {
        let calls = Arc::new(AtomicU32::new(0));
        let counter = Arc::clone(&calls);
        let call = move || {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            std::future::ready(if final_error {
                Err(Error::Other("refused"))
            } else if n < transient {
                Err(Error::Io(std::io::Error::other("connection reset")))
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

    #[tokio::test]
    async fn final_errors_are_returned_at_once() {
        let (calls, call) = scripted(0, true);
        let result = with_retry(&fast_policy(), "test", &CancellationToken::new(), call).await;
        assert!(matches!(result, Err(SendError::Refused { .. })));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
