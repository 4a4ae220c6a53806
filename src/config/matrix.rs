//! `[channels.matrix]`: the Matrix account the bot logs in as, who it answers and how.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{DmPolicyConfig, GroupPolicyConfig, Secret};

/// What happens to an invitation from someone the bot would not answer there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OtherInvitesConfig {
    /// Declined (the inviter sees the bot reject it).
    #[default]
    Decline,
    /// Left pending: accepted later from Element once the sender is allowed, or by hand.
    Ignore,
}

/// The Matrix channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MatrixChannelConfig {
    /// The channel runs when this is true and a homeserver, a user and a password or access
    /// token are configured.
    pub enabled: bool,
    /// The homeserver's client API URL (`https://matrix.example.org`); empty = `MATRIX_HOMESERVER`.
    pub homeserver: String,
    /// The bot's full user id (`@bot:example.org`); empty = `MATRIX_USER`.
    pub user: String,
    /// The account's password, used to log in once (the session is kept in the data dir);
    /// empty = `MATRIX_PASSWORD`.
    pub password: Secret,
    /// An access token instead of a password; empty = `MATRIX_ACCESS_TOKEN`.
    pub access_token: Secret,
    /// The name of the bot's device as other members' clients show it.
    pub device_name: String,
    /// Encrypts the crypto and state stores in the data dir; empty = `MATRIX_STORE_PASSPHRASE`,
    /// and without either the stores are kept unencrypted (readable by whoever reads the data dir).
    pub store_passphrase: Secret,
    pub dm_policy: DmPolicyConfig,
    /// User ids (`@alice:example.org`) answered in direct rooms under `allowlist`, and without
    /// pairing under `pairing`.
    pub allow_from: Vec<String>,
    pub group_policy: GroupPolicyConfig,
    /// Room ids (`!abc:example.org`) the bot answers in; empty = any room it is invited to.
    pub groups: Vec<String>,
    /// User ids answered in rooms; empty = every member of an allowed room.
    pub group_allow_from: Vec<String>,
    /// Unaddressed room messages kept per room or thread as context for the next addressed one
    /// (0 = none).
    pub group_context_messages: usize,
    /// Invitations from people the bot would not answer there.
    pub other_invites: OtherInvitesConfig,
    pub pairing_code_ttl_secs: u64,
    pub pairing_max_pending: usize,
    /// Edit the reply in place as it is generated, in direct rooms.
    pub stream_private: bool,
    /// The same in group rooms.
    pub stream_groups: bool,
    /// Minimum time between two edits of a streamed reply.
    pub stream_edit_interval_ms: u64,
    /// Show "typing…" while a run is active.
    pub typing: bool,
    /// Where inbound images, files and voice messages are saved; empty = `<workspace>/media/matrix`.
    pub media_dir: PathBuf,
    /// Larger inbound files are not downloaded.
    pub media_max_bytes: u64,
}

impl Default for MatrixChannelConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            homeserver: String::new(),
            user: String::new(),
            password: Secret::default(),
            access_token: Secret::default(),
            device_name: "switchboard".to_owned(),
            store_passphrase: Secret::default(),
            dm_policy: DmPolicyConfig::Pairing,
            allow_from: Vec::new(),
            group_policy: GroupPolicyConfig::Mention,
            groups: Vec::new(),
            group_allow_from: Vec::new(),
            group_context_messages: 20,
            other_invites: OtherInvitesConfig::Decline,
            pairing_code_ttl_secs: 3600,
            pairing_max_pending: 20,
            stream_private: true,
            stream_groups: false,
            stream_edit_interval_ms: 1500,
            typing: true,
            media_dir: PathBuf::new(),
            media_max_bytes: 20 * 1024 * 1024,
        }
    }
}

impl MatrixChannelConfig {
    /// Whether the channel should run: enabled, with a homeserver, a user and a way to log in.
    pub fn is_active(&self) -> bool {
        let can_log_in = !self.password.is_empty() || !self.access_token.is_empty();
        self.enabled && !self.homeserver.is_empty() && !self.user.is_empty() && can_log_in
    }

    pub fn pairing_code_ttl(&self) -> Duration {
        Duration::from_secs(self.pairing_code_ttl_secs)
    }

    pub fn stream_edit_interval(&self) -> Duration {
        Duration::from_millis(self.stream_edit_interval_ms)
    }
}

