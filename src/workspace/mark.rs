//! The mark that tells one workspace from another: a file holding a random id, made the first
//! time a process uses the directory. Processes on several hosts that see the same mark see
//! the same directory (a shared mount); a host with its own local copy makes a mark of its own.

use std::io::Write;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// The mark's file name in the directory it marks.
pub const MARK_FILE: &str = ".switchboard-dir-id";

#[derive(Debug, Error)]
#[error("cannot read or make the directory mark {path}: {source}")]
pub struct MarkError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// The id in `dir`'s mark, making the directory and the mark when missing. Two processes
/// making it at once (on one host or through a shared mount) end up with the same id: the
/// file is created exclusively, and the one that finds it made reads it instead.
pub fn read_or_make(dir: &Path) -> Result<String, MarkError> {
    read_or_make_file(&dir.join(MARK_FILE), || uuid::Uuid::now_v7().to_string())
}

/// The text in the file at `path`, making it (and its directory) with `make()` when missing,
/// as [`read_or_make`] makes a mark: exclusively, so processes racing to make it agree.
pub fn read_or_make_file(path: &Path, make: impl FnOnce() -> String) -> Result<String, MarkError> {
    let failed = |source| MarkError { path: path.to_owned(), source };
    if let Some(id) = read(path).map_err(failed)? {
        return Ok(id);
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(failed)?;
    }
    let id = make();
    match std::fs::OpenOptions::new().write(true).create_new(true).open(path) {
        Ok(mut file) => {
            file.write_all(format!("{id}\n").as_bytes()).and_then(|()| file.sync_all()).map_err(failed)?;
            Ok(id)
        }
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            // Made by another process just now; it may still be writing the id.
            for _ in 0..50 {
                if let Some(id) = read(path).map_err(failed)? {
                    return Ok(id);
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(failed(std::io::Error::other("the mark stays empty")))
        }
        Err(err) => Err(failed(err)),
    }
}

/// The id in the mark at `path`; `None` when there is no mark or it is still empty.
fn read(path: &Path) -> std::io::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text.trim().to_owned()).filter(|id| !id.is_empty())),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_is_made_once_and_read_after() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = dir.path().join("workspace");
        let first = read_or_make(&workspace).unwrap();
        assert_eq!(read_or_make(&workspace).unwrap(), first);
        assert_ne!(read_or_make(&dir.path().join("other")).unwrap(), first, "another directory, another mark");
    }

    #[test]
    fn processes_racing_to_make_it_agree() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_owned();
        let ids: Vec<String> = (0..8)
            .map(|_| {
                let path = path.clone();
                std::thread::spawn(move || read_or_make(&path).unwrap())
            })
            .map(|thread| thread.join().unwrap())
            .collect();
        assert!(ids.iter().all(|id| id == &ids[0]), "{ids:?}");
    }
}
