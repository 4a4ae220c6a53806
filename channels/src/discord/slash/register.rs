//! Registering the command table with Discord, once the gateway's READY named the
//! application: per place, the commands Discord has are listed first and the table is put
//! (bulk overwrite) only when they differ, so a restart costs one GET per place and no PUT.

use serde_json::Value;
use serenity::all::{ApplicationId, GuildId};
use tokio_util::sync::CancellationToken;

use super::table::{Scope, same_table, table};
use crate::discord::SlashScope;
use crate::discord::rest::Rest;
use crate::discord::retry::{RetryPolicy, SendError, with_retry};

/// Where a table goes: the global one, or a server's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Global,
    Guild(GuildId),
}

/// Every place's table for `scope`; `guilds` are the configured servers. Global commands shown
/// in a server too would appear twice next to its own, so the one side is emptied when the
/// other is used (and both under `off`).
fn plan(scope: SlashScope, guilds: &[u64]) -> Vec<(Place, Vec<Value>)> {
    let (global, in_guilds) = match scope {
        SlashScope::Global => (table(Scope::Global { in_guilds: true }), Vec::new()),
        SlashScope::Guilds => (table(Scope::Global { in_guilds: false }), table(Scope::Guild)),
        SlashScope::Off => (Vec::new(), Vec::new()),
    };
    let servers = guilds.iter().map(|id| (Place::Guild(GuildId::new(*id)), in_guilds.clone()));
    std::iter::once((Place::Global, global)).chain(servers).collect()
}

/// Brings every place's commands in line with `scope`; false if any place failed (logged).
pub(crate) async fn register(
    rest: &Rest,
    application: ApplicationId,
    scope: SlashScope,
    guilds: &[u64],
    shutdown: &CancellationToken,
) -> bool {
    let mut all_done = true;
    for (place, wanted) in plan(scope, guilds) {
        let guild_id = match place {
            Place::Guild(id) => Some(id),
            Place::Global => None,
        };
        let at = guild_id.map_or_else(|| "global".to_owned(), |id| format!("guild {id}"));
        match bring_in_line(rest, application, guild_id, &wanted, shutdown).await {
            Ok(false) => tracing::debug!(at, "the slash commands are registered already"),
            Ok(true) => tracing::info!(at, commands = wanted.len(), "slash commands registered"),
            Err(err) => {
                all_done = false;
                let hint = match guild_id {
                    Some(_) => "is the bot in that server, invited with the applications.commands scope?",
                    None => "the commands Discord shows may be out of date",
                };
                tracing::warn!(at, %err, hint, "cannot register the slash commands");
            }
        }
    }
    all_done
}

/// Lists the commands at one place and overwrites them with `wanted` if they differ; whether
/// it did.
async fn bring_in_line(
    rest: &Rest,
    application: ApplicationId,
    guild_id: Option<GuildId>,
    wanted: &[Value],
    shutdown: &CancellationToken,
) -> Result<bool, SendError> {
    let policy = RetryPolicy::DEFAULT;
    let list = || rest.commands(application, guild_id);
    let current = with_retry(&policy, "list the slash commands", shutdown, list).await?;
    if same_table(wanted, &current) {
        return Ok(false);
    }
    // The same body each time: a repeated overwrite changes nothing.
    let put = || rest.overwrite_commands(application, guild_id, wanted);
    with_retry(&policy, "register the slash commands", shutdown, put).await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scope_empties_the_other_side() {
        let names = |plan: &[(Place, Vec<Value>)]| -> Vec<(Place, usize)> {
            plan.iter().map(|(place, table)| (*place, table.len())).collect()
        };
        let all = table(Scope::Global { in_guilds: true }).len();
        let everyones = table(Scope::Guild).len();
        let server = Place::Guild(GuildId::new(100));
        assert_eq!(names(&plan(SlashScope::Global, &[100])), [(Place::Global, all), (server, 0)]);
        assert_eq!(names(&plan(SlashScope::Guilds, &[100])), [(Place::Global, all), (server, everyones)]);
        assert_eq!(names(&plan(SlashScope::Off, &[100])), [(Place::Global, 0), (server, 0)]);
        assert_eq!(names(&plan(SlashScope::Global, &[])), [(Place::Global, all)]);
    }
}
