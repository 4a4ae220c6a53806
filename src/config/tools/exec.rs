//! `[tools.exec]`: The exec tool.

use serde::{Deserialize, Serialize};

/// The exec tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ExecToolConfig {
    pub enabled: bool,
    /// Seconds a command may run when the call does not say.
    pub timeout_secs: u64,
    /// Upper bound of the `timeout_secs` a call may ask for.
    pub max_timeout_secs: u64,
    /// Output (stdout and stderr together) kept per command; longer output keeps its head
    /// and tail.
    pub max_output_bytes: usize,
    /// Environment variables passed on to commands; every other variable is removed.
    pub env_allowlist: Vec<String>,
    /// Regular expressions; a command matching any of them is refused.
    pub deny_patterns: Vec<String>,
    /// `auto` (bubblewrap when installed and working, else none with a warning at start),
    /// `bwrap` (required: start fails without it) or `none`. See docs/security.md.
    pub sandbox: String,
    /// Whether sandboxed commands may reach the network (without a sandbox they always can).
    pub network: bool,
    /// Paths hidden from sandboxed commands besides the data dir, `$HOME` and
    /// `/etc/switchboard` (files that hold secrets elsewhere, such as an `EnvironmentFile`).
    pub hidden_paths: Vec<std::path::PathBuf>,
    /// Address space of each process of a command, in MiB; 0 = no limit.
    pub max_memory_mb: u64,
    /// CPU seconds each process of a command may use; 0 = no limit.
    pub max_cpu_secs: u64,
    /// Processes the daemon's user may have while a command runs (RLIMIT_NPROC: it counts the
    /// daemon's own threads too, and does not bind root); 0 = no limit.
    pub max_processes: u64,
}

/// The values `[tools.exec] sandbox` takes.
pub const SANDBOX_MODES: [&str; 3] = ["auto", "bwrap", "none"];

impl Default for ExecToolConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            timeout_secs: 60,
            max_timeout_secs: 300,
            max_output_bytes: 64 * 1024,
            env_allowlist: ["PATH", "HOME", "LANG", "LC_ALL", "TZ", "TERM"].map(String::from).to_vec(),
            deny_patterns: DEFAULT_DENY_PATTERNS.iter().map(|p| (*p).to_owned()).collect(),
            sandbox: "auto".into(),
            network: false,
            hidden_paths: Vec::new(),
            max_memory_mb: 2048,
            max_cpu_secs: 300,
            max_processes: 512,
        }
    }
}

/// Commands refused by default. They catch accidents (a model that "cleans up" `/`), not an
/// adversary: quoting or indirection gets around any pattern list. Each is anchored to how the
/// command is written so that harmless look-alikes (`rm -rf ./build`, `echo shutdown`,
/// `dd of=/dev/null`) still run. `\x27` is a single quote.
pub const DEFAULT_DENY_PATTERNS: &[&str] = &[
    // Any rm whose operand is /, /*, ~, ~/*, $HOME or a top-level system directory.
    r#"\brm\b[^;&|\n]*\s["\x27]?(/+|~|\$HOME|\$\{HOME\}|/(bin|boot|dev|etc|home|lib|lib64|opt|root|sbin|srv|usr|var))/*\*?["\x27]?(\s|$|[;&|)])"#,
    // Making or wiping file systems.
    r"\b(mkfs(\.\w+)?|mke2fs|mkswap|wipefs)\b",
    // Writing to a block device: dd of=, a redirect, or tee.
    r"(\bof=|>\s*|\btee\b[^;&|\n]*\s)/dev/(sd|hd|vd|xvd|nvme|mmcblk|disk|mapper|md|dm-|loop)",
    // Power state, at command position only (so `echo shutdown` and `grep reboot log` run).
    r"(^|[;&|({`\n])\s*((sudo|doas|nohup|exec|command|env|time)\s+(-\S+\s+)*)*(\S*/)?(shutdown|reboot|halt|poweroff|systemctl\s+(poweroff|reboot|halt|kexec))(\s|$|[;&|)])",
    // A fork bomb: a function whose body pipes into itself in the background, as in :(){ :|:& };:
    r"\(\)\s*\{[^}]*\|[^}]*&\s*\}",
    // Recursive chmod/chown/chgrp of / or a top-level system directory.
    r#"\bch(mod|own|grp)\b[^;&|\n]*\s(-[a-zA-Z]*R|--recursive)\b[^;&|\n]*\s["\x27]?/(bin|boot|dev|etc|home|lib|lib64|opt|root|sbin|srv|usr|var)?/*["\x27]?(\s|$|[;&|)])"#,
];
