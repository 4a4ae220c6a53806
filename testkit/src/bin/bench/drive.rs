//! The closed loops: each chat sends its next message once the reply to the previous one came.
//! Every message carries a token of its own, which the fake model's echo carries into the
//! reply, so each reply is matched to its message: a second reply to one message is a
//! duplicate, a message without one by the end is lost.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchboard_testkit::fake_telegram::{FakeTelegram, updates};
use tokio::sync::Mutex;

use crate::options::Options;

/// The tool a guest may call (`--tool`): cheap, no arguments.
pub const TOOL: &str = "current_time";
/// Telegram user ids of the bench's chats start here (one private chat per user).
const FIRST_USER: i64 = 700_000;

/// The Telegram user of chat `chat`.
pub fn user_of(chat: usize) -> i64 {
    FIRST_USER + chat as i64
}

pub fn tool_arguments() -> Value {
    json!({})
}

/// What came back.
#[derive(Debug, Default)]
pub struct Tally {
    pub sent: usize,
    pub answered: usize,
    pub duplicates: usize,
    /// Milliseconds from each message to its reply.
    pub latencies: Vec<f64>,
    pub elapsed: Duration,
}

impl Tally {
    pub fn lost(&self) -> usize {
        self.sent - self.answered
    }
}

/// The token of chat `chat`'s message `n`.
fn token(chat: usize, n: usize) -> String {
    format!("t{chat}x{n}")
}

/// The token a reply echoes, if any.
fn echoed_token(text: &str) -> Option<(usize, usize)> {
    let token = text.split_whitespace().find(|word| word.starts_with('t') && word.contains('x'))?;
    let (chat, n) = token[1..].split_once('x')?;
    Some((chat.parse().ok()?, n.parse().ok()?))
}

/// Waits for the daemon's first `getUpdates`: start-up as a Telegram user meets it.
pub async fn first_poll(telegram: &FakeTelegram, spawned: Instant) -> Duration {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        if let Some(call) = telegram.calls_to("getUpdates").first() {
            return call.at.saturating_duration_since(spawned);
        }
        assert!(Instant::now() < deadline, "the daemon never polled the fake Bot API");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Messages through the Telegram channel: each chat a private chat of its own user.
pub async fn telegram(fake: &FakeTelegram, opts: &Options) -> Tally {
    let mut feed = fake.sent_feed();
    let mut tally = Tally { sent: opts.chats, ..Tally::default() };
    // Per chat: the message awaiting its reply and when it was sent.
    let mut waiting: Vec<Option<(usize, Instant)>> = vec![None; opts.chats];
    let mut answered: HashMap<(usize, usize), ()> = HashMap::new();
    let started = Instant::now();
    let message = |chat: usize, n: usize| {
        let text = format!("message {n} of chat {chat}: how are you today? {}", token(chat, n));
        updates::private_text(user_of(chat), &format!("bench{chat}"), n as i64 + 1, &text)
    };
    let push = |chat: usize, n: usize| {
        fake.push_message(message(chat, n));
    };
    for (chat, slot) in waiting.iter_mut().enumerate() {
        push(chat, 0);
        *slot = Some((0, Instant::now()));
    }
    while tally.answered < tally.sent {
        let Ok(Some(sent)) = tokio::time::timeout(opts.reply_timeout, feed.recv()).await else { break };
        let Some((chat, n)) = sent.text.as_deref().and_then(echoed_token) else { continue };
        if answered.insert((chat, n), ()).is_some() {
            tally.duplicates += 1;
            continue;
        }
        tally.answered += 1;
        if let Some(Some((expected, at))) = waiting.get(chat).copied()
            && expected == n
        {
            tally.latencies.push(at.elapsed().as_secs_f64() * 1000.0);
            if n + 1 < opts.messages {
                push_after(fake, opts.pause, message(chat, n + 1));
                waiting[chat] = Some((n + 1, Instant::now() + opts.pause));
                tally.sent += 1;
            }
        }
    }
    tally.elapsed = started.elapsed();
    // Late duplicates: a moment more to see any.
    while let Ok(Some(sent)) = tokio::time::timeout(Duration::from_millis(500), feed.recv()).await {
        if sent.text.as_deref().and_then(echoed_token).is_some_and(|key| answered.contains_key(&key)) {
            tally.duplicates += 1;
        }
    }
    tally
}

/// Queues `message` after `pause` (a person reading the reply and typing the next).
fn push_after(fake: &FakeTelegram, pause: Duration, message: Value) {
    if pause.is_zero() {
        fake.push_message(message);
        return;
    }
    let fake = fake.clone();
    tokio::spawn(async move {
        tokio::time::sleep(pause).await;
        fake.push_message(message);
    });
}

/// Messages through the API channel: each chat one client that posts and waits for the reply.
pub async fn api(port: u16, opts: &Options) -> Tally {
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}/v1/messages");
    let results = Arc::new(Mutex::new(Tally::default()));
    let started = Instant::now();
    let mut chats = tokio::task::JoinSet::new();
    for chat in 0..opts.chats {
        let (client, url, results, messages) = (client.clone(), url.clone(), Arc::clone(&results), opts.messages);
        let timeout = opts.reply_timeout;
        chats.spawn(async move {
            for n in 0..messages {
                let body =
                    json!({"chat_id": format!("bench-{chat}"), "content": format!("message {n}: {}", token(chat, n))});
                let at = Instant::now();
                let reply = client.post(&url).json(&body).timeout(timeout).send().await;
                let echoed = match reply {
                    Ok(response) if response.status().is_success() => response.json::<Value>().await.ok(),
                    _ => None,
                };
                let matched =
                    echoed.as_ref().and_then(|v| v["reply"].as_str()).and_then(echoed_token) == Some((chat, n));
                let mut tally = results.lock().await;
                tally.sent += 1;
                if !matched {
                    break;
                }
                tally.answered += 1;
                tally.latencies.push(at.elapsed().as_secs_f64() * 1000.0);
            }
        });
    }
    while chats.join_next().await.is_some() {}
    let mut tally = std::mem::take(&mut *results.lock().await);
    tally.elapsed = started.elapsed();
    tally
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_is_matched_to_its_message_by_the_echoed_token() {
        let text = format!("echo: message 3 of chat 12: how are you today? {}", token(12, 3));
        assert_eq!(echoed_token(&text), Some((12, 3)));
        assert_eq!(echoed_token("echo: today"), None);
    }
}
