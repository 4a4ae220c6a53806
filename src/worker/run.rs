//! One inbound message, from claim to acknowledgement.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;

use switchboard_channels::bus::BusExt;
use switchboard_channels::contract::{InboundMessage, OutboundKind, OutboundMessage, RunEventBody, Usage, reply};
use switchboard_channels::meters::{FlowLabel, meters};
use tracing::Instrument;

use super::Shared;
use super::abort;
use super::access::{self, Access};
use super::agents::Route;
use super::events::BusEvents;
use super::hygiene;
use super::job::{Choices, Control};
use super::keepalive::{Held, Settle};
use super::settle::reply_to;
use super::turn::TurnPlan;
use crate::agent::{EventSink, SteerReceiver};
use crate::context::compaction;
use crate::store::users::Billing;
use crate::store::{BusWrites, RunClaim, RunOutcome, RunStatus};
use crate::tools::run_clock::RunClock;

/// How long to wait before a message is tried again after the store or bus failed.
const RETRY_DELAY: Duration = Duration::from_secs(5);

/// Why a message goes back to the bus instead of being acked.
enum Giveback {
    Stopping,
    Transient(String),
    /// It can never be finished (its reply is one the bus refuses): dead-letter it.
    Permanent(String),
}

/// Runs `msg`'s turn and settles its delivery; true when it was acked (its outcome stored).
/// `control` is the session's stop handle and steering messages.
pub(super) async fn process(shared: &Shared, msg: InboundMessage, held: Held, control: Control<'_>) -> bool {
    let route = shared.agents.get().route(&msg);
    let span = tracing::info_span!("run", agent = %route.agent.settings().name, session = %route.key,
        inbound = %msg.id, run_id = tracing::field::Empty, status = tracing::field::Empty,
        duration_ms = tracing::field::Empty);
    let started = std::time::Instant::now();
    // A panic anywhere in the run is a bug, but it must cost one answer, not the chat: the
    // session task would die with the session still marked busy.
    let answered_row = held.journal_row();
    let inner = AssertUnwindSafe(process_inner(shared, &route, &msg, answered_row, control)).catch_unwind();
    let (verdict, panicked) = match inner.instrument(span.clone()).await {
        Ok(verdict) => (verdict, false),
        Err(panic) => {
            let text = abort::panic_text(panic.as_ref());
            abort::recover_from_panic(shared, &msg, &route.key, &text).instrument(span.clone()).await;
            (Ok(Done::default()), true)
        }
    };
    span.record("duration_ms", started.elapsed().as_millis() as u64);
    // The run's one line at `info`: the span's fields (run id, session, status, duration) reach
    // the log only with an event logged in it.
    span.in_scope(|| match &verdict {
        Ok(_) if panicked => tracing::error!("run panicked"),
        Ok(_) => tracing::info!("run finished"),
        Err(_) => tracing::info!("run given back to the bus"),
    });
    // Not while stopping: a compaction would only eat into the shutdown grace period.
    let compact = match &verdict {
        Ok(Done { compaction_due: true, billing, .. }) if !panicked && !shared.stopping.is_cancelled() => {
            Some(billing.clone())
        }
        _ => None,
    };
    let settle = match verdict {
        Ok(Done { journaled: true, .. }) => Settle::AckJournaled,
        Ok(_) => Settle::Ack,
        Err(Giveback::Stopping) => Settle::Nak(None),
        Err(Giveback::Transient(reason)) => {
            span.in_scope(|| tracing::warn!(%reason, "giving the message back to the bus to retry"));
            Settle::Nak(Some(RETRY_DELAY))
        }
        Err(Giveback::Permanent(reason)) => {
            let subject = held.subject().to_owned();
            let payload = serde_json::to_string(&msg)
                .unwrap_or_else(|err| format!("(the message cannot be encoded again: {err})"));
            super::dead_letter_payload(shared, &subject, payload, reason, held).await;
            return true;
        }
    };
    let acked = matches!(settle, Settle::Ack | Settle::AckJournaled);
    held.settle(settle).await;
    // After the ack, still in the session's task: the next turn of this session waits for
    // the compaction, other sessions do not.
    if let Some(billing) = compact {
        compact_session(shared, &route, &msg, billing.as_ref()).instrument(span).await;
    }
    acked
}

