//! Retrying Bot API calls: flood control (429) and transient failures, nothing else.
//!
//! A 429 says exactly how long to wait, so it is waited out as often as Telegram asks, within
//! a total budget. Network errors, unreadable answers (a proxy's HTML error page) and 5xx
//! errors are retried with exponential backoff a few times. Everything else (bad request,
//! blocked, chat not found) is the caller's to handle and is returned at once.
//!
//! teloxide-core itself already sleeps 10 s before returning the error of an HTTP 5xx answer,
//! so a 5xx costs that much per attempt on top of the backoff here.

use std::future::Future;
use std::time::Duration;

use teloxide::{ApiError, RequestError};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long and how often a call is retried.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryPolicy {
    /// The first backoff after a transient failure; doubled on each further one.
    pub first_backoff: Duration,
    pub max_backoff: Duration,
    /// Attempts in all when calls fail transiently (429s do not count).
    pub max_transient_attempts: u32,
    /// No wait starts once this much time has passed since the first attempt.
    pub total_budget: Duration,
}

impl RetryPolicy {
    pub(crate) const DEFAULT: RetryPolicy = RetryPolicy {
        first_backoff: Duration::from_millis(500),
        max_backoff: Duration::from_secs(30),
        max_transient_attempts: 6,
        total_budget: Duration::from_secs(600),
    };

    fn backoff(&self, transient_failures: u32) -> Duration {
        let factor = 2u32.saturating_pow(transient_failures.saturating_sub(1));
        self.first_backoff.saturating_mul(factor).min(self.max_backoff)
    }
}

/// What to do about a failed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Flood control: wait this long, then the call may be repeated.
    WaitFor(Duration),
    /// Worth another try after a backoff.
    Transient,
    /// Repeating the call cannot help.
    Final,
}

/// Sorts a Bot API error into [`Verdict`]s.
pub(crate) fn classify(err: &RequestError) -> Verdict {
    match err {
        RequestError::RetryAfter(seconds) => Verdict::WaitFor(seconds.duration()),
        RequestError::Network(_) | RequestError::Io(_) | RequestError::InvalidJson { .. } => Verdict::Transient,
        RequestError::Api(api) if is_server_error(api) => Verdict::Transient,
        RequestError::Api(_) | RequestError::MigrateToChatId(_) => Verdict::Final,
    }
}

/// teloxide-core drops `error_code`: a `{"ok":false,"error_code":502,"description":"Bad Gateway"}`
/// becomes `ApiError::Unknown("Bad Gateway")`, so 5xx answers are recognised by their
/// description (the HTTP reason phrases Telegram and proxies use).
fn is_server_error(err: &ApiError) -> bool {
    const SERVER_ERRORS: [&str; 4] = ["internal server error", "bad gateway", "service unavailable", "gateway timeout"];
    match err {
        ApiError::Unknown(description) => {
            let description = description.to_ascii_lowercase();
            SERVER_ERRORS.iter().any(|phrase| description.starts_with(phrase))
        }
        _ => false,
    }
}

/// A description of the error that never contains the bot token: reqwest's errors end with
/// ` for url (…/bot<token>/…)`, which is cut off, and raw answers are shortened.
pub(crate) fn describe(err: &RequestError) -> String {
    match err {
        RequestError::Network(source) => {
            let text = source.to_string();
            let text = text.split(" for url (").next().unwrap_or_default();
            let mut described = format!("network error: {text}");
            let mut cause = std::error::Error::source(source.as_ref());
            while let Some(inner) = cause {
                described.push_str(": ");
                described.push_str(&inner.to_string());
                cause = inner.source();
            }
            described
        }
        RequestError::InvalidJson { source, raw } => {
            let raw: String = raw.chars().take(120).collect();
            format!("unreadable answer ({source}): {raw:?}")
        }
        other => other.to_string(),
    }
}

/// Calls `call` until it succeeds, fails for good, or the retries are used up (see the module
/// docs); returns the last result. Cancelling `shutdown` ends any wait with the last error.
pub(crate) async fn with_retry<T, F, Fut>(what: &str, shutdown: &CancellationToken, call: F) -> Result<T, RequestError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, RequestError>>,
{
    with_retry_policy(&RetryPolicy::DEFAULT, what, shutdown, call).await
}

