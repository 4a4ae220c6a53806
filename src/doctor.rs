//! `switchboard doctor`: checks what a daemon with this config needs, one line a check, with
//! what to do when one fails. It reads and asks, and writes nothing but what any start would
//! (the store's migrations, the bus's streams).
//!
//! Each check that talks to another service (the database, NATS, a model provider, Telegram,
//! Discord, Matrix) gives up after [`TIMEOUT`], so one that hangs is reported, not waited for.

mod matrix;

use std::fmt;
use std::path::Path;
use std::time::Duration;

use reqwest::StatusCode;
use switchboard_channels::api::console::views::HealthCheck;

use crate::assembly::Assembly;
use crate::assembly::ChannelKind;
use crate::config::{BusKind, Config, ProviderConfig, ProviderKind};
use crate::console::HealthProbe;
use crate::workspace::BOOTSTRAP_FILES;

/// How long one check may wait for an answer.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// Works, but something is likely not as intended.
    Warn,
    Fail,
    /// Not configured, so not checked.
    Skip,
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub status: Status,
    /// What was checked: `store`, `provider openai`, …
    pub check: String,
    pub detail: String,
    /// What to do about a failure or warning.
    pub fix: Option<String>,
}

impl Finding {
    fn ok(check: impl Into<String>, detail: impl Into<String>) -> Self {
        Finding { status: Status::Ok, check: check.into(), detail: detail.into(), fix: None }
    }

    fn skip(check: impl Into<String>, detail: impl Into<String>) -> Self {
        Finding { status: Status::Skip, check: check.into(), detail: detail.into(), fix: None }
    }

    fn bad(status: Status, check: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Finding { status, check: check.into(), detail: detail.into(), fix: Some(fix.into()) }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let label = match self.status {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
        };
        write!(f, "{label:<4}  {:<22}  {}", self.check, self.detail)?;
        match &self.fix {
            Some(fix) => write!(f, " -> {fix}"),
            None => Ok(()),
        }
    }
}

/// The checks for the owner console, on the config the daemon started with.
pub struct Doctor {
    config: Config,
}

impl Doctor {
    pub fn new(config: Config) -> Self {
        Self { config }
    }
}

#[async_trait::async_trait]
impl HealthProbe for Doctor {
    async fn examine(&self) -> Vec<HealthCheck> {
        let status = |status| match status {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
            Status::Skip => "skip",
        };
        // The checks' future is not provably Send (sqlx's executors, borrowed across awaits),
        // so it runs on a blocking thread of its own rather than as a task.
        let config = self.config.clone();
        let handle = tokio::runtime::Handle::current();
        let findings = match tokio::task::spawn_blocking(move || handle.block_on(examine(&config))).await {
            Ok(findings) => findings,
            Err(err) => vec![Finding::bad(Status::Fail, "doctor", err.to_string(), "report this as a bug")],
        };
        findings
            .into_iter()
            .map(|finding| HealthCheck {
                status: status(finding.status).to_owned(),
                check: finding.check,
                detail: finding.detail,
                fix: finding.fix,
            })
            .collect()
    }
}

/// Every check, in the order a start meets them.
pub async fn examine(config: &Config) -> Vec<Finding> {
    // A config with an unknown key or a bad value stops the command before it gets here, with
    // the key's path; so this line only says so.
    let agents = 1 + config.agents.len();
    let mut findings = vec![Finding::ok("config", format!("every key known, every value valid; {agents} agent(s)"))];
    findings.extend(store(config).await);
    findings.push(bus(config).await);
    match config.model_chain() {
        Ok(chain) => {
            for entry in chain {
                let check = format!("model {}/{}", entry.provider, entry.model);
                findings.push(provider(&check, &entry.provider, &entry.settings, &entry.model).await);
            }
        }
        Err(err) => findings.push(Finding::bad(Status::Fail, "model", err.to_string(), "see config.example.toml")),
    }
    findings.push(api(config));
    findings.push(telegram(config).await);
    findings.push(discord(config).await);
    findings.push(matrix::matrix(config).await);
    findings.extend(workspaces(config));
    findings.extend(sandbox(config));
    findings.extend(mcp(config).await);
    findings
}

