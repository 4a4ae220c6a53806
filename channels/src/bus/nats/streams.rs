//! The three JetStream streams of a deployment: created when missing, checked when present.
//!
//! An existing stream whose configuration would make the bus behave differently (another
//! retention policy, another storage type, subjects that do not cover ours) is an error with
//! the fix spelled out. switchboard never deletes or recreates a stream by itself: the stream
//! may hold messages nobody has processed yet. The limits it sets (duplicate window, age and
//! count limits) come from its configuration and are updated in place when they differ, so a
//! changed setting, or a limit a newer version adds, takes effect at the next start.

use std::time::Duration;

use async_nats::jetstream::context::RequestErrorKind;
use async_nats::jetstream::response::Response;
use async_nats::jetstream::stream::{Config, DiscardPolicy, Info, RetentionPolicy, StorageType};
use async_nats::jetstream::{self, ErrorCode};

use super::NatsOptions;
use crate::bus::BusError;
use crate::subject::{Flow, Subjects};

/// Dead letters are for inspection, not an archive: bounded by count and age.
const DEAD_MAX_MESSAGES: i64 = 10_000;
const DEAD_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);

/// Stream names derived from the subject prefix: `sb.prod` → `SB_PROD_IN`, `SB_PROD_OUT`, ….
#[derive(Debug, Clone)]
pub(super) struct StreamNames {
    pub inbound: String,
    pub outbound: String,
    pub dead: String,
}

impl StreamNames {
    pub fn new(prefix: &str) -> Self {
        let base = prefix.to_uppercase().replace('.', "_");
        Self { inbound: format!("{base}_IN"), outbound: format!("{base}_OUT"), dead: format!("{base}_DEAD") }
    }
}

/// Creates the streams that are missing and checks the ones that exist.
pub(super) async fn ensure_streams(
    js: &jetstream::Context,
    subjects: &Subjects,
    names: &StreamNames,
    opts: &NatsOptions,
    url: &str,
) -> Result<(), BusError> {
    let work_queue = |name: &str, flow: Flow, max_age: Duration| Config {
        name: name.to_owned(),
        subjects: vec![subjects.flow_wildcard(flow)],
        retention: RetentionPolicy::WorkQueue,
        storage: StorageType::File,
        duplicate_window: opts.duplicate_window,
        max_age,
        ..Config::default()
    };
    let dead = Config {
        name: names.dead.clone(),
        subjects: vec![subjects.dead_letter_wildcard()],
        retention: RetentionPolicy::Limits,
        storage: StorageType::File,
        max_messages: DEAD_MAX_MESSAGES,
        max_age: DEAD_MAX_AGE,
        discard: DiscardPolicy::Old,
        ..Config::default()
    };
    // Inbound needs no age limit: workers drop what is too old to answer (and say so in the
    // log). Outbound does: a reply for a channel no adapter serves would otherwise wait forever.
    let inbound = work_queue(&names.inbound, Flow::In, Duration::ZERO);
    let outbound = work_queue(&names.outbound, Flow::Out, opts.outbound_max_age);
    for wanted in [inbound, outbound, dead] {
        ensure_stream(js, wanted, url).await?;
    }
    Ok(())
}

async fn ensure_stream(js: &jetstream::Context, wanted: Config, url: &str) -> Result<(), BusError> {
    let name = wanted.name.clone();
    if let Some(info) = look_up(js, &name, url).await? {
        return reconcile(js, info.config, &wanted).await;
    }
    match js.create_stream(wanted.clone()).await {
        Ok(_) => {
            tracing::info!(stream = %name, "created JetStream stream");
            Ok(())
        }
        // Two processes starting at once on a fresh server (an agent and a channel) both find
        // the stream missing; the one that creates it second gets an error (the server says
        // the subjects overlap). Look again: a stream that is there now is checked like any.
        Err(err) => match look_up(js, &name, url).await? {
            Some(info) => reconcile(js, info.config, &wanted).await,
            None => Err(BusError::Setup(format!("cannot create stream {name}: {err}"))),
        },
    }
}

/// Refuses an incompatible stream; brings the limits switchboard sets up to date.
async fn reconcile(js: &jetstream::Context, existing: Config, wanted: &Config) -> Result<(), BusError> {
    check_compatible(&existing, wanted)?;
    let changed = changed_limits(&existing, wanted);
    if changed.is_empty() {
        return Ok(());
    }
    let name = &wanted.name;
    let updated = Config {
        duplicate_window: if wanted.duplicate_window.is_zero() {
            existing.duplicate_window
        } else {
            wanted.duplicate_window
        },
        max_age: wanted.max_age,
        max_messages: wanted.max_messages,
        ..existing
    };
    js.update_stream(updated).await.map_err(|err| {
        BusError::Setup(format!("cannot update the limits of stream {name} ({}): {err}", changed.join(", ")))
    })?;
    tracing::info!(stream = %name, changed = %changed.join(", "), "updated the stream's limits to switchboard's settings");
    Ok(())
}

