//! A steady load on `switchboard run` for a long time, to see that memory, descriptors, tasks
//! and throughput stay flat. Not part of CI: it takes half an hour by default.
//!
//! cargo build --release && cargo run --release -p switchboard-testkit --bin soak
//! Options: --binary PATH (default target/release/switchboard), --minutes N (default 30),
//! --rate N (messages per second, default 20), --clients N (instead of a rate: N API clients
//! that each wait for their reply before sending the next message, as fast as the daemon
//! goes), --telegram (the messages come through the Telegram channel, from a fake Bot API,
//! instead of the API), --chats N (default 64), --sample N (seconds between readings, default
//! 10), --warmup N (minutes before the baseline, default 5), --nats (run on a test-spawned
//! NATS JetStream instead of the in-process bus).
//!
//! Prints one line per reading (resident memory and its anonymous and file-backed parts, open
//! descriptors, the runtime's tasks and the worker's, turns per second since the reading
//! before) and a verdict: from the minute after the warm-up to the last minute, resident
//! memory may grow 5 % and descriptors 8 (connections come and go); from the first minute to
//! the last, turns per second may fall 10 %. Each is the median of that minute's readings, so
//! one reading taken during a burst does not decide (the peak is printed too). Exits 1 when
//! one is exceeded or a message went unanswered.

mod load;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use load::Counts;
use switchboard_testkit::daemon_process::MeasuredDaemon;
use switchboard_testkit::fake_llm::FakeLlm;
use switchboard_testkit::fake_telegram::FakeTelegram;
use switchboard_testkit::nats::NatsServer;

/// Allowed growth of resident memory after the warm-up, in percent.
const MAX_RSS_GROWTH_PERCENT: f64 = 5.0;
/// Allowed growth of open descriptors after the warm-up (sockets of requests in flight).
const MAX_FD_GROWTH: i64 = 8;
/// Allowed fall of turns per second from the first minute to the last, in percent.
const MAX_THROUGHPUT_FALL_PERCENT: f64 = 10.0;

struct Options {
    binary: PathBuf,
    minutes: u64,
    rate: u64,
    clients: Option<u64>,
    telegram: bool,
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
        clients: None,
        telegram: false,
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
            "--clients" => opts.clients = Some(value().parse().expect("--clients N")),
            "--telegram" => opts.telegram = true,
            "--chats" => opts.chats = value().parse().expect("--chats N"),
            "--sample" => opts.sample = value().parse().expect("--sample N"),
            "--warmup" => opts.warmup = value().parse().expect("--warmup N"),
            "--nats" => opts.nats = true,
            other => panic!("unknown option {other}"),
        }
    }
    assert!(opts.warmup < opts.minutes, "--warmup must be shorter than --minutes");
    assert!(!(opts.telegram && opts.clients.is_some()), "--clients drives the API; with --telegram use --rate");
    opts
}

struct Reading {
    minute: f64,
    rss_kib: u64,
    anon_kib: u64,
    fds: usize,
    tasks: u64,
    worker_tasks: u64,
    turns_per_sec: f64,
}

/// The settings that point the daemon at the fake Bot API and let the soak's users in.
fn telegram_env(fake: &FakeTelegram, chats: u64) -> Vec<(&'static str, String)> {
    let users: Vec<String> = (0..chats).map(|n| format!("\"{}\"", load::FIRST_TELEGRAM_USER + n as i64)).collect();
    vec![
        ("TELEGRAM_BOT_TOKEN", FakeTelegram::TOKEN.to_owned()),
        ("SWITCHBOARD_CHANNELS__TELEGRAM__API_URL", fake.api_url()),
        ("SWITCHBOARD_CHANNELS__TELEGRAM__ALLOW_FROM", format!("[{}]", users.join(","))),
        // Each soak user sends about 19 messages a minute, more than a person's limit allows.
        ("SWITCHBOARD_RATE_LIMITS__GUEST", "0".to_owned()),
        ("SWITCHBOARD_RATE_LIMITS__USER", "0".to_owned()),
    ]
}