/// Where `exec` runs its commands: the same decision the daemon makes at start, what a
/// command can reach there, and what running as root changes.
fn sandbox(config: &Config) -> Vec<Finding> {
    use crate::tools::exec::Sandbox;
    use crate::tools::exec::sandbox::{ROOT_WARNING, is_root};
    let exec = &config.tools.exec;
    if !exec.enabled {
        return vec![Finding::skip("exec sandbox", "exec is not enabled")];
    }
    let unconfined = "commands run as this user and can read and write every file it may: the data dir, the \
                      config and every chat's memory included";
    let finding = match Sandbox::from_config(exec, config.data_dir()) {
        Ok(Sandbox::Bwrap { network, .. }) => {
            let net = if network { "with the network" } else { "no network" };
            let reach = "system read-only, workspace writable; outside the owner's direct chats no other chat's \
                         memory, and the protected files read-only below admin";
            Finding::ok("exec sandbox", format!("bubblewrap: {reach}; {net}"))
        }
        Ok(Sandbox::None) if exec.sandbox == "none" => Finding::bad(
            Status::Warn,
            "exec sandbox",
            format!("none (tools.exec.sandbox = \"none\"): {unconfined}"),
            "see docs/security.md",
        ),
        Ok(Sandbox::None) => Finding::bad(
            Status::Warn,
            "exec sandbox",
            format!("none, bubblewrap is missing or cannot make its namespaces here: {unconfined}"),
            "apt-get install bubblewrap (docs/security.md)",
        ),
        Err(err) => Finding::bad(Status::Fail, "exec sandbox", err.to_string(), "apt-get install bubblewrap"),
    };
    let mut findings = vec![finding];
    if is_root() {
        findings.push(Finding::bad(Status::Warn, "exec as root", ROOT_WARNING, "run as an ordinary user"));
    }
    findings
}

/// Each MCP server, started and stopped again as `switchboard mcp list` does.
async fn mcp(config: &Config) -> Vec<Finding> {
    use crate::tools::mcp::ServerStatus;
    let statuses = crate::tools::mcp::probe(&config.mcp).await;
    let finding = |(name, status): (String, ServerStatus)| {
        let check = format!("mcp {name}");
        match status {
            ServerStatus::Ready { tools } => Finding::ok(check, format!("{} tools", tools.len())),
            ServerStatus::Disabled => Finding::skip(check, "not enabled"),
            ServerStatus::Down { error, .. } => {
                Finding::bad(Status::Fail, check, error, "`switchboard mcp list` shows it again; see docs/mcp.md")
            }
            ServerStatus::Starting => Finding::bad(
                Status::Fail,
                check,
                format!("still starting after {} s", config.mcp.startup_timeout_secs),
                "raise mcp.startup_timeout_secs or check the server",
            ),
        }
    };
    statuses.into_iter().map(finding).collect()
}

async fn store(config: &Config) -> Vec<Finding> {
    let opened = tokio::time::timeout(TIMEOUT, crate::store::open(&config.store)).await;
    let fix = "check store.database_url (or store.path), that the server runs and the role may connect";
    let database = match opened {
        Err(_) => return vec![Finding::bad(Status::Fail, "store", "no answer within 5 s", fix)],
        Ok(Err(err)) => return vec![Finding::bad(Status::Fail, "store", err.to_string(), fix)],
        Ok(Ok(database)) => database,
    };
    let mut findings = vec![match database.check_writable().await {
        Ok(()) => Finding::ok("store", format!("{}: schema current, writable", database.location())),
        Err(err) => Finding::bad(Status::Fail, "store", err.to_string(), "give the service's user the right to write"),
    }];
    if database.spans_hosts() {
        findings.push(shared_dirs(config, database.as_ref()).await);
    }
    database.close().await;
    findings
}

