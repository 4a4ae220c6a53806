//! The loads the soak puts on the daemon: messages through the API at a steady rate or from
//! clients that each wait for their reply, or through the Telegram channel at a steady rate.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use switchboard_testkit::fake_telegram::{FakeTelegram, updates};
use tokio::sync::Semaphore;

/// Requests in flight at most; a slower daemon makes the load wait rather than pile up.
const MAX_IN_FLIGHT: usize = 64;
/// Telegram user ids of the soak's chats start here (one private chat per user).
pub const FIRST_TELEGRAM_USER: i64 = 700_000;

#[derive(Default)]
pub struct Counts {
    pub sent: AtomicU64,
    pub answered: AtomicU64,
    pub failed: AtomicU64,
}

/// Message `n`: mostly short, every tenth a paragraph, every hundredth `long` times the short
/// one, as chats go.
fn message(n: u64, long: usize) -> String {
    let base = format!("message {n}: what do you make of this? ");
    match n {
        n if n % 100 == 0 => base.repeat(long),
        n if n % 10 == 0 => base.repeat(10),
        _ => base,
    }
}

fn api_body(n: u64, chats: u64) -> serde_json::Value {
    // About 4 KB every hundredth message.
    serde_json::json!({"chat_id": format!("soak-{}", n % chats), "content": message(n, 100)})
}

/// Sends `rate` messages a second through the API over `chats` chats until `deadline`.
pub async fn api_rate(port: u16, rate: u64, chats: u64, counts: Arc<Counts>, deadline: Instant) {
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}/v1/messages");
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
    let mut n = 0u64;
    while Instant::now() < deadline {
        tick.tick().await;
        let Ok(permit) = Arc::clone(&in_flight).acquire_owned().await else { break };
        n += 1;
        let body = api_body(n, chats);
        let (client, url, counts) = (client.clone(), url.clone(), Arc::clone(&counts));
        counts.sent.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            post(&client, &url, &body, &counts).await;
            drop(permit);
        });
    }
    // Let the last requests finish.
    let _ = in_flight.acquire_many(MAX_IN_FLIGHT as u32).await;
}

/// `clients` clients each post a message and wait for its reply, then post the next, over
/// `chats` chats until `deadline`: as many turns as the daemon can do.
pub async fn api_closed_loop(port: u16, clients: u64, chats: u64, counts: Arc<Counts>, deadline: Instant) {
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}/v1/messages");
    let next = Arc::new(AtomicU64::new(0));
    let mut running = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let (client, url, next, counts) = (client.clone(), url.clone(), Arc::clone(&next), Arc::clone(&counts));
        running.spawn(async move {
            while Instant::now() < deadline {
                let n = next.fetch_add(1, Ordering::Relaxed) + 1;
                counts.sent.fetch_add(1, Ordering::Relaxed);
                post(&client, &url, &api_body(n, chats), &counts).await;
            }
        });
    }
    while running.join_next().await.is_some() {}
}

async fn post(client: &reqwest::Client, url: &str, body: &serde_json::Value, counts: &Counts) {
    let answered = client.post(url).json(body).send().await.is_ok_and(|r| r.status().is_success());
    let counter = if answered { &counts.answered } else { &counts.failed };
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Pushes `rate` private messages a second over `chats` Telegram users until `deadline`;
/// a message counts as answered when the bot has sent as many messages as were pushed.
pub async fn telegram_rate(fake: &FakeTelegram, rate: u64, chats: u64, counts: Arc<Counts>, deadline: Instant) {
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
    let mut n = 0u64;
    let mut answered_seen = Instant::now();
    while Instant::now() < deadline {
        tick.tick().await;
        n += 1;
        let user = FIRST_TELEGRAM_USER + (n % chats) as i64;
        // About 1.7 KB every hundredth message, so that each reply fits one Telegram message.
        let text = message(n, 40);
        fake.push_message(updates::private_text(user, &format!("soaker{}", n % chats), n as i64, &text));
        counts.sent.fetch_add(1, Ordering::Relaxed);
        if answered_seen.elapsed() >= Duration::from_secs(1) {
            counts.answered.store(fake.count_calls("sendMessage") as u64, Ordering::Relaxed);
            answered_seen = Instant::now();
        }
    }
    // The last replies: wait while they still come.
    let mut last = (fake.count_calls("sendMessage"), Instant::now());
    while (last.0 as u64) < counts.sent.load(Ordering::Relaxed) && last.1.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = fake.count_calls("sendMessage");
        if now != last.0 {
            last = (now, Instant::now());
        }
    }
    counts.answered.store(last.0 as u64, Ordering::Relaxed);
}
