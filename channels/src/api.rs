//! The HTTP API channel: `POST /v1/messages` puts a message on the bus and waits for the
//! reply; `POST /v1/chat/completions` does the same in OpenAI's wire format, streamed or not;
//! `GET /healthz` says the process is up. Named bearer tokens guard it ([`access`]).
//!
//! Replies come back on the `api` outbound queue. This process matches them to waiting
//! requests by the inbound id they answer; a reply to an idempotent request (one sent with
//! `Idempotency-Key`) is also kept for a while, so a retry gets it again. A message with nobody
//! waiting (a reminder, a reply whose client gave up) goes to the [`outbox`].

pub mod access;
mod body;
mod compose;
mod conn;
pub mod console;
mod errors;
mod exchange;
mod feed;
mod files;
mod guard;
mod http;
mod idempotency;
mod openai;
mod outbox;
mod refusal;
mod replies;
mod server;
mod sessions;
mod sockets;
mod state;
pub mod store;
mod web;
mod webhook;
mod ws;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use thiserror::Error;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::Gauge;
use crate::bus::{Bus, BusError, Deliveries};
use crate::contract::{OutboundKind, OutboundMessage};
pub use access::{Access, ApiToken, LiveAccess, Scopes};
use conn::Connections;
use feed::RunFeed;
pub use openai::SESSION_HEADER;
pub use replies::ReplayCache;
use replies::Replies;
pub use server::{ConnectionLimits, MIN_HEADER_BYTES};
pub use web::openapi_document;
pub use webhook::{WebhookSettings, signature as webhook_signature};
pub use ws::PROTOCOL as WEBSOCKET_PROTOCOL;

/// The channel name of this adapter on the bus.
pub const CHANNEL: &str = "api";

#[derive(Debug, Error)]
pub enum ApiError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("the HTTP server failed: {0}")]
    Serve(std::io::Error),
    #[error(transparent)]
    Bus(#[from] BusError),
}

/// Settings of the API channel.
#[derive(Clone)]
pub struct ApiSettings {
    pub listen: SocketAddr,
    /// The tokens requests must carry; none = open to whoever reaches the listener.
    /// Replaced at once when the config is reloaded (keep a clone to do that).
    pub access: LiveAccess,
    /// The agents a request may pick as its `model`, the default one first.
    pub agents: Vec<String>,
    /// The chat channels whose run events an admin's WebSocket may watch too (`watch_all`).
    pub live_channels: Vec<String>,
    /// When this process started (the `created` time of `/v1/models`).
    pub started_at: chrono::DateTime<chrono::Utc>,
    /// How long `POST /v1/messages` waits for the reply before answering 504.
    pub reply_timeout: Duration,
    pub max_body_bytes: usize,
    /// WebSockets open at once.
    pub max_websockets: usize,
    pub limits: ConnectionLimits,
    /// Replies to idempotent requests kept for their retries.
    pub replay: ReplayCache,
    /// Where outbox messages are posted, if anywhere.
    pub webhook: Option<WebhookSettings>,
    /// The channel this process takes the replies to its own requests from (`api@<instance>`),
    /// named in each message it publishes; `None`: the replies come on `api` (one API process).
    pub reply_channel: Option<String>,
    /// Where the agents' workspaces keep the files runs sent (`<workspace>/outbox/sent`), which
    /// `GET /v1/files/…` serves.
    pub sent_dirs: Vec<std::path::PathBuf>,
}

impl std::fmt::Debug for ApiSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiSettings")
            .field("listen", &self.listen)
            .field("access", &self.access)
            .field("agents", &self.agents)
            .field("live_channels", &self.live_channels)
            .field("reply_timeout", &self.reply_timeout)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_websockets", &self.max_websockets)
            .field("limits", &self.limits)
            .field("replay", &self.replay)
            .field("webhook", &self.webhook)
            .field("reply_channel", &self.reply_channel)
            .field("sent_dirs", &self.sent_dirs)
            .finish()
    }
}

