//! What the channel asks the client's store about a room's members: whether the room is
//! direct, and a member's display name.

use matrix_sdk::ruma::OwnedUserId;
use matrix_sdk::{Room, RoomMemberships};

/// A direct room: marked so (`m.direct`, or the invitation's `is_direct`), or the bot and one
/// other person, joined or invited (the member list, fetched once per room: the counts a sync
/// carries can lag behind a join).
pub(crate) async fn is_direct(room: &Room) -> bool {
    if room.is_direct().await.unwrap_or(false) {
        return true;
    }
    match room.members(RoomMemberships::ACTIVE).await {
        Ok(members) => members.len() <= 2,
        Err(err) => {
            tracing::debug!(room = %room.room_id(), %err, "cannot list a room's members; taking it for a group");
            false
        }
    }
}

/// A member's display name in the room, when they set one.
pub(crate) async fn display_name(room: &Room, user: &OwnedUserId) -> Option<String> {
    let member = room.get_member_no_sync(user).await.ok().flatten()?;
    member.display_name().map(str::to_owned)
}
