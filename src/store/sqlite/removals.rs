//! Deletes of the bus journal's delivered rows, grouped (see [`Removals`]).

use std::sync::{Arc, Mutex, PoisonError};

use sqlx::SqlitePool;
use tokio::sync::oneshot;

/// Deletes of delivered messages' rows, grouped: while one `DELETE` is on the writer
/// connection, the rows acked meanwhile wait and go in the next one. Every write is a round
/// trip to the connection's thread and all writes share that one connection, so under load a
/// delete per ack would queue behind the others; grouped, one statement does them all. An ack
/// still returns only once its row is gone.
#[derive(Debug, Default)]
pub(in crate::store) struct Removals {
    pending: Mutex<Pending>,
}

#[derive(Debug, Default)]
struct Pending {
    rows: Vec<(i64, oneshot::Sender<Result<(), String>>)>,
    /// A task is deleting, and takes what is pending when it is done.
    deleting: bool,
}

impl Removals {
    /// Queues `seq` for deletion; the receiver says when it is deleted.
    pub(super) fn add(this: &Arc<Self>, writer: &SqlitePool, seq: i64) -> oneshot::Receiver<Result<(), String>> {
        let (done, deleted) = oneshot::channel();
        let mut pending = this.lock();
        pending.rows.push((seq, done));
        if !std::mem::replace(&mut pending.deleting, true) {
            // A task of its own, so that an ack whose caller gives up mid-way does not leave
            // the others waiting for a delete nobody runs.
            tokio::spawn(delete_pending(Deleting { removals: Arc::clone(this), done: false }, writer.clone()));
        }
        deleted
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The deleting task's claim on [`Pending::deleting`]: released when the task finds nothing
/// left, or when it is dropped unfinished (its runtime shutting down), so a later ack starts
/// a new one.
struct Deleting {
    removals: Arc<Removals>,
    done: bool,
}

impl Drop for Deleting {
    fn drop(&mut self) {
        if !self.done {
            self.removals.lock().deleting = false;
        }
    }
}

/// Deletes the pending rows, a group at a time, until none are left.
async fn delete_pending(mut task: Deleting, writer: SqlitePool) {
    loop {
        let rows = {
            let mut pending = task.removals.lock();
            if pending.rows.is_empty() {
                pending.deleting = false;
                task.done = true;
                return;
            }
            std::mem::take(&mut pending.rows)
        };
        let seqs: Vec<i64> = rows.iter().map(|(seq, _)| *seq).collect();
        let result = match serde_json::to_string(&seqs) {
            Ok(seqs) => sqlx::query("DELETE FROM bus_journal WHERE seq IN (SELECT value FROM json_each($1))")
                .bind(seqs)
                .execute(&writer)
                .await
                .map(|_| ())
                .map_err(|err| err.to_string()),
            Err(err) => Err(err.to_string()),
        };
        for (_, done) in rows {
            // A caller that stopped waiting has nothing to be told.
            let _ = done.send(result.clone());
        }
    }
}