/// Compacts the session if due (the turn found it may be), its memory flush in the memory scope of the chat (the scope
/// decided as for the turn). When the scope cannot be decided, nothing is compacted now: the
/// next turn tries again, and no flush ever runs in a scope it was not given.
async fn compact_session(shared: &Shared, route: &Route, msg: &InboundMessage, billing: Option<&Billing>) {
    let (engine, store, agent) = (&shared.context, shared.store.as_ref(), &route.agent);
    // Most turns end here: the scope and the flush prompt are prepared only for a compaction.
    let due = match compaction::due(engine, store, agent, &route.key, shared.settings.history_limit).await {
        Ok(Some(due)) => due,
        Ok(None) => return,
        Err(err) => {
            tracing::warn!(%err, "cannot read the history to see whether to compact; not compacting now");
            return;
        }
    };
    // Inside the run's span (the caller's): the outcome's line carries the run's fields too.
    async {
        match compact_with_flush(shared, route, msg, due, billing).await {
            Ok(compaction::Outcome::Compacted { summarized, through_id }) => {
                tracing::info!(summarized, through_id, "compacted the session's history");
            }
            Ok(compaction::Outcome::Busy) => tracing::info!("a compaction of this session is already running"),
            Ok(compaction::Outcome::NotNeeded) => {}
            Err(err) => tracing::warn!(%err, "compaction failed; history and summary left as they were"),
        }
    }
    .instrument(tracing::info_span!("compaction"))
    .await;
}

/// Why a compaction did not run or failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum CompactError {
    #[error("cannot decide the chat's memory scope: {0}")]
    Scope(String),
    #[error(transparent)]
    Compaction(#[from] compaction::CompactionError),
}

/// Compacts `due` with the memory flush in the chat's memory scope (decided as for a turn).
pub(super) async fn compact_with_flush(
    shared: &Shared,
    route: &Route,
    msg: &InboundMessage,
    due: compaction::Due,
    billing: Option<&Billing>,
) -> Result<compaction::Outcome, CompactError> {
    let (engine, store, agent) = (&shared.context, shared.store.as_ref(), &route.agent);
    let memory = super::memory_scope::scope(shared, agent, msg, None)
        .await
        .map_err(|err| CompactError::Scope(err.to_string()))?;
    // The memory flush is housekeeping: the minimal prompt, with only the file tools.
    let flush_tools = compaction::flush_filter();
    let run = super::prompt::PromptFor { msg, session_key: &route.key, memory: &memory };
    let flush_prompt = super::prompt::system_prompt(
        shared,
        agent,
        &run,
        &flush_tools,
        &Default::default(),
        crate::prompt::PromptMode::Minimal,
    )
    .await;
    let deps = compaction::Deps {
        engine,
        store,
        agent,
        session_key: &route.key,
        flush_prompt: &flush_prompt,
        memory: &memory,
        billing,
    };
    Ok(compaction::compact_due(deps, msg, due, &shared.abandon).await?)
}

/// How a processed message ended.
#[derive(Debug, Default, Clone)]
struct Done {
    /// The turn ran and its session may now be due for compaction.
    compaction_due: bool,
    /// The message's journal row was deleted with the run's outcome.
    journaled: bool,
    /// Who paid for the turn: who pays for a compaction after it.
    billing: Option<Billing>,
}

