//! The `switchboard` binary: hardens the process, then runs the command line ([`switchboard::cli`]).

use std::process::ExitCode;

use clap::Parser;
use switchboard::cli::Cli;

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
    match switchboard::cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // One clear line (with its causes) rather than a panic or a debug dump.
            eprintln!("switchboard: {}", err.report());
            ExitCode::FAILURE
        }
    }
}
