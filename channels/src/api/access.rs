//! Who may call the API: named bearer tokens from the config, each with scopes, an identity it
//! speaks as, the agents it may pick and a request rate.
//!
//! The config holds each token's SHA-256, never the token: a leaked config does not leak access.
//! Tokens are long random strings, so a plain hash is enough (no password stretching). A request's
//! token is hashed and compared with every configured hash in constant time, without stopping at
//! a match, so response timing tells nothing about which token is close.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::errors::error;

/// What a token lets its holder do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Scopes {
    /// Send messages and read the sessions it speaks in.
    pub chat: bool,
    /// Everything: every session, runs, speaking as any sender.
    pub admin: bool,
}

/// One configured token.
#[derive(Clone)]
pub struct ApiToken {
    /// Its name in the config, for logs and errors.
    pub name: String,
    /// SHA-256 of the token.
    pub sha256: [u8; 32],
    pub scopes: Scopes,
    /// The sender id its messages carry (`api:<identity>` to the worker's permissions).
    pub identity: String,
    /// The agents (OpenAI `model`s) it may pick; empty = all.
    pub agents: Vec<String>,
    /// Requests per minute; 0 = unlimited.
    pub per_minute: u32,
}

impl std::fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiToken")
            .field("name", &self.name)
            .field("scopes", &self.scopes)
            .field("identity", &self.identity)
            .field("agents", &self.agents)
            .field("per_minute", &self.per_minute)
            .finish_non_exhaustive()
    }
}

/// The API's tokens; with none, every caller is an administrator speaking as `api` (the
/// listener is then on loopback, or the operator allowed it explicitly).
#[derive(Debug, Clone, Default)]
pub struct Access {
    pub tokens: Vec<ApiToken>,
}

/// The tokens in force, shared by every request and replaced whole when the config is reloaded:
/// a token added or revoked applies from the next request, without a restart (tokens are
/// security; a revoked one must not keep working until someone restarts the daemon).
#[derive(Debug, Clone, Default)]
pub struct LiveAccess(Arc<RwLock<Arc<Access>>>);

impl LiveAccess {
    pub fn new(access: Access) -> Self {
        Self(Arc::new(RwLock::new(Arc::new(access))))
    }

    /// The tokens now; a request keeps the set it started with.
    pub fn current(&self) -> Arc<Access> {
        Arc::clone(&self.0.read().unwrap_or_else(PoisonError::into_inner))
    }

    pub fn replace(&self, access: Access) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(access);
    }
}

/// Who is calling, as every route sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's name; `None` when no tokens are configured.
    pub token: Option<String>,
    pub scopes: Scopes,
    /// The sender id of its messages, unless an administrator names another.
    pub identity: String,
    /// The agents it may pick; empty = all.
    pub agents: Vec<String>,
}

/// What a token without the chat scope is told when it sends a message.
pub(super) const NO_CHAT_SCOPE: &str = "this token has no chat scope: it cannot send messages";

/// The sender id of requests when no token is configured and none is named.
pub const ANONYMOUS_IDENTITY: &str = "api";

impl Caller {
    fn open() -> Self {
        Caller {
            token: None,
            scopes: Scopes { chat: true, admin: true },
            identity: ANONYMOUS_IDENTITY.to_owned(),
            agents: Vec::new(),
        }
    }

    /// The chats of a chat token live under its identity (`kitchen` is `<identity>/kitchen`),
    /// so tokens never read or write each other's conversations; an admin addresses any chat
    /// by its full id.
    pub fn chat_id(&self, requested: &str) -> String {
        if self.scopes.admin { requested.to_owned() } else { format!("{}{requested}", self.chat_prefix()) }
    }

    /// The name `caller` knows the API chat `full_id` by (the inverse of [`Caller::chat_id`]);
    /// `None` for a chat that is not its own.
    pub fn own_chat<'a>(&self, full_id: &'a str) -> Option<&'a str> {
        if self.scopes.admin { Some(full_id) } else { full_id.strip_prefix(&self.chat_prefix()) }
    }

    /// What the ids of a chat token's chats start with.
    pub fn chat_prefix(&self) -> String {
        format!("{}/", self.identity)
    }

    pub fn may_use_agent(&self, agent: &str) -> bool {
        self.agents.is_empty() || self.agents.iter().any(|allowed| allowed == agent)
    }
}

