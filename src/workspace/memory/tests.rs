use std::path::Path;

use super::*;

fn facts<'a>(channel: &'a str, chat_id: &'a str, is_group: bool) -> ScopeFacts<'a> {
    ScopeFacts { channel, chat_id, is_group, from_person: true, acting: None, owner_chat: false }
}

fn person<'a>(channel: &'a str, id: &'a str, is_owner: bool) -> Option<Acting<'a>> {
    Some(Acting { channel, id, is_owner })
}

fn group(channel: &str, chat_id: &str) -> MemoryScope {
    MemoryScope::Group { channel: channel.into(), chat_id: chat_id.into() }
}

fn someone(channel: &str, id: &str) -> MemoryScope {
    MemoryScope::Person { channel: channel.into(), id: id.into() }
}

#[test]
fn a_group_is_its_own_scope_whoever_writes() {
    for (channel, chat) in [("telegram", "-1001234"), ("discord", "987654321")] {
        let owner = ScopeFacts { acting: person(channel, "1", true), owner_chat: true, ..facts(channel, chat, true) };
        assert_eq!(MemoryScope::decide(&owner), group(channel, chat), "an owner in a group");
        let cron = ScopeFacts { from_person: false, ..facts(channel, chat, true) };
        assert_eq!(MemoryScope::decide(&cron), group(channel, chat), "a job in a group");
    }
}

#[test]
fn a_direct_chat_is_the_owners_only_for_an_owner() {
    let owner = ScopeFacts { acting: person("telegram", "42", true), ..facts("telegram", "42", false) };
    assert_eq!(MemoryScope::decide(&owner), MemoryScope::Owner);
    // Discord: the direct chat's id is not the person's.
    let stranger = ScopeFacts { acting: person("discord", "7", false), ..facts("discord", "555", false) };
    assert_eq!(MemoryScope::decide(&stranger), someone("discord", "7"));
}

#[test]
fn a_system_message_gets_the_owners_memory_only_in_an_owners_chat() {
    let system =
        |acting, owner_chat| ScopeFacts { from_person: false, acting, owner_chat, ..facts("telegram", "42", false) };
    // A heartbeat or an operator's job (acting for nobody), and an owner's own job.
    assert_eq!(MemoryScope::decide(&system(None, true)), MemoryScope::Owner);
    assert_eq!(MemoryScope::decide(&system(person("telegram", "42", true), true)), MemoryScope::Owner);
    // The same in a chat no owner wrote in: that chat's memory.
    assert_eq!(MemoryScope::decide(&system(None, false)), someone("telegram", "42"));
    assert_eq!(MemoryScope::decide(&system(person("telegram", "1", true), false)), someone("telegram", "42"));
    // A person's job is theirs, even in an owner's chat.
    assert_eq!(MemoryScope::decide(&system(person("telegram", "9", false), true)), someone("telegram", "9"));
}

#[test]
fn files_are_named_by_scope() {
    assert_eq!(MemoryScope::Owner.file_shown().as_deref(), Some("MEMORY.md"));
    assert_eq!(group("telegram", "-1001234").file_shown().as_deref(), Some("memory/groups/telegram_-1001234.md"));
    assert_eq!(someone("discord", "123").file_shown().as_deref(), Some("memory/users/discord_123.md"));
    assert_eq!(MemoryScope::None.file(), None);
}

