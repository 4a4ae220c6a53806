//! A steady load on `switchboard run` for a long time, to see that memory stays flat and no
//! descriptors leak. Not part of CI: it takes half an hour by default.
//!
//! cargo build --release && cargo run --release -p switchboard-testkit --bin soak
//! Options: --binary PATH (default target/release/switchboard), --minutes N (default 30),
//! --rate N (messages per second, default 20), --chats N (default 64), --sample N (seconds
//! between readings, default 10), --warmup N (minutes before the baseline, default 5),
//! --nats (run on a test-spawned NATS JetStream instead of the in-process bus).
//!
//! Prints one line per reading and a verdict: the growth of resident memory from the minute
//! after the warm-up to the last minute (at most 5 %) and of open descriptors (at most 8, for
//! the connections that come and go). Each of the two is the median of that minute's readings,
//! so one reading taken while a burst of turns is in flight does not decide the verdict (the
//! peak is printed too). Exits 1 when either is exceeded or a message went unanswered.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use switchboard_testkit::daemon_process::MeasuredDaemon;
use switchboard_testkit::fake_llm::FakeLlm;
use switchboard_testkit::nats::NatsServer;
use tokio::sync::Semaphore;

/// Allowed growth of resident memory after the warm-up, in percent.
const MAX_RSS_GROWTH_PERCENT: f64 = 5.0;
/// Allowed growth of open descriptors after the warm-up (sockets of requests in flight).
const MAX_FD_GROWTH: i64 = 8;
/// Requests in flight at most; a slower daemon makes the load wait rather than pile up.
const MAX_IN_FLIGHT: usize = 64;

struct Options {
    binary: PathBuf,
    minutes: u64,
    rate: u64,
    chats: u64,
    sample: u64,
    warmup: u64,
    nats: bool,
}

fn options() -> Options {
    let mut opts = Options {
        binary: PathBuf::from("target/release/switchboard"),
        minutes: 30,
        rate: 20,
        chats: 64,
        sample: 10,
        warmup: 5,
        nats: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--binary" => opts.binary = PathBuf::from(value()),
            "--minutes" => opts.minutes = value().parse().expect("--minutes N"),
            "--rate" => opts.rate = value().parse().expect("--rate N"),
            "--chats" => opts.chats = value().parse().expect("--chats N"),
            "--sample" => opts.sample = value().parse().expect("--sample N"),
            "--warmup" => opts.warmup = value().parse().expect("--warmup N"),
            "--nats" => opts.nats = true,
            other => panic!("unknown option {other}"),
        }
    }
    assert!(opts.warmup < opts.minutes, "--warmup must be shorter than --minutes");
    opts
}

#[derive(Default)]
struct Counts {
    sent: AtomicU64,
    answered: AtomicU64,
    failed: AtomicU64,
}

/// Message `n`: mostly short, every tenth a paragraph, every hundredth near 4 KB, as chats go.
fn message(n: u64) -> String {
    let base = format!("message {n}: what do you make of this? ");
    match n {
        n if n % 100 == 0 => base.repeat(100),
        n if n % 10 == 0 => base.repeat(10),
        _ => base,
    }
}

/// Sends `rate` messages a second over `chats` chats until `deadline`.
async fn steady_load(opts: &Options, port: u16, counts: Arc<Counts>, deadline: Instant) {
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}/v1/messages");
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / opts.rate as f64));
    let mut n = 0u64;
    while Instant::now() < deadline {
        tick.tick().await;
        let Ok(permit) = Arc::clone(&in_flight).acquire_owned().await else { break };
        n += 1;
        let body = serde_json::json!({"chat_id": format!("soak-{}", n % opts.chats), "content": message(n)});
        let (client, url, counts) = (client.clone(), url.clone(), Arc::clone(&counts));
        counts.sent.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let answered = client.post(&url).json(&body).send().await.is_ok_and(|r| r.status().is_success());
            let counter = if answered { &counts.answered } else { &counts.failed };
            counter.fetch_add(1, Ordering::Relaxed);
            drop(permit);
        });
    }
    // Let the last requests finish.
    let _ = in_flight.acquire_many(MAX_IN_FLIGHT as u32).await;
}

struct Reading {
    minute: f64,
    rss_kib: u64,
    anon_kib: u64,
    fds: usize,
}

impl Reading {
    fn take(daemon: &MeasuredDaemon, started: Instant) -> Reading {
        Reading {
            minute: started.elapsed().as_secs_f64() / 60.0,
            rss_kib: daemon.rss_kib(),
            anon_kib: daemon.rss_anon_kib(),
            fds: daemon.open_fds(),
        }
    }
}

