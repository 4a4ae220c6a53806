//! Tool-loop detection in a run: a model that repeats itself gets a handful of calls and the
//! person an honest answer; a model that makes progress is left alone.

use serde_json::{Value, json};

use super::{Recorder, Scripted, agent, calls, text, turn};
use crate::agent::*;
use crate::provider::{ChatResponse, ProviderError, Role};

/// An agent whose loop detection is `limit`, playing `script`.
fn detecting(script: Vec<Result<ChatResponse, ProviderError>>, limit: u32) -> (Agent, Arc<Scripted>) {
    let (agent, provider) = agent(script, 20);
    let Agent { provider: dyn_provider, tools, settings, .. } = agent;
    (Agent::new(dyn_provider, tools, AgentSettings { loop_detection: limit, ..settings }), provider)
}

fn forever(step: &[(&str, Value)]) -> Vec<Result<ChatResponse, ProviderError>> {
    (0..20).map(|_| calls(step)).collect()
}

fn last_content(request: &crate::provider::ChatRequest<'_>) -> String {
    request.messages.last().unwrap().content.clone()
}

#[tokio::test]
async fn a_call_asked_for_a_third_time_is_not_run_and_the_model_answers() {
    let mut script: Vec<_> = (0..3).map(|_| calls(&[("current_time", json!({}))])).collect();
    script.push(text("It is noon."));
    let (agent, provider) = agent(script, 20);
    let result = agent.run(turn(vec![], "what time is it?", &Recorder::default())).await;
    assert_eq!((result.reply.as_str(), result.error.as_deref()), ("It is noon.", None));
    let requests = provider.requests.lock().unwrap();
    assert_eq!(requests.len(), 4);
    assert!(!last_content(&requests[2]).contains("not run"), "the second time it runs: {}", last_content(&requests[2]));
    let told = last_content(&requests[3]);
    assert!(told.starts_with("error: not run: this is a loop") && told.contains("`current_time`"), "{told}");
    // Nothing else changes in the request: the prompt's head (and the provider's cache) holds.
    assert!(requests[1..].iter().all(|request| request.tool_choice == ToolChoice::Auto));
    assert!(requests.iter().all(|request| request.tools.len() == requests[0].tools.len()));
}

#[tokio::test]
async fn a_model_that_repeats_one_call_forever_gets_n_plus_one_calls_and_an_honest_answer() {
    for limit in [3, 5] {
        let (agent, provider) = detecting(forever(&[("current_time", json!({}))]), limit);
        let result = agent.run(turn(vec![], "what time is it?", &Recorder::default())).await;
        assert_eq!(provider.requests.lock().unwrap().len(), limit as usize + 1, "not twenty calls");
        assert!(result.reply.contains("kept repeating the same step"), "{}", result.reply);
        assert!(result.error.as_deref().is_some_and(|error| error.contains("current_time")), "{:?}", result.error);
        // Every call has its result, so the next turn's history is valid.
        let transcript = &result.transcript;
        assert_eq!(transcript.iter().filter(|m| m.role == Role::Tool).count(), limit as usize + 1);
        assert_eq!(transcript.last().unwrap().role, Role::Tool);
    }
}

#[tokio::test]
async fn a_model_that_alternates_two_calls_is_stopped_too() {
    let read = ("read_file", json!({"path": "notes.md"}));
    let list = ("list_dir", json!({"path": "."}));
    let script = (0..20).map(|n| calls(&[if n % 2 == 0 { read.clone() } else { list.clone() }])).collect();
    let (agent, provider) = agent(script, 20);
    let result = agent.run(turn(vec![], "tidy my notes", &Recorder::default())).await;
    let requests = provider.requests.lock().unwrap();
    // A, B, A, B is the loop (the fourth call is not run), A once more ends the run.
    assert_eq!(requests.len(), 5);
    let told = last_content(&requests[4]);
    assert!(told.contains("alternating between `read_file` and `list_dir`"), "{told}");
    assert!(result.reply.contains("kept repeating the same step"), "{}", result.reply);
}

#[tokio::test]
async fn the_same_arguments_in_another_key_order_are_the_same_call() {
    let orders = [r#"{"path": ".", "depth": 1}"#, r#"{"depth":1,"path":"."}"#, "{ \"path\" : \".\",\n\"depth\" : 1 }"];
    let script =
        (0..20).map(|n| calls(&[("list_dir", serde_json::from_str::<Value>(orders[n % 3]).unwrap())])).collect();
    let (agent, provider) = agent(script, 20);
    agent.run(turn(vec![], "look around", &Recorder::default())).await;
    assert_eq!(provider.requests.lock().unwrap().len(), 4);
}

#[tokio::test]
async fn the_same_tool_with_other_arguments_is_not_a_loop() {
    let mut script: Vec<_> =
        (0..8).map(|n| calls(&[("current_time", json!({"timezone": format!("UTC+{n}")}))])).collect();
    script.push(text("done"));
    let (agent, provider) = agent(script, 20);
    let result = agent.run(turn(vec![], "times around the world", &Recorder::default())).await;
    assert_eq!((result.reply.as_str(), result.error), ("done", None));
    let requests = provider.requests.lock().unwrap();
    assert_eq!(requests.len(), 9, "each call ran");
    assert!(requests.iter().all(|request| !last_content(request).contains("not run")));
}

#[tokio::test]
async fn only_the_repeated_call_of_a_step_is_held_back_and_results_keep_call_order() {
    let mut script: Vec<_> =
        (0..3).map(|n| calls(&[("current_time", json!({})), ("nap", json!({"ms": n + 1}))])).collect();
    script.push(text("rested"));
    let (agent, provider) = agent(script, 20);
    let result = agent.run(turn(vec![], "nap and tell the time", &Recorder::default())).await;
    assert_eq!(result.reply, "rested");
    let requests = provider.requests.lock().unwrap();
    let results: Vec<&str> =
        requests[3].messages.iter().rev().take(2).rev().map(|message| message.content.as_str()).collect();
    assert!(results[0].starts_with("error: not run: this is a loop"), "{results:?}");
    assert_eq!(results[1], "napped 3");
}

#[tokio::test]
async fn zero_turns_the_detection_off() {
    let (agent, provider) = detecting(forever(&[("current_time", json!({}))]), 0);
    let result = agent.run(turn(vec![], "what time is it?", &Recorder::default())).await;
    assert_eq!(provider.requests.lock().unwrap().len(), 20);
    assert!(result.reply.contains("stopped after 20 steps"), "{}", result.reply);
}
