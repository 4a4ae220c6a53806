//! What a cron job looks like on the bus and to people: its system message, chat addresses
//! written as session keys, and times in the job's zone.

use chrono::{DateTime, Utc};
use serde_json::json;
use switchboard_channels::contract::{ChatAddress, InboundMessage, Origin, SessionKey};

use crate::store::cron::{CronJob, Payload};

/// `origin.kind` of cron messages.
pub const ORIGIN_KIND: &str = "cron";
/// Metadata keys naming the job.
pub const META_JOB: &str = "cron_job";
pub const META_NAME: &str = "cron_name";

/// One occurrence as it is published.
pub struct Occurrence<'a> {
    pub inbound_id: &'a str,
    pub scheduled_for: DateTime<Utc>,
    /// Said to the model before the job's message (a late run says so); may be empty.
    pub note: &'a str,
    pub now: DateTime<Utc>,
}

/// `cron:<job>:<scheduled unix secs>`, the id of a scheduled occurrence.
pub fn scheduled_id(job_id: &str, scheduled_for: DateTime<Utc>) -> String {
    format!("cron:{job_id}:{}", scheduled_for.timestamp())
}

/// `cron:<job>:manual:<unix secs>`, the id of a run asked for with `switchboard cron run`.
pub fn manual_id(job_id: &str, requested: DateTime<Utc>) -> String {
    format!("cron:{job_id}:manual:{}", requested.timestamp())
}

/// The system message of one occurrence of `job`.
pub fn system_message(job: &CronJob, occurrence: &Occurrence<'_>) -> InboundMessage {
    let origin = Origin { kind: ORIGIN_KIND.into(), id: job.id.clone() };
    let text = match job.job.payload {
        Payload::Reminder => job.job.message.clone(),
        Payload::Turn | Payload::Isolated => turn_text(job, occurrence),
    };
    let mut msg = InboundMessage::system(occurrence.inbound_id.to_owned(), job.job.chat.clone(), origin, &text);
    msg.received_at = occurrence.now;
    let session = match job.job.payload {
        Payload::Isolated => format!("cron:{}", job.id),
        // The creating session, even when results go to another chat.
        Payload::Turn | Payload::Reminder => owner_base_session(job),
    };
    msg.set_system_agent(&job.job.agent);
    msg.set_system_session(&session);
    msg.metadata.insert(META_JOB.into(), json!(job.id));
    msg.metadata.insert(META_NAME.into(), json!(job.job.name));
    if job.job.payload == Payload::Reminder {
        msg.set_deliver_verbatim();
    }
    if let Some(person) = &job.job.on_behalf_of {
        msg.set_on_behalf_of(person);
    }
    msg
}

/// What the model reads for a turn or isolated job.
fn turn_text(job: &CronJob, occurrence: &Occurrence<'_>) -> String {
    let due = local_time(occurrence.scheduled_for, &job.job.tz);
    let mut text = format!(
        "[Scheduled job \"{}\" (id {}, {}), due {due}. Nobody wrote this message: do what it asks and \
         answer for the chat.]\n",
        job.job.name,
        job.id,
        job.job.schedule.describe()
    );
    if !occurrence.note.is_empty() {
        text.push_str(&format!("[{}]\n", occurrence.note));
    }
    text.push('\n');
    text.push_str(&job.job.message);
    text
}

/// The owner session without the agent prefix the worker adds back (`<agent>/…`).
fn owner_base_session(job: &CronJob) -> String {
    SessionKey::stored(job.job.owner_session.as_str()).base(&job.job.agent).to_owned()
}

/// `time` in the IANA zone `tz` (UTC when the zone is unknown), e.g. `2026-11-23 08:00 CET`.
pub fn local_time(time: DateTime<Utc>, tz: &str) -> String {
    match tz.parse::<crate::zone::Tz>() {
        Ok(zone) => time.with_timezone(&zone).format("%Y-%m-%d %H:%M %Z").to_string(),
        Err(_) => time.format("%Y-%m-%d %H:%M UTC").to_string(),
    }
}

