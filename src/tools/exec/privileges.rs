//! Keeping the daemon's environment and memory away from the commands `exec` runs.
//!
//! A command's own environment is allow-listed, but the daemon's (API keys, bot tokens) and its
//! memory are in `/proc/<daemon pid>/{environ,mem}`, next to `maps`, `fd`, `cwd` and `root`. The
//! kernel hands those out only to a caller that passes the ptrace access check (ptrace(2),
//! "Ptrace access mode checking"), and two measures make every command fail it:
//!
//! - The daemon marks itself **not dumpable** at start ([`keep_memory_private`]). A not-dumpable
//!   process is refused to every caller without `CAP_SYS_PTRACE`, even one with the same uid,
//!   which is what a command of a daemon running as an ordinary user is. (It also means no core
//!   dumps.) `status`, `stat` and `cmdline` stay world-readable, as they always are.
//! - The command **drops every capability** before it starts ([`drop_privileges`]) and sets
//!   `no_new_privs`, so neither setuid programs (`sudo`, `su`) nor file capabilities give any
//!   back, and a root daemon's commands run as uid 0 without `CAP_SYS_PTRACE` (refused by the
//!   check above, and by the rule that a caller must hold every capability its target holds),
//!   without `CAP_DAC_OVERRIDE` (files of other users are closed to them), and so on.
//!
//! Both are Linux facilities; on other systems neither is applied.

use std::io;

use thiserror::Error;

/// The daemon could not make its memory private.
#[derive(Debug, Error)]
#[error(
    "cannot make this process's memory private (prctl PR_SET_DUMPABLE 0), which keeps exec commands from reading the environment and memory through /proc: {0}"
)]
pub struct MemoryNotPrivate(#[source] io::Error);

/// Marks this process not dumpable, so that processes without `CAP_SYS_PTRACE`, whatever their
/// uid, cannot read its `/proc/<pid>/environ`, `mem`, `maps` or `fd`. Called once at start,
/// before any command can run. Lasts until the process ends: execve (of a child) resets the
/// flag for the new program only.
#[cfg(target_os = "linux")]
pub fn keep_memory_private() -> Result<(), MemoryNotPrivate> {
    // SAFETY: prctl(2) with integer arguments only.
    let result = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    if result != 0 {
        return Err(MemoryNotPrivate(io::Error::last_os_error()));
    }
    Ok(())
}

/// Not on Linux: nothing to do here (there is no `/proc/<pid>/environ` to guard).
#[cfg(not(target_os = "linux"))]
pub fn keep_memory_private() -> Result<(), MemoryNotPrivate> {
    Ok(())
}

/// The first argument of capset(2) (`struct __user_cap_header_struct`).
#[cfg(target_os = "linux")]
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// One half of the second argument of capset(2) (`struct __user_cap_data_struct`).
#[cfg(target_os = "linux")]
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `_LINUX_CAPABILITY_VERSION_3`: 64-bit capability sets, given as two `CapData`.
#[cfg(target_os = "linux")]
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Runs in the child between fork and exec (`pre_exec`): only plain system calls, no
/// allocation, no locks. Any failure stops the command from starting, so a command never runs
/// with the privileges it should have lost.
#[cfg(target_os = "linux")]
pub(super) fn drop_privileges() -> io::Result<()> {
    // First, so that nothing the command executes can gain privileges: setuid and setgid bits
    // and file capabilities are ignored from here on, for the command and all it starts.
    // SAFETY: prctl(2) with integer arguments only; it touches only this (child) process.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // Ambient capabilities would be kept across execve. EINVAL: a kernel without them.
    // SAFETY: prctl(2) with integer arguments only; it touches only this (child) process.
    if unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) } != 0 {
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EINVAL) {
            return Err(error);
        }
    }
    // The bounding set caps what execve could grant a root command again (no_new_privs already
    // forbids it; this is the second lock). Dropping needs CAP_SETPCAP: EPERM means a daemon
    // without it, which has no capabilities to pass on. EINVAL: past the last capability.
    for capability in 0..64 {
        // SAFETY: prctl(2) with integer arguments only; it touches only this (child) process.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, capability, 0, 0, 0) } != 0 {
            let error = io::Error::last_os_error();
            match error.raw_os_error() {
                Some(libc::EINVAL | libc::EPERM) => break,
                _ => return Err(error),
            }
        }
    }
    // Last, since dropping the bounding set needed CAP_SETPCAP: empty effective, permitted
    // and inheritable sets. Giving up capabilities is always allowed.
    let header = CapHeader { version: CAPABILITY_VERSION_3, pid: 0 };
    let data = [CapData::default(); 2];
    // SAFETY: capset(2) with pointers to a live header and the two data structs version 3
    // reads, laid out as the kernel's (`repr(C)`); it touches only this (child) process.
    if unsafe { libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The first step of [`drop_privileges`] alone: nothing the process executes can gain
/// privileges (setuid bits, file capabilities).
pub(super) fn forbid_new_privileges() -> io::Result<()> {
    // SAFETY: prctl(2) with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Not on Linux: the command keeps this process's privileges.
#[cfg(not(target_os = "linux"))]
pub(super) fn drop_privileges() -> io::Result<()> {
    Ok(())
}
