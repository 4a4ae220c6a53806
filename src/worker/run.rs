//! One inbound message, from claim to acknowledgement: [`TurnRunner::run`] is the turn's
//! story, top to bottom ([`TurnRunner`] owns everything a turn needs). The steps it calls take
//! only what they need.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use switchboard_channels::bus::Bus;
use switchboard_channels::contract::{
    InboundMessage, Media, OutboundKind, OutboundMessage, RunEventBody, SessionKey, Usage, reply,
};
use switchboard_channels::meters::{FlowLabel, meters};
use tracing::Instrument;

use super::TurnRunner;
use super::abort;
use super::access::Access;
use super::agents::Route;
use super::commit::{self, Giveback, transient};
use super::compact::compact_session;
use super::events::BusEvents;
use super::hygiene;
use super::job::{Choices, Control};
use super::keepalive::{Held, Settle};
use super::settle::reply_to;
use super::turn::CompactionDue;
use super::turn::TurnPlan;
use crate::agent::{EventSink, SteerReceiver, TurnResult};
use crate::store::users::Billing;
use crate::store::{RunClaim, RunOutcome, RunStatus, SessionHead};
use crate::tools::run_clock::RunClock;

/// How long to wait before a message is tried again after the store or bus failed.
const RETRY_DELAY: Duration = Duration::from_secs(5);

/// How a processed message ended.
#[derive(Debug, Default, Clone)]
struct Done {
    /// The turn ran and its session may now be due for compaction.
    compaction: Option<CompactionDue>,
    /// Who paid for the turn: who pays for a compaction after it.
    billing: Option<Billing>,
}

/// What a turn takes from its session: the steering channel, the chat's choices and the head
/// its task read on start.
struct Turning<'a> {
    steer: &'a mut SteerReceiver,
    choices: Choices,
    clock: RunClock,
    head: Option<SessionHead>,
}

