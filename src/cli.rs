//! The `switchboard` command line: every subcommand, with one error type ([`CliError`]) and
//! one way of reporting it ([`CliError::report`]: `switchboard: <error>: <causes>` on stderr,
//! exit status 1). Usage errors are clap's (exit status 2).

mod api_token;
mod approvals;
mod cron;
mod init;
mod mcp;
mod pairing;
mod runs;
mod serve;
mod users;

use std::path::PathBuf;

pub use approvals::ApprovalsCommand;
use clap::{Args, Parser, Subcommand};
pub use cron::CronCommand;
pub use mcp::McpCommand;
pub use pairing::{PairingChannel, PairingCommand};
use thiserror::Error;
pub use users::{BudgetArg, UsersCommand};

use crate::assembly::ChannelKind;
use crate::config::{BadIdentity, Identity};
use crate::config::{Config, ConfigError};
use crate::daemon::{DaemonError, Parts};
use crate::store::StoreError;
use crate::telemetry::Logs;
use crate::workspace::init::InitError;

/// switchboard: an LLM agent in your Telegram and Discord chats and behind an HTTP API.
///
/// Configuration comes from built-in defaults, then the config file, then SWITCHBOARD_*
/// environment variables (SWITCHBOARD_CHANNELS__API__LISTEN=127.0.0.1:9000). Every key is
/// listed in config.example.toml. OPENAI_API_KEY / OPENAI_BASE_URL configure the model
/// provider when the config names none.
#[derive(Debug, Parser)]
#[command(name = "switchboard", version, about, long_about)]
pub struct Cli {
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
    /// DM pairing: approve or deny the codes strangers get in direct messages, list, revoke and
    /// pre-approve senders
    Pairing {
        #[command(subcommand)]
        command: PairingCommand,
    },
    /// Tool calls waiting for an approver ([approvals]): list, allow, deny
    Approvals {
        #[command(subcommand)]
        command: ApprovalsCommand,
    },
    /// Scheduled jobs: list, add, remove, pause, resume, run now, history
    Cron {
        #[command(subcommand)]
        command: CronCommand,
    },
    /// MCP tool servers: start them and list their tools
    Mcp {
        #[command(subcommand)]
        command: McpCommand,
    },
    /// Make a bearer token for the HTTP API and print the config entry that admits it
    ApiToken {
        /// The token's name in the config (letters, digits, `_`, `-`); also its identity
        name: String,
        /// Give it the admin scope too (every session, runs, any sender)
        #[arg(long)]
        admin: bool,
    },
    /// Check the config, the store, the bus, each model provider, the chat tokens and the
    /// workspaces: one line a check, and what to do when one fails; exits 1 on a failure
    Doctor {
        #[command(flatten)]
        bus: BusArgs,
    },
}

/// Why a subcommand failed.
#[derive(Debug, Error)]
pub enum CliError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Daemon(#[from] DaemonError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Identity(#[from] BadIdentity),
    #[error(transparent)]
    Policy(#[from] crate::users::PolicyError),
    #[error(transparent)]
    Init(#[from] InitError),
    #[error("cannot start the async runtime")]
    Runtime(#[source] std::io::Error),
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
    #[error("{0:?} cannot name a token: use letters, digits, `_` and `-`")]
    BadTokenName(String),
    #[error("the system's random source failed: {0}")]
    Random(String),
    #[error("--nats takes a NATS URL such as nats://127.0.0.1:4222")]
    NotANatsUrl,
    #[error("cannot determine the user config directory; pass --config PATH")]
    NoConfigDir,
    #[error("cannot link {0} to itself")]
    SelfLink(Identity),
    #[error("{0}")]
    Invalid(String),
    #[error("there is no cron job {0:?}; `switchboard cron list` shows the jobs")]
    NoSuchJob(String),
    #[error("{0} of the doctor's checks failed")]
    ChecksFailed(usize),
}

impl CliError {
    /// The error and its causes on one line, each text once: many errors quote their cause
    /// in their own message (`cannot write x: {source}`) and also return it as `source()`,
    /// and printing the chain as it is would repeat the OS error.
    pub fn report(&self) -> String {
        let mut text = String::new();
        let mut cause: Option<&dyn std::error::Error> = Some(self);
        while let Some(error) = cause {
            let message = error.to_string();
            if !text.contains(&message) {
                if !text.is_empty() {
                    text.push_str(": ");
                }
                text.push_str(&message);
            }
            cause = error.source();
        }
        text
    }
}

/// `switchboard doctor`: the report on stdout; a failed check fails the command.
async fn doctor(config: &Config) -> Result<(), CliError> {
    use std::io::Write;
    let findings = crate::doctor::examine(config).await;
    let mut out = std::io::stdout().lock();
    for finding in &findings {
        writeln!(out, "{finding}")?;
    }
    match findings.iter().filter(|f| f.status == crate::doctor::Status::Fail).count() {
        0 => Ok(()),
        failed => Err(CliError::ChecksFailed(failed)),
    }
}

/// Runs the command `cli` names.
pub fn run(cli: Cli) -> Result<(), CliError> {
    match &cli.command {
        // Before loading: the config file it writes may not exist yet.
        Command::Init => return init::run(cli.config),
        // Needs no config at all.
        Command::ApiToken { name, admin } => return api_token::run(name, *admin),
        _ => {}
    }
    let mut config = Config::load_from_process_env(cli.config.as_deref())?;
    let (nats, logs) = match &cli.command {
        Command::Run { bus } | Command::Agent { bus } | Command::Channel { bus, .. } => {
            (bus.nats.clone(), Logs::Daemon)
        }
        Command::Doctor { bus } => (bus.nats.clone(), Logs::Command),
        _ => (None, Logs::Command),
    };
    if let Some(url) = nats {
        if !(url.starts_with("nats://") || url.starts_with("tls://")) {
            return Err(CliError::NotANatsUrl);
        }
        config.bus = url;
    }
    crate::telemetry::init(&config, logs);
    let path = cli.config.clone();
    serve::runtime()?.block_on(async move {
        match cli.command {
            Command::Run { .. } => serve::serve(config, Parts::All, path).await,
            Command::Agent { .. } => serve::serve(config, Parts::Agent, path).await,
            Command::Channel { name, .. } => serve::serve(config, Parts::Channel(name), path).await,
            // Handled before the config is loaded, above.
            Command::Init | Command::ApiToken { .. } => Ok(()),
            Command::Runs { limit } => runs::print(&config, limit).await,
            Command::Users { command } => users::run(&config, command).await,
            Command::Pairing { command } => pairing::run(&config, command).await,
            Command::Approvals { command } => approvals::run(&config, command).await,
            Command::Cron { command } => cron::run(&config, command).await,
            Command::Mcp { command } => mcp::run(&config, command).await,
            Command::Doctor { .. } => doctor(&config).await,
        }
    })
}