#[test]
fn any_id_makes_one_plain_file_name_of_its_own() {
    let ids = ["../../MEMORY.md", "..", ".", "a/b", "a_b", "a%5Fb", "A", "a", "x\0y", "ünï", "", "~", "-", "a b"];
    let mut names = std::collections::BTreeSet::new();
    for id in ids {
        let stem = file_stem("api", id);
        assert!(stem.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_%~".contains(&b)), "{id:?} → {stem}");
        assert!(!stem.starts_with('.') && stem.len() <= MAX_NAME_BYTES, "{id:?} → {stem}");
        // Unique even where file names ignore case.
        assert!(names.insert(stem.to_lowercase()), "{id:?} → {stem} is taken");
    }
    assert_eq!(file_stem("api", "a/b"), "api_a%2Fb");
    assert_eq!(file_stem("api", "Bob"), "api_%42ob");
    // The channel and the id cannot trade characters across the separator.
    assert_ne!(file_stem("a_b", "c"), file_stem("a", "b_c"));
}

#[test]
fn a_very_long_id_gets_a_short_name_that_still_tells_ids_apart() {
    let long = "x".repeat(256);
    let other = format!("{}y", "x".repeat(255));
    let (first, second) = (file_stem("api", &long), file_stem("api", &other));
    assert_eq!(first.len(), MAX_NAME_BYTES);
    assert!(first.starts_with("api_xxx") && first.contains('~'), "{first}");
    assert_ne!(first, second);
    assert_eq!(first, file_stem("api", &long), "stable");
}

#[test]
fn outside_the_owners_scope_private_files_are_out_of_reach() {
    let scope = group("telegram", "-100");
    let file = |path: &str| scope.reach(Path::new(path), Target::File, Reach::Workspace);
    let dir = |path: &str| scope.reach(Path::new(path), Target::Dir, Reach::Workspace);
    for private in [
        "MEMORY.md",
        "USER.md",
        "memory.md",
        "User.MD",
        ".MEMORY.md.17.tmp",
        "memory/users/telegram_42.md",
        "memory/groups/telegram_-200.md",
        "Memory/groups/telegram_-100.md",
        "memory/groups/TELEGRAM_-100.md",
        "memory/notes.md",
    ] {
        assert!(!file(private), "{private} is reachable");
    }
    for shared in ["SOUL.md", "notes/MEMORY.md", "notes/memory/x.md", "memory.txt", "", "docs"] {
        assert!(file(shared), "{shared} is not reachable");
    }
    assert!(file("memory/groups/telegram_-100.md"), "its own file");
    assert!(dir("memory") && dir("memory/groups") && dir(""), "the way to its own file can be listed");
    assert!(!dir("memory/users"), "other scopes' directories cannot");
}

#[test]
fn the_owner_reaches_everything_and_no_scope_reaches_no_memory() {
    for path in ["MEMORY.md", "USER.md", "memory/groups/telegram_-100.md"] {
        assert!(MemoryScope::Owner.reach(Path::new(path), Target::File, Reach::OwnFile), "{path}");
        assert!(!MemoryScope::None.reach(Path::new(path), Target::File, Reach::Workspace), "{path}");
    }
}

#[test]
fn a_flush_outside_the_owners_scope_reaches_only_its_own_file() {
    let scope = someone("discord", "7");
    let reach = |path: &str, target| scope.reach(Path::new(path), target, Reach::OwnFile);
    assert!(reach("memory/users/discord_7.md", Target::File));
    assert!(reach("", Target::Dir) && reach("memory/users", Target::Dir));
    assert!(!reach("SOUL.md", Target::File) && !reach("notes", Target::Dir));
}

#[test]
fn the_real_path_is_checked_and_a_hard_link_counts_as_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("MEMORY.md"), "secret").unwrap();
    std::fs::hard_link(root.join("MEMORY.md"), root.join("copy.md")).unwrap();
    std::fs::write(root.join("plain.md"), "shared").unwrap();
    let scope = group("discord", "1");
    let check = |path: &Path| check_real_path(&scope, &root, path, Target::File, Reach::Workspace);
    assert_eq!(check(&root.join("MEMORY.md")), Err(Refusal::OwnerMemory));
    assert_eq!(check(&root.join("copy.md")), Err(Refusal::OwnerMemory));
    assert_eq!(check(&root.join("plain.md")), Ok(()));
    assert_eq!(check(Path::new("/elsewhere/MEMORY.md")), Ok(()), "outside the workspace is no one's memory");
    assert_eq!(
        check_real_path(&MemoryScope::Owner, &root, &root.join("copy.md"), Target::File, Reach::Workspace),
        Ok(())
    );
}
