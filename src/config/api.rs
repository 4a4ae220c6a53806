//! `[channels.api]`: the HTTP API, its limits and its tokens.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Secret, socket_addr};

/// The HTTP/WebSocket API channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ApiChannelConfig {
    pub enabled: bool,
    #[serde(deserialize_with = "socket_addr")]
    pub listen: SocketAddr,
    /// One token with every scope, kept in the config as it is (older configs); `tokens` is
    /// the better way.
    pub token: Secret,
    /// Named tokens, stored as their SHA-256 (`switchboard api-token NAME` makes one).
    pub tokens: BTreeMap<String, ApiTokenConfig>,
    /// Serve beyond loopback without any token. Off: such a listener refuses to start.
    pub allow_unauthenticated: bool,
    /// Where outbox messages (for API chats, with no request waiting) are posted.
    pub webhook: ApiWebhookConfig,
    /// How long a synchronous request waits for the agent's reply.
    pub reply_timeout_secs: u64,
    pub max_body_bytes: usize,
    /// Largest request head (request line and headers), at least 8192.
    pub max_header_bytes: usize,
    /// Seconds a request head may take from its first byte to its end.
    pub header_timeout_secs: u64,
    /// Seconds a request body may take after its head; a slower one is answered 408.
    pub body_timeout_secs: u64,
    /// Seconds a connection with no request in progress stays open.
    pub idle_timeout_secs: u64,
    /// Connections open at once.
    pub max_connections: usize,
    /// WebSockets open at once (apart from max_connections: an open socket has left the
    /// HTTP server's count).
    pub max_websockets: usize,
    /// Seconds replies to requests sent with an Idempotency-Key are kept for their retries.
    pub idempotency_ttl_secs: u64,
    /// Replies to requests sent with an Idempotency-Key kept at most.
    pub idempotency_max_entries: usize,
    /// This process's name among several API processes on one NATS bus: the replies to its
    /// requests come to it on `api@<instance>`. Empty = `<host name>-<port>`.
    pub instance: String,
}

impl Default for ApiChannelConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            listen: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 8787)),
            token: Secret::default(),
            tokens: BTreeMap::new(),
            allow_unauthenticated: false,
            webhook: ApiWebhookConfig::default(),
            reply_timeout_secs: 120,
            max_body_bytes: 65536,
            max_header_bytes: 16384,
            header_timeout_secs: 10,
            body_timeout_secs: 30,
            idle_timeout_secs: 30,
            max_connections: 512,
            max_websockets: 256,
            idempotency_ttl_secs: 600,
            idempotency_max_entries: 1000,
            instance: String::new(),
        }
    }
}

impl ApiChannelConfig {
    pub fn reply_timeout(&self) -> Duration {
        Duration::from_secs(self.reply_timeout_secs)
    }

    pub fn header_timeout(&self) -> Duration {
        Duration::from_secs(self.header_timeout_secs)
    }

    pub fn body_timeout(&self) -> Duration {
        Duration::from_secs(self.body_timeout_secs)
    }

    pub fn idle_timeout(&self) -> Duration {
        Duration::from_secs(self.idle_timeout_secs)
    }

    pub fn idempotency_ttl(&self) -> Duration {
        Duration::from_secs(self.idempotency_ttl_secs)
    }
}

impl ApiChannelConfig {
    /// Whether any token guards the API (a named one, or the plain `token`).
    pub fn has_tokens(&self) -> bool {
        !self.tokens.is_empty() || !self.token.is_empty()
    }

    /// It would listen beyond loopback with no token and no explicit permission: refused at
    /// start, reported by `doctor`.
    pub fn unguarded_beyond_loopback(&self) -> bool {
        !self.listen.ip().is_loopback() && !self.has_tokens() && !self.allow_unauthenticated
    }
}

/// `[channels.api.tokens.<name>]`: one bearer token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ApiTokenConfig {
    /// The token's SHA-256 in hex; the token itself is never stored.
    pub sha256: String,
    /// "chat" (send messages, read its own sessions) and/or "admin" (everything).
    pub scopes: Vec<String>,
    /// The sender id its messages carry (`api:<identity>` in users.owners); empty = the name.
    pub identity: String,
    /// The agents it may pick as its `model`; empty = all.
    pub agents: Vec<String>,
    /// Requests a minute; 0 = unlimited.
    pub requests_per_minute: u32,
}

impl Default for ApiTokenConfig {
    fn default() -> Self {
        Self {
            sha256: String::new(),
            scopes: vec![SCOPE_CHAT.to_owned()],
            identity: String::new(),
            agents: Vec::new(),
            requests_per_minute: 60,
        }
    }
}

pub const SCOPE_CHAT: &str = "chat";
pub const SCOPE_ADMIN: &str = "admin";

impl ApiTokenConfig {
    /// The identity its messages speak as.
    pub fn identity_or<'a>(&'a self, name: &'a str) -> &'a str {
        if self.identity.trim().is_empty() { name } else { self.identity.trim() }
    }
}

/// The first token entry that cannot be used, as (key, reason).
pub(super) fn problem(api: &ApiChannelConfig, agents: &[String]) -> Option<(String, String)> {
    for (name, token) in &api.tokens {
        let key = |field: &str| format!("channels.api.tokens.{name}.{field}");
        if switchboard_channels::api::access::parse_sha256_hex(&token.sha256).is_none() {
            let reason = "must be the token's SHA-256 as 64 hex digits (`switchboard api-token NAME` prints one)";
            return Some((key("sha256"), reason.into()));
        }
        if token.scopes.is_empty() {
            return Some((key("scopes"), format!("must name at least one of {SCOPE_CHAT:?}, {SCOPE_ADMIN:?}")));
        }
        if let Some(scope) = token.scopes.iter().find(|s| *s != SCOPE_CHAT && *s != SCOPE_ADMIN) {
            return Some((key("scopes"), format!("{scope:?} is not a scope (\"{SCOPE_CHAT}\" or \"{SCOPE_ADMIN}\")")));
        }
        let identity = token.identity_or(name);
        if identity.len() > switchboard_channels::contract::MAX_SENDER_ID_BYTES || identity.contains(char::is_control) {
            return Some((key("identity"), "must be at most 256 bytes without control characters".into()));
        }
        if let Some(agent) = token.agents.iter().find(|agent| !agents.contains(agent)) {
            return Some((key("agents"), format!("{agent:?} is not an agent")));
        }
    }
    None
}

/// `[channels.api.webhook]`: outbox messages posted to a URL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ApiWebhookConfig {
    /// Empty = no webhook (the messages are kept for GET /v1/sessions/{key}/messages).
    pub url: String,
    /// The HMAC-SHA256 key of `X-Switchboard-Signature`; empty = unsigned.
    pub secret: Secret,
    /// Tries per message (1 s, 2 s, 4 s, … apart, at most an hour) before it is given up.
    pub max_attempts: u32,
    /// Seconds one post may take.
    pub timeout_secs: u64,
}

impl Default for ApiWebhookConfig {
    fn default() -> Self {
        Self { url: String::new(), secret: Secret::default(), max_attempts: 12, timeout_secs: 10 }
    }
}

/// Why the webhook's URL cannot be used; `None` when it can (or is empty).
pub(super) fn webhook_problem(webhook: &ApiWebhookConfig) -> Option<String> {
    let url = webhook.url.trim();
    if url.is_empty() {
        return None;
    }
    match reqwest::Url::parse(url) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") && parsed.has_host() => None,
        _ => Some("must be an http:// or https:// URL".into()),
    }
}
