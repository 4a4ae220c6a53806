//! Compacting a session after its turn (or on `/compact`), its memory flush first in the
//! chat's memory scope, decided as for the turn.

use switchboard_channels::contract::InboundMessage;
use tracing::Instrument;

use super::TurnRunner;
use super::agents::Route;
use crate::context::compaction::{self, Head};
use crate::store::users::Billing;

/// Compacts the session if due (the turn found it may be), its memory flush in the memory
/// scope of the chat (the scope decided as for the turn). When the scope cannot be decided,
/// nothing is compacted now: the next turn tries again, and no flush ever runs in a scope it
/// was not given.
pub(super) async fn compact_session(
    turns: &TurnRunner,
    route: &Route,
    msg: &InboundMessage,
    billing: Option<&Billing>,
    head: Option<Head>,
) {
    let (engine, store, agent) = (&turns.context, turns.store.as_ref(), &route.agent);
    // Most turns end here: the scope and the flush prompt are prepared only for a compaction.
    let due = match compaction::due(engine, store, agent, &route.key, turns.settings.history_limit).await {
        Ok(Some(due)) => due,
        Ok(None) => return,
        Err(err) => {
            tracing::warn!(%err, "cannot read the history to see whether to compact; not compacting now");
            return;
        }
    };
    // Inside the run's span (the caller's): the outcome's line carries the run's fields too.
    async {
        match compact_with_flush(turns, route, msg, due, billing, head).await {
            Ok(compaction::Outcome::Compacted { summarized, through_id }) => {
                tracing::info!(summarized, through_id, "compacted the session's history");
            }
            Ok(compaction::Outcome::Busy) => tracing::info!("a compaction of this session is already running"),
            Ok(compaction::Outcome::NotNeeded) => {}
            Err(err) => tracing::warn!(%err, "compaction failed; history and summary left as they were"),
        }
    }
    .instrument(tracing::info_span!("compaction"))
    .await;
}

/// Why a compaction did not run or failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum CompactError {
    #[error("cannot decide the chat's memory scope: {0}")]
    Scope(String),
    #[error(transparent)]
    Compaction(#[from] compaction::CompactionError),
}

/// Compacts `due` with the memory flush in the chat's memory scope (decided as for a turn). The
/// flush's requests start with `head`, the turn's, when the compaction follows one; else with
/// the minimal prompt for the file tools.
pub(super) async fn compact_with_flush(
    turns: &TurnRunner,
    route: &Route,
    msg: &InboundMessage,
    due: compaction::Due,
    billing: Option<&Billing>,
    head: Option<Head>,
) -> Result<compaction::Outcome, CompactError> {
    let (engine, store, agent) = (&turns.context, turns.store.as_ref(), &route.agent);
    let memory = super::memory_scope::scope(&turns.people(), agent, msg, None)
        .await
        .map_err(|err| CompactError::Scope(err.to_string()))?;
    let head = match head {
        Some(head) => head,
        None => {
            let run = super::prompt::PromptFor { msg, session_key: &route.key, memory: &memory };
            let (tools, mode) = (compaction::minimal_tools(agent), crate::prompt::PromptMode::Minimal);
            let prompt = super::prompt::system_prompt(turns, agent, &run, &tools, &Default::default(), mode).await;
            Head::minimal(prompt, tools)
        }
    };
    let deps = compaction::Deps {
        engine,
        sessions: store,
        runs: store,
        agent,
        session_key: &route.key,
        flush_head: &head,
        memory: &memory,
        billing,
    };
    Ok(compaction::compact_due(deps, msg, due, &turns.abandon).await?)
}