#[tokio::main]
async fn main() {
    let opts = options();
    let llm = Arc::new(FakeLlm::start().await);
    let nats = if opts.nats { Some(NatsServer::start().await) } else { None };
    let nats_url = nats.as_ref().map(NatsServer::url);
    let (mut daemon, _) = MeasuredDaemon::launch(&opts.binary, &llm.base_url(), nats_url.as_deref(), &[]).await;
    let shape = if opts.nats { "nats" } else { "in-process" };
    println!("soak: {shape}, {} msg/s over {} chats for {} min", opts.rate, opts.chats, opts.minutes);

    let counts = Arc::new(Counts::default());
    let started = Instant::now();
    let deadline = started + Duration::from_secs(opts.minutes * 60);
    let load = steady_load(&opts, daemon.port, Arc::clone(&counts), deadline);
    let mut readings = Vec::new();
    let sampling = async {
        let mut every = tokio::time::interval(Duration::from_secs(opts.sample));
        while Instant::now() < deadline {
            every.tick().await;
            // The fake model server would otherwise keep every request body it received.
            llm.forget_requests();
            let reading = Reading::take(&daemon, started);
            println!(
                "{:>6.1} min | RSS {:>7.1} MiB (anon {:>6.1}) | fds {:>4} | sent {} answered {} failed {}",
                reading.minute,
                reading.rss_kib as f64 / 1024.0,
                reading.anon_kib as f64 / 1024.0,
                reading.fds,
                counts.sent.load(Ordering::Relaxed),
                counts.answered.load(Ordering::Relaxed),
                counts.failed.load(Ordering::Relaxed),
            );
            readings.push(reading);
        }
    };
    tokio::join!(load, sampling);
    readings.push(Reading::take(&daemon, started));
    let code = verdict(&opts, &readings, &counts, daemon.alive());
    // `exit` runs no destructors: stop the daemon (and the NATS server) first.
    drop(daemon);
    drop(nats);
    std::process::exit(code);
}

/// The median of each measure over the readings taken within one minute from `from`.
fn minute_median(readings: &[Reading], from: f64) -> Option<Reading> {
    let window: Vec<&Reading> = readings.iter().filter(|r| r.minute >= from && r.minute < from + 1.0).collect();
    let median = |mut values: Vec<u64>| {
        values.sort_unstable();
        values.get(values.len() / 2).copied()
    };
    Some(Reading {
        minute: window.first()?.minute,
        rss_kib: median(window.iter().map(|r| r.rss_kib).collect())?,
        anon_kib: median(window.iter().map(|r| r.anon_kib).collect())?,
        fds: median(window.iter().map(|r| r.fds as u64).collect())? as usize,
    })
}

/// Prints the summary and returns the exit code.
fn verdict(opts: &Options, readings: &[Reading], counts: &Counts, alive: bool) -> i32 {
    let last_minute = readings.last().map_or(0.0, |r| r.minute - 1.0);
    let (Some(baseline), Some(end)) =
        (minute_median(readings, opts.warmup as f64), minute_median(readings, last_minute))
    else {
        println!("no reading after the warm-up; run longer");
        return 1;
    };
    let peak = readings.iter().map(|r| r.rss_kib).max().unwrap_or(end.rss_kib);
    let growth = (end.rss_kib as f64 - baseline.rss_kib as f64) / baseline.rss_kib as f64 * 100.0;
    let anon_growth = (end.anon_kib as f64 - baseline.anon_kib as f64) / baseline.anon_kib.max(1) as f64 * 100.0;
    let fd_growth = end.fds as i64 - baseline.fds as i64;
    let (sent, answered, failed) = (
        counts.sent.load(Ordering::Relaxed),
        counts.answered.load(Ordering::Relaxed),
        counts.failed.load(Ordering::Relaxed),
    );
    println!(
        "RSS {:.1} MiB at {:.1} min → {:.1} MiB at {:.1} min ({growth:+.1} %, peak {:.1} MiB; anon {:.1} → {:.1} MiB, {anon_growth:+.1} %); fds {} → {} ({fd_growth:+}); {sent} sent, {answered} answered, {failed} failed",
        baseline.rss_kib as f64 / 1024.0,
        baseline.minute,
        end.rss_kib as f64 / 1024.0,
        end.minute,
        peak as f64 / 1024.0,
        baseline.anon_kib as f64 / 1024.0,
        end.anon_kib as f64 / 1024.0,
        baseline.fds,
        end.fds,
    );
    let ok = alive && growth <= MAX_RSS_GROWTH_PERCENT && fd_growth <= MAX_FD_GROWTH && failed == 0 && answered == sent;
    println!("{}", if ok { "PASS" } else { "FAIL" });
    if ok { 0 } else { 1 }
}
