//! The gateway connection: serenity's client, restarted with a backoff whenever it ends.
//!
//! serenity resumes dropped connections by itself; `client.start()` returns only when the
//! gateway gave up (or refused the token), and then a new client is started here, until
//! shutdown.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serenity::all::{ClientBuilder, Context, EventHandler, GatewayIntents, Message, Ready};
use serenity::gateway::GatewayError;
use tokio_util::sync::CancellationToken;

use super::ingress::Ingress;
use super::{DiscordSettings, build_http};

/// Restart backoff: doubles from the start up to the cap; reset after a client ran a while.
const BACKOFF_START: Duration = Duration::from_secs(1);
const BACKOFF_CAP: Duration = Duration::from_secs(60);
/// After the gateway refused the token (close 4004): no point in asking again soon.
const INVALID_TOKEN_WAIT: Duration = Duration::from_secs(600);
/// How long serenity gets to close its shards at shutdown.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// The intents a text bot needs. MESSAGE_CONTENT is privileged: without it (in the developer
/// portal) guild messages arrive with empty content.
pub(crate) fn intents() -> GatewayIntents {
    GatewayIntents::GUILD_MESSAGES | GatewayIntents::DIRECT_MESSAGES | GatewayIntents::MESSAGE_CONTENT
}

struct Handler {
    ingress: Arc<Ingress>,
}

#[serenity::async_trait]
impl EventHandler for Handler {
    async fn ready(&self, _ctx: Context, ready: Ready) {
        self.ingress.set_bot_id(ready.user.id.get());
        tracing::info!(bot = %ready.user.name, guilds = ready.guilds.len(), "connected to the Discord gateway");
    }

    async fn message(&self, _ctx: Context, message: Message) {
        self.ingress.handle_until_accepted(&message).await;
    }
}

/// Runs gateway clients one after the other until `shutdown`.
pub(crate) async fn run_gateway(settings: Arc<DiscordSettings>, ingress: Arc<Ingress>, shutdown: CancellationToken) {
    let mut backoff = BACKOFF_START;
    while !shutdown.is_cancelled() {
        let started = Instant::now();
        let wait = match run_client(&settings, &ingress, &shutdown).await {
            ClientEnd::Shutdown => return,
            ClientEnd::InvalidToken => {
                tracing::error!(
                    "the Discord gateway rejects the bot token (close 4004): check channels.discord.token or \
                     DISCORD_BOT_TOKEN; trying again in {} minutes",
                    INVALID_TOKEN_WAIT.as_secs() / 60
                );
                INVALID_TOKEN_WAIT
            }
            ClientEnd::Failed(reason) => {
                if started.elapsed() > BACKOFF_CAP {
                    backoff = BACKOFF_START;
                }
                tracing::warn!(%reason, wait = ?backoff, "the Discord gateway connection ended; starting a new one");
                let wait = backoff;
                backoff = (backoff * 2).min(BACKOFF_CAP);
                wait
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

enum ClientEnd {
    Shutdown,
    InvalidToken,
    Failed(String),
}

async fn run_client(settings: &DiscordSettings, ingress: &Arc<Ingress>, shutdown: &CancellationToken) -> ClientEnd {
    let handler = Handler { ingress: Arc::clone(ingress) };
    let mut client = match ClientBuilder::new_with_http(build_http(settings), intents()).event_handler(handler).await {
        Ok(client) => client,
        Err(err) => return ClientEnd::Failed(format!("cannot build the client: {err}")),
    };
    let shard_manager = Arc::clone(&client.shard_manager);
    let mut running = tokio::spawn(async move { client.start().await });
    let result = tokio::select! {
        result = &mut running => result,
        _ = shutdown.cancelled() => {
            shard_manager.shutdown_all().await;
            if tokio::time::timeout(STOP_WAIT, running).await.is_err() {
                tracing::warn!("the Discord gateway client did not stop in time");
            }
            return ClientEnd::Shutdown;
        }
    };
    match result {
        Ok(Ok(())) => ClientEnd::Failed("the gateway client stopped".into()),
        Ok(Err(serenity::Error::Gateway(GatewayError::InvalidAuthentication))) => ClientEnd::InvalidToken,
        Ok(Err(err)) => ClientEnd::Failed(err.to_string()),
        Err(err) => ClientEnd::Failed(format!("the gateway task failed: {err}")),
    }
}
