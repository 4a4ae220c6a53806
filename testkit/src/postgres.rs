//! A PostgreSQL database of its own per test, on the machine's server (127.0.0.1:5432, or
//! `SWITCHBOARD_TEST_POSTGRES`), created empty and dropped when the guard is dropped.
//!
//! `psql` does the creating and dropping, so the testkit needs no database driver, and a
//! drop needs no runtime: guards are dropped at the end of async tests, and `DROP DATABASE …
//! WITH (FORCE)` ends the connections a store still holds.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// The server tests use: a URL without a database name.
fn server() -> String {
    std::env::var("SWITCHBOARD_TEST_POSTGRES").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".to_owned())
}

/// A database that exists while this lives.
#[derive(Debug)]
pub struct TempDatabase {
    name: String,
    url: String,
}

impl TempDatabase {
    /// Creates an empty database with a fresh name. Panics when the server cannot be reached:
    /// a machine of this kind runs PostgreSQL (see the README's "Tests").
    pub fn create() -> TempDatabase {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!("sbtest_{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        psql(&format!("CREATE DATABASE {name}"));
        let url = format!("{}/{name}", server());
        TempDatabase { name, url }
    }

    /// The URL a store connects to (`database_url`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Runs SQL in the database as the server's superuser, for tests that look at or break
    /// what the store wrote; returns psql's unaligned output.
    pub fn sql(&self, sql: &str) -> String {
        let output = Command::new("psql")
            .args([self.url.as_str(), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .output()
            .unwrap_or_else(|err| panic!("cannot run psql: {err}"));
        assert!(output.status.success(), "psql failed on {sql}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }
}

impl Drop for TempDatabase {
    fn drop(&mut self) {
        psql(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
    }
}

/// Runs one statement against the server's `postgres` database.
fn psql(sql: &str) {
    let url = format!("{}/postgres", server());
    let output = Command::new("psql")
        .args([url.as_str(), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .output()
        .unwrap_or_else(|err| panic!("cannot run psql (is the PostgreSQL client installed?): {err}"));
    assert!(
        output.status.success(),
        "{sql} failed (is PostgreSQL running at {}?): {}",
        server(),
        String::from_utf8_lossy(&output.stderr)
    );
}
