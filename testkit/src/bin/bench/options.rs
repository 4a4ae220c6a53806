//! The bench's command line.

use std::path::PathBuf;
use std::time::Duration;

/// Which channel the messages come through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    Telegram,
    Api,
}

pub struct Options {
    pub binary: PathBuf,
    /// A previous build, run alternately with `binary` (`--compare`).
    pub compare: Option<PathBuf>,
    pub rounds: u32,
    pub path: Path,
    pub chats: usize,
    pub messages: usize,
    pub delay: Duration,
    pub tool: bool,
    pub nats: bool,
    /// Workers beside `run`'s own, as `switchboard agent` processes (needs `--nats`).
    pub agents: usize,
    /// The store in a fresh PostgreSQL database (`SWITCHBOARD_TEST_POSTGRES` or the machine's).
    pub postgres: bool,
    pub idle: Duration,
    /// Keep the daemon's default debounce instead of setting it to 0 (the default is 0 now;
    /// older builds waited 1.5 s before each Telegram message).
    pub debounce: bool,
    /// The bench's Telegram users are owners: offered every tool, as the person who runs it is.
    pub owner: bool,
    /// The fake model keeps a prompt cache as OpenAI does, and the line shows what it served.
    pub prompt_cache: bool,
    /// How long a chat waits after a reply before its next message (a person reading and typing).
    pub pause: Duration,
    pub env: Vec<(String, String)>,
    /// Start-up and idle memory only, with the API, Telegram and Discord channels on.
    pub idle_only: bool,
    pub callgrind: bool,
    /// How long a reply may take before its message counts as lost.
    pub reply_timeout: Duration,
}

const USAGE: &str = "bench [--path telegram|api] [--chats C] [--messages M] [--delay-ms D] [--tool] [--nats] \
     [--agents N] [--postgres] [--idle S] [--debounce] [--owner] [--prompt-cache] [--pause-ms P] [--env KEY=VALUE]... [--binary PATH] [--compare OLD] [--rounds R] [--idle-only] \
     [--callgrind] [--reply-timeout S]";

pub fn parse() -> Options {
    let mut opts = Options {
        binary: PathBuf::from("target/release/switchboard"),
        compare: None,
        rounds: 1,
        path: Path::Telegram,
        chats: 100,
        messages: 20,
        delay: Duration::ZERO,
        tool: false,
        nats: false,
        agents: 0,
        postgres: false,
        idle: Duration::from_secs(5),
        debounce: false,
        owner: false,
        prompt_cache: false,
        pause: Duration::ZERO,
        env: Vec::new(),
        idle_only: false,
        callgrind: false,
        reply_timeout: Duration::from_secs(60),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{arg} needs a value\nusage: {USAGE}"));
        let number = |text: String| -> u64 { text.parse().unwrap_or_else(|_| panic!("{arg}: not a number: {text}")) };
        match arg.as_str() {
            "--binary" => opts.binary = PathBuf::from(value()),
            "--compare" => opts.compare = Some(PathBuf::from(value())),
            "--rounds" => opts.rounds = number(value()) as u32,
            "--path" => {
                opts.path = match value().as_str() {
                    "telegram" => Path::Telegram,
                    "api" => Path::Api,
                    other => panic!("--path telegram|api, not {other}"),
                }
            }
            "--chats" => opts.chats = number(value()) as usize,
            "--messages" => opts.messages = number(value()) as usize,
            "--delay-ms" => opts.delay = Duration::from_millis(number(value())),
            "--tool" => opts.tool = true,
            "--nats" => opts.nats = true,
            "--agents" => opts.agents = number(value()) as usize,
            "--postgres" => opts.postgres = true,
            "--idle" => opts.idle = Duration::from_secs(number(value())),
            "--debounce" => opts.debounce = true,
            "--owner" => opts.owner = true,
            "--prompt-cache" => opts.prompt_cache = true,
            "--pause-ms" => opts.pause = Duration::from_millis(number(value())),
            "--env" => {
                let pair = value();
                let (key, val) = pair.split_once('=').unwrap_or_else(|| panic!("--env KEY=VALUE, not {pair}"));
                opts.env.push((key.to_owned(), val.to_owned()));
            }
            "--idle-only" => opts.idle_only = true,
            "--callgrind" => opts.callgrind = true,
            "--reply-timeout" => opts.reply_timeout = Duration::from_secs(number(value())),
            "--help" | "-h" => {
                println!("usage: {USAGE}");
                std::process::exit(0);
            }
            other => panic!("unknown option {other}\nusage: {USAGE}"),
        }
    }
    assert!(opts.chats > 0 && opts.messages > 0, "--chats and --messages must be at least 1");
    assert!(!opts.owner || opts.path == Path::Telegram, "--owner names the bench's Telegram users");
    assert!(opts.pause < opts.reply_timeout, "--pause-ms must be shorter than --reply-timeout");
    assert!(opts.agents == 0 || opts.nats, "--agents needs --nats: workers in other processes share a NATS bus");
    opts
}

impl Options {
    /// The builds to run each round, labelled: the previous one first when comparing.
    pub fn binaries(&self) -> Vec<(&'static str, PathBuf)> {
        let mut builds = Vec::new();
        if let Some(old) = &self.compare {
            builds.push(("old", old.clone()));
        }
        builds.push(("new", self.binary.clone()));
        builds
    }

    /// The scenario, for the first line of the output.
    pub fn describe(&self) -> String {
        if self.idle_only {
            return "idle: API, Telegram and Discord channels on, no messages".to_owned();
        }
        let path = if self.path == Path::Telegram { "telegram" } else { "api" };
        let bus = match (self.nats, self.agents) {
            (false, _) => "embedded".to_owned(),
            (true, 0) => "nats".to_owned(),
            (true, agents) => format!("nats, {} workers", agents + 1),
        };
        let bus = if self.postgres { format!("{bus}, PostgreSQL") } else { bus };
        let tool = if self.tool { ", one tool call per turn" } else { "" };
        let debounce = if self.debounce { ", default debounce" } else { ", debounce 0" };
        let owner = if self.owner { ", owners" } else { "" };
        let cache = if self.prompt_cache { ", model keeps a prompt cache" } else { "" };
        let pause = if self.pause.is_zero() {
            String::new()
        } else {
            format!(", {} ms between a reply and the next message", self.pause.as_millis())
        };
        format!(
            "{path}, {bus}, {} chats x {} messages closed-loop, model answers after {} ms{tool}{debounce}{owner}{cache}{pause}",
            self.chats,
            self.messages,
            self.delay.as_millis()
        )
    }
}

/// Many chats need many sockets (the daemon inherits the limit): the soft limit is raised to
/// the hard one.
pub fn raise_open_files_limit() {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: plain syscalls on a stack value.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}