/// On a store several hosts share: the workspace and media directories are the shared ones,
/// as a worker's start checks them.
async fn shared_dirs(config: &Config, database: &dyn crate::store::Database) -> Finding {
    let places = crate::assembly::shared_dirs::places(config, true, &[]);
    match crate::assembly::shared_dirs::check(database, &places).await {
        Ok(()) => {
            let count = match places.len() {
                1 => "1 directory".to_owned(),
                n => format!("{n} directories"),
            };
            Finding::ok("shared dirs", format!("{count}, the same as every other host's"))
        }
        Err(err) => Finding::bad(
            Status::Fail,
            "shared dirs",
            err.to_string(),
            "see docs/operations.md, \"One workspace for every host\"",
        ),
    }
}

async fn bus(config: &Config) -> Finding {
    let url = match config.bus_kind() {
        BusKind::InProcess => return Finding::ok("bus", "in-process (messages journaled in the store)"),
        BusKind::Nats(url) => url.to_owned(),
    };
    let shown = url.split('@').next_back().unwrap_or_default().to_owned();
    let fix = "start nats-server with JetStream (-js) and check `bus`";
    // A plain TCP connect first: a server that is not there is said at once, in the
    // system's words, where the bus would keep retrying.
    if let Err(reason) = reachable(&url).await {
        return Finding::bad(Status::Fail, "bus", format!("{shown}: {reason}"), fix);
    }
    let assembly = Assembly::new(config.clone());
    match tokio::time::timeout(TIMEOUT, assembly.connect_bus(None)).await {
        Err(_) => Finding::bad(Status::Fail, "bus", format!("{shown}: no answer within 5 s"), fix),
        Ok(Err(err)) => Finding::bad(Status::Fail, "bus", format!("{shown}: {err}"), fix),
        Ok(Ok(bus)) => {
            Finding::ok("bus", format!("{shown}: JetStream on, streams ready{}", waiting(bus.as_ref()).await))
        }
    }
}

/// `; 3 inbound and 0 outbound messages stored`, from the server; nothing when it does not say.
async fn waiting(bus: &dyn switchboard_channels::Bus) -> String {
    let Ok(Ok(depths)) = tokio::time::timeout(TIMEOUT, bus.queue_depths()).await else { return String::new() };
    let stored = |name: &str| depths.iter().find(|gauge| gauge.name == name).map(|gauge| gauge.value);
    match (stored("bus_inbound_stored"), stored("bus_outbound_stored")) {
        (Some(inbound), Some(outbound)) => format!("; {inbound} inbound and {outbound} outbound messages stored"),
        _ => String::new(),
    }
}

/// A client whose every request gives up after [`TIMEOUT`].
fn http_client(check: &str) -> Result<reqwest::Client, Finding> {
    reqwest::Client::builder()
        .timeout(TIMEOUT)
        .build()
        .map_err(|err| Finding::bad(Status::Fail, check, err.to_string(), "report this as a bug"))
}

/// Whether a TCP connection to the host and port of `url` (`nats://user:pass@host:4222`)
/// opens within [`TIMEOUT`].
async fn reachable(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|err| err.to_string())?;
    let host = parsed.host_str().ok_or("the URL names no host")?.to_owned();
    let port = parsed.port().unwrap_or(4222);
    match tokio::time::timeout(TIMEOUT, tokio::net::TcpStream::connect((host.as_str(), port))).await {
        Err(_) => Err("no answer within 5 s".into()),
        Ok(Err(err)) => Err(err.to_string()),
        Ok(Ok(_)) => Ok(()),
    }
}

