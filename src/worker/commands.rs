//! Chat commands (`/new` or `/reset`, `/stop`, `/compact`, `/status`, `/usage`, `/help`, `/queue`,
//! `/model`, `/verbose`, and the owner's, see [`super::owner`]): handled when they arrive,
//! not behind the session's running turn, and answered with a `notice` (a list with buttons:
//! a notice per item, then the reply; see [`super::answer`]).
//!
//! A command is recorded like a run (claimed by its inbound id, finished with its answer), so
//! a redelivered command is not executed again: its stored answer is re-sent if it never went
//! out (see [`super::settle`]).

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use switchboard_channels::contract::{InboundMessage, SessionKey, commands};
use tracing::Instrument;

use super::Intake;
use super::answer::{Answer, publish_items};
use super::job::Job;
use super::keepalive::Settle;
use super::owner::Deciding;
use super::session::set_mode;
use super::settle::{claim, finish, give_back, settle_unanswered};
use crate::config::Level;
use crate::config::QueueMode;
use crate::context::compaction::{self, Outcome};
use crate::store::approvals::Verdict;
use crate::store::{RunKind, RunStatus, StoreError};

/// How long `/new` waits for a cancelled run to store its outcome before archiving.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// A chat command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Command {
    New,
    Stop,
    /// Compact the session's history now.
    Compact,
    Status,
    /// The sender's level here, tokens used this month and what is left.
    Usage,
    Help,
    /// `/queue` shows the mode; `/queue <mode>` sets it.
    Queue(Option<String>),
    /// `/model` lists the agent's models; `/model <name>` picks one for this chat.
    Model(Option<String>),
    /// `/verbose` shows the setting; `/verbose on|off` sets it.
    Verbose(Option<String>),
    /// The owner's: pairing requests and tool calls waiting.
    Pending,
    /// The owner's: let a stranger in, or allow a waiting call (`chat`: later ones in its chat too).
    Approve {
        code: Option<String>,
        chat: bool,
    },
    /// The owner's: turn a stranger away, or refuse a waiting call.
    Deny(Option<String>),
    /// The owner's: people, levels and this month's use.
    Users,
    /// The owner's: `/level <person> <level>`, the words after the command.
    Level(Vec<String>),
    /// The owner's: the cron jobs, with buttons.
    Cron,
    /// The owner's: this month's tokens and cost by person and group.
    Spend,
}

impl Command {
    /// Whether a sender who may decide what `deciding` says may use this command: the
    /// owner's commands need an owner, the three about waiting calls an owner or an approver.
    fn may_be_used(&self, deciding: Deciding) -> bool {
        match self {
            Command::Pending | Command::Approve { .. } | Command::Deny(_) => deciding.decides_any(),
            command if command.is_owners() => deciding.owner,
            _ => true,
        }
    }

    fn is_owners(&self) -> bool {
        matches!(
            self,
            Command::Pending
                | Command::Approve { .. }
                | Command::Deny(_)
                | Command::Users
                | Command::Level(_)
                | Command::Cron
                | Command::Spend
        )
    }
}

/// Reads a command from a message's text: `/name`, `/name@botname`, then arguments.
pub(super) fn parse(content: &str) -> Option<Command> {
    let (name, mut args) = commands::split(content)?;
    Some(match commands::find(name)?.name {
        "new" | "reset" => Command::New,
        "stop" => Command::Stop,
        "compact" => Command::Compact,
        "status" => Command::Status,
        "usage" => Command::Usage,
        "help" => Command::Help,
        "queue" => Command::Queue(args.next().map(str::to_owned)),
        "model" => Command::Model(args.next().map(str::to_owned)),
        "verbose" => Command::Verbose(args.next().map(str::to_owned)),
        "pending" => Command::Pending,
        "approve" => Command::Approve {
            code: args.next().map(str::to_owned),
            chat: args.next().is_some_and(|word| word.eq_ignore_ascii_case("chat")),
        },
        "deny" => Command::Deny(args.next().map(str::to_owned)),
        "users" => Command::Users,
        "level" => Command::Level(args.map(str::to_owned).collect()),
        "cron" => Command::Cron,
        "spend" => Command::Spend,
        // A command of the table this worker does not implement (from a newer contract).
        _ => return None,
    })
}

