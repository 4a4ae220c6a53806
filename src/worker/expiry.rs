//! The wait limit (`worker.max_wait_secs`): a message that waited too long behind other turns
//! (a slow model, a long tool run) gets a short note instead of a turn that would answer a
//! conversation that has moved on.
//!
//! **The wait** runs from when the channel adapter accepted the message (`received_at`, the
//! daemon's clock in milliseconds; never the platform's own timestamp, which may be whole
//! seconds or skewed) to when its turn would start. When the worker's monotonic clock says it
//! took the message off the bus longer ago than that (an adapter on a host whose clock runs
//! ahead), that counts instead.
//!
//! **A turn is judged by its newest message**, the one that carries it: one person's burst is
//! judged as one, and in `collect` mode older messages that waited too long are folded into the
//! turn a fresher message starts; only when every message of a batch waited too long does the
//! chat get the note instead.
//!
//! **Which messages**: a person's; and heartbeats (skipped without a note: a heartbeat that
//! waited is pointless, the next one comes on its own). Not cron jobs: scheduled work the owner
//! asked for is still wanted late, nobody would send it again, and a job's `missed` rule covers
//! downtime. Not sub-agent results: work done and paid for that nobody could ask for again.
//! Both start late with a log line saying how long they waited.
//!
//! Every expired message is recorded as a run of kind `expired` (status `failed`, the wait in
//! its error), counted in `messages_expired`, and acked once, like any message given no turn.

use std::time::Duration;

use chrono::{DateTime, Utc};
use switchboard_channels::contract::{InboundKind, InboundMessage, OutboundMessage, reply};
use switchboard_channels::meters::meters;
use tokio::time::Instant;

use super::TurnRunner;
use super::job::Job;
use super::{overflow, settle};
use crate::scheduler::heartbeat::HEARTBEAT_ORIGIN;

/// What the wait limit does to a message that waited too long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// A person's message: the note.
    Note,
    /// A heartbeat: skipped, silently.
    Skip,
    /// Started however late (cron jobs, sub-agent results), with a log line.
    Exempt,
}

fn rule(msg: &InboundMessage) -> Rule {
    match (&msg.kind, &msg.origin) {
        (InboundKind::User, _) => Rule::Note,
        (InboundKind::System, Some(origin)) if origin.kind == HEARTBEAT_ORIGIN => Rule::Skip,
        (InboundKind::System, _) => Rule::Exempt,
    }
}

/// How long `msg`, taken off the bus at `arrived`, has waited at `now` (see the module docs).
fn waited(msg: &InboundMessage, arrived: Instant, now: (DateTime<Utc>, Instant)) -> Duration {
    let since_received = now.0.signed_duration_since(msg.received_at).to_std().unwrap_or_default();
    since_received.max(now.1.saturating_duration_since(arrived))
}

/// Lets the turn `primary` carries start, with `merged` (the older messages it answers too);
/// `None` when its newest message waited longer than the limit: then every message of the
/// batch has been recorded, told (the primary) and acked here. `limit`: `worker.max_wait_secs`.
pub(super) async fn admit(
    turns: &TurnRunner,
    limit: Duration,
    primary: Job,
    merged: Vec<Job>,
) -> Option<(Job, Vec<Job>)> {
    if limit.is_zero() {
        return Some((primary, merged));
    }
    let waited = waited(&primary.msg, primary.arrived, (Utc::now(), Instant::now()));
    if waited <= limit {
        return Some((primary, merged));
    }
    let route = turns.agents.get().route(&primary.msg);
    let session = route.key.as_str();
    let waited_secs = waited.as_secs();
    match rule(&primary.msg) {
        Rule::Exempt => {
            tracing::info!(id = %primary.msg.id, %session, waited_secs, limit_secs = limit.as_secs(),
                "starting a system message that waited past worker.max_wait_secs (cron and sub-agent results always run)");
            return Some((primary, merged));
        }
        Rule::Note | Rule::Skip => {}
    }
    tracing::info!(id = %primary.msg.id, %session, waited_secs, limit_secs = limit.as_secs(), merged = merged.len(),
        "a message waited past worker.max_wait_secs; not running it");
    let why = format!("waited {waited_secs} s for its turn, over worker.max_wait_secs ({}); not run", limit.as_secs());
    let agent = route.agent.settings().name.clone();
    for job in merged {
        meters().expired(&agent, &job.msg.channel);
        settle::settle_expired(turns, job, None, why.clone()).await;
    }
    meters().expired(&agent, &primary.msg.channel);
    let note = (rule(&primary.msg) == Rule::Note).then(|| (note(&primary.msg, waited), marker(&primary.msg)));
    settle::settle_expired(turns, primary, note, why).await;
    None
}

