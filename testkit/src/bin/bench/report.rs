//! One run's figures and the line that shows them.

use std::time::Duration;

use switchboard_testkit::fake_llm::load::LoadInput;

use crate::drive::Tally;
use crate::options::Options;

#[derive(Debug, Default)]
pub struct Figures {
    pub startup: Duration,
    /// KiB resident after start-up, idle.
    pub idle_rss: u64,
    /// CPU milliseconds used while idle (over `--idle`).
    pub idle_cpu: u64,
    /// CPU milliseconds used during the load.
    pub cpu_ms: u64,
    /// KiB: the most resident at any time (`VmHWM`), and after the load.
    pub peak_rss: u64,
    pub after_rss: u64,
    pub tally: Tally,
    /// What the model was sent.
    pub input: Option<LoadInput>,
    /// Connections opened to the model and the Bot API during the load.
    pub connections: usize,
}

/// The `p`-th percentile (0–100) of sorted values, nearest rank.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

impl Figures {
    pub fn line(&self, label: &str, opts: &Options) -> String {
        let memory = format!(
            "start-up {:.1} ms | idle RSS {:.1} MiB, idle CPU {} ms in {} s",
            self.startup.as_secs_f64() * 1000.0,
            mib(self.idle_rss),
            self.idle_cpu,
            opts.idle.as_secs()
        );
        if opts.idle_only {
            return format!("{label:<7} {memory} | peak RSS {:.1} MiB", mib(self.peak_rss));
        }
        let tally = &self.tally;
        let mut latencies = tally.latencies.clone();
        latencies.sort_by(f64::total_cmp);
        let at = |p| percentile(&latencies, p);
        let delay = opts.delay.as_secs_f64() * 1000.0 * if opts.tool { 2.0 } else { 1.0 };
        let turns = tally.answered as f64;
        format!(
            "{label:<7} {:>7.0} turns/s | latency ms p50 {:.1} p90 {:.1} p99 {:.1} max {:.1} | overhead ms p50 {:.1} p99 {:.1} \
             | CPU/turn {:.3} ms | {memory} | peak RSS {:.1} MiB, after {:.1} MiB | connections opened {} \
             | {} sent, {} answered, lost {}, duplicated {}",
            turns / tally.elapsed.as_secs_f64(),
            at(50.0),
            at(90.0),
            at(99.0),
            at(100.0),
            at(50.0) - delay,
            at(99.0) - delay,
            self.cpu_ms as f64 / turns.max(1.0),
            mib(self.peak_rss),
            mib(self.after_rss),
            self.connections,
            tally.sent,
            tally.answered,
            tally.lost(),
            tally.duplicates,
        ) + self.input_line(opts).as_str()
    }

    /// The prompt tokens the model was sent per turn, and the share its cache served.
    fn input_line(&self, opts: &Options) -> String {
        let Some(input) = self.input.filter(|input| input.requests > 0) else { return String::new() };
        let turns = (self.tally.answered as f64).max(1.0);
        let mut line = format!(
            " | model calls/turn {:.2}, input tokens/turn {:.0}",
            input.requests as f64 / turns,
            input.tokens as f64 / turns
        );
        if opts.prompt_cache {
            let share = 100.0 * input.cached as f64 / (input.tokens as f64).max(1.0);
            line.push_str(&format!(
                " ({share:.1}% cached, {:.0} uncached/turn, p50 {} uncached/call)",
                (input.tokens - input.cached) as f64 / turns,
                input.uncached_p50
            ));
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 50.0), 50.0);
        assert_eq!(percentile(&values, 99.0), 99.0);
        assert_eq!(percentile(&values, 100.0), 100.0);
        assert_eq!(percentile(&[7.0], 50.0), 7.0);
    }
}
