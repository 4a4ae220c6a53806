//! Set-up shared by the root crate's micro-benchmarks: an agent with the tools a default
//! config offers (those that need no store or bus), a workspace of realistic bootstrap files,
//! and a long session with tool calls.

// Each bench uses part of this module.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;
use switchboard::agent::{Agent, AgentSettings};
use switchboard::config::{ToolsConfig, WebToolsConfig};
use switchboard::provider::{ChatMessage, ChatRequest, ChatResponse, Provider, ProviderError, TextSink, ToolCall};
use switchboard::tools::web::register_web_tools;
use switchboard::tools::{ToolLimits, ToolRegistry, register_local_tools};

/// A provider that is never called: the benches stop before the model.
struct Unused;

#[async_trait]
impl Provider for Unused {
    fn name(&self) -> &str {
        "unused"
    }

    async fn complete(&self, _: &ChatRequest<'_>, _: Option<TextSink<'_>>) -> Result<ChatResponse, ProviderError> {
        Err(ProviderError::Network("the benches make no model calls".into()))
    }
}

/// The main agent working in `workspace`, with the built-in, file, `exec` and web tools of the
/// default config (8 tools; the memory, cron and spawn tools need a store or a bus).
pub fn agent(workspace: &Path) -> Agent {
    let mut tools = ToolRegistry::with_builtins(ToolLimits::default());
    register_local_tools(&mut tools, &ToolsConfig::default(), workspace).expect("the default tools config is valid");
    register_web_tools(&mut tools, &WebToolsConfig::default());
    let settings = AgentSettings {
        name: "main".into(),
        system_prompt: "Answer in the language of the question. Prefer short answers.".into(),
        model: "gpt-4o-mini".into(),
        max_iterations: 20,
        loop_detection: 3,
        max_tokens: None,
        temperature: None,
        stream: true,
        tool_choice: Default::default(),
        prices: Default::default(),
        workspace: workspace.to_path_buf(),
        skills: Default::default(),
        protected: Default::default(),
        heartbeat_ack_max_chars: 300,
        models: Vec::new(),
        context_windows: Default::default(),
    };
    Agent::new(Arc::new(Unused), tools, settings)
}

/// The bootstrap files of a workspace in use: the templates' comments still in them, the owner's
/// text below, and a `MEMORY.md` grown past the 8,000 characters the prompt keeps of it.
pub const WORKSPACE_FILES: [(&str, &str); 7] = [
    ("AGENTS.md", AGENTS),
    ("SOUL.md", SOUL),
    ("USER.md", USER),
    ("IDENTITY.md", IDENTITY),
    ("TOOLS.md", TOOLS),
    ("HEARTBEAT.md", HEARTBEAT),
    ("MEMORY.md", ""),
];

const AGENTS: &str = "# Operating instructions\n\n\
<!-- How the agent should work: what to always do, what never to do. -->\n\n\
- Before changing a file, read it; after changing it, say what changed in one line.\n\
- Run commands in the workspace only. Ask before installing anything or touching the network config.\n\
- When a command fails, read the error, try one fix, and report if it fails again.\n\
- Keep answers short: the owner reads them on a phone. Use lists for steps and code blocks for commands.\n\
- When asked about the news or prices, search the web and give the sources as links.\n\
- Dates: the owner writes 26/11 for the 26th of November.\n\
- Never send messages to other chats unless asked to in this chat.\n\
- For reminders, create a cron job and confirm its time in the owner's time zone.\n\n\
## Projects\n\n\
- `~/src/garden`: the irrigation controller (Rust, runs on a Raspberry Pi; deploy with `just deploy`).\n\
- `~/src/books`: the reading list (a Markdown file per year).\n\
- `~/notes`: plain-text notes, one file per topic; append, never rewrite.\n";

const SOUL: &str = "# Soul\n\n\
<!-- Persona: character, tone, style. -->\n\n\
Friendly and direct, a little dry. No flattery, no filler (\"Great question!\"), no emojis unless \
the owner uses them first. Admit uncertainty plainly. Prefer metric units and 24-hour times. When \
the owner is frustrated, be calm and concrete: the next step, not a pep talk.\n";

