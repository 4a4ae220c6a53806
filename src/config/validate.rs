//! Checks that the types alone cannot express. Each failure names the key and where its
//! value came from. Values that may hold credentials (URLs) are not quoted back.

use tracing_subscriber::EnvFilter;

use super::allow_list::AllowList;
use super::error::{ConfigError, Origin, Origins};
use super::identity::{BadIdentity, Identity};
use super::providers::{PromptCache, parse_model_spec};
use super::{Config, ProviderKind, WebToolsConfig};

pub(super) fn validate(config: &Config, origins: &Origins) -> Result<(), ConfigError> {
    let fail = |key: &str, reason: String| ConfigError::Invalid {
        key: key.to_owned(),
        origin: origin_of(origins, key).cloned().unwrap_or(Origin::Default),
        reason,
    };
    if let Some((key, value)) = zero_counts(config) {
        return Err(fail(key, format!("must be at least 1, not {value}")));
    }
    if !is_bus(&config.bus) {
        let reason = "must be \"memory\" or a NATS URL such as \"nats://127.0.0.1:4222\" \
                      (nats:// or tls://)";
        return Err(fail("bus", reason.into()));
    }
    if !is_database_url(&config.store.database_url) {
        let reason = "must be empty (the SQLite file at store.path) or a PostgreSQL URL such as \
                      \"postgres://switchboard@db.lan:5432/switchboard\" (postgres:// or postgresql://)";
        return Err(fail("store.database_url", reason.into()));
    }
    if let Err(unknown) = config.agent.time_zone() {
        return Err(fail("agent.timezone", unknown.to_string()));
    }
    if let Err(error) = EnvFilter::try_new(&config.log) {
        return Err(fail("log", format!("{:?} is not a tracing filter: {error}", config.log)));
    }
    if let Some(reason) = subject_prefix_problem(&config.bus_options.prefix) {
        return Err(fail("bus_options.prefix", reason));
    }
    let bus = &config.bus_options;
    // JetStream refuses a stream whose duplicate window is longer than its age limit.
    if bus.outbound_max_age_secs != 0 && bus.outbound_max_age_secs < bus.duplicate_window_secs {
        let reason = format!(
            "must be 0 (no limit) or at least bus_options.duplicate_window_secs ({}), not {}",
            bus.duplicate_window_secs, bus.outbound_max_age_secs
        );
        return Err(fail("bus_options.outbound_max_age_secs", reason));
    }
    let min_header = switchboard_channels::api::MIN_HEADER_BYTES;
    if config.channels.api.max_header_bytes < min_header {
        let reason = format!("must be at least {min_header}, not {}", config.channels.api.max_header_bytes);
        return Err(fail("channels.api.max_header_bytes", reason));
    }
    if let Some((key, reason)) = super::api::problem(&config.channels.api, &config.agent_names()) {
        return Err(fail(&key, reason));
    }
    if let Some(reason) = super::api::webhook_problem(&config.channels.api.webhook) {
        return Err(fail("channels.api.webhook.url", reason));
    }
    if let Some((key, reason)) = provider_problem(config) {
        return Err(fail(&key, reason));
    }
    if let Some(owner) = config.users.owners.iter().find(|owner| owner.parse::<Identity>().is_err()) {
        return Err(fail("users.owners", BadIdentity(owner.clone()).to_string()));
    }
    if let Some((key, reason)) = super::users::groups_problem(&config.users) {
        return Err(fail(&key, reason));
    }
    let memory = &config.tools.memory;
    if memory.default_results > memory.max_results {
        let reason =
            format!("{} is more than tools.memory.max_results ({})", memory.default_results, memory.max_results);
        return Err(fail("tools.memory.default_results", reason));
    }
    if let Some((key, reason)) = super::memory::embeddings_problem(config) {
        return Err(fail(key, reason));
    }
    if let Some((key, reason)) = super::mcp::problem(&config.mcp) {
        return Err(fail(&key, reason));
    }
    if let Some((key, reason)) = web_problem(&config.tools.web) {
        return Err(fail(key, reason));
    }
    if let Some(t) = config.agent.temperature
        && !(0.0..=2.0).contains(&t)
    {
        return Err(fail("agent.temperature", format!("{t} is not between 0 and 2")));
    }
    if let Some((key, reason)) = super::agents::problem(config) {
        return Err(fail(&key, reason));
    }
    if let Some((key, reason)) = super::heartbeat::problem(config) {
        return Err(fail(&key, reason));
    }
    if let Some((key, reason)) = super::context::problem(config) {
        return Err(fail(key, reason));
    }
    if let Some((key, reason)) = super::models::problem(config) {
        return Err(fail(&key, reason));
    }
    if let Some((key, reason)) = super::telegram::problem(&config.channels.telegram) {
        return Err(fail(key, reason));
    }
    if let Some((key, reason)) = super::discord::problem(&config.channels.discord) {
        return Err(fail(key, reason));
    }
    if let Some((key, reason)) = super::matrix::problem(&config.channels.matrix) {
        return Err(fail(key, reason));
    }
    if let Some((key, reason)) = super::cron::problem(&config.cron) {
        return Err(fail(key, reason));
    }
    if let Some((key, reason)) = super::subagents::problem(&config.subagents) {
        return Err(fail(key, reason));
    }
    if let Some((key, reason)) = super::transcription::problem(config) {
        return Err(fail(key, reason));
    }
    if let Some((key, reason)) = super::approvals::problem(&config.approvals) {
        return Err(fail(key, reason));
    }
    if let Some(reason) = super::workspace::protected_problem(&config.workspace.protected) {
        return Err(fail("workspace.protected", reason));
    }
    let exec = &config.tools.exec;
    if !super::tools::SANDBOX_MODES.contains(&exec.sandbox.as_str()) {
        let reason = format!("{:?} is not one of {}", exec.sandbox, super::tools::SANDBOX_MODES.join(", "));
        return Err(fail("tools.exec.sandbox", reason));
    }
    if exec.timeout_secs > exec.max_timeout_secs {
        let reason = format!("{} is above tools.exec.max_timeout_secs ({})", exec.timeout_secs, exec.max_timeout_secs);
        return Err(fail("tools.exec.timeout_secs", reason));
    }
    if let Some(reason) = exec.deny_patterns.iter().find_map(|pattern| pattern_problem(pattern)) {
        return Err(fail("tools.exec.deny_patterns", reason));
    }
    Ok(())
}

