//! Who is answered, and whose invitations are accepted: the DM policy, the group policy with
//! mention gating, the room and user allowlists. Pure decisions on user and room ids; the
//! pairing lookup they may ask for is the caller's.

use super::{DmPolicy, GroupPolicy, MatrixSettings, OtherInvites};
pub(crate) use crate::policy::Verdict;

/// A room message, as far as the rules look at it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Message<'a> {
    pub sender: &'a str,
    pub room: &'a str,
    /// A direct room (`is_direct`, or the bot and one other member).
    pub direct: bool,
    /// A mention of the bot, a reply to it, or a command.
    pub addressed: bool,
    /// `m.notice`: what bots send, and never answer.
    pub notice: bool,
}

/// Decides what happens to `msg`.
pub(crate) fn judge(msg: &Message<'_>, settings: &MatrixSettings) -> Verdict {
    if msg.notice {
        return Verdict::Ignore("a notice (what bots send)");
    }
    if msg.direct { judge_direct(msg.sender, settings) } else { judge_group(msg, settings) }
}

fn judge_direct(sender: &str, settings: &MatrixSettings) -> Verdict {
    settings.dm_policy.judge(known(sender, settings)).into()
}

fn judge_group(msg: &Message<'_>, settings: &MatrixSettings) -> Verdict {
    if settings.group_policy == GroupPolicy::Disabled {
        return Verdict::Ignore("group messages are disabled");
    }
    if !room_allowed(msg.room, settings) {
        return Verdict::Ignore("room is not in groups");
    }
    if !settings.group_allow_from.is_empty() && !listed(&settings.group_allow_from, msg.sender) {
        // Still part of the conversation the bot may be asked about.
        return Verdict::KeepAsContext;
    }
    match settings.group_policy {
        GroupPolicy::Open => Verdict::Forward,
        _ if msg.addressed => Verdict::Forward,
        _ => Verdict::KeepAsContext,
    }
}

