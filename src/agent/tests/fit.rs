//! Compaction inside a run: a run whose tool results outgrow the model's window shortens the
//! older ones before the call that would not fit, and goes on.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{Recorder, agent, calls, text, turn};
use crate::agent::*;
use crate::provider::{ChatRequest, Role, ToolCall};
use crate::tools::{Tool, ToolError};

/// Answers with `chars` characters of `fill`.
struct Big;

#[async_trait]
impl Tool for Big {
    fn name(&self) -> &str {
        "big"
    }
    fn description(&self) -> &str {
        "a long text"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"fill": {"type": "string"}, "chars": {"type": "integer"}}})
    }
    async fn execute(&self, args: Value, _: &ToolContext) -> Result<String, ToolError> {
        let fill = args["fill"].as_str().ok_or_else(|| ToolError::InvalidArguments("fill".into()))?;
        let chars = args["chars"].as_u64().unwrap_or(8_000) as usize;
        Ok(fill.repeat(chars))
    }
}

const NOTE: &str = "[shortened to fit the context window:";

fn big(fill: &str) -> (&'static str, Value) {
    ("big", json!({"fill": fill}))
}

/// What a request sends, as the budget counts it.
fn sent(request: &ChatRequest<'_>, tool_tokens: u64) -> u64 {
    crate::tokens::raw_messages(&request.messages) + tool_tokens
}

#[tokio::test]
async fn a_run_that_outgrows_the_window_shortens_its_oldest_results_and_answers() {
    let script = vec![calls(&[big("a")]), calls(&[big("b")]), calls(&[big("c")]), calls(&[big("d")]), text("done")];
    let (agent, provider) = agent(script, 10);
    let Agent { provider: dyn_provider, mut tools, settings, .. } = agent;
    tools.register(Arc::new(Big));
    let agent = Agent::new(dyn_provider, tools, settings);
    let tool_tokens = agent.tool_tokens(&crate::tools::ToolFilter::All);
    // An old exchange with a long result: the history before the turn is never shortened.
    let old = ToolCall { id: "old".into(), name: "big".into(), arguments: json!({"fill": "o"}) };
    let history = vec![
        ChatMessage::user("earlier"),
        ChatMessage::assistant("", vec![old.clone()]),
        ChatMessage::tool_result(&old, "o".repeat(8_000)),
        ChatMessage::assistant("ok", vec![]),
    ];
    // Room for the history (2,100 tokens), two whole results (2,000 each) and two shortened
    // ones, not four whole.
    let budget = tool_tokens + 2_100 + 4_700;
    let events = Recorder::default();
    let result = agent.run(Turn { budget: Some(budget), ..turn(history, "read them all", &events) }).await;
    assert_eq!((result.reply.as_str(), result.error.as_deref()), ("done", None));
    let requests = provider.requests.lock().unwrap();
    assert_eq!(requests.len(), 5, "no call was refused and repeated");
    assert!(requests.iter().all(|request| sent(request, tool_tokens) <= budget));
    let last: Vec<&str> = requests[4].messages.iter().map(|m| m.content.as_str()).collect();
    assert!(last[3] == "o".repeat(8_000), "the history is whole");
    let results: Vec<&str> =
        requests[4].messages[6..].iter().filter(|m| m.role == Role::Tool).map(|m| m.content.as_str()).collect();
    let shortened: Vec<bool> = results.iter().map(|result| result.contains(NOTE)).collect();
    assert_eq!(shortened, [true, true, false, false], "the oldest go first, the latest stay whole");
    assert!(results[0].starts_with(&"a".repeat(1_000)) && results[0].len() < 1_100);
    assert!(results[3] == "d".repeat(8_000));
    // Where a request differs from the one before (not just grows), it does so later each
    // time: the provider's cache keeps serving the part before, which grows too.
    let changed_at = |k: usize| {
        let (before, after) = (&requests[k - 1].messages, &requests[k].messages);
        before.iter().zip(after.iter()).position(|(a, b)| a != b)
    };
    let changes: Vec<usize> = (1..5).filter_map(changed_at).collect();
    assert_eq!(changes, [7, 9], "the first result of the run, then the second");
    // The transcript keeps what the model was last shown, so the next turn fits as well.
    let stored: Vec<&ChatMessage> = result.transcript.iter().filter(|m| m.role == Role::Tool).collect();
    assert!(stored[0].content.contains(NOTE) && !stored[3].content.contains(NOTE));
    assert!(result.shortened_tokens_sent > 0);
}

#[tokio::test]
async fn without_a_budget_nothing_is_shortened() {
    let script = vec![calls(&[big("a")]), calls(&[big("b")]), text("done")];
    let (agent, provider) = agent(script, 10);
    let Agent { provider: dyn_provider, mut tools, settings, .. } = agent;
    tools.register(Arc::new(Big));
    let agent = Agent::new(dyn_provider, tools, settings);
    let result = agent.run(turn(vec![], "read", &Recorder::default())).await;
    assert_eq!(result.reply, "done");
    let requests = provider.requests.lock().unwrap();
    assert!(requests[2].messages.iter().all(|m| !m.content.contains(NOTE)));
    assert_eq!(result.shortened_tokens_sent, 0);
}
