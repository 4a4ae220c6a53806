//! The channel's own files in its directory: written whole (a temporary file, synced, then
//! renamed over the old one), readable by the daemon's user only, since the session holds an
//! access token.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The `since` token of the last sync whose messages the bus took: where the next start goes on.
const SYNC_FILE: &str = "sync-token";

/// Writes `bytes` to `path` whole, with mode 0600.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let temporary = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&temporary)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)
}

/// Where the sync goes on after a restart.
#[derive(Debug, Clone)]
pub(crate) struct SyncPosition {
    path: PathBuf,
}

impl SyncPosition {
    pub fn in_dir(dir: &Path) -> Self {
        Self { path: dir.join(SYNC_FILE) }
    }

    /// The saved token; `None` on the first start.
    pub fn load(&self) -> std::io::Result<Option<String>> {
        match std::fs::read_to_string(&self.path) {
            Ok(token) => Ok(Some(token.trim().to_owned()).filter(|token| !token.is_empty())),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err),
        }
    }

    pub fn save(&self, token: &str) -> std::io::Result<()> {
        write_private(&self.path, token.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn the_position_survives_a_restart_and_stays_private() {
        let dir = tempfile::tempdir().unwrap();
        let position = SyncPosition::in_dir(dir.path());
        assert_eq!(position.load().unwrap(), None);
        position.save("s72594_4483_1934").unwrap();
        position.save("s72595_4483_1935").unwrap();
        assert_eq!(SyncPosition::in_dir(dir.path()).load().unwrap().as_deref(), Some("s72595_4483_1935"));
        let mode = std::fs::metadata(dir.path().join(SYNC_FILE)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
