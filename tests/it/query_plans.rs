//! Every statement a turn runs against SQLite finds its rows through an index, and none reads
//! a whole table or a whole conversation, so a turn costs the same in a chat of ten messages
//! and of ten thousand. The
//! statements are the ones the real worker runs (taken from sqlx's statement log during turns
//! and compactions), and SQLite's own planner says how it would run each.

use std::collections::BTreeSet;
use std::ffi::{CStr, CString};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::common::{BusKind, Setup};
use futures_util::StreamExt;
use switchboard::config::CompactionConfig;
use switchboard::context::ContextSettings;
use switchboard::worker::{QueueSettings, WorkerSettings};
use switchboard_channels::BusExt;
use switchboard_channels::contract::{InboundMessage, Sender};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// The SQL of each statement sqlx ran while `RECORDING` was on.
static STATEMENTS: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
static RECORDING: AtomicBool = AtomicBool::new(false);

/// Keeps the statements of sqlx's query log (`sqlx::query` events) and nothing else.
struct StatementLog;

impl Subscriber for StatementLog {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target() == "sqlx::query"
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        if !RECORDING.load(Ordering::Relaxed) {
            return;
        }
        let mut fields = SqlFields::default();
        event.record(&mut fields);
        // sqlx logs a short statement whole as its summary and a longer one in `db.statement`.
        let sql = if fields.statement.trim().is_empty() { fields.summary } else { fields.statement };
        STATEMENTS.lock().unwrap().insert(sql.trim().to_owned());
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[derive(Default)]
struct SqlFields {
    summary: String,
    statement: String,
}

impl Visit for SqlFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "summary" => self.summary = value.to_owned(),
            "db.statement" => self.statement = value.to_owned(),
            _ => {}
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.record_str(field, &format!("{value:?}"));
    }
}

fn statement_log() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| tracing::subscriber::set_global_default(StatementLog).unwrap());
}

fn settings() -> WorkerSettings {
    // A compaction every few turns, so its statements are among those checked.
    let compaction = CompactionConfig { max_messages: 8, keep_recent_messages: 2, ..CompactionConfig::default() };
    let defaults = WorkerSettings::default();
    // Each message is its own turn, at once: no waiting for more from the same sender.
    let queue = QueueSettings { debounce: Duration::ZERO, ..defaults.queue.clone() };
    WorkerSettings { context: ContextSettings { compaction, ..ContextSettings::default() }, queue, ..defaults }
}

#[tokio::test]
async fn no_statement_of_a_turn_reads_more_as_the_data_grows() {
    statement_log();
    let h = Setup { settings: settings(), ..Setup::new(BusKind::InProcess) }.start().await;
    let mut out = h.bus.outbound("test").await.unwrap();
    RECORDING.store(true, Ordering::Relaxed);
    for n in 0..30 {
        let sender = Sender { id: format!("u{}", n % 3), name: "U".into(), is_bot: false };
        let chat = format!("chat-{}", n % 2);
        h.bus.publish_inbound(&InboundMessage::user("test", &chat, sender, &format!("message {n}"))).await.unwrap();
        let delivery =
            tokio::time::timeout(Duration::from_secs(10), out.next()).await.expect("no reply").unwrap().unwrap();
        delivery.ack().await.unwrap();
    }
    RECORDING.store(false, Ordering::Relaxed);
    let statements = STATEMENTS.lock().unwrap().clone();
    assert!(statements.iter().any(|sql| sql.contains("FROM transcript")), "no history read recorded: {statements:#?}");
    assert!(statements.iter().any(|sql| sql.contains("compacted_through")), "no compaction recorded: {statements:#?}");

    let db = h.dir.path().join("s.db");
    let mut growing_reads = Vec::new();
    // The finish trigger's creation is not a turn's statement; the statements it creates are.
    let schema = switchboard::store::sqlite::finish_schema().trim();
    let logged = statements.iter().filter(|sql| *sql != schema);
    let planned = logged.flat_map(|sql| split_statements(sql)).chain(finish_trigger_statements());
    for sql in &planned.collect::<BTreeSet<_>>() {
        for step in query_plan(&db, sql) {
            // `SCAN t` reads the whole of t; `SEARCH t USING … INDEX` only the matching rows.
            // (A multi-row INSERT's `SCAN n-ROW VALUES CLAUSE` reads its own parameters,
            // `json_each` the finish's transcript, `finish_result` its one row.)
            let own_values = step.starts_with("SCAN CONSTANT ROW")
                || step.ends_with("-ROW VALUES CLAUSE")
                || step.contains("VIRTUAL TABLE INDEX")
                || step == "SCAN finish_result";
            // The windows models' servers named are read whole once, as the worker starts (while
            // this records): a row per model.
            let at_start = sql.contains("FROM model_windows");
            let whole_table = step.starts_with("SCAN ") && !own_values && !at_start;
            // The rows of one session's transcript are as many as the conversation is long:
            // only a LIMIT bounds such a read.
            let whole_conversation = step.contains("transcript_by_session") && !sql.contains("LIMIT");
            if whole_table || whole_conversation {
                growing_reads.push(format!("{step}\n    in {sql}"));
            }
        }
    }
    assert!(
        growing_reads.is_empty(),
        "statements of a turn whose work grows with the data:\n{}",
        growing_reads.join("\n")
    );
    h.stop().await;
}

