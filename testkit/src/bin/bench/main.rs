//! The load generator: `switchboard run` measured from outside, as an operator meets it.
//!
//! C chats send M messages each, closed-loop (a chat sends its next message once the reply to
//! the previous one arrived), through the Telegram channel against the fake Bot API or through
//! the API channel, to a fake model that answers after a fixed delay (optionally with one tool
//! call per turn), on the in-process bus or on NATS JetStream, optionally with more workers as
//! `switchboard agent` processes and the store in PostgreSQL. It reports turns per second,
//! latency percentiles, overhead (latency minus the model's delay), CPU per turn, idle and peak
//! resident memory, start-up time, and replies lost or duplicated (which must be none: the exit
//! status is 1 otherwise), and the prompt tokens the model was sent per turn (with `--prompt-cache`,
//! the share its cache served). `--callgrind` counts instructions per turn instead (docs/benchmarks.md).
//!
//! cargo build --release -p switchboard -p switchboard-testkit --bins
//! target/release/bench [--path telegram|api] [--chats C] [--messages M] [--delay-ms D] [--tool]
//!     [--nats] [--agents N] [--postgres] [--idle S] [--debounce] [--owner] [--prompt-cache]
//!     [--pause-ms P] [--env KEY=VALUE]... [--binary PATH]
//!     [--compare OLD --rounds R]
//!     [--idle-only] [--callgrind]

mod callgrind;
mod drive;
mod options;
mod report;

use std::time::{Duration, Instant};

use options::{Options, Path};
use report::Figures;
use switchboard_testkit::daemon_process::MeasuredDaemon;
use switchboard_testkit::fake_discord::FakeDiscord;
use switchboard_testkit::fake_llm::FakeLlm;
use switchboard_testkit::fake_llm::load::LoadModel;
use switchboard_testkit::fake_telegram::FakeTelegram;
use switchboard_testkit::nats::NatsServer;
use switchboard_testkit::postgres::TempDatabase;

/// The outside services of one run.
struct Peers {
    llm: FakeLlm,
    telegram: Option<FakeTelegram>,
    discord: Option<FakeDiscord>,
    nats: Option<NatsServer>,
    database: Option<TempDatabase>,
    /// The agent's workspace, one for all the workers (a PostgreSQL store requires it shared).
    workspace: tempfile::TempDir,
}

impl Peers {
    /// Connections the daemons opened to the model and the Bot API so far.
    fn connections(&self) -> usize {
        self.llm.connections_accepted() + self.telegram.as_ref().map_or(0, FakeTelegram::connections_accepted)
    }

    async fn start(opts: &Options) -> Peers {
        let tool = opts.tool.then(|| (drive::TOOL.to_owned(), drive::tool_arguments()));
        let model = LoadModel::new(opts.delay, tool);
        let model = if opts.prompt_cache { model.with_prompt_cache() } else { model };
        let llm = FakeLlm::start_for_load(model).await;
        let telegram =
            if opts.path == Path::Telegram || opts.idle_only { Some(FakeTelegram::start().await) } else { None };
        let discord = if opts.idle_only { Some(FakeDiscord::start().await) } else { None };
        let nats = if opts.nats { Some(NatsServer::start().await) } else { None };
        let database = opts.postgres.then(TempDatabase::create);
        let workspace = tempfile::tempdir().expect("tempdir");
        Peers { llm, telegram, discord, nats, database, workspace }
    }

