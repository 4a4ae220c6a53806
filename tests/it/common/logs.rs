//! Log events captured in a test: [`Logs::install`] makes a capturing layer the process's
//! global subscriber, which is sound because nextest runs every test in a process of its own.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tracing::Level;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// One event: its level and its fields as text, the message under `message`.
#[derive(Debug, Clone)]
pub struct LogEvent {
    pub level: Level,
    pub fields: BTreeMap<String, String>,
}

impl LogEvent {
    pub fn message(&self) -> &str {
        self.field("message").unwrap_or_default()
    }

    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

/// Every event logged since [`Logs::install`], in order.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<LogEvent>>>);

impl Logs {
    /// Captures every event of this process from now on.
    pub fn install() -> Logs {
        let logs = Logs::default();
        let subscriber = tracing_subscriber::registry().with(logs.clone());
        tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber of this process");
        logs
    }

    /// The events whose message is `message`.
    pub fn with_message(&self, message: &str) -> Vec<LogEvent> {
        self.events().into_iter().filter(|event| event.message() == message).collect()
    }

    /// The messages of the events at `level`.
    pub fn messages_at(&self, level: Level) -> Vec<String> {
        self.events().into_iter().filter(|event| event.level == level).map(|event| event.message().to_owned()).collect()
    }

    fn events(&self) -> Vec<LogEvent> {
        self.0.lock().unwrap().clone()
    }
}

/// A log event's or a span's fields, as text (also the span capture of `traces`).
#[derive(Debug, Clone, Default)]
pub struct Fields(pub BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: tracing::Subscriber> Layer<S> for Logs {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let level = *event.metadata().level();
        self.0.lock().unwrap().push(LogEvent { level, fields: fields.0 });
    }
}
