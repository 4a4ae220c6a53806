//! What every route of the API channel shares: its state.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::ApiSettings;
use super::access::RateLimits;
use super::console::desk::ConsoleDesk;
use super::feed::RunFeed;
use super::replies::Replies;
use super::sockets::Sockets;
use super::store::ApiStore;
use crate::bus::Bus;

pub(super) struct AppState {
    pub(super) bus: Arc<dyn Bus>,
    pub(super) settings: ApiSettings,
    pub(super) replies: Arc<Replies>,
    pub(super) feed: Arc<RunFeed>,
    pub(super) rate_limits: RateLimits,
    /// Sessions, runs and the outbox.
    pub(super) store: Arc<dyn ApiStore>,
    /// The owner console's operations; `None`: its routes answer 503.
    pub(super) console: Option<Arc<dyn ConsoleDesk>>,
    pub(super) sockets: Arc<Sockets>,
    /// Cancelled when the channel stops accepting: WebSockets close then.
    pub(super) shutdown: CancellationToken,
}
