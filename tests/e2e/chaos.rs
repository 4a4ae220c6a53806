//! The chaos test of the distributed shape: three workers, the API channel, NATS and
//! PostgreSQL, a model that takes a second; 200 chats × 5 messages, each chat sending its next
//! message after the reply to the previous one. Meanwhile a worker is killed with SIGKILL and
//! started again, nats-server restarts, PostgreSQL's connections are terminated, and the API
//! process is killed with SIGKILL and started again. Afterwards every message has exactly one
//! reply, its own; every chat's history is in order; no run is left running; nothing was
//! dead-lettered. The figures are printed. One variant runs the workers in network namespaces
//! of their own, each with its own local directory, so "another host" is real.

mod net;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchboard_channels::Bus;
use switchboard_channels::bus::nats::{NatsBus, NatsOptions};
use switchboard_channels::subject::Flow;
use switchboard_testkit::fake_llm::FakeLlm;
use switchboard_testkit::fake_llm::load::LoadModel;
use switchboard_testkit::nats::NatsServer;
use switchboard_testkit::postgres::TempDatabase;
use tempfile::TempDir;

use crate::support::{Daemon, Launch, free_port};
use net::{Forward, Namespace, forward};

const CHATS: usize = 200;
const PER_CHAT: usize = 5;
const WORKERS: usize = 3;
/// How long the model takes per answer.
const MODEL_DELAY: Duration = Duration::from_secs(1);
/// Chats start this far apart, so the faults hit a run in full swing.
const STAGGER: Duration = Duration::from_millis(40);
/// The whole run, faults and recovery included, must end within this.
const DEADLINE: Duration = Duration::from_secs(90);

/// Where a worker finds the shared services, and how it is started.
struct Place {
    home: TempDir,
    nats: String,
    database: String,
    llm: String,
    wrapper: Vec<String>,
    /// The namespace and the forwarders into it, for a worker on "another host".
    _network: Option<(Namespace, Vec<Forward>)>,
}

struct Deployment {
    nats: NatsServer,
    database: TempDatabase,
    _llm: FakeLlm,
    share: TempDir,
    places: Vec<Place>,
    api_dir: TempDir,
    api_port: u16,
}

/// `host:port` of a `scheme://user@host:port/db` URL, and the URL with another `host:port`.
fn url_authority(url: &str) -> (&str, impl Fn(&str) -> String + '_) {
    let after_at = url.rsplit_once('@').map_or(url, |(_, rest)| rest);
    let authority = after_at.split('/').next().unwrap_or(after_at);
    (authority, move |replacement: &str| url.replacen(authority, replacement, 1))
}

