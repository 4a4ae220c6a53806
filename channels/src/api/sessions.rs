//! `GET /v1/sessions`, `GET /v1/sessions/{key}/messages`, `DELETE /v1/sessions/{key}`,
//! `GET /v1/runs` and `GET /v1/runs/{id}`: what the conversations hold and what their runs did.
//! The run list holds the runs that called the model and the messages that expired waiting
//! for one; `include_commands=true` adds the chat commands and the messages settled without a
//! turn.
//!
//! An admin token sees every session (of every channel); a chat token sees the API chats of
//! its identity (`api:<identity>/…`, under any agent), and the runs of those.

#![expect(clippy::result_large_err, reason = "the errors are the answers to send; one per failed request")]

use std::sync::Arc;

use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::json;

use super::access::{self, Caller};
use super::errors::error;
use super::state::AppState;
use super::store::{ApiStoreError, RunFilter, SessionScope};

/// Most items a page holds; the default is smaller.
const MAX_PAGE: usize = 200;
const DEFAULT_PAGE: usize = 50;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct PageQuery {
    limit: Option<usize>,
    /// Sessions and runs: an RFC 3339 time; messages: a message position.
    before: Option<String>,
    /// Runs: only those of this session.
    session: Option<String>,
    /// Runs: chat commands and messages settled without a turn too.
    include_commands: bool,
}

impl PageQuery {
    fn limit(&self) -> usize {
        self.limit.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE)
    }

    fn before_time(&self) -> Result<Option<DateTime<Utc>>, Response> {
        self.before
            .as_deref()
            .map(|text| DateTime::parse_from_rfc3339(text).map(|at| at.with_timezone(&Utc)))
            .transpose()
            .map_err(|_| bad_query("before must be an RFC 3339 time, as `next_before` gives it"))
    }
}

fn bad_query(text: &str) -> Response {
    error(StatusCode::BAD_REQUEST, "invalid_query", text)
}

fn store_failed(err: &ApiStoreError) -> Response {
    tracing::error!(%err, "an API read from the store failed");
    error(StatusCode::INTERNAL_SERVER_ERROR, "store_error", "reading the database failed; the log has the details")
}

fn not_found(what: &str) -> Response {
    error(StatusCode::NOT_FOUND, "not_found", what)
}

/// The sessions `caller` may see.
fn scope(caller: &Caller) -> SessionScope {
    if caller.scopes.admin { SessionScope::All } else { SessionScope::ApiChatsUnder(caller.chat_prefix()) }
}

/// A session key's agent and the rest: `<agent>/<channel>:<chat>` for agents other than
/// `main` (agent names have no `/` or `:`).
fn split_agent(key: &str) -> (&str, &str) {
    match key.split_once('/') {
        Some((agent, rest)) if !agent.contains(':') => (agent, rest),
        _ => ("main", key),
    }
}

/// Whether `caller` may see session `key`.
pub(super) fn may_see(caller: &Caller, key: &str) -> bool {
    match scope(caller) {
        SessionScope::All => true,
        SessionScope::ApiChatsUnder(prefix) => {
            split_agent(key).1.strip_prefix("api:").is_some_and(|chat| chat.starts_with(&prefix))
        }
    }
}

/// The API chat id of session `key` as `caller` names it (without a chat token's prefix);
/// `None` for another channel's session.
fn chat_of<'a>(caller: &Caller, key: &'a str) -> Option<&'a str> {
    caller.own_chat(split_agent(key).1.strip_prefix("api:")?)
}

/// 404 unless `caller` may see session `key`: a token learns nothing of others' sessions.
fn check_session(caller: &Caller, key: &str) -> Result<(), Response> {
    if may_see(caller, key) { Ok(()) } else { Err(not_found("no such session among those this token may read")) }
}

/// The `before` of the next page: the time of this page's last item, when the page was full.
fn next_before<T>(items: &[T], limit: usize, at: impl Fn(&T) -> DateTime<Utc>) -> Option<DateTime<Utc>> {
    items.last().filter(|_| items.len() == limit).map(at)
}

