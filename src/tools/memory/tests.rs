//! The memory tools against a real SQLite store in a temp dir.

use std::sync::Arc;

use serde_json::json;

use switchboard_testkit::fake_llm::FakeLlm;

use super::*;
use crate::provider::embeddings::{EmbeddingsSettings, OpenAiEmbeddings};
use crate::provider::{Author, ChatMessage};
use crate::store::sqlite::SqliteStore;
use crate::store::{RunClaim, RunOutcome, RunStatus, RunStore};
use crate::tools::Tool;

struct Rig {
    _dir: tempfile::TempDir,
    ws: std::path::PathBuf,
    store: Arc<SqliteStore>,
    search: MemorySearch,
    get: MemoryGet,
}

impl Rig {
    async fn new() -> Self {
        Self::searching(|searcher| searcher).await
    }

    /// Ranking by meaning too, with `llm`'s embeddings.
    async fn with_embeddings(llm: &FakeLlm, settings: EmbeddingSettings) -> Self {
        let embedder = OpenAiEmbeddings::new(EmbeddingsSettings {
            name: "fake".into(),
            base_url: llm.base_url(),
            api_key: None,
            model: "embed-small".into(),
            timeout: std::time::Duration::from_secs(10),
        })
        .unwrap();
        Self::searching(|searcher| searcher.with_embeddings(Arc::new(embedder), settings)).await
    }

    async fn searching(setup: impl FnOnce(MemorySearcher) -> MemorySearcher) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("memory/groups")).unwrap();
        let store = Arc::new(SqliteStore::open(&dir.path().join("s.db")).await.unwrap());
        let settings = MemorySettings::default();
        let search = MemorySearch::new(Arc::new(setup(MemorySearcher::new(store.clone(), settings))));
        Self { get: MemoryGet::new(store.clone(), settings), search, store, ws, _dir: dir }
    }

    /// A finished run in `session` whose transcript is `said` (user, assistant, …), written in
    /// `scope`'s memory (as the worker records it).
    async fn converse(&self, session: &str, scope: &MemoryScope, said: &[&str]) {
        let inbound = uuid::Uuid::now_v7().to_string();
        let RunClaim::New { run_id } = self.store.claim_run(&inbound, session).await.unwrap() else { panic!() };
        let transcript = said
            .iter()
            .enumerate()
            .map(|(i, text)| match i % 2 {
                0 => ChatMessage::user_by(Author { id: "7".into(), name: "Ann".into() }, *text),
                _ => ChatMessage::assistant(*text, Vec::new()),
            })
            .collect();
        let outcome = RunOutcome { transcript, memory_scope: scope.label("main"), ..completed() };
        self.store.finish_run(&run_id, &outcome).await.unwrap();
    }

    fn write(&self, path: &str, text: &str) {
        std::fs::write(self.ws.join(path), text).unwrap();
    }

    fn ctx(&self, memory: MemoryScope) -> ToolContext {
        ToolContext { workspace: self.ws.clone(), memory, agent: "main".into(), ..ToolContext::default() }
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
    assert_eq!(none, "No match for \"giraffe\" in MEMORY.md, USER.md, past conversations.");
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
    assert_eq!(
        gone,
        "No match for \"lion\" in past conversations; no memory file exists yet for the owner's direct chats."
    );
}

