//! A session's stored data that no longer decodes (a transcript row, the summary, a setting)
//! never wedges its chat: through the real daemon on SQLite and on PostgreSQL, a row broken by
//! hand with SQL between two runs is left out with a warning naming it, and the next message is
//! answered at once (not given back to the bus, whose retries come every 5 s) on what decodes.
//! Memory search, recall and the API's session pages leave the row out the same way.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use sqlx::Connection;
use switchboard_testkit::fake_llm::{FakeLlm, Scripted, user_texts, without_context_line};
use switchboard_testkit::postgres::TempDatabase;

use crate::support::{Daemon, Launch};

/// Well under the worker's retry delay: an answer this fast was not retried.
const AT_ONCE: Duration = Duration::from_secs(3);

/// Where a test's daemons keep their data.
enum Store {
    Sqlite,
    Postgres(TempDatabase),
}

impl Store {
    fn new(postgres: bool) -> Store {
        if postgres { Store::Postgres(TempDatabase::create()) } else { Store::Sqlite }
    }

    /// Runs `statement` on the daemon's database (the daemon stopped or running).
    async fn break_with(&self, dir: &Path, statement: &str) {
        match self {
            Store::Postgres(database) => {
                database.sql(statement);
            }
            Store::Sqlite => {
                let url = format!("sqlite://{}", dir.join("switchboard.db").display());
                let mut connection = sqlx::SqliteConnection::connect(&url).await.unwrap();
                let changed = sqlx::query(sqlx::AssertSqlSafe(statement.to_owned()))
                    .execute(&mut connection)
                    .await
                    .unwrap()
                    .rows_affected();
                assert!(changed > 0, "{statement} changed nothing");
                connection.close().await.unwrap();
            }
        }
    }
}

/// `switchboard run` on `store`, its agent with two models (for `/model`), with `env` set.
async fn start(dir: &Path, name: &str, llm: &FakeLlm, store: &Store, env: &[(&str, &str)]) -> Daemon {
    let mut launch = Launch::new(dir, name, &["run"])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_AGENT__MODELS", r#"["openai/model-a", "openai/model-b"]"#);
    for (key, value) in env {
        launch = launch.env(key, value);
    }
    if let Store::Postgres(database) = store {
        launch = launch.env("SWITCHBOARD_STORE__DATABASE_URL", database.url());
    }
    let mut daemon = launch.spawn();
    daemon.wait_healthy().await;
    daemon
}

/// Sends `text` in chat `c` and returns the reply, failing when it does not come at once.
async fn say(daemon: &Daemon, text: &str) -> String {
    let post = daemon.post(json!({"chat_id": "c", "content": text}));
    let Ok((status, body)) = tokio::time::timeout(AT_ONCE, post).await else {
        panic!("{text:?} was not answered within {AT_ONCE:?}:\n{}", daemon.logs());
    };
    assert_eq!(status, 200, "{body}");
    body["reply"].as_str().unwrap_or_default().to_owned()
}

/// The texts of the last model request's messages, without context lines.
fn last_seen(llm: &FakeLlm) -> (Vec<String>, Value) {
    let request = llm.requests().pop().unwrap();
    let texts = request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .map(|c| without_context_line(c).to_owned())
        .collect();
    (texts, request)
}

/// The `setup` turns in chat `c`, the daemon stopped, `statement` run: a new daemon (nothing
/// of the session in its memory) started with `env`.
async fn broken_then(
    llm: &FakeLlm,
    dir: &Path,
    store: &Store,
    (setup, statement): (&[&str], &str),
    env: &[(&str, &str)],
) -> Daemon {
    let daemon = start(dir, "before", llm, store, &[]).await;
    for text in setup {
        say(&daemon, text).await;
    }
    drop(daemon);
    store.break_with(dir, statement).await;
    start(dir, "after", llm, store, env).await
}

/// The first answer in chat `c`: a row in the middle of its history.
const FIRST_ANSWER: &str = "UPDATE transcript SET message_json = 'not json' \
     WHERE id = (SELECT MIN(id) FROM transcript WHERE session_key = 'api:c' AND role = 'assistant')";

async fn transcript_row(postgres: bool) {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(postgres);
    let daemon = broken_then(&llm, dir.path(), &store, (&["one", "two"], FIRST_ANSWER), &[]).await;

    assert_eq!(say(&daemon, "three").await, "echo: three");
    let (texts, _) = last_seen(&llm);
    assert!(!texts.iter().any(|t| t == "echo: one"), "the broken row reached the model: {texts:?}");
    for kept in ["one", "two", "echo: two", "three"] {
        assert!(texts.iter().any(|t| t == kept), "{kept:?} is missing: {texts:?}");
    }
    let logs = daemon.logs();
    let warning = logs.lines().find(|l| l.contains("transcript row is not a readable chat message"));
    let warning = warning.unwrap_or_else(|| panic!("no warning names the row:\n{logs}"));
    assert!(warning.contains("api:c") && warning.contains("row="), "{warning}");
    assert!(!logs.contains("not json"), "the row's content reached the log");
    assert!(!logs.contains("giving the message back"), "{logs}");

    // The API's page of the session's messages shows the rows that decode.
    let (status, page) = daemon.get_json("/v1/sessions/api%3Ac/messages").await;
    assert_eq!(status, 200, "{page}");
    let lines: Vec<&str> = page["messages"].as_array().unwrap().iter().filter_map(|m| m["content"].as_str()).collect();
    assert_eq!(lines, ["one", "two", "echo: two", "three", "echo: three"]);
    let logs = daemon.logs();
    assert!(logs.contains("the session's messages are shown without it"), "no warning names the row:\n{logs}");
}

