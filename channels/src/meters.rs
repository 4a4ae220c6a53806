//! The process's counters and histograms for the metrics endpoint: runs, latencies, tokens
//! and cost, redeliveries, dead letters, and what the chat platforms refused.
//!
//! One set per process, recorded wherever the event happens (a worker's run, a model call, an
//! adapter's send) and read by the endpoint when `[metrics] listen` is set. Recording is a
//! few atomic operations, so it runs whether or not anyone scrapes.

use std::sync::OnceLock;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::contract::Usage;

/// How a run ended, or that it started.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum RunStage {
    started,
    completed,
    failed,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RunLabels {
    pub agent: String,
    pub channel: String,
    pub stage: RunStage,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub agent: String,
    pub channel: String,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum CallResult {
    ok,
    error,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelCallLabels {
    pub provider: String,
    pub model: String,
    pub result: CallResult,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum TokenKind {
    input,
    output,
    /// Part of `input`: served from the provider's prompt cache.
    cache_read,
    /// Part of `input`: written into the provider's prompt cache.
    cache_write,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabels {
    pub agent: String,
    pub model: String,
    pub kind: TokenKind,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CostLabels {
    pub agent: String,
    pub model: String,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum FlowLabel {
    inbound,
    outbound,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FlowLabels {
    pub flow: FlowLabel,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChannelLabels {
    pub channel: String,
}

/// What the loop detection of a run did: told the model (`warned`), or ended the run.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum LoopOutcome {
    warned,
    stopped,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolLoopLabels {
    pub agent: String,
    pub outcome: LoopOutcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AgentLabels {
    pub agent: String,
}

type Seconds = Family<RouteLabels, Histogram, fn() -> Histogram>;
type CallSeconds = Family<ModelCallLabels, Histogram, fn() -> Histogram>;

/// Every counter and histogram of the process.
#[derive(Debug)]
pub struct Meters {
    pub runs: Family<RunLabels, Counter>,
    pub run_seconds: Seconds,
    pub model_call_seconds: CallSeconds,
    pub tokens: Family<TokenLabels, Counter>,
    pub cost_usd: Family<CostLabels, Counter<f64, AtomicU64>>,
    pub redeliveries: Family<FlowLabels, Counter>,
    pub dead_letters: Family<FlowLabels, Counter>,
    pub send_errors: Family<ChannelLabels, Counter>,
    pub rate_limited: Family<ChannelLabels, Counter>,
    pub tool_loops: Family<ToolLoopLabels, Counter>,
    pub run_compactions: Family<AgentLabels, Counter>,
    pub expired: Family<RouteLabels, Counter>,
}

/// Turns last from well under a second (a command) to minutes (tools, slow local models):
/// 50 ms to about 27 minutes.
fn run_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.05, 2.0, 16))
}

/// One model call: 10 ms to about 5.5 minutes.
fn call_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 16))
}

impl Meters {
    fn new() -> Self {
        Self {
            runs: Family::default(),
            run_seconds: Family::new_with_constructor(run_buckets),
            model_call_seconds: Family::new_with_constructor(call_buckets),
            tokens: Family::default(),
            cost_usd: Family::default(),
            redeliveries: Family::default(),
            dead_letters: Family::default(),
            send_errors: Family::default(),
            rate_limited: Family::default(),
            tool_loops: Family::default(),
            run_compactions: Family::default(),
            expired: Family::default(),
        }
    }

    /// Adds every meter to `registry` (which shares them: recording goes on in place).
    pub fn register(&self, registry: &mut Registry) {
        registry.register("runs", "Runs started, completed and failed, by agent and channel", self.runs.clone());
        registry.register(
            "run_duration_seconds",
            "Time from a run's start to its stored outcome, by agent and channel",
            self.run_seconds.clone(),
        );
        registry.register(
            "model_call_duration_seconds",
            "Time of one model call, by provider and configured model",
            self.model_call_seconds.clone(),
        );
        registry.register("tokens", "Model tokens used, by agent and answering model", self.tokens.clone());
        registry.register(
            "cost_usd",
            "Model cost in US dollars, by agent and answering model (models without a price add nothing)",
            self.cost_usd.clone(),
        );
        registry.register(
            "redeliveries",
            "Bus deliveries taken that were delivered before (a worker or adapter died or gave them back)",
            self.redeliveries.clone(),
        );
        registry.register("dead_letters", "Messages set aside as impossible to process", self.dead_letters.clone());
        registry.register(
            "send_errors",
            "Sends to a chat platform that failed for good or were put off for later, by channel",
            self.send_errors.clone(),
        );
        registry.register(
            "rate_limited",
            "Answers from a chat platform that said to wait (HTTP 429), by channel",
            self.rate_limited.clone(),
        );
        registry.register(
            "tool_loops",
            "Runs whose model looped on tool calls, by agent and outcome (warned, or stopped for going on)",
            self.tool_loops.clone(),
        );
        registry.register(
            "run_compactions",
            "Model calls before which a run shortened its older tool results to fit the context window, by agent",
            self.run_compactions.clone(),
        );
        registry.register(
            "messages_expired",
            "Messages that waited longer than worker.max_wait_secs for their turn and were not run (a person's got a note), by agent and channel",
            self.expired.clone(),
        );
    }

    pub fn run_started(&self, agent: &str, channel: &str) {
        self.count_run(agent, channel, RunStage::started);
    }

    /// A run's outcome is stored: counted, and its duration observed.
    pub fn run_finished(&self, agent: &str, channel: &str, failed: bool, seconds: f64) {
        self.count_run(agent, channel, if failed { RunStage::failed } else { RunStage::completed });
        let route = RouteLabels { agent: agent.to_owned(), channel: channel.to_owned() };
        self.run_seconds.get_or_create(&route).observe(seconds);
    }

    fn count_run(&self, agent: &str, channel: &str, stage: RunStage) {
        let labels = RunLabels { agent: agent.to_owned(), channel: channel.to_owned(), stage };
        self.runs.get_or_create(&labels).inc();
    }

    pub fn model_call(&self, provider: &str, model: &str, ok: bool, seconds: f64) {
        let result = if ok { CallResult::ok } else { CallResult::error };
        let labels = ModelCallLabels { provider: provider.to_owned(), model: model.to_owned(), result };
        self.model_call_seconds.get_or_create(&labels).observe(seconds);
    }

    /// What a run used; `cost_usd` is `None` for a model without a price.
    pub fn usage(&self, agent: &str, model: &str, usage: Usage, cost_usd: Option<f64>) {
        let counts = [
            (TokenKind::input, usage.input_tokens),
            (TokenKind::output, usage.output_tokens),
            (TokenKind::cache_read, usage.cache_read_tokens),
            (TokenKind::cache_write, usage.cache_write_tokens),
        ];
        for (kind, count) in counts {
            if count > 0 {
                let labels = TokenLabels { agent: agent.to_owned(), model: model.to_owned(), kind };
                self.tokens.get_or_create(&labels).inc_by(count);
            }
        }
        if let Some(cost) = cost_usd.filter(|cost| *cost > 0.0) {
            let labels = CostLabels { agent: agent.to_owned(), model: model.to_owned() };
            self.cost_usd.get_or_create(&labels).inc_by(cost);
        }
    }

    pub fn redelivered(&self, flow: FlowLabel) {
        self.redeliveries.get_or_create(&FlowLabels { flow }).inc();
    }

    pub fn dead_lettered(&self, flow: FlowLabel) {
        self.dead_letters.get_or_create(&FlowLabels { flow }).inc();
    }

    pub fn send_failed(&self, channel: &str) {
        self.send_errors.get_or_create(&ChannelLabels { channel: channel.to_owned() }).inc();
    }

    /// A message waited past `worker.max_wait_secs` and was not run.
    pub fn expired(&self, agent: &str, channel: &str) {
        self.expired.get_or_create(&RouteLabels { agent: agent.to_owned(), channel: channel.to_owned() }).inc();
    }

    pub fn told_to_wait(&self, channel: &str) {
        self.rate_limited.get_or_create(&ChannelLabels { channel: channel.to_owned() }).inc();
    }

    pub fn tool_loop(&self, agent: &str, outcome: LoopOutcome) {
        self.tool_loops.get_or_create(&ToolLoopLabels { agent: agent.to_owned(), outcome }).inc();
    }

    pub fn run_compacted(&self, agent: &str) {
        self.run_compactions.get_or_create(&AgentLabels { agent: agent.to_owned() }).inc();
    }
}

/// The process's meters.
pub fn meters() -> &'static Meters {
    static METERS: OnceLock<Meters> = OnceLock::new();
    METERS.get_or_init(Meters::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exposition(meters: &Meters) -> String {
        let mut registry = Registry::with_prefix("switchboard");
        meters.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    #[test]
    fn runs_are_counted_by_agent_channel_and_stage() {
        let meters = Meters::new();
        meters.run_started("main", "telegram");
        meters.run_finished("main", "telegram", false, 1.5);
        meters.run_started("main", "telegram");
        meters.run_finished("main", "telegram", true, 0.2);
        let text = exposition(&meters);
        assert!(
            text.contains(r#"switchboard_runs_total{agent="main",channel="telegram",stage="started"} 2"#),
            "{text}"
        );
        assert!(text.contains(r#"switchboard_runs_total{agent="main",channel="telegram",stage="failed"} 1"#), "{text}");
        assert!(
            text.contains(r#"switchboard_run_duration_seconds_count{agent="main",channel="telegram"} 2"#),
            "{text}"
        );
    }

    #[test]
    fn unknown_cost_adds_nothing_and_tokens_split_by_kind() {
        let meters = Meters::new();
        meters.usage("main", "gpt", Usage::new(100, 20).with_cache(80, 0), None);
        meters.usage("main", "gpt", Usage::new(50, 5).with_cache(0, 30), Some(0.25));
        let text = exposition(&meters);
        assert!(text.contains(r#"switchboard_tokens_total{agent="main",model="gpt",kind="cache_read"} 80"#), "{text}");
        assert!(text.contains(r#"switchboard_tokens_total{agent="main",model="gpt",kind="cache_write"} 30"#), "{text}");
        assert!(text.contains(r#"switchboard_tokens_total{agent="main",model="gpt",kind="input"} 150"#), "{text}");
        assert!(text.contains(r#"switchboard_tokens_total{agent="main",model="gpt",kind="output"} 25"#), "{text}");
        assert!(text.contains(r#"switchboard_cost_usd_total{agent="main",model="gpt"} 0.25"#), "{text}");
    }
}
