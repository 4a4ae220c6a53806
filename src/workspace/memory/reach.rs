//! Which workspace paths a run of a scope may use.
//!
//! Outside the owner's scope, the private paths are `MEMORY.md`, `USER.md` (and the temporary
//! files written while replacing them) and everything under `memory/`, except the scope's own
//! file. Names are compared ignoring case, since some file systems do. The check is on the
//! real path (`..` and symlinks resolved by the caller), plus a hard-link test, so a link
//! cannot lead around it.

use std::path::{Component, Path};

use thiserror::Error;

use super::{MEMORY_DIR, MemoryScope, OWNER_MEMORY, OWNER_PROFILE};

/// How a path is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Read, written or edited.
    File,
    /// Listed. The directories leading to the scope's own file may be listed (their other
    /// entries are hidden by the caller).
    Dir,
}

/// How far a run's file tools reach.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Reach {
    /// The workspace, except other scopes' memory.
    #[default]
    Workspace,
    /// Only the scope's own memory file: the memory flush outside the owner's chats, whose
    /// only job is that file (so a group's conversation cannot steer it into `SOUL.md`).
    OwnFile,
}

/// Why a path was refused; said to the model.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Refusal {
    #[error("it is the owner's private memory, which only the owner's direct chats can use")]
    OwnerMemory,
    #[error("it belongs to another chat's memory, which only that chat can use")]
    OtherChat,
    #[error("the memory flush of this chat may use only this chat's memory file")]
    OnlyOwnFile,
}

pub(super) fn allows(scope: &MemoryScope, relative: &Path, target: Target, reach: Reach) -> bool {
    refusal(scope, relative, target, reach).is_none()
}

/// Why `relative` is out of the scope's reach, if it is.
fn refusal(scope: &MemoryScope, relative: &Path, target: Target, reach: Reach) -> Option<Refusal> {
    if scope.is_owner() {
        return None;
    }
    let own = scope.file();
    let is_own = own.as_deref() == Some(relative);
    let leads_to_own = target == Target::Dir && own.as_deref().is_some_and(|own| own.starts_with(relative));
    if is_own || leads_to_own {
        return None;
    }
    match private_kind(relative) {
        Some(refusal) => Some(refusal),
        None if reach == Reach::OwnFile => Some(Refusal::OnlyOwnFile),
        None => None,
    }
}

/// Whether `relative` is private memory, and whose.
fn private_kind(relative: &Path) -> Option<Refusal> {
    let mut components = relative.components().filter(|c| !matches!(c, Component::CurDir));
    let first = components.next()?.as_os_str().to_string_lossy().to_lowercase();
    if first == MEMORY_DIR {
        return Some(Refusal::OtherChat);
    }
    let at_root = components.next().is_none();
    (at_root && is_owner_file_name(&first)).then_some(Refusal::OwnerMemory)
}

/// `MEMORY.md`, `USER.md`, and the `.MEMORY.md.<n>.tmp` files a replacement writes first.
fn is_owner_file_name(lowercase: &str) -> bool {
    [OWNER_MEMORY, OWNER_PROFILE].iter().any(|name| {
        let name = name.to_lowercase();
        lowercase == name || lowercase.strip_prefix('.').is_some_and(|rest| rest.starts_with(&format!("{name}.")))
    })
}

/// Checks `real` (canonical, symlinks resolved) against the scope: its place in the workspace
/// `root` (canonical), and for an existing file with several names whether it is the owner's
/// `MEMORY.md` or `USER.md` under another name. A path outside the workspace holds no memory.
pub fn check_real_path(
    scope: &MemoryScope,
    root: &Path,
    real: &Path,
    target: Target,
    reach: Reach,
) -> Result<(), Refusal> {
    if scope.is_owner() {
        return Ok(());
    }
    if let Ok(relative) = real.strip_prefix(root)
        && let Some(refusal) = refusal(scope, relative, target, reach)
    {
        return Err(refusal);
    }
    if is_hard_link_to_owner_file(root, real) {
        return Err(Refusal::OwnerMemory);
    }
    Ok(())
}

fn is_hard_link_to_owner_file(root: &Path, real: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // Only a file with more than one name can be another file under a new name.
    let Ok(metadata) = real.symlink_metadata() else { return false };
    if !metadata.is_file() || metadata.nlink() < 2 {
        return false;
    }
    [OWNER_MEMORY, OWNER_PROFILE].iter().any(|name| {
        root.join(name).metadata().is_ok_and(|owner| owner.dev() == metadata.dev() && owner.ino() == metadata.ino())
    })
}
