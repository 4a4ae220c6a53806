//! Where `exec` runs a command: inside bubblewrap (`bwrap`, Debian's `bubblewrap`), or
//! directly. See docs/security.md for what a command can reach in each.
//!
//! In the sandbox a command sees the system read-only, the workspace read-write, a private
//! `/tmp`, empty directories where the daemon keeps its data and secrets (the data dir,
//! `$HOME`, `/etc/switchboard`, `[tools.exec] hidden_paths`), its own PID namespace (the daemon
//! and every other process invisible), no network unless `network = true`, and no
//! capabilities. Both ways, each process has resource limits (address space, CPU seconds,
//! processes of the user).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use thiserror::Error;

use super::confine::Confinement;
use crate::config::ExecToolConfig;

/// Where bubblewrap is looked for first; then on `PATH`.
const BWRAP: &str = "/usr/bin/bwrap";
/// Secrets live here on a packaged install (`EnvironmentFile=`, the config).
const SYSTEM_CONFIG_DIR: &str = "/etc/switchboard";

#[derive(Debug, Error)]
pub enum SandboxError {
    #[error("tools.exec.sandbox = \"bwrap\", but bubblewrap cannot run here: {0}")]
    Unavailable(String),
}

/// How commands are run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sandbox {
    Bwrap { program: PathBuf, hidden: Vec<PathBuf>, network: bool },
    None,
}

/// Per-process limits, applied both ways (0 = none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub memory_bytes: u64,
    pub cpu_secs: u64,
    pub processes: u64,
}

impl Limits {
    pub fn from_config(config: &ExecToolConfig) -> Self {
        Self {
            memory_bytes: config.max_memory_mb.saturating_mul(1024 * 1024),
            cpu_secs: config.max_cpu_secs,
            processes: config.max_processes,
        }
    }