/// Runs a command and answers it, once per inbound id, in a span of its own: its lines carry
/// the session and the command's run id as a run's do.
pub(super) async fn handle(intake: Arc<Intake>, job: Job, command: Command) {
    let key = intake.turns.agents.get().session_key(&job.msg);
    let span = tracing::info_span!("command", session = %key, inbound = %job.msg.id, run_id = tracing::field::Empty);
    handle_in_span(intake, job, command, key).instrument(span).await;
}

async fn handle_in_span(intake: Arc<Intake>, job: Job, command: Command, key: SessionKey) {
    let run_id = match claim(&intake.turns, &job.msg, RunKind::Command).await {
        Ok(Some(run_id)) => run_id,
        Ok(None) => return job.held.settle(Settle::Ack).await,
        Err(err) => return give_back(job, err).await,
    };
    tracing::Span::current().record("run_id", tracing::field::display(&run_id));
    let Answer { items, text } = match execute(&intake, &job, &key, command).await {
        Ok(answer) => answer,
        Err(err) => return give_back(job, err).await,
    };
    if let Err(err) = publish_items(intake.turns.bus.as_ref(), &job.msg, &run_id, items).await {
        return give_back(job, err).await;
    }
    match finish(&intake.turns, &job.msg, &run_id, RunStatus::Completed, Some(text)).await {
        Ok(()) => job.held.settle(Settle::Ack).await,
        Err(err) => give_back(job, err).await,
    }
}

async fn execute(intake: &Intake, job: &Job, key: &SessionKey, command: Command) -> Result<Answer, StoreError> {
    let needs_user = matches!(
        command,
        Command::New
            | Command::Stop
            | Command::Compact
            | Command::Queue(Some(_))
            | Command::Model(Some(_))
            | Command::Verbose(Some(_))
    );
    if needs_user && job.msg.is_group && intake.turns.people().level_here(&job.msg).await? < Level::User {
        return Ok(String::from("Only members with the user level or above can do that in a group.").into());
    }
    // Only the owner's commands and /help depend on it: the others do not look the sender up.
    let deciding = match command.is_owners() || command == Command::Help {
        true => Deciding::of(&intake.turns, &job.msg).await?,
        false => Deciding::default(),
    };
    if !command.may_be_used(deciding) {
        return Ok(super::owner::unknown(&job.msg.content).into());
    }
    let control = &intake.turns.control;
    Ok(match command {
        Command::Help => super::owner::help(deciding),
        Command::Pending => super::owner::pending(&intake.turns, deciding).await?,
        Command::Approve { code, chat } => {
            let verdict = if chat { Verdict::AllowChat } else { Verdict::AllowOnce };
            super::owner::decide(control, &job.msg, code.as_deref(), verdict, deciding).await?
        }
        Command::Deny(code) => {
            super::owner::decide(control, &job.msg, code.as_deref(), Verdict::Deny, deciding).await?
        }
        Command::Users => super::owner::users(&intake.turns).await?,
        Command::Level(words) => super::owner::level(&intake.turns, &job.msg, &words).await?,
        Command::Cron => return super::owner::cron(&intake.turns.control).await,
        Command::Spend => super::owner::spend(&intake.turns).await?,
        Command::Status => status(intake, &job.msg, key).await?,
        Command::Usage => super::usage::report(&intake.turns.people(), &job.msg).await?,
        Command::Stop => {
            let subagents = cancel_subagents(intake, key).await;
            stop(intake, key, job.seq, subagents).await
        }
        Command::New => {
            let subagents = cancel_subagents(intake, key).await;
            new_conversation(intake, key).await?;
            format!("Started a new conversation.{}", cancelled_note(subagents))
        }
        Command::Compact => compact_now(intake, &job.msg, key).await?,
        Command::Queue(None) => {
            let mode = current_mode(intake, key).await?;
            format!("Queue mode: {}. Modes: {}.", mode.as_str(), QueueMode::names())
        }
        Command::Queue(Some(name)) => match QueueMode::parse(&name) {
            Some(mode) => {
                intake.turns.store.set_queue_mode(key, Some(mode)).await?;
                set_mode(intake, key, mode);
                format!("Queue mode set to {}.", mode.as_str())
            }
            None => format!("Unknown queue mode {name:?}. Modes: {}.", QueueMode::names()),
        },
        Command::Model(name) => super::prefs::model(intake, &job.msg, key, name.as_deref()).await?,
        Command::Verbose(value) => super::prefs::verbose(intake, key, value.as_deref()).await?,
    }
    .into())
}