/// The limits switchboard sets that differ on `existing`, as `field old → new`.
///
/// A zero duplicate window in `wanted` means "the server's default" (dead letters carry no
/// message id): the server fills in its own, which must not count as a difference, or every
/// start after the first would find one. Zero and negative counts both mean "no limit".
fn changed_limits(existing: &Config, wanted: &Config) -> Vec<String> {
    let count = |n: i64| if n <= 0 { -1 } else { n };
    let mut changed = Vec::new();
    if !wanted.duplicate_window.is_zero() && existing.duplicate_window != wanted.duplicate_window {
        changed.push(format!("duplicate_window {:?} → {:?}", existing.duplicate_window, wanted.duplicate_window));
    }
    if existing.max_age != wanted.max_age {
        changed.push(format!("max_age {:?} → {:?}", existing.max_age, wanted.max_age));
    }
    if count(existing.max_messages) != count(wanted.max_messages) {
        changed.push(format!("max_msgs {} → {}", existing.max_messages, wanted.max_messages));
    }
    changed
}

/// The stream's info, or `None` when it does not exist.
async fn look_up(js: &jetstream::Context, name: &str, url: &str) -> Result<Option<Info>, BusError> {
    let response: Response<Info> =
        js.request(format!("STREAM.INFO.{name}"), &()).await.map_err(|err| match err.kind() {
            // Nobody answers the JetStream API: the server runs without `-js`.
            RequestErrorKind::NoResponders => BusError::NoJetStream(url.to_owned()),
            _ => BusError::Setup(format!("cannot look up stream {name}: {err}")),
        })?;
    match response {
        Response::Ok(info) => Ok(Some(info)),
        Response::Err { error } if error.error_code() == ErrorCode::STREAM_NOT_FOUND => Ok(None),
        Response::Err { error }
            if error.error_code() == ErrorCode::JETSTREAM_NOT_ENABLED
                || error.error_code() == ErrorCode::JETSTREAM_NOT_ENABLED_FOR_ACCOUNT =>
        {
            Err(BusError::NoJetStream(url.to_owned()))
        }
        Response::Err { error } => Err(BusError::Setup(format!("cannot look up stream {name}: {error}"))),
    }
}

/// Refuses a stream that would change how the bus behaves.
fn check_compatible(existing: &Config, wanted: &Config) -> Result<(), BusError> {
    let name = &wanted.name;
    let problems = incompatibilities(existing, wanted);
    if problems.is_empty() {
        return Ok(());
    }
    Err(BusError::Setup(format!(
        "stream {name} exists with an incompatible configuration: {}. switchboard does not \
         change or recreate streams by itself, as they may hold unprocessed messages. To fix: \
         drain it, then delete it (`nats stream rm {name}`) and restart so switchboard creates \
         it, or use another subject prefix",
        problems.join("; ")
    )))
}

fn incompatibilities(existing: &Config, wanted: &Config) -> Vec<String> {
    let mut problems = Vec::new();
    if existing.retention != wanted.retention {
        problems.push(format!("retention is {:?}, switchboard needs {:?}", existing.retention, wanted.retention));
    }
    if existing.storage != wanted.storage {
        problems.push(format!("storage is {:?}, switchboard needs {:?}", existing.storage, wanted.storage));
    }
    for subject in &wanted.subjects {
        if !existing.subjects.contains(subject) {
            problems.push(format!("subjects {:?} do not include `{subject}`", existing.subjects));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_prefix() {
        let names = StreamNames::new("sb.prod");
        assert_eq!((names.inbound.as_str(), names.outbound.as_str()), ("SB_PROD_IN", "SB_PROD_OUT"));
        assert_eq!(StreamNames::new("switchboard").dead, "SWITCHBOARD_DEAD");
    }

    #[test]
    fn other_retention_is_refused_with_a_fix() {
        let wanted = Config {
            name: "SB_IN".into(),
            subjects: vec!["sb.in.>".into()],
            retention: RetentionPolicy::WorkQueue,
            ..Config::default()
        };
        let existing = Config { retention: RetentionPolicy::Limits, ..wanted.clone() };
        let err = check_compatible(&existing, &wanted).unwrap_err().to_string();
        assert!(err.contains("retention is Limits"), "{err}");
        assert!(err.contains("nats stream rm SB_IN"), "{err}");
        assert!(check_compatible(&wanted, &wanted).is_ok());
    }

    #[test]
    fn defaults_the_server_fills_in_are_no_difference() {
        // What nats-server reports for a dead-letter stream created without a duplicate window.
        let wanted = Config { name: "SB_DEAD".into(), max_messages: 10, max_age: DEAD_MAX_AGE, ..Config::default() };
        let reported = Config { duplicate_window: Duration::from_secs(120), ..wanted.clone() };
        assert!(changed_limits(&reported, &wanted).is_empty());
        let unlimited = Config { max_messages: -1, ..Config::default() };
        assert!(changed_limits(&unlimited, &Config::default()).is_empty());
        let old_outbound = Config { max_age: Duration::ZERO, ..wanted.clone() };
        assert_eq!(changed_limits(&old_outbound, &wanted), ["max_age 0ns → 604800s"]);
    }
}
