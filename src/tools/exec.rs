//! `exec`: runs a shell command in the workspace, with a time limit that kills everything the
//! command started, a cleared environment, no capabilities, resource limits, capped output and
//! a deny-list of destructive commands.
//!
//! With bubblewrap ([`sandbox`]) a command sees the workspace read-write, the system read-only,
//! a private `/tmp`, no daemon data, no other process and no network. Without it, a command can
//! read and write whatever files this process's user may (without the capabilities root has
//! beyond its files); what it cannot reach is the daemon's environment and memory
//! ([`privileges`]). The deny-list catches accidents, not an adversary (see docs/security.md).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use async_trait::async_trait;
use regex::Regex;
use serde_json::{Value, json};
use thiserror::Error;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio_util::sync::CancellationToken;

use super::fs::Workspace;
use super::{Tool, ToolContext, ToolError, required_str};
use crate::config::ExecToolConfig;
use confine::Confinement;

mod confine;
mod privileges;
pub mod sandbox;
pub use privileges::{MemoryNotPrivate, keep_memory_private};
pub use sandbox::{Limits, Sandbox, SandboxError};

/// How long output is still read after the command ended and its process group was killed.
/// Only a process that left the group (`setsid`) can keep the pipe open that long.
const OUTPUT_GRACE: Duration = Duration::from_secs(2);

/// A deny pattern that is not a regular expression.
#[derive(Debug, Error)]
#[error("{pattern:?} is not a regular expression: {reason}")]
pub struct BadDenyPattern {
    pub pattern: String,
    pub reason: String,
}

/// Runs `sh -c <command>` in the workspace.
pub struct Exec {
    timeout: Duration,
    max_timeout: Duration,
    max_output_bytes: usize,
    /// The only environment commands get: the allow-listed variables of the parent.
    env: Vec<(OsString, OsString)>,
    deny: Vec<Regex>,
    sandbox: Sandbox,
    limits: Limits,
    description: String,
}

impl Exec {
    /// The tool, passing on allow-listed variables of this process's environment.
    pub fn new(config: &ExecToolConfig) -> Result<Self, BadDenyPattern> {
        Self::with_parent_env(config, std::env::vars_os())
    }

