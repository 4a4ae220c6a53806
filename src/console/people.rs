//! People and levels: every user with their identities, level, this month's tokens and last
//! activity, the pairing requests waiting, and a level changed.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use switchboard_channels::api::console::desk::ConsoleError;
use switchboard_channels::api::console::views::{
    IdentityItem, PairingDecisionItem, PairingRequestItem, People, Person,
};

use super::{Console, failed};
use crate::config::{BadLevel, Identity, Level};
use crate::control::{LevelChange, PersonMatch};
use crate::store::pairing::{PairingDecision, PairingState};
use crate::store::users::{UserId, UserSummary};
use crate::users::{AccessPolicy, month_key};

/// Pairing decisions the People view shows.
const RECENT_PAIRING_DECISIONS: usize = 50;

/// What a person's view is made of besides the user.
struct Context {
    policy: AccessPolicy,
    /// Identities let into direct messages by an approved pairing.
    paired: HashSet<String>,
    last_active: HashMap<UserId, DateTime<Utc>>,
}

impl Console {
    fn policy(&self) -> Result<AccessPolicy, ConsoleError> {
        let config = &self.config;
        AccessPolicy::from_config(&config.users, &config.permissions, &config.budgets)
            .map_err(|err| ConsoleError::Failed(err.to_string()))
    }

    async fn users(&self, policy: &AccessPolicy) -> Result<Vec<UserSummary>, ConsoleError> {
        self.store.list_users(&month_key(policy.now())).await.map_err(failed)
    }
}

pub(super) async fn list(console: &Console) -> Result<People, ConsoleError> {
    let policy = console.policy()?;
    let users = console.users(&policy).await?;
    let pairings = console.store.list_pairings(None).await.map_err(failed)?;
    let mut paired = HashSet::new();
    let mut pending = Vec::new();
    for entry in pairings {
        match entry.state {
            PairingState::Approved { .. } => {
                paired.insert(format!("{}:{}", entry.channel, entry.sender_id));
            }
            PairingState::Pending { code, expires_at } => pending.push(PairingRequestItem {
                expires: console.local(expires_at),
                channel: entry.channel,
                code,
                sender_id: entry.sender_id,
                name: entry.sender_name,
                expires_at,
            }),
        }
    }
    pending.sort_by_key(|request| request.expires_at);
    let decided = console.store.pairing_decisions(None, RECENT_PAIRING_DECISIONS).await.map_err(failed)?;
    let decisions = decided.into_iter().map(|decision| decision_item(console, decision)).collect();
    let last_active = console.usage.last_active().await.map_err(failed)?;
    let context = Context { policy, paired, last_active: last_active.into_iter().map(|a| (a.user, a.at)).collect() };
    let people = users.iter().map(|summary| person(&context, summary)).collect();
    let levels = Level::ALL.iter().map(|level| level.as_str().to_owned()).collect();
    Ok(People { people, pending, decisions, levels })
}

fn decision_item(console: &Console, decision: PairingDecision) -> PairingDecisionItem {
    let PairingDecision { channel, sender_id, sender_name, code, decision, decided_by, decided_at } = decision;
    let decided = console.local(decided_at);
    PairingDecisionItem { channel, code, sender_id, name: sender_name, decision, decided_by, decided_at, decided }
}

fn person(context: &Context, summary: &UserSummary) -> Person {
    let UserSummary { user, identities, used, .. } = summary;
    let level = context.policy.listed_level(summary);
    let name = identities
        .iter()
        .map(|(identity, name)| if name.is_empty() { identity.to_string() } else { name.clone() })
        .next()
        .unwrap_or_else(|| format!("user {}", user.id));
    let items = identities
        .iter()
        .map(|(identity, name)| IdentityItem {
            identity: identity.to_string(),
            name: name.clone(),
            paired: context.paired.contains(&identity.to_string()),
        })
        .collect();
    Person {
        user_id: user.id.0,
        name,
        level: level.as_str().to_owned(),
        configured_owner: identities
            .iter()
            .any(|(identity, _)| context.policy.new_user_level(identity) == Level::Owner),
        identities: items,
        tokens_this_month: used.input_tokens.saturating_add(used.output_tokens),
        last_active: context.last_active.get(&user.id).copied(),
    }
}

pub(super) async fn set_level(
    console: &Console,
    identity: &str,
    level: &str,
    by: &str,
) -> Result<Person, ConsoleError> {
    let identity: Identity = identity.parse().map_err(|_| {
        ConsoleError::Invalid(format!("{identity:?} is not an identity (channel:sender_id, e.g. telegram:123456)"))
    })?;
    let level: Level = level.parse().map_err(|err: BadLevel| ConsoleError::Invalid(err.to_string()))?;
    // The owner's operation, as `/level` does it: the config's owners are not lowered.
    let known = console.users(&console.policy()?).await?;
    let is_known = known.iter().any(|summary| summary.identities.iter().any(|(known, _)| *known == identity));
    // A configured owner, seen or not, gets the config's answer below.
    if !is_known && !console.control.deciders().named_owners().contains(&identity) {
        return Err(ConsoleError::NotFound(format!("nobody is known as {identity}")));
    }
    let person = match console.control.find_person(&identity.to_string()).await.map_err(failed)? {
        PersonMatch::One(person) => person,
        PersonMatch::Unusable(problem) => return Err(ConsoleError::Invalid(problem)),
        PersonMatch::Several(_) | PersonMatch::Nobody => {
            return Err(ConsoleError::NotFound(format!("nobody is known as {identity}")));
        }
    };
    let user_identity = person.identity.clone();
    match console.control.set_level(person, level, by).await.map_err(failed)? {
        LevelChange::ConfiguredOwner(owner) => {
            return Err(ConsoleError::Invalid(format!(
                "{owner} is listed in users.owners, so it acts as owner whatever is set here; lower it in the config"
            )));
        }
        LevelChange::Set { .. } => {}
    }
    let people = list(console).await?;
    people
        .people
        .into_iter()
        .find(|person| person.identities.iter().any(|item| item.identity == user_identity.to_string()))
        .ok_or_else(|| ConsoleError::Failed(format!("{user_identity} is gone after its level was set")))
}
