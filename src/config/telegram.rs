//! `[channels.telegram]`: the Telegram bot, who it answers and how it replies.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Secret;

/// How updates reach the bot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TelegramMode {
    /// `getUpdates` long polling: works behind NAT, no public URL needed.
    #[default]
    Polling,
    /// Telegram posts updates to `webhook_url`, served on `webhook_listen`.
    Webhook,
}

/// Who is answered in direct messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DmPolicyConfig {
    /// Unknown users get a one-time code the owner approves (`switchboard pairing approve`).
    #[default]
    Pairing,
    /// Only `allow_from` (and owners).
    Allowlist,
    /// Everybody.
    Open,
    /// Nobody (owners included).
    Disabled,
}

/// Which group messages are answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupPolicyConfig {
    /// Only messages that address the bot: @mention, reply to the bot, /command@bot.
    #[default]
    Mention,
    /// Every message.
    Open,
    /// No group messages.
    Disabled,
}

/// The Telegram channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TelegramChannelConfig {
    /// The channel runs when this is true and a token is configured.
    pub enabled: bool,
    /// From @BotFather; empty = the `TELEGRAM_BOT_TOKEN` variable.
    pub token: Secret,
    /// A self-hosted Bot API server; empty = https://api.telegram.org.
    pub api_url: String,
    pub mode: TelegramMode,
    /// Long-poll wait in seconds (under teloxide's 17 s HTTP timeout).
    pub poll_timeout_secs: u64,
    /// The public HTTPS URL Telegram posts updates to (webhook mode).
    pub webhook_url: String,
    /// Where the webhook server listens (behind your reverse proxy).
    #[serde(deserialize_with = "super::socket_addr")]
    pub webhook_listen: SocketAddr,
    /// Checked against the `X-Telegram-Bot-Api-Secret-Token` header; empty = generated at start.
    pub webhook_secret: Secret,
    pub dm_policy: DmPolicyConfig,
    /// Users (numeric ids or usernames) answered in direct messages under `allowlist`, and
    /// without pairing under `pairing`.
    pub allow_from: Vec<String>,
    pub group_policy: GroupPolicyConfig,
    /// Group chat ids the bot answers in; empty = any group it is added to.
    pub groups: Vec<String>,
    /// Users (ids or usernames) answered in groups; empty = everyone in an allowed group.
    pub group_allow_from: Vec<String>,
    /// Unaddressed group messages kept per chat as context for the next addressed one (0 = none).
    pub group_context_messages: usize,
    /// How long a pairing code stays valid.
    pub pairing_code_ttl_secs: u64,
    /// Pending pairing codes at most; strangers beyond it are not given one.
    pub pairing_max_pending: usize,
    /// Edit the reply in place as it is generated, in direct messages.
    pub stream_private: bool,
    /// The same in groups.
    pub stream_groups: bool,
    /// Minimum time between two edits of a streamed reply.
    pub stream_edit_interval_ms: u64,
    /// Show "typing…" while a run is active.
    pub typing: bool,
    /// In groups, quote the message being answered.
    pub quote_in_groups: bool,
    /// Where inbound photos, documents and voice notes are saved; empty = `<workspace>/media/telegram`.
    pub media_dir: PathBuf,
    /// Larger inbound files are not downloaded (the Bot API serves at most 20 MB).
    pub media_max_bytes: u64,
}

impl Default for TelegramChannelConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            token: Secret::default(),
            api_url: String::new(),
            mode: TelegramMode::Polling,
            poll_timeout_secs: 10,
            webhook_url: String::new(),
            webhook_listen: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 8788)),
            webhook_secret: Secret::default(),
            dm_policy: DmPolicyConfig::Pairing,
            allow_from: Vec::new(),
            group_policy: GroupPolicyConfig::Mention,
            groups: Vec::new(),
            group_allow_from: Vec::new(),
            group_context_messages: 20,
            pairing_code_ttl_secs: 3600,
            pairing_max_pending: 20,
            // People judge a model that takes seconds by when its words start to appear.
            stream_private: true,
            stream_groups: false,
            stream_edit_interval_ms: 1500,
            typing: true,
            quote_in_groups: true,
            media_dir: PathBuf::new(),
            media_max_bytes: 20 * 1024 * 1024,
        }
    }
}

impl TelegramChannelConfig {
    /// Whether the channel should run: enabled and given a token.
    pub fn is_active(&self) -> bool {
        self.enabled && !self.token.is_empty()
    }

