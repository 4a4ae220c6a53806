//! The agents a worker runs and the bindings that choose one per message.
//!
//! Resolution is a pure function of the message ([`resolve`]), so every part of the worker
//! that needs a message's agent or session key (turns, commands, compaction) computes the
//! same answer without passing it around.

use std::collections::HashMap;
use std::sync::Arc;

use switchboard_channels::contract::{InboundMessage, SessionKey, session_key};

use crate::agent::Agent;
use crate::config::BindingConfig;

/// Where a binding applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One session: `telegram:-100123`, `telegram:-100123:topic:7`, `discord:55:thread:9`.
    Chat(String),
    /// A chat in all its topics or threads: `telegram:-100123`.
    Group(String),
    /// A Discord guild, from `metadata.guild_id`: `discord:<guild id>`.
    Guild(String),
    /// A whole channel: `telegram`.
    Channel(String),
}

/// One `[[bindings]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub agent: String,
    pub target: Target,
}

impl Binding {
    /// The binding of a validated `[[bindings]]` entry (`None` if it names no target).
    pub fn from_config(config: &BindingConfig) -> Option<Self> {
        let (key, value) = config.targets().next()?;
        let value = value.trim().to_owned();
        let target = match key {
            "chat" => Target::Chat(value),
            "group" => Target::Group(value),
            "guild" => Target::Guild(value),
            _ => Target::Channel(value),
        };
        Some(Self { agent: config.agent.clone(), target })
    }

    /// How specifically this binding matches `msg`: 3 chat, 2 group or guild, 1 channel;
    /// `None` when it does not match.
    fn rank(&self, msg: &InboundMessage) -> Option<u8> {
        match &self.target {
            Target::Chat(key) => (*key == msg.session_key()).then_some(3),
            Target::Group(chat) => (*chat == session_key(&msg.channel, &msg.chat_id, None)).then_some(2),
            Target::Guild(guild) => {
                let id = msg.metadata.get("guild_id").and_then(guild_id);
                id.is_some_and(|id| *guild == format!("{}:{id}", msg.channel)).then_some(2)
            }
            Target::Channel(channel) => (*channel == msg.channel).then_some(1),
        }
    }
}

/// A guild id as adapters write it: a string, or a number (Discord snowflakes as JSON numbers).
fn guild_id(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(id) => Some(id.clone()),
        serde_json::Value::Number(id) => Some(id.to_string()),
        _ => None,
    }
}

/// The agent bound to `msg`, most specific binding first (ties: the first in the config);
/// `None` = the default agent.
pub fn resolve<'a>(bindings: &'a [Binding], msg: &InboundMessage) -> Option<&'a str> {
    let mut best: Option<(u8, &Binding)> = None;
    for binding in bindings {
        if let Some(rank) = binding.rank(msg)
            && best.is_none_or(|(top, _)| rank > top)
        {
            best = Some((rank, binding));
        }
    }
    best.map(|(_, binding)| binding.agent.as_str())
}

/// A message's agent and the session key its history is stored under.
pub(crate) struct Route {
    pub agent: Arc<Agent>,
    pub key: SessionKey,
}

/// The worker's agents by name, the default one, and the bindings.
pub struct Agents {
    by_name: HashMap<String, Arc<Agent>>,
    default: Arc<Agent>,
    bindings: Vec<Binding>,
}

/// A binding or the default naming an agent that was not given.
#[derive(Debug, thiserror::Error)]
#[error("no agent named {0:?}")]
pub struct UnknownAgent(pub String);

impl Agents {
    /// One agent answering everything (what a config without named agents gives).
    pub fn single(agent: Arc<Agent>) -> Self {
        let name = agent.settings().name.clone();
        Self { by_name: HashMap::from([(name, Arc::clone(&agent))]), default: agent, bindings: Vec::new() }
    }

    /// `agents` by their settings' names; `default` and every binding must name one of them.
    pub fn new(agents: Vec<Arc<Agent>>, default: &str, bindings: Vec<Binding>) -> Result<Self, UnknownAgent> {
        let by_name: HashMap<String, Arc<Agent>> =
            agents.into_iter().map(|agent| (agent.settings().name.clone(), agent)).collect();
        let default = by_name.get(default).cloned().ok_or_else(|| UnknownAgent(default.to_owned()))?;
        if let Some(binding) = bindings.iter().find(|b| !by_name.contains_key(&b.agent)) {
            return Err(UnknownAgent(binding.agent.clone()));
        }
        Ok(Self { by_name, default, bindings })
    }

    /// The agent that answers `msg` and its session key. The `main` agent keeps the plain
    /// key (`telegram:42`) so sessions from before named agents stay valid, whichever agent
    /// is the default; any other agent's keys are `<agent>/<key>`.
    ///
    /// A system message may name its agent (`metadata.agent`: the agent whose job or
    /// sub-agent made it) and its session (`metadata.session`: an isolated cron session); an
    /// API request may pick its agent (its `model`, allowed by its token). A person's message
    /// on a chat platform never chooses either.
    pub(crate) fn route(&self, msg: &InboundMessage) -> Route {
        let named = msg.system_agent().or_else(|| msg.api_agent()).and_then(|name| self.by_name.get(name));
        let agent = named
            .or_else(|| resolve(&self.bindings, msg).and_then(|name| self.by_name.get(name)))
            .unwrap_or(&self.default);
        let name = &agent.settings().name;
        let base = msg.system_session().map_or_else(|| msg.session_key(), str::to_owned);
        let key = SessionKey::named(name, &base);
        Route { agent: Arc::clone(agent), key }
    }

    /// The agent called `name`, if this worker runs it.
    pub fn get(&self, name: &str) -> Option<&Arc<Agent>> {
        self.by_name.get(name)
    }

    /// Every agent this worker runs, in name order.
    pub fn all(&self) -> Vec<&Arc<Agent>> {
        let mut agents: Vec<&Arc<Agent>> = self.by_name.values().collect();
        agents.sort_by(|a, b| a.settings().name.cmp(&b.settings().name));
        agents
    }

    /// The session key `msg` is stored under.
    pub(crate) fn session_key(&self, msg: &InboundMessage) -> SessionKey {
        self.route(msg).key
    }
}

#[cfg(test)]
mod tests;
