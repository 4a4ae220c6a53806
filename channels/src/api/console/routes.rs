//! The handlers of `/v1/admin/…`. Each refuses a caller without the admin scope (403, the
//! shape every refusal has) before it reads anything, and answers 503 in a process that was
//! started without a console desk.

#![expect(clippy::result_large_err, reason = "the errors are the answers to send; one per failed request")]

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, post, put};
use serde::{Deserialize, Serialize};

use super::desk::{ApprovalDecision, ConsoleDesk, ConsoleError, CronAction};
use super::views::{NewCronJob, UsagePeriod};
use crate::api::access::{self, Caller};
use crate::api::errors::error;
use crate::api::state::AppState;

/// What a chat token is told on an admin route.
const NO_ADMIN_SCOPE: &str = "the owner console needs an admin token";
/// Longest usage period, in days.
const MAX_USAGE_DAYS: u32 = 366;
const DEFAULT_USAGE_DAYS: u32 = 30;

type Route = (&'static str, &'static str, MethodRouter<Arc<AppState>>);

/// A handler's answer; the error is a refusal answered as it is.
type Answer = Result<Response, Response>;

/// The console's routes, guarded like every other API route.
pub(in crate::api) fn routes() -> Vec<Route> {
    vec![
        ("get", "/v1/admin/people", get(people)),
        ("put", "/v1/admin/people/{identity}/level", put(set_level)),
        ("post", "/v1/admin/pairings/{channel}/{code}/{decision}", post(decide_pairing)),
        ("get", "/v1/admin/approvals", get(approvals)),
        ("post", "/v1/admin/approvals/{code}/{decision}", post(decide_approval)),
        ("get", "/v1/admin/cron", get(schedule)),
        ("post", "/v1/admin/cron", post(add_cron_job)),
        ("post", "/v1/admin/cron/{id}/{action}", post(cron_action)),
        ("delete", "/v1/admin/cron/{id}", delete(delete_cron_job)),
        ("get", "/v1/admin/usage", get(usage)),
        ("get", "/v1/admin/health", get(health)),
    ]
}

/// The desk, when `caller` may use it.
fn desk(state: &AppState, caller: &Caller) -> Result<Arc<dyn ConsoleDesk>, Response> {
    if !caller.scopes.admin {
        return Err(access::forbidden(NO_ADMIN_SCOPE));
    }
    state.console.clone().ok_or_else(|| {
        error(StatusCode::SERVICE_UNAVAILABLE, "console_unavailable", "this process has no owner console")
    })
}

/// Who acts, as decisions record it.
fn actor(caller: &Caller) -> String {
    format!("api:{}", caller.identity)
}

fn answer<T: Serialize>(result: Result<T, ConsoleError>) -> Response {
    match result {
        Ok(value) => axum::Json(value).into_response(),
        Err(ConsoleError::NotFound(text)) => error(StatusCode::NOT_FOUND, "not_found", &text),
        Err(ConsoleError::Invalid(text)) => error(StatusCode::BAD_REQUEST, "invalid_request", &text),
        Err(ConsoleError::NoLongerOpen(text)) => error(StatusCode::CONFLICT, "no_longer_open", &text),
        Err(ConsoleError::Failed(text)) => {
            tracing::error!(error = %text, "an owner console request failed");
            error(StatusCode::INTERNAL_SERVER_ERROR, "console_error", "that did not work; the log has the details")
        }
    }
}

fn parse_body<T: for<'de> Deserialize<'de>>(body: Result<Bytes, BytesRejection>) -> Result<T, Response> {
    let body = body.map_err(|rejection| error(rejection.status(), "invalid_body", &rejection.body_text()))?;
    serde_json::from_slice(&body)
        .map_err(|err| error(StatusCode::BAD_REQUEST, "invalid_body", &format!("invalid JSON body: {err}")))
}

fn logged(caller: &Caller, what: &str, subject: &str) {
    tracing::info!(token = caller.token.as_deref().unwrap_or("-"), what, subject, "owner console");
}

