//! Reporting a sub-agent's end to its origin session, and the reaper that reports the ones
//! whose worker died.
//!
//! The announcement's inbound id is `subagent:<id>`, so publishing it twice (a retry, two
//! reapers, a re-announce after a crash between publish and mark) still makes one run and
//! one reply: the bus and the store's `runs` table deduplicate by that id.

use std::sync::Arc;

use serde_json::json;
use switchboard_channels::BusExt;
use switchboard_channels::contract::{InboundMessage, Origin};
use tokio_util::sync::CancellationToken;

use super::{LOST_ERROR, ORIGIN_KIND, SubagentManager};
use crate::store::StoreError;
use crate::store::subagents::{NewSubagent, SubagentEnd, SubagentRecord, SubagentStatus};
use crate::tools::truncate_middle;
use crate::worker::agents::{SYSTEM_AGENT, SYSTEM_SESSION};

/// Unannounced results re-announced per reaper tick.
const REANNOUNCE_BATCH: usize = 50;

/// What one reaper tick did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Sub-agents whose lease ran out and that this tick ended as lost (and announced).
    pub lost: usize,
    /// Ended sub-agents whose announcement was published again.
    pub reannounced: usize,
}

/// The system message that reports `record`'s end to its origin session.
pub fn announcement(record: &SubagentRecord, max_result_chars: usize) -> InboundMessage {
    let origin = Origin { kind: ORIGIN_KIND.into(), id: record.id.clone() };
    let text = announcement_text(record, max_result_chars);
    let mut msg = InboundMessage::system(format!("subagent:{}", record.id), record.chat.clone(), origin, &text);
    // Addressed to the agent, also in a group chat (the silent-reply rule asks otherwise).
    msg.mentioned = true;
    msg.metadata.insert(SYSTEM_AGENT.into(), json!(record.parent_agent));
    if let Some(session) = &record.session {
        msg.metadata.insert(SYSTEM_SESSION.into(), json!(session));
    }
    msg
}

fn announcement_text(record: &SubagentRecord, max_result_chars: usize) -> String {
    let name =
        if record.label.is_empty() { "A sub-agent".to_owned() } else { format!("The sub-agent \"{}\"", record.label) };
    let outcome = match record.status {
        SubagentStatus::Completed => "finished its task".to_owned(),
        SubagentStatus::TimedOut => "timed out".to_owned(),
        SubagentStatus::Lost => "failed".to_owned(),
        other => other.as_str().replace('_', " "),
    };
    let mut text = format!("[sub-agent {}] {name} you started {outcome}.\n\nTask: {}\n", record.id, record.task);
    if let Some(error) = &record.error {
        text.push_str(&format!("\nError: {error}\n"));
    }
    match record.result.as_deref().filter(|result| !result.trim().is_empty()) {
        Some(result) => text.push_str(&format!("\nResult:\n{}\n", truncate_middle(result, max_result_chars))),
        None => text.push_str("\nIt produced no result.\n"),
    }
    text.push_str(if record.status == SubagentStatus::Completed {
        "\nPass this result on to the user in your own words."
    } else {
        "\nTell the user in your own words that this task did not get done, and why."
    });
    text
}

impl SubagentManager {
    /// Announces a sub-agent this process just ended.
    pub(super) async fn announce_end(&self, new: &NewSubagent, end: &SubagentEnd) {
        let record = SubagentRecord {
            id: new.id.clone(),
            parent_session: new.parent_session.clone(),
            parent_agent: new.parent_agent.clone(),
            chat: new.chat.clone(),
            session: new.session.clone(),
            label: new.label.clone(),
            task: new.task.clone(),
            status: end.status,
            result: end.result.clone(),
            error: end.error.clone(),
            worker: new.worker.clone(),
            lease_until: self.now(),
            cancel_requested: false,
            created_at: self.now(),
            started_at: None,
            finished_at: Some(self.now()),
            announced: false,
        };
        self.announce(&record).await;
    }

    /// Publishes the announcement, then marks it announced. On failure it stays unannounced
    /// and a later reaper tick publishes it again.
    async fn announce(&self, record: &SubagentRecord) -> bool {
        let msg = announcement(record, self.settings.max_result_chars);
        if let Err(err) = self.bus.publish_inbound(&msg).await {
            tracing::warn!(subagent = %record.id, %err, "cannot announce the sub-agent's end; will retry");
            return false;
        }
        if let Err(err) = self.store.mark_subagent_announced(&record.id).await {
            tracing::warn!(subagent = %record.id, %err, "announced, but cannot record it; it may be announced again");
        }
        tracing::info!(subagent = %record.id, status = record.status.as_str(), "sub-agent's end announced");
        true
    }

    /// One reaper pass, at the manager's clock's now: ends every live sub-agent whose lease
    /// ran out (its worker stopped) as lost and announces it as failed; then announces again
    /// ended sub-agents whose announcement never went out (ended over a lease ago, so the
    /// worker that ended them had its chance first).
    pub async fn tick(&self) -> Result<TickReport, StoreError> {
        let now = self.now();
        let mut report = TickReport::default();
        for record in self.store.expire_subagent_leases(now, LOST_ERROR).await? {
            if record.status == SubagentStatus::Lost {
                tracing::warn!(subagent = %record.id, worker = %record.worker, "sub-agent lost with its worker");
                self.announce(&record).await;
                report.lost += 1;
            }
        }
        let lease = chrono::Duration::from_std(self.settings.lease).unwrap_or(chrono::Duration::MAX);
        let ended_before = now.checked_sub_signed(lease).unwrap_or(now);
        for record in self.store.unannounced_subagents(ended_before, REANNOUNCE_BATCH).await? {
            if self.announce(&record).await {
                report.reannounced += 1;
            }
        }
        Ok(report)
    }

    /// Runs [`SubagentManager::tick`] every third of the lease until `shutdown`.
    pub fn start_reaper(self: &Arc<Self>, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
        let manager = Arc::clone(self);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(manager.settings.renew_every());
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = every.tick() => {}
                }
                if let Err(err) = manager.tick().await {
                    tracing::warn!(%err, "sub-agent reaper pass failed; trying again later");
                }
            }
        })
    }
}