/// The provider's model list: the cheapest call that proves the URL and the key.
async fn provider(check: &str, name: &str, config: &ProviderConfig, model: &str) -> Finding {
    let base = config.base_url.trim_end_matches('/');
    let client = match http_client(check) {
        Ok(client) => client,
        Err(finding) => return finding,
    };
    let key = config.api_key.expose();
    let request = match config.kind {
        ProviderKind::Openai => {
            let request = client.get(format!("{base}/models"));
            if key.is_empty() { request } else { request.bearer_auth(key) }
        }
        ProviderKind::Anthropic => client
            .get(format!("{base}/v1/models"))
            .header("x-api-key", key)
            .header("anthropic-version", crate::provider::anthropic::API_VERSION),
    };
    let key_fix = format!("check the api_key of provider `{name}` (or its *_API_KEY variable)");
    let response = match request.send().await {
        Ok(response) => response,
        Err(err) => {
            let detail = format!("{base}: {}", crate::provider::error_chain(&err));
            return Finding::bad(
                Status::Fail,
                check,
                detail,
                format!("check the base_url of provider `{name}` and that it is up"),
            );
        }
    };
    match response.status() {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Finding::bad(
            Status::Fail,
            check,
            format!("{base}: the API key was refused ({})", response.status()),
            key_fix,
        ),
        StatusCode::NOT_FOUND => Finding::bad(
            Status::Warn,
            check,
            format!("{base}: no model list here (404)"),
            "fine if chat works; otherwise check the base URL ends with its version, e.g. /v1",
        ),
        status if !status.is_success() => {
            let fix = format!("check the base_url of provider `{name}`");
            Finding::bad(Status::Fail, check, format!("{base}: answered {status}"), fix)
        }
        _ => models_finding(check, base, model, response.json::<serde_json::Value>().await.ok()),
    }
}

