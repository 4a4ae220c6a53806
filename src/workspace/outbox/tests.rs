use std::time::{Duration, SystemTime};
use switchboard_channels::contract::SessionKey;

use super::*;
use crate::workspace::memory::MemoryScope;

const RUN: &str = "0193a4c2-7b1e-7c3a-9f1e-2d4c5b6a7e8f";

fn write(root: &Path, relative: &str, text: &str) -> PathBuf {
    let path = root.join(relative);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    path
}

fn names(collected: &Collected) -> Vec<&str> {
    collected.files.iter().map(|file| file.name.as_str()).collect()
}

#[test]
fn a_runs_outbox_is_a_folder_of_its_own() {
    assert_eq!(run_folder(RUN), Path::new("outbox/runs").join(RUN));
    let odd = run_folder("subagent:../x");
    assert_eq!(odd.parent(), Some(Path::new("outbox/runs")));
    assert_eq!(odd.file_name().unwrap().len(), 32, "hashed: {odd:?}");
    for (path, inside) in [("outbox", true), ("./Outbox/a.csv", true), ("outboxes/a", false), ("a/outbox", false)] {
        assert_eq!(is_outbox_path(Path::new(path)), inside, "{path}");
    }
    assert_eq!(map_into(Path::new("outbox/a/b.csv"), &run_folder(RUN)), run_folder(RUN).join("a/b.csv"));
    assert_eq!(map_into(Path::new("outbox"), &run_folder(RUN)), run_folder(RUN));
}

#[test]
fn tokens_are_stable_per_run_and_unguessable_across_workspaces() {
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = token(one.path(), RUN).unwrap();
    assert!(switchboard_channels::media_files::is_token(&first), "{first}");
    assert_eq!(token(one.path(), RUN).unwrap(), first, "the same run, the same token");
    assert_ne!(token(one.path(), "another run").unwrap(), first);
    assert_ne!(token(two.path(), RUN).unwrap(), first, "another workspace has another key");
    assert!(!switchboard_channels::media_files::is_token(&first.to_uppercase()));
}

#[test]
fn collected_files_move_to_the_sent_folder_in_name_order() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let folder = root.join(run_folder(RUN));
    write(&folder, "report.csv", "a,b\n");
    write(&folder, "charts/q3 sales.png", "png");
    std::os::unix::fs::symlink("/etc/hostname", folder.join("link.txt")).unwrap();
    let collected = collect(&root, RUN, &MemoryScope::Owner, &SessionKey::stored("telegram:42")).unwrap();
    assert_eq!(names(&collected), ["charts_q3_sales.png", "report.csv"]);
    let sent = sent_folder(&root, &token(&root, RUN).unwrap());
    assert_eq!(collected.files[1].path, sent.join("report.csv"));
    assert_eq!(collected.files[1].size, 4);
    assert!(!folder.join("report.csv").exists(), "moved, not copied");
    assert_eq!(collected.refused, ["outbox/link.txt was not sent: it is a link or a special file, not a file"]);
    let label = std::fs::read(sent.with_extension("json")).unwrap();
    assert_eq!(switchboard_channels::media_files::label_session(&label).as_deref(), Some("telegram:42"));
    clear(&root, RUN).unwrap();
    assert!(!folder.exists());
}

/// A workspace where an attempt of [`RUN`] collected `a.txt`.
fn collected_once() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join(run_folder(RUN)), "a.txt", "first");
    collect(dir.path(), RUN, &MemoryScope::Owner, &SessionKey::stored("api:me")).unwrap();
    dir
}

#[test]
fn a_new_attempt_of_the_run_sends_what_an_earlier_one_moved() {
    let dir = collected_once();
    let root = dir.path();
    // The attempt stopped before its reply was stored; the next one writes one more file.
    write(&root.join(run_folder(RUN)), "b.txt", "second");
    let again = collect(root, RUN, &MemoryScope::Owner, &SessionKey::stored("api:me")).unwrap();
    assert_eq!(names(&again), ["a.txt", "b.txt"]);
}

#[test]
fn a_run_that_never_wrote_there_touches_nothing() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        collect(dir.path(), RUN, &MemoryScope::Owner, &SessionKey::stored("api:me")).unwrap(),
        Collected::default()
    );
    assert!(!dir.path().join(OUTBOX_DIR).exists(), "no key, no folders");
}

#[test]
fn more_files_than_a_reply_carries_are_named_in_the_note() {
    let dir = tempfile::tempdir().unwrap();
    for n in 0..MAX_FILES + 2 {
        write(&dir.path().join(run_folder(RUN)), &format!("f{n:02}.txt"), "x");
    }
    let collected = collect(dir.path(), RUN, &MemoryScope::Owner, &SessionKey::stored("api:me")).unwrap();
    assert_eq!(collected.files.len(), MAX_FILES);
    assert_eq!(collected.left_out, ["f10.txt", "f11.txt"]);
    let note = collected.note().unwrap();
    assert!(note.contains("f10.txt, f11.txt") && note.contains("at most 10 files"), "{note}");
}

#[test]
fn the_owners_memory_under_another_name_stays_in_the_owners_chats() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let memory = write(&root, "MEMORY.md", "private");
    let folder = root.join(run_folder(RUN));
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::hard_link(&memory, folder.join("notes.md")).unwrap();
    let group = MemoryScope::Group { channel: "telegram".into(), chat_id: "-100".into() };
    let collected = collect(&root, RUN, &group, &SessionKey::stored("telegram:-100")).unwrap();
    assert!(collected.files.is_empty());
    assert!(collected.note().unwrap().contains("outbox/notes.md was not sent"), "{:?}", collected.note());
}

#[test]
fn files_the_message_tool_sends_leave_the_outbox_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let chart = write(&root.join(run_folder(RUN)), "chart.png", "png");
    let sent =
        send_files(&root, &format!("{RUN}:message:1"), &SessionKey::stored("api:me"), std::slice::from_ref(&chart))
            .unwrap();
    assert_eq!(sent.len(), 1);
    assert!(sent[0].path.starts_with(root.join("outbox/sent")) && !chart.exists());
    assert!(
        collect(&root, RUN, &MemoryScope::Owner, &SessionKey::stored("api:me")).unwrap().files.is_empty(),
        "not sent twice"
    );
}

#[test]
fn old_folders_are_pruned() {
    let dir = collected_once();
    let root = dir.path();
    write(&root.join(run_folder("other")), "b.txt", "x");
    let old = SystemTime::now() - Duration::from_secs(8 * 24 * 3600);
    let token = token(root, RUN).unwrap();
    for path in [sent_folder(root, &token), root.join(run_folder(RUN))] {
        std::fs::File::open(&path).unwrap().set_modified(old).unwrap();
    }
    prune_now(root, Duration::from_secs(7 * 24 * 3600));
    assert!(!sent_folder(root, &token).exists() && !root.join(run_folder(RUN)).exists());
    assert!(root.join(run_folder("other")).exists(), "recent folders stay");
}
