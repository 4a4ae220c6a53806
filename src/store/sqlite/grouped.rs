//! Statements grouped onto a connection: the writes onto the one writer, the reads every turn
//! makes onto a reader (see [`Grouped`] and [`Lane`]).

use std::sync::{Arc, Mutex, PoisonError, Weak};

use futures_util::future::BoxFuture;
use sqlx::pool::PoolConnection;
use sqlx::{Sqlite, SqliteConnection, SqlitePool};
use tokio::sync::oneshot;

/// Most items one statement takes; the rest wait for the next one.
const MAX_GROUP: usize = 256;

/// Groups a lane runs on one connection before it gives the connection back and queues for it
/// again, so that statements outside the lanes (a session's settings, an approval) are not
/// kept waiting by a steady stream of groups.
const GROUPS_PER_HOLD: usize = 32;

/// What a group's statement returns: one output per item, in order, or why it failed (then
/// every item of the group failed).
pub(in crate::store) type GroupOutcome<Out> = Result<Vec<Out>, String>;

/// Runs one group of a kind on a connection, in one statement.
pub(in crate::store) type Write<In, Out> =
    for<'c> fn(&'c mut SqliteConnection, Vec<In>) -> BoxFuture<'c, GroupOutcome<Out>>;

/// A caller waiting for its outputs: how many items it added, and where its outputs go.
type Caller<Out> = (usize, oneshot::Sender<GroupOutcome<Out>>);

/// The kinds of grouped statements that share a pool, run by one task on one connection.
///
/// Every statement on a pooled connection cost two round trips to the connection's thread:
/// the statement, and the ping sqlx sends whenever a connection goes back to its pool (and a
/// task to send it). A lane takes a connection when a group is waiting and runs every kind's
/// waiting groups on it, one after another, until none is left; the ping is paid once per
/// stretch of work, not once per statement. On the writer this changes no order that
/// mattered: its one connection ran the kinds one at a time before as well.
pub(in crate::store) struct Lane {
    pool: SqlitePool,
    state: Mutex<LaneState>,
}

struct LaneState {
    kinds: Vec<Weak<dyn Kind>>,
    /// A task holds (or is getting) a connection and runs what is waiting.
    running: bool,
    /// Items were added since the task last looked at every kind.
    added: bool,
}

/// What running a kind's next group came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ran {
    Nothing,
    Written,
    /// The statement failed; the connection may be broken, so the lane lets it go.
    Failed,
}

/// One kind of grouped statement, as its lane sees it.
trait Kind: Send + Sync {
    /// Whether items wait.
    fn is_waiting(&self) -> bool;
    /// Runs this kind's next group on `conn` and hands out the outputs.
    fn run_next<'c>(&'c self, conn: &'c mut SqliteConnection) -> BoxFuture<'c, Ran>;
    /// Fails everything waiting (the lane got no connection).
    fn fail_waiting(&self, reason: &str);
}

