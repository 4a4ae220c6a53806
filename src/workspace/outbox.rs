//! The outbox: files a run writes under `outbox/` go out with its reply.
//!
//! What a run calls `outbox/` is a folder of its own, `outbox/runs/<run id>/` (the file tools
//! map the name, the exec sandbox mounts the folder there), so runs of different chats at the
//! same time never see, let alone send, each other's files, and a run resumed after a crash
//! finds its folder again. When the run ends, its files are moved to
//! `outbox/sent/<token>/` ([`collect`]) and the reply names them there: the next run's outbox
//! starts empty, and the adapters read files nobody changes any more. The token is a keyed
//! hash of the run id (the key, `outbox/.key`, is made once per workspace and never shown to
//! the model), so it is the same for every attempt of a run: files moved by an attempt that
//! crashed before its reply was stored are found and sent by the next one, never lost and
//! never sent twice. Nobody can guess it, so it names the files in the API's download URLs.
//! A `sent/<token>.json` beside each folder says which session the files belong to.
//!
//! Sent files are kept for `[workspace] outbox_keep_days` (the API serves them for
//! downloads), then deleted with the folders of runs that never finished ([`prune`]).

mod collect;
#[cfg(test)]
mod tests;

use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};
use switchboard_channels::hex::hex;
use switchboard_channels::media_files::TOKEN_CHARS;

pub use collect::{Collected, SentFile, clear, collect, prune_due, prune_now, send_files};

use super::mark::{MarkError, read_or_make_file};

/// The folder every run's `outbox/` is mapped into, relative to the workspace.
pub const OUTBOX_DIR: &str = "outbox";
/// Under [`OUTBOX_DIR`]: one folder per run still writing.
const RUNS_DIR: &str = "runs";
/// Under [`OUTBOX_DIR`]: the files of finished runs, one folder per token.
pub const SENT_DIR: &str = "sent";
/// Under [`OUTBOX_DIR`]: the key tokens are made with.
const KEY_FILE: &str = ".key";
/// Files one reply carries at most; more are named in a note, not sent.
pub const MAX_FILES: usize = 10;

/// The folder run `run_id` knows as `outbox/`, relative to the workspace.
pub fn run_folder(run_id: &str) -> PathBuf {
    [OUTBOX_DIR, RUNS_DIR, &folder_name(run_id)].iter().collect()
}

/// The folder where the files sent under `token` are kept, in `workspace`.
pub fn sent_folder(workspace: &Path, token: &str) -> PathBuf {
    sent_dir(workspace).join(token)
}

/// Where `workspace` keeps the files runs sent, a folder per token (what the API serves).
pub fn sent_dir(workspace: &Path) -> PathBuf {
    workspace.join(OUTBOX_DIR).join(SENT_DIR)
}

/// Whether `relative` (a path relative to the workspace) is the outbox or inside it, its
/// first component compared ignoring case (as some file systems do).
pub fn is_outbox_path(relative: &Path) -> bool {
    match relative.components().find(|part| !matches!(part, Component::CurDir)) {
        Some(Component::Normal(first)) => first.to_string_lossy().eq_ignore_ascii_case(OUTBOX_DIR),
        _ => false,
    }
}

/// `relative` (inside the outbox, see [`is_outbox_path`]) moved into `folder`, the run's
/// folder: `outbox/report.csv` becomes `outbox/runs/<id>/report.csv`.
pub fn map_into(relative: &Path, folder: &Path) -> PathBuf {
    let rest = relative.components().filter(|part| !matches!(part, Component::CurDir)).skip(1);
    let mut mapped = folder.to_path_buf();
    mapped.extend(rest);
    mapped
}

/// A run id as one safe folder name: ids are UUIDs; anything else is hashed.
fn folder_name(run_id: &str) -> String {
    let plain = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    if !run_id.is_empty() && run_id.len() <= 64 && run_id.chars().all(plain) {
        return run_id.to_owned();
    }
    hex(&Sha256::digest(run_id.as_bytes())[..16])
}

/// The token of `seed` (a run id, or a sent message's id) in `workspace`: the first 128 bits
/// of SHA-256 over the workspace's key and the seed, in hex.
pub fn token(workspace: &Path, seed: &str) -> Result<String, MarkError> {
    let key = read_or_make_file(&workspace.join(OUTBOX_DIR).join(KEY_FILE), new_key)?;
    let mut hasher = Sha256::new();
    hasher.update(key.as_bytes());
    hasher.update([0]);
    hasher.update(seed.as_bytes());
    Ok(hex(&hasher.finalize()[..TOKEN_CHARS / 2]))
}

/// 256 random bits in hex; from uuids should the OS's random source fail (it does not on
/// Linux), which still makes a key no one can guess in practice.
fn new_key() -> String {
    let mut bytes = [0u8; 32];
    if getrandom::fill(&mut bytes).is_err() {
        let (a, b) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
        bytes[..16].copy_from_slice(a.as_bytes());
        bytes[16..].copy_from_slice(b.as_bytes());
    }
    hex(&bytes)
}
