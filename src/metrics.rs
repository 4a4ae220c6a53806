//! The Prometheus endpoint (`[metrics] listen`): the process's counters and histograms (runs,
//! latencies, tokens and cost, redeliveries, dead letters, send errors and 429s; see
//! `switchboard_channels::meters`), the bus's queue depths, and what the process holds in
//! memory and how many tasks it runs, read from the running parts at each scrape, so an
//! operator (and the soak test) can see that none of it grows with the number of messages.

use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use switchboard_channels::meters::meters;
use switchboard_channels::{Bus, Gauge};
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// OpenMetrics text, which Prometheus reads.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug, Error)]
pub enum MetricsError {
    #[error("cannot listen for metrics on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
}

/// A part of the process that reports what it holds.
pub type GaugeSource = Box<dyn Fn() -> Vec<Gauge> + Send + Sync>;

/// How long a scrape waits for the bus's server to say how many messages it holds.
const QUEUE_DEPTH_TIMEOUT: Duration = Duration::from_secs(2);

/// The gauges read at each scrape.
struct Gauges {
    runtime: tokio::runtime::Handle,
    sources: Vec<GaugeSource>,
    /// The bus server's queue depths, fetched by the scrape just before encoding.
    queues: Arc<Mutex<Vec<Gauge>>>,
}

impl fmt::Debug for Gauges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gauges").field("sources", &self.sources.len()).finish()
    }
}

impl Collector for Gauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let tasks = self.runtime.metrics().num_alive_tasks();
        gauge(&mut encoder, "tokio_alive_tasks", "Tasks alive in the async runtime", to_i64(tasks as u64))?;
        if let Some(process) = ProcessReading::take() {
            gauge(&mut encoder, "resident_memory_bytes", "Resident memory of the process", process.resident_bytes)?;
            gauge(
                &mut encoder,
                "resident_anon_bytes",
                "Resident anonymous memory (heap and stacks)",
                process.anon_bytes,
            )?;
            gauge(&mut encoder, "open_fds", "Open file descriptors", process.open_fds)?;
        }
        let queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner).clone();
        for part in self.sources.iter().flat_map(|source| source()).chain(queues) {
            gauge(&mut encoder, part.name, part.help, to_i64(part.value))?;
        }
        Ok(())
    }
}

fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: i64) -> fmt::Result {
    let gauge = ConstGauge::new(value);
    let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
    gauge.encode(metric)
}

fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// What `/proc/self` tells about this process; `None` where there is no such file system.
struct ProcessReading {
    resident_bytes: i64,
    anon_bytes: i64,
    open_fds: i64,
}

impl ProcessReading {
    fn take() -> Option<ProcessReading> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let kib = |key: &str| -> Option<i64> {
            let line = status.lines().find(|line| line.starts_with(key))?;
            line[key.len()..].trim().trim_end_matches("kB").trim().parse::<i64>().ok().map(|kib| kib * 1024)
        };
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count();
        Some(ProcessReading {
            resident_bytes: kib("VmRSS:")?,
            anon_bytes: kib("RssAnon:")?,
            open_fds: i64::try_from(open_fds).unwrap_or(i64::MAX),
        })
    }
}

/// What a scrape reads.
struct Scrape {
    registry: Registry,
    bus: Arc<dyn Bus>,
    queues: Arc<Mutex<Vec<Gauge>>>,
}

/// Binds `listen` and serves `GET /metrics` until `shutdown` is cancelled.
pub async fn start(
    listen: SocketAddr,
    sources: Vec<GaugeSource>,
    bus: Arc<dyn Bus>,
    shutdown: CancellationToken,
) -> Result<JoinHandle<()>, MetricsError> {
    let listener = TcpListener::bind(listen).await.map_err(|source| MetricsError::Bind { addr: listen, source })?;
    let addr = listener.local_addr().unwrap_or(listen);
    let mut registry = Registry::with_prefix("switchboard");
    let queues = Arc::new(Mutex::new(Vec::new()));
    let runtime = tokio::runtime::Handle::current();
    registry.register_collector(Box::new(Gauges { runtime, sources, queues: Arc::clone(&queues) }));
    meters().register(&mut registry);
    let app = Router::new().route("/metrics", get(scrape)).with_state(Arc::new(Scrape { registry, bus, queues }));
    tracing::info!(%addr, "metrics listening");
    Ok(tokio::spawn(async move {
        let served = axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned()).await;
        if let Err(err) = served {
            tracing::warn!(%err, "the metrics endpoint stopped");
        }
    }))
}

async fn scrape(State(scrape): State<Arc<Scrape>>) -> Response {
    // A bus server that does not answer leaves its gauges out; the rest is still served.
    let depths = match tokio::time::timeout(QUEUE_DEPTH_TIMEOUT, scrape.bus.queue_depths()).await {
        Ok(Ok(depths)) => depths,
        Ok(Err(err)) => {
            tracing::warn!(%err, "cannot read the bus's queue depths for the metrics");
            Vec::new()
        }
        Err(_) => {
            tracing::warn!("the bus did not say its queue depths in time; left out of the metrics");
            Vec::new()
        }
    };
    *scrape.queues.lock().unwrap_or_else(PoisonError::into_inner) = depths;
    let mut text = String::new();
    match prometheus_client::encoding::text::encode(&mut text, &scrape.registry) {
        Ok(()) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(err) => {
            tracing::warn!(%err, "cannot encode the metrics");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}
