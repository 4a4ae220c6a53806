//! `switchboard runs`: recent runs for the operator.

use std::io::Write;

use super::CliError;
use crate::config::Config;
use crate::store::RunRecord;

/// Prints the most recent runs as a table on stdout.
pub(super) async fn print(config: &Config, limit: usize) -> Result<(), CliError> {
    let store = crate::store::open(&config.store).await?;
    let runs = store.recent_runs(limit).await?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{:<36}  {:<20}  {:<12}  {:<9}  {:>3}  {:>7}  {:>7}  {:>7}  {:>9}  {:<24}  SESSION",
        "RUN", "STARTED", "KIND", "STATUS", "TRY", "IN", "CACHED", "OUT", "COST", "MODEL"
    )?;
    for run in &runs {
        writeln!(out, "{}", format_run(run))?;
    }
    if runs.is_empty() {
        writeln!(out, "(no runs yet)")?;
    }
    Ok(())
}

fn format_run(run: &RunRecord) -> String {
    let mut line = format!(
        "{:<36}  {:<20}  {:<12}  {:<9}  {:>3}  {:>7}  {:>7}  {:>7}  {:>9}  {:<24}  {}",
        run.run_id,
        run.started_at.format("%Y-%m-%d %H:%M:%S"),
        run.kind.as_str(),
        run.status.as_str(),
        run.attempt,
        tokens(run.usage.input_tokens, run.usage.estimated),
        cached(&run.usage),
        tokens(run.usage.output_tokens, run.usage.estimated),
        format_cost(run.cost_usd),
        run.model,
        run.session_key,
    );
    if let Some(error) = &run.error {
        line.push_str(&format!("\n    error: {error}"));
    }
    line
}

/// A token count, `~` in front when switchboard estimated it (the provider reported none).
fn tokens(count: u64, estimated: bool) -> String {
    if estimated { format!("~{count}") } else { count.to_string() }
}

/// Input served from the provider's prompt cache, with what it wrote there when it says
/// (`1800+200w`): the part of IN billed at the cached prices.
fn cached(usage: &switchboard_channels::contract::Usage) -> String {
    match usage.cache_write_tokens {
        0 => usage.cache_read_tokens.to_string(),
        written => format!("{}+{written}w", usage.cache_read_tokens),
    }
}

/// `$0.0123`; `-` when unknown (a model without a price), which is not the same as free.
fn format_cost(cost: Option<f64>) -> String {
    cost.map_or_else(|| "-".to_owned(), |usd| format!("${usd:.4}"))
}

#[cfg(test)]
mod tests {
    use super::{cached, format_cost, tokens};
    use switchboard_channels::contract::Usage;

    #[test]
    fn estimated_counts_are_marked() {
        assert_eq!(tokens(1200, true), "~1200");
        assert_eq!(tokens(1200, false), "1200");
    }

    #[test]
    fn cached_input_shows_what_was_written_too() {
        assert_eq!(cached(&Usage::new(2000, 10).with_cache(1800, 0)), "1800");
        assert_eq!(cached(&Usage::new(2000, 10).with_cache(1500, 300)), "1500+300w");
    }

    #[test]
    fn unknown_cost_is_a_dash() {
        assert_eq!(format_cost(None), "-");
        assert_eq!(format_cost(Some(0.00123)), "$0.0012");
    }
}
