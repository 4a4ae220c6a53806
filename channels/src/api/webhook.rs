//! Posts outbox messages to a configured URL, signed, retried with back-off until the receiver
//! answers 2xx or the tries run out. The state lives in the store (each message's next try),
//! so a restart, or another API process, carries on where this one stopped; a receiver gets a
//! message at least once and tells repeats by `X-Switchboard-Delivery`.
//!
//! The signature is `X-Switchboard-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`
//! with the timestamp (unix seconds) in `X-Switchboard-Timestamp`, so a receiver can refuse
//! stale or replayed posts.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::json;
use sha2::Sha256;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::store::{ApiStore, WebhookDue};

/// Where and how outbox messages are posted.
#[derive(Clone)]
pub struct WebhookSettings {
    pub url: String,
    /// The HMAC key; empty = unsigned.
    pub secret: String,
    /// Tries per message before it is given up (with a log line).
    pub max_attempts: u32,
    /// How long one post may take.
    pub timeout: Duration,
}

impl std::fmt::Debug for WebhookSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookSettings")
            .field("url", &self.url)
            .field("secret", &(!self.secret.is_empty()).then_some("***"))
            .field("max_attempts", &self.max_attempts)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// How often the store is asked for due posts when nothing new was kept.
const POLL_EVERY: Duration = Duration::from_secs(2);
/// Posts taken at once, and how long a taken post is this process's before another may try.
const BATCH: usize = 20;
const LEASE_BEYOND_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest pause between two tries.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);

/// The pause after try `attempt` failed: 1 s, 2 s, 4 s, … at most an hour.
fn backoff(attempt: u32) -> Duration {
    Duration::from_secs(1u64 << attempt.saturating_sub(1).min(12)).min(MAX_BACKOFF)
}

/// `sha256=<hex>` of `timestamp.body` under `secret`.
pub fn signature(secret: &str, timestamp: i64, body: &[u8]) -> String {
    // HMAC takes a key of any length.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC accepts keys of every length"),
    };
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    format!("sha256={}", crate::hex::hex(&digest))
}

/// Posts due outbox messages until `stop`; `kept` wakes it when a message was kept.
pub(super) async fn run(
    store: Arc<dyn ApiStore>,
    settings: WebhookSettings,
    kept: Arc<Notify>,
    stop: CancellationToken,
) {
    let client = match reqwest::Client::builder().timeout(settings.timeout).build() {
        Ok(client) => client,
        Err(err) => {
            tracing::error!(%err, "cannot build the webhook's HTTP client; outbox messages are not posted");
            return;
        }
    };
    loop {
        let due = store.claim_webhooks(settings.timeout + LEASE_BEYOND_TIMEOUT, BATCH).await;
        match due {
            Ok(due) if !due.is_empty() => {
                for post in due {
                    deliver(&client, store.as_ref(), &settings, post).await;
                }
                continue;
            }
            Ok(_) => {}
            Err(err) => tracing::warn!(%err, "cannot read the webhook's due posts"),
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = kept.notified() => {}
            _ = tokio::time::sleep(POLL_EVERY) => {}
        }
    }
}

async fn deliver(client: &reqwest::Client, store: &dyn ApiStore, settings: &WebhookSettings, post: WebhookDue) {
    let message = &post.message;
    let body = json!({
        "type": "message",
        "id": message.id,
        "chat_id": message.chat_id,
        "session_key": post.session_key,
        "content": message.content,
        "attachments": super::files::attachments(&message.media),
        "kind": message.kind,
        "in_reply_to": message.in_reply_to,
        "created_at": message.created_at,
        "metadata": message.metadata,
    })
    .to_string();
    let timestamp = Utc::now().timestamp();
    let mut request = client
        .post(&settings.url)
        .header("content-type", "application/json")
        .header("x-switchboard-delivery", &message.id)
        .header("x-switchboard-timestamp", timestamp.to_string());
    if !settings.secret.is_empty() {
        request = request.header("x-switchboard-signature", signature(&settings.secret, timestamp, body.as_bytes()));
    }
    let failure = match request.body(body).send().await {
        Ok(response) if response.status().is_success() => None,
        Ok(response) => Some(format!("answered {}", response.status())),
        Err(err) => Some(err.without_url().to_string()),
    };
    let retry_at = match &failure {
        None => None,
        Some(reason) if post.attempt >= settings.max_attempts => {
            tracing::warn!(outbound_id = %message.id, attempts = post.attempt, %reason,
                "the webhook did not take an outbox message; given up (it stays in the session's messages)");
            None
        }
        Some(reason) => {
            let pause = backoff(post.attempt);
            tracing::info!(outbound_id = %message.id, attempt = post.attempt, %reason, retry_in_secs = pause.as_secs(),
                "the webhook did not take an outbox message; trying again later");
            chrono::Duration::from_std(pause).ok().map(|pause| Utc::now() + pause)
        }
    };
    if let Err(err) = store.webhook_outcome(post.seq, retry_at).await {
        tracing::warn!(%err, outbound_id = %message.id, "cannot record a webhook post; it may be posted again");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tries_back_off_to_an_hour() {
        let pauses: Vec<u64> = [1, 2, 3, 4, 13, 40].into_iter().map(|n| backoff(n).as_secs()).collect();
        assert_eq!(pauses, [1, 2, 4, 8, 3600, 3600]);
    }

    /// Computed apart, with Python's `hmac`, as a receiver would check it.
    #[test]
    fn the_signature_is_hmac_sha256_of_timestamp_dot_body() {
        assert_eq!(
            signature("whsec-test", 1_700_000_000, br#"{"id":"o1"}"#),
            "sha256=876e41b79a98923fde19e0837ee98b8a66a7e2b1518c080a5b0ca00845585591"
        );
    }
}
