//! `/users`: people, their identities and levels, and what they used this month; `/level`:
//! set someone's level.

use switchboard_channels::contract::InboundMessage;

use super::spend::{month_name, used};
use crate::config::{Identity, Level};
use crate::control::{LevelChange, PersonMatch};
use crate::store::StoreError;
use crate::store::users::UserSummary;
use crate::users::month_key;
use crate::worker::TurnRunner;

/// People `/users` lists at most.
const USERS_LIMIT: usize = 30;

/// `/users`: one line per person, in the order they first wrote.
pub(in crate::worker) async fn users(turns: &TurnRunner) -> Result<String, StoreError> {
    let now = turns.access.get().now();
    let users = turns.control.store().list_users(&month_key(now)).await?;
    if users.is_empty() {
        return Ok("Nobody has written to me yet.".into());
    }
    let mut text = format!("People ({}), with what they used in {}:", users.len(), month_name(now));
    for summary in users.iter().take(USERS_LIMIT) {
        text.push_str(&format!("\n{}", user_line(turns, summary)));
    }
    if let Some(left) = users.len().checked_sub(USERS_LIMIT).filter(|left| *left > 0) {
        text.push_str(&format!("\n…and {left} more: `switchboard users list` shows everyone."));
    }
    text.push_str("\n/level <person> <level> changes a level.");
    Ok(text)
}

/// `Ann, owner: telegram:1, api:ann; 8000 tokens, $0.0300`.
fn user_line(turns: &TurnRunner, summary: &UserSummary) -> String {
    let UserSummary { user, identities, used: usage, cost } = summary;
    let level = turns.access.get().listed_level(summary);
    let name = identities.iter().map(|(_, name)| name.as_str()).find(|name| !name.is_empty());
    let ids: Vec<String> = identities.iter().map(|(identity, _)| identity.to_string()).collect();
    format!(
        "{}, {level}: {}; {}",
        name.map_or_else(|| format!("user {}", user.id), str::to_owned),
        ids.join(", "),
        used(usage.total(), *cost)
    )
}

/// `/level <person> <level>`: the person is the words before the level (names have spaces).
pub(in crate::worker) async fn level(
    turns: &TurnRunner,
    msg: &InboundMessage,
    words: &[String],
) -> Result<String, StoreError> {
    let levels = Level::ALL.map(Level::as_str).join(", ");
    let Some((level, person)) = words.split_last().filter(|(_, person)| !person.is_empty()) else {
        return Ok(format!(
            "Use /level <person> <level>: a name as /users shows it, or an identity like telegram:123456, then \
             one of {levels}."
        ));
    };
    let Ok(level) = level.to_lowercase().parse::<Level>() else {
        return Ok(format!("{level} is not a level: {levels}."));
    };
    let typed = person.join(" ");
    let person = match turns.control.find_person(&typed).await? {
        PersonMatch::One(person) => person,
        PersonMatch::Several(names) => {
            return Ok(format!(
                "Several people match {typed}: {}. Give one's identity, like telegram:123456.",
                names.join(", ")
            ));
        }
        PersonMatch::Unusable(problem) => return Ok(format!("{problem}.")),
        PersonMatch::Nobody => {
            return Ok(format!(
                "I know nobody called {typed}. /users lists people; an identity like telegram:123456 works too."
            ));
        }
    };
    let owner = Identity::new(&msg.channel, &msg.sender.id).to_string();
    Ok(match turns.control.set_level(person, level, &owner).await? {
        LevelChange::Set { person, previous, level } if previous == level => {
            format!("{} is {level} already.", person.describe())
        }
        LevelChange::Set { person, previous, level } => {
            format!("{} is {level} now (was {previous}).", person.describe())
        }
        LevelChange::ConfiguredOwner(identity) => format!(
            "{identity} is an owner in the config (users.owners), and the config wins: remove them there to change \
             their level."
        ),
    })
}
