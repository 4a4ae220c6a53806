//! Who may use one database at a time: a lock file beside it (`switchboard.db.lock`).
//!
//! `switchboard run` on the in-process bus keeps the bus journal in the database and replays
//! its unfinished entries at start, so a second such process on the same file would run the
//! first one's turns again (the model called twice, tool side effects repeated). It takes the
//! lock exclusively. Workers on a NATS bus may share one database (JetStream hands each message
//! to one of them, and the runs table settles redeliveries), so they take it shared: any number
//! of them, but never beside an embedded `run`. The admin commands (`users`, `cron`, …) and the
//! channel processes take no lock; SQLite's own locking orders their writes.
//!
//! On SQLite the lock is `flock(2)` on an open file, which the kernel drops when the process
//! ends, however it ends: a crashed daemon leaves no stale lock behind. On PostgreSQL, where the
//! processes may be on several hosts, it is a session-level advisory lock held by a connection of
//! its own (`store::postgres::lock`), which the server drops when the connection ends. That
//! connection can end while the process lives (a server restart, a failover, a network cut), so
//! a PostgreSQL lock is kept ([`DatabaseLock::keep`]): watched, taken back after it was lost,
//! with the worker's intake paused meanwhile; if another process took it first, the daemon stops.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::StoreError;

/// The `application_name` of a PostgreSQL lock's connection: `pg_stat_activity` shows which
/// backend holds a daemon's lock.
pub const LOCK_APPLICATION: &str = "switchboard-lock";

/// How a process shares the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    /// This process must be the only one: `switchboard run` on the in-process bus.
    Exclusive,
    /// Other shared holders are fine, an exclusive one is not: workers on a NATS bus.
    Shared,
}

/// Held while the process uses the database; dropping it (or exiting) releases the lock.
#[derive(Debug)]
pub struct StoreLock {
    _file: File,
    path: PathBuf,
}

impl StoreLock {
    /// Takes the lock for the database at `database`, failing at once (never waiting) when
    /// another process holds a conflicting one.
    pub fn acquire(database: &Path, mode: LockMode) -> Result<StoreLock, StoreError> {
        let path = lock_path(database);
        let io_err = |source| StoreError::Lock { path: path.display().to_string(), source };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(io_err)?;
        }
        let file = open(&path).map_err(io_err)?;
        let taken = match mode {
            LockMode::Exclusive => file.try_lock(),
            LockMode::Shared => file.try_lock_shared(),
        };
        match taken {
            Ok(()) => Ok(StoreLock { _file: file, path }),
            Err(TryLockError::WouldBlock) => Err(StoreError::InUse {
                database: database.display().to_string(),
                lock: path.display().to_string(),
                holders: holders_of(&file),
            }),
            Err(TryLockError::Error(err)) => Err(io_err(err)),
        }
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A held lock of either store; dropping it releases the lock.
#[derive(Debug)]
pub enum DatabaseLock {
    File(StoreLock),
    /// A lock held by a connection, which can end while the process runs (PostgreSQL's).
    Connection(Box<dyn ConnectionLock>),
}

/// A lock held by a database connection (`store::postgres::lock`).
#[async_trait]
pub trait ConnectionLock: std::fmt::Debug + Send {
    /// Watches the connection every `interval`, takes the lock back when it ended and keeps
    /// `held` true while the lock is held; returns only with the error that ends the daemon
    /// (another process took the lock).
    async fn keep(self: Box<Self>, interval: Duration, held: watch::Sender<bool>) -> StoreError;
}

impl DatabaseLock {
    /// Keeps the lock while the process runs: a file lock cannot be lost; a PostgreSQL lock is
    /// checked every `interval` and taken back when its connection ended (see
    /// `store::postgres::lock`). Must be called within the runtime.
    pub fn keep(self, interval: Duration) -> KeptLock {
        let (held, gate) = watch::channel(true);
        match self {
            DatabaseLock::File(file) => KeptLock { gate, keeper: None, _file: Some(file) },
            DatabaseLock::Connection(lock) => {
                let keeper = tokio::spawn(lock.keep(interval, held));
                KeptLock { gate, keeper: Some(keeper), _file: None }
            }
        }
    }
}

/// A lock being kept; dropping it releases the lock.
#[derive(Debug)]
pub struct KeptLock {
    gate: watch::Receiver<bool>,
    keeper: Option<JoinHandle<StoreError>>,
    _file: Option<StoreLock>,
}

impl KeptLock {
    /// True while the process holds the lock: work may be taken only then.
    pub fn held(&self) -> watch::Receiver<bool> {
        self.gate.clone()
    }

