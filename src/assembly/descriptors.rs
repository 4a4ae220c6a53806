//! The process's file descriptors, as the API's connection limit needs them.

/// Descriptors the process needs beside the API's connections (bus, store, model requests,
/// exec pipes, channel clients).
const DESCRIPTORS_BESIDE_API: u64 = 256;

/// The process's soft descriptor limit; `None` when unlimited or unknown.
fn descriptor_limit() -> Option<u64> {
    let mut rlimit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit only writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rlimit) } != 0 || rlimit.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    Some(rlimit.rlim_cur)
}

fn descriptors_needed(max_connections: usize) -> u64 {
    u64::try_from(max_connections).unwrap_or(u64::MAX).saturating_add(DESCRIPTORS_BESIDE_API)
}

/// Connections past the API's limit answered 503 at once, at most; each takes a moment.
const MAX_REFUSING: u64 = 1024;

/// How many connections past the API's limit may be answered 503 at once: the descriptors
/// left beside the limit and everything else, up to [`MAX_REFUSING`].
pub(super) fn refusal_budget(max_connections: usize) -> usize {
    let spare = descriptor_limit().map_or(u64::MAX, |limit| limit.saturating_sub(descriptors_needed(max_connections)));
    usize::try_from(spare.min(MAX_REFUSING)).unwrap_or(usize::MAX)
}

/// Says so at start when the API's connection limit does not fit the descriptor limit: a
/// flood of connections would then starve everything else of descriptors.
pub(super) fn warn_if_short(max_connections: usize) {
    let Some(limit) = descriptor_limit() else { return };
    let needed = descriptors_needed(max_connections);
    if limit < needed {
        tracing::warn!(
            descriptor_limit = limit,
            max_connections,
            needed,
            "channels.api.max_connections does not fit the descriptor limit; lower it or raise the limit (ulimit -n, LimitNOFILE=)"
        );
    }
}
