//! `switchboard runs`: recent runs for the operator.

use std::io::Write;

use crate::config::Config;
use crate::store::sqlite::SqliteStore;
use crate::store::{RunRecord, Store};

/// Prints the most recent runs as a table on stdout.
pub async fn print_runs(config: &Config, limit: usize) -> anyhow::Result<()> {
    let store = SqliteStore::open(config.store_path()).await?;
    let runs = store.recent_runs(limit).await?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{:<36}  {:<20}  {:<9}  {:>3}  {:>7}  {:>7}  {:<24}  SESSION",
        "RUN", "STARTED", "STATUS", "TRY", "IN", "OUT", "MODEL"
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
        "{:<36}  {:<20}  {:<9}  {:>3}  {:>7}  {:>7}  {:<24}  {}",
        run.run_id,
        run.started_at.format("%Y-%m-%d %H:%M:%S"),
        run.status.as_str(),
        run.attempt,
        run.usage.input_tokens,
        run.usage.output_tokens,
        run.model,
        run.session_key,
    );
    if let Some(error) = &run.error {
        line.push_str(&format!("\n    error: {error}"));
    }
    line
}
