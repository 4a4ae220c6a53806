//! The adapter's REST calls to Discord, all through one client that keeps what Discord says
//! when a call fails.
//!
//! serenity builds each request (route, token, `proxy_url`) and, while its ratelimiter is on,
//! sends it; the answer is read here. serenity's own error keeps only the status and
//! `{code, message}`: a 429's `retry_after`, `global` flag and headers are lost, and its body,
//! which has no `code`, is reported as undecodable. Here a 429 becomes
//! [`RestError::RateLimited`] with Discord's wait, which [`super::retry`] honours; a global one
//! also holds back every other call of the adapter until it has passed.
//!
//! File uploads are sent by this client itself (serenity numbers the parts of a multipart body
//! only inside its message builders), so they bypass serenity's ratelimiter; a 429 on them is
//! waited out like any other.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue, USER_AGENT};
use reqwest::multipart::{Form, Part};
use reqwest::{Response, StatusCode};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use serenity::all::{
    ApplicationId, Channel, ChannelId, CreateAttachment, CreateMessage, CurrentUser, EditMessage, GuildId, Http,
    InteractionId, LightMethod, Member, MessageId, Request, Route, UserId,
};
use serenity::http::HttpError;
use tokio::time::Instant;

/// How long to wait after a 429 that names no wait at all (it always should).
const UNSPECIFIED_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Why a REST call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum RestError {
    /// 429: call again after `retry_after`; `global` limits hold back every call.
    #[error("HTTP 429 rate limited{}: retry after {:.3} s", if *global { " (global)" } else { "" }, retry_after.as_secs_f64())]
    RateLimited { retry_after: Duration, global: bool },
    /// Any other unsuccessful status, with Discord's error code (0 if it sent none) and message.
    #[error("HTTP {status} (code {code}): {message}")]
    Status { status: u16, code: i64, message: String },
    /// No complete answer: the connection could not be made or broke.
    #[error("network error: {0}")]
    Network(String),
    /// A successful answer that is not what Discord sends.
    #[error("unexpected answer: {0}")]
    Unexpected(String),
}

impl RestError {
    /// The HTTP status, for errors that have one.
    pub(crate) fn status(&self) -> Option<u16> {
        match self {
            RestError::RateLimited { .. } => Some(429),
            RestError::Status { status, .. } => Some(*status),
            RestError::Network(_) | RestError::Unexpected(_) => None,
        }
    }
}

/// A part of the answer to an interaction.
#[derive(Debug, Clone, Copy)]
pub(crate) enum AnswerPart {
    /// `POST /interactions/{id}/{token}/callback`: the one initial response.
    Response(InteractionId),
    /// `POST /webhooks/{application}/{token}`: a follow-up message, after the response.
    FollowUp(ApplicationId),
    /// `PATCH /webhooks/{application}/{token}/messages/@original`: edits the message the
    /// response stands for (after a deferred update: the pressed message).
    EditOriginal(ApplicationId),
}

/// The adapter's Discord REST client (see the module docs).
pub(crate) struct Rest {
    http: Arc<Http>,
    /// Sends requests while serenity's ratelimiter is off (with `proxy_url`), and uploads.
    client: reqwest::Client,
    /// Until when Discord's global rate limit holds back every call.
    global_until: Mutex<Option<Instant>>,
}

impl Rest {
    pub(crate) fn new(http: Arc<Http>) -> Rest {
        Rest { http, client: reqwest::Client::new(), global_until: Mutex::new(None) }
    }

    /// `GET /users/@me`: the bot itself (a 401 means a rejected token).
    pub(crate) async fn current_user(&self) -> Result<CurrentUser, RestError> {
        decode(self.execute(Request::new(Route::UserMe, LightMethod::Get)).await?).await
    }

    /// `GET /gateway`: the URL of the gateway to connect to.
    pub(crate) async fn gateway_url(&self) -> Result<String, RestError> {
        #[derive(Deserialize)]
        struct Gateway {
            url: String,
        }
        let gateway: Gateway = decode(self.execute(Request::new(Route::Gateway, LightMethod::Get)).await?).await?;
        Ok(gateway.url)
    }

    pub(crate) async fn channel(&self, channel_id: ChannelId) -> Result<Channel, RestError> {
        decode(self.execute(Request::new(Route::Channel { channel_id }, LightMethod::Get)).await?).await
    }