/// A chat written like a session key (see [`ChatAddress::parse`]), with the reason as text.
pub fn parse_address(text: &str) -> Result<ChatAddress, String> {
    ChatAddress::parse(text).map_err(|err| err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_like_session_keys() {
        let topic = parse_address("telegram:-100123:topic:7").unwrap();
        assert_eq!((topic.chat_id.as_str(), topic.thread_id.as_deref(), topic.is_group), ("-100123", Some("7"), true));
        assert_eq!(topic.session_key(), "telegram:-100123:topic:7");
        let thread = parse_address("discord:55:thread:9").unwrap();
        assert_eq!(thread.session_key(), "discord:55:thread:9");
        let api = parse_address("api:me").unwrap();
        assert_eq!((api.channel.as_str(), api.chat_id.as_str(), api.thread_id), ("api", "me", None));
        for bad in ["", "telegram", "telegram:", ":5", "telegram:1:thread:2", "discord:5:topic:1", "tg x:1"] {
            assert!(parse_address(bad).is_err(), "{bad:?}");
        }
        // Chat ids are any string, colons included.
        assert_eq!(parse_address("api:room:1").unwrap().chat_id, "room:1");
    }

    fn job(agent: &str, owner: &str, payload: Payload) -> CronJob {
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let chat = parse_address("telegram:-100123:topic:7").unwrap();
        CronJob {
            id: "ab12cd34".into(),
            enabled: true,
            last_run_at: None,
            last_status: None,
            last_error: None,
            run_requested_at: None,
            job: crate::store::cron::NewCronJob {
                name: "standup".into(),
                agent: agent.into(),
                owner_session: owner.into(),
                chat,
                payload,
                message: "Stand-up!".into(),
                schedule: crate::schedule::Schedule::At { at },
                tz: "UTC".into(),
                missed: crate::store::cron::MissedPolicy::RunOnce,
                next_run_at: Some(at),
                created_by_id: "u1".into(),
                created_by_name: "Ada".into(),
                created_at: at,
                generation: 0,
                parent_job: None,
                created_by_run: None,
                on_behalf_of: Some("telegram:42".into()),
            },
        }
    }

    fn publish(job: &CronJob) -> InboundMessage {
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let occurrence = Occurrence { inbound_id: "cron:ab12cd34:1800000000", scheduled_for: at, note: "", now: at };
        system_message(job, &occurrence)
    }

    #[test]
    fn messages_name_their_agent_session_and_delivery() {
        let reminder = publish(&job("ops", "ops/discord:55:thread:9", Payload::Reminder));
        assert_eq!(reminder.content, "Stand-up!");
        assert_eq!((reminder.chat_id.as_str(), reminder.thread_id.as_deref()), ("-100123", Some("7")));
        assert_eq!(reminder.system_agent(), Some("ops"));
        // The worker adds the agent prefix back.
        assert_eq!(reminder.system_session(), Some("discord:55:thread:9"));
        assert_eq!(reminder.metadata["deliver"], "verbatim");
        assert!(reminder.delivers_verbatim());
        assert_eq!(reminder.metadata[META_JOB], "ab12cd34");
        assert_eq!(reminder.origin.as_ref().map(|o| o.kind.as_str()), Some(ORIGIN_KIND));
        let isolated = publish(&job("main", "telegram:42", Payload::Isolated));
        assert_eq!(isolated.system_session(), Some("cron:ab12cd34"));
        assert!(!isolated.delivers_verbatim() && isolated.metadata.get("deliver").is_none());
        assert!(isolated.content.starts_with("[Scheduled job \"standup\" (id ab12cd34"), "{}", isolated.content);
        assert!(isolated.content.ends_with("\n\nStand-up!"), "{}", isolated.content);
        let turn = publish(&job("main", "telegram:42", Payload::Turn));
        assert_eq!(turn.system_session(), Some("telegram:42"));
        // Every run of the job acts for its creator; a job from the command line, for the owner.
        assert_eq!(turn.on_behalf_of(), Some("telegram:42"));
        let mut from_cli = job("main", "telegram:42", Payload::Turn);
        from_cli.job.on_behalf_of = None;
        assert_eq!(publish(&from_cli).on_behalf_of(), None);
    }

    #[test]
    fn ids_carry_the_job_and_the_time() {
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        assert_eq!(scheduled_id("ab12cd34", at), "cron:ab12cd34:1800000000");
        assert_eq!(manual_id("ab12cd34", at), "cron:ab12cd34:manual:1800000000");
        assert_eq!(local_time(at, "Europe/Berlin"), "2027-01-15 09:00 CET");
    }
}
