//! Pulling from a durable consumer in batches no larger than the caller has room for.
//!
//! Each stream of deliveries keeps one inbox subscription for its whole life and sends its
//! pull requests to it, one at a time: a request asks for as many messages as the caller can
//! still take on (its capacity less the deliveries it holds unsettled, at most
//! [`MAX_BATCH`]), and the server pushes them as they come, without a round trip each; the
//! next request goes once this one is filled or expired. So a caller that takes each delivery
//! on as it arrives never has one waiting in a buffer with its `ack_wait` running. A fresh inbox per request would lose a message the
//! server sends just as the request expires (the 408 arrives, the inbox is dropped, the message
//! lands nowhere and only comes back after `ack_wait`); with one long-lived inbox such a late
//! message is still received.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::consumer::pull::BatchConfig;
use async_nats::jetstream::{self};
use async_nats::{StatusCode, Subject, Subscriber};
use futures_util::StreamExt;
use tokio::time::Instant;

use crate::bus::{BusError, Deliveries, Delivery};

/// First and longest pause between attempts after an error (server restarting, …).
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);
/// How long past its expiry a pull request may stay unanswered before it is presumed lost
/// (the connection dropped with it) and sent again.
const LOST_REQUEST_GRACE: Duration = Duration::from_secs(2);
/// The most messages one pull request asks for, however much room the caller has: what a
/// worker takes on between two requests while many chats write at once.
pub(super) const MAX_BATCH: usize = 32;

/// A stream of deliveries from `consumer`. Errors are logged and retried with backoff: the
/// stream goes on through reconnects, as workers expect.
pub(super) async fn deliveries(
    js: jetstream::Context,
    consumer: PullConsumer,
    wait: Duration,
    capacity: usize,
) -> Result<Deliveries, BusError> {
    let client = js.client();
    let inbox = Subject::from(client.new_inbox());
    let subscriber = client.subscribe(inbox.clone()).await.map_err(|e| BusError::Receive(e.to_string()))?;
    let held = Unsettled::default();
    let puller = Puller { js, consumer, inbox, subscriber, wait, capacity, held, deadline: None, expected: 0 };
    let stream = futures_util::stream::unfold(puller, |mut puller| async move {
        let delivery = puller.next().await;
        Some((Ok(delivery), puller))
    });
    Ok(stream.boxed())
}

struct Puller {
    js: jetstream::Context,
    consumer: PullConsumer,
    inbox: Subject,
    subscriber: Subscriber,
    wait: Duration,
    /// The most deliveries the caller holds at once.
    capacity: usize,
    /// The deliveries handed out and not yet settled.
    held: Unsettled,
    /// Set while a pull request is outstanding: when to give up on it.
    deadline: Option<Instant>,
    /// Messages the outstanding request may still bring.
    expected: usize,
}

impl Puller {
    async fn next(&mut self) -> Delivery {
        let mut backoff = RETRY_MIN;
        loop {
            match self.step().await {
                Ok(Some(delivery)) => return delivery,
                Ok(None) => backoff = RETRY_MIN,
                Err(reason) => {
                    let consumer = &self.consumer.cached_info().name;
                    tracing::warn!(%consumer, %reason, "pulling from JetStream failed; retrying");
                    self.deadline = None;
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(RETRY_MAX);
                }
            }
        }
    }

    /// Sends a pull request if none is outstanding and handles what arrives next.
    async fn step(&mut self) -> Result<Option<Delivery>, String> {
        let deadline = match self.deadline {
            Some(deadline) => deadline,
            None => self.request().await?,
        };
        let Ok(received) = tokio::time::timeout_at(deadline, self.subscriber.next()).await else {
            tracing::debug!("pull request unanswered; sending another");
            self.deadline = None;
            return Ok(None);
        };
        let message = received.ok_or("the inbox subscription closed")?;
        match message.status.unwrap_or(StatusCode::OK) {
            StatusCode::OK => {
                // A message sent just as its request expired is counted against the next
                // request, which may then bring one more than the caller had room for: rare,
                // and that one waits for a slot, as a redelivery would.
                self.expected = self.expected.saturating_sub(1);
                if self.expected == 0 {
                    self.deadline = None;
                }
                let message = jetstream::Message { message, context: self.js.clone() };
                Ok(Some(super::to_delivery(message, self.held.count())))
            }
            // The request expired with nothing to deliver.
            StatusCode::TIMEOUT | StatusCode::NOT_FOUND => {
                self.deadline = None;
                Ok(None)
            }
            StatusCode::IDLE_HEARTBEAT => Ok(None),
            status => Err(format!("server answered {status}: {}", message.description.unwrap_or_default())),
        }
    }

    async fn request(&mut self) -> Result<Instant, String> {
        let wait = jittered(self.wait);
        let batch = self.capacity.saturating_sub(self.held.now()).clamp(1, MAX_BATCH);
        let config = BatchConfig { batch, expires: Some(wait), ..BatchConfig::default() };
        self.consumer.request_batch(config, self.inbox.clone()).await.map_err(|e| e.to_string())?;
        let deadline = Instant::now() + wait + LOST_REQUEST_GRACE;
        self.deadline = Some(deadline);
        self.expected = batch;
        Ok(deadline)
    }
}

/// How many deliveries of one stream are handed out and not yet settled: each holds a
/// [`Counted`] that counts it until it is dropped (with the delivery's acker, once the delivery
/// is acked, nakked, or abandoned).
#[derive(Clone, Default)]
pub(super) struct Unsettled(Arc<AtomicUsize>);

impl Unsettled {
    fn now(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    fn count(&self) -> Counted {
        self.0.fetch_add(1, Ordering::Relaxed);
        Counted(Arc::clone(&self.0))
    }
}

/// One delivery counted in [`Unsettled`] while it lives.
pub(super) struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `wait` plus up to a quarter more. Back-to-back requests that expire in step with `ack_wait`
/// (5 s and 30 s, say) keep meeting a redelivery in the short gap between two requests, and
/// nats-server 2.9 then postpones that redelivery by a whole `ack_wait` without counting it.
fn jittered(wait: Duration) -> Duration {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    wait + wait.mul_f64(f64::from(nanos % 1000) / 4000.0)
}
