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
        "{:<36}  {:<20}  {:<9}  {:>3}  {:>7}  {:>7}  {:>9}  {:<24}  SESSION",
        "RUN", "STARTED", "STATUS", "TRY", "IN", "OUT", "COST", "MODEL"
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
        "{:<36}  {:<20}  {:<9}  {:>3}  {:>7}  {:>7}  {:>9}  {:<24}  {}",
        run.run_id,
        run.started_at.format("%Y-%m-%d %H:%M:%S"),
        run.status.as_str(),
        run.attempt,
        tokens(run.usage.input_tokens, run.usage.estimated),
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

/// `$0.0123`; `-` when unknown (a model without a price), which is not the same as free.
fn format_cost(cost: Option<f64>) -> String {
    cost.map_or_else(|| "-".to_owned(), |usd| format!("${usd:.4}"))
}

#[cfg(test)]
mod tests {
    use super::{format_cost, tokens};

    #[test]
    fn estimated_counts_are_marked() {
        assert_eq!(tokens(1200, true), "~1200");
        assert_eq!(tokens(1200, false), "1200");
    }

    #[test]
    fn unknown_cost_is_a_dash() {
        assert_eq!(format_cost(None), "-");
        assert_eq!(format_cost(Some(0.00123)), "$0.0012");
    }
}