    pub(crate) async fn member(&self, guild_id: GuildId, user_id: UserId) -> Result<Member, RestError> {
        let route = Route::GuildMember { guild_id, user_id };
        decode(self.execute(Request::new(route, LightMethod::Get)).await?).await
    }

    /// A server's boost level (`premium_tier`, 0–3), which sets its upload limit.
    pub(crate) async fn guild_tier(&self, guild_id: GuildId) -> Result<u8, RestError> {
        #[derive(Deserialize)]
        struct Tier {
            #[serde(default)]
            premium_tier: u8,
        }
        let request = Request::new(Route::Guild { guild_id }, LightMethod::Get);
        Ok(decode::<Tier>(self.execute(request).await?).await?.premium_tier)
    }

    /// Creates a message (with `files` as attachments); returns its id.
    pub(crate) async fn create_message(
        &self,
        channel_id: ChannelId,
        message: &CreateMessage,
        files: &[CreateAttachment],
    ) -> Result<MessageId, RestError> {
        #[derive(Deserialize)]
        struct Created {
            id: MessageId,
        }
        let response = if files.is_empty() {
            let request =
                Request::new(Route::ChannelMessages { channel_id }, LightMethod::Post).body(Some(json(message)?));
            self.execute(request).await?
        } else {
            self.upload(channel_id, message, files).await?
        };
        Ok(decode::<Created>(response).await?.id)
    }

    pub(crate) async fn edit_message(
        &self,
        channel_id: ChannelId,
        message_id: MessageId,
        edit: &EditMessage,
    ) -> Result<(), RestError> {
        let route = Route::ChannelMessage { channel_id, message_id };
        self.execute(Request::new(route, LightMethod::Patch).body(Some(json(edit)?))).await.map(drop)
    }

    pub(crate) async fn delete_message(&self, channel_id: ChannelId, message_id: MessageId) -> Result<(), RestError> {
        let route = Route::ChannelMessage { channel_id, message_id };
        self.execute(Request::new(route, LightMethod::Delete)).await.map(drop)
    }

    /// `POST /users/@me/channels`: the DM channel with a person (Discord returns the same one
    /// each time).
    pub(crate) async fn open_direct(&self, user_id: UserId) -> Result<ChannelId, RestError> {
        #[derive(Deserialize)]
        struct Opened {
            id: ChannelId,
        }
        let body = json(&serde_json::json!({ "recipient_id": user_id.to_string() }))?;
        let request = Request::new(Route::UserMeDmChannels, LightMethod::Post).body(Some(body));
        Ok(decode::<Opened>(self.execute(request).await?).await?.id)
    }

    /// Sends `body` as part of the answer to an interaction, authorized by its `token`.
    pub(crate) async fn answer_interaction(
        &self,
        part: AnswerPart,
        token: &str,
        body: &Value,
    ) -> Result<(), RestError> {
        let (route, method) = match part {
            AnswerPart::Response(interaction_id) => {
                (Route::InteractionResponse { interaction_id, token }, LightMethod::Post)
            }
            AnswerPart::FollowUp(application_id) => {
                (Route::WebhookFollowupMessages { application_id, token }, LightMethod::Post)
            }
            AnswerPart::EditOriginal(application_id) => {
                (Route::WebhookOriginalInteractionResponse { application_id, token }, LightMethod::Patch)
            }
        };
        self.execute(Request::new(route, method).body(Some(json(body)?))).await.map(drop)
    }

    /// `GET /applications/{id}/commands`, or a guild's: the application commands Discord has.
    pub(crate) async fn commands(
        &self,
        application_id: ApplicationId,
        guild_id: Option<GuildId>,
    ) -> Result<Vec<Value>, RestError> {
        decode(self.execute(Request::new(commands_route(application_id, guild_id), LightMethod::Get)).await?).await
    }

    /// `PUT /applications/{id}/commands`, or a guild's: replaces every command there by `table`.
    pub(crate) async fn overwrite_commands(
        &self,
        application_id: ApplicationId,
        guild_id: Option<GuildId>,
        table: &[Value],
    ) -> Result<(), RestError> {
        let request =
            Request::new(commands_route(application_id, guild_id), LightMethod::Put).body(Some(json(&table)?));
        self.execute(request).await.map(drop)
    }