    /// The tool, with `parent` standing for the environment commands inherit from (tests
    /// inject one instead of changing the process's own).
    pub fn with_parent_env(
        config: &ExecToolConfig,
        parent: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Result<Self, BadDenyPattern> {
        let env =
            parent.into_iter().filter(|(key, _)| config.env_allowlist.iter().any(|k| key == k.as_str())).collect();
        let deny = config
            .deny_patterns
            .iter()
            .map(|p| Regex::new(p).map_err(|e| BadDenyPattern { pattern: p.clone(), reason: e.to_string() }))
            .collect::<Result<_, _>>()?;
        let mut exec = Self {
            timeout: Duration::from_secs(config.timeout_secs),
            max_timeout: Duration::from_secs(config.max_timeout_secs),
            max_output_bytes: config.max_output_bytes,
            env,
            deny,
            sandbox: Sandbox::None,
            limits: Limits::from_config(config),
            description: String::new(),
        };
        exec.describe();
        Ok(exec)
    }

    /// This tool running its commands in `sandbox`.
    pub fn with_sandbox(mut self, sandbox: Sandbox) -> Self {
        self.sandbox = sandbox;
        self.describe();
        self
    }

    /// What the model is told: how commands run, so it does not try what cannot work.
    fn describe(&mut self) {
        let place = match &self.sandbox {
            Sandbox::Bwrap { network: false, .. } => {
                " It runs in a sandbox: only the workspace is writable, /tmp is private and empty, and there \
                 is no network."
            }
            Sandbox::Bwrap { network: true, .. } => {
                " It runs in a sandbox: only the workspace is writable and /tmp is private and empty."
            }
            Sandbox::None => "",
        };
        let outbox = match &self.sandbox {
            Sandbox::Bwrap { .. } => " Files it writes under outbox/ (also named by $OUTBOX) go with your reply.",
            Sandbox::None => " Files it writes into the folder $OUTBOX names go with your reply.",
        };
        self.description = format!(
            "Runs a shell command (sh -c) in the workspace and returns its exit code and output (stdout and \
             stderr together). stdin is empty; only a few environment variables are set; it runs without privileges, so sudo \
             and setuid programs do not work.{place}{outbox} The command and \
             everything it started are killed after timeout_secs (default {}, at most {}) and when it ends, \
             so background processes do not outlive it. Destructive commands are refused.",
            self.timeout.as_secs(),
            self.max_timeout.as_secs()
        );
    }

    fn time_limit(&self, arguments: &Value) -> Result<Duration, ToolError> {
        match arguments.get("timeout_secs") {
            None | Some(Value::Null) => Ok(self.timeout),
            Some(value) => match value.as_u64() {
                Some(secs) if secs >= 1 => Ok(Duration::from_secs(secs).min(self.max_timeout)),
                _ => Err(ToolError::InvalidArguments(
                    "`timeout_secs` must be a whole number of seconds, at least 1".into(),
                )),
            },
        }
    }

    /// Refuses `command` if it matches a deny pattern (what `execute` checks before running).
    pub fn check_denied(&self, command: &str) -> Result<(), ToolError> {
        match self.deny.iter().find(|pattern| pattern.is_match(command)) {
            None => Ok(()),
            Some(pattern) => Err(ToolError::Refused(format!(
                "this command matches the deny pattern `{pattern}` (tools.exec.deny_patterns), which guards \
                 against destructive commands such as deleting / or the home directory, formatting disks or \
                 shutting the machine down. Do not try to get around it; work on files inside the workspace, \
                 or ask the user to run it themselves."
            ))),
        }
    }
}

#[async_trait]
impl Tool for Exec {
    fn name(&self) -> &str {
        "exec"
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "Shell command line, run with sh -c in the workspace"},
                "timeout_secs": {
                    "type": "integer", "minimum": 1, "maximum": self.max_timeout.as_secs(),
                    "description": format!("Seconds before the command is killed; default {}", self.timeout.as_secs())
                }
            },
            "required": ["command"]
        })
    }

    /// Its own limit plus the output grace and a margin, so the registry's timeout never fires
    /// before this tool has killed the command and reported it.
    fn timeout(&self) -> Option<Duration> {
        Some(self.max_timeout + OUTPUT_GRACE + Duration::from_secs(5))
    }

    async fn execute(&self, arguments: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let command = required_str(&arguments, "command")?;
        if command.trim().is_empty() {
            return Err(ToolError::InvalidArguments("`command` is empty".into()));
        }
        let limit = self.time_limit(&arguments)?;
        self.check_denied(command)?;
        let workspace = Workspace::open(&ctx.workspace, false)?;
        tracing::debug!(run_id = %ctx.run_id, limit_secs = limit.as_secs(), "exec: starting a command");
        let confinement = match self.sandbox.is_sandboxed() {
            true => Confinement::for_run(workspace.root(), ctx)
                .map_err(|e| ToolError::Failed(format!("cannot prepare the workspace for the sandbox: {e}")))?,
            // Without a sandbox nothing confines a command; docs/security.md says what it reaches.
            false => Confinement::default(),
        };
        let outbox = outbox_env(workspace.root(), ctx, &confinement)?;
        let how =
            How { sandbox: &self.sandbox, limits: self.limits, env: &self.env, confinement: &confinement, outbox };
        let finished = run(command, workspace.root(), &how, limit, self.max_output_bytes).await?;
        finished.report(limit)
    }
}

/// How a command ended, with its output.
struct Finished {
    status: Option<ExitStatus>,
    output: String,
}

