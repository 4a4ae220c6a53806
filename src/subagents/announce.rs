//! Reporting a sub-agent's end to its origin session, and the reaper that reports the ones
//! whose worker died.
//!
//! The announcement's inbound id is `subagent:<id>`, so publishing it twice (a retry, two
//! reapers, a re-announce after a crash between publish and mark) still makes one run and
//! one reply: the bus and the store's `runs` table deduplicate by that id.

use std::sync::Arc;

use switchboard_channels::BusExt;
use switchboard_channels::contract::{InboundMessage, Origin, reply};
use tokio_util::sync::CancellationToken;

use super::{LOST_ERROR, ORIGIN_KIND, SubagentManager};
use crate::store::StoreError;
use crate::store::subagents::{SubagentRecord, SubagentStatus};
use crate::tools::truncate_middle;

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
    msg.set_system_agent(&record.parent_agent);
    if let Some(person) = &record.on_behalf_of {
        msg.set_on_behalf_of(person);
    }
    if let Some(session) = &record.session {
        msg.set_system_session(session);
    }
    // `cost_usd` is `null` when unknown, as on replies, so it is never taken for zero.
    reply::set_cost(&mut msg.metadata, record.usage, record.cost_usd);
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
    /// Announces a sub-agent this process just ended, from its stored record. If the record
    /// cannot be read now, a later reaper pass announces it.
    pub(super) async fn announce_ended(&self, id: &str) {
        match self.store.subagent(id).await {
            Ok(Some(record)) => {
                self.announce(&record).await;
            }
            Ok(None) => tracing::error!(subagent = %id, "the ended sub-agent's record is missing"),
            Err(err) => tracing::warn!(subagent = %id, %err, "cannot read the ended sub-agent; will announce later"),
        }
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

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use switchboard_channels::contract::{ChatAddress, InboundKind};

    use super::*;

    fn record(status: SubagentStatus, result: Option<&str>, error: Option<&str>) -> SubagentRecord {
        SubagentRecord {
            id: "01ab".into(),
            parent_session: "support/cron:daily".into(),
            parent_agent: "support".into(),
            chat: ChatAddress {
                channel: "discord".into(),
                chat_id: "55".into(),
                thread_id: Some("9".into()),
                is_group: true,
            },
            session: Some("cron:daily".into()),
            label: "prices".into(),
            on_behalf_of: Some("discord:77".into()),
            task: "Compare the prices.".into(),
            status,
            result: result.map(str::to_owned),
            error: error.map(str::to_owned),
            worker: "w".into(),
            lease_until: Utc::now(),
            cancel_requested: false,
            created_at: Utc::now(),
            started_at: None,
            finished_at: Some(Utc::now()),
            announced: false,
            usage: Default::default(),
            cost_usd: None,
        }
    }

    #[test]
    fn the_announcement_goes_to_the_origin_chat_agent_and_isolated_session() {
        let msg = announcement(&record(SubagentStatus::Completed, Some("A is cheaper."), None), 100);
        assert_eq!(msg.id, "subagent:01ab");
        assert_eq!(msg.kind, InboundKind::System);
        assert_eq!(msg.origin, Some(Origin { kind: "subagent".into(), id: "01ab".into() }));
        assert_eq!(msg.session_key(), "discord:55:thread:9");
        assert!(msg.is_group && msg.mentioned);
        assert_eq!(msg.system_agent(), Some("support"));
        assert_eq!(msg.system_session(), Some("cron:daily"));
        // The main agent's turn on the result acts for whoever started the sub-agent.
        assert_eq!(msg.on_behalf_of(), Some("discord:77"));
        assert!(msg.content.contains("The sub-agent \"prices\" you started finished its task."), "{}", msg.content);
        assert!(msg.content.contains("Task: Compare the prices.") && msg.content.contains("Result:\nA is cheaper."));
        assert!(msg.content.contains("in your own words"));
    }

    #[test]
    fn failures_say_why_and_long_results_are_cut() {
        let lost = announcement(&record(SubagentStatus::Lost, None, Some(LOST_ERROR)), 100);
        assert!(lost.content.contains("you started failed."), "{}", lost.content);
        assert!(lost.content.contains(LOST_ERROR) && lost.content.contains("did not get done"));
        let long = "x".repeat(10_000);
        let cut = announcement(&record(SubagentStatus::Completed, Some(&long), None), 500);
        assert!(cut.content.len() < 1_500, "{}", cut.content.len());
    }
}