/// A past conversation's fact is recalled and found by `memory_search` although a row beside
/// it no longer decodes: the row is passed over once, with a warning, not read again by every
/// search.
async fn memory_search(postgres: bool) {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(postgres);
    // `/new`: the fact is out of the history, so recall may bring it back.
    let setup: &[&str] = &["my locker code is ZEBRA-4711", "two", "/new"];
    let env = [("SWITCHBOARD_MEMORY__RECALL", "3"), ("SWITCHBOARD_PERMISSIONS__TOOLS__MEMORY_SEARCH", "guest")];
    let daemon = broken_then(&llm, dir.path(), &store, (setup, FIRST_ANSWER), &env).await;

    llm.forget_requests();
    llm.push(Scripted::ToolCalls(vec![("memory_search".into(), json!({"query": "locker code"}))]));
    llm.push(Scripted::Text("It is ZEBRA-4711.".into()));
    assert_eq!(say(&daemon, "what was the locker code?").await, "It is ZEBRA-4711.");
    let requests = llm.requests();
    let asked = requests[0]["messages"].as_array().unwrap().last().unwrap()["content"].as_str().unwrap();
    // The first message, its code in the snippet (PostgreSQL's end at the hyphen).
    let recalled = asked.contains("conversation api:c, message 1: ") && asked.contains("ZEBRA");
    assert!(asked.contains("Recalled from memory") && recalled, "nothing recalled: {asked}");
    let messages = requests[1]["messages"].as_array().unwrap();
    let found = messages.iter().find(|m| m["role"] == "tool").unwrap()["content"].as_str().unwrap();
    assert!(found.contains("1. conversation api:c, message 1\n") && found.contains("ZEBRA"), "{found}");

    let logs = daemon.logs();
    let warnings: Vec<&str> = logs.lines().filter(|l| l.contains("memory search goes on without it")).collect();
    assert_eq!(warnings.len(), 1, "the row is passed over once:\n{logs}");
    assert!(warnings[0].contains("api:c") && warnings[0].contains("row="), "{}", warnings[0]);
    assert!(!logs.contains("memory search for recall failed"), "{logs}");
}

async fn summary(postgres: bool) {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(postgres);
    // PostgreSQL keeps any text as text: there the count beside the summary is what breaks.
    let statement = if postgres {
        "UPDATE sessions SET summary = 'Earlier: the user likes tea.', compaction_count = -1 WHERE key = 'api:c'"
    } else {
        "UPDATE sessions SET summary = CAST(X'80FF' AS TEXT) WHERE key = 'api:c'"
    };
    let daemon = broken_then(&llm, dir.path(), &store, (&["one"], statement), &[]).await;

    assert_eq!(say(&daemon, "two").await, "echo: two");
    let (texts, request) = last_seen(&llm);
    for kept in ["one", "echo: one", "two"] {
        assert!(texts.iter().any(|t| t == kept), "{kept:?} is missing: {texts:?}");
    }
    if postgres {
        assert!(request.to_string().contains("the user likes tea"), "the summary was lost: {request}");
    }
    let logs = daemon.logs();
    assert!(logs.contains("does not decode") && logs.contains("api:c"), "no warning names the session:\n{logs}");
    // `/status` reads the count too.
    assert!(say(&daemon, "/status").await.starts_with("Model: "));
}

async fn session_setting(postgres: bool) {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(postgres);
    // A column of the wrong type is possible on SQLite only; a value no build knows, on both.
    let statement = if postgres {
        "UPDATE sessions SET queue_mode = 'sideways' WHERE key = 'api:c'"
    } else {
        "UPDATE sessions SET show_progress = 'yes', queue_mode = 'sideways' WHERE key = 'api:c'"
    };
    let daemon = broken_then(&llm, dir.path(), &store, (&["/model model-b", "one"], statement), &[]).await;

    assert_eq!(say(&daemon, "two").await, "echo: two");
    let request = llm.requests().pop().unwrap();
    assert_eq!(request["model"], "model-b", "the setting that decodes was dropped with the broken one");
    assert_eq!(user_texts(&request), ["one", "two"]);
    assert!(say(&daemon, "/status").await.starts_with("Model: openai/model-b\n"));
    assert!(say(&daemon, "/verbose").await.contains(": off."));
    let logs = daemon.logs();
    let warnings: Vec<&str> = logs.lines().filter(|l| l.contains("session setting") && l.contains("api:c")).collect();
    assert!(warnings.iter().any(|l| l.contains("queue_mode")), "{logs}");
    if !postgres {
        assert!(warnings.iter().any(|l| l.contains("show_progress")), "{logs}");
    }
}

#[tokio::test]
async fn a_broken_transcript_row_is_left_out_on_sqlite() {
    transcript_row(false).await;
}

#[tokio::test]
async fn a_broken_transcript_row_is_left_out_on_postgresql() {
    transcript_row(true).await;
}

#[tokio::test]
async fn a_broken_summary_is_left_out_on_sqlite() {
    summary(false).await;
}

#[tokio::test]
async fn a_broken_summary_count_keeps_the_summary_on_postgresql() {
    summary(true).await;
}

#[tokio::test]
async fn a_broken_session_setting_falls_back_alone_on_sqlite() {
    session_setting(false).await;
}

#[tokio::test]
async fn a_broken_session_setting_falls_back_alone_on_postgresql() {
    session_setting(true).await;
}

#[tokio::test]
async fn memory_search_and_recall_pass_over_a_broken_transcript_row_on_sqlite() {
    memory_search(false).await;
}

#[tokio::test]
async fn memory_search_and_recall_pass_over_a_broken_transcript_row_on_postgresql() {
    memory_search(true).await;
}