/// `answered_row`: the message's journal row, deleted with the outcome when the journal is
/// the store's database.
async fn process_inner(
    shared: &Shared,
    route: &Route,
    msg: &InboundMessage,
    answered_row: Option<i64>,
    control: Control<'_>,
) -> Result<Done, Giveback> {
    let Control { cancel, steer, choices } = control;
    if shared.stopping.is_cancelled() {
        return Err(Giveback::Stopping);
    }
    let _permit = tokio::select! {
        _ = shared.stopping.cancelled() => return Err(Giveback::Stopping),
        permit = shared.runs.acquire() => permit.map_err(|_| Giveback::Stopping)?,
    };
    let session_key = &route.key;
    let claim = shared.store.claim_run(&msg.id, session_key).await.map_err(transient)?;
    let run_id = match claim {
        RunClaim::Finished { run_id, reply, delivered } => {
            tracing::info!(%run_id, delivered, "message already answered; not running it again");
            match (reply, delivered) {
                (Some(reply), false) => deliver(shared, &run_id, &reply).await?,
                (Some(reply), true) if wants_reply_again(msg) => resend(shared, msg, &reply).await?,
                _ => {}
            }
            return Ok(Done::default());
        }
        RunClaim::New { run_id } => run_id,
        RunClaim::Resumed { run_id, attempt } => {
            tracing::info!(%run_id, attempt, "resuming a run whose worker stopped before finishing");
            meters().redelivered(FlowLabel::inbound);
            if let Some(outcome) = abort::approval_gone(shared, msg, &run_id, session_key).await.map_err(transient)? {
                let journaled = finish(shared, msg, &run_id, &outcome, answered_row).await?;
                return Ok(Done { journaled, ..Done::default() });
            }
            run_id
        }
    };
    let (agent_name, started) = (route.agent.settings().name.as_str(), std::time::Instant::now());
    meters().run_started(agent_name, &msg.channel);
    // Displayed, not debugged: `run_id=0192…` in text logs, as `session` is, without quotes.
    tracing::Span::current().record("run_id", tracing::field::display(&run_id));
    let access = access::admit(shared, &route.agent, msg).await.map_err(transient)?;
    let (msg, access) = hygiene::screen_input(shared, msg, access);
    let msg = msg.as_ref();
    // Dropping the turn's future on cancel stops its model call and tools at once; `biased`
    // so a run stopped before it started never calls the model.
    // Stands still while a call waits for an approver: that wait is not the run's.
    let clock = RunClock::default();
    let (outcome, compaction_due) = tokio::select! {
        biased;
        _ = shared.abandon.cancelled() => return Err(Giveback::Stopping),
        _ = cancel.cancelled() => (abort::stopped(shared, msg, &run_id, session_key), false),
        () = clock.expired(tokio::time::Instant::now(), shared.settings.run_timeout) => {
            (abort::timed_out(shared, msg, &run_id, session_key, shared.settings.run_timeout), false)
        }
        ran = run_turn(shared, route, msg, &run_id, access, Turning { steer, choices, clock: clock.clone() }) => ran?,
    };
    tracing::Span::current().record("status", tracing::field::display(outcome.status.as_str()));
    let journaled = finish(shared, msg, &run_id, &outcome, answered_row).await?;
    // Only now: until the reply naming its files is stored, a new attempt looks for them.
    super::files::clear(&route.agent.settings().workspace, &run_id).await;
    count_outcome(agent_name, &msg.channel, &outcome, started.elapsed());
    Ok(Done { compaction_due, journaled, billing: outcome.billing })
}