const USER: &str = "# About the owner\n\n\
<!-- Facts about you that help the agent. -->\n\n\
Ann, software engineer, lives in Lisbon (Europe/Lisbon). Speaks English, Portuguese and some German. \
Works 9:00–17:30 on weekdays; do not schedule anything before 8:00. Vegetarian. Has a cat, Miso. \
Runs on Tuesdays and Saturdays; likes weather forecasts with wind and rain probability.\n";

const IDENTITY: &str = "# Identity\n\n\
<!-- The agent's name and how it presents itself. -->\n\n\
Your name is Pip. You are Ann's assistant; in groups, introduce yourself as \"Pip, Ann's bot\".\n";

const TOOLS: &str = "# Tools\n\n\
<!-- Notes on tools and local conventions. -->\n\n\
- `exec`: bash is available; `just`, `cargo`, `git`, `jq` and `rg` are installed. Long builds: run \
them with `nice`.\n\
- `web_fetch`: prefer the site's API or RSS when there is one.\n\
- Files under `~/src` are git repositories: commit with a one-line message after a change the owner \
approved.\n";

const HEARTBEAT: &str = "# Heartbeat\n\n\
<!-- Checklist of periodic tasks. -->\n\n\
- Mornings (7:30–8:30): the day's weather in Lisbon, and whether to water the garden (skip if rain > 60 %).\n\
- Fridays after 17:00: remind Ann to back up the laptop.\n";

/// `MEMORY.md`: a year of appended facts, about 12,000 characters.
pub fn memory_file() -> String {
    let mut text = String::from("# Memory\n\n<!-- Lasting facts the agent should remember. -->\n\n");
    for day in 0..120 {
        text.push_str(&format!(
            "- 2026-{:02}-{:02}: Ann prefers the {} route on run days; the garden valve {} was serviced.\n",
            day / 28 + 1,
            day % 28 + 1,
            ["river", "hill", "park"][day % 3],
            day % 4 + 1
        ));
    }
    text
}

/// Writes the workspace files into `dir`.
pub fn write_workspace(dir: &Path) {
    for (name, text) in WORKSPACE_FILES {
        let text = if name == "MEMORY.md" { memory_file() } else { text.to_owned() };
        std::fs::write(dir.join(name), text).expect("the temporary workspace is writable");
    }
}

/// A long session of at least `messages` stored messages (whole turns): turns of a user question, often one or two
/// tool calls with results of a few thousand characters (files read, pages fetched, command
/// output), and the answer.
pub fn session(messages: usize) -> Vec<ChatMessage> {
    let mut history = Vec::with_capacity(messages + 4);
    let mut turn = 0;
    while history.len() < messages {
        turn += 1;
        history.push(ChatMessage::user(format!(
            "Turn {turn}: can you check why the nightly job failed again and fix the config if it is the \
             same problem as last week? The log is in /var/log/nightly.log."
        )));
        let calls: Vec<ToolCall> = (0..turn % 3)
            .map(|n| ToolCall {
                id: format!("call_{turn}_{n}"),
                name: ["read_file", "exec", "web_fetch"][(turn + n) % 3].into(),
                arguments: json!({"path": format!("logs/nightly-{turn}.log"), "command": "tail -n 200 /var/log/nightly.log", "max_chars": 20000}),
            })
            .collect();
        if !calls.is_empty() {
            history.push(ChatMessage::assistant("Let me look at the log first.", calls.clone()));
            for (n, call) in calls.iter().enumerate() {
                let line = format!(
                    "2026-11-{:02}T03:00:{n:02}Z job[{turn}] step {n}: exit status 1: permission denied\n",
                    turn % 28 + 1
                );
                history.push(ChatMessage::tool_result(call, line.repeat(30 + 20 * n)));
            }
        }
        history.push(ChatMessage::assistant(
            format!(
                "Found it (turn {turn}): the job runs as `backup`, which cannot write to `/srv/archive`. I \
                 changed the unit to `User=archive` and restarted the timer; the next run is at 03:00. \
                 If it fails again the log will say so, and I will tell you in the morning.\n\n{}",
                "Details: the directory's group changed during the upgrade. ".repeat(6)
            ),
            Vec::new(),
        ));
    }
    history
}
