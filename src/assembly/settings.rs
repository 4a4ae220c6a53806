//! The settings of every part, read from a loaded [`Config`]: the parts themselves take
//! plain settings and know nothing of the config file. The channel adapters' settings are in
//! [`super::channel_settings`].

use std::sync::Arc;
use std::time::Duration;

use switchboard_channels::api::{
    Access, ApiSettings, ApiToken, ConnectionLimits, LiveAccess, ReplayCache, Scopes, WebhookSettings, access,
};
use switchboard_channels::bus::nats::NatsOptions;

use super::AssemblyError;
use crate::agent::AgentSettings;
use crate::config::api::{SCOPE_ADMIN, SCOPE_CHAT};
use crate::config::{ApiChannelConfig, BusKind, ChainEntry, Config, ConfigError, MAIN_AGENT, Origin};
use crate::context::ContextSettings;
use crate::hygiene::Guard;
use crate::prompt::PromptSettings;
use crate::provider::ToolChoice;
use crate::provider::pricing::PriceTable;
use crate::provider::transcribe::{Transcriber, TranscriptionSettings};
use crate::scheduler::heartbeat::{HeartbeatAgent, HeartbeatSettings};
use crate::subagents::SubagentSettings;
use crate::tools::ToolLimits;
use crate::tools::approval::ApprovalSettings;
use crate::users::AccessPolicy;
use crate::worker::{QueueSettings, RecallSettings, WorkerSettings};
use crate::workspace::protected::ProtectedFiles;
use crate::workspace::skills::SkillSettings;

/// `[worker]`, with what the worker takes from `[agent]`, `[users]`, `[guard]` and the rest.
pub fn worker(config: &Config) -> Result<WorkerSettings, AssemblyError> {
    Ok(WorkerSettings {
        max_concurrent_runs: config.worker.max_concurrent_runs,
        max_held: crate::worker::held_for(config.worker.max_concurrent_runs),
        max_message_age: config.worker.max_message_age(),
        // A third of the ack wait, so one lost progress message does not cost the delivery.
        progress_interval: config.bus_options.ack_wait() / 3,
        shutdown_grace: config.worker.shutdown_grace(),
        history_limit: config.agent.history_limit,
        run_timeout: config.agent.run_timeout(),
        context: ContextSettings {
            context_window: config.agent.context_window,
            history: config.history.clone(),
            compaction: config.compaction.clone(),
        },
        access: access_policy(config)?,
        prompt: prompt(config)?,
        guard: Some(Arc::new(Guard::new(&config.guard)?)),
        queue: QueueSettings::from_config(&config.worker),
        rate_limits: config.rate_limits,
        recall: RecallSettings::from(&config.memory),
        transcriber: transcriber(config)?,
        mcp_inline_max: config.mcp.inline_max,
        outbox_keep: config.workspace.outbox_keep(),
    })
}

/// The transcriber `[transcription]` asks for, on the provider entry it names; `None` when
/// transcription is off.
pub fn transcriber(config: &Config) -> Result<Option<Arc<Transcriber>>, AssemblyError> {
    let transcription = &config.transcription;
    if !transcription.is_enabled() {
        return Ok(None);
    }
    // Validated at load; only a hand-built config fails here.
    let provider = config.transcription_provider().ok_or_else(|| {
        invalid("transcription.provider".into(), format!("no provider named {:?}", transcription.provider))
    })?;
    let settings = TranscriptionSettings {
        base_url: provider.base_url.clone(),
        api_key: Some(provider.api_key.expose().to_owned()).filter(|key| !key.is_empty()),
        model: transcription.model.clone(),
        language: Some(transcription.language.trim().to_owned()).filter(|language| !language.is_empty()),
        max_bytes: transcription.max_bytes,
        timeout: transcription.timeout(),
    };
    Ok(Some(Arc::new(Transcriber::new(settings)?)))
}