/// `/compact`: the history summarised now, whatever its size, keeping the newest messages as a
/// compaction after a turn does (and the memory flush before it).
async fn compact_now(intake: &Intake, msg: &InboundMessage, key: &SessionKey) -> Result<String, StoreError> {
    let route = intake.turns.agents.get().route(msg);
    let (engine, store, limit) =
        (&intake.turns.context, intake.turns.store.as_ref(), intake.turns.settings.history_limit);
    let Some(due) = compaction::due_now(engine, store, &route.agent, key, limit).await? else {
        return Ok("Nothing to compact yet: the conversation has no earlier exchange to summarise.".into());
    };
    let billing = intake.turns.people().billing_for(msg).await?;
    Ok(match super::compact::compact_with_flush(&intake.turns, &route, msg, due, billing.as_ref(), None).await {
        Ok(Outcome::Compacted { summarized, .. }) => {
            format!("Compacted: the {summarized} oldest messages of this conversation are now a summary.")
        }
        Ok(Outcome::Busy) => "A compaction of this conversation is already running.".into(),
        Ok(Outcome::NotNeeded) => {
            "Nothing to compact yet: the conversation has no earlier exchange to summarise.".into()
        }
        Err(err) => {
            tracing::warn!(%err, session = %key, "/compact failed");
            format!("The compaction failed ({err}); the conversation is as it was.")
        }
    })
}

/// Cancels the session's sub-agents; how many.
async fn cancel_subagents(intake: &Intake, key: &SessionKey) -> usize {
    match intake.turns.subagents.get() {
        Some(manager) => manager.cancel_session(key).await,
        None => 0,
    }
}

fn cancelled_note(subagents: usize) -> String {
    match subagents {
        0 => String::new(),
        1 => " Cancelled 1 sub-agent.".into(),
        n => format!(" Cancelled {n} sub-agents."),
    }
}

/// Cancels the running turn and drops the messages that arrived before this command
/// (`subagents`: how many of the session's sub-agents were cancelled already).
async fn stop(intake: &Intake, key: &SessionKey, seq: u64, subagents: usize) -> String {
    let (was_running, dropped) = {
        let mut sessions = intake.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        match sessions.get_mut(key) {
            Some(session) => {
                let running = session.active.as_ref().map(|active| active.cancel.cancel()).is_some();
                // Messages sent after `/stop` are kept: the user wrote them knowing they stopped.
                let (dropped, kept) = session.queue.drain(..).partition::<Vec<_>, _>(|job| job.seq < seq);
                session.queue.extend(kept);
                (running, dropped)
            }
            None => (false, Vec::new()),
        }
    };
    let count = dropped.len();
    for job in dropped {
        settle_unanswered(&intake.turns, job, "dropped by /stop").await;
    }
    let head = if was_running || subagents > 0 { "Stopped." } else { "Nothing to stop." };
    let dropped = match count {
        0 => String::new(),
        1 => " Dropped 1 waiting message.".into(),
        n => format!(" Dropped {n} waiting messages."),
    };
    format!("{head}{dropped}{}", cancelled_note(subagents))
}

