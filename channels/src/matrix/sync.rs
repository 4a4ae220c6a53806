//! The sync loop: logs in (again and again while the homeserver cannot be reached), then
//! long-polls `/sync`, hands each response's invitations and room messages to the ingress, and
//! saves the response's `next_batch` only once the bus took all of them.
//!
//! The first start answers nothing of the rooms' history: its first sync is only read for the
//! rooms and invitations. Every later start goes on from the saved position, so what arrived
//! while the daemon was down is answered (a room's gap read back, see `gap`), and nothing is
//! answered twice.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use matrix_sdk::Client;
use matrix_sdk::config::SyncSettings;
use matrix_sdk::deserialized_responses::TimelineEvent;
use matrix_sdk::ruma::api::client::error::ErrorKind;
use matrix_sdk::sync::SyncResponse;
use tokio_util::sync::CancellationToken;

use super::MatrixSettings;
use super::gap::read_gap;
use super::ingress::Ingress;
use super::session;
use super::state::SyncPosition;

/// How long the homeserver holds a `/sync` open when nothing happens.
const LONG_POLL: Duration = Duration::from_secs(30);
const BACKOFF_START: Duration = Duration::from_secs(1);
const BACKOFF_CAP: Duration = Duration::from_secs(60);

/// Runs until `shutdown`: logs in unless `logged_in` already is (and publishes the client in
/// `slot` for the sending side), then syncs.
pub(crate) async fn run_sync(
    settings: Arc<MatrixSettings>,
    ingress: Arc<Ingress>,
    slot: Arc<OnceLock<Client>>,
    logged_in: Option<Client>,
    shutdown: CancellationToken,
) {
    let client = match logged_in {
        Some(client) => client,
        None => match login_until_done(&settings, &shutdown).await {
            Some(client) => client,
            None => return,
        },
    };
    let _ = slot.set(client.clone());
    let position = SyncPosition::in_dir(&settings.store_dir);
    let mut since = match position.load() {
        Ok(since) => since,
        Err(err) => {
            tracing::error!(%err, "cannot read the Matrix sync position; the Matrix channel stops");
            return;
        }
    };
    let mut backoff = BACKOFF_START;
    let mut connected = false;
    loop {
        let mut request = SyncSettings::default().timeout(if since.is_some() { LONG_POLL } else { Duration::ZERO });
        if let Some(token) = &since {
            request = request.token(token.clone());
        }
        let response = tokio::select! {
            _ = shutdown.cancelled() => return,
            response = client.sync_once(request) => response,
        };
        let response = match response {
            Ok(response) => response,
            Err(err) => {
                if let Some(ErrorKind::UnknownToken { .. }) = err.client_api_error_kind() {
                    tracing::error!(%err, "the homeserver no longer knows the bot's session; the Matrix channel stops (log in again: see docs/channels/matrix.md)");
                    return;
                }
                tracing::warn!(%err, wait = ?backoff, "Matrix sync failed; will try again");
                if !sleep_or_stop(backoff, &shutdown).await {
                    return;
                }
                backoff = (backoff * 2).min(BACKOFF_CAP);
                continue;
            }
        };
        backoff = BACKOFF_START;
        if !connected {
            connected = true;
            let rooms = client.joined_rooms().len();
            match since {
                None => {
                    tracing::info!(rooms, "Matrix connected; messages sent before this first start are not answered")
                }
                Some(_) => tracing::info!(rooms, "Matrix connected; answering what arrived since the last sync"),
            }
        }
        if !take(&client, &ingress, &response, since.as_deref()).await {
            return;
        }
        if let Err(err) = position.save(&response.next_batch) {
            // Not fatal: a restart answers this response's messages again, as duplicates.
            tracing::warn!(%err, "cannot save the Matrix sync position");
        }
        since = Some(response.next_batch);
    }
}

/// Hands a response's invitations and (after the first sync, which ended nowhere: `since` is
/// where the previous one ended) room messages to the ingress, with the gaps of limited
/// timelines read back. `false`: shutting down before the bus took them all.
async fn take(client: &Client, ingress: &Ingress, response: &SyncResponse, since: Option<&str>) -> bool {
    for room_id in response.rooms.invited.keys() {
        ingress.invitation(client, room_id).await;
    }
    let Some(since) = since else { return true };
    let bot = client.user_id().map(ToString::to_string).unwrap_or_default();
    for (room_id, update) in &response.rooms.joined {
        let Some(room) = client.get_room(room_id) else { continue };
        let events = &update.timeline.events;
        // A room joined in this sync shows some of its history first: only what follows the
        // bot's own join is new to it (in the timeline, or in the gap before it).
        let new = match events.iter().rposition(|event| is_join_of(event, &bot)) {
            Some(at) => &events[at + 1..],
            None => &events[..],
        };
        let gap = match &update.timeline.prev_batch {
            Some(prev_batch) if update.timeline.limited && new.len() == events.len() => {
                let gap = read_gap(&room, prev_batch, since).await;
                match gap.iter().rposition(|event| is_join_of(event, &bot)) {
                    Some(at) => gap[at + 1..].to_vec(),
                    None => gap,
                }
            }
            _ => Vec::new(),
        };
        for event in gap.iter().chain(new) {
            if !ingress.handle_until_accepted(&room, event).await {
                return false;
            }
        }
    }
    true
}

/// Whether `event` is `user`'s own join (`m.room.member` turning to `join`; not a change of
/// name or avatar while joined).
fn is_join_of(event: &TimelineEvent, user: &str) -> bool {
    let Ok(event) = serde_json::from_str::<serde_json::Value>(event.raw().json().get()) else { return false };
    let text = |pointer: &str| event.pointer(pointer).and_then(serde_json::Value::as_str);
    text("/type") == Some("m.room.member")
        && text("/state_key") == Some(user)
        && text("/content/membership") == Some("join")
        && text("/unsigned/prev_content/membership") != Some("join")
}

/// Logs in, retrying (1 s, doubling to 60 s) while the homeserver cannot be reached. `None`:
/// refused (logged) or shutting down.
pub(crate) async fn login_until_done(settings: &MatrixSettings, shutdown: &CancellationToken) -> Option<Client> {
    let mut backoff = BACKOFF_START;
    loop {
        match session::connect(settings).await {
            Ok(client) => return Some(client),
            Err(err) if err.is_transient() => {
                tracing::warn!(%err, wait = ?backoff, "cannot log in to Matrix yet; will try again");
            }
            Err(err) => {
                tracing::error!(%err, "the Matrix channel stops: it cannot log in");
                return None;
            }
        }
        if !sleep_or_stop(backoff, shutdown).await {
            return None;
        }
        backoff = (backoff * 2).min(BACKOFF_CAP);
    }
}

async fn sleep_or_stop(wait: Duration, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        _ = shutdown.cancelled() => false,
        _ = tokio::time::sleep(wait) => true,
    }
}
