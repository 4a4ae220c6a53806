use super::*;

#[test]
fn comments_are_stripped_and_blank_runs_folded() {
    let text = "# Title\n\n<!-- a note\nover lines -->\n\nBody\n<!-- unclosed";
    assert_eq!(strip_comments(text), "# Title\n\nBody\n");
}

#[test]
fn cap_keeps_the_head_or_the_tail_by_characters() {
    assert_eq!(cap("héllo wörld", 5, Keep::Head), ("héllo".to_owned(), 6));
    assert_eq!(cap("héllo wörld", 5, Keep::Tail), ("wörld".to_owned(), 6));
    assert_eq!(cap("short", 10, Keep::Head), ("short".to_owned(), 0));
}

#[tokio::test]
async fn files_are_read_capped_and_missing_ones_are_missing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("SOUL.md"), "<!-- owner note -->\nCheerful pirate.").unwrap();
    std::fs::write(dir.path().join("AGENTS.md"), "a".repeat(50)).unwrap();
    std::fs::write(dir.path().join("MEMORY.md"), format!("{}NEWEST", "old ".repeat(20))).unwrap();
    let files = WorkspaceFiles::load(dir.path(), 20, 10, &MemoryScope::Owner).await;
    assert_eq!(files.soul, FileText::Text { text: "Cheerful pirate.".into(), cut_chars: 0 });
    assert_eq!(files.agents, FileText::Text { text: "a".repeat(20), cut_chars: 30 });
    let memory = files.memory.render("MEMORY.md", Keep::Tail).unwrap();
    assert!(memory.ends_with("old NEWEST"), "{memory}");
    assert!(memory.contains("76 earlier characters not shown"), "{memory}");
    assert_eq!(files.user, FileText::Missing);
    assert_eq!(files.user.render("USER.md", Keep::Head), None);
}

#[cfg(unix)]
#[tokio::test]
async fn an_unreadable_file_is_reported_not_emptied() {
    // A directory where a file should be: reading fails with something other than NotFound
    // (and does so even when the tests run as root, unlike a chmod).
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("USER.md")).unwrap();
    let text = read_capped(dir.path(), "USER.md", 100, Keep::Head);
    assert!(matches!(text, FileText::Unreadable(_)), "{text:?}");
    assert!(text.render("USER.md", Keep::Head).unwrap().contains("could not be read"));
}

#[tokio::test]
async fn untouched_templates_with_only_a_title_count_as_empty() {
    let dir = tempfile::tempdir().unwrap();
    for file in BOOTSTRAP_FILES {
        std::fs::write(dir.path().join(file.name), file.template).unwrap();
    }
    let files = WorkspaceFiles::load(dir.path(), 8000, 8000, &MemoryScope::Owner).await;
    let empty = FileText::Text { text: String::new(), cut_chars: 0 };
    for (name, text) in [("USER.md", &files.user), ("HEARTBEAT.md", &files.heartbeat), ("MEMORY.md", &files.memory)] {
        assert_eq!(text, &empty, "{name}");
    }
    let FileText::Text { text: soul, .. } = &files.soul else { panic!("{:?}", files.soul) };
    assert!(soul.starts_with("# Persona\n\nYou are friendly"), "{soul}");
}

#[test]
fn every_template_says_what_to_put_there() {
    for file in BOOTSTRAP_FILES {
        assert!(file.template.contains("<!--"), "{} has no note for the owner", file.name);
        assert!(file.template.len() < 1500, "{} template is long", file.name);
    }
}

#[tokio::test]
async fn a_group_reads_its_own_memory_file_and_neither_owner_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("MEMORY.md"), "owner secret").unwrap();
    std::fs::write(dir.path().join("USER.md"), "owner profile").unwrap();
    let group = MemoryScope::Group { channel: "discord".into(), chat_id: "55".into() };
    let files = WorkspaceFiles::load(dir.path(), 100, 100, &group).await;
    assert_eq!((&files.memory, &files.user), (&FileText::Missing, &FileText::Missing), "no file of its own yet");
    std::fs::create_dir_all(dir.path().join("memory/groups")).unwrap();
    std::fs::write(dir.path().join("memory/groups/discord_55.md"), "- the group meets on Fridays").unwrap();
    let files = WorkspaceFiles::load(dir.path(), 100, 100, &group).await;
    assert_eq!(files.memory, FileText::Text { text: "- the group meets on Fridays".into(), cut_chars: 0 });
    assert_eq!(files.user, FileText::Missing);
}

#[tokio::test]
async fn a_group_memory_file_that_links_to_memory_md_is_not_read() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("MEMORY.md"), "owner secret").unwrap();
    std::fs::create_dir_all(dir.path().join("memory/groups")).unwrap();
    let group = MemoryScope::Group { channel: "telegram".into(), chat_id: "-100".into() };
    std::os::unix::fs::symlink("../../MEMORY.md", dir.path().join("memory/groups/telegram_-100.md")).unwrap();
    let files = WorkspaceFiles::load(dir.path(), 100, 100, &group).await;
    let shown = files.memory.render("memory/groups/telegram_-100.md", Keep::Tail).unwrap();
    assert!(!shown.contains("owner secret") && shown.contains("owner's private memory"), "{shown}");
    // A hard link is the same file under another name.
    std::fs::remove_file(dir.path().join("memory/groups/telegram_-100.md")).unwrap();
    std::fs::hard_link(dir.path().join("MEMORY.md"), dir.path().join("memory/groups/telegram_-100.md")).unwrap();
    let files = WorkspaceFiles::load(dir.path(), 100, 100, &group).await;
    assert!(matches!(files.memory, FileText::Unreadable(_)), "{:?}", files.memory);
}