/// Stores the outcome and publishes the reply. When the bus's journal is the store's database
/// (the embedded shape), that is one transaction, which also deletes the answered message's
/// journal row: returns true, and the delivery is settled without another write.
async fn finish(
    shared: &Shared,
    msg: &InboundMessage,
    run_id: &str,
    outcome: &RunOutcome,
    answered_row: Option<i64>,
) -> Result<bool, Giveback> {
    let record = match outcome.reply.as_ref().map(|reply| shared.bus.outbound_record(reply)) {
        Some(Some(Ok(record))) => Some(record),
        // No reply: only the message's row goes with the outcome.
        None if answered_row.is_some() => None,
        // Another bus, or a reply the bus refuses (stored, then the message is dead-lettered).
        _ => return finish_apart(shared, msg, run_id, outcome).await.map(|()| false),
    };
    let writes = BusWrites { reply: record.as_ref(), answered_row };
    let row = shared.store.finish_run_journaled(run_id, outcome, &writes).await.map_err(transient)?;
    super::cron_hooks::record_finish(shared, msg, outcome).await;
    if let (Some(record), Some(row)) = (record, row)
        && let Err(err) = shared.bus.queue_journaled(record, row).await
    {
        // It is in the journal: the next start delivers it.
        tracing::warn!(%err, "cannot queue the reply now");
    }
    Ok(answered_row.is_some())
}

/// Stores the outcome, then publishes the reply and marks it sent: three transactions.
async fn finish_apart(
    shared: &Shared,
    msg: &InboundMessage,
    run_id: &str,
    outcome: &RunOutcome,
) -> Result<(), Giveback> {
    shared.store.finish_run(run_id, outcome).await.map_err(transient)?;
    super::cron_hooks::record_finish(shared, msg, outcome).await;
    if let Some(reply) = &outcome.reply {
        deliver(shared, run_id, reply).await?;
    }
    Ok(())
}

/// A stored outcome in the metrics: the run, its duration, what it used.
fn count_outcome(agent: &str, channel: &str, outcome: &RunOutcome, took: Duration) {
    let failed = outcome.status == RunStatus::Failed;
    meters().run_finished(agent, channel, failed, took.as_secs_f64());
    meters().usage(agent, &outcome.model, outcome.usage, outcome.cost_usd);
}

fn transient(err: impl std::fmt::Display) -> Giveback {
    Giveback::Transient(err.to_string())
}

/// A client retry of an API request sent with an idempotency key, arriving after its reply
/// went out (the API process may have restarted and lost it): it asks for the reply again.
fn wants_reply_again(msg: &InboundMessage) -> bool {
    msg.metadata.get(switchboard_channels::api::RESEND_REPLY).and_then(serde_json::Value::as_bool) == Some(true)
}

/// Sends a stored reply again under a new id, so the bus's dedupe of the first one (within
/// its window) does not swallow it. The run is not touched.
async fn resend(shared: &Shared, msg: &InboundMessage, reply: &OutboundMessage) -> Result<(), Giveback> {
    let mut again = reply.clone();
    again.id = format!("{}:again:{}", reply.id, uuid::Uuid::now_v7());
    // The retry may have come through another instance of the channel than the first try.
    again.channel = msg.reply_channel();
    shared.bus.publish_outbound(&again).await.map_err(transient)
}

async fn deliver(shared: &Shared, run_id: &str, reply: &OutboundMessage) -> Result<(), Giveback> {
    shared.bus.publish_outbound(reply).await.map_err(|err| {
        if err.is_permanent() {
            Giveback::Permanent(format!("its reply cannot be published: {err}"))
        } else {
            transient(err)
        }
    })?;
    shared.store.mark_reply_delivered(run_id).await.map_err(transient)
}

/// What a turn takes from its session: the steering channel and the chat's choices.
struct Turning<'a> {
    steer: &'a mut SteerReceiver,
    choices: Choices,
    clock: RunClock,
}