/// The time zone and file caps of the system prompt (`[agent]`).
pub fn prompt(config: &Config) -> Result<PromptSettings, ConfigError> {
    let agent = &config.agent;
    // Validated at load; only a hand-built config fails here.
    let timezone = agent.time_zone().map_err(|err| invalid("agent.timezone".into(), err.to_string()))?;
    Ok(PromptSettings { timezone, max_file_chars: agent.bootstrap_max_chars, memory_max_chars: agent.memory_max_chars })
}

/// `[subagents]`.
pub fn subagents(config: &Config) -> Result<SubagentSettings, ConfigError> {
    Ok(SubagentSettings::from_config(&config.subagents, prompt(config)?))
}

/// The limits of every agent's tools.
pub fn tool_limits(config: &Config) -> ToolLimits {
    ToolLimits {
        timeout: config.agent.tool_timeout(),
        max_result_chars: config.tools.max_result_chars,
        ..ToolLimits::default()
    }
}

/// One agent: `[agent]`, overridden by `[agents.<name>]` when `name` is not `main`; `chain`
/// is its resolved model chain.
pub fn agent(config: &Config, name: &str, chain: &[ChainEntry]) -> AgentSettings {
    let overrides = config.agents.get(name);
    let max_tokens = overrides.and_then(|o| o.max_tokens).unwrap_or(config.agent.max_tokens);
    AgentSettings {
        name: name.to_owned(),
        system_prompt: overrides
            .and_then(|o| o.system_prompt.clone())
            .unwrap_or_else(|| config.agent.system_prompt.clone()),
        model: chain.first().map(|entry| entry.model.clone()).unwrap_or_default(),
        max_iterations: config.agent.max_iterations,
        loop_detection: overrides.and_then(|o| o.loop_detection).unwrap_or(config.agent.loop_detection),
        max_tokens: Some(max_tokens).filter(|&n| n > 0),
        temperature: config.agent.temperature,
        // Chunks are streamed to the user when the primary streams; the others follow suit.
        stream: chain.first().is_none_or(|entry| entry.settings.stream),
        tool_choice: ToolChoice::parse(&config.agent.tool_choice),
        prices: PriceTable::new(config.prices.clone()),
        workspace: overrides.map_or_else(|| config.agent.workspace.clone(), |o| o.workspace.clone()),
        models: chain.iter().map(ChainEntry::label).collect(),
        context_windows: chain.iter().map(|entry| (entry.label(), entry.context_window)).collect(),
        skills: agent_skills(config, name),
        protected: Arc::new(ProtectedFiles::new(&config.workspace.protected)),
        heartbeat_ack_max_chars: config.heartbeat_for(name).ack_max_chars,
    }
}

/// `[approvals]` for agent `name`: its own `approval_tools` when it sets them.
pub fn approvals(config: &Config, name: &str) -> ApprovalSettings {
    let mut settings = ApprovalSettings::from(&config.approvals);
    if let Some(tools) = config.agents.get(name).and_then(|agent| agent.approval_tools.as_ref()) {
        settings.tools = tools.iter().cloned().collect();
    }
    settings
}

/// Who may do what: `[users]`, `[permissions]` (with each MCP server's level) and `[budgets]`.
pub fn access_policy(config: &Config) -> Result<AccessPolicy, crate::users::PolicyError> {
    Ok(AccessPolicy::from_config(&config.users, &config.permissions, &config.budgets)?
        .with_prefix_levels(mcp_levels(config)))
}

/// Each MCP server's level, for the tools named `<server>__…`.
fn mcp_levels(config: &Config) -> Vec<(String, crate::config::Level)> {
    let servers = config.mcp.servers.iter();
    servers.map(|(name, server)| (format!("{name}{}", crate::config::MCP_SEPARATOR), server.level)).collect()
}

