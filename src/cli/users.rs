//! `switchboard users …`: list users, link identities, set levels and budgets.

use std::fmt::Write as _;
use std::io::Write as _;
use std::str::FromStr;

use clap::Subcommand;

use super::CliError;
use crate::config::Config;
use crate::config::{Identity, Level};
use crate::store::users::{LinkOutcome, User, UserStore, UserSummary};
use crate::users::{AccessPolicy, month_key, unconfigured_channel, unusable_identity};

#[derive(Debug, Subcommand)]
pub enum UsersCommand {
    /// List users with their level, budget, tokens used this month and identities, then the
    /// configured groups with their level, shared budget and tokens used this month
    List,
    /// Make the second identity belong to the first one's user. If the second already has a
    /// user of its own, that user is merged in: its identities and usage move over, and the
    /// first one's user keeps its level and budget
    Link {
        /// channel:sender_id, e.g. telegram:123456
        first: Identity,
        /// channel:sender_id, e.g. discord:987654
        second: Identity,
    },
    /// Set the level of the user an identity belongs to (creating the user if new)
    SetLevel {
        /// channel:sender_id
        identity: Identity,
        /// guest, user, admin or owner
        level: Level,
    },
    /// Give a user their own monthly token budget (0 = unlimited), or `default` to use their
    /// level's budget again
    SetBudget {
        /// channel:sender_id
        identity: Identity,
        /// Tokens per month, 0 for unlimited, or `default`
        tokens: BudgetArg,
    },
}

impl UsersCommand {
    /// The identities the command names.
    fn identities(&self) -> Vec<&Identity> {
        match self {
            UsersCommand::List => Vec::new(),
            UsersCommand::Link { first, second } => vec![first, second],
            UsersCommand::SetLevel { identity, .. } | UsersCommand::SetBudget { identity, .. } => vec![identity],
        }
    }
}

/// Refuses an identity no sender can have.
fn check_known(identity: &Identity) -> Result<(), CliError> {
    unusable_identity(identity).map_or(Ok(()), |problem| Err(CliError::Invalid(problem)))
}

/// What raising an `api:` identity means while the API takes anyone's word for the sender.
fn open_api_warning(config: &Config, identity: &Identity, level: Level) -> Option<String> {
    let api = &config.channels.api;
    let open = identity.channel == "api" && api.enabled && !api.has_tokens();
    (open && level >= Level::Admin).then(|| {
        format!(
            "the API has no token (channels.api.token), so every program that can reach {} can send as \
             {:?} and act with {level} rights, exec included; set a token (`switchboard api-token NAME`) first",
            api.listen, identity.sender_id
        )
    })
}

/// A budget on the command line: a token count or `default`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetArg(pub Option<u64>);

impl FromStr for BudgetArg {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text == "default" {
            return Ok(BudgetArg(None));
        }
        text.parse()
            .map(|tokens| BudgetArg(Some(tokens)))
            .map_err(|_| format!("{text:?} is not a number of tokens (or `default` for the level's budget)"))
    }
}

/// Runs one `users` command against the configured store, printing the result on stdout.
pub(super) async fn run(config: &Config, command: UsersCommand) -> Result<(), CliError> {
    let policy = AccessPolicy::from_config(&config.users, &config.permissions, &config.budgets)?;
    let store = crate::store::open(&config.store).await?;
    for identity in command.identities() {
        check_known(identity)?;
        if let Some(warning) = unconfigured_channel(config, identity) {
            eprintln!("warning: {warning}");
        }
    }
    let text = match command {
        UsersCommand::List => list(&*store, &policy).await?,
        UsersCommand::Link { first, second } => link(&*store, &policy, &first, &second).await?,
        UsersCommand::SetLevel { identity, level } => {
            if let Some(warning) = open_api_warning(config, &identity, level) {
                eprintln!("warning: {warning}");
            }
            let user = store.set_level(&identity, level).await?;
            let mut text = format!("{identity} (user {}) is now {level}.\n", user.id);
            if policy.effective_level(&identity, &user) > level {
                text.push_str(&format!("{identity} is listed in users.owners, so it still acts as owner.\n"));
            }
            text
        }
        UsersCommand::SetBudget { identity, tokens } => {
            let user = store.set_budget(&identity, tokens.0, policy.new_user_level(&identity)).await?;
            let level = policy.effective_level(&identity, &user);
            format!(
                "{identity} (user {}): monthly budget is now {}.\n",
                user.id,
                describe_budget(&policy, level, &user)
            )
        }
    };
    store.close().await;
    std::io::stdout().lock().write_all(text.as_bytes())?;
    Ok(())
}