/// Where `key` came from: its own origin; for a table, that of a key inside it (a file's
/// `[users.groups."x"]`); else that of the table or list it is in (a whole map set from the
/// environment).
fn origin_of<'a>(origins: &'a Origins, key: &str) -> Option<&'a Origin> {
    if let Some(origin) = origins.get(key) {
        return Some(origin);
    }
    let inside = format!("{key}.");
    if let Some((_, origin)) = origins.iter().find(|(path, _)| path.starts_with(&inside)) {
        return Some(origin);
    }
    let mut parent = key;
    while let Some((up, _)) = parent.rsplit_once('.') {
        if let Some(origin) = origins.get(up) {
            return Some(origin);
        }
        parent = up;
    }
    // An entry of a list (`agent.models[1].context_window`): where the list came from.
    key.split_once('[').and_then(|(list, _)| origin_of(origins, list))
}

/// The first problem of `[provider]`, `[providers.*]`, `agent.models` or `[prices.*]`.
fn provider_problem(config: &Config) -> Option<(String, String)> {
    let sections = std::iter::once(("provider".to_owned(), &config.provider))
        .chain(config.providers.iter().map(|(name, p)| (format!("providers.{name}"), p)));
    for (section, provider) in sections {
        let base_url = &provider.base_url;
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Some((format!("{section}.base_url"), "must be an http:// or https:// URL".into()));
        }
        if provider.request_timeout_secs == 0 {
            return Some((format!("{section}.request_timeout_secs"), "must be at least 1, not 0".into()));
        }
        let openai_only = matches!(provider.prompt_cache, PromptCache::Openai | PromptCache::LlamaCpp);
        if openai_only && provider.kind == ProviderKind::Anthropic {
            let reason = "is for OpenAI-compatible servers; an Anthropic provider takes \"auto\" or \"off\"";
            return Some((format!("{section}.prompt_cache"), reason.into()));
        }
    }
    for spec in &config.agent.models {
        let problem = match parse_model_spec(&spec.model) {
            Err(reason) => Some(reason),
            Ok((name, _)) => config.provider_named(name).is_none().then(|| config.unknown_provider(name)),
        };
        if let Some(reason) = problem {
            return Some(("agent.models".into(), reason));
        }
    }
    for (model, price) in &config.prices {
        for (field, value) in [("input_per_mtok", price.input_per_mtok), ("output_per_mtok", price.output_per_mtok)] {
            if !value.is_finite() || value < 0.0 {
                return Some((format!("prices.{model}.{field}"), format!("{value} is not a price (USD >= 0)")));
            }
        }
    }
    None
}