/// What to do with an invitation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InviteVerdict {
    Join,
    /// Declined, for this reason (logged).
    Decline(&'static str),
    /// Left pending, for this reason (logged).
    Leave(&'static str),
}

/// Decides about an invitation from `inviter` to `room`, a direct room or not. A direct room
/// is joined whenever its messages could be answered: under pairing, a stranger must be able to
/// get their code there.
pub(crate) fn judge_invite(inviter: &str, room: &str, direct: bool, settings: &MatrixSettings) -> InviteVerdict {
    let refusal = match direct {
        true => match settings.dm_policy {
            DmPolicy::Disabled => Some("direct messages are disabled"),
            DmPolicy::Allowlist if !known(inviter, settings) => Some("the inviter is not in allow_from"),
            _ => None,
        },
        false => {
            if settings.group_policy == GroupPolicy::Disabled {
                Some("group messages are disabled")
            } else if !room_allowed(room, settings) {
                Some("the room is not in groups")
            } else if !settings.group_allow_from.is_empty()
                && !listed(&settings.group_allow_from, inviter)
                && !settings.owners.iter().any(|owner| owner.trim() == inviter)
            {
                Some("the inviter is not in group_allow_from")
            } else {
                None
            }
        }
    };
    match (refusal, settings.other_invites) {
        (None, _) => InviteVerdict::Join,
        (Some(reason), OtherInvites::Decline) => InviteVerdict::Decline(reason),
        (Some(reason), OtherInvites::Ignore) => InviteVerdict::Leave(reason),
    }
}

/// An owner, or in `allow_from`.
fn known(sender: &str, settings: &MatrixSettings) -> bool {
    settings.owners.iter().any(|owner| owner.trim() == sender) || listed(&settings.allow_from, sender)
}

fn room_allowed(room: &str, settings: &MatrixSettings) -> bool {
    settings.groups.is_empty() || settings.groups.iter().any(|id| id.trim() == room)
}

/// Whether an allowlist names `user` (a full user id; the server part in any case).
pub(crate) fn listed(allowlist: &[String], user: &str) -> bool {
    allowlist.iter().map(|entry| entry.trim()).any(|entry| same_user(entry, user))
}

fn same_user(one: &str, other: &str) -> bool {
    match (one.split_once(':'), other.split_once(':')) {
        (Some((local, server)), Some((other_local, other_server))) => {
            local == other_local && server.eq_ignore_ascii_case(other_server)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALICE: &str = "@alice:example.org";
    const ROOM: &str = "!room:example.org";

    fn message(direct: bool, addressed: bool) -> Message<'static> {
        Message { sender: ALICE, room: ROOM, direct, addressed, notice: false }
    }

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn direct_message_policies() {
        let cases = [
            (DmPolicy::Pairing, &[][..], &[][..], Verdict::CheckPairing),
            (DmPolicy::Pairing, &["@alice:EXAMPLE.org"][..], &[][..], Verdict::Forward),
            (DmPolicy::Pairing, &[][..], &[ALICE][..], Verdict::Forward),
            (DmPolicy::Allowlist, &[][..], &[][..], Verdict::Ignore("sender is not in allow_from")),
            (DmPolicy::Allowlist, &["@Alice:example.org"][..], &[][..], Verdict::Ignore("sender is not in allow_from")),
            (DmPolicy::Allowlist, &[ALICE][..], &[][..], Verdict::Forward),
            (DmPolicy::Open, &[][..], &[][..], Verdict::Forward),
            (DmPolicy::Disabled, &[ALICE][..], &[ALICE][..], Verdict::Ignore("direct messages are disabled")),
        ];
        for (dm_policy, allow, owners, expected) in cases {
            let settings = MatrixSettings {
                dm_policy,
                allow_from: strings(allow),
                owners: strings(owners),
                ..MatrixSettings::default()
            };
            assert_eq!(judge(&message(true, false), &settings), expected, "{dm_policy:?} {allow:?} {owners:?}");
        }
    }

    #[test]
    fn group_messages_need_a_mention_an_allowed_room_and_an_allowed_sender() {
        let default = MatrixSettings::default();
        assert_eq!(judge(&message(false, true), &default), Verdict::Forward);
        assert_eq!(judge(&message(false, false), &default), Verdict::KeepAsContext);
        let open = MatrixSettings { group_policy: GroupPolicy::Open, ..MatrixSettings::default() };
        assert_eq!(judge(&message(false, false), &open), Verdict::Forward);
        let other_room = MatrixSettings { groups: strings(&["!other:example.org"]), ..MatrixSettings::default() };
        assert_eq!(judge(&message(false, true), &other_room), Verdict::Ignore("room is not in groups"));
        let only_bob = MatrixSettings { group_allow_from: strings(&["@bob:example.org"]), ..MatrixSettings::default() };
        assert_eq!(judge(&message(false, true), &only_bob), Verdict::KeepAsContext);
        let off = MatrixSettings { group_policy: GroupPolicy::Disabled, ..MatrixSettings::default() };
        assert_eq!(judge(&message(false, true), &off), Verdict::Ignore("group messages are disabled"));
        let notice = Message { notice: true, ..message(true, true) };
        assert_eq!(judge(&notice, &default), Verdict::Ignore("a notice (what bots send)"));
    }

    #[test]
    fn invitations_are_accepted_where_the_inviter_would_be_answered() {
        let default = MatrixSettings::default();
        // Under pairing a stranger's direct room is joined: their code is given there.
        assert_eq!(judge_invite(ALICE, ROOM, true, &default), InviteVerdict::Join);
        assert_eq!(judge_invite(ALICE, ROOM, false, &default), InviteVerdict::Join);
        let allowlist = MatrixSettings { dm_policy: DmPolicy::Allowlist, ..MatrixSettings::default() };
        assert_eq!(
            judge_invite(ALICE, ROOM, true, &allowlist),
            InviteVerdict::Decline("the inviter is not in allow_from")
        );
        let pending = MatrixSettings { other_invites: OtherInvites::Ignore, ..allowlist.clone() };
        assert_eq!(judge_invite(ALICE, ROOM, true, &pending), InviteVerdict::Leave("the inviter is not in allow_from"));
        let owner = MatrixSettings { owners: strings(&[ALICE]), ..allowlist };
        assert_eq!(judge_invite(ALICE, ROOM, true, &owner), InviteVerdict::Join);
        let rooms = MatrixSettings { groups: strings(&["!other:example.org"]), ..MatrixSettings::default() };
        assert_eq!(judge_invite(ALICE, ROOM, false, &rooms), InviteVerdict::Decline("the room is not in groups"));
        let inviters = MatrixSettings { group_allow_from: strings(&["@bob:example.org"]), ..MatrixSettings::default() };
        assert_eq!(
            judge_invite(ALICE, ROOM, false, &inviters),
            InviteVerdict::Decline("the inviter is not in group_allow_from")
        );
    }
}
