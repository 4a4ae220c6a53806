//! The `switchboard` binary: hardens the process, then runs the command line ([`switchboard::cli`]).

use std::process::ExitCode;

use clap::Parser;
use switchboard::cli::Cli;

/// mimalloc rather than glibc's malloc: a turn spawns a handful of tasks, and glibc 2.36
/// serves their 128-byte-aligned cells under an arena lock (its thread cache holds only
/// ordinary blocks), which with all threads on two arenas made malloc and its futex waits a
/// fifth of a turn's CPU (docs/benchmarks.md). Those two arenas were there against memory
/// creeping under a steady load; with freed pages purged at once (below) mimalloc held as flat
/// in the soak. The `override` feature routes C code (SQLite) to it as well.
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc v3's `mimalloc.h` (the crate exports no name for it in
/// v3; libmimalloc-sys is pinned, so the number cannot move under us).
#[cfg(target_os = "linux")]
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Freed pages go back to the system at once instead of after mimalloc's default second, which
/// it counts only when it next allocates: an idle daemon would keep a burst's pages resident
/// (1 MB more at idle, 10 MB more at the peak of the bench's 100 chats). What this costs under
/// load is within the bench's noise. `MIMALLOC_PURGE_DELAY` in the environment still wins.
#[cfg(target_os = "linux")]
fn return_freed_pages_at_once() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets an integer option; mimalloc reads its options atomically.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
    }
}

#[cfg(not(target_os = "linux"))]
fn return_freed_pages_at_once() {}

fn main() -> ExitCode {
    // First of all, before any secret is read into memory or any command can run: the
    // environment and memory of this process become unreadable to other processes without
    // CAP_SYS_PTRACE, whatever their user (see src/tools/exec_privileges.rs).
    if let Err(err) = switchboard::tools::exec::keep_memory_private() {
        eprintln!("switchboard: {err}");
        return ExitCode::FAILURE;
    }
    return_freed_pages_at_once();
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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::MI_OPTION_PURGE_DELAY;

    /// The number names the purge delay: its default of 1,000 ms is the only option with that
    /// default in mimalloc v3, so a crate update that shifts the options fails here.
    #[test]
    fn the_option_number_is_mimallocs_purge_delay() {
        assert!(std::env::var_os("MIMALLOC_PURGE_DELAY").is_none(), "the test reads mimalloc's default");
        // SAFETY: reads an integer option.
        let delay = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(delay, 1000);
    }
}