/// A running API channel.
pub struct ApiChannel {
    pub local_addr: SocketAddr,
    server: tokio::task::JoinHandle<Result<(), ApiError>>,
    router: tokio::task::JoinHandle<()>,
    webhook: Option<tokio::task::JoinHandle<()>>,
    stop_routing: CancellationToken,
    replies: Arc<Replies>,
    connections: Arc<Connections>,
    feed: Arc<RunFeed>,
    sockets: Arc<sockets::Sockets>,
    access: LiveAccess,
}

impl ApiChannel {
    /// Binds the listener and serves; the owner console's routes answer through `console`
    /// (503 without one). Cancelling `shutdown` stops accepting connections;
    /// requests already waiting still get their replies until [`ApiChannel::stop`].
    pub async fn start(
        bus: Arc<dyn Bus>,
        settings: ApiSettings,
        store: Arc<dyn store::ApiStore>,
        console: Option<Arc<dyn console::desk::ConsoleDesk>>,
        shutdown: CancellationToken,
    ) -> Result<ApiChannel, ApiError> {
        let listener = TcpListener::bind(settings.listen)
            .await
            .map_err(|source| ApiError::Bind { addr: settings.listen, source })?;
        let local_addr = listener.local_addr().map_err(ApiError::Serve)?;
        let replies = Arc::new(Replies::new(settings.replay));
        let mut deliveries = crate::bus::screen::deliverable_outbound(Arc::clone(&bus), CHANNEL, HELD_REPLIES).await?;
        // Its own replies, and those on `api` (from a process without routing, or published
        // for an API chat by a tool).
        if let Some(own) = &settings.reply_channel {
            let routed = crate::bus::screen::deliverable_outbound(Arc::clone(&bus), own, HELD_REPLIES).await?;
            deliveries = futures_util::stream::select(deliveries, routed).boxed();
        }
        let stop_routing = CancellationToken::new();
        let feed = RunFeed::start(&bus, &settings.live_channels, stop_routing.clone()).await?;
        let kept = Arc::new(tokio::sync::Notify::new());
        let webhook = settings.webhook.clone().map(|webhook| {
            tokio::spawn(webhook::run(Arc::clone(&store), webhook, Arc::clone(&kept), stop_routing.clone()))
        });
        let outbox =
            outbox::Outbox { store: Arc::clone(&store), bus: Arc::clone(&bus), webhook: webhook.is_some(), kept };
        let routing = Routing { replies: Arc::clone(&replies), outbox };
        let router = tokio::spawn(route_replies(deliveries, routing, stop_routing.clone()));
        let (limits, access) = (settings.limits, settings.access.clone());
        let sockets = Arc::new(sockets::Sockets::default());
        let state = state::AppState {
            bus,
            settings,
            replies: Arc::clone(&replies),
            feed: Arc::clone(&feed),
            rate_limits: access::RateLimits::default(),
            store,
            console,
            sockets: Arc::clone(&sockets),
            shutdown: shutdown.clone(),
        };
        let app = http::router(Arc::new(state));
        tracing::info!(%local_addr, ?limits, "API channel listening");
        let connections = Arc::new(Connections::default());
        let serving = server::serve(listener, app, limits, Arc::clone(&connections), shutdown);
        let server = tokio::spawn(async move { serving.await.map_err(ApiError::Serve) });
        Ok(ApiChannel {
            local_addr,
            server,
            router,
            webhook,
            stop_routing,
            replies,
            connections,
            feed,
            sockets,
            access,
        })
    }

    /// The tokens it checks, to replace on a config reload.
    pub fn access(&self) -> LiveAccess {
        self.access.clone()
    }

    /// Reads what the channel keeps in memory while it runs, for the metrics endpoint.
    pub fn gauges(&self) -> ApiGauges {
        ApiGauges {
            replies: Arc::clone(&self.replies),
            connections: Arc::clone(&self.connections),
            feed: Arc::clone(&self.feed),
            sockets: Arc::clone(&self.sockets),
        }
    }

