use std::path::Path;
use std::sync::Arc;
use switchboard_channels::contract::SessionKey;

use serde_json::json;

use super::*;
use crate::workspace::FileText;
use crate::workspace::memory::MemoryScope;
use crate::workspace::skills::Skill;

fn text(s: &str) -> FileText {
    FileText::Text { text: s.into(), cut_chars: 0 }
}

fn all_files() -> WorkspaceFiles {
    WorkspaceFiles {
        agents: text("AGENTS-BODY"),
        soul: text("SOUL-BODY"),
        user: text("USER-BODY"),
        identity: text("IDENTITY-BODY"),
        tools: text("TOOLS-BODY"),
        heartbeat: text("HEARTBEAT-BODY"),
        memory: text("MEMORY-BODY"),
        onboarding: text("BOOTSTRAP-BODY"),
    }
}

fn tool(name: &str, description: &str) -> Arc<ToolSpec> {
    Arc::new(ToolSpec { name: name.into(), description: description.into(), parameters: json!({}) })
}

fn tools() -> Vec<Arc<ToolSpec>> {
    vec![tool("read_file", "Reads a file.\nMore detail."), tool("skill_get", "Loads a skill.")]
}

fn skill(name: &str, description: &str) -> Skill {
    Skill { name: name.into(), description: description.into(), folder: name.into(), body: "Steps.".into() }
}

/// One skill, as a workspace with a `skills/` folder gives.
fn one_skill() -> &'static Catalog {
    static SKILLS: std::sync::OnceLock<Catalog> = std::sync::OnceLock::new();
    SKILLS.get_or_init(|| Catalog::of(vec![skill("meeting-minutes", "Minutes from a transcript")]))
}

fn input<'a>(mode: PromptMode, files: &'a WorkspaceFiles, tools: &'a [Arc<ToolSpec>]) -> PromptInput<'a> {
    PromptInput {
        mode,
        files,
        workspace: Path::new("/srv/ws"),
        tools,
        skills: one_skill(),
        operator: "OPERATOR-BODY",
        sender: Sender::Person { id: "42", name: "Ada", level: Level::User },
        channel: "telegram",
        is_group: false,
        memory: &MemoryScope::Owner,
        agent: "main",
        session_key: telegram_42(),
    }
}

fn telegram_42() -> &'static SessionKey {
    static KEY: std::sync::OnceLock<SessionKey> = std::sync::OnceLock::new();
    KEY.get_or_init(|| SessionKey::stored("telegram:42"))
}

#[test]
fn each_section_is_present_or_absent_by_mode() {
    // (section, in full mode, in minimal mode)
    let table = [
        ("identity", true, true),
        ("onboarding", true, false),
        ("operator", true, false),
        ("tooling", true, true),
        ("skills", true, true),
        ("safety", true, true),
        ("memory", true, false),
        ("workspace", true, true),
        ("user", true, true),
        ("formatting", true, false),
        ("silent", true, false),
        ("heartbeat", true, false),
        ("subagents", true, false),
        ("runtime", true, true),
    ];
    assert_eq!(table.map(|row| row.0), SECTIONS.map(|s| s.0), "the table covers every section, in order");
    let files = all_files();
    let tools = tools();
    for (mode, column) in [(PromptMode::Full, 1), (PromptMode::Minimal, 2)] {
        let input = input(mode, &files, &tools);
        for ((name, section), row) in SECTIONS.iter().zip(table) {
            let expected = if column == 1 { row.1 } else { row.2 };
            assert_eq!(section(&input).is_some(), expected, "{name} in {mode:?}");
        }
    }
}

#[test]
fn workspace_files_land_in_their_sections() {
    let files = all_files();
    let tools = tools();
    let input = input(PromptMode::Full, &files, &tools);
    let find = |name: &str| SECTIONS.iter().find(|s| s.0 == name).and_then(|s| (s.1)(&input)).unwrap();
    for (section, bodies) in [
        ("identity", &["IDENTITY-BODY", "SOUL-BODY"][..]),
        ("memory", &["MEMORY-BODY"]),
        ("workspace", &["AGENTS-BODY", "TOOLS-BODY", "/srv/ws"]),
        ("user", &["USER-BODY", "[context:", "level", "direct or group chat"]),
        ("heartbeat", &["HEARTBEAT-BODY", "HEARTBEAT_OK"]),
        ("operator", &["OPERATOR-BODY"]),
        ("onboarding", &["BOOTSTRAP-BODY", "then delete it"]),
        ("tooling", &["read_file, skill_get"]),
        ("skills", &["skill_get", "- meeting-minutes: Minutes from a transcript"]),
        ("runtime", &["agent main", "session telegram:42", env!("CARGO_PKG_VERSION")]),
        ("formatting", &["4096"]),
        ("silent", &["NO_REPLY"]),
    ] {
        let text = find(section);
        for body in bodies {
            assert!(text.contains(body), "{section} lacks {body:?}:\n{text}");
        }
    }
    assert!(!find("tooling").contains("Reads a file"), "descriptions come with the schemas only");
}

