//! A few thousand turns through the real binary: what the daemon holds (tasks, sessions,
//! queues, waiting requests) must come back to the same level however many turns it has
//! handled. Read from the metrics endpoint, so it counts, not times.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::support::{Daemon, Launch, free_port};
use serde_json::json;
use switchboard_testkit::fake_llm::FakeLlm;

const CLIENTS: u64 = 16;
const CHATS: u64 = 64;
/// Turns before the first reading: every chat has a history and the daemon is warm.
const WARM_TURNS: u64 = 500;
const TOTAL_TURNS: u64 = 2_500;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_daemon_holds_does_not_grow_with_the_turns_it_handled() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let metrics_port = free_port();
    let mut daemon = Launch::new(dir.path(), "steady", &["run"])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_METRICS__LISTEN", &format!("127.0.0.1:{metrics_port}"))
        .env("SWITCHBOARD_LOG", "warn")
        // One API sender, a guest, sends every turn: neither its budget nor its rate may stop it.
        .env("SWITCHBOARD_BUDGETS__GUEST", "0")
        .env("SWITCHBOARD_RATE_LIMITS__GUEST", "0")
        .spawn();
    daemon.wait_healthy().await;
    let metrics = format!("http://127.0.0.1:{metrics_port}/metrics");

    let answered = Arc::new(AtomicU64::new(0));
    load(&daemon, &llm, WARM_TURNS, &answered).await;
    let warm = settled(&metrics).await;
    load(&daemon, &llm, TOTAL_TURNS, &answered).await;
    let after = settled(&metrics).await;
    assert_eq!(answered.load(Ordering::Relaxed), TOTAL_TURNS);

    // Before the worker joined its finished tasks, each turn left one behind (about 6 KB).
    for gauge in ["switchboard_worker_tasks", "switchboard_worker_sessions", "switchboard_api_requests_waiting"] {
        assert_eq!(after[gauge], 0.0, "{gauge} after {TOTAL_TURNS} turns, with nothing left to do");
    }
    for (gauge, slack) in [
        ("switchboard_tokio_alive_tasks", 4.0),
        ("switchboard_worker_rate_limit_entries", 0.0),
        ("switchboard_bus_inbound_queued", 0.0),
        ("switchboard_bus_outbound_queued", 0.0),
        ("switchboard_api_replies_kept", 0.0),
        ("switchboard_open_fds", 4.0),
    ] {
        assert!(
            after[gauge] <= warm[gauge] + slack,
            "{gauge}: {} after {WARM_TURNS} turns, {} after {TOTAL_TURNS}",
            warm[gauge],
            after[gauge]
        );
    }
    assert!(daemon.is_alive());
}

/// Runs turns from `CLIENTS` clients, each waiting for its reply, until `answered` reaches
/// `until`.
async fn load(daemon: &Daemon, llm: &FakeLlm, until: u64, answered: &Arc<AtomicU64>) {
    let client = reqwest::Client::new();
    let url = daemon.url("/v1/messages");
    let next = Arc::new(AtomicU64::new(answered.load(Ordering::Relaxed)));
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..CLIENTS {
        let (client, url, next, answered) = (client.clone(), url.clone(), Arc::clone(&next), Arc::clone(answered));
        clients.spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= until {
                    break;
                }
                let body = json!({"chat_id": format!("steady-{}", n % CHATS), "content": format!("message {n}")});
                let response = client.post(&url).json(&body).send().await.unwrap();
                assert_eq!(response.status(), 200, "turn {n}: {}", response.text().await.unwrap_or_default());
                answered.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    while let Some(finished) = clients.join_next().await {
        finished.unwrap();
    }
    // The fake model would otherwise keep every request it received.
    llm.forget_requests();
}

/// The gauges once the daemon has nothing left to do: no worker task, no session.
async fn settled(metrics: &str) -> HashMap<String, f64> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut before: Option<f64> = None;
    loop {
        let gauges = scrape(metrics).await;
        let idle = gauges["switchboard_worker_tasks"] == 0.0 && gauges["switchboard_worker_sessions"] == 0.0;
        // The last turns' event publishers and connections end just after the turns: a task
        // count that still moves is not yet what the daemon holds.
        let tasks = gauges["switchboard_tokio_alive_tasks"];
        let steady = before == Some(tasks);
        if (idle && steady) || Instant::now() > deadline {
            return gauges;
        }
        before = idle.then_some(tasks);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `name value` lines of the OpenMetrics text, without labels (these gauges have none).
async fn scrape(metrics: &str) -> HashMap<String, f64> {
    let text = reqwest::get(metrics).await.unwrap().text().await.unwrap();
    let gauges: HashMap<String, f64> = text
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once(' '))
        .filter_map(|(name, value)| Some((name.to_owned(), value.trim().parse().ok()?)))
        .collect();
    assert!(gauges.contains_key("switchboard_worker_tasks"), "no worker gauges in:\n{text}");
    gauges
}
