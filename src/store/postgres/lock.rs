//! The daemon's lock on a PostgreSQL database, and keeping it (see [`crate::store::lock`]).
//!
//! A session-level advisory lock lives as long as the connection that took it. When that
//! connection ends (a server restart, a failover, a network cut, `pg_terminate_backend`), the
//! server drops the lock without telling this process, and a second daemon could start beside
//! it. So the connection is watched: it is read from all the time (as a `PgListener` listening
//! to nothing), which notices at once when the server ends it, and asked a `SELECT 1` every
//! `store.lock_check_ms`, which notices a silent network cut. Once it is gone, the daemon's
//! intake is paused (the `held` flag goes false), the lock is taken again on a new connection,
//! and intake resumes. If another process took it meanwhile, keeping it ends with
//! [`StoreError::LockLost`] and the daemon stops.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use tokio::sync::watch;

use crate::store::StoreError;
use crate::store::lock::{ConnectionLock, LOCK_APPLICATION, LockMode};

/// How long a check of the lock's connection may take before it counts as gone (a network cut
/// shows no error, only silence).
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// The database's advisory lock, held by a connection of its own.
#[derive(Debug)]
pub struct SessionLock {
    /// The lock's connection (in a pool of its own, which never replaces it), read from while
    /// idle so that its end is seen at once.
    listener: PgListener,
    /// The server process of `connection`, to tell a lock still held by it (after a network
    /// cut) from one another daemon took.
    backend: i32,
    options: PgConnectOptions,
    mode: LockMode,
    key: i64,
    /// The database, without its password, for messages.
    shown: String,
}

/// What taking the lock found.
enum Taken {
    Held(Box<SessionLock>),
    /// Another process holds a conflicting lock; its server processes.
    Refused(Vec<i32>),
    /// No one else holds it (this process's old connection, now ended, may): try again shortly.
    Wait,
}

#[async_trait::async_trait]
impl ConnectionLock for SessionLock {
    async fn keep(self: Box<Self>, interval: Duration, held: watch::Sender<bool>) -> StoreError {
        self.keep_held(interval, held).await
    }
}

impl SessionLock {
    /// Takes the lock `key` in `mode` on a new connection, failing with [`StoreError::InUse`]
    /// when another process holds a conflicting one.
    pub(in crate::store) async fn take(
        options: &PgConnectOptions,
        mode: LockMode,
        key: i64,
        shown: &str,
    ) -> Result<Box<SessionLock>, StoreError> {
        match try_take(options, mode, key, shown, None).await? {
            Taken::Held(lock) => Ok(lock),
            Taken::Refused(_) | Taken::Wait => Err(StoreError::InUse {
                database: shown.to_owned(),
                lock: format!("PostgreSQL advisory lock {key}"),
                holders: Vec::new(),
            }),
        }
    }

    /// Checks the lock every `interval` until another process takes it, keeping `held` true
    /// while this process holds it. Returns only with the error that ends the daemon.
    async fn keep_held(mut self, interval: Duration, held: watch::Sender<bool>) -> StoreError {
        loop {
            if self.alive(interval).await {
                continue;
            }
            held.send_replace(false);
            tracing::warn!(database = %self.shown, backend = self.backend,
                "lost the database lock: its connection to PostgreSQL ended; taking no new work until it is taken back");
            match self.take_back(interval).await {
                Ok(lock) => self = *lock,
                Err(err) => return err,
            }
            held.send_replace(true);
            tracing::info!(database = %self.shown, backend = self.backend,
                "took the database lock back; taking work again");
        }
    }

    /// Whether the lock's connection is still there after `interval`: false as soon as the
    /// server ends it, or when it does not answer a query at the end.
    async fn alive(&mut self, interval: Duration) -> bool {
        let ended = tokio::select! {
            // Nothing is listened to: whatever ends this wait but a notification is the end.
            message = self.listener.try_recv() => !matches!(message, Ok(Some(_))),
            () = tokio::time::sleep(interval) => false,
        };
        if ended {
            return false;
        }
        let check = sqlx::query("SELECT 1").execute(&mut self.listener);
        matches!(tokio::time::timeout(CHECK_TIMEOUT, check).await, Ok(Ok(_)))
    }

