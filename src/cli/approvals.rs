//! `switchboard approvals …`: the tool calls waiting for an approver, decided from a shell, and
//! every decision taken.

use std::io::Write as _;

use clap::Subcommand;

use super::CliError;
use crate::config::Config;
use crate::store::approvals::{Approval, ApprovalStatus, ApprovalStore, Verdict};
use crate::store::pairing::normalize_code;

/// Rows `list` shows at most.
const LIST_LIMIT: usize = 50;

#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// The calls waiting for a decision; with --all, the newest decisions too
    List {
        #[arg(long)]
        all: bool,
    },
    /// Let a waiting call run
    Allow {
        /// The code in the approval request
        code: String,
        /// Also let every later call of that tool in that chat run without asking
        #[arg(long)]
        chat: bool,
    },
    /// Refuse a waiting call; the model is told the owner declined
    Deny {
        /// The code in the approval request
        code: String,
    },
}

/// Who decides from a shell, as the decision records it.
const CLI_DECIDER: &str = "cli";

pub(super) async fn run(config: &Config, command: ApprovalsCommand) -> Result<(), CliError> {
    let store = crate::store::open(&config.store).await?;
    let text = match command {
        ApprovalsCommand::List { all } => list(&store.list_approvals(!all, LIST_LIMIT).await?),
        ApprovalsCommand::Allow { code, chat } => {
            let verdict = if chat { Verdict::AllowChat } else { Verdict::AllowOnce };
            decide(&*store, &code, verdict).await?
        }
        ApprovalsCommand::Deny { code } => decide(&*store, &code, Verdict::Deny).await?,
    };
    store.close().await;
    std::io::stdout().lock().write_all(text.as_bytes())?;
    Ok(())
}

async fn decide(store: &dyn ApprovalStore, code: &str, verdict: Verdict) -> Result<String, CliError> {
    let code = normalize_code(code);
    match store.decide_approval(&code, verdict, CLI_DECIDER).await? {
        Ok(approval) => Ok(format!(
            "{code}: {} {} in {}:{}{}.\n",
            verdict.status().as_str(),
            approval.request.tool,
            approval.request.channel,
            approval.request.chat_id,
            if verdict == Verdict::AllowChat { " (and later calls there)" } else { "" }
        )),
        Err(problem) => Err(CliError::Invalid(format!("approval {code} {problem}"))),
    }
}

fn list(approvals: &[Approval]) -> String {
    if approvals.is_empty() {
        return "No approvals.\n".into();
    }
    let now = chrono::Utc::now();
    let mut text = String::new();
    for approval in approvals {
        let request = &approval.request;
        let status = match approval.status {
            ApprovalStatus::Pending if approval.expires_at <= now => "expired",
            status => status.as_str(),
        };
        let decided = match approval.decided_by.as_str() {
            "" => String::new(),
            by => format!(" by {by}"),
        };
        text.push_str(&format!(
            "{}  {:<9} {} asked by {} in {}:{} at {}{decided}\n    {}\n",
            approval.code,
            status,
            request.tool,
            request.requested_by,
            request.channel,
            request.chat_id,
            approval.requested_at.format("%Y-%m-%d %H:%M:%S UTC"),
            request.arguments,
        ));
    }
    text
}
