//! A run's finish as both stores write it: one row per run, with everything the finish
//! writes (the fields of `finish_rule`), serialised as JSON for a group (the SQLite store's
//! trigger, the PostgreSQL store's `finish_runs` function) or bound as parameters for one.

use serde::Serialize;

use super::values::{encode, flow_name, role_name, to_i64};
use super::{BusWrites, RunOutcome, StoreError};

/// One run's finish, as the group's JSON array carries it.
#[derive(Debug, Serialize)]
pub(in crate::store) struct FinishRow {
    pub(in crate::store) run_id: String,
    pub(in crate::store) status: &'static str,
    pub(in crate::store) model: String,
    pub(in crate::store) input_tokens: i64,
    pub(in crate::store) output_tokens: i64,
    pub(in crate::store) cache_read_tokens: i64,
    pub(in crate::store) cache_write_tokens: i64,
    pub(in crate::store) context_tokens: i64,
    pub(in crate::store) iterations: i64,
    pub(in crate::store) error: Option<String>,
    pub(in crate::store) reply_json: Option<String>,
    pub(in crate::store) finished_at: i64,
    pub(in crate::store) cost_usd: Option<f64>,
    pub(in crate::store) usage_estimated: bool,
    pub(in crate::store) memory_scope: Option<String>,
    /// `[[role, message JSON], …]`, in order.
    pub(in crate::store) transcript: Vec<(&'static str, String)>,
    pub(in crate::store) billing_channel: Option<String>,
    pub(in crate::store) billing_sender: Option<String>,
    pub(in crate::store) billing_month: Option<String>,
    pub(in crate::store) billing_group: Option<String>,
    pub(in crate::store) reply_flow: Option<&'static str>,
    pub(in crate::store) reply_channel: Option<String>,
    pub(in crate::store) reply_subject: Option<String>,
    pub(in crate::store) reply_dedupe_id: Option<String>,
    /// The reply's journal payload, which is JSON text.
    pub(in crate::store) reply_payload: Option<String>,
    pub(in crate::store) answered_seq: Option<i64>,
}

/// What the finish found and did.
#[derive(Debug)]
pub(in crate::store) enum Finished {
    /// The run is finished now.
    Done {
        session_key: String,
        /// The session's history version after this run's rows.
        history_version: i64,
        /// The reply's journal row, unless no reply was journaled or one was pending already.
        reply_row: Option<i64>,
    },
    NoSuchRun,
    /// The run was not running (another worker finished it).
    NotRunning,
}

/// What a store's finish reads back per run: its id, its session, its status before, the
/// session's history version after, the reply's journal row, whether the usage was counted
/// for a user (see `finish_rule`).
pub(in crate::store) type ResultRow = (String, Option<String>, Option<String>, Option<i64>, Option<i64>, Option<bool>);

impl Finished {
    /// The outcome of `row`'s finish from what the store read back (`None`: no row).
    pub(in crate::store) fn read(row: &FinishRow, result: Option<ResultRow>) -> Result<Finished, StoreError> {
        let Some((run_id, Some(session_key), prior_status, history_version, reply_row, usage_counted)) = result else {
            return Ok(Finished::NoSuchRun);
        };
        if prior_status.as_deref() != Some("running") {
            return Ok(Finished::NotRunning);
        }
        let history_version = history_version
            .ok_or_else(|| StoreError::Corrupt(format!("run {run_id}'s session {session_key} has no row")))?;
        if usage_counted == Some(false)
            && let Some(sender) = &row.billing_sender
        {
            // Identities are only ever moved, never deleted, so this needs a hand-edited database.
            // Failing would only make the message run (and cost) again, with the same result.
            tracing::warn!(channel = ?row.billing_channel, %sender, "a run's usage has no user to be counted for");
        }
        Ok(Finished::Done { session_key, history_version, reply_row })
    }
}

/// The finish of `run_id` with `outcome`, journaling `bus`'s writes with it, at `now` (unix ms).
pub(in crate::store) fn row(
    run_id: &str,
    outcome: &RunOutcome,
    bus: &BusWrites<'_>,
    now: i64,
) -> Result<FinishRow, StoreError> {
    let billing = outcome.billing.as_ref();
    let reply = bus.reply;
    let reply_payload = reply
        .map(|record| {
            String::from_utf8(record.payload.to_vec())
                .map_err(|_| StoreError::Corrupt(format!("run {run_id}'s reply payload is not UTF-8")))
        })
        .transpose()?;
    let transcript = outcome
        .transcript
        .iter()
        .map(|message| encode(message).map(|json| (role_name(message.role), json)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(FinishRow {
        run_id: run_id.to_owned(),
        status: outcome.status.as_str(),
        model: outcome.model.clone(),
        input_tokens: to_i64(outcome.usage.input_tokens),
        output_tokens: to_i64(outcome.usage.output_tokens),
        cache_read_tokens: to_i64(outcome.usage.cache_read_tokens),
        cache_write_tokens: to_i64(outcome.usage.cache_write_tokens),
        context_tokens: to_i64(outcome.context_tokens),
        iterations: i64::from(outcome.iterations),
        error: outcome.error.clone(),
        reply_json: outcome.reply.as_ref().map(encode).transpose()?,
        finished_at: now,
        cost_usd: outcome.cost_usd,
        usage_estimated: outcome.usage.estimated,
        memory_scope: outcome.memory_scope.clone(),
        transcript,
        billing_channel: billing.map(|billing| billing.identity.channel.clone()),
        billing_sender: billing.map(|billing| billing.identity.sender_id.clone()),
        billing_month: billing.map(|billing| billing.month.clone()),
        billing_group: billing.and_then(|billing| billing.group.clone()),
        reply_flow: reply.map(|record| flow_name(record.flow)).transpose().map_err(|err| StoreError::Corrupt(err.0))?,
        reply_channel: reply.map(|record| record.channel.clone()),
        reply_subject: reply.map(|record| record.subject.clone()),
        reply_dedupe_id: reply.and_then(|record| record.dedupe_id.clone()),
        reply_payload,
        answered_seq: bus.answered_row,
    })
}
