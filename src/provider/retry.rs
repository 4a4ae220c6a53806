//! Retries with exponential backoff for provider calls.
//!
//! Only transient failures ([`ProviderError::is_transient`]) are retried: a bad request or a
//! context overflow would fail the same way again. A provider's `Retry-After` wins over our
//! own backoff, because it knows its rate-limit window and we do not.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::ProviderError;

/// The longest `Retry-After` we wait for. A provider asking for more (a daily quota, say)
/// will not recover within a chat turn: better to fail now with its message.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// How often and how patiently to retry.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    pub max_retries: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { max_retries: 3, base_delay: Duration::from_millis(500), max_delay: Duration::from_secs(8) }
    }
}

impl RetryPolicy {
    /// The wait before retry number `attempt + 1` when the provider did not ask for one:
    /// `base_delay × 2^attempt`, capped at `max_delay`, minus up to 20 % jitter so that many
    /// workers hit by the same outage do not retry in lockstep.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.min(31));
        let delay = self.base_delay.saturating_mul(factor).min(self.max_delay);
        delay.mul_f64(1.0 - 0.2 * jitter_fraction())
    }
}

/// A number in `[0, 1)` from the clock's nanoseconds: good enough to spread retries, and
/// it needs no random-number crate.
fn jitter_fraction() -> f64 {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    f64::from(nanos % 1_000_000) / 1_000_000.0
}

/// Runs `op` until it succeeds, fails permanently, or retries run out; returns the last error.
pub async fn with_retries<T, F, Fut>(policy: &RetryPolicy, mut op: F) -> Result<T, ProviderError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ProviderError>>,
{
    let mut attempt = 0;
    loop {
        let error = match op().await {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        if !error.is_transient() || attempt >= policy.max_retries {
            return Err(error);
        }
        let delay = match error.retry_after() {
            Some(asked) if asked > MAX_RETRY_AFTER => {
                tracing::warn!(retry_after_s = asked.as_secs(), %error, "provider asks to wait too long; giving up");
                return Err(error);
            }
            Some(asked) => asked,
            None => policy.backoff(attempt),
        };
        attempt += 1;
        tracing::warn!(attempt, max_retries = policy.max_retries, delay_ms = delay.as_millis() as u64, %error, "provider call failed; retrying");
        tokio::time::sleep(delay).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use tokio::time::Instant;

    use super::*;

    fn http(status: u16, retry_after: Option<Duration>) -> ProviderError {
        ProviderError::Http { status, message: "boom".into(), retry_after }
    }

    /// Runs `with_retries` over scripted results; returns the outcome, the number of calls
    /// and the (paused, so exact) time spent.
    async fn run(
        policy: RetryPolicy,
        script: Vec<Result<u32, ProviderError>>,
    ) -> (Result<u32, ProviderError>, usize, Duration) {
        let script = Mutex::new(script.into_iter());
        let calls = Mutex::new(0);
        let start = Instant::now();
        let result = with_retries(&policy, || {
            *calls.lock().unwrap() += 1;
            let next = script.lock().unwrap().next().expect("op called more often than scripted");
            async move { next }
        })
        .await;
        let calls = *calls.lock().unwrap();
        (result, calls, start.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn success_needs_no_retry() {
        let (result, calls, elapsed) = run(RetryPolicy::default(), vec![Ok(7)]).await;
        assert_eq!(result.unwrap(), 7);
        assert_eq!((calls, elapsed), (1, Duration::ZERO));
    }

    #[tokio::test(start_paused = true)]
    async fn transient_errors_back_off_exponentially() {
        let policy =
            RetryPolicy { max_retries: 3, base_delay: Duration::from_millis(100), max_delay: Duration::from_secs(10) };
        let script =
            vec![Err(http(500, None)), Err(ProviderError::Network("reset".into())), Err(http(503, None)), Ok(1)];
        let (result, calls, elapsed) = run(policy, script).await;
        assert_eq!(result.unwrap(), 1);
        assert_eq!(calls, 4);
        // 100 + 200 + 400 ms, each shortened by at most 20 % jitter.
        assert!(elapsed <= Duration::from_millis(700) && elapsed >= Duration::from_millis(560), "{elapsed:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_is_capped_at_max_delay() {
        let policy =
            RetryPolicy { max_retries: 10, base_delay: Duration::from_secs(1), max_delay: Duration::from_secs(2) };
        for attempt in [1, 5, 31, 100] {
            let delay = policy.backoff(attempt);
            assert!(delay <= Duration::from_secs(2) && delay >= Duration::from_millis(1600), "{delay:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_is_honoured_exactly() {
        let script = vec![Err(http(429, Some(Duration::from_secs(5)))), Ok(2)];
        let (result, calls, elapsed) = run(RetryPolicy::default(), script).await;
        assert_eq!(result.unwrap(), 2);
        assert_eq!((calls, elapsed), (2, Duration::from_secs(5)));
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_longer_than_allowed_gives_up_at_once() {
        let script = vec![Err(http(429, Some(Duration::from_secs(3600))))];
        let (result, calls, elapsed) = run(RetryPolicy::default(), script).await;
        assert!(matches!(result, Err(ProviderError::Http { status: 429, .. })));
        assert_eq!((calls, elapsed), (1, Duration::ZERO));
    }

    #[tokio::test(start_paused = true)]
    async fn permanent_errors_are_not_retried() {
        for error in [
            http(400, None),
            http(401, None),
            ProviderError::ContextOverflow("long".into()),
            ProviderError::Decode("x".into()),
        ] {
            let (result, calls, _) = run(RetryPolicy::default(), vec![Err(error)]).await;
            assert!(result.is_err());
            assert_eq!(calls, 1);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn exhausted_retries_return_the_last_error() {
        let policy = RetryPolicy { max_retries: 2, ..RetryPolicy::default() };
        let script =
            vec![Err(http(500, None)), Err(http(502, None)), Err(ProviderError::Timeout(Duration::from_secs(1)))];
        let (result, calls, _) = run(policy, script).await;
        assert!(matches!(result, Err(ProviderError::Timeout(_))));
        assert_eq!(calls, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn zero_retries_means_one_attempt() {
        let policy = RetryPolicy { max_retries: 0, ..RetryPolicy::default() };
        let (result, calls, _) = run(policy, vec![Err(http(503, None))]).await;
        assert!(result.is_err());
        assert_eq!(calls, 1);
    }
}
