//! `switchboard run`, `agent` and `channel <name>`: the daemon until a signal stops it.

use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::CliError;
use crate::config::Config;
use crate::daemon::{self, Parts};
use crate::doctor::Doctor;

/// Threads for blocking work: file reads (the workspace files of every turn, the file tools),
/// DNS lookups. Tokio allows 512; under a steady 20 messages a second the daemon kept 14 of
/// them, each with a stack and its own allocator cache. Each piece of such work takes
/// microseconds, so it may as well wait for one of a few threads.
const BLOCKING_THREADS: usize = 8;

pub(super) fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(BLOCKING_THREADS)
        .build()
        .map_err(CliError::Runtime)
}

pub(super) async fn serve(config: Config, parts: Parts, config_path: Option<PathBuf>) -> Result<(), CliError> {
    let shutdown = CancellationToken::new();
    tokio::spawn(stop_on_signal(shutdown.clone()));
    // The console's health page runs the doctor's checks on the config the daemon started with.
    let health = Arc::new(Doctor::new(config.clone()));
    daemon::run(config, parts, config_path, Some(health), shutdown).await?;
    Ok(())
}

/// Cancels `shutdown` on SIGINT or SIGTERM; a second signal exits at once.
async fn stop_on_signal(shutdown: CancellationToken) {
    wait_for_signal().await;
    tracing::info!("signal received; finishing running turns (send again to exit now)");
    shutdown.cancel();
    wait_for_signal().await;
    tracing::warn!("second signal; exiting without waiting");
    std::process::exit(130);
}

#[cfg(unix)]
async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        tracing::error!("cannot install signal handlers; stop the process with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}