    /// Sets the limits on this (child) process, between fork and exec: setrlimit(2) only.
    pub fn apply(self) -> std::io::Result<()> {
        for (resource, value) in [
            (libc::RLIMIT_AS, self.memory_bytes),
            (libc::RLIMIT_CPU, self.cpu_secs),
            (libc::RLIMIT_NPROC, self.processes),
        ] {
            if value == 0 {
                continue;
            }
            let limit = libc::rlimit { rlim_cur: value, rlim_max: value };
            // SAFETY: setrlimit(2) with a pointer to a live struct; it touches only this process.
            if unsafe { libc::setrlimit(resource, &limit) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

impl Sandbox {
    /// The sandbox `[tools.exec]` asks for, with the data dir to hide. `auto` falls back to
    /// none, with a warning, where bubblewrap is missing or cannot make namespaces.
    pub fn from_config(config: &ExecToolConfig, data_dir: &Path) -> Result<Self, SandboxError> {
        if is_root() {
            static WARNED_ROOT: OnceLock<()> = OnceLock::new();
            WARNED_ROOT.get_or_init(|| tracing::warn!("{ROOT_WARNING}"));
        }
        if config.sandbox == "none" {
            return Ok(Self::None);
        }
        match probe() {
            Ok(program) => {
                Ok(Self::Bwrap { program: program.clone(), hidden: hidden(config, data_dir), network: config.network })
            }
            Err(why) if config.sandbox == "bwrap" => Err(SandboxError::Unavailable(why.clone())),
            Err(why) => {
                static WARNED: OnceLock<()> = OnceLock::new();
                WARNED.get_or_init(|| {
                    tracing::warn!(reason = %why, "exec runs commands WITHOUT a sandbox: they can read what this user can and reach the network; install bubblewrap (apt-get install bubblewrap) or set tools.exec.sandbox = \"none\" to silence this");
                });
                Ok(Self::None)
            }
        }
    }

    pub fn is_sandboxed(&self) -> bool {
        matches!(self, Self::Bwrap { .. })
    }

    /// The process to start for `sh -c <command>` in `workspace`, with the mounts of
    /// `confinement` over it in the sandbox.
    pub fn command(&self, command: &str, workspace: &Path, confinement: &Confinement) -> tokio::process::Command {
        let Self::Bwrap { program, hidden, network } = self else {
            let mut direct = tokio::process::Command::new("/bin/sh");
            direct.arg("-c").arg(command).current_dir(workspace);
            return direct;
        };
        let mut bwrap = tokio::process::Command::new(program);
        bwrap.arg("--unshare-all");
        if *network {
            bwrap.arg("--share-net");
        }
        bwrap.args(["--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]);
        for path in hidden {
            match path.is_dir() {
                true => bwrap.arg("--tmpfs").arg(path),
                false => bwrap.args(["--ro-bind", "/dev/null"]).arg(path),
            };
        }
        // After the hidden paths: the workspace usually lies inside the data dir.
        bwrap.arg("--bind").arg(workspace).arg(workspace);
        bwrap.args(confinement.args()).arg("--chdir").arg(workspace);
        bwrap.args(["--cap-drop", "ALL", "--", "/bin/sh", "-c", command]).current_dir(workspace);
        bwrap
    }
}

/// What running as root means for `exec`, said at start and by `doctor`.
pub const ROOT_WARNING: &str = "the daemon runs as root: exec's max_processes (RLIMIT_NPROC) does not bind root, \
     so a command can fork without that limit, and without the sandbox a command can read and change every file \
     on this machine; run switchboard as an ordinary user (systemd/switchboard.service does)";

/// Whether this process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid(2) takes no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// bubblewrap's path when it is installed and can make the namespaces here (a container may
/// forbid user namespaces), checked once per process.
fn probe() -> &'static Result<PathBuf, String> {
    static PROBED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PROBED.get_or_init(|| {
        let program = find_bwrap().ok_or("bwrap is not installed (Debian: apt-get install bubblewrap)")?;
        let trial = std::process::Command::new(&program)
            .args(["--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--", "/bin/true"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .output()
            .map_err(|err| format!("cannot start {}: {err}", program.display()))?;
        if !trial.status.success() {
            let said = String::from_utf8_lossy(&trial.stderr);
            return Err(format!("{} cannot make its namespaces here: {}", program.display(), said.trim()));
        }
        Ok(program)
    })
}

fn find_bwrap() -> Option<PathBuf> {
    let standard = PathBuf::from(BWRAP);
    if standard.is_file() {
        return Some(standard);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join("bwrap")).find(|candidate| candidate.is_file())
}

/// What a sandboxed command must not see: existing paths only (bubblewrap cannot mount over a
/// missing one on the read-only root), never `/` itself.
fn hidden(config: &ExecToolConfig, data_dir: &Path) -> Vec<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let candidates = [Some(data_dir.to_owned()), home, Some(PathBuf::from(SYSTEM_CONFIG_DIR))];
    let mut hidden: Vec<PathBuf> =
        candidates.into_iter().flatten().chain(config.hidden_paths.iter().cloned()).collect();
    hidden.retain(|path| path.is_absolute() && path.parent().is_some() && path.exists());
    // Outer paths first, so a hidden directory inside another is mounted over it, not under.
    hidden.sort_by(|a, b| (a.components().count(), a).cmp(&(b.components().count(), b)));
    hidden.dedup();
    hidden
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(sandbox: &Sandbox, workspace: &Path) -> Vec<String> {
        let command = sandbox.command("ls", workspace, &Confinement::default());
        command.as_std().get_args().map(|arg| arg.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn the_workspace_is_mounted_over_the_hidden_data_dir_and_the_network_is_opt_in() {
        let dir = tempfile::tempdir().unwrap();
        let (data, secret, workspace) = (dir.path(), dir.path().join("secret.env"), dir.path().join("workspace"));
        std::fs::write(&secret, "KEY=1").unwrap();
        let sandbox =
            Sandbox::Bwrap { program: BWRAP.into(), hidden: vec![data.to_owned(), secret.clone()], network: false };
        let line = args(&sandbox, &workspace).join(" ");
        assert!(!line.contains("--share-net"), "{line}");
        let at = |needle: String| line.find(&needle).unwrap_or_else(|| panic!("{needle} missing: {line}"));
        let (data, secret, workspace) = (data.display(), secret.display(), workspace.display());
        assert!(at(format!("--tmpfs {data} ")) < at(format!("--ro-bind /dev/null {secret}")), "{line}");
        assert!(at(format!("/dev/null {secret}")) < at(format!("--bind {workspace} {workspace}")), "{line}");
        assert!(line.ends_with("--cap-drop ALL -- /bin/sh -c ls"), "{line}");
        let networked = Sandbox::Bwrap { program: BWRAP.into(), hidden: Vec::new(), network: true };
        assert!(args(&networked, dir.path()).contains(&"--share-net".to_owned()));
        assert_eq!(args(&Sandbox::None, dir.path()), ["-c", "ls"]);
    }

    #[test]
    fn hidden_paths_are_existing_absolute_outer_first_and_never_root() {
        let dir = tempfile::tempdir().unwrap();
        let inner = dir.path().join("a/b");
        std::fs::create_dir_all(&inner).unwrap();
        let config = ExecToolConfig {
            hidden_paths: vec![inner.clone(), "/".into(), "relative".into(), "/no/such/path".into()],
            ..ExecToolConfig::default()
        };
        let found = hidden(&config, dir.path());
        let position = |path: &Path| found.iter().position(|p| p == path);
        assert!(position(dir.path()) < position(&inner), "{found:?}");
        assert!(!found.iter().any(|p| p == Path::new("/") || p.is_relative() || !p.exists()), "{found:?}");
    }
}
