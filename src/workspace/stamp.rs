//! What identifies one version of a file or directory, for the caches of workspace reads.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// How old a file's or directory's modification time must be for a cached read to rely on it:
/// times are only as fine as the kernel's clock tick, so a change in the same tick as the read
/// could otherwise go unseen (git does the same with its index).
pub(super) const SETTLED: Duration = Duration::from_secs(2);

/// One version of a path: modification time, size and inode (an editor's save renames a new
/// file over the old one, so the inode changes even when time and size do not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    pub modified: SystemTime,
    len: u64,
    inode: u64,
}

/// A path as a read saw it: present with its stamp, or missing.
pub(super) type Seen = Option<Stamp>;

/// The path's stamp, `Ok(None)` when it does not exist.
pub(super) fn stamp(path: &Path) -> Result<Seen, std::io::Error> {
    match std::fs::metadata(path) {
        Ok(meta) => Ok(Some(Stamp { modified: meta.modified()?, len: meta.len(), inode: meta.ino() })),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err),
    }
}

/// Whether what `seen` describes is old enough to rely on (a missing path always is).
pub(super) fn settled(seen: &Seen) -> bool {
    let settled = SystemTime::now().checked_sub(SETTLED);
    seen.is_none_or(|stamp| settled.is_some_and(|at| stamp.modified <= at))
}
