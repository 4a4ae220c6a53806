//! Webhook mode: Telegram posts each update to the public URL; the reverse proxy in front
//! forwards it here. The update is answered 200 only once the bus has accepted its message;
//! any other answer makes Telegram post it again later.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use teloxide::payloads::SetWebhookSetters;
use teloxide::prelude::Requester;
use teloxide::types::Update;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::ALLOWED_UPDATES;
use super::ingress::Ingress;
use super::poll::sleep_or_cancel;
use super::retry::describe;
use super::{PendingIngress, TelegramError};

/// The header Telegram puts the webhook's secret token in.
const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";

struct Hook {
    ingress: Arc<Ingress>,
    secret: String,
    /// One update at a time, in arrival order, as with polling.
    serial: tokio::sync::Mutex<()>,
}

/// Binds the webhook listener (so a taken port fails the start) and returns the task that
/// registers the webhook with Telegram and serves it until `shutdown`.
pub(crate) async fn start_webhook(
    pending: PendingIngress,
    public_url: String,
    listen: SocketAddr,
    secret: String,
    shutdown: CancellationToken,
) -> Result<(SocketAddr, impl Future<Output = ()> + Send + 'static), TelegramError> {
    let url = reqwest::Url::parse(&public_url).map_err(|_| TelegramError::BadUrl(public_url.clone()))?;
    let listener = TcpListener::bind(listen).await.map_err(|source| TelegramError::Bind { addr: listen, source })?;
    let local = listener.local_addr().map_err(|source| TelegramError::Bind { addr: listen, source })?;
    let path = if url.path().is_empty() { "/".to_owned() } else { url.path().to_owned() };
    tracing::info!(%local, %path, "Telegram webhook listening");
    let serve = async move {
        // Telegram posts nothing before the webhook is registered, which waits for the identity.
        let Some(ingress) = pending.ready(&shutdown).await else { return };
        register(&ingress, url, &secret, &shutdown).await;
        let hook = Arc::new(Hook { ingress, secret, serial: Default::default() });
        let app = Router::new().route(&path, post(receive)).with_state(hook);
        // Answers go out at once, not after Telegram's acknowledgement of an earlier piece.
        let listener = axum::serve::ListenerExt::tap_io(listener, |stream| {
            if let Err(err) = stream.set_nodelay(true) {
                tracing::debug!(%err, "cannot set TCP_NODELAY on a webhook connection");
            }
        });
        let server = axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned());
        if let Err(err) = server.await {
            tracing::error!(%err, "the Telegram webhook server failed");
        }
    };
    Ok((local, serve))
}

/// Tells Telegram where to post, retrying until it worked or shutdown (an outage at start
/// must not stop the daemon).
async fn register(ingress: &Ingress, url: reqwest::Url, secret: &str, shutdown: &CancellationToken) {
    let mut wait = Duration::from_secs(1);
    loop {
        let request = ingress
            .bot
            .set_webhook(url.clone())
            .secret_token(secret)
            .allowed_updates(ALLOWED_UPDATES)
            // One request at a time keeps each chat's messages in order.
            .max_connections(1);
        match request.await {
            Ok(_) => {
                tracing::info!("Telegram webhook registered");
                return;
            }
            Err(err) => tracing::warn!(err = %describe(&err), ?wait, "cannot register the Telegram webhook; retrying"),
        }
        if !sleep_or_cancel(wait, shutdown).await {
            return;
        }
        wait = (wait * 2).min(Duration::from_secs(60));
    }
}

async fn receive(State(hook): State<Arc<Hook>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let given = headers.get(SECRET_HEADER).map(|value| value.as_bytes()).unwrap_or_default();
    if !same_secret(given, hook.secret.as_bytes()) {
        tracing::warn!("Telegram webhook request with a wrong secret token refused");
        return StatusCode::UNAUTHORIZED;
    }
    let update: Update = match serde_json::from_slice(&body) {
        Ok(update) => update,
        Err(err) => {
            // Telegram would post it again and again; nothing good comes of that.
            tracing::warn!(%err, "undecodable Telegram update dropped");
            return StatusCode::OK;
        }
    };
    let _turn = hook.serial.lock().await;
    match hook.ingress.handle(&update).await {
        Ok(()) => StatusCode::OK,
        Err(err) => {
            tracing::warn!(update_id = update.id.0, %err, "the bus did not take a Telegram update; Telegram will retry");
            StatusCode::SERVICE_UNAVAILABLE
        }
    }
}

/// Compares without stopping at the first difference, so timing does not reveal the secret.
fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len() && given.iter().zip(expected).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

#[cfg(test)]
mod tests {
    use super::same_secret;

    #[test]
    fn secrets_must_match_exactly() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abd", b"abc"));
        assert!(!same_secret(b"ab", b"abc"));
        assert!(!same_secret(b"", b"abc"));
    }
}