impl Deployment {
    async fn new(separate_hosts: bool) -> Deployment {
        let nats = NatsServer::start().await;
        let database = TempDatabase::create();
        let llm = FakeLlm::start_for_load(LoadModel::new(MODEL_DELAY, None)).await;
        let mut places = Vec::new();
        for index in 0..WORKERS {
            let home = tempfile::tempdir().unwrap();
            let place = if separate_hosts {
                another_host(home, u8::try_from(index).unwrap(), &nats, &database, &llm).await
            } else {
                let (nats, database, llm) = (nats.url(), database.url().to_owned(), llm.base_url());
                Place { home, nats, database, llm, wrapper: Vec::new(), _network: None }
            };
            places.push(place);
        }
        let (share, api_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        Deployment { nats, database, _llm: llm, share, places, api_dir, api_port: free_port() }
    }

    fn worker(&self, index: usize, name: &str) -> Daemon {
        let place = &self.places[index];
        let wrapper: Vec<&str> = place.wrapper.iter().map(String::as_str).collect();
        Launch::new(place.home.path(), name, &["agent", "--nats", &place.nats])
            .via(&wrapper)
            .llm(&place.llm)
            .env("SWITCHBOARD_STORE__DATABASE_URL", &place.database)
            .env("SWITCHBOARD_AGENT__WORKSPACE", &self.share.path().join("workspace").display().to_string())
            // Each message its own turn; one API sender per chat, neither rate-limited nor budgeted.
            .env("SWITCHBOARD_WORKER__DEBOUNCE_MS", "0")
            .env("SWITCHBOARD_RATE_LIMITS__GUEST", "0")
            .env("SWITCHBOARD_BUDGETS__GUEST", "0")
            .env("SWITCHBOARD_LOG", "info,switchboard=debug,switchboard_channels=debug")
            .spawn()
    }

    fn api(&self, name: &str) -> Daemon {
        Launch::new(self.api_dir.path(), name, &["channel", "api", "--nats", &self.nats.url()])
            .port(self.api_port)
            // A request whose reply is stuck comes back as a 504 and is retried.
            .env("SWITCHBOARD_CHANNELS__API__REPLY_TIMEOUT_SECS", "20")
            .env("SWITCHBOARD_LOG", "info")
            .spawn()
    }

    fn terminate_database_connections(&self) -> String {
        self.database.sql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
    }
}

/// A worker's place in a network namespace of its own, reaching NATS, PostgreSQL and the
/// model through forwarders on the link's test side.
async fn another_host(home: TempDir, index: u8, nats: &NatsServer, database: &TempDatabase, llm: &FakeLlm) -> Place {
    let namespace = Namespace::create(index);
    let host = namespace.host_ip.clone();
    let (pg_authority, pg_url) = url_authority(database.url());
    let pg_target = tokio::net::lookup_host(pg_authority).await.unwrap().next().unwrap();
    let llm_url = llm.base_url();
    let (llm_authority, llm_at) = url_authority(llm_url.strip_prefix("http://").unwrap_or(&llm_url));
    let llm_target: std::net::SocketAddr = llm_authority.parse().unwrap();
    let nats_target = std::net::SocketAddr::from(([127, 0, 0, 1], nats.port()));
    let forwards =
        vec![forward(&host, nats_target).await, forward(&host, pg_target).await, forward(&host, llm_target).await];
    let place = Place {
        home,
        nats: format!("nats://{}", forwards[0].addr),
        database: pg_url(&forwards[1].addr.to_string()),
        llm: format!("http://{}", llm_at(&forwards[2].addr.to_string())),
        wrapper: namespace.wrapper().iter().map(|part| part.to_string()).collect(),
        _network: None,
    };
    Place { _network: Some((namespace, forwards)), ..place }
}

/// What the chats saw.
#[derive(Default)]
struct Seen {
    /// (chat, message) → the reply ids that came back for it.
    replies: HashMap<(usize, usize), Vec<String>>,
    wrong: Vec<String>,
    retries: usize,
    max_delay: Duration,
}

/// One chat: its messages one after the other, each retried with its Idempotency-Key until
/// it is answered (the API process may be down, the reply late).
async fn chat(api: String, chat: usize, seen: Arc<Mutex<Seen>>) {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    for message in 0..PER_CHAT {
        let text = format!("c{chat:03}-m{message}");
        let started = Instant::now();
        loop {
            let body = json!({"chat_id": format!("chat-{chat:03}"), "content": text});
            let sent = client.post(&api).header("Idempotency-Key", &text).json(&body).send().await;
            let answer = match sent {
                Ok(response) if response.status() == 200 => response.json::<Value>().await.ok(),
                _ => None,
            };
            let Some(answer) = answer else {
                seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).retries += 1;
                tokio::time::sleep(Duration::from_millis(250)).await;
                continue;
            };
            let mut seen = seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if answer["reply"].as_str().is_none_or(|reply| !reply.ends_with(&text)) {
                seen.wrong.push(format!("{text} got {answer}"));
            }
            let reply_id = answer["reply_id"].as_str().unwrap_or_default().to_owned();
            seen.replies.entry((chat, message)).or_default().push(reply_id);
            seen.max_delay = seen.max_delay.max(started.elapsed());
            break;
        }
    }
}