    /// Shows "typing…" in a channel for about ten seconds.
    pub(crate) async fn typing(&self, channel_id: ChannelId) -> Result<(), RestError> {
        self.execute(Request::new(Route::ChannelTyping { channel_id }, LightMethod::Post)).await.map(drop)
    }

    /// Sends a request the way serenity's `Http::request` does, but keeps the answer.
    async fn execute(&self, request: Request<'_>) -> Result<Response, RestError> {
        self.wait_for_global_limit().await;
        let response = match &self.http.ratelimiter {
            Some(ratelimiter) => ratelimiter.perform(request).await.map_err(from_serenity)?,
            None => {
                let builder = request.build(&self.client, self.http.token(), self.http.proxy.as_deref());
                builder.map_err(from_serenity)?.send().await.map_err(network)?
            }
        };
        self.check(response).await
    }

    /// `POST /channels/{id}/messages` as multipart: `payload_json` and `files[n]`.
    async fn upload(
        &self,
        channel_id: ChannelId,
        message: &CreateMessage,
        files: &[CreateAttachment],
    ) -> Result<Response, RestError> {
        let mut payload = serde_json::to_value(message).map_err(|err| RestError::Unexpected(err.to_string()))?;
        let attachments: Vec<Value> = files
            .iter()
            .enumerate()
            .map(|(index, file)| serde_json::json!({ "id": index, "filename": file.filename }))
            .collect();
        payload["attachments"] = Value::Array(attachments);
        let mut form = Form::new().text("payload_json", payload.to_string());
        for (index, file) in files.iter().enumerate() {
            let part = Part::bytes(file.data.clone()).file_name(file.filename.clone());
            let part =
                part.mime_str("application/octet-stream").map_err(|err| RestError::Unexpected(err.to_string()))?;
            form = form.part(format!("files[{index}]"), part);
        }
        let mut url = Route::ChannelMessages { channel_id }.path().into_owned();
        if let Some(proxy) = &self.http.proxy {
            url = url.replacen("https://discord.com", proxy.trim_end_matches('/'), 1);
        }
        let mut authorization = HeaderValue::from_str(self.http.token())
            .map_err(|_| RestError::Unexpected("the token is not a valid header value".into()))?;
        authorization.set_sensitive(true);
        self.wait_for_global_limit().await;
        let sent = self
            .client
            .post(url)
            .header(AUTHORIZATION, authorization)
            .header(USER_AGENT, serenity::constants::USER_AGENT)
            .multipart(form)
            .send()
            .await;
        self.check(sent.map_err(network)?).await
    }

    /// The response if it succeeded, else what Discord said about the failure.
    async fn check(&self, response: Response) -> Result<Response, RestError> {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let headers = response.headers().clone();
        let body = response.bytes().await.map_err(network)?;
        let err = error_from(status, &headers, &body);
        if let RestError::RateLimited { retry_after, global: true } = &err {
            self.hold_everything(*retry_after);
        }
        Err(err)
    }

    fn hold_everything(&self, wait: Duration) {
        let until = Instant::now() + wait;
        let mut held = self.global_until.lock().unwrap_or_else(PoisonError::into_inner);
        if held.is_none_or(|held| held < until) {
            tracing::warn!(wait_ms = wait.as_millis() as u64, "Discord's global rate limit: holding back every call");
            *held = Some(until);
        }
    }

    async fn wait_for_global_limit(&self) {
        let held = *self.global_until.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(until) = held {
            tokio::time::sleep_until(until).await;
        }
    }
}

/// The global application commands, or a guild's.
fn commands_route(application_id: ApplicationId, guild_id: Option<GuildId>) -> Route<'static> {
    match guild_id {
        Some(guild_id) => Route::GuildCommands { application_id, guild_id },
        None => Route::Commands { application_id },
    }
}