pub(super) async fn list_sessions(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<PageQuery>,
) -> Response {
    let before = match query.before_time() {
        Ok(before) => before,
        Err(response) => return response,
    };
    let limit = query.limit();
    let sessions = match state.store.sessions(&scope(&caller), before, limit).await {
        Ok(sessions) => sessions,
        Err(err) => return store_failed(&err),
    };
    let next = next_before(&sessions, limit, |s| s.updated_at);
    let listed: Vec<_> = sessions
        .iter()
        .map(|session| {
            let mut listed = json!(session);
            listed["chat_id"] = json!(chat_of(&caller, &session.key));
            listed["agent"] = json!(split_agent(&session.key).0);
            listed
        })
        .collect();
    axum::Json(json!({"sessions": listed, "next_before": next})).into_response()
}

pub(super) async fn session_messages(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(key): Path<String>,
    Query(query): Query<PageQuery>,
) -> Response {
    if let Err(response) = check_session(&caller, &key) {
        return response;
    }
    let before = match query.before.as_deref().map(str::parse::<i64>).transpose() {
        Ok(before) => before,
        Err(_) => return bad_query("before must be a message position, as the page's `before` gives it"),
    };
    match state.store.session_messages(&key, before, query.limit()).await {
        Ok(page) => {
            axum::Json(json!({"session_key": key, "messages": page.messages, "before": page.before})).into_response()
        }
        Err(err) => store_failed(&err),
    }
}

pub(super) async fn delete_session(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(key): Path<String>,
) -> Response {
    if let Err(response) = check_session(&caller, &key) {
        return response;
    }
    match state.store.delete_session(&key).await {
        Ok(true) => {
            tracing::info!(session_key = %key, token = caller.token.as_deref().unwrap_or("-"), "session deleted through the API");
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(false) => not_found("no such session"),
        Err(err) => store_failed(&err),
    }
}

pub(super) async fn list_runs(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<PageQuery>,
) -> Response {
    let before = match query.before_time() {
        Ok(before) => before,
        Err(response) => return response,
    };
    let session = query.session.as_deref().filter(|s| !s.is_empty());
    let allowed = match session {
        Some(key) => check_session(&caller, key),
        None if !caller.scopes.admin => {
            Err(access::forbidden("listing every run needs an admin token; name a session"))
        }
        None => Ok(()),
    };
    if let Err(response) = allowed {
        return response;
    }
    let limit = query.limit();
    let filter = RunFilter { session, before, commands: query.include_commands };
    match state.store.runs(&filter, limit).await {
        Ok(runs) => {
            let next = next_before(&runs, limit, |r| r.started_at);
            axum::Json(json!({"runs": runs, "next_before": next})).into_response()
        }
        Err(err) => store_failed(&err),
    }
}

pub(super) async fn get_run(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    match state.store.run(&id).await {
        Ok(Some(run)) if may_see(&caller, &run.session_key) => axum::Json(run).into_response(),
        Ok(_) => not_found("no such run among those this token may read"),
        Err(err) => store_failed(&err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::access::Scopes;

    fn chat_caller(identity: &str) -> Caller {
        Caller {
            token: Some(identity.into()),
            scopes: Scopes { chat: true, admin: false },
            identity: identity.into(),
            agents: Vec::new(),
        }
    }

    #[test]
    fn a_chat_token_sees_the_api_chats_of_its_identity_under_any_agent() {
        let alice = chat_caller("alice");
        for key in ["api:alice/kitchen", "helper/api:alice/kitchen"] {
            assert!(may_see(&alice, key), "{key}");
        }
        for key in ["api:alicia/x", "api:bob/alice/x", "telegram:alice/x", "api:alice", "helper/api:bob/x"] {
            assert!(!may_see(&alice, key), "{key}");
        }
        assert_eq!(chat_of(&alice, "helper/api:alice/kitchen"), Some("kitchen"));
        assert_eq!(split_agent("helper/api:alice/kitchen").0, "helper");
        assert_eq!(split_agent("api:alice/kitchen").0, "main");
    }
}