/// `/new` stops a running turn rather than waiting for it: its answer would belong to the
/// conversation being left. It waits until that run has stored its (empty) outcome, so no
/// transcript row of the old conversation lands after the archive point.
async fn new_conversation(intake: &Intake, key: &SessionKey) -> Result<(), StoreError> {
    let finished = {
        let sessions = intake.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        sessions.get(key).and_then(|session| session.active.as_ref()).map(|active| {
            active.cancel.cancel();
            active.finished.clone()
        })
    };
    if let Some(finished) = finished
        && tokio::time::timeout(STOP_WAIT, finished.cancelled()).await.is_err()
    {
        tracing::warn!(session = %key, "the stopped run did not finish in time; archiving anyway");
    }
    intake.turns.store.archive_session(key).await
}

async fn status(intake: &Intake, msg: &InboundMessage, key: &SessionKey) -> Result<String, StoreError> {
    let info = intake.turns.store.session_info(key).await?;
    let (waiting, running) = {
        let sessions = intake.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        sessions.get(key).map_or((0, false), |session| (session.queue.len(), session.active.is_some()))
    };
    let mode = current_mode(intake, key).await?;
    let picked = intake.turns.store.session_prefs(key).await?.model;
    let route = intake.turns.agents.get().route(msg);
    let window = intake.turns.context.window(crate::context::Target::new(&route.agent, picked.as_deref()));
    let model = picked.unwrap_or_else(|| route.agent.settings().model.clone());
    let context = match info.last_turn {
        Some(last) if last.context_tokens > 0 => format!(
            "about {} tokens, sent again with your next message (the model's window: {window})",
            last.context_tokens
        ),
        _ => format!("nothing yet (the model's window: {window} tokens)"),
    };
    let last = info.last_turn.map_or_else(|| "none yet".to_owned(), |last| spent(last.usage, last.cost_usd));
    Ok(format!(
        "Model: {model}\nConversation: {context}\nLast turn: {last}\nSince the conversation started: {}\n\
         Running: {}\nMessages waiting: {waiting}\nCompactions: {}\nQueue mode: {}",
        spent(info.used, info.cost_usd),
        if running { "yes" } else { "no" },
        info.compactions,
        mode.as_str(),
    ))
}

/// `5012 tokens in (92% from the provider's cache), 120 out, $0.0009`.
pub(super) fn spent(usage: switchboard_channels::contract::Usage, cost_usd: Option<f64>) -> String {
    let cached = match usage.cache_read_tokens {
        0 => String::new(),
        _ => format!(" ({}% from the provider's cache)", usage.cached_percent()),
    };
    let cost = cost_usd.map_or_else(String::new, |usd| format!(", ${usd:.4}"));
    let estimated = if usage.estimated { " (partly estimated: the model server reports no usage)" } else { "" };
    format!("{} tokens in{cached}, {} out{cost}{estimated}", usage.input_tokens, usage.output_tokens)
}

async fn current_mode(intake: &Intake, key: &SessionKey) -> Result<QueueMode, StoreError> {
    let info = intake.turns.store.session_info(key).await?;
    Ok(info.queue_mode.unwrap_or(intake.settings.queue.mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_read_with_or_without_the_bot_name() {
        assert_eq!(parse("/stop"), Some(Command::Stop));
        assert_eq!(parse("/reset"), Some(Command::New));
        assert_eq!(parse("  /new@switchboard_bot"), Some(Command::New));
        assert_eq!(parse("/queue collect"), Some(Command::Queue(Some("collect".into()))));
        assert_eq!(parse("/Status"), Some(Command::Status));
        assert_eq!(parse("/usage@switchboard_bot"), Some(Command::Usage));
        assert_eq!(
            parse("/level Ann Smith admin"),
            Some(Command::Level(vec!["Ann".into(), "Smith".into(), "admin".into()]))
        );
        assert_eq!(parse("/spend"), Some(Command::Spend));
        assert_eq!(parse("/unknown"), None);
        assert_eq!(parse("stop"), None);
        assert_eq!(parse("/"), None);
    }
}