impl Finished {
    fn report(self, limit: Duration) -> Result<String, ToolError> {
        let output = if self.output.is_empty() { "(no output)".to_owned() } else { self.output };
        match self.status {
            None => Err(ToolError::Failed(format!(
                "the command did not finish within {} s and was killed, with everything it started. Give it \
                 a larger timeout_secs or split the work. Output so far:\n{output}",
                limit.as_secs()
            ))),
            Some(status) => match (status.code(), status.signal()) {
                (Some(code), _) => Ok(format!("[exit code {code}]\n{output}")),
                (None, Some(signal)) => Ok(format!("[killed by signal {signal}]\n{output}")),
                (None, None) => Ok(format!("[ended: {status}]\n{output}")),
            },
        }
    }
}

/// How a command is started: where, with which limits and environment.
struct How<'a> {
    sandbox: &'a Sandbox,
    limits: Limits,
    env: &'a [(OsString, OsString)],
    confinement: &'a Confinement,
    /// `$OUTBOX`: where the command writes files that go with the reply, if the run has a place.
    outbox: Option<PathBuf>,
}

/// What `$OUTBOX` names: in the sandbox the workspace's `outbox/`, the run's own folder
/// mounted there; without one the run's folder itself (made here).
fn outbox_env(root: &Path, ctx: &ToolContext, confinement: &Confinement) -> Result<Option<PathBuf>, ToolError> {
    if let Some((outbox, Some(_))) = &confinement.outbox {
        return Ok(Some(outbox.clone()));
    }
    let Some(folder) = ctx.outbox.as_ref().filter(|_| confinement.outbox.is_none()) else { return Ok(None) };
    let own = root.join(folder);
    std::fs::create_dir_all(&own).map_err(|e| ToolError::Failed(format!("cannot make the outbox folder: {e}")))?;
    Ok(Some(own))
}

/// Runs the command to its end or its time limit. `status` is `None` when it was killed for
/// running too long.
async fn run(
    command: &str,
    dir: &Path,
    how: &How<'_>,
    limit: Duration,
    max_output: usize,
) -> Result<Finished, ToolError> {
    let failed = |what: &str, e: std::io::Error| ToolError::Failed(format!("cannot {what}: {e}"));
    // One pipe for stdout and stderr, so the model sees them interleaved as a terminal would.
    let (reader, writer) = std::io::pipe().map_err(|e| failed("create a pipe", e))?;
    let writer_err = writer.try_clone().map_err(|e| failed("create a pipe", e))?;
    let mut cmd = how.sandbox.command(command, dir, how.confinement);
    cmd.env_clear()
        .envs(how.env.iter().map(|(k, v)| (k, v)))
        .envs(how.outbox.iter().map(|dir| ("OUTBOX", dir)))
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::from(writer_err))
        // Its own process group, so that a timeout can kill everything the command started.
        .process_group(0)
        .kill_on_drop(true);
    let (sandboxed, limits) = (how.sandbox.is_sandboxed(), how.limits);
    // SAFETY: only system calls (prctl, capset, setrlimit): no allocation, no locks, nothing
    // that the fork of a multi-threaded process makes unsafe.
    unsafe {
        cmd.pre_exec(move || {
            // bubblewrap needs its capabilities to set up the namespaces, and drops every one
            // of them for the command itself.
            match sandboxed {
                true => privileges::forbid_new_privileges()?,
                false => privileges::drop_privileges()?,
            }
            limits.apply()
        });
    }
    let mut child = cmd.spawn().map_err(|e| failed("start the command", e))?;
    // Our copies of the pipe's write end live in `cmd`: close them, or EOF never comes.
    drop(cmd);
    let mut group = ProcessGroup::of(child.id());
    let receiver = pipe::Receiver::from_owned_fd(OwnedFd::from(reader)).map_err(|e| failed("read the output", e))?;
    let stop = CancellationToken::new();
    let mut capture = tokio::spawn(capture(receiver, max_output, stop.clone()));

    let status = match tokio::time::timeout(limit, child.wait()).await {
        Ok(status) => Some(status.map_err(|e| failed("wait for the command", e))?),
        Err(_) => None,
    };
    // Background jobs do not outlive the command: kill the whole group, on timeout (while `sh`
    // is not yet reaped, so its id cannot have been reused) and after a normal exit.
    group.kill();
    if status.is_none() {
        // Reap `sh`; it was just sent SIGKILL, so this is quick.
        child.wait().await.map_err(|e| failed("wait for the killed command", e))?;
    }
    let captured = match tokio::time::timeout(OUTPUT_GRACE, &mut capture).await {
        Ok(done) => done,
        Err(_) => {
            stop.cancel();
            capture.await
        }
    }
    .map_err(|e| ToolError::Failed(format!("reading the output stopped: {e}")))?;
    Ok(Finished { status, output: captured.render() })
}