/// Which skills agent `name` uses: `[agents.<name>] skills`, else `[skills] allow`.
pub fn agent_skills(config: &Config, name: &str) -> SkillSettings {
    let allow = config.agents.get(name).and_then(|o| o.skills.clone());
    SkillSettings { allow: allow.unwrap_or_else(|| config.skills.allow.clone()), inline_max: config.skills.inline_max }
}

/// The agents whose heartbeat is enabled (`[heartbeat]` for `main`,
/// `[agents.<name>.heartbeat]` or else `[heartbeat]` for the others).
pub fn heartbeat_agents(config: &Config) -> Result<Vec<HeartbeatAgent>, ConfigError> {
    let workspaces = std::iter::once((MAIN_AGENT, &config.agent.workspace))
        .chain(config.agents.iter().map(|(name, agent)| (name.as_str(), &agent.workspace)));
    let mut agents = Vec::new();
    for (name, workspace) in workspaces {
        let heartbeat = config.heartbeat_for(name);
        if !heartbeat.enabled {
            continue;
        }
        // Validated at load with the key path; a hand-built config fails here.
        let settings = HeartbeatSettings::from_config(heartbeat, &config.agent.timezone).map_err(|err| {
            let key = match name {
                MAIN_AGENT => format!("heartbeat.{}", err.key),
                _ => format!("agents.{name}.heartbeat.{}", err.key),
            };
            invalid(key, err.reason)
        })?;
        agents.push(HeartbeatAgent { name: name.to_owned(), workspace: workspace.clone(), settings });
    }
    Ok(agents)
}

/// `[channels.api]`.
pub fn api(config: &Config) -> ApiSettings {
    let api = &config.channels.api;
    ApiSettings {
        listen: api.listen,
        access: LiveAccess::new(api_access(api)),
        agents: config.agent_names(),
        // Set by the assembly, which knows which chat channels run.
        live_channels: Vec::new(),
        started_at: chrono::Utc::now(),
        reply_timeout: api.reply_timeout(),
        max_body_bytes: api.max_body_bytes,
        max_websockets: api.max_websockets,
        limits: ConnectionLimits {
            header_timeout: api.header_timeout(),
            body_timeout: api.body_timeout(),
            idle_timeout: api.idle_timeout(),
            max_connections: api.max_connections,
            max_refusing: super::descriptors::refusal_budget(api.max_connections),
            max_header_bytes: api.max_header_bytes,
        },
        replay: ReplayCache { ttl: api.idempotency_ttl(), max_entries: api.idempotency_max_entries },
        reply_channel: api_reply_channel(config),
        sent_dirs: std::iter::once(&config.agent.workspace)
            .chain(config.agents.values().map(|agent| &agent.workspace))
            .map(|workspace| crate::workspace::outbox::sent_dir(workspace))
            .collect(),
        webhook: Some(&api.webhook).filter(|webhook| !webhook.url.trim().is_empty()).map(|webhook| WebhookSettings {
            url: webhook.url.trim().to_owned(),
            secret: webhook.secret.expose().to_owned(),
            max_attempts: webhook.max_attempts,
            timeout: Duration::from_secs(webhook.timeout_secs),
        }),
    }
}

/// The API's tokens: the named ones, and the plain `token` of older configs as one with every
/// scope (it may name any sender, as before tokens had identities).
pub fn api_access(api: &ApiChannelConfig) -> Access {
    let mut tokens: Vec<ApiToken> = api
        .tokens
        .iter()
        .filter_map(|(name, token)| {
            // Validated at load.
            let sha256 = access::parse_sha256_hex(&token.sha256)?;
            Some(ApiToken {
                name: name.clone(),
                sha256,
                scopes: Scopes {
                    // An admin token may do everything, sending messages included.
                    chat: token.scopes.iter().any(|s| s == SCOPE_CHAT || s == SCOPE_ADMIN),
                    admin: token.scopes.iter().any(|s| s == SCOPE_ADMIN),
                },
                identity: token.identity_or(name).to_owned(),
                agents: token.agents.clone(),
                per_minute: token.requests_per_minute,
            })
        })
        .collect();
    if !api.token.is_empty() {
        tokens.push(ApiToken {
            name: "token".into(),
            sha256: access::token_sha256(api.token.expose()),
            scopes: Scopes { chat: true, admin: true },
            identity: access::ANONYMOUS_IDENTITY.into(),
            agents: Vec::new(),
            per_minute: 0,
        });
    }
    Access { tokens }
}

