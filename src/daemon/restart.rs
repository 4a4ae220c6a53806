//! What a reload cannot apply: the settings a process reads once at start. A reload compares
//! the new config with the one in force and names those that changed, so nobody believes a
//! changed listen address, bot token or worker limit is in force when it is not.

use crate::config::{ApiChannelConfig, Config};

/// The settings that differ between `started` (the config the process started with: a reload
/// applies none of them) and `new` and need a restart to apply, by their config key. The API's
/// tokens are not among them: a reload applies them at once.
pub(super) fn needing_restart(started: &Config, new: &Config) -> Vec<&'static str> {
    // The context windows are not among them: each chain entry carries its model's window,
    // and the chains are rebuilt.
    let agent =
        |config: &Config| (config.agent.history_limit, config.agent.run_timeout_secs, config.agent.workspace.clone());
    let checks: [(&'static str, bool); 19] = [
        ("data_dir", started.data_dir != new.data_dir),
        ("bus", started.bus != new.bus),
        ("bus_options", started.bus_options != new.bus_options),
        ("store", started.store != new.store),
        ("channels.api", without_tokens(&started.channels.api) != without_tokens(&new.channels.api)),
        ("channels.telegram", started.channels.telegram != new.channels.telegram),
        ("channels.discord", started.channels.discord != new.channels.discord),
        ("channels.matrix", started.channels.matrix != new.channels.matrix),
        ("cron", started.cron != new.cron),
        ("heartbeat", started.heartbeat != new.heartbeat),
        ("metrics", started.metrics != new.metrics),
        ("worker", started.worker != new.worker),
        ("history", started.history != new.history),
        ("compaction", started.compaction != new.compaction),
        ("guard", started.guard != new.guard),
        ("rate_limits", started.rate_limits != new.rate_limits),
        ("transcription", started.transcription != new.transcription),
        ("log", started.log != new.log),
        ("agent (history_limit, run_timeout_secs, workspace)", agent(started) != agent(new)),
    ];
    checks.into_iter().filter(|(_, changed)| *changed).map(|(key, _)| key).collect()
}

/// Whether the API's tokens differ between the last config applied and `new`: the one `token`
/// or the named `tokens`.
pub(super) fn api_tokens_changed(applied: &Config, new: &Config) -> bool {
    let (old, new) = (&applied.channels.api, &new.channels.api);
    old.token != new.token || old.tokens != new.tokens
}

fn without_tokens(api: &ApiChannelConfig) -> ApiChannelConfig {
    ApiChannelConfig { token: Default::default(), tokens: Default::default(), ..api.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_settings_read_at_start_are_named_and_api_tokens_are_not_among_them() {
        let running = Config::default();
        let mut new = running.clone();
        new.permissions.unlisted_tools = crate::config::Level::Admin;
        new.channels.api.token = "sk-new".into();
        assert!(needing_restart(&running, &new).is_empty());
        assert!(api_tokens_changed(&running, &new));
        new.channels.telegram.token = "123:abc".into();
        new.channels.api.listen = "127.0.0.1:9999".parse().unwrap();
        new.worker.max_concurrent_runs += 1;
        assert_eq!(needing_restart(&running, &new), ["channels.api", "channels.telegram", "worker"]);
    }
}
