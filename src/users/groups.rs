//! [`GroupRules`]: `[users.groups]`, looked up for the group a message was written in.

use std::collections::BTreeMap;

use crate::config::{GroupAccessConfig, GroupKey, Level};

/// A `[users.groups]` key that names no group.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("users.groups.{key}: {reason}")]
pub struct BadGroup {
    pub key: String,
    pub reason: String,
}

/// What one configured group gives its members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRule {
    /// The key it is configured under (`telegram:-100…`, `discord:guild:…`): the name its
    /// pooled usage is stored under.
    pub key: String,
    /// The lowest level anyone runs with in the group.
    pub level: Level,
    /// Tokens a month the whole group may use; `None` = no shared limit.
    pub budget: Option<u64>,
}

/// Where a message was written, as far as group settings care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupPlace<'a> {
    pub channel: &'a str,
    /// The chat: a Telegram group (whatever the topic), a Discord channel (a thread's parent).
    pub chat_id: &'a str,
    /// The Discord server, when the platform says.
    pub guild_id: Option<&'a str>,
}

/// The configured groups, by chat and by Discord server.
#[derive(Debug, Clone, Default)]
pub struct GroupRules {
    chats: BTreeMap<(String, String), GroupRule>,
    guilds: BTreeMap<String, GroupRule>,
}

impl GroupRules {
    /// The rules of `[users.groups]`; fails on the first key that names no group (config
    /// validation reports that earlier, with the key path).
    pub fn from_config(groups: &BTreeMap<String, GroupAccessConfig>) -> Result<Self, BadGroup> {
        let mut rules = GroupRules::default();
        for (key, group) in groups {
            let rule =
                GroupRule { key: key.clone(), level: group.level, budget: (group.budget > 0).then_some(group.budget) };
            match GroupKey::parse(key) {
                Ok(GroupKey::Chat { channel, chat_id }) => {
                    rules.chats.insert((channel.to_owned(), chat_id.to_owned()), rule);
                }
                Ok(GroupKey::DiscordGuild { guild_id }) => {
                    rules.guilds.insert(guild_id.to_owned(), rule);
                }
                Err(reason) => return Err(BadGroup { key: key.clone(), reason }),
            }
        }
        Ok(rules)
    }

    /// The rule of the group at `place`: the chat's own entry, else its Discord server's.
    pub fn find(&self, place: GroupPlace<'_>) -> Option<&GroupRule> {
        let chat = self.chats.get(&(place.channel.to_owned(), place.chat_id.to_owned()));
        let guild = || place.guild_id.filter(|_| place.channel == "discord").and_then(|id| self.guilds.get(id));
        chat.or_else(guild)
    }

    /// Every configured group, chats first, by key.
    pub fn all(&self) -> impl Iterator<Item = &GroupRule> {
        self.chats.values().chain(self.guilds.values())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(entries: &[(&str, Level, u64)]) -> GroupRules {
        let config =
            entries.iter().map(|&(key, level, budget)| (key.to_owned(), GroupAccessConfig { level, budget })).collect();
        GroupRules::from_config(&config).unwrap()
    }

    fn place<'a>(channel: &'a str, chat_id: &'a str, guild_id: Option<&'a str>) -> GroupPlace<'a> {
        GroupPlace { channel, chat_id, guild_id }
    }

    #[test]
    fn a_channel_entry_wins_over_its_server_and_servers_cover_the_rest() {
        let rules = rules(&[("discord:guild:100", Level::User, 0), ("discord:200", Level::Admin, 5000)]);
        let found = |p| rules.find(p).map(|rule: &GroupRule| (rule.key.as_str(), rule.level, rule.budget));
        assert_eq!(found(place("discord", "200", Some("100"))), Some(("discord:200", Level::Admin, Some(5000))));
        assert_eq!(found(place("discord", "201", Some("100"))), Some(("discord:guild:100", Level::User, None)));
        assert_eq!(found(place("discord", "201", Some("999"))), None);
        assert_eq!(found(place("discord", "201", None)), None);
        // A guild id only means something on Discord.
        assert_eq!(found(place("telegram", "-5", Some("100"))), None);
    }

    #[test]
    fn a_key_that_names_no_group_is_refused() {
        let config = [("telegram:family".to_owned(), GroupAccessConfig::default())].into();
        let err = GroupRules::from_config(&config).unwrap_err();
        assert!(err.to_string().starts_with("users.groups.telegram:family: "), "{err}");
    }

    #[test]
    fn telegram_groups_are_found_by_chat() {
        let rules = rules(&[("telegram:-1001234", Level::User, 0)]);
        assert_eq!(rules.find(place("telegram", "-1001234", None)).map(|r| r.level), Some(Level::User));
        assert!(rules.find(place("telegram", "-1009999", None)).is_none());
        assert_eq!(rules.all().count(), 1);
    }
}