/// On NATS, the channel this API process takes its replies from, `api@<instance>`: several
/// API processes may serve one bus, and each must get the replies to its own requests. The
/// in-process bus has one API channel, which takes the `api` replies.
fn api_reply_channel(config: &Config) -> Option<String> {
    if matches!(config.bus_kind(), BusKind::InProcess) {
        return None;
    }
    let api = &config.channels.api;
    let instance = match api.instance.trim() {
        "" => format!("{}-{}", host_name(), api.listen.port()),
        named => named.to_owned(),
    };
    // `api@` and the instance within a channel's 64 bytes.
    let instance: String = instance.chars().filter(|c| !c.is_control()).take(56).collect();
    Some(format!("{}@{instance}", switchboard_channels::api::CHANNEL))
}

/// This host's name, for names and messages; `localhost` when the system has none.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// How much longer than `outbound_max_age_secs` the server keeps a reply: the adapters drop
/// replies past that age themselves, with a log line, so the server's silent limit is only for
/// channels no adapter serves.
const SERVER_AGE_GRACE: Duration = Duration::from_secs(600);

/// `[bus_options]` for a NATS bus.
pub fn nats(config: &Config) -> NatsOptions {
    let max_age = config.bus_options.outbound_max_age();
    NatsOptions {
        prefix: config.bus_options.prefix.clone(),
        ack_wait: config.bus_options.ack_wait(),
        duplicate_window: config.bus_options.duplicate_window(),
        outbound_max_age: if max_age.is_zero() { max_age } else { max_age + SERVER_AGE_GRACE },
        max_ack_pending: i64::try_from(config.bus_options.max_ack_pending).unwrap_or(i64::MAX),
        ..NatsOptions::default()
    }
}

/// The bus for logs, without credentials a NATS URL may carry.
pub fn bus_label(config: &Config) -> String {
    match config.bus_kind() {
        BusKind::InProcess => "memory".to_owned(),
        BusKind::Nats(url) => match url.split_once('@') {
            Some((scheme_and_auth, host)) => {
                let scheme = scheme_and_auth.split("://").next().unwrap_or("nats");
                format!("{scheme}://***@{host}")
            }
            None => url.to_owned(),
        },
    }
}

/// A hand-built config's problem, said like the loader says it.
pub(super) fn invalid(key: String, reason: String) -> ConfigError {
    ConfigError::Invalid { key, origin: Origin::Default, reason }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::NamedAgentConfig;

    #[test]
    fn an_agent_may_set_its_own_approval_tools() {
        let mut config = Config::default();
        config.approvals.tools = vec!["exec".into()];
        let named = |tools: Option<Vec<String>>| NamedAgentConfig { approval_tools: tools, ..Default::default() };
        config.agents.insert("ops".into(), named(Some(vec!["write_file".into(), "exec".into()])));
        config.agents.insert("open".into(), named(Some(Vec::new())));
        config.agents.insert("plain".into(), named(None));
        let tools = |name: &str| approvals(&config, name).tools.into_iter().collect::<Vec<_>>();
        assert_eq!(tools("main"), ["exec"]);
        assert_eq!(tools("plain"), ["exec"], "unset: the global list");
        assert_eq!(tools("ops"), ["exec", "write_file"]);
        assert!(tools("open").is_empty(), "empty: nothing waits");
        // Without a timeout of its own, a call waits the default 600 s.
        assert_eq!(approvals(&config, "main").timeout, std::time::Duration::from_secs(600));
    }
}