    /// Stops routing replies, answers requests still waiting with 503, and waits for the
    /// server to finish. Call it after the shutdown token was cancelled and, in a single
    /// process, after the worker has drained, so finished turns still reach their callers.
    pub async fn stop(self) -> Result<(), ApiError> {
        self.stop_routing.cancel();
        let _ = self.router.await;
        if let Some(webhook) = self.webhook {
            let _ = webhook.await;
        }
        match self.server.await {
            Ok(result) => result,
            Err(err) => Err(ApiError::Serve(std::io::Error::other(err))),
        }
    }
}

/// What a running API channel holds; see [`ApiChannel::gauges`].
#[derive(Clone)]
pub struct ApiGauges {
    replies: Arc<Replies>,
    connections: Arc<Connections>,
    feed: Arc<RunFeed>,
    sockets: Arc<sockets::Sockets>,
}

impl ApiGauges {
    pub fn read(&self) -> Vec<Gauge> {
        let (waiting, kept) = self.replies.sizes();
        vec![
            Gauge::new("api_requests_waiting", "API requests waiting for their reply", waiting),
            Gauge::new(
                "api_replies_kept",
                "API replies kept for retries with the same Idempotency-Key (channels.api.idempotency_*)",
                kept,
            ),
            Gauge::new(
                "api_connections",
                "Open API connections (at most channels.api.max_connections)",
                self.connections.open(),
            ),
            Gauge::new("api_streams", "Runs whose text an API request streams", self.feed.watched()),
            Gauge::new(
                "api_websockets",
                "Open API WebSockets (at most channels.api.max_websockets)",
                self.sockets.open(),
            ),
        ]
    }
}

/// How long the reply router keeps draining at shutdown once no reply is coming in. The
/// channels stop after the worker, so on the in-process bus its last replies are already
/// queued; on NATS a reply not taken now comes again to the next process. A long wait here
/// only made every Ctrl-C slower.
const DRAIN_IDLE: Duration = Duration::from_millis(25);

/// Replies the router may be handed at once: it routes each as it comes (an ack, or a row in
/// the outbox), so a batch of them waits only for the ones before it.
const HELD_REPLIES: usize = 32;

/// Where replies taken off the bus go.
struct Routing {
    replies: Arc<Replies>,
    outbox: outbox::Outbox,
}

/// Takes replies for the `api` channel off the bus and hands them to waiting requests.
async fn route_replies(mut deliveries: Deliveries, routing: Routing, shutdown: CancellationToken) {
    loop {
        let next = tokio::select! {
            _ = shutdown.cancelled() => break,
            next = deliveries.next() => next,
        };
        match next {
            Some(Ok(delivery)) => route_one(delivery, &routing).await,
            Some(Err(err)) => {
                tracing::warn!(%err, "receiving API replies failed; retrying in 1 s");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            None => break,
        }
    }
    // Replies published just before shutdown may still be queued: hand them over first.
    while let Ok(Some(Ok(delivery))) = tokio::time::timeout(DRAIN_IDLE, deliveries.next()).await {
        route_one(delivery, &routing).await;
    }
    routing.replies.release_all();
}

async fn route_one(delivery: crate::bus::Delivery, routing: &Routing) {
    match delivery.decode::<OutboundMessage>() {
        Ok(reply) if reply.kind == OutboundKind::Progress => {}
        Ok(reply) => {
            let keep = reply.in_reply_to.as_deref().is_some_and(idempotency::is_keyed);
            if let Some(unwaited) = routing.replies.resolve(reply, keep)
                && let Err(err) = routing.outbox.keep(&unwaited).await
            {
                // Not acked: the bus delivers it again.
                tracing::warn!(%err, outbound_id = %unwaited.id, "cannot keep an API message in the outbox; it comes again");
                return;
            }
        }
        Err(err) => tracing::warn!(%err, subject = %delivery.subject, "undecodable API reply dropped"),
    }
    if let Err(err) = delivery.ack().await {
        tracing::warn!(%err, "cannot ack an API reply");
    }
}