async fn run_chaos(separate_hosts: bool) {
    let mut deployment = Deployment::new(separate_hosts).await;
    let mut workers: Vec<Daemon> = (0..WORKERS).map(|n| deployment.worker(n, &format!("worker-{n}"))).collect();
    for worker in &workers {
        worker.wait_for_log("worker started").await;
    }
    let mut api = deployment.api("api");
    api.wait_healthy().await;
    let url = format!("http://127.0.0.1:{}/v1/messages", deployment.api_port);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let started = Instant::now();
    let mut chats = tokio::task::JoinSet::new();
    for n in 0..CHATS {
        let (url, seen) = (url.clone(), Arc::clone(&seen));
        chats.spawn(async move {
            tokio::time::sleep(STAGGER * u32::try_from(n).unwrap()).await;
            chat(url, n, seen).await;
        });
    }

    let at = |secs: u64| tokio::time::sleep_until(tokio::time::Instant::from_std(started + Duration::from_secs(secs)));
    at(2).await;
    workers[0].kill_hard();
    at(4).await;
    workers.push(deployment.worker(0, "worker-0-again"));
    at(6).await;
    deployment.nats.restart().await;
    at(9).await;
    let terminated = deployment.terminate_database_connections();
    at(11).await;
    api.kill_hard();
    at(12).await;
    let api_again = deployment.api("api-again");

    let finished = tokio::time::timeout(DEADLINE, async {
        while let Some(done) = chats.join_next().await {
            done.unwrap();
        }
    })
    .await;
    let took = started.elapsed();
    let seen = std::mem::take(&mut *seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    let answered = seen.replies.len();
    let duplicates: usize = seen.replies.values().map(|ids| ids.len().saturating_sub(1)).sum();
    let database = &deployment.database;
    let resumed = database.sql("SELECT count(*) FROM runs WHERE attempt > 1");
    eprintln!(
        "chaos{}: {} messages, {answered} answered, {duplicates} duplicates, {} lost, {} wrong; \
         max delay {:?}; {} client retries; {resumed} runs resumed; {terminated} database connections \
         terminated; all done in {took:?}",
        if separate_hosts { " (workers in 3 network namespaces)" } else { "" },
        CHATS * PER_CHAT,
        CHATS * PER_CHAT - answered,
        seen.wrong.len(),
        seen.max_delay,
        seen.retries,
    );
    let logs = || keep_logs(workers.iter().chain([&api, &api_again]));
    let unanswered: Vec<String> = (0..CHATS)
        .flat_map(|c| (0..PER_CHAT).map(move |m| (c, m)))
        .filter(|key| !seen.replies.contains_key(key))
        .map(|(c, m)| format!("c{c:03}-m{m}"))
        .collect();
    if finished.is_err() {
        let state = bus_state(&deployment.nats).await;
        panic!("not every chat was answered within {DEADLINE:?}: {unanswered:?}; {state}; {}", logs());
    }
    assert_eq!((answered, duplicates), (CHATS * PER_CHAT, 0));
    assert!(seen.wrong.is_empty(), "replies to other messages: {:?}", seen.wrong);
    // Each message ran once (one run per inbound id) and finished; none is left running.
    assert_eq!(database.sql("SELECT count(*) FROM runs"), (CHATS * PER_CHAT).to_string());
    assert_eq!(database.sql("SELECT count(*) FROM runs WHERE status <> 'completed'"), "0", "{}", logs());
    assert_histories_in_order(database);
    let bus = NatsBus::connect(&deployment.nats.url(), NatsOptions::default()).await.unwrap();
    for flow in [Flow::In, Flow::Out] {
        let dead = bus.dead_letters(flow, 10).await.unwrap();
        assert!(dead.is_empty(), "dead-lettered: {dead:?}");
    }
}

/// What the inbound stream and the workers' consumer hold, for a failure's message.
async fn bus_state(nats: &NatsServer) -> String {
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let mut stream = js.get_stream("SWITCHBOARD_IN").await.unwrap();
    let stored = stream.info().await.unwrap().state.messages;
    let consumer: async_nats::jetstream::consumer::PullConsumer = stream.get_consumer("workers").await.unwrap();
    let mut consumer = consumer;
    let info = consumer.info().await.unwrap();
    format!(
        "inbound stored {stored}, consumer pending {} ack-pending {} redelivered {} waiting pulls {}",
        info.num_pending, info.num_ack_pending, info.num_redelivered, info.num_waiting
    )
}

/// Copies the processes' logs where they outlive the test, and says where.
fn keep_logs<'a>(daemons: impl Iterator<Item = &'a Daemon>) -> String {
    let dir = std::env::temp_dir().join(format!("switchboard-chaos-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (n, daemon) in daemons.enumerate() {
        std::fs::write(dir.join(format!("{n}.log")), daemon.logs()).unwrap();
    }
    format!("logs in {}", dir.display())
}

/// Every chat's history, as the next turn would read it, holds its messages in order, each
/// once, each followed by its answer.
fn assert_histories_in_order(database: &TempDatabase) {
    let rows = database.sql(
        "SELECT session_key || ' ' || (message_json::json ->> 'content') FROM transcript \
         WHERE role IN ('user', 'assistant') ORDER BY session_key, id",
    );
    let mut histories: HashMap<&str, Vec<&str>> = HashMap::new();
    for row in rows.lines() {
        let (session, content) = row.split_once(' ').unwrap_or((row, ""));
        histories.entry(session).or_default().push(content);
    }
    assert_eq!(histories.len(), CHATS);
    for (session, contents) in histories {
        let chat = session.trim_start_matches("api:chat-");
        let expected: Vec<String> =
            (0..PER_CHAT).flat_map(|m| [format!("c{chat}-m{m}"), format!("echo: c{chat}-m{m}")]).collect();
        let ends = contents.iter().zip(&expected).all(|(got, want)| got.ends_with(want.as_str()));
        assert!(contents.len() == expected.len() && ends, "{session}: {contents:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_on_one_host() {
    run_chaos(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_with_each_worker_on_a_host_of_its_own() {
    run_chaos(true).await;
}