#[test]
fn missing_files_are_skipped_and_unreadable_ones_named() {
    let files = WorkspaceFiles { user: FileText::Unreadable("permission denied".into()), ..WorkspaceFiles::default() };
    let input = input(PromptMode::Full, &files, &[]);
    let prompt = build(&input);
    assert!(sections::memory(&input).is_none(), "no MEMORY.md, no memory section");
    assert!(sections::tooling(&input).is_none(), "no tools, no tooling section");
    assert!(!prompt.contains("## AGENTS.md"));
    assert!(prompt.contains("USER.md exists but could not be read: permission denied"), "{prompt}");
    assert!(prompt.contains("HEARTBEAT.md lists no tasks"));
}

#[test]
fn a_cut_file_says_so() {
    let files = WorkspaceFiles { soul: FileText::Text { text: "Pirate".into(), cut_chars: 12 }, ..Default::default() };
    let prompt = build(&input(PromptMode::Minimal, &files, &[]));
    assert!(prompt.contains("Pirate\n[… SOUL.md cut here: 12 more characters not shown]"), "{prompt}");
}

/// What a chat's turns have in common: the same prompt, whoever speaks and whenever. A prompt
/// that changes at its head (the time, the speaker) defeats every provider's prompt cache.
#[test]
fn the_prompt_names_no_time_speaker_or_model() {
    let files = all_files();
    let tools = tools();
    for mode in [PromptMode::Full, PromptMode::Minimal] {
        let ada = input(mode, &files, &tools);
        let prompt = build(&ada);
        for volatile in ["Current time", "2026", "Ada", "id 42", "gpt-test", "UTC"] {
            assert!(!prompt.contains(volatile), "{volatile:?} in the {mode:?} prompt:\n{prompt}");
        }
        let bob = PromptInput { sender: Sender::Person { id: "7", name: "Bob", level: Level::Admin }, ..ada.clone() };
        assert_eq!(build(&bob), prompt, "another speaker, the same prompt");
    }
}

#[test]
fn a_guest_is_not_told_about_tools_it_lacks() {
    let files = all_files();
    let none = sections::workspace(&input(PromptMode::Full, &files, &[])).unwrap();
    assert!(!none.contains("File tools") && !none.contains("exec") && !none.contains("edit them"), "{none}");
    let reading = [tool("read_file", "Reads.")];
    let read_only = sections::workspace(&input(PromptMode::Minimal, &files, &reading)).unwrap();
    assert!(read_only.contains("File tools work there.") && !read_only.contains("command"), "{read_only}");
    let all = [tool("read_file", "R."), tool("write_file", "W."), tool("exec", "E.")];
    let owner = sections::workspace(&input(PromptMode::Full, &files, &all)).unwrap();
    assert!(owner.contains("File tools and commands (exec) work there.") && owner.contains("edit them"), "{owner}");
    assert!(owner.contains("what you write under outbox/") && !none.contains("outbox/"), "{owner}");
    let sub_agent = sections::workspace(&input(PromptMode::Minimal, &files, &all)).unwrap();
    assert!(!sub_agent.contains("outbox/"), "a sub-agent's run sends no reply: {sub_agent}");
}

#[test]
fn channels_get_their_own_formatting_rules() {
    let files = WorkspaceFiles::default();
    let mut input = input(PromptMode::Full, &files, &[]);
    input.channel = "discord";
    assert!(sections::formatting(&input).unwrap().contains("2000"));
    input.channel = "api";
    assert!(sections::formatting(&input).unwrap().contains("plain Markdown"));
}

#[test]
fn groups_are_told_when_to_stay_silent() {
    let files = WorkspaceFiles::default();
    let mut input = input(PromptMode::Full, &files, &[]);
    input.is_group = true;
    let silent = sections::silent(&input).unwrap();
    assert!(silent.contains("context line of each message says whether it addresses you"), "{silent}");
}

#[tokio::test]
async fn a_fresh_workspace_gives_every_heading_once() {
    let dir = tempfile::tempdir().unwrap();
    crate::workspace::init::write_workspace(dir.path()).unwrap();
    // What a user writes into the templates' files, under the templates' own titles.
    std::fs::write(dir.path().join("MEMORY.md"), "# Memory\n\n- The owner's cat is called Mia.\n").unwrap();
    let files = WorkspaceFiles::load(dir.path(), 8000, 8000, &MemoryScope::Owner).await;
    let tools = tools();
    let prompt = build(&input(PromptMode::Full, &files, &tools));
    let mut headings: Vec<&str> = prompt.lines().filter(|line| line.starts_with('#')).collect();
    let count = headings.len();
    headings.sort_unstable();
    headings.dedup();
    assert_eq!(headings.len(), count, "a heading repeats:\n{prompt}");
    assert!(prompt.contains("Your name is Switchboard") && prompt.contains("cat is called Mia"), "{prompt}");
}

