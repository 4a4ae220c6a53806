//! Channel adapter settings resolved from the config: the adapters live in
//! `switchboard-channels` and know nothing of the config file.

use switchboard_channels::discord::{DiscordSettings, SlashScope};
use switchboard_channels::matrix::{Login, MatrixSettings, OtherInvites};
use switchboard_channels::telegram::{DmPolicy, GroupPolicy, Receive, StreamSettings, TelegramSettings};

use crate::config::{Config, DmPolicyConfig, GroupPolicyConfig, OtherInvitesConfig, SlashCommandsConfig, TelegramMode};

/// `[channels.telegram]`, with the owners from `users.owners` (`telegram:<id>`).
pub fn telegram(config: &Config) -> TelegramSettings {
    let telegram = &config.channels.telegram;
    let receive = match telegram.mode {
        TelegramMode::Polling => Receive::Polling { timeout: telegram.poll_timeout() },
        TelegramMode::Webhook => Receive::Webhook {
            public_url: telegram.webhook_url.clone(),
            listen: telegram.webhook_listen,
            secret: match telegram.webhook_secret.expose() {
                "" => switchboard_channels::contract::new_id().replace('-', ""),
                secret => secret.to_owned(),
            },
        },
    };
    TelegramSettings {
        token: telegram.token.expose().to_owned(),
        api_url: Some(telegram.api_url.clone()).filter(|url| !url.is_empty()),
        receive,
        dm_policy: dm_policy(telegram.dm_policy),
        allow_from: telegram.allow_from.clone(),
        owners: owners(config, "telegram"),
        group_policy: group_policy(telegram.group_policy),
        groups: telegram.groups.clone(),
        group_allow_from: telegram.group_allow_from.clone(),
        group_context_messages: telegram.group_context_messages,
        pairing_ttl: telegram.pairing_code_ttl(),
        pairing_max_pending: telegram.pairing_max_pending,
        stream: StreamSettings {
            private: telegram.stream_private,
            groups: telegram.stream_groups,
            edit_interval: telegram.stream_edit_interval(),
        },
        typing: telegram.typing,
        quote_in_groups: telegram.quote_in_groups,
        media_dir: telegram.media_dir.clone(),
        media_max_bytes: telegram.media_max_bytes,
        press_answer_within: switchboard_channels::telegram::PRESS_ANSWER_WITHIN,
    }
}

/// `[channels.discord]`, with the owners from `users.owners` (`discord:<id>`).
pub fn discord(config: &Config) -> DiscordSettings {
    let discord = &config.channels.discord;
    DiscordSettings {
        token: discord.token.expose().to_owned(),
        proxy_url: Some(discord.proxy_url.clone()).filter(|url| !url.is_empty()),
        dm_policy: dm_policy(discord.dm_policy),
        allow_from: discord.allow_from.clone(),
        owners: owners(config, "discord"),
        guilds: discord.guilds.clone(),
        channels: discord.channels.clone(),
        answer_all_in: discord.answer_all_in.clone(),
        require_mention: discord.require_mention,
        allow_bots: discord.allow_bots,
        group_context_messages: discord.group_context_messages,
        pairing_ttl: discord.pairing_code_ttl(),
        pairing_max_pending: discord.pairing_max_pending,
        stream: StreamSettings {
            private: discord.stream_private,
            groups: discord.stream_groups,
            edit_interval: discord.stream_edit_interval(),
        },
        typing: discord.typing,
        media_dir: discord.media_dir.clone(),
        media_max_bytes: discord.media_max_bytes,
        upload_max_bytes: discord.upload_max_bytes,
        slash_commands: match discord.slash_commands {
            SlashCommandsConfig::Global => SlashScope::Global,
            SlashCommandsConfig::Guilds => SlashScope::Guilds,
            SlashCommandsConfig::Off => SlashScope::Off,
        },
    }
}

/// `[channels.matrix]`, with the owners from `users.owners` (`matrix:@user:server`); its
/// session and stores in `<data dir>/matrix`.
pub fn matrix(config: &Config) -> MatrixSettings {
    let matrix = &config.channels.matrix;
    let login = match matrix.access_token.expose() {
        "" => Login::Password(matrix.password.expose().to_owned()),
        token => Login::AccessToken(token.to_owned()),
    };
    MatrixSettings {
        homeserver: matrix.homeserver.clone(),
        user: matrix.user.clone(),
        login,
        device_name: matrix.device_name.clone(),
        store_dir: config.data_dir().join("matrix"),
        store_passphrase: Some(matrix.store_passphrase.expose().to_owned()).filter(|pass| !pass.is_empty()),
        dm_policy: dm_policy(matrix.dm_policy),
        allow_from: matrix.allow_from.clone(),
        owners: owners(config, "matrix"),
        group_policy: group_policy(matrix.group_policy),
        groups: matrix.groups.clone(),
        group_allow_from: matrix.group_allow_from.clone(),
        group_context_messages: matrix.group_context_messages,
        other_invites: match matrix.other_invites {
            OtherInvitesConfig::Decline => OtherInvites::Decline,
            OtherInvitesConfig::Ignore => OtherInvites::Ignore,
        },
        pairing_ttl: matrix.pairing_code_ttl(),
        pairing_max_pending: matrix.pairing_max_pending,
        stream: StreamSettings {
            private: matrix.stream_private,
            groups: matrix.stream_groups,
            edit_interval: matrix.stream_edit_interval(),
        },
        typing: matrix.typing,
        media_dir: matrix.media_dir.clone(),
        media_max_bytes: matrix.media_max_bytes,
    }
}

fn group_policy(policy: GroupPolicyConfig) -> GroupPolicy {
    match policy {
        GroupPolicyConfig::Mention => GroupPolicy::Mention,
        GroupPolicyConfig::Open => GroupPolicy::Open,
        GroupPolicyConfig::Disabled => GroupPolicy::Disabled,
    }
}

fn dm_policy(policy: DmPolicyConfig) -> DmPolicy {
    match policy {
        DmPolicyConfig::Pairing => DmPolicy::Pairing,
        DmPolicyConfig::Allowlist => DmPolicy::Allowlist,
        DmPolicyConfig::Open => DmPolicy::Open,
        DmPolicyConfig::Disabled => DmPolicy::Disabled,
    }
}

/// The sender ids of `users.owners` on `channel` (`<channel>:<id>`).
fn owners(config: &Config, channel: &str) -> Vec<String> {
    let prefix = format!("{channel}:");
    config.users.owners.iter().filter_map(|owner| owner.strip_prefix(prefix.as_str())).map(str::to_owned).collect()
}
