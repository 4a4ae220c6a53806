//! Long polling: `getUpdates` with an offset that moves past an update only once the update
//! was handled (the bus accepted its message). A crash between fetching and handling leaves
//! the update with Telegram, which serves it again; the inbound id makes the second copy a
//! no-op on the bus.

use std::sync::Arc;
use std::time::{Duration, Instant};

use teloxide::payloads::GetUpdatesSetters;
use teloxide::prelude::Requester;
use teloxide::types::Update;
use teloxide::{ApiError, RequestError};
use tokio_util::sync::CancellationToken;

use super::ALLOWED_UPDATES;
use super::ingress::Ingress;
use super::retry::describe;
use crate::bus::BusExt;

/// Backoff after a failed `getUpdates` or a bus refusal: doubles up to the cap.
const BACKOFF_START: Duration = Duration::from_millis(500);
const BACKOFF_CAP: Duration = Duration::from_secs(30);
/// Waiting between polls while another process holds the token (409 Conflict).
const CONFLICT_WAIT: Duration = Duration::from_secs(30);
/// How often the 409 explanation is repeated while the conflict lasts.
const CONFLICT_LOG_EVERY: Duration = Duration::from_secs(600);

/// Polls until `shutdown`, handing every update to `ingress` in order.
pub(crate) async fn run_polling(ingress: Arc<Ingress>, timeout: Duration, shutdown: CancellationToken) {
    let mut poller = Poller { offset: None, backoff: BACKOFF_START, conflict_logged: None };
    let timeout_secs = u32::try_from(timeout.as_secs()).unwrap_or(10);
    while !shutdown.is_cancelled() {
        let mut request = ingress.bot.get_updates().timeout(timeout_secs).allowed_updates(ALLOWED_UPDATES);
        if let Some(offset) = poller.offset {
            request = request.offset(offset);
        }
        let result = tokio::select! {
            _ = shutdown.cancelled() => break,
            result = request => result,
        };
        match result {
            Ok(updates) => {
                poller.recovered();
                if !handle_until_accepted(&ingress, &updates, &shutdown).await {
                    return;
                }
                if let Some(last) = updates.last() {
                    poller.offset = Some(next_offset(last));
                }
            }
            // A webhook left from an earlier setup: polling goes on once it is removed. Asked
            // only when Telegram says so, not before every start (a round trip before the first
            // poll).
            Err(err) if webhook_blocks_polling(&err) => {
                if !remove_webhook(&ingress).await {
                    sleep_or_cancel(poller.next_backoff(), &shutdown).await;
                }
            }
            Err(err) => {
                let wait = poller.failed(&err);
                sleep_or_cancel(wait, &shutdown).await;
            }
        }
    }
    confirm(&ingress, poller.offset).await;
}

/// Hands a batch of updates over: prepares each in order, then publishes their messages in
/// one go (one write to the bus's journal, not one per message), retrying while the bus
/// refuses them. False when shut down first.
async fn handle_until_accepted(ingress: &Ingress, updates: &[Update], shutdown: &CancellationToken) -> bool {
    let mut messages = Vec::with_capacity(updates.len());
    for update in updates {
        if let Some(prepared) = ingress.prepare(update).await {
            // Used up now, before the bus took the message: a later message of the same group
            // in this batch must not carry the same context again, and a refused batch is
            // published again as prepared here, not prepared again.
            ingress.use_context(&prepared);
            messages.push(prepared.inbound);
        }
    }
    let mut backoff = BACKOFF_START;
    loop {
        match ingress.bus.publish_inbound_many(&messages).await {
            Ok(()) => {
                tracing::debug!(count = messages.len(), "telegram messages accepted");
                return true;
            }
            Err(err) => {
                tracing::warn!(count = messages.len(), %err, wait = ?backoff, "the bus did not take Telegram messages; retrying");
                if !sleep_or_cancel(backoff, shutdown).await {
                    return false;
                }
                backoff = (backoff * 2).min(BACKOFF_CAP);
            }
        }
    }
}