    /// Waits until the lock is lost for good (another process took it), with what to tell the
    /// operator; never returns for a lock that cannot be lost.
    pub async fn lost(&mut self) -> StoreError {
        let Some(keeper) = self.keeper.take() else { return std::future::pending().await };
        keeper.await.unwrap_or_else(|err| StoreError::LockKeeper(err.to_string()))
    }
}

impl Drop for KeptLock {
    fn drop(&mut self) {
        if let Some(keeper) = &self.keeper {
            keeper.abort();
        }
    }
}

/// `<database>.lock`, beside the database it guards.
pub fn lock_path(database: &Path) -> PathBuf {
    let mut name = database.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

fn open(path: &Path) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

/// The processes holding a lock on `file`, for the error message: read from `/proc/locks` on
/// Linux; empty elsewhere or when the holder has exited since.
fn holders_of(file: &File) -> Vec<u32> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::MetadataExt;
        let (Ok(metadata), Ok(table)) = (file.metadata(), std::fs::read_to_string("/proc/locks")) else {
            return Vec::new();
        };
        flock_holders(&table, metadata.ino())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        Vec::new()
    }
}

/// The pids of the `FLOCK` lines in a `/proc/locks` table for inode `ino`. A line reads
/// `1: FLOCK  ADVISORY  WRITE 4242 fe:00:770141 0 EOF` (blocked waiters carry a `->` and are
/// skipped: they hold nothing).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn flock_holders(table: &str, ino: u64) -> Vec<u32> {
    let mut pids: Vec<u32> = table
        .lines()
        .filter(|line| !line.contains("->"))
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [_, kind, _, _, pid, device_inode, ..] = fields.as_slice() else {
                return None;
            };
            let inode = device_inode.rsplit(':').next()?.parse::<u64>().ok()?;
            (*kind == "FLOCK" && inode == ino).then(|| pid.parse().ok()).flatten()
        })
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusive_excludes_everyone_and_shared_holders_share() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("switchboard.db");
        let first = StoreLock::acquire(&db, LockMode::Shared).unwrap();
        let second = StoreLock::acquire(&db, LockMode::Shared).unwrap();
        assert_eq!(first.path(), dir.path().join("switchboard.db.lock"));
        let err = StoreLock::acquire(&db, LockMode::Exclusive).unwrap_err();
        let text = err.to_string();
        assert!(text.contains(&db.display().to_string()) && text.contains("in use"), "{text}");
        #[cfg(target_os = "linux")]
        assert!(text.contains(&format!("pid {}", std::process::id())), "{text}");
        drop((first, second));

        let exclusive = StoreLock::acquire(&db, LockMode::Exclusive).unwrap();
        assert!(matches!(StoreLock::acquire(&db, LockMode::Shared), Err(StoreError::InUse { .. })));
        assert!(matches!(StoreLock::acquire(&db, LockMode::Exclusive), Err(StoreError::InUse { .. })));
        drop(exclusive);
        StoreLock::acquire(&db, LockMode::Exclusive).unwrap();
    }

    #[test]
    fn proc_locks_lines_name_their_holders() {
        let table = "1: FLOCK  ADVISORY  WRITE 4242 fe:00:770141 0 EOF\n\
                     1: -> FLOCK  ADVISORY  WRITE 5151 fe:00:770141 0 EOF\n\
                     2: POSIX  ADVISORY  WRITE 3797 fe:00:770141 0 EOF\n\
                     3: FLOCK  ADVISORY  READ 17 fe:00:99 0 EOF\n\
                     4: FLOCK  ADVISORY  READ 18 fe:00:770141 0 EOF\n";
        assert_eq!(flock_holders(table, 770_141), vec![18, 4242]);
        assert_eq!(flock_holders(table, 1), Vec::<u32>::new());
    }
}