#[tokio::main]
async fn main() {
    let opts = options();
    let llm = Arc::new(FakeLlm::start().await);
    let nats = if opts.nats { Some(NatsServer::start().await) } else { None };
    let nats_url = nats.as_ref().map(NatsServer::url);
    let telegram = if opts.telegram { Some(FakeTelegram::start().await) } else { None };
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port();
    let mut env = vec![("SWITCHBOARD_METRICS__LISTEN", format!("127.0.0.1:{metrics_port}"))];
    env.extend(telegram.as_ref().map(|fake| telegram_env(fake, opts.chats)).unwrap_or_default());
    let env: Vec<(&str, &str)> = env.iter().map(|(key, value)| (*key, value.as_str())).collect();
    let (mut daemon, _) = MeasuredDaemon::launch(&opts.binary, &llm.base_url(), nats_url.as_deref(), &env).await;
    let shape = if opts.nats { "nats" } else { "in-process" };
    let via = if opts.telegram { "Telegram" } else { "API" };
    let load_text = match opts.clients {
        Some(clients) => format!("{clients} clients each waiting for its reply"),
        None => format!("{} msg/s", opts.rate),
    };
    println!("soak: {shape}, through the {via}, {load_text} over {} chats for {} min", opts.chats, opts.minutes);

    let counts = Arc::new(Counts::default());
    let started = Instant::now();
    let deadline = started + Duration::from_secs(opts.minutes * 60);
    let load = async {
        match (&telegram, opts.clients) {
            (Some(fake), _) => load::telegram_rate(fake, opts.rate, opts.chats, Arc::clone(&counts), deadline).await,
            (None, Some(clients)) => {
                load::api_closed_loop(daemon.port, clients, opts.chats, Arc::clone(&counts), deadline).await
            }
            (None, None) => load::api_rate(daemon.port, opts.rate, opts.chats, Arc::clone(&counts), deadline).await,
        }
    };
    let metrics = format!("http://127.0.0.1:{metrics_port}/metrics");
    wait_for_metrics(&metrics).await;
    let mut readings = Vec::new();
    let sampling = async {
        let mut every = tokio::time::interval(Duration::from_secs(opts.sample));
        let mut before = (Instant::now(), 0u64);
        while Instant::now() < deadline {
            every.tick().await;
            // The fake model server would otherwise keep every request body it received.
            llm.forget_requests();
            let answered = counts.answered.load(Ordering::Relaxed);
            let turns_per_sec = (answered - before.1) as f64 / before.0.elapsed().as_secs_f64();
            before = (Instant::now(), answered);
            let gauges = scrape(&metrics).await;
            let reading = Reading {
                minute: started.elapsed().as_secs_f64() / 60.0,
                rss_kib: daemon.rss_kib(),
                anon_kib: daemon.rss_anon_kib(),
                fds: daemon.open_fds(),
                tasks: gauges("switchboard_tokio_alive_tasks"),
                worker_tasks: gauges("switchboard_worker_tasks"),
                turns_per_sec,
            };
            print_reading(&reading, &counts);
            readings.push(reading);
        }
    };
    tokio::join!(load, sampling);
    let code = verdict(&opts, &readings, &counts, daemon.alive());
    // `exit` runs no destructors: stop the daemon (and the NATS server) first.
    drop(daemon);
    drop(nats);
    std::process::exit(code);
}

