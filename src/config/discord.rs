//! `[channels.discord]`: the Discord bot, who it answers and how it replies.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{DmPolicyConfig, Secret};

/// The Discord channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiscordChannelConfig {
    /// The channel runs when this is true and a token is configured.
    pub enabled: bool,
    /// From the developer portal; empty = the `DISCORD_BOT_TOKEN` variable.
    pub token: Secret,
    /// An HTTP proxy for REST calls (twilight-http-proxy); empty = discord.com directly.
    pub proxy_url: String,
    pub dm_policy: DmPolicyConfig,
    /// User ids or usernames answered in DMs (without pairing under `pairing`).
    pub allow_from: Vec<String>,
    /// Guild ids answered in; empty = every guild the bot is in.
    pub guilds: Vec<String>,
    /// Channel ids answered in; empty = every channel of an allowed guild.
    pub channels: Vec<String>,
    /// Channels where every message is answered, mention or not.
    pub answer_all_in: Vec<String>,
    /// Whether guild messages must mention the bot (or reply to it).
    pub require_mention: bool,
    /// Whether other bots' messages are answered.
    pub allow_bots: bool,
    /// Unaddressed guild messages kept per channel or thread as context for the next one that
    /// mentions the bot (0 = none).
    pub group_context_messages: usize,
    /// How long a pairing code stays valid.
    pub pairing_code_ttl_secs: u64,
    /// Pending pairing codes at most.
    pub pairing_max_pending: usize,
    /// Edit the reply in place as it is generated, in DMs.
    pub stream_private: bool,
    /// The same in guild channels.
    pub stream_groups: bool,
    /// Minimum time between two edits of a streamed reply.
    pub stream_edit_interval_ms: u64,
    /// Show "typing…" while a run is active.
    pub typing: bool,
    /// Where inbound attachments are saved; empty = `<workspace>/media/discord`.
    pub media_dir: PathBuf,
    /// Larger attachments are not downloaded.
    pub media_max_bytes: u64,
    /// Largest upload of one message (all its files) in DMs and in servers without boosts:
    /// Discord's limit for bots, 10 MiB. Servers at boost level 2 or 3 take 50 or 100 MiB;
    /// the adapter asks Discord a server's level when a file is larger than this.
    pub upload_max_bytes: u64,
    /// Where the chat commands are registered as Discord slash commands.
    pub slash_commands: SlashCommandsConfig,
}

/// Where the chat commands are registered as Discord application (slash) commands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SlashCommandsConfig {
    /// One global table: every server the bot is in and its DMs, no ids to keep up to date.
    #[default]
    Global,
    /// In each server of `guilds` (changes show at once), plus a global table for DMs only.
    Guilds,
    /// None: the ones registered before are removed.
    Off,
}

impl Default for DiscordChannelConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            token: Secret::default(),
            proxy_url: String::new(),
            dm_policy: DmPolicyConfig::Pairing,
            allow_from: Vec::new(),
            guilds: Vec::new(),
            channels: Vec::new(),
            answer_all_in: Vec::new(),
            require_mention: true,
            allow_bots: false,
            group_context_messages: 20,
            pairing_code_ttl_secs: 3600,
            pairing_max_pending: 20,
            // People judge a model that takes seconds by when its words start to appear.
            stream_private: true,
            stream_groups: false,
            stream_edit_interval_ms: 1500,
            typing: true,
            media_dir: PathBuf::new(),
            media_max_bytes: 25 * 1024 * 1024,
            upload_max_bytes: 10 * 1024 * 1024,
            slash_commands: SlashCommandsConfig::Global,
        }
    }
}

impl DiscordChannelConfig {
    /// Whether the channel should run: enabled and given a token.
    pub fn is_active(&self) -> bool {
        self.enabled && !self.token.is_empty()
    }

    pub fn pairing_code_ttl(&self) -> Duration {
        Duration::from_secs(self.pairing_code_ttl_secs)
    }

    pub fn stream_edit_interval(&self) -> Duration {
        Duration::from_millis(self.stream_edit_interval_ms)
    }
}

