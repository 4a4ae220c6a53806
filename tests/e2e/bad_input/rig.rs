//! One daemon of either shape with every door the corpus knocks on: the HTTP API, the fake
//! Telegram, the fake Discord and (NATS shape) the JetStream server itself.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;
use switchboard_channels::Bus;
use switchboard_channels::bus::nats::{NatsBus, NatsOptions};
use switchboard_channels::contract::DeadLetter;
use switchboard_channels::subject::Flow;
use switchboard_testkit::fake_discord::FakeDiscord;
use switchboard_testkit::fake_llm::FakeLlm;
use switchboard_testkit::fake_telegram::FakeTelegram;
use switchboard_testkit::nats::NatsServer;
use tempfile::TempDir;

use crate::support::{Daemon, Launch};

/// The Telegram and Discord user allowed to talk to the bot.
pub const ALICE: i64 = 111;
/// A second allowed Telegram user.
pub const BOB: i64 = 112;
/// Alice's Discord DM channel.
pub const DM: u64 = 300;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `switchboard run`: in-process bus, SQLite journal.
    Embedded,
    /// `switchboard run --nats`: JetStream on a server the test spawns.
    Nats,
}

/// Which chat doors the daemon opens besides the API.
#[derive(Debug, Clone, Copy, Default)]
pub struct Doors {
    pub telegram: bool,
    pub discord: bool,
}

pub const API_ONLY: Doors = Doors { telegram: false, discord: false };
pub const TELEGRAM: Doors = Doors { telegram: true, discord: false };
pub const DISCORD: Doors = Doors { telegram: false, discord: true };

/// A running daemon and its fakes. Fields drop in order: the daemon dies before its NATS server.
pub struct Rig {
    pub shape: Shape,
    pub daemon: Daemon,
    pub llm: FakeLlm,
    pub telegram: FakeTelegram,
    pub discord: FakeDiscord,
    pub nats: Option<NatsServer>,
    pub dir: TempDir,
    pub started: Instant,
}

impl Rig {
    pub async fn start(shape: Shape, doors: Doors, env: &[(&str, &str)]) -> Rig {
        Self::start_with(shape, doors, env, |_, _| {}).await
    }

