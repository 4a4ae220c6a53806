//! `[guard]`: what is done with user messages before the model sees them.

use serde::{Deserialize, Serialize};

/// What the input guard does when a message looks like a prompt injection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GuardMode {
    /// Do not look.
    Off,
    /// Log what was found; the model sees the message unchanged.
    Log,
    /// Log, and tell the model in a note added to the message to treat it as user content.
    #[default]
    Warn,
    /// Answer the sender with a short notice and do not call the model.
    Block,
}

impl GuardMode {
    pub fn as_str(self) -> &'static str {
        match self {
            GuardMode::Off => "off",
            GuardMode::Log => "log",
            GuardMode::Warn => "warn",
            GuardMode::Block => "block",
        }
    }
}

/// The input guard and the input size limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GuardConfig {
    pub mode: GuardMode,
    /// Longer messages are cut to this many characters, and the model is told so.
    pub max_message_chars: usize,
}

impl Default for GuardConfig {
    fn default() -> Self {
        Self { mode: GuardMode::Warn, max_message_chars: 32768 }
    }
}
