//! Pulling from a durable consumer one message at a time, when the caller asks for one.
//!
//! Each stream of deliveries keeps one inbox subscription for its whole life and sends pull
//! requests for a single message to it. A fresh inbox per request would lose a message the
//! server sends just as the request expires (the 408 arrives, the inbox is dropped, the message
//! lands nowhere and only comes back after `ack_wait`); with one long-lived inbox such a late
//! message is still received.

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

/// A stream of deliveries from `consumer`. Errors are logged and retried with backoff: the
/// stream goes on through reconnects, as workers expect.
pub(super) async fn deliveries(
    js: jetstream::Context,
    consumer: PullConsumer,
    wait: Duration,
) -> Result<Deliveries, BusError> {
    let client = js.client();
    let inbox = Subject::from(client.new_inbox());
    let subscriber = client.subscribe(inbox.clone()).await.map_err(|e| BusError::Receive(e.to_string()))?;
    let puller = Puller { js, consumer, inbox, subscriber, wait, deadline: None };
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
    /// Set while a pull request is outstanding: when to give up on it.
    deadline: Option<Instant>,
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
                self.deadline = None;
                let message = jetstream::Message { message, context: self.js.clone() };
                Ok(Some(super::to_delivery(message)))
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
        let batch = BatchConfig { batch: 1, expires: Some(wait), ..BatchConfig::default() };
        self.consumer.request_batch(batch, self.inbox.clone()).await.map_err(|e| e.to_string())?;
        let deadline = Instant::now() + wait + LOST_REQUEST_GRACE;
        self.deadline = Some(deadline);
        Ok(deadline)
    }
}

/// `wait` plus up to a quarter more. Back-to-back requests that expire in step with `ack_wait`
/// (5 s and 30 s, say) keep meeting a redelivery in the short gap between two requests, and
/// nats-server 2.9 then postpones that redelivery by a whole `ack_wait` without counting it.
fn jittered(wait: Duration) -> Duration {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    wait + wait.mul_f64(f64::from(nanos % 1000) / 4000.0)
}