fn next_offset(update: &Update) -> i32 {
    i32::try_from(update.id.0).unwrap_or(i32::MAX).saturating_add(1)
}

struct Poller {
    offset: Option<i32>,
    backoff: Duration,
    conflict_logged: Option<Instant>,
}

impl Poller {
    fn recovered(&mut self) {
        if self.conflict_logged.take().is_some() {
            tracing::info!("Telegram polling works again: the other poller is gone");
        }
        self.backoff = BACKOFF_START;
    }

    /// Logs the failure and says how long to wait before the next poll.
    fn failed(&mut self, err: &RequestError) -> Duration {
        match err {
            RequestError::Api(ApiError::TerminatedByOtherGetUpdates) => {
                let due = self.conflict_logged.is_none_or(|at| at.elapsed() >= CONFLICT_LOG_EVERY);
                if due {
                    tracing::error!(
                        "another program is polling this bot's updates (Telegram answered 409 Conflict): run one \
                         switchboard Telegram channel per bot token, or stop the other bot; retrying every {} s",
                        CONFLICT_WAIT.as_secs()
                    );
                    self.conflict_logged = Some(Instant::now());
                }
                CONFLICT_WAIT
            }
            RequestError::RetryAfter(seconds) => {
                crate::meters::meters().told_to_wait("telegram");
                tracing::warn!(wait = ?seconds.duration(), "Telegram asks to slow down polling");
                seconds.duration()
            }
            RequestError::Api(ApiError::InvalidToken) => {
                tracing::error!("Telegram rejects the bot token; check channels.telegram.token; retrying in 60 s");
                Duration::from_secs(60)
            }
            other => {
                tracing::warn!(err = %describe(other), wait = ?self.backoff, "getUpdates failed; retrying");
                self.next_backoff()
            }
        }
    }

    /// The wait before the next try, doubled for the failure after it.
    fn next_backoff(&mut self) -> Duration {
        let wait = self.backoff;
        self.backoff = (self.backoff * 2).min(BACKOFF_CAP);
        wait
    }
}

/// Telegram's answer to `getUpdates` while a webhook is set. Its text is "Conflict: can't use
/// getUpdates method while webhook is active; use deleteWebhook to delete the webhook first",
/// which teloxide does not recognise as its `CantGetUpdates` (it expects the middle part alone).
fn webhook_blocks_polling(err: &RequestError) -> bool {
    match err {
        RequestError::Api(ApiError::CantGetUpdates) => true,
        RequestError::Api(ApiError::Unknown(text)) => text.contains("while webhook is active"),
        _ => false,
    }
}

/// Polling and a webhook exclude each other: a webhook left from an earlier setup is removed.
/// False when it could not be.
async fn remove_webhook(ingress: &Ingress) -> bool {
    tracing::warn!("a Telegram webhook was set for this bot; removing it to use long polling");
    match ingress.bot.delete_webhook().await {
        Ok(_) => true,
        Err(err) => {
            tracing::warn!(err = %describe(&err), "cannot remove the webhook; getUpdates fails until it is gone");
            false
        }
    }
}

/// Tells Telegram the handled updates are done, so a restart does not fetch them again (their
/// messages would be deduplicated, but local answers such as /help would repeat).
async fn confirm(ingress: &Ingress, offset: Option<i32>) {
    let Some(offset) = offset else { return };
    let request = ingress.bot.get_updates().offset(offset).timeout(0).limit(1);
    match tokio::time::timeout(Duration::from_secs(3), request).await {
        Ok(Ok(_)) => tracing::debug!(offset, "confirmed handled Telegram updates"),
        Ok(Err(err)) => tracing::debug!(err = %describe(&err), "cannot confirm handled updates"),
        Err(_) => tracing::debug!("confirming handled updates timed out"),
    }
}

/// Sleeps unless shut down first; false when shut down.
pub(crate) async fn sleep_or_cancel(wait: Duration, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        _ = shutdown.cancelled() => false,
        _ = tokio::time::sleep(wait) => true,
    }
}
