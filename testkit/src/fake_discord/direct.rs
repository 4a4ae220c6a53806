//! Direct messages to a person: `POST /users/@me/channels {"recipient_id"}` opens (or finds)
//! the DM channel with them, as Discord does.
//!
//! Discord's behaviour: the answer is the DM channel object (type 1, with `recipients`), the
//! same channel every time for the same person, and the one their DMs to the bot came from. A
//! `recipient_id` that is missing or not a snowflake is 400 Invalid Form Body (50035); a user
//! Discord does not know is 400 `Invalid Recipient(s)` (50033). Opening always works for a real
//! person; it is sending there that fails when they do not accept DMs from the bot (403
//! `Cannot send messages to this user`, 50007).

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};

use super::state::State;
use super::wire::{Answer, snowflake};
use super::{BOT_ID, events};

/// The DM channels the fake knows, and the people it treats specially.
pub(super) struct Directs {
    /// User id → their DM channel with the bot.
    by_user: HashMap<u64, u64>,
    /// People who do not accept DMs from the bot.
    pub(super) closed: HashSet<u64>,
    /// User ids Discord does not know.
    pub(super) unknown: HashSet<u64>,
    next_id: u64,
}

impl Directs {
    pub(super) fn new() -> Directs {
        Directs { by_user: HashMap::new(), closed: HashSet::new(), unknown: HashSet::new(), next_id: 7_700_000 }
    }

    /// The DM channel with `user_id`, if it exists yet.
    pub(super) fn channel_of(&self, user_id: u64) -> Option<u64> {
        self.by_user.get(&user_id).copied()
    }

    /// Records that `channel_id` is `user_id`'s DM channel (the first one found stays).
    pub(super) fn learn(&mut self, user_id: u64, channel_id: u64) {
        self.by_user.entry(user_id).or_insert(channel_id);
    }

    /// The refusal of a message create in `channel_id`, if it is the DM of someone who does
    /// not accept DMs.
    pub(super) fn refuses_messages_in(&self, channel_id: u64) -> Option<Answer> {
        let closed = self.by_user.iter().any(|(user, channel)| *channel == channel_id && self.closed.contains(user));
        closed.then(|| Answer::error(403, "Cannot send messages to this user", 50007))
    }
}

impl State {
    /// `POST /users/@me/channels`: the DM channel with `recipient_id`, opened once.
    pub(super) fn open_direct(&mut self, body: &Value) -> Answer {
        let Some(user_id) = snowflake(&body["recipient_id"]).filter(|id| *id != 0) else {
            let error = json!({ "code": "BASE_TYPE_REQUIRED", "message": "This field is required" });
            let errors = json!({ "recipient_id": { "_errors": [error] } });
            return Answer::Json(400, json!({ "code": 50035, "message": "Invalid Form Body", "errors": errors }));
        };
        if self.directs.unknown.contains(&user_id) {
            return Answer::error(400, "Invalid Recipient(s)", 50033);
        }
        let channel_id = match self.directs.channel_of(user_id) {
            Some(channel_id) => channel_id,
            None => {
                let channel_id = self.directs.next_id;
                self.directs.next_id += 1;
                self.directs.learn(user_id, channel_id);
                channel_id
            }
        };
        let channel = events::dm_channel(channel_id, user_id);
        self.add_channel(channel.clone());
        Answer::ok(channel)
    }

    /// Learns DM channels from what the test set up: DM channels added with their recipient,
    /// and DMs dispatched to the bot (no guild; the author's DM channel).
    pub(super) fn learn_direct(&mut self, channel_or_message: &Value) {
        let is_dm_channel = channel_or_message["type"] == json!(1) && channel_or_message.get("recipients").is_some();
        let channel_id = if is_dm_channel { &channel_or_message["id"] } else { &channel_or_message["channel_id"] };
        let user = if is_dm_channel {
            &channel_or_message["recipients"][0]["id"]
        } else if channel_or_message["guild_id"].is_null()
            && snowflake(&channel_or_message["author"]["id"]) != Some(BOT_ID)
        {
            &channel_or_message["author"]["id"]
        } else {
            return;
        };
        if let (Some(user_id), Some(channel_id)) = (snowflake(user), snowflake(channel_id)) {
            self.directs.learn(user_id, channel_id);
        }
    }
}
