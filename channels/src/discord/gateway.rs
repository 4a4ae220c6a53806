//! The gateway connection: serenity's client, restarted with a backoff whenever it ends.
//!
//! Before each client starts, the gateway URL is asked from Discord (through `proxy_url` when
//! set) and, until it has succeeded once, the token is checked; either failing counts as a
//! failed connection and is tried again after the backoff. serenity would otherwise fall back to
//! the public gateway URL when its own request for it fails, bypassing a proxy. serenity resumes
//! dropped connections by itself; `client.start()` returns only when the gateway gave up (or
//! refused the token), and then a new client is started here, until shutdown.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serenity::all::{ClientBuilder, Context, EventHandler, GatewayIntents, Interaction, Message, Ready};
use serenity::gateway::GatewayError;
use tokio_util::sync::CancellationToken;

use super::ingress::Ingress;
use super::presses::Presses;
use super::rest::Rest;
use super::slash::SlashCommands;
use super::{DiscordSettings, build_http, identify_bot};

/// Restart backoff: doubles from the start up to the cap; reset after a client ran a while.
const BACKOFF_START: Duration = Duration::from_secs(1);
const BACKOFF_CAP: Duration = Duration::from_secs(60);
/// After Discord refused the token (401, or gateway close 4004): no point in asking again soon.
const INVALID_TOKEN_WAIT: Duration = Duration::from_secs(600);
/// How long serenity gets to close its shards at shutdown.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// The intents a text bot needs. MESSAGE_CONTENT is privileged: without it (in the developer
/// portal) guild messages arrive with empty content. Pressed buttons (interactions) need none.
pub(crate) fn intents() -> GatewayIntents {
    GatewayIntents::GUILD_MESSAGES | GatewayIntents::DIRECT_MESSAGES | GatewayIntents::MESSAGE_CONTENT
}

/// What the gateway's events go to: messages, button presses, slash commands.
#[derive(Clone)]
pub(crate) struct Inbound {
    pub ingress: Arc<Ingress>,
    pub presses: Arc<Presses>,
    pub slash: Arc<SlashCommands>,
}

struct Handler(Inbound);

#[serenity::async_trait]
impl EventHandler for Handler {
    async fn ready(&self, _ctx: Context, ready: Ready) {
        self.0.ingress.set_bot_id(ready.user.id.get());
        tracing::info!(bot = %ready.user.name, guilds = ready.guilds.len(), "connected to the Discord gateway");
        self.0.slash.on_ready(ready.application.id);
    }

    async fn message(&self, _ctx: Context, message: Message) {
        self.0.ingress.handle_until_accepted(&message).await;
    }

    /// Button presses and slash commands; others (autocomplete, modals) are not asked for.
    async fn interaction_create(&self, _ctx: Context, interaction: Interaction) {
        match interaction {
            Interaction::Component(press) => self.0.presses.handle(&press).await,
            Interaction::Command(command) => self.0.slash.handle(&command).await,
            other => tracing::debug!(kind = ?other.kind(), "Discord interaction ignored"),
        }
    }
}

/// Runs gateway clients one after the other until `shutdown`. `token_checked`: whether the
/// token was accepted at start; if not, it is checked before the next connection.
pub(crate) async fn run_gateway(
    settings: Arc<DiscordSettings>,
    rest: Arc<Rest>,
    inbound: Inbound,
    mut token_checked: bool,
    shutdown: CancellationToken,
) {
    let mut backoff = BACKOFF_START;
    if !token_checked {
        // The check at start has just failed (and said so): the first wait comes before the next try.
        if !pause(&shutdown, backoff).await {
            return;
        }
        backoff *= 2;
    }
    while !shutdown.is_cancelled() {
        let started = Instant::now();
        let prepared = tokio::select! {
            _ = shutdown.cancelled() => return,
            prepared = prepare(&rest, &inbound.ingress, &mut token_checked) => prepared,
        };
        let end = match prepared {
            Ok(url) => run_client(&settings, url, Handler(inbound.clone()), &shutdown).await,
            Err(end) => end,
        };
        let wait = match end {
            ClientEnd::Shutdown => return,
            ClientEnd::InvalidToken => {
                tracing::error!(
                    "Discord rejects the bot token: check channels.discord.token or DISCORD_BOT_TOKEN; trying again \
                     in {} minutes",
                    INVALID_TOKEN_WAIT.as_secs() / 60
                );
                INVALID_TOKEN_WAIT
            }
            ClientEnd::Failed(reason) => {
                if started.elapsed() > BACKOFF_CAP {
                    backoff = BACKOFF_START;
                }
                tracing::warn!(%reason, wait = ?backoff, "no Discord gateway connection; trying again");
                let wait = backoff;
                backoff = (backoff * 2).min(BACKOFF_CAP);
                wait
            }
        };
        if !pause(&shutdown, wait).await {
            return;
        }
    }
}

/// Sleeps for `wait`; false if shutdown came first.
async fn pause(shutdown: &CancellationToken, wait: Duration) -> bool {
    tokio::select! {
        _ = shutdown.cancelled() => false,
        _ = tokio::time::sleep(wait) => true,
    }
}

enum ClientEnd {
    Shutdown,
    InvalidToken,
    Failed(String),
}

/// Checks the token (until it was accepted once) and asks for the gateway URL.
async fn prepare(rest: &Rest, ingress: &Ingress, token_checked: &mut bool) -> Result<String, ClientEnd> {
    if !*token_checked {
        match identify_bot(rest).await {
            Ok(id) => ingress.set_bot_id(id),
            Err(err) if err.status() == Some(401) => return Err(ClientEnd::InvalidToken),
            Err(err) => return Err(ClientEnd::Failed(format!("cannot check the token: {err}"))),
        }
        *token_checked = true;
    }
    rest.gateway_url().await.map_err(|err| ClientEnd::Failed(format!("cannot get the gateway URL: {err}")))
}

async fn run_client(
    settings: &DiscordSettings,
    gateway_url: String,
    handler: Handler,
    shutdown: &CancellationToken,
) -> ClientEnd {
    let mut client = match ClientBuilder::new_with_http(build_http(settings), intents()).event_handler(handler).await {
        Ok(client) => client,
        Err(err) => return ClientEnd::Failed(format!("cannot build the client: {err}")),
    };
    // The builder asked for the URL itself and, had that failed, put in the public one.
    *client.ws_url.lock().await = gateway_url;
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