    /// Takes the lock again on a new connection, retrying every `interval` while the server
    /// cannot be reached.
    async fn take_back(&self, interval: Duration) -> Result<Box<SessionLock>, StoreError> {
        let mut reported = false;
        loop {
            match try_take(&self.options, self.mode, self.key, &self.shown, Some(self.backend)).await {
                Ok(Taken::Held(lock)) => return Ok(lock),
                Ok(Taken::Refused(holders)) => {
                    return Err(StoreError::LockLost { database: self.shown.clone(), holders });
                }
                Ok(Taken::Wait) => {}
                Err(err) if !reported => {
                    reported = true;
                    tracing::warn!(database = %self.shown, %err,
                        "cannot take the database lock back yet; trying again");
                }
                Err(_) => {}
            }
            tokio::time::sleep(interval).await;
        }
    }
}

/// Tries the lock once. `previous`: this process's last lock connection, which may still hold
/// the lock when only the network between them broke; it is ended, and the lock tried again.
async fn try_take(
    options: &PgConnectOptions,
    mode: LockMode,
    key: i64,
    shown: &str,
    previous: Option<i32>,
) -> Result<Taken, StoreError> {
    let options = options.clone().application_name(LOCK_APPLICATION);
    // One connection, never closed or replaced by the pool: the lock lives as long as it does.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .idle_timeout(None)
        .max_lifetime(None)
        .acquire_timeout(CHECK_TIMEOUT)
        .connect_with(options.clone())
        .await?;
    let mut listener = PgListener::connect_with(&pool).await?;
    // A lost connection must not come back by itself: a new one does not hold the lock.
    listener.eager_reconnect(false);
    let take = match mode {
        LockMode::Exclusive => "SELECT pg_try_advisory_lock($1), pg_backend_pid()",
        LockMode::Shared => "SELECT pg_try_advisory_lock_shared($1), pg_backend_pid()",
    };
    let (taken, backend): (bool, i32) = sqlx::query_as(take).bind(key).fetch_one(&mut listener).await?;
    if taken {
        let shown = shown.to_owned();
        return Ok(Taken::Held(Box::new(SessionLock { listener, backend, options, mode, key, shown })));
    }
    let holders = holders(&mut listener, key, mode).await?;
    let ours = previous.filter(|pid| holders.contains(pid));
    let others: Vec<i32> = holders.into_iter().filter(|pid| Some(*pid) != previous).collect();
    // No one else: this process's old connection, which the server has not seen go yet (it is
    // ended), or a holder that let go since the try.
    if others.is_empty() {
        if let Some(pid) = ours {
            tracing::info!(database = %shown, backend = pid, "ending this process's old lock connection");
            sqlx::query("SELECT pg_terminate_backend($1)").bind(pid).execute(&mut listener).await?;
        }
        close(listener, pool).await;
        return Ok(Taken::Wait);
    }
    close(listener, pool).await;
    Ok(Taken::Refused(others))
}

async fn close(listener: PgListener, pool: PgPool) {
    drop(listener);
    pool.close().await;
}

/// The server processes holding the advisory lock `key` on this database in a mode that
/// conflicts with `mode` (a bigint key is split into `classid`, its high half, and `objid`, its
/// low half, with `objsubid` 1; shared holders conflict only with an exclusive one).
async fn holders(listener: &mut PgListener, key: i64, mode: LockMode) -> Result<Vec<i32>, StoreError> {
    let pids: Vec<i32> = sqlx::query_scalar(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
         AND classid::bigint = ($1 >> 32) AND objid::bigint = ($1 & 4294967295) \
         AND ($2 OR mode = 'ExclusiveLock') ORDER BY pid",
    )
    .bind(key)
    .bind(mode == LockMode::Exclusive)
    .fetch_all(listener)
    .await?;
    Ok(pids)
}
