//! How the agent copes with what model servers send and expect: no usage reported, a named
//! tool choice for small models.

use serde_json::json;
use switchboard_channels::contract::Usage;

use super::{Recorder, agent, calls, scripted_agent, turn};
use crate::agent::*;
use crate::provider::ChatResponse;
use crate::tools::ToolFilter;

#[tokio::test]
async fn a_provider_without_usage_is_charged_an_estimate() {
    let silent = |content: &str| Ok(ChatResponse { content: content.into(), ..ChatResponse::default() });
    let (quiet, _) = agent(vec![calls(&[("nap", json!({"ms": 1}))]), silent(&"long answer ".repeat(40))], 5);
    let result = quiet.run(turn(vec![], &"a question ".repeat(100), &Recorder::default())).await;
    let usage = result.usage;
    assert!(usage.estimated, "{usage:?}");
    // The first call reported 5 + 1; the second, unreported, sent the question (1100
    // characters) and the tool turn: its estimate is added, and the sum is marked estimated.
    assert!(usage.input_tokens >= 5 + 275, "{usage:?}");
    assert!(usage.output_tokens >= 120, "{usage:?}");
    // Reported usage stays as reported.
    let (reporting, _) = agent(vec![Ok(ChatResponse { usage: Usage::new(7, 3), ..ChatResponse::default() })], 5);
    let result = reporting.run(turn(vec![], "hi", &Recorder::default())).await;
    assert_eq!(result.usage, Usage::new(7, 3));
}

#[tokio::test]
async fn a_named_tool_choice_applies_to_the_first_call_of_a_turn_only() {
    let script = vec![
        calls(&[("nap", json!({"ms": 1}))]),
        Ok(ChatResponse { content: "done".into(), ..ChatResponse::default() }),
    ];
    let (agent, provider) = scripted_agent(script, ToolChoice::Named("nap".into()));
    let result = agent.run(turn(vec![], "nap please", &Recorder::default())).await;
    assert_eq!(result.reply, "done");
    let choices: Vec<ToolChoice> = provider.requests.lock().unwrap().iter().map(|r| r.tool_choice.clone()).collect();
    assert_eq!(choices, [ToolChoice::Named("nap".into()), ToolChoice::Auto]);

    // A sender who may not use the named tool is not asked to call it.
    let (agent, provider) = scripted_agent(
        vec![Ok(ChatResponse { content: "hi".into(), ..ChatResponse::default() })],
        ToolChoice::Named("nap".into()),
    );
    let only_time = ToolFilter::Only(["current_time".to_owned()].into());
    agent.run(Turn { tools: only_time, ..turn(vec![], "hi", &Recorder::default()) }).await;
    assert_eq!(provider.requests.lock().unwrap()[0].tool_choice, ToolChoice::Auto);
}
