//! The two buses a scenario runs on, and reading what the worker sends on them.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use switchboard::assembly::Assembly;
use switchboard::config::Config;
use switchboard_channels::Bus;
use switchboard_channels::bus::Deliveries;
use switchboard_channels::contract::OutboundMessage;
use switchboard_testkit::nats::NatsServer;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusKind {
    /// The in-process bus.
    InProcess,
    /// A NATS JetStream server of the test's own.
    Nats,
}

/// A bus and, on NATS, the server behind it (which stops when this is dropped).
pub struct TestBus {
    pub bus: Arc<dyn Bus>,
    server: Option<NatsServer>,
}

impl TestBus {
    /// The bus as the production assembly connects it, without a journal.
    pub async fn start(kind: BusKind) -> TestBus {
        let server = match kind {
            BusKind::InProcess => None,
            BusKind::Nats => Some(NatsServer::start().await),
        };
        let bus = connect(server.as_ref()).await;
        TestBus { bus, server }
    }

    /// The bus as a second process would see it: the in-process bus is one per process, so
    /// it is shared; on NATS this is a connection of its own.
    pub async fn connect_again(&self) -> Arc<dyn Bus> {
        match &self.server {
            None => Arc::clone(&self.bus),
            Some(server) => connect(Some(server)).await,
        }
    }
}

/// The in-process bus, or a connection to `server`, with the default `[bus_options]`.
async fn connect(server: Option<&NatsServer>) -> Arc<dyn Bus> {
    let mut config = Config::default();
    config.bus_options.queue_capacity = 256;
    if let Some(server) = server {
        config.bus = server.url();
    }
    Assembly::new(config).connect_bus(None).await.unwrap()
}

/// Runs each scenario once per bus, as `in_process::<name>` and `nats::<name>`. Either
/// `both_buses!(scenario, ...)`, calling `scenario(kind)`, or
/// `both_buses! { name => scenario(args); ... }`, calling `scenario(kind, args)`.
#[macro_export]
macro_rules! both_buses {
    ($($name:ident),+ $(,)?) => {
        $crate::both_buses! { $($name => $name();)+ }
    };
    ($($name:ident => $f:ident($($arg:expr),*);)+) => {
        mod in_process {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() { super::$f($crate::common::BusKind::InProcess $(, $arg)*).await }
            )+
        }
        mod nats {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() { super::$f($crate::common::BusKind::Nats $(, $arg)*).await }
            )+
        }
    };
}

/// The next outbound message, acked.
pub async fn next_out(out: &mut Deliveries) -> OutboundMessage {
    let next = tokio::time::timeout(Duration::from_secs(15), out.next()).await;
    let delivery = next.expect("no outbound message").unwrap().unwrap();
    let msg = delivery.decode().unwrap();
    delivery.ack().await.unwrap();
    msg
}

/// Nothing more arrives within `wait` (after an effect that would have happened by then).
pub async fn nothing_more(out: &mut Deliveries, wait: Duration) {
    if let Ok(Some(Ok(delivery))) = tokio::time::timeout(wait, out.next()).await {
        panic!("unexpected outbound message {:?}", String::from_utf8_lossy(&delivery.payload));
    }
}