#[test]
fn a_files_own_title_is_dropped_only_when_it_repeats_the_section() {
    assert_eq!(sections::without_title("# Identity\n\nYou are Ada.", "Identity"), "You are Ada.");
    assert_eq!(sections::without_title("## identity\nAda", "Identity"), "Ada");
    assert_eq!(sections::without_title("# Persona\n\nCalm.", "Identity"), "# Persona\n\nCalm.");
    assert_eq!(sections::without_title("Identity matters.", "Identity"), "Identity matters.");
}

#[test]
fn a_group_sees_its_own_memory_file_and_nothing_of_the_owners() {
    // What `WorkspaceFiles::load` gives a group: its own file as `memory`, no USER.md.
    let files = WorkspaceFiles { memory: text("GROUP-MEMORY"), user: FileText::Missing, ..all_files() };
    let tools = tools();
    let scope = MemoryScope::Group { channel: "telegram".into(), chat_id: "-100123".into() };
    let mut input = input(PromptMode::Full, &files, &tools);
    input.is_group = true;
    input.memory = &scope;
    let prompt = build(&input);
    let memory = sections::memory(&input).unwrap();
    assert!(memory.contains("in this group chat (memory/groups/telegram_-100123.md):\n\nGROUP-MEMORY"), "{memory}");
    let workspace = sections::workspace(&input).unwrap();
    assert!(workspace.contains("memory/groups/telegram_-100123.md is the memory of this group chat"), "{workspace}");
    assert!(workspace.contains("(MEMORY.md, USER.md) and other chats' memory files"), "{workspace}");
    assert!(!workspace.contains("- MEMORY.md:") && !workspace.contains("- USER.md:"), "{workspace}");
    assert!(!prompt.contains("append new ones here") && !prompt.contains("About the owner"), "{prompt}");
}

#[test]
fn the_owner_s_direct_chat_keeps_memory_md_and_user_md() {
    let files = all_files();
    let tools = tools();
    let input = input(PromptMode::Full, &files, &tools);
    let prompt = build(&input);
    assert!(prompt.contains("Lasting facts you noted earlier (MEMORY.md):\n\nMEMORY-BODY"), "{prompt}");
    assert!(prompt.contains("About the owner (USER.md):\n\nUSER-BODY"), "{prompt}");
    assert!(prompt.contains("- MEMORY.md: lasting facts from the owner's direct chats"), "{prompt}");
    assert!(!prompt.contains("not available in this chat"), "{prompt}");
}

#[test]
fn a_cut_memory_file_points_to_memory_search_when_it_is_offered() {
    let files = WorkspaceFiles { memory: FileText::Text { text: "NEWEST".into(), cut_chars: 500 }, ..all_files() };
    let hint = "find older facts with memory_search";
    let without = sections::memory(&input(PromptMode::Full, &files, &tools())).unwrap();
    assert!(without.contains("NEWEST") && !without.contains(hint), "{without}");
    let mut offered = tools();
    offered.push(Arc::new(ToolSpec {
        name: "memory_search".into(),
        description: "Searches.".into(),
        parameters: json!({}),
    }));
    let with = sections::memory(&input(PromptMode::Full, &files, &offered)).unwrap();
    assert!(with.ends_with(&format!("NEWEST\n\nOnly the newest part is shown here: {hint}.")), "{with}");
    let whole = sections::memory(&input(PromptMode::Full, &all_files(), &offered)).unwrap();
    assert!(!whole.contains(hint), "{whole}");
}

#[test]
fn many_skills_are_searched_not_listed_and_none_without_skill_get() {
    let files = all_files();
    let many = Catalog::of((0..20).map(|n| skill(&format!("skill-{n}"), "Does a thing")).collect());
    let with_search = [tools(), vec![tool("skill_search", "Finds skills.")]].concat();
    let searched = PromptInput { skills: &many, ..input(PromptMode::Full, &files, &with_search) };
    let text = super::sections::skills(&searched).unwrap();
    assert!(text.contains("There are 20 skills: find the one for a task with skill_search."), "{text}");
    assert!(!text.contains("skill-3"), "{text}");

    let read_only = [tool("read_file", "Reads a file.")];
    assert_eq!(super::sections::skills(&input(PromptMode::Full, &files, &read_only)), None, "not offered: not shown");
    let empty = Catalog::default();
    let tools = tools();
    assert_eq!(
        super::sections::skills(&PromptInput { skills: &empty, ..input(PromptMode::Full, &files, &tools) }),
        None
    );
}

#[test]
fn onboarding_is_for_the_owners_direct_chat_with_a_person_only() {
    let files = all_files();
    let tools = tools();
    let direct = input(PromptMode::Full, &files, &tools);
    assert!(super::sections::onboarding(&direct).is_some());
    let group = PromptInput { is_group: true, ..input(PromptMode::Full, &files, &tools) };
    assert_eq!(super::sections::onboarding(&group), None);
    let heartbeat = PromptInput { sender: Sender::System, ..input(PromptMode::Full, &files, &tools) };
    assert_eq!(super::sections::onboarding(&heartbeat), None);
    let done = WorkspaceFiles { onboarding: FileText::Missing, ..all_files() };
    assert_eq!(super::sections::onboarding(&input(PromptMode::Full, &done, &tools)), None);
}