    /// The daemon's settings beyond the defaults: the channels pointed at the fakes, and what a
    /// bench needs that people do not (no rate limits or budgets for the bench's senders).
    fn env(&self, opts: &Options) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = vec![
            ("SWITCHBOARD_BUDGETS__GUEST".into(), "0".into()),
            ("SWITCHBOARD_RATE_LIMITS__GUEST".into(), "0".into()),
            ("SWITCHBOARD_AGENT__WORKSPACE".into(), self.workspace.path().display().to_string()),
        ];
        if let Some(database) = &self.database {
            env.push(("SWITCHBOARD_STORE__DATABASE_URL".into(), database.url().to_owned()));
        }
        if let Some(telegram) = &self.telegram {
            env.push(("TELEGRAM_BOT_TOKEN".into(), FakeTelegram::TOKEN.into()));
            env.push(("SWITCHBOARD_CHANNELS__TELEGRAM__API_URL".into(), telegram.api_url()));
            env.push(("SWITCHBOARD_CHANNELS__TELEGRAM__DM_POLICY".into(), "open".into()));
        }
        if let Some(discord) = &self.discord {
            env.push(("DISCORD_BOT_TOKEN".into(), FakeDiscord::TOKEN.into()));
            env.push(("SWITCHBOARD_CHANNELS__DISCORD__PROXY_URL".into(), discord.url()));
        }
        if !opts.debounce {
            // Builds before debounce_ms defaulted to 0 made every Telegram message wait 1.5 s
            // for more from its sender: a deliberate wait, not the daemon's work.
            env.push(("SWITCHBOARD_WORKER__DEBOUNCE_MS".into(), "0".into()));
        }
        if opts.owner {
            let owners: Vec<String> =
                (0..opts.chats).map(|chat| format!("telegram:{}", drive::user_of(chat))).collect();
            env.push(("SWITCHBOARD_USERS__OWNERS".into(), serde_json::to_string(&owners).unwrap_or_default()));
        }
        env.extend(opts.env.iter().cloned());
        env
    }
}

/// One run of `binary`: start-up, idle, then the load.
async fn run_once(opts: &Options, binary: &std::path::Path) -> Figures {
    let peers = Peers::start(opts).await;
    let env = peers.env(opts);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let nats_url = peers.nats.as_ref().map(NatsServer::url);
    let (daemon, to_health) = MeasuredDaemon::launch(binary, &peers.llm.base_url(), nats_url.as_deref(), &env).await;
    let mut agents = Vec::new();
    for _ in 0..opts.agents {
        let nats = nats_url.as_deref().unwrap_or_default();
        agents.push(MeasuredDaemon::launch_agent(binary, &peers.llm.base_url(), nats, &env).await);
    }
    let cpu_of_all = || daemon.cpu_ms() + agents.iter().map(MeasuredDaemon::cpu_ms).sum::<u64>();
    let spawned = Instant::now() - to_health;
    let startup = match &peers.telegram {
        Some(telegram) => drive::first_poll(telegram, spawned).await,
        None => to_health,
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_rss = daemon.rss_kib();
    let idle_cpu_before = daemon.cpu_ms();
    tokio::time::sleep(opts.idle).await;
    let idle_cpu = daemon.cpu_ms().saturating_sub(idle_cpu_before);
    let mut figures = Figures { startup, idle_rss, idle_cpu, ..Figures::default() };
    if opts.idle_only {
        figures.peak_rss = daemon.peak_rss_kib();
        return figures;
    }
    // With workers in other processes, CPU per turn counts them all.
    let cpu_before = cpu_of_all();
    let connections_before = peers.connections();
    let tally = match (&opts.path, &peers.telegram) {
        (Path::Telegram, Some(telegram)) => drive::telegram(telegram, opts).await,
        _ => drive::api(daemon.port, opts).await,
    };
    figures.cpu_ms = cpu_of_all().saturating_sub(cpu_before);
    figures.connections = peers.connections() - connections_before;
    figures.peak_rss = daemon.peak_rss_kib();
    figures.after_rss = daemon.rss_kib();
    figures.tally = tally;
    figures.input = peers.llm.load_input();
    figures
}

#[tokio::main]
async fn main() {
    let opts = options::parse();
    options::raise_open_files_limit();
    if opts.callgrind {
        callgrind::run(&opts).await;
        return;
    }
    println!("{}", opts.describe());
    let mut failed = false;
    for round in 1..=opts.rounds {
        for (label, binary) in opts.binaries() {
            let figures = run_once(&opts, &binary).await;
            println!("{}", figures.line(&format!("{label} #{round}"), &opts));
            failed |= figures.tally.lost() > 0 || figures.tally.duplicates > 0;
        }
    }
    if failed {
        eprintln!("replies were lost or duplicated");
        std::process::exit(1);
    }
}