/// The first `[channels.discord]` value that cannot work, with its key.
pub(super) fn problem(discord: &DiscordChannelConfig) -> Option<(&'static str, String)> {
    if discord.stream_edit_interval_ms < 250 {
        let reason = format!(
            "{} ms would hit Discord's rate limits; use at least 250 (1000 or more is safe)",
            discord.stream_edit_interval_ms
        );
        return Some(("channels.discord.stream_edit_interval_ms", reason));
    }
    let url_ok = |url: &str| url.starts_with("https://") || url.starts_with("http://");
    if !discord.proxy_url.is_empty() && !url_ok(&discord.proxy_url) {
        return Some(("channels.discord.proxy_url", format!("{:?} is not an http(s) URL", discord.proxy_url)));
    }
    let not_an_id = |ids: &[String]| ids.iter().find(|id| id.trim().parse::<u64>().is_err()).cloned();
    let lists = [
        ("channels.discord.guilds", &discord.guilds),
        ("channels.discord.channels", &discord.channels),
        ("channels.discord.answer_all_in", &discord.answer_all_in),
    ];
    for (key, ids) in lists {
        if let Some(bad) = not_an_id(ids) {
            return Some((key, format!("{bad:?} is not a Discord id (a number, as a string)")));
        }
    }
    if discord.slash_commands == SlashCommandsConfig::Guilds && discord.guilds.is_empty() {
        let reason = "\"guilds\" registers the slash commands in the servers of channels.discord.guilds, and it is \
                      empty: name them, or use \"global\"";
        return Some(("channels.discord.slash_commands", reason.to_owned()));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::tests::load_text as load;
    use super::*;

    #[test]
    fn discord_token_comes_from_the_conventional_variable_unless_configured() {
        let from_env = load("", &[("DISCORD_BOT_TOKEN", "env-token")]).unwrap();
        assert_eq!(from_env.channels.discord.token.expose(), "env-token");
        assert!(from_env.channels.discord.is_active());
        let from_file = load("[channels.discord]\ntoken = \"file\"", &[("DISCORD_BOT_TOKEN", "env")]).unwrap();
        assert_eq!(from_file.channels.discord.token.expose(), "file");
        let off = load("[channels.discord]\nenabled = false", &[("DISCORD_BOT_TOKEN", "env")]).unwrap();
        assert!(!off.channels.discord.is_active());
        assert!(!load("", &[]).unwrap().channels.discord.is_active(), "no token, no channel");
    }

    #[test]
    fn discord_policies_and_lists_parse() {
        let text = "[channels.discord]\ndm_policy = \"open\"\nallow_from = [\"42\"]\nguilds = [\"100\"]\n\
                    channels = [\"200\"]\nanswer_all_in = [\"200\"]\nrequire_mention = false\nmedia_dir = \"inbox\"";
        let config = load(text, &[]).unwrap();
        let discord = &config.channels.discord;
        assert_eq!(discord.dm_policy, DmPolicyConfig::Open);
        assert_eq!(discord.guilds, ["100"]);
        assert_eq!(discord.answer_all_in, ["200"]);
        assert!(!discord.require_mention);
        assert_eq!(discord.slash_commands, SlashCommandsConfig::Global);
        assert_eq!(discord.media_dir, config.data_dir().join("inbox"));
        let default = load("", &[]).unwrap();
        assert_eq!(default.channels.discord.media_dir, default.agent.workspace.join("media").join("discord"));
    }

    #[test]
    fn impossible_discord_values_are_refused_with_their_key() {
        let cases = [
            ("stream_edit_interval_ms = 100", "channels.discord.stream_edit_interval_ms"),
            ("proxy_url = \"localhost:3000\"", "channels.discord.proxy_url"),
            ("guilds = [\"general\"]", "channels.discord.guilds"),
            ("dm_policy = \"friends\"", "dm_policy"),
            ("pairing_code_ttl_secs = 0", "channels.discord.pairing_code_ttl_secs"),
            ("media_max_bytes = 0", "channels.discord.media_max_bytes"),
            ("slash_commands = \"guilds\"", "channels.discord.slash_commands"),
            ("slash_commands = \"everywhere\"", "slash_commands"),
        ];
        for (line, key) in cases {
            let err = load(&format!("[channels.discord]\n{line}"), &[]).expect_err(line).to_string();
            assert!(err.contains(key), "{line}: {err}");
        }
    }
}