/// The first count or duration that must not be zero but is, with its key.
fn zero_counts(config: &Config) -> Option<(&'static str, u64)> {
    let as_u64 = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    let counts = [
        ("bus_options.ack_wait_secs", config.bus_options.ack_wait_secs),
        ("bus_options.duplicate_window_secs", config.bus_options.duplicate_window_secs),
        ("bus_options.queue_capacity", as_u64(config.bus_options.queue_capacity)),
        ("bus_options.max_ack_pending", config.bus_options.max_ack_pending),
        ("provider.request_timeout_secs", config.provider.request_timeout_secs),
        ("agent.max_iterations", u64::from(config.agent.max_iterations)),
        ("agent.tool_timeout_secs", config.agent.tool_timeout_secs),
        ("agent.run_timeout_secs", config.agent.run_timeout_secs),
        ("agent.bootstrap_max_chars", as_u64(config.agent.bootstrap_max_chars)),
        ("agent.memory_max_chars", as_u64(config.agent.memory_max_chars)),
        ("agent.history_limit", as_u64(config.agent.history_limit)),
        ("agent.context_window", config.agent.context_window),
        ("history.keep_user_turns", as_u64(config.history.keep_user_turns)),
        ("history.soft_trim_chars", as_u64(config.history.soft_trim_chars)),
        ("compaction.max_messages", as_u64(config.compaction.max_messages)),
        ("compaction.flush_timeout_secs", config.compaction.flush_timeout_secs),
        ("compaction.summary_max_tokens", u64::from(config.compaction.summary_max_tokens)),
        ("worker.max_concurrent_runs", as_u64(config.worker.max_concurrent_runs)),
        ("worker.max_message_age_secs", config.worker.max_message_age_secs),
        ("guard.max_message_chars", as_u64(config.guard.max_message_chars)),
        ("store.lock_check_ms", config.store.lock_check_ms),
        ("worker.max_queue_depth", as_u64(config.worker.max_queue_depth)),
        ("channels.api.reply_timeout_secs", config.channels.api.reply_timeout_secs),
        ("channels.api.max_body_bytes", as_u64(config.channels.api.max_body_bytes)),
        ("channels.api.header_timeout_secs", config.channels.api.header_timeout_secs),
        ("channels.api.body_timeout_secs", config.channels.api.body_timeout_secs),
        ("channels.api.idle_timeout_secs", config.channels.api.idle_timeout_secs),
        ("channels.api.max_connections", as_u64(config.channels.api.max_connections)),
        ("channels.api.max_websockets", as_u64(config.channels.api.max_websockets)),
        ("channels.api.webhook.max_attempts", u64::from(config.channels.api.webhook.max_attempts)),
        ("channels.api.webhook.timeout_secs", config.channels.api.webhook.timeout_secs),
        ("channels.api.idempotency_ttl_secs", config.channels.api.idempotency_ttl_secs),
        ("channels.api.idempotency_max_entries", as_u64(config.channels.api.idempotency_max_entries)),
        ("channels.telegram.poll_timeout_secs", config.channels.telegram.poll_timeout_secs),
        ("channels.telegram.pairing_code_ttl_secs", config.channels.telegram.pairing_code_ttl_secs),
        ("channels.telegram.pairing_max_pending", as_u64(config.channels.telegram.pairing_max_pending)),
        ("channels.telegram.stream_edit_interval_ms", config.channels.telegram.stream_edit_interval_ms),
        ("channels.telegram.media_max_bytes", config.channels.telegram.media_max_bytes),
        ("channels.discord.pairing_code_ttl_secs", config.channels.discord.pairing_code_ttl_secs),
        ("channels.discord.pairing_max_pending", as_u64(config.channels.discord.pairing_max_pending)),
        ("channels.discord.stream_edit_interval_ms", config.channels.discord.stream_edit_interval_ms),
        ("channels.discord.media_max_bytes", config.channels.discord.media_max_bytes),
        ("channels.discord.upload_max_bytes", config.channels.discord.upload_max_bytes),
        ("tools.web.max_results", as_u64(config.tools.web.max_results)),
        ("tools.web.max_fetch_bytes", as_u64(config.tools.web.max_fetch_bytes)),
        ("tools.web.fetch_timeout_secs", config.tools.web.fetch_timeout_secs),
        ("tools.web.max_fetch_chars", as_u64(config.tools.web.max_fetch_chars)),
        ("tools.fs.max_read_bytes", as_u64(config.tools.fs.max_read_bytes)),
        ("tools.fs.max_write_bytes", as_u64(config.tools.fs.max_write_bytes)),
        ("tools.fs.max_list_entries", as_u64(config.tools.fs.max_list_entries)),
        ("tools.memory.default_results", as_u64(config.tools.memory.default_results)),
        ("tools.memory.max_results", as_u64(config.tools.memory.max_results)),
        ("tools.memory.max_file_bytes", as_u64(config.tools.memory.max_file_bytes)),
        ("tools.memory.max_get_lines", as_u64(config.tools.memory.max_get_lines)),
        ("tools.exec.timeout_secs", config.tools.exec.timeout_secs),
        ("tools.exec.max_timeout_secs", config.tools.exec.max_timeout_secs),
        ("tools.exec.max_output_bytes", as_u64(config.tools.exec.max_output_bytes)),
    ];
    counts.into_iter().find(|&(_, value)| value == 0)
}