/// The metrics endpoint starts after the API channel the launch waited for.
async fn wait_for_metrics(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while reqwest::get(url).await.is_err() {
        assert!(Instant::now() < deadline, "the daemon's metrics endpoint at {url} never answered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The daemon's gauges by name. A reading without them would be no reading: a failed scrape
/// or a missing gauge stops the soak.
async fn scrape(url: &str) -> impl Fn(&str) -> u64 {
    let text = match reqwest::get(url).await {
        Ok(response) => response.text().await.expect("the metrics endpoint's answer"),
        Err(err) => panic!("cannot read the daemon's metrics at {url}: {err}"),
    };
    move |name: &str| {
        text.lines()
            .filter_map(|line| line.split_once(' '))
            .find(|(metric, _)| *metric == name)
            .and_then(|(_, value)| value.trim().parse().ok())
            .unwrap_or_else(|| panic!("the daemon's metrics lack {name}:\n{text}"))
    }
}

fn print_reading(reading: &Reading, counts: &Counts) {
    println!(
        "{:>6.1} min | RSS {:>7.1} MiB (anon {:>6.1}, file {:>6.1}) | fds {:>4} | tasks {:>4} (worker {:>3}) | {:>6.1} turns/s | sent {} answered {} failed {}",
        reading.minute,
        reading.rss_kib as f64 / 1024.0,
        reading.anon_kib as f64 / 1024.0,
        reading.rss_kib.saturating_sub(reading.anon_kib) as f64 / 1024.0,
        reading.fds,
        reading.tasks,
        reading.worker_tasks,
        reading.turns_per_sec,
        counts.sent.load(Ordering::Relaxed),
        counts.answered.load(Ordering::Relaxed),
        counts.failed.load(Ordering::Relaxed),
    );
}

/// The median of each measure over the readings taken within one minute from `from`.
fn minute_median(readings: &[Reading], from: f64) -> Option<Reading> {
    let window: Vec<&Reading> = readings.iter().filter(|r| r.minute >= from && r.minute < from + 1.0).collect();
    let median = |mut values: Vec<f64>| {
        values.sort_unstable_by(f64::total_cmp);
        values.get(values.len() / 2).copied()
    };
    let of = |measure: fn(&Reading) -> f64| median(window.iter().map(|r| measure(r)).collect());
    Some(Reading {
        minute: window.first()?.minute,
        rss_kib: of(|r| r.rss_kib as f64)? as u64,
        anon_kib: of(|r| r.anon_kib as f64)? as u64,
        fds: of(|r| r.fds as f64)? as usize,
        tasks: of(|r| r.tasks as f64)? as u64,
        worker_tasks: of(|r| r.worker_tasks as f64)? as u64,
        turns_per_sec: of(|r| r.turns_per_sec)?,
    })
}

fn percent(from: f64, to: f64) -> f64 {
    (to - from) / from.max(f64::MIN_POSITIVE) * 100.0
}

/// Prints the summary and returns the exit code.
fn verdict(opts: &Options, readings: &[Reading], counts: &Counts, alive: bool) -> i32 {
    let last_minute = readings.last().map_or(0.0, |r| r.minute - 1.0);
    let (Some(first), Some(baseline), Some(end)) = (
        minute_median(readings, 0.0),
        minute_median(readings, opts.warmup as f64),
        minute_median(readings, last_minute),
    ) else {
        println!("no reading after the warm-up; run longer");
        return 1;
    };
    let peak = readings.iter().map(|r| r.rss_kib).max().unwrap_or(end.rss_kib);
    let growth = percent(baseline.rss_kib as f64, end.rss_kib as f64);
    // Throughput against the very first minute: a turn must cost the same in a chat of ten
    // messages and of ten thousand.
    let throughput_change = percent(first.turns_per_sec, end.turns_per_sec);
    let fd_growth = end.fds as i64 - baseline.fds as i64;
    let (sent, answered, failed) = (
        counts.sent.load(Ordering::Relaxed),
        counts.answered.load(Ordering::Relaxed),
        counts.failed.load(Ordering::Relaxed),
    );
    println!(
        "RSS {:.1} MiB at {:.1} min → {:.1} MiB at {:.1} min ({growth:+.1} %, peak {:.1} MiB; anon {:.1} → {:.1} MiB, {:+.1} %)",
        baseline.rss_kib as f64 / 1024.0,
        baseline.minute,
        end.rss_kib as f64 / 1024.0,
        end.minute,
        peak as f64 / 1024.0,
        baseline.anon_kib as f64 / 1024.0,
        end.anon_kib as f64 / 1024.0,
        percent(baseline.anon_kib as f64, end.anon_kib as f64),
    );
    println!(
        "turns/s {:.1} in the first minute → {:.1} ({throughput_change:+.1} %); fds {} → {} ({fd_growth:+}); tasks {} → {}; {sent} sent, {answered} answered, {failed} failed",
        first.turns_per_sec, end.turns_per_sec, baseline.fds, end.fds, baseline.tasks, end.tasks,
    );
    let ok = alive
        && growth <= MAX_RSS_GROWTH_PERCENT
        && fd_growth <= MAX_FD_GROWTH
        && throughput_change >= -MAX_THROUGHPUT_FALL_PERCENT
        && failed == 0
        && answered == sent;
    println!("{}", if ok { "PASS" } else { "FAIL" });
    if ok { 0 } else { 1 }
}