    pub fn poll_timeout(&self) -> Duration {
        Duration::from_secs(self.poll_timeout_secs)
    }

    pub fn pairing_code_ttl(&self) -> Duration {
        Duration::from_secs(self.pairing_code_ttl_secs)
    }

    pub fn stream_edit_interval(&self) -> Duration {
        Duration::from_millis(self.stream_edit_interval_ms)
    }
}

/// The first `[channels.telegram]` value that cannot work, with its key.
pub(super) fn problem(telegram: &TelegramChannelConfig) -> Option<(&'static str, String)> {
    if telegram.poll_timeout_secs > 15 {
        let reason = format!(
            "{} s is too long: the HTTP client gives up after 17 s; use at most 15",
            telegram.poll_timeout_secs
        );
        return Some(("channels.telegram.poll_timeout_secs", reason));
    }
    if telegram.stream_edit_interval_ms < 250 {
        let reason = format!(
            "{} ms would hit Telegram's rate limits; use at least 250 (1000 or more is safe)",
            telegram.stream_edit_interval_ms
        );
        return Some(("channels.telegram.stream_edit_interval_ms", reason));
    }
    let url_ok = |url: &str| url.starts_with("https://") || url.starts_with("http://");
    if !telegram.api_url.is_empty() && !url_ok(&telegram.api_url) {
        return Some(("channels.telegram.api_url", format!("{:?} is not an http(s) URL", telegram.api_url)));
    }
    if telegram.mode == TelegramMode::Webhook && !url_ok(&telegram.webhook_url) {
        let reason = "webhook mode needs the public URL Telegram posts to, e.g. \"https://bot.example.org/telegram\"";
        return Some(("channels.telegram.webhook_url", reason.into()));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::tests::load_text as load;
    use super::*;

    #[test]
    fn token_comes_from_the_conventional_variable_unless_configured() {
        let from_env = load("", &[("TELEGRAM_BOT_TOKEN", "1:env")]).unwrap();
        assert_eq!(from_env.channels.telegram.token.expose(), "1:env");
        assert!(from_env.channels.telegram.is_active());
        let from_file = load("[channels.telegram]\ntoken = \"1:file\"", &[("TELEGRAM_BOT_TOKEN", "1:env")]).unwrap();
        assert_eq!(from_file.channels.telegram.token.expose(), "1:file");
        let off = load("[channels.telegram]\nenabled = false", &[("TELEGRAM_BOT_TOKEN", "1:env")]).unwrap();
        assert!(!off.channels.telegram.is_active());
        assert!(!load("", &[]).unwrap().channels.telegram.is_active(), "no token, no channel");
    }

    #[test]
    fn policies_and_lists_parse() {
        let text = "[channels.telegram]\ndm_policy = \"allowlist\"\nallow_from = [\"42\", \"@alice\"]\n\
                    group_policy = \"open\"\ngroups = [\"-100123\"]\nmode = \"webhook\"\n\
                    webhook_url = \"https://bot.example.org/tg\"\nmedia_dir = \"inbox\"";
        let config = load(text, &[]).unwrap();
        let telegram = &config.channels.telegram;
        assert_eq!(telegram.dm_policy, DmPolicyConfig::Allowlist);
        assert_eq!(telegram.allow_from, ["42", "@alice"]);
        assert_eq!(telegram.group_policy, GroupPolicyConfig::Open);
        assert_eq!(telegram.mode, TelegramMode::Webhook);
        assert_eq!(telegram.media_dir, config.data_dir().join("inbox"));
    }

    #[test]
    fn impossible_values_are_refused_with_their_key() {
        let cases = [
            ("poll_timeout_secs = 30", "channels.telegram.poll_timeout_secs"),
            ("stream_edit_interval_ms = 100", "channels.telegram.stream_edit_interval_ms"),
            ("api_url = \"api.telegram.org\"", "channels.telegram.api_url"),
            ("mode = \"webhook\"", "channels.telegram.webhook_url"),
            ("dm_policy = \"friends\"", "dm_policy"),
            ("pairing_code_ttl_secs = 0", "channels.telegram.pairing_code_ttl_secs"),
        ];
        for (line, key) in cases {
            let err = load(&format!("[channels.telegram]\n{line}"), &[]).expect_err(line).to_string();
            assert!(err.contains(key), "{line}: {err}");
        }
    }
}
