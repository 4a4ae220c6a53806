//! The agents of a worker: the implicit `main` (`[agent]`) and every `[agents.<name>]`, each
//! with its model chain and its tools, and the bindings that route chats to them.

use std::sync::Arc;

use switchboard_channels::Bus;

use super::{Assembly, AssemblyError, settings};
use crate::agent::Agent;
use crate::config::MAIN_AGENT;
use crate::provider::failover::Fitting;
use crate::scheduler::CronTool;
use crate::store::Database;
use crate::store::cron::CronStore;
use crate::store::memory_index::MemoryIndex;
use crate::subagents::SubagentManager;
use crate::subagents::tool::SpawnTool;
use crate::tools::approval::ApprovalGate;
use crate::tools::mcp::{McpCall, McpToolSearch};
use crate::tools::memory::{EmbeddingSettings, MemorySearcher, MemorySettings};
use crate::tools::skills::{SkillGet, SkillSearch};
use crate::tools::web::register_web_tools;
use crate::tools::{MessageTool, ToolRegistry, register_local_tools};
use crate::worker::agents::{Agents, Binding};

impl Assembly {
    /// Every agent, with the bindings; `subagents` gives each a `spawn` tool, `fitting` (the
    /// worker's context engine) refits the requests of their chains.
    pub(super) fn agents(
        &self,
        bus: &Arc<dyn Bus>,
        store: &Arc<dyn Database>,
        subagents: Option<&Arc<SubagentManager>>,
        fitting: Arc<dyn Fitting>,
    ) -> Result<Agents, AssemblyError> {
        let config = &self.config;
        let mut agents = vec![Arc::new(self.agent(bus, store, subagents, &fitting, MAIN_AGENT)?)];
        for name in config.agents.keys() {
            agents.push(Arc::new(self.agent(bus, store, subagents, &fitting, name)?));
        }
        let bindings = config.bindings.iter().filter_map(Binding::from_config).collect();
        // Validated at load; a hand-built config that names an unknown agent fails here.
        Agents::new(agents, &config.agent.default, bindings)
            .map_err(|err| AssemblyError::Config(settings::invalid("bindings".into(), err.to_string())))
    }

    /// One agent: `[agent]`, overridden by `[agents.<name>]` when `name` is not `main`.
    fn agent(
        &self,
        bus: &Arc<dyn Bus>,
        store: &Arc<dyn Database>,
        subagents: Option<&Arc<SubagentManager>>,
        fitting: &Arc<dyn Fitting>,
        name: &str,
    ) -> Result<Agent, AssemblyError> {
        let chain = self.config.agent_model_chain(name)?;
        let provider = super::providers::chain(&chain, &self.provider_limits, Some(Arc::clone(fitting)))?;
        tracing::info!(agent = name, chain = %crate::provider::Provider::name(&provider), "model chain");
        let searcher = self.memory_searcher(store)?;
        let tools = self.tools(name, bus, store, subagents, &searcher)?;
        let agent = Agent::new(Arc::new(provider), tools, settings::agent(&self.config, name, &chain));
        Ok(agent.with_memory(searcher))
    }

    /// The memory search of an agent: `memory_search` and recall (`[memory] recall`), ranked
    /// by meaning too when `[memory.embeddings]` names a provider.
    fn memory_searcher(&self, store: &Arc<dyn Database>) -> Result<Arc<MemorySearcher>, AssemblyError> {
        let index = Arc::clone(store) as Arc<dyn MemoryIndex>;
        let searcher = MemorySearcher::new(index, MemorySettings::from(&self.config.tools.memory));
        let embeddings = &self.config.memory.embeddings;
        if !embeddings.is_enabled() {
            return Ok(Arc::new(searcher));
        }
        let embedder = super::providers::embedder(&self.config, embeddings)?;
        tracing::info!(provider = %embeddings.provider, model = %embeddings.model, "memory search ranks by meaning too");
        Ok(Arc::new(searcher.with_embeddings(embedder, EmbeddingSettings::from(embeddings))))
    }

    /// The tools agent `name` may offer: the built-in ones, those the config enables, the
    /// extra ones of the overrides, narrowed to `[agents.<name>] tools` when that is set.
    fn tools(
        &self,
        name: &str,
        bus: &Arc<dyn Bus>,
        store: &Arc<dyn Database>,
        subagents: Option<&Arc<SubagentManager>>,
        searcher: &Arc<MemorySearcher>,
    ) -> Result<ToolRegistry, AssemblyError> {
        let config = &self.config;
        let mut tools = ToolRegistry::with_builtins(settings::tool_limits(config));
        if self.overrides.message_tool {
            tools.register(Arc::new(MessageTool::new(Arc::clone(bus))));
        }
        if config.tools.web.enabled {
            register_web_tools(&mut tools, &config.tools.web);
        }
        register_local_tools(&mut tools, &config.tools, config.data_dir())?;
        crate::tools::memory::register(&mut tools, searcher, &config.tools.memory);
        if config.cron.enabled {
            let store = Arc::clone(store) as Arc<dyn CronStore>;
            tools.register(Arc::new(CronTool::new(store, self.overrides.clock.clone(), self.cron_settings())));
        }
        if let Some(manager) = subagents {
            tools.register(Arc::new(SpawnTool::new(Arc::clone(manager))));
        }
        if config.skills.enabled {
            let skills = settings::agent_skills(config, name);
            tools.register(Arc::new(SkillGet::new(skills.clone())));
            tools.register(Arc::new(SkillSearch::new(skills)));
        }
        if !self.mcp.is_empty() {
            tools.add_source(Arc::clone(&self.mcp) as _);
            tools.register(Arc::new(McpToolSearch::new(Arc::clone(&self.mcp))));
            tools.register(Arc::new(McpCall::new(Arc::clone(&self.mcp))));
        }
        for tool in &self.overrides.tools {
            tools.register(Arc::clone(tool));
        }
        if let Some(allowed) = config.agents.get(name).map(|o| &o.tools).filter(|tools| !tools.is_empty()) {
            tools.retain(allowed);
        }
        let approvals = settings::approvals(config, name);
        if !approvals.tools.is_empty() {
            let gate = ApprovalGate::new(Arc::clone(store) as _, Arc::clone(store) as _, Arc::clone(bus), approvals);
            tools.set_approvals(Arc::new(gate));
        }
        Ok(tools)
    }
}
