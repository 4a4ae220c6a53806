//! Statements grouped onto a connection: the writes onto the one writer, the reads every turn
//! makes onto a reader (see [`Grouped`]).

use std::sync::{Arc, Mutex, PoisonError};

use futures_util::future::BoxFuture;
use tokio::sync::oneshot;

/// Most items one statement takes; the rest wait for the next one.
const MAX_GROUP: usize = 256;

/// What a group's statement returns: one output per item, in order, or why it failed (then
/// every item of the group failed).
pub(in crate::store) type GroupOutcome<Out> = Result<Vec<Out>, String>;

/// A caller waiting for its outputs: how many items it added, and where its outputs go.
type Caller<Out> = (usize, oneshot::Sender<GroupOutcome<Out>>);

type Write<In, Out> = Box<dyn Fn(Vec<In>) -> BoxFuture<'static, GroupOutcome<Out>> + Send + Sync>;

/// One kind of write, grouped: while one statement of this kind is on the writer connection,
/// the items added meanwhile wait and go in the next one. Every write is a round trip to the
/// connection's thread and all writes share that one connection, so under load a statement
/// per item would queue behind the others; grouped, one statement does them all. A caller
/// still hears back only once its own items are written, and its items stay together and in
/// order in one statement.
pub(in crate::store) struct Grouped<In, Out> {
    pending: Mutex<Pending<In, Out>>,
    write: Write<In, Out>,
}

struct Pending<In, Out> {
    items: Vec<In>,
    /// Who added the items, in order.
    callers: Vec<Caller<Out>>,
    /// A task is writing, and takes what is pending when it is done.
    writing: bool,
}

impl<In: Send + 'static, Out: Send + 'static> Grouped<In, Out> {
    /// `write` writes one group in one statement.
    pub fn new(write: impl Fn(Vec<In>) -> BoxFuture<'static, GroupOutcome<Out>> + Send + Sync + 'static) -> Self {
        let pending = Pending { items: Vec::new(), callers: Vec::new(), writing: false };
        Self { pending: Mutex::new(pending), write: Box::new(write) }
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
            if !std::mem::replace(&mut pending.writing, true) {
                // A task of its own, so that a caller who gives up mid-way does not leave the
                // others waiting for a write nobody runs.
                tokio::spawn(write_pending(Writing { grouped: Arc::clone(this), done: false }));
            }
        }
        written.await.map_err(|_| "the store shut down before the write".to_owned())?
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending<In, Out>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next group: whole callers, up to [`MAX_GROUP`] items unless one caller brought more.
    fn take(&self) -> Option<(Vec<In>, Vec<Caller<Out>>)> {
        let mut pending = self.lock();
        if pending.callers.is_empty() {
            pending.writing = false;
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

/// The writing task's claim on [`Pending::writing`]: released when the task finds nothing
/// left, or when it is dropped unfinished (its runtime shutting down), so a later write starts
/// a new one.
struct Writing<In: Send + 'static, Out: Send + 'static> {
    grouped: Arc<Grouped<In, Out>>,
    done: bool,
}

impl<In: Send + 'static, Out: Send + 'static> Drop for Writing<In, Out> {
    fn drop(&mut self) {
        if !self.done {
            self.grouped.lock().writing = false;
        }
    }
}

/// Writes the pending items, a group at a time, until none are left.
async fn write_pending<In: Send + 'static, Out: Send + 'static>(mut task: Writing<In, Out>) {
    loop {
        let Some((items, callers)) = task.grouped.take() else {
            task.done = true;
            return;
        };
        let expected = items.len();
        let outcome = (task.grouped.write)(items).await.and_then(|outputs| {
            if outputs.len() == expected {
                Ok(outputs)
            } else {
                Err(format!("a grouped write gave {} results for {expected} items", outputs.len()))
            }
        });
        hand_out(outcome, callers);
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
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn doubling(groups: Arc<AtomicUsize>) -> Arc<Grouped<u32, u32>> {
        Arc::new(Grouped::new(move |items: Vec<u32>| {
            groups.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                tokio::task::yield_now().await;
                Ok(items.into_iter().map(|n| n * 2).collect())
            }) as BoxFuture<'static, GroupOutcome<u32>>
        }))
    }

    #[tokio::test]
    async fn concurrent_callers_share_statements_and_each_gets_its_own_outputs() {
        let groups = Arc::new(AtomicUsize::new(0));
        let grouped = doubling(Arc::clone(&groups));
        let calls = (0..50u32).map(|n| {
            let grouped = Arc::clone(&grouped);
            tokio::spawn(async move { Grouped::run(&grouped, vec![n, n + 1000]).await })
        });
        let results = futures_util::future::join_all(calls).await;
        for (n, result) in (0..50u32).zip(results) {
            assert_eq!(result.unwrap().unwrap(), vec![n * 2, (n + 1000) * 2]);
        }
        let groups = groups.load(Ordering::SeqCst);
        assert!(groups < 50, "{groups} statements for 50 concurrent callers");
    }

    #[tokio::test]
    async fn a_failed_group_fails_each_of_its_callers() {
        let grouped: Arc<Grouped<u32, u32>> =
            Arc::new(Grouped::new(|_| Box::pin(async { Err("disk full".to_owned()) }) as BoxFuture<'static, _>));
        assert_eq!(Grouped::run(&grouped, vec![1]).await, Err("disk full".to_owned()));
        // The task let go of the group: the next write runs too.
        assert_eq!(Grouped::run(&grouped, vec![2]).await, Err("disk full".to_owned()));
    }

    #[tokio::test]
    async fn a_caller_with_more_than_a_group_is_written_whole() {
        let grouped = doubling(Arc::new(AtomicUsize::new(0)));
        let items: Vec<u32> = (0..(MAX_GROUP as u32 + 10)).collect();
        let outputs = Grouped::run(&grouped, items.clone()).await.unwrap();
        assert_eq!(outputs, items.iter().map(|n| n * 2).collect::<Vec<_>>());
    }
}