#[tokio::test]
async fn a_group_searches_only_its_own_file() {
    let rig = Rig::new().await;
    rig.write("MEMORY.md", "The owner's secret is ZEBRA-4711.\n");
    rig.write("USER.md", "The owner is a zebra keeper.\n");
    rig.write("memory/groups/telegram_-101.md", "Another group's zebra.\n");
    let own = group().file_shown().unwrap();
    let out = rig.search(group(), "zebra").await;
    assert!(out.starts_with("No match") && out.ends_with("no memory file exists yet for this group chat."), "{out}");
    rig.write(&own, "We meet at the zebra crossing.\n");
    let out = rig.search(group(), "zebra secret keeper").await;
    assert!(out.contains(&format!("1. {own} line 1")) && !out.contains("2. "), "{out}");
    assert!(!out.contains("4711") && !out.contains("MEMORY.md"), "{out}");
    // A link to the owner's file in the group's place is not searched.
    std::fs::remove_file(rig.ws.join(&own)).unwrap();
    std::fs::hard_link(rig.ws.join("MEMORY.md"), rig.ws.join(&own)).unwrap();
    let out = rig.search(group(), "zebra").await;
    assert!(!out.contains("4711") && out.contains("no memory file"), "{out}");
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

#[tokio::test]
async fn past_conversations_are_searched_in_their_own_scope_only() {
    let rig = Rig::new().await;
    let owner = MemoryScope::Owner;
    rig.converse("telegram:42", &owner, &["My bike lock code is 3141.", "Noted."]).await;
    rig.converse("telegram:-100", &group(), &["Band practice moves to Thursday.", "Got it."]).await;
    // Another agent's owner chats are its own (a workspace of its own).
    let other = RunOutcome { memory_scope: Some("other/owner".into()), ..completed() };
    let inbound = uuid::Uuid::now_v7().to_string();
    let RunClaim::New { run_id } = rig.store.claim_run(&inbound, "telegram:42").await.unwrap() else { panic!() };
    rig.store.finish_run(&run_id, &other).await.unwrap();

    let out = rig.search(owner.clone(), "bike lock code").await;
    assert!(out.contains("1. conversation telegram:42, message "), "{out}");
    assert!(out.contains("Ann (id 7): My **bike** **lock** **code** is 3141"), "{out}");
    assert!(!out.contains("harmonica"), "another agent's conversation: {out}");
    let group_out = rig.search(group(), "bike lock code thursday").await;
    assert!(group_out.contains("conversation telegram:-100") && group_out.contains("**Thursday**"), "{group_out}");
    assert!(!group_out.contains("3141") && !group_out.contains("telegram:42"), "{group_out}");

    // Read on from the hit: the conversation's messages; another scope's conversation: nothing.
    let id: u64 = out.split("message ").nth(1).unwrap().split('\n').next().unwrap().parse().unwrap();
    let path = json!({"path": "conversation/telegram:42", "from_line": id});
    let read = rig.get(owner.clone(), path.clone()).await.unwrap();
    assert!(read.starts_with(&format!("[conversation telegram:42 messages {id}-{}", id + 1)), "{read}");
    assert!(read.contains("Ann (id 7): My bike lock code is 3141.") && read.contains("assistant: Noted."), "{read}");
    assert!(rig.get(group(), path).await.is_err(), "a group reads the owner's conversation");
    // Messages written later are found at the next search.
    rig.converse("telegram:42", &owner, &["The spare key is under the blue pot."]).await;
    assert!(rig.search(owner, "spare key").await.contains("1. conversation telegram:42"));
}

#[tokio::test]
async fn the_owners_daily_notes_are_searched_and_a_groups_search_skips_them() {
    let rig = Rig::new().await;
    rig.write("memory/2026-11-25.md", "# 2026-11-25\n\nCalled the plumber about the boiler.\n");
    rig.write("memory/groups/telegram_-100.md", "Group notes.\n");
    let out = rig.search(MemoryScope::Owner, "plumber boiler").await;
    assert!(out.contains("1. memory/2026-11-25.md line 3"), "{out}");
    let group_out = rig.search(group(), "plumber boiler").await;
    assert!(!group_out.contains("Called") && group_out.starts_with("No match"), "{group_out}");
}

fn completed() -> RunOutcome {
    let transcript = vec![ChatMessage::user("I play the harmonica, bike lock code 9999.")];
    RunOutcome { transcript, iterations: 1, ..RunOutcome::without_model(RunStatus::Completed, None, None) }
}

const EMBEDDINGS: EmbeddingSettings =
    EmbeddingSettings { batch: 64, max_chunks: 2_000, min_similarity: 0.25, budget: super::semantic::EMBEDDING_BUDGET };

#[tokio::test]
async fn with_embeddings_an_edit_embeds_only_the_new_text() {
    let llm = FakeLlm::start().await;
    let rig = Rig::with_embeddings(&llm, EMBEDDINGS).await;
    rig.write("MEMORY.md", "I drive an automobile from 1998.\n\nAnna's birthday is in May.\n");
    let out = rig.search(MemoryScope::Owner, "car").await;
    assert!(out.contains("1. MEMORY.md line 1\n   I drive an automobile from 1998.") && !out.contains("2. "), "{out}");
    rig.write(
        "MEMORY.md",
        "The dog is called Rex.\n\nI drive an automobile from 1998.\n\nAnna's birthday is in May.\n",
    );
    let out = rig.search(MemoryScope::Owner, "puppy").await;
    assert!(out.contains("1. MEMORY.md line 1\n   The dog is called Rex."), "{out}");

    let inputs: Vec<Vec<String>> = llm.embedding_calls().into_iter().map(|call| call.inputs).collect();
    let both = ["I drive an automobile from 1998.", "Anna's birthday is in May."];
    assert_eq!(inputs, [vec!["car"], both.to_vec(), vec!["puppy"], vec!["The dog is called Rex."]]);
}

#[tokio::test]
async fn a_search_embeds_at_most_max_chunks_in_batches() {
    let llm = FakeLlm::start().await;
    let settings = EmbeddingSettings { batch: 2, max_chunks: 3, ..EMBEDDINGS };
    let rig = Rig::with_embeddings(&llm, settings).await;
    rig.write("MEMORY.md", "one\n\ntwo\n\nthree\n\nfour\n\nfive\n");
    rig.search(MemoryScope::Owner, "two").await;
    let sizes: Vec<usize> = llm.embedding_calls().iter().map(|call| call.inputs.len()).collect();
    assert_eq!(sizes, [1, 2, 1], "the query, then three chunks two at a time");
}

/// A slow embedder: once the budget is spent, a search ranks what has vectors and the next
/// one goes on where it stopped.
#[tokio::test]
async fn a_search_past_its_embedding_budget_leaves_the_rest_to_the_next() {
    let llm = FakeLlm::start().await;
    let settings = EmbeddingSettings { batch: 2, budget: std::time::Duration::ZERO, ..EMBEDDINGS };
    let rig = Rig::with_embeddings(&llm, settings).await;
    rig.write("MEMORY.md", "one\n\ntwo\n\nthree\n\nfour\n\nI drive an automobile.\n");
    let first = rig.search(MemoryScope::Owner, "car").await;
    assert!(!first.contains("automobile"), "its chunk has no vector yet: {first}");
    rig.search(MemoryScope::Owner, "car").await;
    let third = rig.search(MemoryScope::Owner, "car").await;
    assert!(third.contains("1. MEMORY.md line 9\n   I drive an automobile."), "{third}");
    let sizes: Vec<usize> = llm.embedding_calls().iter().map(|call| call.inputs.len()).collect();
    assert_eq!(sizes, [1, 2, 1, 2, 1, 1], "each search: the query, then one batch");
}

#[tokio::test]
async fn when_embeddings_fail_the_search_ranks_by_words() {
    let llm = FakeLlm::start().await;
    let rig = Rig::with_embeddings(&llm, EMBEDDINGS).await;
    rig.write("MEMORY.md", "I drive an automobile.\n\nThe car wash is on Main Street.\n");
    let words_only = Rig::new().await;
    words_only.write("MEMORY.md", "I drive an automobile.\n\nThe car wash is on Main Street.\n");
    llm.fail_embeddings(true);
    assert_eq!(rig.search(MemoryScope::Owner, "car").await, words_only.search(MemoryScope::Owner, "car").await);
    assert_eq!(llm.embedding_calls().len(), 1, "one failed request for the query, no more");
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
