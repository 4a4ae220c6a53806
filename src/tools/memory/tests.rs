//! The memory tools against a real SQLite store in a temp dir.

use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::store::sqlite::SqliteStore;
use crate::tools::Tool;

struct Rig {
    _dir: tempfile::TempDir,
    ws: std::path::PathBuf,
    search: MemorySearch,
    get: MemoryGet,
}

impl Rig {
    async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("memory/groups")).unwrap();
        let store = Arc::new(SqliteStore::open(&dir.path().join("s.db")).await.unwrap());
        let settings = MemorySettings::default();
        Self { search: MemorySearch::new(store, settings), get: MemoryGet::new(settings), ws, _dir: dir }
    }

    fn write(&self, path: &str, text: &str) {
        std::fs::write(self.ws.join(path), text).unwrap();
    }

    fn ctx(&self, memory: MemoryScope) -> ToolContext {
        ToolContext { workspace: self.ws.clone(), memory, ..ToolContext::default() }
    }

    async fn get(&self, memory: MemoryScope, arguments: serde_json::Value) -> Result<String, ToolError> {
        self.get.execute(arguments, &self.ctx(memory)).await
    }

    async fn search(&self, memory: MemoryScope, query: &str) -> String {
        self.search.execute(json!({"query": query}), &self.ctx(memory)).await.unwrap()
    }
}

fn group() -> MemoryScope {
    MemoryScope::Group { channel: "telegram".into(), chat_id: "-100".into() }
}

/// A MEMORY.md of about 20,000 characters whose one fact about the zebra is near its start.
fn long_memory() -> String {
    let mut text = String::from("# Memory\n\nThe locker code at the zoo is ZEBRA-4711.\n\n");
    for i in 0..600 {
        text.push_str(&format!("- note {i}: nothing much happened today\n"));
        if i % 10 == 9 {
            text.push('\n');
        }
    }
    text
}

#[tokio::test]
async fn finds_a_fact_past_the_prompt_cap_with_its_line() {
    let rig = Rig::new().await;
    let memory = long_memory();
    assert!(memory.len() > 20_000);
    rig.write("MEMORY.md", &memory);
    let out = rig.search(MemoryScope::Owner, "zebra locker").await;
    assert!(out.contains("1. MEMORY.md line 3\n"), "{out}");
    assert!(out.contains("**ZEBRA**") && out.contains("**locker**"), "{out}");
    let lines = rig.get(MemoryScope::Owner, json!({"path": "MEMORY.md", "from_line": 3, "lines": 1})).await.unwrap();
    assert!(lines.starts_with("[MEMORY.md lines 3-3 of ") && lines.contains("ZEBRA-4711"), "{lines}");
    assert!(lines.contains("from_line=4"), "{lines}");
}

#[tokio::test]
async fn ranks_chunks_with_more_and_rarer_words_first() {
    let rig = Rig::new().await;
    rig.write("MEMORY.md", "Tea with Anna on Monday.\n\nAnna's birthday is in May.\n\nMonday: dentist.\n");
    rig.write("USER.md", "I drink tea.\n");
    let out = rig.search(MemoryScope::Owner, "Anna birthday").await;
    let first = out.lines().find(|line| line.starts_with("1. ")).unwrap();
    assert_eq!(first, "1. MEMORY.md line 3", "{out}");
    assert!(out.contains("2. MEMORY.md line 1"), "{out}");
    assert!(!out.contains("3. "), "{out}");
    let tea = rig.search(MemoryScope::Owner, "tea").await;
    assert!(tea.contains("USER.md line 1") && tea.contains("MEMORY.md line 1"), "{tea}");
    let none = rig.search(MemoryScope::Owner, "giraffe").await;
    assert_eq!(none, "No match for \"giraffe\" in MEMORY.md, USER.md.");
}

