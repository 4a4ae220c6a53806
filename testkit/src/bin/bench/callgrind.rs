//! Instructions per turn under `valgrind --tool=callgrind`: a figure that does not move with
//! the machine's load, for comparing builds on a shared machine. The daemon runs under
//! callgrind; after a warm-up the counters are zeroed, a fixed closed-loop load runs through
//! the API channel (each request waits for its reply), and the counters are dumped: the dump
//! holds the load's instructions (plus the little the idle timers did meanwhile).

use std::path::{Path, PathBuf};
use std::process::Command;

use switchboard_testkit::daemon_process::MeasuredDaemon;
use switchboard_testkit::fake_llm::FakeLlm;
use switchboard_testkit::fake_llm::load::LoadModel;

use crate::drive;
use crate::options::{Options, Path as Via};

/// Turns before the counters are zeroed: connections, caches and the first session set up.
const WARM_UP_MESSAGES: usize = 5;

pub async fn run(opts: &Options) {
    for (label, binary) in opts.binaries() {
        for round in 1..=opts.rounds {
            let (instructions, turns) = measure(opts, &binary).await;
            println!(
                "{label} #{round}: {:.0} instructions per turn ({instructions} in {turns} turns, {} chats x {} messages, API)",
                instructions as f64 / turns.max(1) as f64,
                opts.chats,
                opts.messages
            );
        }
    }
}

async fn measure(opts: &Options, binary: &Path) -> (u64, usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("callgrind.out");
    let wrapper = wrapper(dir.path(), binary, &out);
    let llm = FakeLlm::start_for_load(LoadModel::new(opts.delay, None)).await;
    let env = [("SWITCHBOARD_BUDGETS__GUEST", "0"), ("SWITCHBOARD_RATE_LIMITS__GUEST", "0")];
    let (daemon, _) = MeasuredDaemon::launch(&wrapper, &llm.base_url(), None, &env).await;
    let pid = daemon.pid().to_string();
    let warm = Options { chats: 1, messages: WARM_UP_MESSAGES, path: Via::Api, ..options_like(opts) };
    drive::api(daemon.port, &warm).await;
    control(&["-z", &pid]);
    let tally = drive::api(daemon.port, &options_like(opts)).await;
    assert_eq!(tally.lost(), 0, "replies were lost under callgrind");
    control(&["-d", &pid]);
    let instructions = dumped_instructions(dir.path()).expect("no callgrind dump with a total");
    if let Ok(keep) = std::env::var("BENCH_CALLGRIND_KEEP") {
        // For `callgrind_annotate`: the dumps, named after the build.
        keep_dumps(dir.path(), Path::new(&keep), binary);
    }
    drop(daemon);
    (instructions, tally.answered)
}

fn keep_dumps(from: &Path, to: &Path, binary: &Path) {
    let build = binary.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    std::fs::create_dir_all(to).expect("BENCH_CALLGRIND_KEEP");
    for entry in std::fs::read_dir(from).expect("the dump directory").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("callgrind.out") {
            std::fs::copy(entry.path(), to.join(format!("{build}.{name}"))).expect("copy a dump");
        }
    }
}

/// A script that runs `binary` under callgrind, counting nothing until told (`-z` zeroes).
fn wrapper(dir: &Path, binary: &Path, out: &Path) -> PathBuf {
    let script = dir.join("under-callgrind.sh");
    let binary = std::fs::canonicalize(binary).expect("the binary to measure");
    let text = format!(
        "#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file={} {} \"$@\"\n",
        out.display(),
        binary.display()
    );
    std::fs::write(&script, text).expect("write the wrapper");
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&script, mode).expect("make the wrapper executable");
    script
}

fn control(args: &[&str]) {
    let output = Command::new("callgrind_control").args(args).output().expect("callgrind_control (valgrind)");
    assert!(output.status.success(), "callgrind_control {args:?} failed: {}", String::from_utf8_lossy(&output.stderr));
}

/// The `summary:` (or `totals:`) of the newest dump in `dir`.
fn dumped_instructions(dir: &Path) -> Option<u64> {
    let mut dumps: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.file_name().is_some_and(|n| n.to_string_lossy().starts_with("callgrind.out")))
        .collect();
    dumps.sort_by_key(|path| std::fs::metadata(path).and_then(|m| m.modified()).ok());
    let text = std::fs::read_to_string(dumps.last()?).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("summary:").or_else(|| line.strip_prefix("totals:")))
        .and_then(|total| total.split_whitespace().next()?.parse().ok())
}

/// The options of the measured load (the copy `Options` cannot derive).
fn options_like(opts: &Options) -> Options {
    Options {
        binary: opts.binary.clone(),
        compare: None,
        rounds: 1,
        path: Via::Api,
        chats: opts.chats,
        messages: opts.messages,
        delay: opts.delay,
        tool: false,
        nats: false,
        agents: 0,
        postgres: false,
        idle: opts.idle,
        debounce: false,
        owner: false,
        prompt_cache: false,
        pause: std::time::Duration::ZERO,
        env: Vec::new(),
        idle_only: false,
        callgrind: true,
        reply_timeout: opts.reply_timeout,
    }
}
