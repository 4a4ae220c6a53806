//! The three JetStream streams of a deployment: created when missing, checked when present.
//!
//! An existing stream whose configuration would make the bus behave differently (another
//! retention policy, another storage type, subjects that do not cover ours) is an error with
//! the fix spelled out. switchboard never deletes or recreates a stream by itself: the stream
//! may hold messages nobody has processed yet. Differences in tunable limits are logged and
//! left as the operator set them.

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
    let work_queue = |name: &str, flow: Flow| Config {
        name: name.to_owned(),
        subjects: vec![subjects.flow_wildcard(flow)],
        retention: RetentionPolicy::WorkQueue,
        storage: StorageType::File,
        duplicate_window: opts.duplicate_window,
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
    for wanted in [work_queue(&names.inbound, Flow::In), work_queue(&names.outbound, Flow::Out), dead] {
        ensure_stream(js, wanted, url).await?;
    }
    Ok(())
}

async fn ensure_stream(js: &jetstream::Context, wanted: Config, url: &str) -> Result<(), BusError> {
    let name = wanted.name.clone();
    if let Some(info) = look_up(js, &name, url).await? {
        return check_compatible(&info.config, &wanted);
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
            Some(info) => check_compatible(&info.config, &wanted),
            None => Err(BusError::Setup(format!("cannot create stream {name}: {err}"))),
        },
    }
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

/// Refuses a stream that would change how the bus behaves; warns about tunable differences.
fn check_compatible(existing: &Config, wanted: &Config) -> Result<(), BusError> {
    let name = &wanted.name;
    let problems = incompatibilities(existing, wanted);
    if !problems.is_empty() {
        return Err(BusError::Setup(format!(
            "stream {name} exists with an incompatible configuration: {}. switchboard does not \
             change or recreate streams by itself, as they may hold unprocessed messages. To fix: \
             drain it, then delete it (`nats stream rm {name}`) and restart so switchboard creates \
             it, or use another subject prefix",
            problems.join("; ")
        )));
    }
    let tunables = [
        ("duplicate_window", existing.duplicate_window != wanted.duplicate_window),
        ("max_msgs", wanted.max_messages > 0 && existing.max_messages != wanted.max_messages),
        ("max_age", wanted.max_age > Duration::ZERO && existing.max_age != wanted.max_age),
    ];
    for (field, differs) in tunables {
        if differs {
            tracing::warn!(stream = %name, field, "existing stream differs from switchboard's settings; kept as is");
        }
    }
    Ok(())
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
}
