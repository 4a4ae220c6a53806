//! People and their levels: finding the person the owner means, and changing their level.

use super::Control;
use crate::config::{Identity, Level};
use crate::store::StoreError;
use crate::store::users::UserSummary;
use crate::users::{month_key, unusable_identity};

/// A person as the owner names them: one of their identities, their display name, and all
/// the identities of their user (one, for someone never seen).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Person {
    pub identity: Identity,
    pub name: String,
    pub identities: Vec<Identity>,
}

impl Person {
    /// `Ann (telegram:42)`, or the identity alone when the name is unknown.
    pub fn describe(&self) -> String {
        if self.name.is_empty() { self.identity.to_string() } else { format!("{} ({})", self.name, self.identity) }
    }
}

/// Whom a name or identity the owner typed stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PersonMatch {
    One(Person),
    /// Several people's names match: each described as [`Person::describe`] does.
    Several(Vec<String>),
    Nobody,
    /// An identity no sender can have (an unknown channel, a platform id that is not a number): why.
    Unusable(String),
}

/// What setting a level did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LevelChange {
    Set {
        person: Person,
        previous: Level,
        level: Level,
    },
    /// Refused: this identity is named in `users.owners`, and the config wins over the store.
    ConfiguredOwner(Identity),
}

impl Control {
    /// The person `typed` names: an identity (`telegram:42`, known or not), else a known
    /// person whose display name is `typed` (any case, a leading `@` ignored), else one whose
    /// name contains it.
    pub async fn find_person(&self, typed: &str) -> Result<PersonMatch, StoreError> {
        let users = self.store.list_users(&month_key(crate::clock::now())).await?;
        if let Ok(identity) = typed.parse::<Identity>() {
            if let Some(problem) = unusable_identity(&identity) {
                return Ok(PersonMatch::Unusable(problem));
            }
            let known = users.iter().find(|summary| summary.identities.iter().any(|(known, _)| *known == identity));
            return Ok(PersonMatch::One(match known {
                Some(summary) => person(summary, &identity),
                None => Person { identity: identity.clone(), name: String::new(), identities: vec![identity] },
            }));
        }
        let wanted = typed.trim().trim_start_matches('@').to_lowercase();
        if wanted.is_empty() {
            return Ok(PersonMatch::Nobody);
        }
        let exact = matching(&users, |name| name == wanted);
        let found = if exact.is_empty() { matching(&users, |name| name.contains(&wanted)) } else { exact };
        Ok(match found.as_slice() {
            [] => PersonMatch::Nobody,
            [one] => PersonMatch::One(one.clone()),
            several => PersonMatch::Several(several.iter().map(Person::describe).collect()),
        })
    }

    /// Sets `person`'s level, unless that would lower a configured owner.
    pub async fn set_level(&self, person: Person, level: Level, decided_by: &str) -> Result<LevelChange, StoreError> {
        let owners = self.deciders.named_owners();
        if level < Level::Owner
            && let Some(owner) = person.identities.iter().find(|identity| owners.contains(identity))
        {
            return Ok(LevelChange::ConfiguredOwner(owner.clone()));
        }
        let new_level = self.deciders.new_user_level();
        let previous = self.store.resolve_user(&person.identity, "", new_level).await?.level;
        self.store.set_level(&person.identity, level).await?;
        tracing::info!(identity = %person.identity, %previous, %level, %decided_by, "level set");
        Ok(LevelChange::Set { person, previous, level })
    }
}

/// One person per user whose identities' names pass `matches` (given in lower case).
fn matching(users: &[UserSummary], matches: impl Fn(&str) -> bool) -> Vec<Person> {
    users
        .iter()
        .filter_map(|summary| {
            let (identity, _) = summary.identities.iter().find(|(_, name)| matches(&name.to_lowercase()))?;
            Some(person(summary, identity))
        })
        .collect()
}

fn person(summary: &UserSummary, identity: &Identity) -> Person {
    let name = summary.identities.iter().find(|(known, _)| known == identity).map(|(_, name)| name.clone());
    Person {
        identity: identity.clone(),
        name: name.unwrap_or_default(),
        identities: summary.identities.iter().map(|(identity, _)| identity.clone()).collect(),
    }
}
