//! A provider's cap on requests in flight (`max_concurrent_requests`), shared by every agent
//! whose chain names it. Hosted APIs take hundreds of requests at once and need none; a local
//! server that works on one or two at a time answers the rest only after them anyway, and with
//! the cap they wait here, where the run timeout still applies, instead of in its queue where
//! the request timeout runs out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use tokio::sync::Semaphore;

use super::{ChatRequest, ChatResponse, Provider, ProviderError, TextSink};

/// Wraps a provider so at most a fixed number of its requests run at once.
pub struct Limited {
    inner: Arc<dyn Provider>,
    permits: Arc<Semaphore>,
}

impl Limited {
    pub fn new(inner: Arc<dyn Provider>, permits: Arc<Semaphore>) -> Self {
        Self { inner, permits }
    }
}

#[async_trait]
impl Provider for Limited {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn complete(
        &self,
        request: &ChatRequest<'_>,
        stream: Option<TextSink<'_>>,
    ) -> Result<ChatResponse, ProviderError> {
        // Never closed: an error here would be a bug, and waiting on is what a caller expects.
        let _permit =
            self.permits.acquire().await.map_err(|_| ProviderError::Config("the request limit was closed".into()))?;
        self.inner.complete(request, stream).await
    }
}

/// The permits of each provider that has a limit, by provider name, so that all agents'
/// chains draw on one count per provider.
#[derive(Debug, Default)]
pub struct ProviderLimits(Mutex<HashMap<String, Arc<Semaphore>>>);

impl ProviderLimits {
    /// `provider` wrapped in the limit of `name` (created with `max` permits on first use);
    /// unchanged when `max` is 0 (no limit).
    pub fn apply(&self, name: &str, max: usize, provider: Arc<dyn Provider>) -> Arc<dyn Provider> {
        if max == 0 {
            return provider;
        }
        let mut limits = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let permits = limits.entry(name.to_owned()).or_insert_with(|| Arc::new(Semaphore::new(max)));
        Arc::new(Limited::new(provider, Arc::clone(permits)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::provider::ChatMessage;

    /// Counts requests in flight and remembers the most seen at once.
    #[derive(Default)]
    struct Slow {
        now: AtomicUsize,
        most: AtomicUsize,
    }

    #[async_trait]
    impl Provider for Slow {
        fn name(&self) -> &str {
            "slow"
        }

        async fn complete(&self, _: &ChatRequest<'_>, _: Option<TextSink<'_>>) -> Result<ChatResponse, ProviderError> {
            let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            self.now.fetch_sub(1, Ordering::SeqCst);
            Ok(ChatResponse { content: "ok".into(), ..ChatResponse::default() })
        }
    }

    #[tokio::test]
    async fn two_agents_share_their_providers_limit() {
        let limits = ProviderLimits::default();
        let slow = Arc::new(Slow::default());
        let first = limits.apply("local", 2, Arc::clone(&slow) as Arc<dyn Provider>);
        let second = limits.apply("local", 2, Arc::clone(&slow) as Arc<dyn Provider>);
        let request =
            ChatRequest { model: "m".into(), messages: vec![ChatMessage::user("hi")].into(), ..ChatRequest::default() };
        let calls = (0..6).map(|n| if n % 2 == 0 { &first } else { &second }).map(|p| p.complete(&request, None));
        let answers = futures_util::future::join_all(calls).await;
        assert!(answers.iter().all(Result::is_ok));
        assert_eq!(slow.most.load(Ordering::SeqCst), 2, "never more than the limit in flight");
    }

    #[tokio::test]
    async fn no_limit_leaves_the_provider_as_it_is() {
        let limits = ProviderLimits::default();
        let slow = Arc::new(Slow::default());
        let open = limits.apply("hosted", 0, Arc::clone(&slow) as Arc<dyn Provider>);
        let request =
            ChatRequest { model: "m".into(), messages: vec![ChatMessage::user("hi")].into(), ..ChatRequest::default() };
        let answers = futures_util::future::join_all((0..5).map(|_| open.complete(&request, None))).await;
        assert!(answers.iter().all(Result::is_ok));
        assert_eq!(slow.most.load(Ordering::SeqCst), 5);
    }
}
