//! Named agents (`[agents.<name>]`) and the bindings that route chats to them
//! (`[[bindings]]`). `[agent]` itself is the implicit agent `main`; a named agent takes what
//! it does not override from there.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::Config;

/// The implicit agent configured by `[agent]` (see [`SessionKey`](switchboard_channels::contract::SessionKey)
/// for its sessions' keys).
pub use switchboard_channels::contract::MAIN_AGENT;

/// One `[agents.<name>]` table: overrides of `[agent]` for this agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NamedAgentConfig {
    /// Its own workspace (persona and memory files); empty = `<data_dir>/agents/<name>`,
    /// relative = under `data_dir`.
    pub workspace: PathBuf,
    /// Its model chain, like `agent.models`; empty = the default chain.
    pub models: Vec<super::ModelSpec>,
    /// The tools it may offer (intersected with the sender's permissions); empty = all.
    pub tools: Vec<String>,
    /// The skills it may use, by name; unset = `skills.allow`, empty = all.
    pub skills: Option<Vec<String>>,
    /// Completion token limit per call; unset = `agent.max_tokens`.
    pub max_tokens: Option<u32>,
    /// Operator instructions; unset = `agent.system_prompt`.
    pub system_prompt: Option<String>,
    /// Tool-loop detection, like `agent.loop_detection`; unset = that.
    pub loop_detection: Option<u32>,
    /// Its own heartbeat; unset = `[heartbeat]`.
    pub heartbeat: Option<super::HeartbeatConfig>,
    /// The tools whose calls wait for an approver; unset = `approvals.tools`, empty = none.
    pub approval_tools: Option<Vec<String>>,
}

/// One `[[bindings]]` entry: which agent answers where. Exactly one of `chat`, `group`,
/// `guild`, `channel` is set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BindingConfig {
    pub agent: String,
    /// A session key: `telegram:-100123`, `telegram:-100123:topic:7`, `discord:55:thread:9`.
    pub chat: String,
    /// `channel:chat_id`: the chat in any of its topics or threads.
    pub group: String,
    /// `discord:<guild id>`: every channel of a Discord guild.
    pub guild: String,
    /// A channel name: `telegram`, `discord`, `api`.
    pub channel: String,
}

impl BindingConfig {
    /// The targets that are set, by key name.
    pub fn targets(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [("chat", &self.chat), ("group", &self.group), ("guild", &self.guild), ("channel", &self.channel)]
            .into_iter()
            .filter(|(_, value)| !value.trim().is_empty())
            .map(|(key, value)| (key, value.as_str()))
    }
}

impl Config {
    /// Whether `name` is a configured agent (the implicit `main` or an `[agents.<name>]`).
    pub fn has_agent(&self, name: &str) -> bool {
        name == MAIN_AGENT || self.agents.contains_key(name)
    }

    /// Every agent's name, the default agent first.
    pub fn agent_names(&self) -> Vec<String> {
        let mut names = vec![self.agent.default.clone()];
        let others = std::iter::once(MAIN_AGENT).chain(self.agents.keys().map(String::as_str));
        names.extend(others.filter(|name| *name != self.agent.default).map(str::to_owned));
        names
    }
}

/// The first problem with the agents and bindings, as `(key, reason)`.
pub(super) fn problem(config: &Config) -> Option<(String, String)> {
    let known = || {
        let mut names = vec![MAIN_AGENT.to_owned()];
        names.extend(config.agents.keys().cloned());
        names.join(", ")
    };
    if let Some(reason) = loop_detection_problem(config.agent.loop_detection) {
        return Some(("agent.loop_detection".into(), reason));
    }
    if !config.has_agent(&config.agent.default) {
        let reason = format!("no agent named {:?} (configured: {})", config.agent.default, known());
        return Some(("agent.default".into(), reason));
    }
    for name in config.agents.keys() {
        if name == MAIN_AGENT {
            return Some(("agents.main".into(), "`main` is [agent] itself; configure it there".into()));
        }
        // The name prefixes session keys (`<agent>/<channel>:<chat>`).
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            return Some((format!("agents.{name}"), "names use letters, digits, `_` and `-` only".into()));
        }
    }
    for (name, agent) in &config.agents {
        if let Some(reason) = agent.loop_detection.and_then(loop_detection_problem) {
            return Some((format!("agents.{name}.loop_detection"), reason));
        }
    }
    for (i, binding) in config.bindings.iter().enumerate() {
        if let Some(reason) = binding_problem(config, binding, &known) {
            return Some((format!("bindings[{i}]"), reason));
        }
    }
    None
}

/// 1 would call every tool call a loop.
fn loop_detection_problem(repeats: u32) -> Option<String> {
    (repeats == 1).then(|| "must be 0 (off) or at least 2 (calls of one tool with the same arguments)".into())
}

fn binding_problem(config: &Config, binding: &BindingConfig, known: &dyn Fn() -> String) -> Option<String> {
    if !config.has_agent(&binding.agent) {
        return Some(format!("agent: no agent named {:?} (configured: {})", binding.agent, known()));
    }
    match binding.targets().count() {
        1 => None,
        0 => Some("set one of chat, group, guild or channel".into()),
        _ => Some("set only one of chat, group, guild or channel".into()),
    }
}

impl Config {
    /// The model chain of agent `name`: its own `models`, else the default chain.
    pub fn agent_model_chain(&self, name: &str) -> Result<Vec<super::ChainEntry>, super::ConfigError> {
        match self.agents.get(name) {
            Some(agent) if !agent.models.is_empty() => {
                agent.models.iter().map(|spec| self.chain_entry(&spec.model)).collect()
            }
            _ => self.model_chain(),
        }
    }
}

#[cfg(test)]
mod tests;
