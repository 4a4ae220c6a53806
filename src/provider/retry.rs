//! Retries with exponential backoff (to be written).
use std::time::Duration;
/// How often and how patiently to retry.
#[derive(Debug, Clone)]
pub struct RetryPolicy { pub max_retries: u32, pub base_delay: Duration, pub max_delay: Duration }
/// Runs `op` until it succeeds, fails permanently, or retries run out.
pub async fn with_retries<T, F, Fut>(_policy: &RetryPolicy, mut op: F) -> Result<T, super::ProviderError>
where F: FnMut() -> Fut, Fut: std::future::Future<Output = Result<T, super::ProviderError>> { op().await }