/// The SHA-256 of a token.
pub fn token_sha256(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The SHA-256 of a token, as the config writes it (lowercase hex).
pub fn token_sha256_hex(token: &str) -> String {
    crate::hex::hex(&token_sha256(token))
}

/// Parses a hex SHA-256 as the config gives it.
pub fn parse_sha256_hex(text: &str) -> Option<[u8; 32]> {
    let text = text.trim();
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

impl Access {
    pub fn is_open(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The token `given` is, compared with every configured hash in constant time.
    fn find(&self, given: &str) -> Option<&ApiToken> {
        let digest = token_sha256(given);
        let mut found = None;
        for token in &self.tokens {
            if constant_time_eq(&digest, &token.sha256) && found.is_none() {
                found = Some(token);
            }
        }
        found
    }

    /// Who the request's `Authorization` header says is calling.
    pub(super) fn caller(&self, headers: &HeaderMap) -> Result<Caller, Denied> {
        if self.is_open() {
            return Ok(Caller::open());
        }
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_credentials)
            .or_else(|| websocket_credentials(headers));
        let Some(given) = given else { return Err(Denied::Missing) };
        let token = self.find(given).ok_or(Denied::Wrong)?;
        Ok(Caller {
            token: Some(token.name.clone()),
            scopes: token.scopes,
            identity: token.identity.clone(),
            agents: token.agents.clone(),
        })
    }
}

/// Why a request was not let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Denied {
    Missing,
    Wrong,
}

/// The credentials of a `Bearer` authorization; the scheme name is case-insensitive
/// (RFC 9110, section 11.1).
fn bearer_credentials(value: &str) -> Option<&str> {
    let (scheme, credentials) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| credentials.trim_start_matches(' '))
}

/// A browser cannot send `Authorization` with a WebSocket handshake; it names the token as a
/// subprotocol instead, `bearer.<token>`, beside the one the socket speaks.
fn websocket_credentials(headers: &HeaderMap) -> Option<&str> {
    let offered = headers.get(header::SEC_WEBSOCKET_PROTOCOL)?.to_str().ok()?;
    offered.split(',').map(str::trim).find_map(|protocol| protocol.strip_prefix("bearer."))
}

/// Compares without an early exit, so response timing does not reveal the token.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Per-token request budgets: a bucket of `per_minute` requests, refilled continuously.
#[derive(Default)]
pub(super) struct RateLimits {
    buckets: Mutex<HashMap<String, Bucket>>,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

impl RateLimits {
    /// Takes one request from `name`'s bucket; the wait until one is free when it is empty.
    pub(super) fn take(&self, name: &str, per_minute: u32) -> Result<(), Duration> {
        if per_minute == 0 {
            return Ok(());
        }
        let capacity = f64::from(per_minute);
        let per_second = capacity / 60.0;
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let bucket = buckets.entry(name.to_owned()).or_insert(Bucket { tokens: capacity, at: now });
        bucket.tokens = (bucket.tokens + now.duration_since(bucket.at).as_secs_f64() * per_second).min(capacity);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        Err(Duration::from_secs_f64((1.0 - bucket.tokens) / per_second))
    }
}

/// 403 for a caller without the scope a route needs.
pub(super) fn forbidden(what: &str) -> Response {
    error(StatusCode::FORBIDDEN, "forbidden", what)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(name: &str, secret: &str, admin: bool) -> ApiToken {
        ApiToken {
            name: name.into(),
            sha256: parse_sha256_hex(&token_sha256_hex(secret)).unwrap(),
            scopes: Scopes { chat: true, admin },
            identity: name.into(),
            agents: Vec::new(),
            per_minute: 0,
        }
    }

    fn bearer(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, value.parse().unwrap());
        headers
    }

    #[test]
    fn a_token_is_known_by_its_hash_and_speaks_as_its_identity() {
        let access = Access { tokens: vec![token("alice", "sb-a", false), token("ops", "sb-o", true)] };
        let alice = access.caller(&bearer("Bearer sb-a")).unwrap();
        assert_eq!(
            (alice.token.as_deref(), alice.identity.as_str(), alice.scopes.admin),
            (Some("alice"), "alice", false)
        );
        assert!(access.caller(&bearer("bearer  sb-o")).unwrap().scopes.admin);
        assert_eq!(access.caller(&bearer("Bearer sb-x")), Err(Denied::Wrong));
        assert_eq!(access.caller(&HeaderMap::new()), Err(Denied::Missing));
        assert_eq!(access.caller(&bearer("Basic sb-a")), Err(Denied::Missing));
        let mut socket = HeaderMap::new();
        socket.insert(header::SEC_WEBSOCKET_PROTOCOL, "switchboard, bearer.sb-a".parse().unwrap());
        assert_eq!(access.caller(&socket).unwrap().identity, "alice", "a browser's socket names its token");
    }

    #[test]
    fn without_tokens_everyone_is_an_administrator_named_api() {
        let caller = Access::default().caller(&HeaderMap::new()).unwrap();
        assert_eq!(caller, Caller::open());
    }

    #[test]
    fn hashes_parse_only_as_64_hex_digits() {
        let hex = token_sha256_hex("x");
        assert_eq!(parse_sha256_hex(&hex.to_uppercase()), parse_sha256_hex(&hex));
        assert!(parse_sha256_hex(&hex[1..]).is_none());
        assert!(parse_sha256_hex(&format!("{}g", &hex[1..])).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_bucket_refills_at_its_rate() {
        let limits = RateLimits::default();
        for _ in 0..3 {
            limits.take("t", 3).unwrap();
        }
        let wait = limits.take("t", 3).unwrap_err();
        assert!((wait.as_secs_f64() - 20.0).abs() < 0.01, "{wait:?}");
        tokio::time::advance(Duration::from_secs(20)).await;
        limits.take("t", 3).unwrap();
        assert!(limits.take("other", 3).is_ok(), "buckets are per token");
        assert!(limits.take("t", 0).is_ok(), "0 = unlimited");
    }
}
