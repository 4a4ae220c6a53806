//! The Matrix check: the homeserver answers, the bot's session (the one the daemon saved, or the
//! configured access token) is valid, and a sync goes through. It never logs in with the
//! password: each password login makes a new device, and the daemon's crypto store belongs to
//! the one it has.

use reqwest::StatusCode;
use serde_json::Value;

use super::{Finding, Status, http_client};
use crate::assembly::ChannelKind;
use crate::config::Config;

const CHECK: &str = "matrix";

pub(super) async fn matrix(config: &Config) -> Finding {
    let matrix = &config.channels.matrix;
    if !matrix.enabled {
        return Finding::skip(CHECK, "not enabled");
    }
    if let Some(missing) = ChannelKind::Matrix.missing_token(config) {
        return Finding::bad(Status::Warn, CHECK, missing, "see docs/channels/matrix.md");
    }
    if !matrix.is_active() {
        return Finding::skip(CHECK, "not configured");
    }
    let client = match http_client(CHECK) {
        Ok(client) => client,
        Err(finding) => return finding,
    };
    let base = matrix.homeserver.trim_end_matches('/');
    let network_fix = "check channels.matrix.homeserver (or MATRIX_HOMESERVER) and the network to it";
    match client.get(format!("{base}/_matrix/client/versions")).send().await {
        Ok(response) if response.status().is_success() => {}
        Ok(response) => {
            let detail = format!("{base} answered {} to /versions: not a Matrix homeserver?", response.status());
            return Finding::bad(Status::Fail, CHECK, detail, network_fix);
        }
        Err(err) => return Finding::bad(Status::Fail, CHECK, crate::provider::error_chain(&err), network_fix),
    }
    let saved = config.data_dir().join("matrix").join("session.json");
    let session: Option<Value> = std::fs::read_to_string(&saved).ok().and_then(|text| serde_json::from_str(&text).ok());
    let token = match (matrix.access_token.expose(), &session) {
        (_, Some(session)) => session["access_token"].as_str().unwrap_or_default().to_owned(),
        ("", None) => {
            let detail =
                format!("{base} answers; not logged in yet: the daemon logs in as {} at its first start", matrix.user);
            return Finding::ok(CHECK, detail);
        }
        (token, None) => token.to_owned(),
    };
    let whoami = client.get(format!("{base}/_matrix/client/v3/account/whoami")).bearer_auth(&token).send().await;
    let me: Value = match whoami {
        Ok(response) if response.status() == StatusCode::UNAUTHORIZED => {
            let fix = format!(
                "the homeserver no longer knows the bot's session (logged out, or the token revoked): stop the \
                 daemon, move {} away and start it again to log in as a new device",
                saved.parent().unwrap_or(&saved).display()
            );
            return Finding::bad(Status::Fail, CHECK, "the session was refused (401)", fix);
        }
        Ok(response) if response.status().is_success() => response.json().await.unwrap_or_default(),
        Ok(response) => {
            return Finding::bad(Status::Fail, CHECK, format!("whoami answered {}", response.status()), network_fix);
        }
        Err(err) => return Finding::bad(Status::Fail, CHECK, crate::provider::error_chain(&err), network_fix),
    };
    // Presence and room events left out: the answer proves the sync, not the account's size.
    let filter = r#"{"presence":{"not_types":["*"]},"account_data":{"not_types":["*"]},"room":{"rooms":[]}}"#;
    let sync = client
        .get(format!("{base}/_matrix/client/v3/sync"))
        .query(&[("timeout", "0"), ("filter", filter)])
        .bearer_auth(&token)
        .send()
        .await;
    match sync {
        Ok(response) if response.status().is_success() => {
            let user = me["user_id"].as_str().unwrap_or("?");
            let device = me["device_id"].as_str().unwrap_or("?");
            Finding::ok(CHECK, format!("{user} (device {device}); sync answers"))
        }
        Ok(response) => Finding::bad(Status::Fail, CHECK, format!("sync answered {}", response.status()), network_fix),
        Err(err) => Finding::bad(Status::Fail, CHECK, crate::provider::error_chain(&err), network_fix),
    }
}
