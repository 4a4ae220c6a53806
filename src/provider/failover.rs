//! [`FailoverProvider`]: a chain of models, tried in order.
//!
//! This is the one place provider calls are retried: each entry gets its own
//! [`with_retries`] with its own policy, and only when an entry still fails transiently
//! (rate limit, 5xx, timeout, network) does the chain move on to the next one. Errors that
//! would recur anywhere (400, 401, context overflow) are returned as they are.
//!
//! Once any text has reached the sink, nothing is retried and no other entry is tried: the
//! user would otherwise see the start of the answer twice, or two different answers spliced.
//!
//! Each entry has its model's context window. The request was fitted to the window of the
//! entry tried first; one tried after it gets the request refitted to its own window by the
//! chain's [`Fitting`] (the oldest history dropped, the answer's room lowered), so a smaller
//! fallback model gets a request it can take instead of an overflow. A window a server names
//! in an overflow error is learned for that entry's model alone.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;

use super::{ChatRequest, ChatResponse, Provider, ProviderError, RetryPolicy, TextSink, with_retries};

/// One model of the chain.
pub struct FailoverEntry {
    pub provider: Arc<dyn Provider>,
    /// The model to ask this provider for.
    pub model: String,
    pub retry: RetryPolicy,
    /// The model's context window as configured.
    pub context_window: u64,
}

/// How the chain fits a request to the window of the model it goes to, and learns the windows
/// servers name; the worker's context engine, which knows the windows and the token estimates.
pub trait Fitting: Send + Sync {
    /// `request` fitted to the window of `model` (`provider/model`), configured as
    /// `configured` or smaller as its server named it; `None` when it fits as it is.
    fn refit(&self, model: &str, configured: u64, request: &ChatRequest<'_>) -> Option<ChatRequest<'static>>;

    /// `model`'s server refused a request as too long and `named` its window.
    fn learn(&self, model: &str, configured: u64, named: u64);
}

impl FailoverEntry {
    /// `<provider name>/<model>`, as written in `agent.models`.
    pub fn label(&self) -> String {
        format!("{}/{}", self.provider.name(), self.model)
    }
}

/// Tries its entries in order; see the module docs for when it moves on.
pub struct FailoverProvider {
    entries: Vec<FailoverEntry>,
    name: String,
    /// `None`: requests go to every entry as they come, and nothing is learned.
    fitting: Option<Arc<dyn Fitting>>,
}

impl std::fmt::Debug for FailoverProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailoverProvider").field("chain", &self.name).finish()
    }
}

impl FailoverProvider {
    /// Fails on an empty chain: there would be nothing to call.
    pub fn new(entries: Vec<FailoverEntry>) -> Result<Self, ProviderError> {
        if entries.is_empty() {
            return Err(ProviderError::Config("the model chain is empty".into()));
        }
        let name = entries.iter().map(FailoverEntry::label).collect::<Vec<_>>().join(" > ");
        Ok(Self { entries, name, fitting: None })
    }

    /// The chain with `fitting` to refit requests for the entries tried after the first and
    /// to learn the windows servers name.
    pub fn with_fitting(self, fitting: Arc<dyn Fitting>) -> Self {
        Self { fitting: Some(fitting), ..self }
    }

    /// The entries to try: the one `asked` names (`provider/model` or the model alone, as a
    /// session's `/model` picks it) first, then the others in the chain's order.
    fn in_order_for(&self, asked: &str) -> Vec<&FailoverEntry> {
        let picked = self.entries.iter().position(|entry| entry.label() == asked || entry.model == asked);
        let mut order: Vec<&FailoverEntry> = self.entries.iter().collect();
        if let Some(at) = picked.filter(|&at| at > 0) {
            let entry = order.remove(at);
            order.insert(0, entry);
        }
        order
    }

    /// Calls one entry with its retries. A transient failure after text was streamed becomes
    /// [`ProviderError::Interrupted`], which neither the retries nor the chain go past.
    async fn call_entry(
        &self,
        entry: &FailoverEntry,
        request: &ChatRequest<'_>,
        sink: Option<TextSink<'_>>,
        streamed: &AtomicBool,
    ) -> Result<ChatResponse, ProviderError> {
        let request = request.for_model(&entry.model);
        with_retries(&entry.retry, || async {
            match entry.provider.complete(&request, sink).await {
                Err(err) if err.is_transient() && streamed.load(Ordering::Relaxed) => {
                    Err(ProviderError::Interrupted(err.to_string()))
                }
                other => other,
            }
        })
        .await
    }
}

#[async_trait]
impl Provider for FailoverProvider {
    /// The chain, e.g. `openai/gpt-4o-mini > anthropic/claude-haiku`.
    fn name(&self) -> &str {
        &self.name
    }