    /// [`Rig::start`], with `before` given the fakes before the daemon starts (updates queued
    /// there arrive in the daemon's first poll, in one batch).
    pub async fn start_with(
        shape: Shape,
        doors: Doors,
        env: &[(&str, &str)],
        before: impl FnOnce(&FakeTelegram, &FakeLlm),
    ) -> Rig {
        let started = Instant::now();
        let (llm, telegram, discord) =
            (FakeLlm::start().await, FakeTelegram::start().await, FakeDiscord::start().await);
        before(&telegram, &llm);
        let nats = match shape {
            Shape::Embedded => None,
            Shape::Nats => Some(NatsServer::start().await),
        };
        let dir = tempfile::tempdir().unwrap();
        let mut args = vec!["run".to_owned()];
        if let Some(nats) = &nats {
            args.extend(["--nats".to_owned(), nats.url()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        // Each message its own turn, so that every message's fate can be counted.
        let mut launch =
            Launch::new(dir.path(), "daemon", &args).llm(&llm.base_url()).env("SWITCHBOARD_WORKER__DEBOUNCE_MS", "0");
        if doors.telegram {
            launch = launch
                .env("TELEGRAM_BOT_TOKEN", FakeTelegram::TOKEN)
                .env("SWITCHBOARD_CHANNELS__TELEGRAM__API_URL", &telegram.api_url())
                .env("SWITCHBOARD_CHANNELS__TELEGRAM__POLL_TIMEOUT_SECS", "1")
                .env("SWITCHBOARD_CHANNELS__TELEGRAM__ALLOW_FROM", &format!("[\"{ALICE}\", \"{BOB}\"]"));
        }
        if doors.discord {
            launch = launch
                .env("DISCORD_BOT_TOKEN", FakeDiscord::TOKEN)
                .env("SWITCHBOARD_CHANNELS__DISCORD__PROXY_URL", &discord.url())
                .env("SWITCHBOARD_CHANNELS__DISCORD__ALLOW_FROM", &format!("[\"{ALICE}\"]"));
        }
        for (key, value) in env {
            launch = launch.env(key, value);
        }
        let mut daemon = launch.spawn();
        daemon.wait_healthy().await;
        if doors.telegram {
            daemon.wait_for_log("Telegram bot identified").await;
        }
        if doors.discord {
            discord.wait_connected(1, Duration::from_secs(15)).await;
        }
        Rig { shape, daemon, llm, telegram, discord, nats, dir, started }
    }

    /// The agent's workspace, where its file tools read.
    pub fn workspace(&self) -> PathBuf {
        self.dir.path().join("workspace")
    }

    /// A JetStream client on the rig's server (NATS shape only).
    pub async fn jetstream(&self) -> async_nats::jetstream::Context {
        let nats = self.nats.as_ref().expect("a NATS-shape rig");
        async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap())
    }

    /// The dead letters of one flow as switchboard reads them back (NATS shape only).
    pub async fn dead_letters(&self, flow: Flow) -> Vec<DeadLetter> {
        let nats = self.nats.as_ref().expect("a NATS-shape rig");
        let bus = NatsBus::connect(&nats.url(), NatsOptions::default()).await.unwrap();
        bus.dead_letters(flow, 10_000).await.unwrap()
    }

    /// Waits until `flow` holds at least `n` dead letters; returns them all.
    pub async fn wait_dead_letters(&self, flow: Flow, n: usize) -> Vec<DeadLetter> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let letters = self.dead_letters(flow).await;
            if letters.len() >= n || Instant::now() > deadline {
                return letters;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until the JetStream `streams` hold nothing: every message published to them was
    /// settled for good, none can come round again (NATS shape only).
    pub async fn wait_acked(&self, streams: &[&str]) {
        let nats = self.nats.as_ref().expect("a NATS-shape rig");
        crate::support::wait_streams_acked(&nats.url(), streams).await;
    }

    /// Waits until nothing is on its way: every Telegram update was fetched and confirmed (none
    /// is fetched again), and every message the daemon took in or sends out was acked (the
    /// NATS streams or the embedded shape's journal hold none).
    pub async fn wait_settled(&self) {
        let confirmed = eventually(Duration::from_secs(20), || self.telegram.pending_updates() == 0).await;
        assert!(confirmed, "Telegram updates never confirmed\n{}", self.logs());
        match self.shape {
            Shape::Nats => self.wait_acked(&["SWITCHBOARD_IN", "SWITCHBOARD_OUT"]).await,
            Shape::Embedded => crate::support::wait_journal_empty(self.dir.path()).await,
        }
    }

    /// After the corpus: the process is alive, never panicked, and a normal message is answered.
    pub async fn assert_still_healthy(&mut self) {
        assert!(self.daemon.is_alive(), "the daemon died:\n{}", self.daemon.logs());
        let (status, body) = self.daemon.post(json!({"chat_id": "after-the-corpus", "content": "still there?"})).await;
        assert_eq!((status, body["reply"].as_str()), (200, Some("echo: still there?")), "{body}\n{}", self.logs());
        assert!(self.daemon.is_alive(), "the daemon died:\n{}", self.daemon.logs());
        assert!(!self.daemon.logs().contains("panicked"), "a task panicked:\n{}", self.daemon.logs());
    }

    pub fn logs(&self) -> String {
        self.daemon.logs()
    }

    /// Prints how long the rig has run, for the report (`--no-capture` shows it).
    pub fn report(&self, what: &str) {
        eprintln!("[bad_input] {what} ({:?} shape): {:.1} s", self.shape, self.started.elapsed().as_secs_f64());
    }
}

/// Polls `check` until it is true or `timeout` passes; returns whether it became true.
pub async fn eventually(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while !check() {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}