/// [`with_retry`] with an explicit policy.
pub(crate) async fn with_retry_policy<T, F, Fut>(
    policy: &RetryPolicy,
    what: &str,
    shutdown: &CancellationToken,
    mut call: F,
) -> Result<T, RequestError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, RequestError>>,
{
    let started = Instant::now();
    let mut attempt = 0u32;
    let mut transient_failures = 0u32;
    loop {
        attempt += 1;
        let err = match call().await {
            Ok(value) => return Ok(value),
            Err(err) => err,
        };
        let wait = match classify(&err) {
            Verdict::Final => return Err(err),
            Verdict::WaitFor(wait) => {
                crate::meters::meters().told_to_wait("telegram");
                wait
            }
            Verdict::Transient => {
                transient_failures += 1;
                if transient_failures >= policy.max_transient_attempts {
                    return Err(err);
                }
                policy.backoff(transient_failures)
            }
        };
        if started.elapsed() + wait > policy.total_budget || shutdown.is_cancelled() {
            return Err(err);
        }
        tracing::warn!(what, attempt, wait_ms = wait.as_millis() as u64, error = %describe(&err), "Telegram call failed; retrying");
        tokio::select! {
            _ = shutdown.cancelled() => return Err(err),
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use teloxide::types::Seconds;

    use super::*;

    fn fast_policy() -> RetryPolicy {
        RetryPolicy {
            first_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(4),
            max_transient_attempts: 4,
            total_budget: Duration::from_secs(5),
        }
    }

    /// A call that fails with the given errors in turn, then succeeds with the attempt number.
    fn scripted(
        errors: Vec<RequestError>,
    ) -> (Arc<AtomicU32>, impl FnMut() -> std::future::Ready<Result<u32, RequestError>>) {
        let calls = Arc::new(AtomicU32::new(0));
        let counter = Arc::clone(&calls);
        let call = move || {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            std::future::ready(match errors.get(n as usize) {
                Some(err) => Err(err.clone()),
                None => Ok(n + 1),
            })
        };
        (calls, call)
    }

    fn bad_gateway() -> RequestError {
        RequestError::Api(ApiError::Unknown("Bad Gateway".into()))
    }

    #[test]
    fn errors_are_classified() {
        assert_eq!(
            classify(&RequestError::RetryAfter(Seconds::from_seconds(3))),
            Verdict::WaitFor(Duration::from_secs(3))
        );
        assert_eq!(classify(&bad_gateway()), Verdict::Transient);
        assert_eq!(
            classify(&RequestError::Api(ApiError::Unknown("Internal Server Error: restart".into()))),
            Verdict::Transient
        );
        assert_eq!(classify(&RequestError::Api(ApiError::BotBlocked)), Verdict::Final);
        assert_eq!(classify(&RequestError::Api(ApiError::Unknown("Bad Request: odd".into()))), Verdict::Final);
        let io = RequestError::Io(Arc::new(std::io::Error::other("disk")));
        assert_eq!(classify(&io), Verdict::Transient);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let policy = RetryPolicy::DEFAULT;
        let waits: Vec<u64> = (1..=8).map(|n| policy.backoff(n).as_millis() as u64).collect();
        assert_eq!(waits, [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000]);
    }

    #[tokio::test]
    async fn transient_errors_are_retried_until_success() {
        let (calls, call) = scripted(vec![bad_gateway(), bad_gateway()]);
        let result = with_retry_policy(&fast_policy(), "test", &CancellationToken::new(), call).await;
        assert_eq!(result.ok(), Some(3));
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn transient_errors_give_up_after_the_attempt_limit() {
        let (calls, call) = scripted(vec![bad_gateway(); 10]);
        let result = with_retry_policy(&fast_policy(), "test", &CancellationToken::new(), call).await;
        assert!(matches!(result, Err(RequestError::Api(ApiError::Unknown(_)))));
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn final_errors_are_returned_at_once() {
        let (calls, call) = scripted(vec![RequestError::Api(ApiError::ChatNotFound)]);
        let result = with_retry_policy(&fast_policy(), "test", &CancellationToken::new(), call).await;
        assert!(matches!(result, Err(RequestError::Api(ApiError::ChatNotFound))));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn flood_control_waits_as_told_and_does_not_count_as_an_attempt() {
        let mut errors = vec![RequestError::RetryAfter(Seconds::from_seconds(0)); 6];
        errors.push(bad_gateway());
        let (calls, call) = scripted(errors);
        let result = with_retry_policy(&fast_policy(), "test", &CancellationToken::new(), call).await;
        assert_eq!(result.ok(), Some(8));
        assert_eq!(calls.load(Ordering::SeqCst), 8);
    }

    #[tokio::test]
    async fn flood_control_waits_the_full_retry_after() {
        let (_, call) = scripted(vec![RequestError::RetryAfter(Seconds::from_seconds(1))]);
        let started = std::time::Instant::now();
        let result = with_retry_policy(&fast_policy(), "test", &CancellationToken::new(), call).await;
        assert_eq!(result.ok(), Some(2));
        assert!(started.elapsed() >= Duration::from_secs(1));
    }

    #[tokio::test]
    async fn a_wait_beyond_the_budget_is_not_started() {
        let (calls, call) = scripted(vec![RequestError::RetryAfter(Seconds::from_seconds(60))]);
        let result = with_retry_policy(&fast_policy(), "test", &CancellationToken::new(), call).await;
        assert!(matches!(result, Err(RequestError::RetryAfter(_))));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn shutdown_ends_the_wait() {
        let shutdown = CancellationToken::new();
        let (calls, call) = scripted(vec![RequestError::RetryAfter(Seconds::from_seconds(3)); 3]);
        let stopper = shutdown.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            stopper.cancel();
        });
        let started = std::time::Instant::now();
        let result = with_retry_policy(&RetryPolicy::DEFAULT, "test", &shutdown, call).await;
        assert!(matches!(result, Err(RequestError::RetryAfter(_))));
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn descriptions_do_not_carry_raw_pages_in_full() {
        let raw: Box<str> = format!("<html>{}</html>", "x".repeat(1000)).into();
        let source = Arc::new(serde_json::from_str::<u8>("<").unwrap_err());
        let described = describe(&RequestError::InvalidJson { source, raw });
        assert!(described.len() < 300, "{described}");
    }
}
