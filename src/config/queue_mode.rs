//! `worker.queue_mode`: what a message does that arrives while its session is busy. A value
//! of the config that people also choose per chat (`/queue`).

use serde::{Deserialize, Serialize};

/// What a message does that arrives while its session is running a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueueMode {
    /// It becomes its own turn afterwards, in arrival order.
    #[default]
    Followup,
    /// Waiting messages are merged into one turn once the chat has been quiet for a moment.
    Collect,
    /// The running turn is cancelled; only the newest message is answered.
    Interrupt,
    /// It is added to the running turn before its next model call.
    Steer,
    /// It is not kept: the chat hears once that it was dropped, and sends it again later.
    Drop,
}

impl QueueMode {
    pub const ALL: [QueueMode; 5] =
        [QueueMode::Followup, QueueMode::Collect, QueueMode::Interrupt, QueueMode::Steer, QueueMode::Drop];

    pub fn as_str(self) -> &'static str {
        match self {
            QueueMode::Followup => "followup",
            QueueMode::Collect => "collect",
            QueueMode::Interrupt => "interrupt",
            QueueMode::Steer => "steer",
            QueueMode::Drop => "drop",
        }
    }

    /// Every mode's name, for messages: `followup, collect, …`.
    pub fn names() -> String {
        QueueMode::ALL.map(QueueMode::as_str).join(", ")
    }

    pub fn parse(name: &str) -> Option<QueueMode> {
        QueueMode::ALL.into_iter().find(|mode| mode.as_str().eq_ignore_ascii_case(name))
    }
}
