//! One agent on many hosts: the directories a deployment's processes must see as one.
//!
//! What an agent reads and writes besides the store lives in its workspace: the bootstrap
//! files, `MEMORY.md` and the memory notes, what its file and exec tools write, and the media the
//! chat adapters download (under the workspace by default). Its turns run on any worker, so on a
//! shared store (PostgreSQL) every worker and chat adapter must see the same directories, at
//! the same paths (a message carries the absolute path of its downloaded media): a shared
//! mount. At start each process finds (or makes) the mark in each directory it uses
//! (`workspace::mark`) and compares it with the one the first process recorded in the store;
//! a host with a local copy of its own, or the share mounted elsewhere, refuses to start and
//! says what to mount where. A SQLite store is one host's: nothing is compared.

use std::path::{Path, PathBuf};

use thiserror::Error;

use super::ChannelKind;
use crate::config::Config;
use crate::store::{Database, SharedDir, StoreError};
use crate::workspace::mark::{self, MARK_FILE, MarkError};

#[derive(Debug, Error)]
pub enum SharedDirError {
    #[error(transparent)]
    Mark(#[from] MarkError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "the {key} at {here} on this host is not the directory the other processes of this database use \
         (first used at {there} on {host}): every host must see one {key}, so that memory and bootstrap \
         files, files the tools write and downloaded media are the same whichever worker runs a turn. \
         Mount the shared directory at {there} (NFS or another shared file system). If {here} is a copy \
         made on purpose, write `{mark}` into {here}/{MARK_FILE}"
    )]
    NotShared { key: String, here: String, there: String, host: String, mark: String },
    #[error(
        "the {key} is mounted at {here} on this host but at {there} on {host}: mount it at the same path \
         on every host (messages carry absolute paths of downloaded media), or set the same path in \
         every host's config"
    )]
    Moved { key: String, here: String, there: String, host: String },
}

/// The directories a process uses that must be shared: each agent's workspace (a worker), and
/// the media directories of the chat channels it runs or whose media its turns read.
pub fn places(config: &Config, worker: bool, channels: &[ChannelKind]) -> Vec<(String, PathBuf)> {
    let mut places = Vec::new();
    if worker {
        places.push(("workspace".to_owned(), config.agent.workspace.clone()));
        for (name, agent) in &config.agents {
            places.push((format!("workspace of agent {name}"), agent.workspace.clone()));
        }
    }
    let media = [
        (ChannelKind::Telegram, "Telegram media directory", &config.channels.telegram.media_dir),
        (ChannelKind::Discord, "Discord media directory", &config.channels.discord.media_dir),
        (ChannelKind::Matrix, "Matrix media directory", &config.channels.matrix.media_dir),
    ];
    for (kind, key, dir) in media {
        if (channels.contains(&kind) || worker) && kind.is_active(config) {
            places.push((key.to_owned(), dir.clone()));
        }
    }
    places
}

/// Compares each of `places` with what the store recorded (recording it if first); fails on
/// the first that differs.
pub async fn check(store: &dyn Database, places: &[(String, PathBuf)]) -> Result<(), SharedDirError> {
    if !store.spans_hosts() {
        return Ok(());
    }
    let host = super::settings::host_name();
    for (key, dir) in places {
        let here = SharedDir {
            key: key.clone(),
            mark: mark::read_or_make(dir)?,
            path: dir.display().to_string(),
            host: host.clone(),
        };
        let recorded = store.record_shared_dir(&here).await?;
        compare(&here, recorded)?;
        tracing::debug!(%key, dir = %dir.display(), "shared directory checked");
    }
    Ok(())
}

fn compare(here: &SharedDir, recorded: SharedDir) -> Result<(), SharedDirError> {
    if recorded.mark != here.mark {
        return Err(SharedDirError::NotShared {
            key: here.key.clone(),
            here: here.path.clone(),
            there: recorded.path,
            host: recorded.host,
            mark: recorded.mark,
        });
    }
    if !same_path(Path::new(&recorded.path), Path::new(&here.path)) {
        return Err(SharedDirError::Moved {
            key: here.key.clone(),
            here: here.path.clone(),
            there: recorded.path,
            host: recorded.host,
        });
    }
    Ok(())
}

fn same_path(a: &Path, b: &Path) -> bool {
    a.components().eq(b.components())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(mark: &str, path: &str) -> SharedDir {
        SharedDir { key: "workspace".into(), mark: mark.into(), path: path.into(), host: "a".into() }
    }

    #[test]
    fn the_same_mark_at_the_same_path_passes() {
        assert!(compare(&dir("m1", "/srv/ws"), dir("m1", "/srv/ws/")).is_ok());
    }

    #[test]
    fn another_mark_says_what_to_mount_and_how_to_adopt_a_copy() {
        let err = compare(&dir("m2", "/home/b/ws"), dir("m1", "/srv/ws")).unwrap_err().to_string();
        assert!(err.contains("Mount the shared directory at /srv/ws"), "{err}");
        assert!(err.contains("write `m1` into /home/b/ws/.switchboard-dir-id"), "{err}");
    }

    #[test]
    fn the_share_mounted_elsewhere_is_refused() {
        let err = compare(&dir("m1", "/mnt/ws"), dir("m1", "/srv/ws")).unwrap_err().to_string();
        assert!(err.contains("mounted at /mnt/ws on this host but at /srv/ws on a"), "{err}");
    }
}
