//! The `switchboard` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use switchboard::assembly::ChannelKind;
use switchboard::config::Config;
use switchboard::daemon::{self, Parts};
use switchboard::pairing_cli::PairingCommand;
use switchboard::scheduler::cli::CronCommand;
use switchboard::telemetry::Logs;
use switchboard::users::cli::UsersCommand;
use tokio_util::sync::CancellationToken;

/// switchboard: an LLM agent in your Telegram and Discord chats and behind an HTTP API.
///
/// Configuration comes from built-in defaults, then the config file, then SWITCHBOARD_*
/// environment variables (SWITCHBOARD_CHANNELS__API__LISTEN=127.0.0.1:9000). Every key is
/// listed in config.example.toml. OPENAI_API_KEY / OPENAI_BASE_URL configure the model
/// provider when the config names none.
#[derive(Debug, Parser)]
#[command(name = "switchboard", version, about, long_about)]
struct Cli {
    /// Config file (default: $SWITCHBOARD_CONFIG, else ~/.config/switchboard/config.toml if it exists)
    #[arg(long, short, global = true, value_name = "PATH")]
    config: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

/// `--nats`, offered only by the commands that use a bus.
#[derive(Debug, Args)]
struct BusArgs {
    /// Use this NATS JetStream server as the bus instead of the configured one
    #[arg(long, value_name = "URL")]
    nats: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write a config file and the agent's workspace files (existing files are kept)
    Init,
    /// Run everything in one process: channels, bus and agent worker (the embedded default)
    Run {
        #[command(flatten)]
        bus: BusArgs,
    },
    /// Run only an agent worker, taking messages from a NATS bus
    Agent {
        #[command(flatten)]
        bus: BusArgs,
    },
    /// Run only one channel adapter, connected to a NATS bus
    Channel {
        /// The channel to run
        #[arg(value_enum)]
        name: ChannelKind,
        #[command(flatten)]
        bus: BusArgs,
    },
    /// List recent runs with their status, model, tokens and errors
    Runs {
        /// How many runs to show
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// Users: list them, link identities, set levels and monthly token budgets
    Users {
        #[command(subcommand)]
        command: UsersCommand,
    },
    /// DM pairing: approve the codes strangers get in direct messages, list, revoke and
    /// pre-approve senders
    Pairing {
        #[command(subcommand)]
        command: PairingCommand,
    },
    /// Scheduled jobs: list, add, remove, pause, resume, run now, history
    Cron {
        #[command(subcommand)]
        command: CronCommand,
    },
}

/// Threads for blocking work: file reads (the workspace files of every turn, the file tools),
/// DNS lookups. Tokio allows 512; under a steady 20 messages a second the daemon kept 14 of
/// them, each with a stack and its own allocator cache. Each piece of such work takes
/// microseconds, so it may as well wait for one of a few threads.
const BLOCKING_THREADS: usize = 8;

/// glibc gives each thread that allocates its own malloc arena (up to 8 per core) and keeps
/// what is freed in it: under a steady load the runtime's and SQLite's threads made resident
/// memory creep up for a quarter of an hour while the heap in use stayed under 6 MB. Two
/// arenas are plenty for a process that spends its time waiting on the network. An
/// explicit `MALLOC_ARENA_MAX` in the environment still wins.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn limit_malloc_arenas() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt(3) with an integer option, before any other thread exists.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, 2) };
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn limit_malloc_arenas() {}

fn main() -> ExitCode {
    // First of all, before any secret is read into memory or any command can run: the
    // environment and memory of this process become unreadable to other processes without
    // CAP_SYS_PTRACE, whatever their user (see src/tools/exec_privileges.rs).
    if let Err(err) = switchboard::tools::exec::keep_memory_private() {
        eprintln!("switchboard: {err}");
        return ExitCode::FAILURE;
    }
    limit_malloc_arenas();
    let cli = Cli::parse();
    match start(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // One clear line (with its causes) rather than a panic or a debug dump.
            eprintln!("switchboard: {}", error_report(&err));
            ExitCode::FAILURE
        }
    }
}

fn start(cli: Cli) -> anyhow::Result<()> {
    if let Command::Init = cli.command {
        // Before loading: the config file it writes may not exist yet.
        return init(cli.config);
    }
    let mut config = Config::load_from_process_env(cli.config.as_deref())?;
    let (nats, logs) = match &cli.command {
        Command::Run { bus } | Command::Agent { bus } | Command::Channel { bus, .. } => {
            (bus.nats.clone(), Logs::Daemon)
        }
        _ => (None, Logs::Command),
    };
    if let Some(url) = nats {
        anyhow::ensure!(
            url.starts_with("nats://") || url.starts_with("tls://"),
            "--nats takes a NATS URL such as nats://127.0.0.1:4222"
        );
        config.bus = url;
    }
    switchboard::telemetry::init(&config, logs);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(BLOCKING_THREADS)
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        match cli.command {
            Command::Run { .. } => serve(config, Parts::All).await,
            Command::Agent { .. } => serve(config, Parts::Agent).await,
            Command::Channel { name, .. } => serve(config, Parts::Channel(name)).await,
            // Handled before the config is loaded, above.
            Command::Init => Ok(()),
            Command::Runs { limit } => switchboard::report::print_runs(&config, limit).await,
            Command::Users { command } => switchboard::users::cli::run(&config, command).await,
            Command::Pairing { command } => switchboard::pairing_cli::run(&config, command).await,
            Command::Cron { command } => Ok(switchboard::scheduler::cli::run(&config, command).await?),
        }
    })
}

