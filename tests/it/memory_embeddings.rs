//! `memory_search` with `[memory.embeddings]` on, through the worker, against the scripted
//! model server's `/v1/embeddings` (whose vectors put synonyms close: "car", "automobile"):
//! a memory no word of the query is in is found by its meaning, the full-text ranking is
//! reordered, a chunk is embedded once, a failing endpoint leaves the full-text ranking, and
//! with the default config nothing is embedded. See docs/memory.md, "Search".

use std::collections::HashSet;

use serde_json::json;
use switchboard::config::EmbeddingsConfig;
use switchboard_testkit::fake_llm::Scripted;

use crate::common::{BusKind, Harness, Setup, next_out};
use crate::memory_search::{call, dm, last_tool_results, settings};

const AUTOMOBILE: &str = "I drive an automobile from 1998.";

/// A fact about a car without the word, and one unrelated.
const CAR_MEMORY: &str = "# Memory\n\nI drive an automobile from 1998.\n\nAnna's birthday is in May.\n";

fn embeddings() -> EmbeddingsConfig {
    EmbeddingsConfig { provider: "fake".into(), model: "embed-small".into(), ..EmbeddingsConfig::default() }
}

/// The owner's worker with the memory tools, `MEMORY.md` written; embeddings on or not (the
/// default).
async fn start(embeddings_on: bool, memory: &str) -> Harness {
    let embeddings = embeddings_on.then(embeddings);
    let h =
        Setup { settings: settings(), memory_tools: true, embeddings, ..Setup::new(BusKind::InProcess) }.start().await;
    std::fs::write(h.workspace.join("MEMORY.md"), memory).unwrap();
    h
}

/// What `memory_search {query}` returned to the model in a turn of the owner's direct chat.
async fn search(h: &Harness, query: &str) -> String {
    let mut out = h.outbound("telegram").await;
    h.llm.push(Scripted::ToolCalls(vec![call("memory_search", json!({"query": query}))]));
    h.llm.push(Scripted::Text("Done.".into()));
    h.send(&dm(&format!("Search your memory for {query}"))).await;
    assert_eq!(next_out(&mut out).await.content, "Done.");
    // The history carries the results of earlier turns' searches too: this turn's is the last.
    last_tool_results(h).pop().expect("a tool result")
}

/// The places of a result's hits, best first (`MEMORY.md line 3`).
fn places(result: &str) -> Vec<String> {
    let numbered = result.lines().filter_map(|line| line.split_once(". ").filter(|(n, _)| n.parse::<u32>().is_ok()));
    numbered.map(|(_, place)| place.to_owned()).collect()
}

#[tokio::test]
async fn car_finds_the_automobile_by_meaning() {
    let words_only = start(false, CAR_MEMORY).await;
    let result = search(&words_only, "car").await;
    assert!(result.contains("No match for \"car\""), "full text alone finds nothing: {result}");
    words_only.stop().await;

    let h = start(true, CAR_MEMORY).await;
    let result = search(&h, "car").await;
    assert_eq!(places(&result), ["MEMORY.md line 3"], "{result}");
    assert!(result.contains(&format!("1. MEMORY.md line 3\n   {AUTOMOBILE}")), "the start of its text: {result}");
    h.stop().await;
}

#[tokio::test]
async fn meaning_reorders_the_full_text_ranking() {
    // "car 1998": by words, the short line with "card" (a prefix match of "car") comes first;
    // by meaning, the automobile of 1998 does, and it has a word of the query too.
    let memory = format!("# Memory\n\n{AUTOMOBILE}\n\nThe library card is blue.\n");
    let words_only = start(false, &memory).await;
    let by_words = places(&search(&words_only, "car 1998").await);
    assert_eq!(by_words, ["MEMORY.md line 5", "MEMORY.md line 3"]);
    words_only.stop().await;

    let h = start(true, &memory).await;
    assert_eq!(places(&search(&h, "car 1998").await), ["MEMORY.md line 3", "MEMORY.md line 5"]);
    h.stop().await;
}

#[tokio::test]
async fn a_second_search_embeds_no_chunk_again() {
    let h = start(true, CAR_MEMORY).await;
    search(&h, "car").await;
    let first = h.llm.embedding_calls();
    let embedded: HashSet<String> = first.iter().skip(1).flat_map(|call| call.inputs.clone()).collect();
    assert!(embedded.contains(AUTOMOBILE) && embedded.contains("Anna's birthday is in May."), "{first:?}");

    let result = search(&h, "birthday").await;
    assert!(result.contains("1. MEMORY.md line 5"), "{result}");
    let second = &h.llm.embedding_calls()[first.len()..];
    assert_eq!(second[0].inputs, ["birthday"], "the query first");
    // Only what is new since: the messages of the first turn, now part of past conversations.
    let again: Vec<&String> =
        second.iter().flat_map(|call| &call.inputs).filter(|text| embedded.contains(*text)).collect();
    assert!(again.is_empty(), "embedded twice: {again:?}");
    assert!(second.iter().all(|call| call.model == "embed-small"));
    h.stop().await;
}

#[tokio::test]
async fn when_the_endpoint_fails_the_search_still_answers_by_words() {
    let h = start(true, CAR_MEMORY).await;
    h.llm.fail_embeddings(true);
    let result = search(&h, "automobile").await;
    assert!(result.contains("1. MEMORY.md line 3\n   I drive an **automobile** from 1998."), "{result}");
    assert!(!result.to_lowercase().contains("embedding"), "the model is told nothing about it: {result}");
    assert!(search(&h, "car").await.contains("No match for \"car\""));
    assert!(!h.llm.embedding_calls().is_empty(), "it was asked");
    h.stop().await;
}

#[tokio::test]
async fn embeddings_are_off_by_default() {
    let h = start(false, CAR_MEMORY).await;
    assert!(search(&h, "automobile").await.contains("1. MEMORY.md line 3"));
    assert!(h.llm.embedding_calls().is_empty(), "{:?}", h.llm.embedding_calls());
    h.stop().await;
}
