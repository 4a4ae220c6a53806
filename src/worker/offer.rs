//! Which of the sender's tools a turn offers, by what there is right now: the skill tools by
//! the number of skills in the workspace (see docs/skills.md), and MCP tools one by one or,
//! past `[mcp] inline_max`, behind `mcp_tool_search` and `mcp_call` (see docs/mcp.md).

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::agent::Agent;
use crate::config::MCP_SEPARATOR;
use crate::provider::ToolChoice;
use crate::tools::ToolFilter;
use crate::tools::mcp::{MCP_CALL, MCP_TOOL_SEARCH};
use crate::tools::skills::{SKILL_GET, SKILL_SEARCH};
use crate::workspace::skills::Catalog;

/// The tools a turn offers, and the skills its prompt lists.
pub(super) struct Offer {
    pub tools: ToolFilter,
    pub skills: Arc<Catalog>,
}

/// Narrows `allowed` (what the sender may use) to what suits the agent's skills and MCP tools
/// now. The skills are read only when the sender may load one.
pub(super) async fn offer(agent: &Agent, allowed: ToolFilter, mcp_inline_max: usize) -> Offer {
    // `tool_choice = "none"`: no call can ask for a tool, so no schema is sent (nor counted
    // against the window, nor listed in the prompt).
    if agent.settings().tool_choice == ToolChoice::None {
        return Offer { tools: ToolFilter::Only(BTreeSet::new()), skills: Arc::default() };
    }
    let names = agent.tool_names();
    let mut offered: BTreeSet<String> = names.iter().filter(|name| allowed.allows(name)).cloned().collect();
    let skills = match offered.contains(SKILL_GET) {
        true => crate::workspace::skills::load(&agent.settings().workspace, &agent.settings().skills.allow).await,
        false => Arc::default(),
    };
    match skills.len() {
        0 => {
            offered.remove(SKILL_GET);
            offered.remove(SKILL_SEARCH);
        }
        count if count <= agent.settings().skills.inline_max => {
            offered.remove(SKILL_SEARCH);
        }
        _ => {}
    }
    let mcp: Vec<String> = offered.iter().filter(|name| name.contains(MCP_SEPARATOR)).cloned().collect();
    if mcp.len() <= mcp_inline_max {
        offered.remove(MCP_TOOL_SEARCH);
        offered.remove(MCP_CALL);
    } else if offered.contains(MCP_CALL) {
        // Too many schemas to send on every call: the tools stay callable, through mcp_call.
        for name in mcp {
            offered.remove(&name);
            offered.insert(ToolFilter::via_call_entry(&name));
        }
    }
    Offer { tools: ToolFilter::Only(offered), skills }
}
