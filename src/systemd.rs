//! Telling systemd how the service is doing (`Type=notify`, `sd_notify(3)`): ready once it
//! serves, stopping when it begins to shut down, and a watchdog ping while its runtime runs
//! (`WatchdogSec=`), so a process whose runtime hangs is killed and restarted. Outside systemd
//! (no `NOTIFY_SOCKET`) nothing is sent.

use std::time::Duration;

use sd_notify::NotifyState;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The service serves: systemd starts what waits for it and counts it as started.
pub fn ready(status: &str) {
    notify(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// Says "stopping" as soon as `shutdown` is cancelled, while turns still finish within the
/// grace period, so systemd shows the unit as deactivating rather than hung.
pub fn stopping_on(shutdown: &CancellationToken) -> JoinHandle<()> {
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        shutdown.cancelled().await;
        notify(&[NotifyState::Stopping]);
    })
}

/// Pings systemd's watchdog at half its interval until `shutdown`, when the unit has one
/// (`WATCHDOG_USEC` for this process); `None` otherwise. The ping runs as a task on the
/// runtime, so it stops when the runtime stops making progress, which is what the watchdog
/// is for.
pub fn watchdog(shutdown: &CancellationToken) -> Option<JoinHandle<()>> {
    let every = watchdog_interval()? / 2;
    let shutdown = shutdown.clone();
    Some(tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        loop {
            tokio::select! {
                _ = ticks.tick() => notify(&[NotifyState::Watchdog]),
                () = shutdown.cancelled() => return,
            }
        }
    }))
}

/// `WATCHDOG_USEC`, when it is meant for this process: as `sd_watchdog_enabled(3)` reads it,
/// a `WATCHDOG_PID` naming another process means no, and none at all means this one (the
/// crate's own check wants the pid and would miss the second case).
fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok().filter(|usec| *usec > 0)?;
    match std::env::var("WATCHDOG_PID").ok().map(|pid| pid.parse::<u32>()) {
        Some(Ok(pid)) if pid != std::process::id() => None,
        Some(Err(_)) => None,
        _ => Some(Duration::from_micros(usec)),
    }
}

fn notify(states: &[NotifyState<'_>]) {
    if let Err(err) = sd_notify::notify(false, states) {
        tracing::warn!(%err, "cannot notify systemd");
    }
}
