use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::FutureExt;
use sqlx::sqlite::SqlitePoolOptions;

use super::*;

/// A pool of `max` connections to a database in memory; `releases` counts the connections
/// given back to it.
fn pool(max: u32, releases: &'static AtomicUsize) -> SqlitePool {
    let options = SqlitePoolOptions::new().max_connections(max).after_release(move |_, _| {
        releases.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok(true) })
    });
    // Lazy: the first connection is opened by the first statement, not by a test of its own.
    options.connect_lazy("sqlite::memory:").unwrap()
}

/// Doubles each item in one `SELECT` (an item of `u32::MAX` makes the statement fail).
async fn double(conn: &mut SqliteConnection, items: Vec<u32>, groups: &AtomicUsize) -> GroupOutcome<u32> {
    groups.fetch_add(1, Ordering::SeqCst);
    let sql = if items.contains(&u32::MAX) {
        "SELECT no_such_function(?1)"
    } else {
        "SELECT json_group_array(v) FROM (SELECT value * 2 AS v FROM json_each(?1) ORDER BY key)"
    };
    let items = serde_json::to_string(&items).map_err(|err| err.to_string())?;
    let doubled: String = sqlx::query_scalar(sql).bind(items).fetch_one(conn).await.map_err(|err| err.to_string())?;
    serde_json::from_str(&doubled).map_err(|err| err.to_string())
}

/// Statements of each test's kinds (the tests run at once, so each counts its own).
static COUNTED: AtomicUsize = AtomicUsize::new(0);
static ON_ONE_CONNECTION: AtomicUsize = AtomicUsize::new(0);
static UNCOUNTED: AtomicUsize = AtomicUsize::new(0);

fn double_counted(conn: &mut SqliteConnection, items: Vec<u32>) -> BoxFuture<'_, GroupOutcome<u32>> {
    double(conn, items, &COUNTED).boxed()
}

fn double_on_one_connection(conn: &mut SqliteConnection, items: Vec<u32>) -> BoxFuture<'_, GroupOutcome<u32>> {
    double(conn, items, &ON_ONE_CONNECTION).boxed()
}

fn double_uncounted(conn: &mut SqliteConnection, items: Vec<u32>) -> BoxFuture<'_, GroupOutcome<u32>> {
    double(conn, items, &UNCOUNTED).boxed()
}

#[tokio::test]
async fn concurrent_callers_share_statements_and_each_gets_its_own_outputs() {
    static RELEASES: AtomicUsize = AtomicUsize::new(0);
    let lane = Lane::new(&pool(1, &RELEASES));
    let grouped = Grouped::new(&lane, double_counted);
    let calls = (0..50u32).map(|n| {
        let grouped = Arc::clone(&grouped);
        tokio::spawn(async move { Grouped::run(&grouped, vec![n, n + 1000]).await })
    });
    let results = futures_util::future::join_all(calls).await;
    for (n, result) in (0..50u32).zip(results) {
        assert_eq!(result.unwrap().unwrap(), vec![n * 2, (n + 1000) * 2]);
    }
    let groups = COUNTED.load(Ordering::SeqCst);
    assert!(groups < 50, "{groups} statements for 50 concurrent callers");
}

/// Two kinds waiting at once run on one connection, taken from the pool once: the pool's
/// ping on each return is paid once for both.
#[tokio::test]
async fn the_kinds_of_a_lane_run_on_one_connection_taken_once() {
    static RELEASES: AtomicUsize = AtomicUsize::new(0);
    let lane = Lane::new(&pool(1, &RELEASES));
    let (a, b) = (Grouped::new(&lane, double_on_one_connection), Grouped::new(&lane, double_on_one_connection));
    let (first, second) = tokio::join!(Grouped::run(&a, vec![1, 2]), Grouped::run(&b, vec![3]));
    assert_eq!((first.unwrap(), second.unwrap()), (vec![2, 4], vec![6]));
    assert_eq!(ON_ONE_CONNECTION.load(Ordering::SeqCst), 2, "one statement per kind");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(RELEASES.load(Ordering::SeqCst), 1, "the connection went back once");
}

/// A steady stream of groups gives the connection back now and then: a statement outside the
/// lane gets its turn on a pool of one.
/// [`double`], a millisecond or so slower: time enough for the callers it answers to be back.
fn double_slowly(conn: &mut SqliteConnection, items: Vec<u32>) -> BoxFuture<'_, GroupOutcome<u32>> {
    Box::pin(async move {
        let count = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000) \
                     SELECT count(*) FROM n";
        sqlx::query_scalar::<_, i64>(count).fetch_one(&mut *conn).await.map_err(|err| err.to_string())?;
        double(conn, items, &UNCOUNTED).await
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_outside_the_lane_is_not_kept_waiting_by_a_stream_of_groups() {
    static RELEASES: AtomicUsize = AtomicUsize::new(0);
    let pool = pool(1, &RELEASES);
    let lane = Lane::new(&pool);
    let grouped = Grouped::new(&lane, double_slowly);
    // A caller every millisecond, each on its own: while a group runs, the next one gathers.
    let feeder = tokio::spawn({
        let grouped = Arc::clone(&grouped);
        async move {
            for n in 0..1_000_000u32 {
                let grouped = Arc::clone(&grouped);
                tokio::spawn(async move { Grouped::run(&grouped, vec![n % 1000]).await });
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let outside = sqlx::query_scalar::<_, i64>("SELECT 7").fetch_one(&pool);
    let answered = tokio::time::timeout(Duration::from_secs(5), outside).await;
    assert_eq!(answered.expect("the outside statement waited behind the lane").unwrap(), 7);
    assert!(!feeder.is_finished(), "the callers were still coming");
    feeder.abort();
}

#[tokio::test]
async fn a_failed_group_fails_each_of_its_callers_and_the_next_group_runs() {
    static RELEASES: AtomicUsize = AtomicUsize::new(0);
    let lane = Lane::new(&pool(1, &RELEASES));
    let grouped = Grouped::new(&lane, double_uncounted);
    let failed = Grouped::run(&grouped, vec![u32::MAX]).await.unwrap_err();
    assert!(failed.contains("no_such_function"), "{failed}");
    assert_eq!(Grouped::run(&grouped, vec![2]).await, Ok(vec![4]));
}

#[tokio::test]
async fn a_caller_with_more_than_a_group_is_written_whole() {
    static RELEASES: AtomicUsize = AtomicUsize::new(0);
    let lane = Lane::new(&pool(1, &RELEASES));
    let grouped = Grouped::new(&lane, double_uncounted);
    let items: Vec<u32> = (0..(MAX_GROUP as u32 + 10)).collect();
    let outputs = Grouped::run(&grouped, items.clone()).await.unwrap();
    assert_eq!(outputs, items.iter().map(|n| n * 2).collect::<Vec<_>>());
}

/// A closed pool gives no connection: whoever waits hears why instead of waiting forever.
#[tokio::test]
async fn callers_hear_why_when_the_lane_gets_no_connection() {
    static RELEASES: AtomicUsize = AtomicUsize::new(0);
    let pool = pool(1, &RELEASES);
    let lane = Lane::new(&pool);
    let grouped = Grouped::new(&lane, double_uncounted);
    pool.close().await;
    let refused = tokio::time::timeout(Duration::from_secs(5), Grouped::run(&grouped, vec![1])).await;
    assert!(refused.expect("a caller was left waiting").is_err());
}