impl TurnRunner {
    /// Runs `msg`'s turn and settles its delivery; true when it was acked (its outcome stored).
    /// `control` is the session's stop handle and steering messages.
    pub(super) async fn run(&self, msg: InboundMessage, held: Held, control: Control<'_>) -> bool {
        let route = self.agents.get().route(&msg);
        let span = tracing::info_span!("run", agent = %route.agent.settings().name, session = %route.key,
            inbound = %msg.id, run_id = tracing::field::Empty, status = tracing::field::Empty,
            duration_ms = tracing::field::Empty);
        let started = std::time::Instant::now();
        // A panic anywhere in the run is a bug, but it must cost one answer, not the chat: the
        // session task would die with the session still marked busy.
        // The turn's and the compaction's futures are tens of KB: boxed, each is on the heap only
        // while it runs, and this future (moved into the session's task at every spawn, and
        // into the wrappers below) stays small.
        let inner = AssertUnwindSafe(Box::pin(self.answer(&route, &msg, held.stream_seq(), control))).catch_unwind();
        let (mut verdict, panicked) = match inner.instrument(span.clone()).await {
            Ok(verdict) => (verdict, false),
            Err(panic) => {
                let text = abort::panic_text(panic.as_ref());
                abort::recover_from_panic(&self.bus, self.store.as_ref(), &msg, &route.key, &text)
                    .instrument(span.clone())
                    .await;
                (Ok(Done::default()), true)
            }
        };
        span.record("duration_ms", started.elapsed().as_millis() as u64);
        // The run's one line at `info`: the span's fields (run id, session, status, duration)
        // reach the log only with an event logged in it.
        span.in_scope(|| match &verdict {
            Ok(_) if panicked => tracing::error!("run panicked"),
            Ok(_) => tracing::info!("run finished"),
            Err(_) => tracing::info!("run given back to the bus"),
        });
        // Not while stopping: a compaction would only eat into the shutdown grace period.
        let compact = match verdict {
            Ok(Done { compaction: Some(ref mut due), ref billing }) if !panicked && !self.stopping.is_cancelled() => {
                Some((billing.clone(), due.head.take()))
            }
            _ => None,
        };
        let settle = match verdict {
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
                super::settle::dead_letter_payload(self.bus.as_ref(), &subject, payload, reason, held).await;
                return true;
            }
        };
        let acked = settle == Settle::Ack;
        held.settle(settle).await;
        // After the ack, still in the session's task: the next turn of this session waits for
        // the compaction, other sessions do not.
        if let Some((billing, head)) = compact {
            Box::pin(compact_session(self, &route, &msg, billing.as_ref(), head)).instrument(span).await;
        }
        acked
    }

    /// Claims the run, admits the sender, runs the turn (unless it is stopped, times out or is
    /// abandoned) and commits its outcome. `position`: the message's position in its stream,
    /// for the commit (see [`commit::CommitPort`]).
    async fn answer(
        &self,
        route: &Route,
        msg: &InboundMessage,
        position: Option<u64>,
        control: Control<'_>,
    ) -> Result<Done, Giveback> {
        let Control { cancel, steer, choices, head } = control;
        if self.stopping.is_cancelled() {
            return Err(Giveback::Stopping);
        }
        let _permit = tokio::select! {
            _ = self.stopping.cancelled() => return Err(Giveback::Stopping),
            permit = self.runs.acquire() => permit.map_err(|_| Giveback::Stopping)?,
        };
        let session_key = &route.key;
        let run_id = match self.store.claim_run(&msg.id, session_key).await.map_err(transient)? {
            RunClaim::Finished { run_id, reply, delivered } => {
                tracing::info!(%run_id, delivered, "message already answered; not running it again");
                commit::answered_before(self.bus.as_ref(), self.store.as_ref(), msg, &run_id, reply, delivered).await?;
                return Ok(Done::default());
            }
            RunClaim::New { run_id } => run_id,
            RunClaim::Resumed { run_id, attempt } => {
                tracing::info!(%run_id, attempt, "resuming a run whose worker stopped before finishing");
                meters().redelivered(FlowLabel::inbound);
                let gone = abort::approval_gone(&self.bus, self.store.as_ref(), msg, &run_id, session_key);
                if let Some(outcome) = gone.await.map_err(transient)? {
                    self.commit.finish(msg, &run_id, &outcome, position).await?;
                    return Ok(Done::default());
                }
                run_id
            }
        };
        let (agent_name, started) = (route.agent.settings().name.as_str(), std::time::Instant::now());
        meters().run_started(agent_name, &msg.channel);
        // Displayed, not debugged: `run_id=0192…` in text logs, as `session` is, without quotes.
        tracing::Span::current().record("run_id", tracing::field::display(&run_id));
        let access = self.people().admit(&route.agent, msg).await.map_err(transient)?;
        let (msg, access) = hygiene::screen_input(self.settings.guard.as_deref(), msg, access);
        let msg = msg.as_ref();
        // Dropping the turn's future on cancel stops its model call and tools at once; `biased`
        // so a run stopped before it started never calls the model.
        // Stands still while a call waits for an approver: that wait is not the run's.
        let clock = RunClock::default();
        let limit = self.settings.run_timeout;
        let (outcome, compaction) = tokio::select! {
            biased;
            _ = self.abandon.cancelled() => return Err(Giveback::Stopping),
            _ = cancel.cancelled() => (abort::stopped(&self.bus, msg, &run_id, session_key), None),
            () = clock.expired(tokio::time::Instant::now(), limit) => {
                (abort::timed_out(&self.bus, msg, &run_id, session_key, limit), None)
            }
            ran = self.turn(route, msg, &run_id, access, Turning { steer, choices, clock: clock.clone(), head }) => ran?,
        };
        tracing::Span::current().record("status", tracing::field::display(outcome.status.as_str()));
        self.commit.finish(msg, &run_id, &outcome, position).await?;
        // Only now: until the reply naming its files is stored, a new attempt looks for them.
        super::files::clear(&route.agent.settings().workspace, &run_id).await;
        count_outcome(agent_name, &msg.channel, &outcome, started.elapsed());
        Ok(Done { compaction, billing: outcome.billing })
    }

    /// The turn itself: a reminder's text, the notice of a sender over budget or refused by
    /// the guard, or the agent's answer with the run's files. Returns its outcome and whether
    /// the session may be due for compaction.
    async fn turn(
        &self,
        route: &Route,
        msg: &InboundMessage,
        run_id: &str,
        access: Access,
        turning: Turning<'_>,
    ) -> Result<(RunOutcome, Option<CompactionDue>), Giveback> {
        let Turning { steer, choices, clock, head } = turning;
        let (agent, session_key) = (&route.agent, &route.key);
        if let Some(reminder) = crate::scheduler::hooks::reminder(msg) {
            let reply = super::settle::reply_to(msg, run_id, session_key, OutboundKind::Reply, reminder.text);
            let outcome = RunOutcome { transcript: reminder.transcript, ..RunOutcome::answered(reply) };
            // Live views see a reminder like any run, without a model.
            let events = BusEvents::start(Arc::clone(&self.bus), msg, run_id, session_key);
            events.emit(RunEventBody::Started);
            let (reply, usage, model) = (msg.content.clone(), Usage::default(), String::new());
            events.emit(RunEventBody::completed(reply, usage, model, None));
            return Ok((outcome, None));
        }
        let (tools, level, billing) = match access {
            Access::Allowed { tools, level, billing } => (tools, level, billing),
            Access::OverBudget { notice } | Access::Blocked { notice } => {
                return Ok((over_budget(&self.bus, msg, run_id, session_key, notice), None));
            }
        };
        let events = BusEvents::with_progress(Arc::clone(&self.bus), msg, run_id, session_key, choices.verbose);
        events.emit(RunEventBody::Started);
        let guard = self.settings.guard.as_deref();
        let mut input = super::voice::turn_input(self.settings.transcriber.as_deref(), guard, msg).await;
        let model = choices.model.as_deref().unwrap_or(&agent.settings().model);
        input.context = Some(super::prompt::context_line(self, msg, level, model));
        // The level `People::admit` found for the person the message acts for: no second lookup.
        let memory = super::memory_scope::scope(&self.people(), agent, msg, Some(level)).await.map_err(transient)?;
        let memory_scope = memory.label(&agent.settings().name);
        let plan =
            TurnPlan { agent, msg, run_id, session_key, tools, level, clock, input, memory, model: choices.model };
        let ran = super::turn::run_agent(self, &plan, head, &events, steer).await.map_err(transient)?;
        let mut result = ran.result;
        let suppressed = hygiene::clean_reply(&mut result, hygiene::heartbeat_ack_limit(agent.settings(), msg));
        let workspace = &agent.settings().workspace;
        let keep = self.settings.outbox_keep;
        let files = super::files::collect(workspace, run_id, &plan.memory, session_key, keep).await;
        result.reply = files.noted(&result.reply);
        // Files the run made go out even when it had nothing to say about them.
        let suppressed = suppressed && files.media.is_empty() && files.note.is_none();
        let reply = reply_of(msg, run_id, session_key, &result, files.media, suppressed);
        events.emit(finished_event(&result, &reply));
        let outcome = turn_outcome(result, reply, billing, memory_scope);
        Ok((outcome, ran.compaction))
    }
}