    /// The response's `model` is `<provider>/<model>` of the entry that answered, with the
    /// model as that provider reported it (or as asked, if it did not say).
    async fn complete(
        &self,
        request: &ChatRequest<'_>,
        stream: Option<TextSink<'_>>,
    ) -> Result<ChatResponse, ProviderError> {
        let streamed = AtomicBool::new(false);
        let forward = |text: &str| {
            streamed.store(true, Ordering::Relaxed);
            if let Some(sink) = stream {
                sink(text);
            }
        };
        let sink = stream.map(|_| &forward as TextSink<'_>);
        let order = self.in_order_for(&request.model);
        for (at, &entry) in order.iter().enumerate() {
            // The first entry's window is the one the request was fitted to.
            let fitting = self.fitting.as_deref();
            let refitted =
                fitting.filter(|_| at > 0).and_then(|f| f.refit(&entry.label(), entry.context_window, request));
            let answer = self.call_entry(entry, refitted.as_ref().unwrap_or(request), sink, &streamed).await;
            if let (Err(error), Some(fitting)) = (&answer, fitting)
                && let Some(named) = error.context_limit()
            {
                fitting.learn(&entry.label(), entry.context_window, named);
            }
            match answer {
                Ok(mut response) => {
                    let served = if response.model.is_empty() { entry.model.as_str() } else { &response.model };
                    response.model = format!("{}/{served}", entry.provider.name());
                    if !std::ptr::eq(entry, order[0]) {
                        tracing::info!(model = %response.model, "answered by a fallback model");
                    }
                    return Ok(response);
                }
                Err(error) if error.is_transient() && at + 1 < order.len() => {
                    let next = order[at + 1].label();
                    tracing::warn!(from = %entry.label(), to = %next, %error, "model failed; failing over to the next in the chain");
                }
                Err(error) => return Err(error),
            }
        }
        // Unreachable with a non-empty chain: the last entry returns above.
        Err(ProviderError::Config("the model chain is empty".into()))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;
    use crate::provider::ChatMessage;

    /// Answers from a script; with `stream_first`, streams that text before each answer.
    struct Fake {
        name: &'static str,
        script: Mutex<VecDeque<Result<ChatResponse, ProviderError>>>,
        stream_first: Option<&'static str>,
        calls: Mutex<Vec<String>>,
        /// The messages each call sent.
        sent: Mutex<Vec<usize>>,
    }

    fn fake(name: &'static str, script: Vec<Result<ChatResponse, ProviderError>>) -> Arc<Fake> {
        Arc::new(Fake {
            name,
            script: Mutex::new(script.into()),
            stream_first: None,
            calls: Mutex::default(),
            sent: Mutex::default(),
        })
    }

    #[async_trait]
    impl Provider for Fake {
        fn name(&self) -> &str {
            self.name
        }
        async fn complete(
            &self,
            req: &ChatRequest<'_>,
            sink: Option<TextSink<'_>>,
        ) -> Result<ChatResponse, ProviderError> {
            self.calls.lock().unwrap().push(req.model.clone());
            self.sent.lock().unwrap().push(req.messages.len());
            if let (Some(text), Some(sink)) = (self.stream_first, sink) {
                sink(text);
            }
            self.script.lock().unwrap().pop_front().expect("script ran out")
        }
    }

    fn ok(text: &str, model: &str) -> Result<ChatResponse, ProviderError> {
        Ok(ChatResponse { content: text.into(), model: model.into(), ..ChatResponse::default() })
    }

    fn http(status: u16) -> Result<ChatResponse, ProviderError> {
        Err(ProviderError::Http { status, message: "boom".into(), retry_after: None })
    }

    fn entry(provider: Arc<Fake>, model: &str, max_retries: u32) -> FailoverEntry {
        let retry =
            RetryPolicy { max_retries, base_delay: Duration::from_millis(1), max_delay: Duration::from_millis(2) };
        FailoverEntry { provider, model: model.into(), retry, context_window: 128_000 }
    }

    fn request() -> ChatRequest<'static> {
        ChatRequest {
            model: "ignored".into(),
            messages: vec![ChatMessage::user("hi")].into(),
            ..ChatRequest::default()
        }
    }

    #[tokio::test]
    async fn transient_failure_after_retries_moves_to_the_next_entry() {
        let primary = fake("openai", vec![http(500), http(503)]);
        let secondary = fake("anthropic", vec![ok("hello", "")]);
        let chain =
            FailoverProvider::new(vec![entry(primary.clone(), "gpt", 1), entry(secondary.clone(), "claude", 1)])
                .unwrap();
        assert_eq!(chain.name(), "openai/gpt > anthropic/claude");
        let response = chain.complete(&request(), None).await.unwrap();
        assert_eq!(response.content, "hello");
        assert_eq!(response.model, "anthropic/claude");
        assert_eq!(*primary.calls.lock().unwrap(), ["gpt", "gpt"], "one try and one retry");
        assert_eq!(*secondary.calls.lock().unwrap(), ["claude"]);
    }

    #[tokio::test]
    async fn the_entry_a_session_picked_goes_first_and_the_rest_stay_behind_it() {
        let primary = fake("openai", vec![ok("from gpt", ""), ok("never", "")]);
        let picked = fake("anthropic", vec![http(500), ok("from claude", "")]);
        let chain =
            FailoverProvider::new(vec![entry(primary.clone(), "gpt", 0), entry(picked.clone(), "claude", 0)]).unwrap();
        // The pick fails: the chain's first entry still answers behind it.
        let by_label = ChatRequest { model: "anthropic/claude".into(), ..request() };
        let response = chain.complete(&by_label, None).await.unwrap();
        assert_eq!((response.content.as_str(), response.model.as_str()), ("from gpt", "openai/gpt"));
        assert_eq!(*picked.calls.lock().unwrap(), ["claude"], "the picked entry was tried first");
        // Picked by the model alone, it answers, and the primary is not asked.
        let response = chain.complete(&ChatRequest { model: "claude".into(), ..request() }, None).await.unwrap();
        assert_eq!((response.content.as_str(), response.model.as_str()), ("from claude", "anthropic/claude"));
        assert_eq!(primary.calls.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn permanent_errors_do_not_fail_over() {
        for error in [http(400), http(401), Err(ProviderError::ContextOverflow("long".into()))] {
            let primary = fake("openai", vec![error]);
            let secondary = fake("anthropic", vec![ok("never", "")]);
            let chain =
                FailoverProvider::new(vec![entry(primary, "gpt", 3), entry(secondary.clone(), "claude", 3)]).unwrap();
            assert!(chain.complete(&request(), None).await.is_err());
            assert!(secondary.calls.lock().unwrap().is_empty());
        }
    }

    #[tokio::test]
    async fn no_retry_and_no_failover_once_text_was_streamed() {
        let primary = Arc::new(Fake {
            name: "openai",
            script: Mutex::new(vec![http(500)].into()),
            stream_first: Some("Hello, wor"),
            calls: Mutex::default(),
            sent: Mutex::default(),
        });
        let secondary = fake("anthropic", vec![ok("other", "")]);
        let chain =
            FailoverProvider::new(vec![entry(primary.clone(), "gpt", 3), entry(secondary.clone(), "claude", 3)])
                .unwrap();
        let heard = Mutex::new(String::new());
        let sink = |t: &str| heard.lock().unwrap().push_str(t);
        let error = chain.complete(&request(), Some(&sink)).await.unwrap_err();
        assert!(matches!(error, ProviderError::Interrupted(_)), "{error:?}");
        assert_eq!(heard.into_inner().unwrap(), "Hello, wor");
        assert_eq!(primary.calls.lock().unwrap().len(), 1);
        assert!(secondary.calls.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn the_last_entry_returns_its_error_and_served_model_is_kept() {
        let only = fake("local", vec![http(502), ok("x", "llama3.2:latest")]);
        let chain = FailoverProvider::new(vec![entry(only.clone(), "llama3.2", 0)]).unwrap();
        assert!(matches!(chain.complete(&request(), None).await, Err(ProviderError::Http { status: 502, .. })));
        assert_eq!(chain.complete(&request(), None).await.unwrap().model, "local/llama3.2:latest");
        assert!(FailoverProvider::new(Vec::new()).is_err());
    }

    /// Refits by keeping the last message, and notes what it learns.
    #[derive(Default)]
    struct LastOnly {
        learned: Mutex<Vec<(String, u64, u64)>>,
    }

    impl Fitting for LastOnly {
        fn refit(&self, _: &str, _: u64, request: &ChatRequest<'_>) -> Option<ChatRequest<'static>> {
            let last = request.messages.last().cloned().into_iter().collect::<Vec<_>>();
            Some(ChatRequest { messages: last.into(), ..request.clone().into_owned() })
        }

        fn learn(&self, model: &str, configured: u64, named: u64) {
            self.learned.lock().unwrap().push((model.to_owned(), configured, named));
        }
    }

    #[tokio::test]
    async fn a_fallback_gets_a_refitted_request_and_its_overflow_teaches_its_own_window() {
        let overflow = || Err(ProviderError::ContextOverflow("maximum context length is 2048 tokens".into()));
        let primary = fake("openai", vec![http(500), ok("from gpt", "")]);
        let fallback = fake("local", vec![overflow(), ok("from qwen", "")]);
        let fitting = Arc::new(LastOnly::default());
        let small = FailoverEntry { context_window: 8192, ..entry(fallback.clone(), "qwen", 0) };
        let chain =
            FailoverProvider::new(vec![entry(primary.clone(), "gpt", 0), small]).unwrap().with_fitting(fitting.clone());
        let long = ChatRequest {
            messages: vec![ChatMessage::system("s"), ChatMessage::user("old"), ChatMessage::user("hi")].into(),
            ..request()
        };
        assert!(matches!(chain.complete(&long, None).await, Err(ProviderError::ContextOverflow(_))));
        assert_eq!(*fallback.sent.lock().unwrap(), [1], "refitted before the call");
        assert_eq!(*fitting.learned.lock().unwrap(), [("local/qwen".to_owned(), 8192, 2048)]);
        // The first entry gets the request as it was fitted.
        assert_eq!(chain.complete(&long, None).await.unwrap().content, "from gpt");
        assert_eq!(*primary.sent.lock().unwrap(), [3, 3]);
    }
}
