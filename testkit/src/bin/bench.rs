//! Measures `switchboard run` as a user sees it: start-up time, idle memory, CPU used while
//! idle (the cron scheduler, heartbeats and the sub-agent reaper tick in the background), and
//! turns per second through the API channel with a model server that answers instantly, on the
//! in-process bus and on NATS JetStream.
//!
//! cargo build --release && cargo run --release -p switchboard-testkit --bin bench
//! Options: --binary PATH (default target/release/switchboard), --seconds N (default 10),
//! --clients N (default 32), --chats N (default 64), --idle N (seconds of idling measured for
//! CPU, default 20), --skip-nats.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use switchboard_testkit::daemon_process::MeasuredDaemon;
use switchboard_testkit::fake_llm::FakeLlm;
use switchboard_testkit::nats::NatsServer;

struct Options {
    binary: PathBuf,
    seconds: u64,
    clients: usize,
    chats: usize,
    idle: u64,
    nats: bool,
}

fn options() -> Options {
    let mut opts = Options {
        binary: PathBuf::from("target/release/switchboard"),
        seconds: 10,
        clients: 32,
        chats: 64,
        idle: 20,
        nats: true,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--binary" => opts.binary = PathBuf::from(value()),
            "--seconds" => opts.seconds = value().parse().expect("--seconds N"),
            "--clients" => opts.clients = value().parse().expect("--clients N"),
            "--chats" => opts.chats = value().parse().expect("--chats N"),
            "--idle" => opts.idle = value().parse().expect("--idle N"),
            "--skip-nats" => opts.nats = false,
            other => panic!("unknown option {other}"),
        }
    }
    opts
}

/// Posts messages from `clients` concurrent clients over `chats` chats for the given time.
async fn load(opts: &Options, port: u16) -> (u64, u64, Duration) {
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(opts.seconds);
    let url = format!("http://127.0.0.1:{port}/v1/messages");
    let mut tasks = Vec::new();
    for client_no in 0..opts.clients {
        let (done, failed, url) = (done.clone(), failed.clone(), url.clone());
        let chats = opts.chats;
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut n = 0usize;
            while Instant::now() < deadline {
                let chat = format!("chat-{}", (client_no + n * 7919) % chats);
                n += 1;
                let body = serde_json::json!({"chat_id": chat, "content": format!("message {n}")});
                match client.post(&url).json(&body).send().await {
                    Ok(r) if r.status().is_success() => done.fetch_add(1, Ordering::Relaxed),
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    let started = Instant::now();
    for task in tasks {
        let _ = task.await;
    }
    (done.load(Ordering::Relaxed), failed.load(Ordering::Relaxed), started.elapsed())
}

async fn measure(opts: &Options, llm: &FakeLlm, label: &str, nats: Option<&str>) {
    let (daemon, startup) = MeasuredDaemon::launch(&opts.binary, &llm.base_url(), nats, &[]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = daemon.rss_kib();
    let cpu_before = daemon.cpu_ms();
    tokio::time::sleep(Duration::from_secs(opts.idle)).await;
    let idle_cpu = daemon.cpu_ms().saturating_sub(cpu_before);
    let (ok, failed, elapsed) = load(opts, daemon.port).await;
    let after = daemon.rss_kib();
    println!(
        "{label:<10} start-up {:>6.1} ms | idle RSS {:>6.1} MiB | idle CPU {idle_cpu} ms in {} s | {:>7.0} turns/s ({ok} ok, {failed} failed, {} clients, {} chats, {:.1} s) | RSS after load {:>6.1} MiB",
        startup.as_secs_f64() * 1000.0,
        idle as f64 / 1024.0,
        opts.idle,
        ok as f64 / elapsed.as_secs_f64(),
        opts.clients,
        opts.chats,
        elapsed.as_secs_f64(),
        after as f64 / 1024.0,
    );
}

#[tokio::main]
async fn main() {
    let opts = options();
    let llm = FakeLlm::start().await;
    measure(&opts, &llm, "in-process", None).await;
    if opts.nats {
        let nats = NatsServer::start().await;
        measure(&opts, &llm, "nats", Some(&nats.url())).await;
    }
}
