//! Who is answered: the DM policy, the guild and channel allowlists, mention gating. Pure
//! functions of the classified message, where it was posted and the settings.

use super::DiscordSettings;
use super::inbound::{Author, Incoming};
use crate::policy::DirectVerdict;

/// Where a message was posted, resolved by the ingress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    Direct { channel_id: u64 },
    Guild { guild_id: u64, channel_id: u64 },
    Thread { guild_id: u64, parent_id: u64, thread_id: u64 },
}

impl Place {
    /// The channel whose permissions apply: a thread's parent, else the channel itself.
    pub fn governing_channel(self) -> u64 {
        match self {
            Place::Direct { channel_id } | Place::Guild { channel_id, .. } => channel_id,
            Place::Thread { parent_id, .. } => parent_id,
        }
    }
}

/// What to do with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Put it on the bus.
    Forward,
    /// A guild message that needs a mention: forward it only if it addresses the bot.
    ForwardIfAddressed,
    /// A DM from an unknown user under the pairing policy: approved already, or give a code.
    CheckPairing,
    /// Drop it; the reason is logged at debug.
    Ignore(&'static str),
}

/// Decides what happens to `msg`, posted at `place`.
pub(crate) fn judge(msg: &Incoming, place: Place, settings: &DiscordSettings) -> Verdict {
    if msg.author.is_bot && !settings.allow_bots {
        return Verdict::Ignore("written by a bot");
    }
    match place {
        Place::Direct { .. } => judge_direct(&msg.author, settings),
        Place::Guild { guild_id, .. } | Place::Thread { guild_id, .. } => {
            judge_guild(guild_id, place.governing_channel(), settings)
        }
    }
}

fn judge_direct(author: &Author, settings: &DiscordSettings) -> Verdict {
    let owner = settings.owners.iter().any(|id| id.trim() == author.id.to_string());
    match settings.dm_policy.judge(owner || listed(&settings.allow_from, author)) {
        DirectVerdict::Forward => Verdict::Forward,
        DirectVerdict::CheckPairing => Verdict::CheckPairing,
        DirectVerdict::Ignore(reason) => Verdict::Ignore(reason),
    }
}

fn judge_guild(guild_id: u64, channel_id: u64, settings: &DiscordSettings) -> Verdict {
    if !contains(&settings.guilds, guild_id) {
        return Verdict::Ignore("guild is not in guilds");
    }
    if !contains(&settings.channels, channel_id) {
        return Verdict::Ignore("channel is not in channels");
    }
    let answers_all = settings.answer_all_in.iter().any(|id| id.trim() == channel_id.to_string());
    if !settings.require_mention || answers_all { Verdict::Forward } else { Verdict::ForwardIfAddressed }
}

/// Whether an allowlist (empty = everything) contains `id`.
fn contains(allowlist: &[String], id: u64) -> bool {
    allowlist.is_empty() || allowlist.iter().any(|entry| entry.trim() == id.to_string())
}

/// Whether an allowlist names the author, by id or by username (with or without `@`, any case).
pub(crate) fn listed(allowlist: &[String], author: &Author) -> bool {
    let id = author.id.to_string();
    allowlist
        .iter()
        .map(|entry| entry.trim())
        .any(|entry| entry == id || entry.trim_start_matches('@').eq_ignore_ascii_case(&author.username))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::DmPolicy;

    fn message(is_bot: bool) -> Incoming {
        let author = Author { id: 7, username: "alice".into(), name: "Alice".into(), is_bot };
        Incoming::text(200, 1, Some(100), author, "hi".into())
    }

    const DM: Place = Place::Direct { channel_id: 300 };
    const GUILD: Place = Place::Guild { guild_id: 100, channel_id: 200 };
    const THREAD: Place = Place::Thread { guild_id: 100, parent_id: 200, thread_id: 400 };

    #[test]
    fn direct_message_policies() {
        let cases = [
            (DmPolicy::Pairing, vec![], vec![], Verdict::CheckPairing),
            (DmPolicy::Pairing, vec!["@Alice"], vec![], Verdict::Forward),
            (DmPolicy::Pairing, vec![], vec!["7"], Verdict::Forward),
            (DmPolicy::Allowlist, vec![], vec![], Verdict::Ignore("sender is not in allow_from")),
            (DmPolicy::Allowlist, vec!["7"], vec![], Verdict::Forward),
            (DmPolicy::Open, vec![], vec![], Verdict::Forward),
            (DmPolicy::Disabled, vec!["7"], vec!["7"], Verdict::Ignore("direct messages are disabled")),
        ];
        for (dm_policy, allow, owners, expected) in cases {
            let settings = DiscordSettings {
                dm_policy,
                allow_from: allow.iter().map(|s| s.to_string()).collect(),
                owners: owners.iter().map(|s| s.to_string()).collect(),
                ..DiscordSettings::default()
            };
            assert_eq!(judge(&message(false), DM, &settings), expected, "{dm_policy:?} {allow:?} {owners:?}");
        }
    }

    #[test]
    fn guild_allowlists_and_mention_requirement() {
        let list = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let default = DiscordSettings::default();
        assert_eq!(judge(&message(false), GUILD, &default), Verdict::ForwardIfAddressed);
        let other_guild = DiscordSettings { guilds: list(&["101"]), ..DiscordSettings::default() };
        assert_eq!(judge(&message(false), GUILD, &other_guild), Verdict::Ignore("guild is not in guilds"));
        let other_channel = DiscordSettings { channels: list(&["201"]), ..DiscordSettings::default() };
        assert_eq!(judge(&message(false), THREAD, &other_channel), Verdict::Ignore("channel is not in channels"));
        let parent_listed = DiscordSettings { channels: list(&["200"]), ..DiscordSettings::default() };
        assert_eq!(judge(&message(false), THREAD, &parent_listed), Verdict::ForwardIfAddressed);
        let answer_all = DiscordSettings { answer_all_in: list(&["200"]), ..DiscordSettings::default() };
        assert_eq!(judge(&message(false), THREAD, &answer_all), Verdict::Forward);
        let no_mention = DiscordSettings { require_mention: false, ..DiscordSettings::default() };
        assert_eq!(judge(&message(false), GUILD, &no_mention), Verdict::Forward);
    }

    #[test]
    fn bots_only_with_allow_bots() {
        let open = DiscordSettings { require_mention: false, ..DiscordSettings::default() };
        assert_eq!(judge(&message(true), GUILD, &open), Verdict::Ignore("written by a bot"));
        let allow = DiscordSettings { allow_bots: true, ..open };
        assert_eq!(judge(&message(true), GUILD, &allow), Verdict::Forward);
    }
}