/// Sorts an unsuccessful answer into a [`RestError`].
fn error_from(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> RestError {
    let json: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    if status == StatusCode::TOO_MANY_REQUESTS {
        // Every 429 counts, whether the call is retried or not: Discord bans clients that
        // collect too many.
        crate::meters::meters().told_to_wait("discord");
        let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
        let seconds = |text: &str| text.trim().parse::<f64>().ok();
        // The body's float is the most precise; `Retry-After` is rounded up to whole seconds.
        let retry_after = json["retry_after"]
            .as_f64()
            .or_else(|| header("x-ratelimit-reset-after").and_then(seconds))
            .or_else(|| header("retry-after").and_then(seconds))
            .filter(|seconds| seconds.is_finite() && *seconds >= 0.0)
            .map_or(UNSPECIFIED_RETRY_AFTER, Duration::from_secs_f64);
        let global = json["global"].as_bool() == Some(true)
            || header("x-ratelimit-global").is_some_and(|value| value.eq_ignore_ascii_case("true"))
            || header("x-ratelimit-scope") == Some("global");
        return RestError::RateLimited { retry_after, global };
    }
    let message = match json["message"].as_str() {
        Some(message) => message.to_owned(),
        None => String::from_utf8_lossy(&body[..body.len().min(200)]).trim().to_owned(),
    };
    RestError::Status { status: status.as_u16(), code: json["code"].as_i64().unwrap_or(0), message }
}

async fn decode<T: DeserializeOwned>(response: Response) -> Result<T, RestError> {
    let body = response.bytes().await.map_err(network)?;
    serde_json::from_slice(&body).map_err(|err| RestError::Unexpected(err.to_string()))
}

fn json(body: &impl serde::Serialize) -> Result<Vec<u8>, RestError> {
    serde_json::to_vec(body).map_err(|err| RestError::Unexpected(err.to_string()))
}

/// A transport failure, described with its causes and without the URL.
fn network(err: reqwest::Error) -> RestError {
    let err = err.without_url();
    let mut text = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    RestError::Network(text)
}

fn from_serenity(err: serenity::Error) -> RestError {
    match err {
        serenity::Error::Http(HttpError::Request(err)) => network(err),
        other => RestError::Unexpected(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(name, value)| (reqwest::header::HeaderName::from_static(name), value.parse().unwrap()))
            .collect()
    }

    #[test]
    fn a_429_keeps_discords_wait_and_scope() {
        let body = br#"{"message": "You are being rate limited.", "retry_after": 2.5, "global": false}"#;
        let discord = headers(&[("retry-after", "3"), ("x-ratelimit-reset-after", "2.500")]);
        let err = error_from(StatusCode::TOO_MANY_REQUESTS, &discord, body);
        assert_eq!(err, RestError::RateLimited { retry_after: Duration::from_millis(2500), global: false });
        assert_eq!(err.to_string(), "HTTP 429 rate limited: retry after 2.500 s");

        // A proxy may pass on only the headers.
        let reset = headers(&[("retry-after", "1"), ("x-ratelimit-reset-after", "0.3")]);
        let from_reset = error_from(StatusCode::TOO_MANY_REQUESTS, &reset, b"");
        assert_eq!(from_reset, RestError::RateLimited { retry_after: Duration::from_millis(300), global: false });
        let global = headers(&[("retry-after", "2"), ("x-ratelimit-global", "true")]);
        let from_retry_after = error_from(StatusCode::TOO_MANY_REQUESTS, &global, b"");
        assert_eq!(from_retry_after, RestError::RateLimited { retry_after: Duration::from_secs(2), global: true });
        let global_body = br#"{"message": "You are being rate limited.", "retry_after": 0.75, "global": true}"#;
        let err = error_from(StatusCode::TOO_MANY_REQUESTS, &HeaderMap::new(), global_body);
        assert_eq!(err, RestError::RateLimited { retry_after: Duration::from_millis(750), global: true });
    }

    #[test]
    fn other_failures_keep_discords_code_and_message() {
        let body = br#"{"message": "Missing Permissions", "code": 50013}"#;
        let err = error_from(StatusCode::FORBIDDEN, &HeaderMap::new(), body);
        assert_eq!(err.to_string(), "HTTP 403 (code 50013): Missing Permissions");
        let proxy = error_from(StatusCode::BAD_GATEWAY, &HeaderMap::new(), b"<html>502 Bad Gateway</html>\n");
        assert_eq!(proxy.to_string(), "HTTP 502 (code 0): <html>502 Bad Gateway</html>");
    }
}
