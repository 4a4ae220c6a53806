//! What start-up leaves resident and an idle daemon does not use, given back once start-up has
//! settled: the allocator's freed pages, and the pages of the executable's code and read-only
//! data that only start-up ran (config parsing, migrations, the channels' first calls).
//!
//! The kernel maps code in runs around every page touched, and keeps it mapped until memory is
//! short. Unmapping the executable's read-only pages leaves them in the page cache, where the
//! kernel reclaims them first; what the daemon runs afterwards maps again from there, at the cost
//! of a minor fault. Release builds lay out the functions an idle daemon runs first
//! (`build/hot-symbols.txt`), so what comes back stays small.

use std::time::Duration;

/// How long after "switchboard started" the channels' first calls (`getMe`, the gateway's
/// identify, the first `getUpdates`) have usually run.
const SETTLE: Duration = Duration::from_secs(1);
/// How long to wait for a moment with no turn under way: a turn then maps its code again at
/// once, and one that streams would see its events late. A daemon busy this long after start
/// has its code in use anyway.
const QUIET_WITHIN: Duration = Duration::from_secs(30);

/// Gives back what start-up used, now (the allocator's pages) and once start-up has settled and
/// `quiet` says no turn is under way (both again, with the executable's pages).
pub(super) fn give_back_after_startup(quiet: impl Fn() -> bool + Send + 'static) {
    collect_allocator();
    tokio::spawn(async move {
        tokio::time::sleep(SETTLE).await;
        let given_up = tokio::time::Instant::now() + QUIET_WITHIN;
        while !quiet() {
            if tokio::time::Instant::now() >= given_up {
                tracing::debug!("busy since start-up; its code pages stay");
                return;
            }
            tokio::time::sleep(SETTLE).await;
        }
        collect_allocator();
        release_executable_pages();
    });
}

/// The memory that start-up used and freed (config parsing, compiling the guard's and the exec
/// tool's patterns, about 1 MB) goes back to the system: the allocator would purge it only after
/// its next allocations, which an idle daemon does not make.
fn collect_allocator() {
    #[cfg(target_os = "linux")]
    // SAFETY: mi_collect only frees and purges pages the allocator itself holds unused.
    unsafe {
        libmimalloc_sys::mi_collect(true);
    }
}

#[cfg(target_os = "linux")]
fn release_executable_pages() {
    match read_only_executable_mappings() {
        Ok(mappings) => {
            let mut released = 0;
            for mapping in mappings {
                // SAFETY: `mapping` is a private, read-only mapping of the executable with no
                // copied-on-write page (`Anonymous: 0 kB`), so each of its pages is the file's
                // content: dropping them only unmaps, and the next access maps the same bytes
                // from the page cache. Nothing in the process makes such a mapping writable.
                let done =
                    unsafe { libc::madvise(mapping.start as *mut libc::c_void, mapping.len, libc::MADV_DONTNEED) };
                if done == 0 {
                    released += mapping.resident_kb;
                }
            }
            tracing::debug!(released_kb = released, "start-up's code pages unmapped");
        }
        Err(err) => tracing::debug!(%err, "cannot read this process's mappings; start-up's code pages stay"),
    }
}

#[cfg(not(target_os = "linux"))]
fn release_executable_pages() {}

/// One range of `/proc/self/smaps`.
#[derive(Debug, PartialEq)]
struct Mapping {
    start: usize,
    len: usize,
    resident_kb: u64,
}

#[cfg(target_os = "linux")]
fn read_only_executable_mappings() -> std::io::Result<Vec<Mapping>> {
    let exe = std::fs::read_link("/proc/self/exe")?;
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    Ok(releasable(&smaps, &exe.to_string_lossy()))
}