async fn link(
    store: &dyn UserStore,
    policy: &AccessPolicy,
    first: &Identity,
    second: &Identity,
) -> Result<String, CliError> {
    if first == second {
        return Err(CliError::SelfLink(first.clone()));
    }
    let outcome = store.link(first, second, policy.new_user_level(first)).await?;
    Ok(match outcome {
        LinkOutcome::Linked { user } => format!("{second} now belongs to user {} with {first}.\n", user.id),
        LinkOutcome::AlreadyLinked { user } => {
            format!("{first} and {second} already belong to user {}; nothing changed.\n", user.id)
        }
        LinkOutcome::Merged { user, merged } => {
            let mut text = format!(
                "{second} belonged to user {}: merged it into user {} ({first}) with all its identities \
                 and usage. User {} keeps its level ({}) and budget.\n",
                merged.id, user.id, user.id, user.level
            );
            if merged.level != user.level || merged.budget != user.budget {
                let _ = writeln!(
                    text,
                    "User {} was {}{}; use set-level or set-budget to change user {}.",
                    merged.id,
                    merged.level,
                    merged.budget.map(|b| format!(" with its own budget of {b} tokens")).unwrap_or_default(),
                    user.id
                );
            }
            text
        }
    })
}

async fn list(store: &dyn UserStore, policy: &AccessPolicy) -> Result<String, CliError> {
    let month = month_key(policy.now());
    let users = store.list_users(&month).await?;
    let mut text = format!("{:>5}  {:<7}  {:<28}  {:>12}  IDENTITIES\n", "USER", "LEVEL", "BUDGET", "USED");
    for summary in &users {
        text.push_str(&format_user(policy, summary));
        text.push('\n');
    }
    if users.is_empty() {
        text.push_str("(no users yet)\n");
    }
    let _ = writeln!(text, "USED is input + output tokens in {month} (UTC).");
    text.push_str(&list_groups(store, policy, &month).await?);
    Ok(text)
}

/// The `[users.groups]` table with each group's usage this month; empty without groups.
async fn list_groups(store: &dyn UserStore, policy: &AccessPolicy, month: &str) -> Result<String, CliError> {
    let mut text = String::new();
    for group in policy.groups() {
        if text.is_empty() {
            let _ = writeln!(text, "\n{:<32}  {:<7}  {:<16}  {:>12}", "GROUP", "LEVEL", "SHARED BUDGET", "USED");
        }
        let used = store.group_usage(&group.key, month).await?;
        let budget = group.budget.map_or_else(|| "none".to_owned(), |tokens| format!("{tokens} tokens"));
        let used = used.input_tokens.saturating_add(used.output_tokens);
        let _ = writeln!(text, "{:<32}  {:<7}  {:<16}  {:>12}", group.key, group.level, budget, used);
    }
    if !text.is_empty() {
        text.push_str(
            "In a group, everyone runs with at least the group's LEVEL (and that level's budget);\n\
             a user's LEVEL above is their own, used everywhere else.\n",
        );
    }
    Ok(text)
}

fn format_user(policy: &AccessPolicy, summary: &UserSummary) -> String {
    let UserSummary { user, identities, used, .. } = summary;
    let level = policy.listed_level(summary);
    let names: Vec<String> = identities
        .iter()
        .map(|(identity, name)| if name.is_empty() { identity.to_string() } else { format!("{identity} ({name})") })
        .collect();
    format!(
        "{:>5}  {:<7}  {:<28}  {:>12}  {}",
        user.id,
        level,
        describe_budget(policy, level, user),
        used.input_tokens.saturating_add(used.output_tokens),
        names.join(", ")
    )
}

/// "N tokens" or "unlimited", and whether it is the user's own budget or their level's.
fn describe_budget(policy: &AccessPolicy, level: Level, user: &User) -> String {
    let amount = match policy.budget(level, user) {
        Some(tokens) => format!("{tokens} tokens"),
        None => "unlimited".to_owned(),
    };
    if user.budget.is_some() { format!("{amount} (own)") } else { format!("{amount} ({level} level)") }
}