impl Lane {
    pub fn new(pool: &SqlitePool) -> Arc<Lane> {
        let state = LaneState { kinds: Vec::new(), running: false, added: false };
        Arc::new(Lane { pool: pool.clone(), state: Mutex::new(state) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LaneState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Items were added: starts the running task unless it is on its way.
    fn wake(self: &Arc<Self>) {
        let mut state = self.lock();
        state.added = true;
        if !std::mem::replace(&mut state.running, true) {
            // A task of its own, so that a caller who gives up mid-way does not leave the
            // others waiting for a statement nobody runs.
            tokio::spawn(run_waiting(Running { lane: Arc::clone(self), done: false }));
        }
    }

    /// The kinds to look at in the next round; `None` (and the task's claim released) when
    /// the last round ran nothing and nothing was added since it started.
    fn next_round(&self, ran_any: bool) -> Option<Vec<Arc<dyn Kind>>> {
        let mut state = self.lock();
        if !ran_any && !state.added {
            state.running = false;
            return None;
        }
        state.added = false;
        Some(state.kinds.iter().filter_map(Weak::upgrade).collect())
    }
}

/// The running task's claim on [`LaneState::running`]: released when the task finds nothing
/// left, or when it is dropped unfinished (its runtime shutting down), so that later items
/// start a new one.
struct Running {
    lane: Arc<Lane>,
    done: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.done {
            self.lane.lock().running = false;
        }
    }
}

/// Runs the waiting groups of every kind of the lane, a round at a time (each kind's next
/// group), on one connection, until a round finds nothing.
async fn run_waiting(mut task: Running) {
    let lane = Arc::clone(&task.lane);
    let mut held: Option<PoolConnection<Sqlite>> = None;
    let (mut ran_any, mut groups) = (true, 0usize);
    while let Some(kinds) = lane.next_round(ran_any) {
        ran_any = false;
        for kind in kinds.iter().filter(|kind| kind.is_waiting()) {
            let conn = match held.as_mut() {
                Some(conn) => conn,
                None => match lane.pool.acquire().await {
                    Ok(conn) => held.insert(conn),
                    Err(err) => {
                        kinds.iter().for_each(|kind| kind.fail_waiting(&err.to_string()));
                        break;
                    }
                },
            };
            let ran = kind.run_next(conn).await;
            if ran == Ran::Nothing {
                continue;
            }
            (ran_any, groups) = (true, groups + 1);
            if ran == Ran::Failed || groups % GROUPS_PER_HOLD == 0 {
                // Back to the pool, where its ping finds a broken connection, and behind
                // whoever else waits for it.
                held = None;
            }
        }
    }
    task.done = true;
}

/// One kind of statement, grouped: while a statement of this kind runs, the items added
/// meanwhile wait and go in the next one. Every statement is a round trip to the connection's
/// thread, and all writes share one connection, so under load a statement per item would queue
/// behind the others; grouped, one statement does them all. A caller still hears back only
/// once its own items are done, and its items stay together and in order in one statement.
pub(in crate::store) struct Grouped<In, Out> {
    pending: Mutex<Pending<In, Out>>,
    write: Write<In, Out>,
    lane: Arc<Lane>,
}

struct Pending<In, Out> {
    items: Vec<In>,
    /// Who added the items, in order.
    callers: Vec<Caller<Out>>,
}

impl<In: Send + 'static, Out: Send + 'static> Grouped<In, Out> {
    /// A kind of `lane` whose groups `write` runs, in one statement each.
    pub fn new(lane: &Arc<Lane>, write: Write<In, Out>) -> Arc<Self> {
        let pending = Mutex::new(Pending { items: Vec::new(), callers: Vec::new() });
        let grouped = Arc::new(Self { pending, write, lane: Arc::clone(lane) });
        let kind: Arc<dyn Kind> = grouped.clone();
        lane.lock().kinds.push(Arc::downgrade(&kind));
        grouped
    }

    /// Runs `items` with whatever else is pending; their outputs, in order.
    pub async fn run(this: &Arc<Self>, items: Vec<In>) -> GroupOutcome<Out> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let (done, written) = oneshot::channel();
        {
            let mut pending = this.lock();
            pending.callers.push((items.len(), done));
            pending.items.extend(items);
        }
        this.lane.wake();
        written.await.map_err(|_| "the store shut down before the statement ran".to_owned())?
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending<In, Out>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next group: whole callers, up to [`MAX_GROUP`] items unless one caller brought more.
    fn take(&self) -> Option<(Vec<In>, Vec<Caller<Out>>)> {
        let mut pending = self.lock();
        if pending.callers.is_empty() {
            return None;
        }
        let (mut callers, mut count) = (0, 0);
        while callers < pending.callers.len() && (callers == 0 || count + pending.callers[callers].0 <= MAX_GROUP) {
            count += pending.callers[callers].0;
            callers += 1;
        }
        let items = pending.items.drain(..count).collect();
        Some((items, pending.callers.drain(..callers).collect()))
    }
}

impl<In: Send + 'static, Out: Send + 'static> Kind for Grouped<In, Out> {
    fn run_next<'c>(&'c self, conn: &'c mut SqliteConnection) -> BoxFuture<'c, Ran> {
        Box::pin(async move {
            let Some((items, callers)) = self.take() else { return Ran::Nothing };
            let expected = items.len();
            let outcome = (self.write)(conn, items).await.and_then(|outputs| {
                if outputs.len() == expected {
                    Ok(outputs)
                } else {
                    Err(format!("a grouped statement gave {} results for {expected} items", outputs.len()))
                }
            });
            let ran = if outcome.is_ok() { Ran::Written } else { Ran::Failed };
            hand_out(outcome, callers);
            ran
        })
    }

    fn is_waiting(&self) -> bool {
        !self.lock().callers.is_empty()
    }

    fn fail_waiting(&self, reason: &str) {
        let callers = {
            let mut pending = self.lock();
            pending.items.clear();
            std::mem::take(&mut pending.callers)
        };
        hand_out(Err(reason.to_owned()), callers);
    }
}

/// Gives each caller its own outputs (or the group's error).
fn hand_out<Out>(outcome: GroupOutcome<Out>, callers: Vec<Caller<Out>>) {
    match outcome {
        Ok(outputs) => {
            let mut outputs = outputs.into_iter();
            for (count, done) in callers {
                // A caller that stopped waiting has nothing to be told.
                let _ = done.send(Ok(outputs.by_ref().take(count).collect()));
            }
        }
        Err(err) => {
            for (_, done) in callers {
                let _ = done.send(Err(err.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests;