/// The statements of one logged call (sqlx runs a string of several in one call).
fn split_statements(sql: &str) -> Vec<String> {
    sql.split(';').map(str::trim).filter(|part| !part.is_empty()).map(str::to_owned).collect()
}

/// The statements the finish trigger runs, which a plan of the INSERT that fires it does not
/// show: with `NEW.x` as parameters, and `RAISE` (trigger-only) as a constant.
fn finish_trigger_statements() -> Vec<String> {
    let schema = switchboard::store::sqlite::finish_schema();
    let body = schema.split_once("\nBEGIN\n").unwrap().1.rsplit_once("END;").unwrap().0;
    let code: String = body.lines().filter(|line| !line.trim_start().starts_with("--")).collect::<Vec<_>>().join("\n");
    let new_column = regex::Regex::new(r"NEW\.\w+").unwrap();
    let statements = split_statements(&new_column.replace_all(&code, "?").replace("RAISE(IGNORE)", "NULL"));
    assert!(statements.len() >= 9, "the trigger's statements were not found: {statements:#?}");
    statements
}

/// The `detail` column of `EXPLAIN QUERY PLAN sql`, parameters unbound (NULL): the plan
/// depends on the statement and the schema, not on the values.
fn query_plan(db: &Path, sql: &str) -> Vec<String> {
    use libsqlite3_sys as ffi;
    let path = CString::new(db.to_str().unwrap()).unwrap();
    let explain = CString::new(format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    let mut steps = Vec::new();
    // SAFETY: a private read-only connection; every handle is checked and closed here.
    unsafe {
        let mut conn = std::ptr::null_mut();
        let opened = ffi::sqlite3_open_v2(path.as_ptr(), &mut conn, ffi::SQLITE_OPEN_READONLY, std::ptr::null());
        assert_eq!(opened, ffi::SQLITE_OK, "cannot open {db:?}");
        // The finish's TEMP objects, which only the writer connection has.
        let schema = CString::new(switchboard::store::sqlite::finish_schema()).unwrap();
        let installed = ffi::sqlite3_exec(conn, schema.as_ptr(), None, std::ptr::null_mut(), std::ptr::null_mut());
        assert_eq!(installed, ffi::SQLITE_OK, "cannot create the finish trigger on {db:?}");
        let mut stmt = std::ptr::null_mut();
        let prepared = ffi::sqlite3_prepare_v2(conn, explain.as_ptr(), -1, &mut stmt, std::ptr::null_mut());
        if prepared != ffi::SQLITE_OK {
            let message = CStr::from_ptr(ffi::sqlite3_errmsg(conn)).to_string_lossy().into_owned();
            ffi::sqlite3_close(conn);
            // BEGIN, COMMIT and the like have no plan.
            assert!(!sql.to_uppercase().contains(" FROM "), "cannot plan {sql}: {message}");
            return steps;
        }
        while ffi::sqlite3_step(stmt) == ffi::SQLITE_ROW {
            let detail = ffi::sqlite3_column_text(stmt, 3);
            if !detail.is_null() {
                steps.push(CStr::from_ptr(detail.cast()).to_string_lossy().into_owned());
            }
        }
        ffi::sqlite3_finalize(stmt);
        ffi::sqlite3_close(conn);
    }
    steps
}