/// Why `pattern` is not a regular expression, on one line, if it is not.
fn pattern_problem(pattern: &str) -> Option<String> {
    let error = regex::Regex::new(pattern).err()?;
    let detail = error.to_string().split_whitespace().collect::<Vec<_>>().join(" ");
    Some(format!("{pattern:?} is not a regular expression: {detail}"))
}

fn is_bus(bus: &str) -> bool {
    if bus == "memory" {
        return true;
    }
    ["nats://", "tls://"].iter().any(|scheme| bus.strip_prefix(scheme).is_some_and(|rest| !rest.is_empty()))
}

/// Why `prefix` cannot start NATS subjects, if it cannot: it must be dot-separated tokens of
/// letters, digits, `-` and `_`, short enough that every subject made from it fits the server's
/// protocol line (the same check the bus makes when it connects).
fn subject_prefix_problem(prefix: &str) -> Option<String> {
    switchboard_channels::subject::Subjects::new(prefix).err().map(|err| err.to_string())
}

/// The first bad `[tools.web]` value, with its key. The Brave API takes at most 20 results.
fn web_problem(web: &WebToolsConfig) -> Option<(&'static str, String)> {
    let url = &web.search_base_url;
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Some(("tools.web.search_base_url", "must be an http:// or https:// URL".into()));
    }
    if web.max_results > 20 {
        return Some(("tools.web.max_results", format!("{} is more than 20 (the Brave API's limit)", web.max_results)));
    }
    AllowList::parse(&web.allow_private).err().map(|reason| ("tools.web.allow_private", reason))
}

/// Empty, or a PostgreSQL URL with a host (sqlx reads the rest: port, database, `sslmode`, …).
fn is_database_url(url: &str) -> bool {
    url.is_empty()
        || ["postgres://", "postgresql://"]
            .iter()
            .any(|scheme| url.strip_prefix(scheme).is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/')))
}