fn models_finding(check: &str, base: &str, model: &str, list: Option<serde_json::Value>) -> Finding {
    let ids: Vec<String> = list
        .as_ref()
        .and_then(|list| list["data"].as_array())
        .map(|models| models.iter().filter_map(|m| m["id"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    if !model.is_empty() && !ids.is_empty() && !ids.iter().any(|id| id == model) {
        let detail = format!("{base}: reachable, key accepted, but it lists no model `{model}`");
        return Finding::bad(Status::Warn, check, detail, "check the model name against the provider's list");
    }
    let plural = if ids.len() == 1 { "" } else { "s" };
    Finding::ok(check, format!("{base}: reachable, key accepted, {} model{plural} listed", ids.len()))
}

/// Who may reach the API, as the daemon will serve it.
fn api(config: &Config) -> Finding {
    let api = &config.channels.api;
    if !api.enabled {
        return Finding::skip("api", "not enabled");
    }
    let tokens = api.tokens.len() + usize::from(!api.token.is_empty());
    let fix =
        "make a token with `switchboard api-token NAME` and add it to channels.api.tokens, or listen on 127.0.0.1";
    if api.unguarded_beyond_loopback() {
        let detail =
            format!("would listen on {} beyond this machine with no token: the daemon refuses to start", api.listen);
        return Finding::bad(Status::Fail, "api", detail, fix);
    }
    if !api.listen.ip().is_loopback() && tokens == 0 {
        let detail = format!("{} open to every caller (allow_unauthenticated = true)", api.listen);
        return Finding::bad(Status::Warn, "api", detail, fix);
    }
    let who = if tokens == 0 { "no tokens: this machine only".to_owned() } else { format!("{tokens} token(s)") };
    Finding::ok("api", format!("http://{}/ ({who})", api.listen))
}

/// `getMe`, as the channel does at start.
async fn telegram(config: &Config) -> Finding {
    let telegram = &config.channels.telegram;
    if !telegram.enabled {
        return Finding::skip("telegram", "not enabled");
    }
    if let Some(missing) = ChannelKind::Telegram.missing_token(config) {
        return Finding::bad(Status::Warn, "telegram", missing, "set TELEGRAM_BOT_TOKEN");
    }
    let base =
        if telegram.api_url.is_empty() { "https://api.telegram.org" } else { telegram.api_url.trim_end_matches('/') };
    let client = match http_client("telegram") {
        Ok(client) => client,
        Err(finding) => return finding,
    };
    let network_fix = "check the network to api.telegram.org (or channels.telegram.api_url)";
    let url = format!("{base}/bot{}/getMe", telegram.token.expose());
    let answer = match client.post(url).json(&serde_json::json!({})).send().await {
        // The URL holds the token: never shown.
        Err(err) => return Finding::bad(Status::Fail, "telegram", err.without_url().to_string(), network_fix),
        Ok(response) => response.json::<serde_json::Value>().await.unwrap_or_default(),
    };
    if answer["ok"] != true {
        let description = answer["description"].as_str().unwrap_or("no answer it could read");
        let fix = "check channels.telegram.token (or TELEGRAM_BOT_TOKEN) against @BotFather";
        return Finding::bad(Status::Fail, "telegram", format!("getMe refused: {description}"), fix);
    }
    let me = &answer["result"];
    Finding::ok("telegram", format!("@{} (id {})", me["username"].as_str().unwrap_or("?"), me["id"]))
}

async fn discord(config: &Config) -> Finding {
    let discord = &config.channels.discord;
    if !discord.enabled {
        return Finding::skip("discord", "not enabled");
    }
    if let Some(missing) = ChannelKind::Discord.missing_token(config) {
        return Finding::bad(Status::Warn, "discord", missing, "set DISCORD_BOT_TOKEN");
    }
    let base =
        if discord.proxy_url.is_empty() { "https://discord.com" } else { discord.proxy_url.trim_end_matches('/') };
    let client = match http_client("discord") {
        Ok(client) => client,
        Err(finding) => return finding,
    };
    let sent = client
        .get(format!("{base}/api/v10/users/@me"))
        .header("Authorization", format!("Bot {}", discord.token.expose()))
        .send()
        .await;
    let network_fix = "check the network to discord.com (or channels.discord.proxy_url)";
    let response = match sent {
        Ok(response) => response,
        Err(err) => return Finding::bad(Status::Fail, "discord", crate::provider::error_chain(&err), network_fix),
    };
    match response.status() {
        StatusCode::UNAUTHORIZED => Finding::bad(
            Status::Fail,
            "discord",
            "the token was refused (401)",
            "check channels.discord.token (or DISCORD_BOT_TOKEN) in the developer portal",
        ),
        status if !status.is_success() => {
            Finding::bad(Status::Fail, "discord", format!("answered {status}"), network_fix)
        }
        _ => {
            let me: serde_json::Value = response.json().await.unwrap_or_default();
            let name = me["username"].as_str().unwrap_or("?");
            Finding::ok("discord", format!("{name} (id {})", me["id"].as_str().unwrap_or("?")))
        }
    }
}

/// Each agent's workspace: there, writable, with its bootstrap files.
fn workspaces(config: &Config) -> Vec<Finding> {
    let mut findings = vec![workspace("workspace", &config.agent.workspace)];
    for (name, agent) in &config.agents {
        findings.push(workspace(&format!("workspace {name}"), &agent.workspace));
    }
    findings
}

fn workspace(check: &str, dir: &Path) -> Finding {
    let shown = dir.display();
    if !dir.is_dir() {
        return Finding::bad(Status::Fail, check, format!("{shown} does not exist"), "run `switchboard init`");
    }
    let probe = dir.join(format!(".doctor-{}", std::process::id()));
    if let Err(err) = std::fs::write(&probe, b"").and_then(|()| std::fs::remove_file(&probe)) {
        return Finding::bad(
            Status::Fail,
            check,
            format!("{shown} is not writable: {err}"),
            "give it to the service's user",
        );
    }
    let missing: Vec<&str> =
        BOOTSTRAP_FILES.iter().map(|file| file.name).filter(|name| !dir.join(name).is_file()).collect();
    if missing.len() == BOOTSTRAP_FILES.len() {
        let fix = "run `switchboard init` (it keeps existing files)";
        return Finding::bad(Status::Warn, check, format!("{shown}: no bootstrap files"), fix);
    }
    let detail = match missing.as_slice() {
        [] => format!("{shown}: writable, every bootstrap file there"),
        some => format!("{shown}: writable; without {}", some.join(", ")),
    };
    Finding::ok(check, detail)
}
