//! Who is answered: the DM policy, the group policy with mention gating, and allowlists.
//! Pure decisions; the pairing lookup they may ask for is done by the caller.

use super::inbound::{Author, Incoming};
use super::{GroupPolicy, TelegramSettings};
pub(crate) use crate::policy::Verdict;

/// Decides what happens to `msg` under `settings`.
pub(crate) fn judge(msg: &Incoming, settings: &TelegramSettings) -> Verdict {
    if msg.author.is_bot {
        return Verdict::Ignore("written by a bot");
    }
    if msg.private { judge_direct(msg, settings) } else { judge_group(msg, settings) }
}

fn judge_direct(msg: &Incoming, settings: &TelegramSettings) -> Verdict {
    let owner = settings.owners.iter().any(|id| id == &msg.author.id.to_string());
    settings.dm_policy.judge(owner || listed(&settings.allow_from, &msg.author)).into()
}

fn judge_group(msg: &Incoming, settings: &TelegramSettings) -> Verdict {
    if settings.group_policy == GroupPolicy::Disabled {
        return Verdict::Ignore("group messages are disabled");
    }
    let chat = msg.chat_id.to_string();
    if !settings.groups.is_empty() && !settings.groups.iter().any(|id| id.trim() == chat) {
        return Verdict::Ignore("group is not in groups");
    }
    if !settings.group_allow_from.is_empty() && !listed(&settings.group_allow_from, &msg.author) {
        // Still part of the conversation the bot may be asked about.
        return Verdict::KeepAsContext;
    }
    match settings.group_policy {
        GroupPolicy::Open => Verdict::Forward,
        _ if msg.addressed() => Verdict::Forward,
        _ => Verdict::KeepAsContext,
    }
}

/// Whether an allowlist names the author, by numeric id or by username (with or without `@`,
/// any case).
pub(crate) fn listed(allowlist: &[String], author: &Author) -> bool {
    let id = author.id.to_string();
    allowlist.iter().map(|entry| entry.trim()).any(|entry| {
        entry == id
            || author.username.as_deref().is_some_and(|name| entry.trim_start_matches('@').eq_ignore_ascii_case(name))
    })
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::policy::DmPolicy;
    use crate::telegram::inbound::Address;

    fn message(private: bool, address: Address) -> Incoming {
        Incoming {
            chat_id: if private { 7 } else { -100 },
            topic: None,
            message_id: 1,
            private,
            chat_type: if private { "private" } else { "supergroup" },
            chat_title: None,
            author: Author { id: 7, username: Some("Alice".into()), name: "Alice A".into(), is_bot: false },
            text: "hi".into(),
            command: None,
            address,
            attachments: Vec::new(),
            replied_to: None,
            date: Utc::now(),
            burst: false,
        }
    }

    fn settings(dm: DmPolicy, group: GroupPolicy) -> TelegramSettings {
        TelegramSettings { dm_policy: dm, group_policy: group, ..TelegramSettings::default() }
    }

    #[test]
    fn direct_message_policies() {
        let dm = message(true, Address::None);
        let cases = [
            (DmPolicy::Pairing, vec![], vec![], Verdict::CheckPairing),
            (DmPolicy::Pairing, vec!["@alice"], vec![], Verdict::Forward),
            (DmPolicy::Pairing, vec![], vec!["7"], Verdict::Forward),
            (DmPolicy::Allowlist, vec![], vec![], Verdict::Ignore("sender is not in allow_from")),
            (DmPolicy::Allowlist, vec!["7"], vec![], Verdict::Forward),
            (DmPolicy::Allowlist, vec!["ALICE"], vec![], Verdict::Forward),
            (DmPolicy::Allowlist, vec!["8", "bob"], vec![], Verdict::Ignore("sender is not in allow_from")),
            (DmPolicy::Allowlist, vec![], vec!["7"], Verdict::Forward),
            (DmPolicy::Open, vec![], vec![], Verdict::Forward),
            (DmPolicy::Disabled, vec!["7"], vec!["7"], Verdict::Ignore("direct messages are disabled")),
        ];
        for (policy, allow, owners, expected) in cases {
            let mut settings = settings(policy, GroupPolicy::Mention);
            settings.allow_from = allow.iter().map(|s| s.to_string()).collect();
            settings.owners = owners.iter().map(|s| s.to_string()).collect();
            assert_eq!(judge(&dm, &settings), expected, "{policy:?} allow={allow:?} owners={owners:?}");
        }
    }

    #[test]
    fn group_mention_gating() {
        let cases = [
            (GroupPolicy::Mention, Address::None, Verdict::KeepAsContext),
            (GroupPolicy::Mention, Address::Mention, Verdict::Forward),
            (GroupPolicy::Mention, Address::Reply, Verdict::Forward),
            (GroupPolicy::Mention, Address::Command, Verdict::Forward),
            (GroupPolicy::Open, Address::None, Verdict::Forward),
            (GroupPolicy::Disabled, Address::Mention, Verdict::Ignore("group messages are disabled")),
        ];
        for (policy, address, expected) in cases {
            assert_eq!(judge(&message(false, address), &settings(DmPolicy::Pairing, policy)), expected);
        }
    }

    #[test]
    fn group_allowlists() {
        let mentioned = message(false, Address::Mention);
        let mut only_other_group = settings(DmPolicy::Pairing, GroupPolicy::Mention);
        only_other_group.groups = vec!["-200".into()];
        assert_eq!(judge(&mentioned, &only_other_group), Verdict::Ignore("group is not in groups"));
        only_other_group.groups.push("-100".into());
        assert_eq!(judge(&mentioned, &only_other_group), Verdict::Forward);
        let mut only_bob = settings(DmPolicy::Pairing, GroupPolicy::Open);
        only_bob.group_allow_from = vec!["bob".into()];
        assert_eq!(judge(&mentioned, &only_bob), Verdict::KeepAsContext);
    }

    #[test]
    fn bots_are_never_answered() {
        let mut from_bot = message(true, Address::Mention);
        from_bot.author.is_bot = true;
        assert_eq!(judge(&from_bot, &settings(DmPolicy::Open, GroupPolicy::Open)), Verdict::Ignore("written by a bot"));
    }
}