/// How the note is marked: for a client waiting for this message's own answer (an API
/// request) as a message not kept, which it tells apart from an answer (the API's 429).
fn marker(msg: &InboundMessage) -> fn(&mut OutboundMessage) {
    if msg.awaits_reply() { reply::set_not_kept } else { |_| {} }
}

/// "I was busy for 12 minutes and your message "where is the report?" waited too long; send
/// it again if it still matters."
fn note(msg: &InboundMessage, waited: Duration) -> String {
    format!(
        "I was busy for {} and your message \"{}\" waited too long; send it again if it still matters.",
        roughly(waited),
        overflow::quote(&msg.content)
    )
}

/// "45 seconds", "12 minutes", "3 hours": a wait as a person says it, rounded down.
fn roughly(wait: Duration) -> String {
    let secs = wait.as_secs();
    let (count, unit) = match secs {
        0..120 => (secs, "second"),
        120..7200 => (secs / 60, "minute"),
        _ => (secs / 3600, "hour"),
    };
    if count == 1 { format!("1 {unit}") } else { format!("{count} {unit}s") }
}

#[cfg(test)]
mod tests {
    use switchboard_channels::contract::Origin;

    use super::*;

    fn system(origin: &str) -> InboundMessage {
        let origin = Some(Origin { kind: origin.into(), id: "1".into() });
        InboundMessage { kind: InboundKind::System, origin, ..InboundMessage::default() }
    }

    #[test]
    fn people_get_the_note_heartbeats_are_skipped_and_scheduled_work_runs_late() {
        assert_eq!(rule(&InboundMessage::default()), Rule::Note);
        assert_eq!(rule(&system(HEARTBEAT_ORIGIN)), Rule::Skip);
        assert_eq!(rule(&system(crate::scheduler::job::ORIGIN_KIND)), Rule::Exempt);
        assert_eq!(rule(&system("subagent")), Rule::Exempt);
    }

    #[test]
    fn the_wait_counts_from_receipt_or_from_intake_whichever_is_longer() {
        let now = (Utc::now(), Instant::now());
        let received = InboundMessage { received_at: now.0 - chrono::Duration::seconds(700), ..Default::default() };
        assert_eq!(waited(&received, now.1, now).as_secs(), 700);
        // An adapter clock ahead of ours: the message seems to come from the future.
        let ahead = InboundMessage { received_at: now.0 + chrono::Duration::seconds(30), ..Default::default() };
        let taken = now.1.checked_sub(Duration::from_secs(5)).unwrap();
        assert_eq!(waited(&ahead, taken, now), Duration::from_secs(5));
    }

    #[test]
    fn the_note_says_how_long_quotes_the_message_and_what_to_do() {
        let msg = InboundMessage { content: "where is\nthe report?".into(), ..Default::default() };
        assert_eq!(
            note(&msg, Duration::from_secs(734)),
            "I was busy for 12 minutes and your message \"where is the report?\" waited too long; \
             send it again if it still matters."
        );
    }

    #[test]
    fn waits_are_said_in_a_round_unit() {
        assert_eq!(roughly(Duration::from_secs(1)), "1 second");
        assert_eq!(roughly(Duration::from_secs(95)), "95 seconds");
        assert_eq!(roughly(Duration::from_secs(150)), "2 minutes");
        assert_eq!(roughly(Duration::from_secs(7300)), "2 hours");
        assert_eq!(roughly(Duration::from_secs(3 * 3600 + 59)), "3 hours");
    }
}