#[tokio::test]
async fn an_edited_file_is_searched_as_it_is_now() {
    let rig = Rig::new().await;
    rig.write("MEMORY.md", "The cat is called Tiger.\n");
    assert!(rig.search(MemoryScope::Owner, "tiger").await.contains("line 1"));
    rig.write("MEMORY.md", "Nothing here.\n\nThe cat is now called Lion.\n");
    let out = rig.search(MemoryScope::Owner, "tiger lion").await;
    assert!(out.contains("1. MEMORY.md line 3") && !out.contains("Tiger"), "{out}");
    std::fs::remove_file(rig.ws.join("MEMORY.md")).unwrap();
    let gone = rig.search(MemoryScope::Owner, "lion").await;
    assert_eq!(gone, "No memory file exists yet for the owner's direct chats.", "{gone}");
}

#[tokio::test]
async fn a_group_searches_only_its_own_file() {
    let rig = Rig::new().await;
    rig.write("MEMORY.md", "The owner's secret is ZEBRA-4711.\n");
    rig.write("USER.md", "The owner is a zebra keeper.\n");
    rig.write("memory/groups/telegram_-101.md", "Another group's zebra.\n");
    let own = group().file_shown().unwrap();
    let out = rig.search(group(), "zebra").await;
    assert_eq!(out, "No memory file exists yet for this group chat.");
    rig.write(&own, "We meet at the zebra crossing.\n");
    let out = rig.search(group(), "zebra secret keeper").await;
    assert!(out.contains(&format!("1. {own} line 1")) && !out.contains("2. "), "{out}");
    assert!(!out.contains("4711") && !out.contains("MEMORY.md"), "{out}");
    // A link to the owner's file in the group's place is not searched.
    std::fs::remove_file(rig.ws.join(&own)).unwrap();
    std::fs::hard_link(rig.ws.join("MEMORY.md"), rig.ws.join(&own)).unwrap();
    let out = rig.search(group(), "zebra").await;
    assert!(!out.contains("4711") && out.contains("No memory file"), "{out}");
}

#[tokio::test]
async fn memory_get_reads_only_memory_files_of_the_scope() {
    let rig = Rig::new().await;
    rig.write("MEMORY.md", "secret\n");
    rig.write("notes.md", "notes\n");
    rig.write("memory/groups/telegram_-100.md", "one\ntwo\nthree\n");
    let ctx = rig.ctx(group());
    for path in ["MEMORY.md", "memory/../MEMORY.md", "memory.md", "USER.md", "memory/groups/telegram_-101.md"] {
        let err = rig.get.execute(json!({"path": path}), &ctx).await.unwrap_err();
        assert!(matches!(err, ToolError::Refused(_)), "{path}: {err}");
    }
    let err = rig.get.execute(json!({"path": "notes.md"}), &ctx).await.unwrap_err();
    assert!(err.to_string().contains("not a memory file"), "{err}");
    let out = rig.get.execute(json!({"path": "memory/groups/telegram_-100.md", "from_line": 2}), &ctx).await.unwrap();
    assert_eq!(out, "[memory/groups/telegram_-100.md lines 2-3 of 3]\ntwo\nthree");
    let past = rig.get.execute(json!({"path": "memory/groups/telegram_-100.md", "from_line": 9}), &ctx).await.unwrap();
    assert!(past.contains("has 3 lines"), "{past}");
    let owner = rig.get(MemoryScope::Owner, json!({"path": "memory/groups/telegram_-100.md"})).await.unwrap();
    assert!(owner.contains("three"), "{owner}");
    let none = rig.search.execute(json!({"query": "x"}), &rig.ctx(MemoryScope::None)).await.unwrap_err();
    assert!(matches!(none, ToolError::Refused(_)), "{none}");
}

#[test]
fn memory_files_are_recognised() {
    for path in ["MEMORY.md", "user.md", "memory/groups/a.md", "memory/users/b.MD"] {
        assert!(is_memory_file(path), "{path}");
    }
    for path in ["notes.md", "memory", "memory/x.txt", "memoryx/a.md", "sub/MEMORY.md"] {
        assert!(!is_memory_file(path), "{path}");
    }
}