async fn people(State(state): State<Arc<AppState>>, Extension(caller): Extension<Caller>) -> Answer {
    Ok(answer(desk(&state, &caller)?.people().await))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LevelBody {
    level: String,
}

async fn set_level(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(identity): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let desk = desk(&state, &caller)?;
    let body: LevelBody = parse_body(body)?;
    logged(&caller, "set level", &identity);
    Ok(answer(desk.set_level(&identity, &body.level, &actor(&caller)).await))
}

async fn decide_pairing(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path((channel, code, decision)): Path<(String, String, String)>,
) -> Answer {
    let desk = desk(&state, &caller)?;
    let approve = match decision.as_str() {
        "approve" => true,
        "deny" => false,
        _ => return Err(error(StatusCode::NOT_FOUND, "not_found", "a pairing request is approved or denied")),
    };
    logged(&caller, &format!("pairing {decision}"), &format!("{channel} {code}"));
    Ok(answer(desk.decide_pairing(&channel, &code, approve, &actor(&caller)).await))
}

async fn approvals(State(state): State<Arc<AppState>>, Extension(caller): Extension<Caller>) -> Answer {
    let approvals = desk(&state, &caller)?.approvals().await;
    Ok(answer(approvals.map(|approvals| serde_json::json!({"approvals": approvals}))))
}

async fn decide_approval(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path((code, decision)): Path<(String, String)>,
) -> Answer {
    let desk = desk(&state, &caller)?;
    let decision = match decision.as_str() {
        "allow_once" => ApprovalDecision::AllowOnce,
        "allow_chat" => ApprovalDecision::AllowChat,
        "deny" => ApprovalDecision::Deny,
        _ => {
            return Err(error(
                StatusCode::NOT_FOUND,
                "not_found",
                "an approval is decided allow_once, allow_chat or deny",
            ));
        }
    };
    logged(&caller, "approval decision", &code);
    Ok(answer(desk.decide_approval(&code, decision, &actor(&caller)).await))
}

async fn schedule(State(state): State<Arc<AppState>>, Extension(caller): Extension<Caller>) -> Answer {
    Ok(answer(desk(&state, &caller)?.schedule().await))
}

async fn add_cron_job(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let desk = desk(&state, &caller)?;
    let job: NewCronJob = parse_body(body)?;
    logged(&caller, "add cron job", &job.to);
    Ok(match desk.add_cron_job(&job, &actor(&caller)).await {
        Ok(job) => (StatusCode::CREATED, axum::Json(job)).into_response(),
        Err(err) => answer::<()>(Err(err)),
    })
}

async fn cron_action(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path((id, action)): Path<(String, String)>,
) -> Answer {
    let desk = desk(&state, &caller)?;
    let action = match action.as_str() {
        "pause" => CronAction::Pause,
        "resume" => CronAction::Resume,
        "run" => CronAction::RunNow,
        _ => return Err(error(StatusCode::NOT_FOUND, "not_found", "a cron job is paused, resumed or run")),
    };
    logged(&caller, "cron job", &id);
    Ok(answer(desk.cron_action(&id, action, &actor(&caller)).await))
}

async fn delete_cron_job(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Answer {
    let desk = desk(&state, &caller)?;
    logged(&caller, "delete cron job", &id);
    Ok(answer(desk.cron_action(&id, CronAction::Delete, &actor(&caller)).await))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct UsageQuery {
    days: Option<u32>,
}

async fn usage(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<UsageQuery>,
) -> Answer {
    let desk = desk(&state, &caller)?;
    let days = query.days.unwrap_or(DEFAULT_USAGE_DAYS);
    if !(1..=MAX_USAGE_DAYS).contains(&days) {
        let text = format!("days must be 1 to {MAX_USAGE_DAYS}");
        return Err(error(StatusCode::BAD_REQUEST, "invalid_query", &text));
    }
    Ok(answer(desk.usage(UsagePeriod { days }).await))
}

async fn health(State(state): State<Arc<AppState>>, Extension(caller): Extension<Caller>) -> Answer {
    let checks = desk(&state, &caller)?.health().await;
    Ok(answer(checks.map(|checks| serde_json::json!({"checks": checks}))))
}