/// `err` and its causes on one line, each text once: many errors quote their cause in their
/// own message (`cannot write x: {source}`) and also return it as `source()`, and printing
/// the chain as it is would repeat the OS error.
fn error_report(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let message = cause.to_string();
        if text.contains(&message) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&message);
    }
    text
}

/// `switchboard init`: the config file, then the workspace it points at.
fn init(path: Option<PathBuf>) -> anyhow::Result<()> {
    use switchboard::workspace::init;
    let path =
        match path.or_else(|| std::env::var_os("SWITCHBOARD_CONFIG").filter(|p| !p.is_empty()).map(PathBuf::from)) {
            Some(path) => path,
            None => dirs::config_dir()
                .context("cannot determine the user config directory; pass --config PATH")?
                .join("switchboard")
                .join("config.toml"),
        };
    let mut reports = vec![init::write_config(&path)?];
    // Loaded like `run` would, so the environment's overrides (data dir, workspace) apply.
    let config = Config::load_from_process_env(Some(&path))?;
    reports.extend(init::write_workspace(&config.agent.workspace)?);
    // Named agents get their own workspace, so their own persona and memory files.
    for agent in config.agents.values() {
        reports.extend(init::write_workspace(&agent.workspace)?);
    }
    for report in &reports {
        println!("{} {}", report.action, report.path.display());
    }
    println!(
        "\nNext: set your model and API key in {} (or OPENAI_API_KEY), edit the files in {} to \
         shape your agent, then start it with `switchboard run`.",
        path.display(),
        config.agent.workspace.display()
    );
    Ok(())
}

async fn serve(config: Config, parts: Parts) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    tokio::spawn(stop_on_signal(shutdown.clone()));
    daemon::run(config, parts, shutdown).await?;
    Ok(())
}

/// Cancels `shutdown` on SIGINT or SIGTERM; a second signal exits at once.
async fn stop_on_signal(shutdown: CancellationToken) {
    wait_for_signal().await;
    tracing::info!("signal received; finishing running turns (send again to exit now)");
    shutdown.cancel();
    wait_for_signal().await;
    tracing::warn!("second signal; exiting without waiting");
    std::process::exit(130);
}

#[cfg(unix)]
async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        tracing::error!("cannot install signal handlers; stop the process with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}