/// A process group to kill with SIGKILL, once, at the latest when dropped (a run that is
/// cancelled drops the future in the middle of `run`).
struct ProcessGroup {
    pgid: Option<libc::pid_t>,
}

impl ProcessGroup {
    fn of(pid: Option<u32>) -> Self {
        // Never 0 or 1: kill(-0) would signal our own group and kill(-1) every process we may.
        let pgid = pid.and_then(|pid| libc::pid_t::try_from(pid).ok()).filter(|&pid| pid > 1);
        Self { pgid }
    }

    fn kill(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            // SAFETY: kill(2) takes no pointers; a negative pid names the process group.
            // After a normal exit the group may already be empty (ESRCH), which is fine. The
            // id is that of our own child `sh`: it is only reused once the group is empty and a
            // new process becomes a group leader with the same id in between, which we accept.
            let result = unsafe { libc::kill(-pgid, libc::SIGKILL) };
            if result != 0 {
                let error = std::io::Error::last_os_error();
                if error.raw_os_error() != Some(libc::ESRCH) {
                    tracing::warn!(pgid, %error, "exec: cannot kill the command's process group");
                }
            }
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Reads the output until EOF or `stop`, keeping its head and tail.
async fn capture(mut receiver: pipe::Receiver, max_bytes: usize, stop: CancellationToken) -> Captured {
    let mut captured = Captured::new(max_bytes);
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        tokio::select! {
            read = receiver.read(&mut buffer) => match read {
                Ok(0) => break,
                Ok(n) => captured.push(&buffer[..n]),
                Err(error) => {
                    captured.error = Some(error.to_string());
                    break;
                }
            },
            () = stop.cancelled() => {
                captured.error = Some("a process that left the command's process group kept the output open".into());
                break;
            }
        }
    }
    captured
}

/// Output kept within a byte budget: the first half and the last half of it, with the count
/// of what was cut, so memory stays bounded however much a command prints.
struct Captured {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_max: usize,
    tail_max: usize,
    total: u64,
    error: Option<String>,
}

impl Captured {
    fn new(max_bytes: usize) -> Self {
        let head_max = max_bytes / 2;
        Self {
            head: Vec::new(),
            tail: VecDeque::new(),
            head_max,
            tail_max: max_bytes - head_max,
            total: 0,
            error: None,
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.head_max - self.head.len();
        if room > 0 {
            let (first, rest) = bytes.split_at(room.min(bytes.len()));
            self.head.extend_from_slice(first);
            bytes = rest;
        }
        self.tail.extend(bytes);
        if self.tail.len() > self.tail_max {
            self.tail.drain(..self.tail.len() - self.tail_max);
        }
    }

    fn render(self) -> String {
        let kept = (self.head.len() + self.tail.len()) as u64;
        let tail: Vec<u8> = self.tail.into_iter().collect();
        let mut out = if self.total > kept {
            let (head, tail) = (String::from_utf8_lossy(&self.head), String::from_utf8_lossy(&tail));
            format!("{head}\n[… {} bytes of output cut …]\n{tail}", self.total - kept)
        } else {
            // Nothing was cut, so head and tail are adjacent: join the bytes before decoding, a
            // character may straddle them.
            let mut all = self.head;
            all.extend(tail);
            String::from_utf8_lossy(&all).into_owned()
        };
        if let Some(error) = self.error {
            out.push_str(&format!("\n[output reading stopped: {error}]"));
        }
        out
    }
}

#[cfg(test)]
mod tests;