/// The answer of a turn the agent ran: its text (the noted files' line included), the run's
/// files, marked suppressed or not, and the model and usage it came from.
fn reply_of(
    msg: &InboundMessage,
    run_id: &str,
    session_key: &SessionKey,
    result: &TurnResult,
    media: Vec<Media>,
    suppressed: bool,
) -> OutboundMessage {
    let kind = if result.error.is_some() { OutboundKind::Notice } else { OutboundKind::Reply };
    let mut reply = reply_to(msg, run_id, session_key, kind, result.reply.clone());
    reply.media = media;
    hygiene::mark_suppressed(&mut reply, suppressed);
    // `cost_usd` is `null` when unknown (a model without a price), so it is never taken for zero.
    reply::set_model(&mut reply, &result.model, result.usage, result.cost_usd);
    reply
}

/// What live views are told when the agent's turn ends.
fn finished_event(result: &TurnResult, reply: &OutboundMessage) -> RunEventBody {
    match &result.error {
        None => RunEventBody::Completed {
            reply: result.reply.clone(),
            usage: result.usage,
            model: result.model.clone(),
            cost_usd: result.cost_usd,
            media: reply.media.clone(),
        },
        Some(error) => RunEventBody::Failed { error: error.clone() },
    }
}

/// The outcome of a turn the agent ran, failed when the agent's result carries an error.
fn turn_outcome(
    result: TurnResult,
    reply: OutboundMessage,
    billing: Option<Billing>,
    memory_scope: Option<String>,
) -> RunOutcome {
    let status = if result.error.is_some() { RunStatus::Failed } else { RunStatus::Completed };
    RunOutcome {
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
    }
}

/// A stored outcome in the metrics: the run, its duration, what it used.
fn count_outcome(agent: &str, channel: &str, outcome: &RunOutcome, took: Duration) {
    let failed = outcome.status == RunStatus::Failed;
    meters().run_finished(agent, channel, failed, took.as_secs_f64());
    meters().usage(agent, &outcome.model, outcome.usage, outcome.cost_usd);
}

/// A run that stops before the model: the sender's budget is used up, or the input guard
/// refused the message. It is stored and delivered like any other, so the notice too goes out
/// at most once per message. Nothing is added to the transcript: the model never saw the message.
fn over_budget(
    bus: &Arc<dyn Bus>,
    msg: &InboundMessage,
    run_id: &str,
    session_key: &SessionKey,
    notice: String,
) -> RunOutcome {
    let events = BusEvents::start(Arc::clone(bus), msg, run_id, session_key);
    events.emit(RunEventBody::Started);
    events.emit(RunEventBody::completed(notice.clone(), Usage::default(), "", None));
    RunOutcome::answered(reply_to(msg, run_id, session_key, OutboundKind::Notice, notice))
}