async fn run_turn(
    shared: &Shared,
    route: &Route,
    msg: &InboundMessage,
    run_id: &str,
    access: Access,
    turning: Turning<'_>,
) -> Result<(RunOutcome, bool), Giveback> {
    let Turning { steer, choices, clock } = turning;
    let (agent, session_key) = (&route.agent, route.key.as_str());
    if let Some(outcome) = super::cron_hooks::reminder(msg, run_id, session_key) {
        // Live views see a reminder like any run, without a model.
        let events = BusEvents::start(Arc::clone(&shared.bus), msg, run_id, session_key);
        events.emit(RunEventBody::Started);
        let (reply, usage, model) = (msg.content.clone(), Usage::default(), String::new());
        events.emit(RunEventBody::completed(reply, usage, model, None));
        return Ok((outcome, false));
    }
    let (tools, level, billing) = match access {
        Access::Allowed { tools, level, billing } => (tools, level, billing),
        Access::OverBudget { notice } | Access::Blocked { notice } => {
            return Ok((over_budget(shared, msg, run_id, session_key, notice), false));
        }
    };
    let events = BusEvents::with_progress(Arc::clone(&shared.bus), msg, run_id, session_key, choices.verbose);
    events.emit(RunEventBody::Started);
    let mut input = super::voice::turn_input(shared, msg).await;
    let model = choices.model.as_deref().unwrap_or(&agent.settings().model);
    input.context = Some(super::prompt::context_line(shared, msg, level, model));
    // The level `access::admit` found for the person the message acts for: no second lookup.
    let memory = super::memory_scope::scope(shared, agent, msg, Some(level)).await.map_err(transient)?;
    let memory_scope = memory.label(&agent.settings().name);
    let plan = TurnPlan { agent, msg, run_id, session_key, tools, level, clock, input, memory, model: choices.model };
    let ran = super::turn::run_agent(shared, &plan, &events, steer).await.map_err(transient)?;
    let mut result = ran.result;
    let ack_limit = hygiene::heartbeat_ack_limit(agent.settings(), msg);
    let suppressed = hygiene::clean_reply(&mut result, ack_limit);
    let files = super::files::collect(shared, &agent.settings().workspace, run_id, &plan.memory, session_key).await;
    result.reply = files.noted(&result.reply);
    let status = if result.error.is_some() { RunStatus::Failed } else { RunStatus::Completed };
    let kind = if result.error.is_some() { OutboundKind::Notice } else { OutboundKind::Reply };
    let mut reply = reply_to(msg, run_id, session_key, kind, result.reply.clone());
    // Files the run made go out even when it had nothing to say about them.
    let suppressed = suppressed && files.media.is_empty() && files.note.is_none();
    reply.media = files.media;
    hygiene::mark_suppressed(&mut reply, suppressed);
    // `cost_usd` is `null` when unknown (a model without a price), so it is never taken for zero.
    reply::set_model(&mut reply, &result.model, result.usage, result.cost_usd);
    events.emit(match &result.error {
        None => RunEventBody::Completed {
            reply: result.reply.clone(),
            usage: result.usage,
            model: result.model.clone(),
            cost_usd: result.cost_usd,
            media: reply.media.clone(),
        },
        Some(error) => RunEventBody::Failed { error: error.clone() },
    });
    let outcome = RunOutcome {
        status,
        transcript: result.transcript,
        reply: Some(reply),
        error: result.error,
        usage: result.usage,
        model: result.model,
        cost_usd: result.cost_usd,
        iterations: result.iterations,
        context_tokens: result.context_tokens,
        billing,
        memory_scope,
    };
    Ok((outcome, ran.compaction_due))
}

/// A run that stops before the model: the sender's budget is used up, or the input guard
/// refused the message. It is stored and
/// delivered like any other, so the notice too goes out at most once per message. Nothing is
/// added to the transcript: the model never saw the message.
fn over_budget(shared: &Shared, msg: &InboundMessage, run_id: &str, session_key: &str, notice: String) -> RunOutcome {
    let events = BusEvents::start(Arc::clone(&shared.bus), msg, run_id, session_key);
    events.emit(RunEventBody::Started);
    events.emit(RunEventBody::completed(notice.clone(), Usage::default(), "", None));
    RunOutcome::answered(reply_to(msg, run_id, session_key, OutboundKind::Notice, notice))
}
