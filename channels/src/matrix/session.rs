//! The bot's Matrix client and its login: built on SQLite stores in the channel's directory,
//! logged in once (with the password, or the access token and the device it belongs to), and
//! restored from the saved session on every later start, so the device, and with it the
//! end-to-end encryption keys other members' clients trust, stays the same.

use std::path::{Path, PathBuf};
use std::time::Duration;

use matrix_sdk::authentication::matrix::MatrixSession;
use matrix_sdk::config::RequestConfig;
use matrix_sdk::encryption::EncryptionSettings;
use matrix_sdk::ruma::api::client::error::ErrorKind;
use matrix_sdk::ruma::{OwnedDeviceId, OwnedUserId};
use matrix_sdk::store::RoomLoadSettings;
use matrix_sdk::{Client, SessionMeta, SessionTokens};

use super::{Login, MatrixSettings};

/// The saved session (user, device, access token), readable by the daemon's user only.
const SESSION_FILE: &str = "session.json";
/// A request's own time limit; a sync adds its long-poll wait to it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the bot could not log in.
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    /// The homeserver refused the credentials: retrying cannot help.
    #[error("the homeserver refuses the login of {user}: {reason}")]
    Rejected { user: String, reason: String },
    /// The homeserver could not be reached or failed: worth another try.
    #[error("cannot reach the homeserver: {0}")]
    Unreachable(String),
    #[error("the saved session in {path} does not fit: {reason}")]
    Session { path: PathBuf, reason: String },
    #[error("cannot set up the Matrix stores in {path}: {reason}")]
    Store { path: PathBuf, reason: String },
}

impl LoginError {
    /// Whether another try later could succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, LoginError::Unreachable(_))
    }
}

/// A client for the bot's account, logged in: restored from the saved session when there is
/// one for this user, else logged in now (and the session saved).
pub async fn connect(settings: &MatrixSettings) -> Result<Client, LoginError> {
    let dir = &settings.store_dir;
    std::fs::create_dir_all(dir).map_err(|err| store_error(dir, err))?;
    let client = Client::builder()
        .homeserver_url(&settings.homeserver)
        .sqlite_store(dir.join("store"), settings.store_passphrase.as_deref())
        .request_config(RequestConfig::new().timeout(REQUEST_TIMEOUT).retry_limit(3))
        // Its own cross-signing identity signs the bot's device at the first login with a
        // password, so members' clients see a device its owner vouches for (not a red warning
        // about an unsigned one); verifying the bot itself stays the members' choice.
        .with_encryption_settings(EncryptionSettings { auto_enable_cross_signing: true, ..Default::default() })
        .build()
        .await
        .map_err(|err| store_error(dir, err))?;
    let auth = client.matrix_auth();
    if let Some(session) = saved_session(dir, &settings.user)? {
        tracing::debug!(device = %session.meta.device_id, "restoring the saved Matrix session");
        auth.restore_session(session, RoomLoadSettings::default()).await.map_err(|err| failed(settings, err))?;
        return Ok(client);
    }
    let session = match &settings.login {
        Login::Password(password) => {
            let response = auth
                .login_username(&settings.user, password)
                .initial_device_display_name(&settings.device_name)
                .send()
                .await
                .map_err(|err| failed(settings, err))?;
            MatrixSession::from(&response)
        }
        Login::AccessToken(token) => {
            let (user_id, device_id) = whoami(&settings.homeserver, token).await.map_err(|err| match err {
                WhoamiError::Rejected(reason) => LoginError::Rejected { user: settings.user.clone(), reason },
                WhoamiError::Unreachable(reason) => LoginError::Unreachable(reason),
            })?;
            let session = MatrixSession {
                meta: SessionMeta { user_id, device_id },
                tokens: SessionTokens { access_token: token.clone(), refresh_token: None },
            };
            auth.restore_session(session.clone(), RoomLoadSettings::default())
                .await
                .map_err(|err| failed(settings, err))?;
            session
        }
    };
    save_session(dir, &session)?;
    tracing::info!(user = %session.meta.user_id, device = %session.meta.device_id, "logged in to Matrix");
    Ok(client)
}

/// The session saved for `user`, if any.
fn saved_session(dir: &Path, user: &str) -> Result<Option<MatrixSession>, LoginError> {
    let path = dir.join(SESSION_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(LoginError::Session { path, reason: err.to_string() }),
    };
    let session: MatrixSession = serde_json::from_str(&text)
        .map_err(|err| LoginError::Session { path: path.clone(), reason: err.to_string() })?;
    if session.meta.user_id.as_str() != user {
        // Its crypto store belongs to that account's device: refuse rather than mix them.
        let reason =
            format!("it is {}'s, not {user}'s; move the directory away to log in as {user}", session.meta.user_id);
        return Err(LoginError::Session { path, reason });
    }
    Ok(Some(session))
}

fn save_session(dir: &Path, session: &MatrixSession) -> Result<(), LoginError> {
    let path = dir.join(SESSION_FILE);
    let text = serde_json::to_vec(session).map_err(|err| store_error(dir, err))?;
    super::state::write_private(&path, &text).map_err(|err| store_error(dir, err))
}

/// A failed login or restore, sorted into refused and transient.
fn failed(settings: &MatrixSettings, err: impl Into<matrix_sdk::Error>) -> LoginError {
    let err = err.into();
    match err.client_api_error_kind() {
        Some(ErrorKind::Forbidden { .. } | ErrorKind::UnknownToken { .. } | ErrorKind::UserDeactivated) => {
            LoginError::Rejected { user: settings.user.clone(), reason: err.to_string() }
        }
        _ => LoginError::Unreachable(err.to_string()),
    }
}

fn store_error(dir: &Path, err: impl std::fmt::Display) -> LoginError {
    LoginError::Store { path: dir.to_owned(), reason: err.to_string() }
}

enum WhoamiError {
    Rejected(String),
    Unreachable(String),
}

/// `GET /account/whoami` with `token`: the user and device it belongs to.
async fn whoami(homeserver: &str, token: &str) -> Result<(OwnedUserId, OwnedDeviceId), WhoamiError> {
    #[derive(serde::Deserialize)]
    struct Whoami {
        user_id: OwnedUserId,
        device_id: Option<OwnedDeviceId>,
    }
    let url = format!("{}/_matrix/client/v3/account/whoami", homeserver.trim_end_matches('/'));
    let response = reqwest::Client::new()
        .get(url)
        .bearer_auth(token)
        .timeout(REQUEST_TIMEOUT)
        .send()
        .await
        .map_err(|err| WhoamiError::Unreachable(err.without_url().to_string()))?;
    let status = response.status();
    if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
        return Err(WhoamiError::Rejected(format!("the access token is not valid ({status})")));
    }
    if !status.is_success() {
        return Err(WhoamiError::Unreachable(format!("whoami answered {status}")));
    }
    let whoami: Whoami =
        response.json().await.map_err(|err| WhoamiError::Unreachable(err.without_url().to_string()))?;
    let device_id = whoami.device_id.ok_or_else(|| {
        WhoamiError::Rejected("the access token belongs to no device (an appservice token?)".to_owned())
    })?;
    Ok((whoami.user_id, device_id))
}