/// The first `[channels.matrix]` value that cannot work, with its key.
pub(super) fn problem(matrix: &MatrixChannelConfig) -> Option<(&'static str, String)> {
    if !matrix.enabled || (matrix.homeserver.is_empty() && matrix.user.is_empty()) {
        return None;
    }
    let url_ok = |url: &str| url.starts_with("https://") || url.starts_with("http://");
    // An empty value is a missing one: the start warns which (see `ChannelKind::missing_token`).
    if !matrix.homeserver.is_empty() && !url_ok(&matrix.homeserver) {
        let reason = format!("{:?} is not an http(s) URL (e.g. \"https://matrix.example.org\")", matrix.homeserver);
        return Some(("channels.matrix.homeserver", reason));
    }
    if !matrix.user.is_empty() && !is_user_id(&matrix.user) {
        let reason = format!("{:?} is not a Matrix user id: write it in full, e.g. \"@bot:example.org\"", matrix.user);
        return Some(("channels.matrix.user", reason));
    }
    let lists = [
        ("channels.matrix.allow_from", &matrix.allow_from),
        ("channels.matrix.group_allow_from", &matrix.group_allow_from),
    ];
    for (key, list) in lists {
        if let Some(bad) = list.iter().find(|entry| !is_user_id(entry.trim())) {
            return Some((key, format!("{bad:?} is not a Matrix user id (e.g. \"@alice:example.org\")")));
        }
    }
    if let Some(bad) = matrix.groups.iter().find(|room| !room.trim().starts_with('!')) {
        let reason =
            format!("{bad:?} is not a room id: write the id Element shows under Settings → Advanced (\"!…:server\")");
        return Some(("channels.matrix.groups", reason));
    }
    if matrix.stream_edit_interval_ms < 250 {
        let reason =
            format!("{} ms would hit the homeserver's rate limits; use at least 250", matrix.stream_edit_interval_ms);
        return Some(("channels.matrix.stream_edit_interval_ms", reason));
    }
    None
}

/// `@localpart:server`, as the homeserver writes user ids.
fn is_user_id(text: &str) -> bool {
    text.strip_prefix('@')
        .and_then(|rest| rest.split_once(':'))
        .is_some_and(|(local, server)| !local.is_empty() && !server.is_empty() && !text.contains(char::is_whitespace))
}

#[cfg(test)]
mod tests {
    use super::super::tests::load_text as load;

    #[test]
    fn the_account_comes_from_the_conventional_variables_unless_configured() {
        let env = [
            ("MATRIX_HOMESERVER", "https://matrix.example.org"),
            ("MATRIX_USER", "@bot:example.org"),
            ("MATRIX_PASSWORD", "env-password"),
        ];
        let from_env = load("", &env).unwrap();
        let matrix = &from_env.channels.matrix;
        assert_eq!((matrix.homeserver.as_str(), matrix.user.as_str()), (env[0].1, env[1].1));
        assert_eq!(matrix.password.expose(), "env-password");
        assert!(matrix.is_active());
        let text = "[channels.matrix]\nhomeserver = \"http://127.0.0.1:8008\"\naccess_token = \"file\"";
        let from_file = load(text, &env).unwrap();
        assert_eq!(from_file.channels.matrix.homeserver, "http://127.0.0.1:8008");
        assert_eq!(from_file.channels.matrix.access_token.expose(), "file");
        let off = load("[channels.matrix]\nenabled = false", &env).unwrap();
        assert!(!off.channels.matrix.is_active());
        assert!(!load("", &[]).unwrap().channels.matrix.is_active());
    }

    #[test]
    fn values_that_cannot_work_are_named_with_their_key() {
        let base = "[channels.matrix]\nhomeserver = \"https://m.example.org\"\npassword = \"pw\"\n";
        let cases = [
            ("user = \"bot\"", "channels.matrix.user"),
            ("user = \"@bot:m.example.org\"\nallow_from = [\"alice\"]", "channels.matrix.allow_from"),
            ("user = \"@bot:m.example.org\"\ngroups = [\"#room:m.example.org\"]", "channels.matrix.groups"),
            ("user = \"@bot:m.example.org\"\nstream_edit_interval_ms = 100", "channels.matrix.stream_edit_interval_ms"),
        ];
        for (extra, key) in cases {
            let err = load(&format!("{base}{extra}"), &[]).unwrap_err().to_string();
            assert!(err.contains(key), "{extra}: {err}");
        }
        // Only the homeserver given: not an error, the start names what is missing.
        let partial = load("[channels.matrix]\nhomeserver = \"https://m.example.org\"", &[]).unwrap();
        assert!(!partial.channels.matrix.is_active());
        let err = load("[channels.matrix]\nhomeserver = \"matrix.org\"\nuser = \"@b:matrix.org\"", &[]);
        assert!(err.unwrap_err().to_string().contains("channels.matrix.homeserver"));
    }
}