/// The private, read-only mappings of `exe` in `smaps` that hold none of the process's own
/// (copied-on-write) pages: code and read-only data, not the relocated RELRO segment.
fn releasable(smaps: &str, exe: &str) -> Vec<Mapping> {
    let mut found = Vec::new();
    let mut current: Option<Mapping> = None;
    let mut resident_kb = 0;
    for line in smaps.lines() {
        if let Some(mapping) = header(line, exe) {
            current = mapping;
            continue;
        }
        let Some((key, value)) = line.split_once(':') else { continue };
        let kb = value.trim().trim_end_matches(" kB").parse::<u64>().ok();
        match (key, kb) {
            ("Rss", Some(kb)) => resident_kb = kb,
            ("Anonymous", Some(0)) => {
                if let Some(mapping) = current.take() {
                    found.push(Mapping { resident_kb, ..mapping });
                }
            }
            ("Anonymous", _) => current = None,
            _ => {}
        }
    }
    found
}

/// For a mapping's first line (`start-end perms offset dev inode path`): `Some(Some(_))` when
/// it is a private, non-writable mapping of `exe`, `Some(None)` for any other mapping, `None`
/// for a line that is not a mapping's first.
fn header(line: &str, exe: &str) -> Option<Option<Mapping>> {
    let mut fields = line.split_whitespace();
    let (start, end) = fields.next()?.split_once('-')?;
    let (start, end) = (usize::from_str_radix(start, 16).ok()?, usize::from_str_radix(end, 16).ok()?);
    let perms = fields.next()?;
    // The path is what follows the inode, spaces and a " (deleted)" after an upgrade included.
    let inode = fields.nth(2)?;
    let path = line.split_once(&format!(" {inode} ")).map_or("", |(_, rest)| rest.trim());
    let private_read_only = perms.len() == 4 && perms.starts_with('r') && &perms[1..2] == "-" && perms.ends_with('p');
    let ours = private_read_only && path == exe && end > start;
    Some(ours.then_some(Mapping { start, len: end - start, resident_kb: 0 }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
5597019be000-559702288000 r--p 00000000 fe:00 5382177                    /opt/sb/switchboard
Size:               9000 kB
Rss:                2304 kB
Anonymous:             0 kB
559702288000-5597053a0000 r-xp 008c9000 fe:00 5382177                    /opt/sb/switchboard
Size:              50272 kB
Rss:                5344 kB
Anonymous:             0 kB
5597053a0000-5597054ca000 r--p 039e0000 fe:00 5382177                    /opt/sb/switchboard
Size:               1192 kB
Rss:                1192 kB
Anonymous:          1192 kB
5597054ca000-5597054de000 rw-p 03b09000 fe:00 5382177                    /opt/sb/switchboard
Size:                 80 kB
Rss:                  80 kB
Anonymous:            80 kB
7f100ef12000-7f100f068000 r-xp 00028000 fe:00 1234                       /usr/lib/x86_64-linux-gnu/libc.so.6
Size:               1368 kB
Rss:                 984 kB
Anonymous:             0 kB
7f0fcec90000-7f100eca0000 rw-p 00000000 00:00 0 
Size:            1048640 kB
Rss:                3440 kB
Anonymous:          3440 kB
";

    #[test]
    fn only_the_executables_untouched_read_only_mappings_are_released() {
        let found = releasable(SMAPS, "/opt/sb/switchboard");
        assert_eq!(
            found,
            vec![
                Mapping { start: 0x5597019be000, len: 0x559702288000 - 0x5597019be000, resident_kb: 2304 },
                Mapping { start: 0x559702288000, len: 0x5597053a0000 - 0x559702288000, resident_kb: 5344 },
            ]
        );
    }

    #[test]
    fn a_code_mapping_with_a_private_copy_is_kept() {
        // A debugger's breakpoint copies the page it writes; dropping that copy would lose it.
        let patched = SMAPS.replacen("Anonymous:             0 kB", "Anonymous:             4 kB", 2);
        let found = releasable(&patched, "/opt/sb/switchboard");
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn another_programs_path_matches_nothing() {
        assert!(releasable(SMAPS, "/usr/bin/switchboard").is_empty());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_has_its_code_among_them() {
        let mappings = read_only_executable_mappings().expect("read /proc/self/smaps");
        let code = release_executable_pages as *const () as usize;
        assert!(mappings.iter().any(|m| (m.start..m.start + m.len).contains(&code)), "{mappings:?}");
    }
}
