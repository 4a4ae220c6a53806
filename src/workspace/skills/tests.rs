use std::fs;
use std::path::Path;

use super::*;

fn write_skill(workspace: &Path, folder: &str, text: &str) {
    let dir = workspace.join(SKILLS_DIR).join(folder);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(SKILL_FILE), text).unwrap();
}

fn skill_md(name: &str, description: &str, body: &str) -> String {
    format!("---\nname: {name}\ndescription: {description}\n---\n\n{body}\n")
}

#[tokio::test]
async fn a_workspace_without_skills_has_an_empty_catalog() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = load(dir.path(), &[]).await;
    assert!(catalog.is_empty());
    assert!(catalog.problems().is_empty());
}

#[tokio::test]
async fn skills_are_read_by_name_and_broken_folders_are_reported_not_hidden() {
    let dir = tempfile::tempdir().unwrap();
    write_skill(dir.path(), "notes", &skill_md("meeting-notes", "Minutes from a transcript", "Step 1."));
    write_skill(dir.path(), "bare", "# No front matter\n");
    write_skill(dir.path(), "quiet", "---\nname: quiet\n---\nbody");
    write_skill(dir.path(), "twin", &skill_md("meeting-notes", "Again", "x"));
    fs::create_dir_all(dir.path().join("skills/empty")).unwrap();
    fs::create_dir_all(dir.path().join("skills/.git")).unwrap();

    let catalog = load(dir.path(), &[]).await;
    let names: Vec<&str> = catalog.iter().map(|skill| skill.name.as_str()).collect();
    assert_eq!(names, ["meeting-notes"]);
    let skill = catalog.get("Meeting-Notes").unwrap();
    assert_eq!((skill.folder.as_str(), skill.body.as_str()), ("notes", "Step 1."));
    assert_eq!(catalog.get("notes").unwrap().name, "meeting-notes", "found by folder too");
    let problems: Vec<&str> = catalog.problems().iter().map(|(folder, _)| folder.as_str()).collect();
    assert_eq!(problems, ["bare", "empty", "quiet", "twin"], "{:?}", catalog.problems());
    assert!(catalog.problems()[2].1.contains("no description"), "{:?}", catalog.problems());
}

#[tokio::test]
async fn the_allow_list_narrows_the_catalog() {
    let dir = tempfile::tempdir().unwrap();
    write_skill(dir.path(), "a", &skill_md("alpha", "A", "a"));
    write_skill(dir.path(), "b", &skill_md("beta", "B", "b"));
    let catalog = load(dir.path(), &["beta".to_owned()]).await;
    assert_eq!(catalog.iter().map(|skill| skill.name.as_str()).collect::<Vec<_>>(), ["beta"]);
    assert!(catalog.get("alpha").is_none());
}

/// Sets `path`'s modification time a minute back, as if it had been written long ago.
fn settle(path: &Path) {
    let long_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
    fs::File::open(path).unwrap().set_times(fs::FileTimes::new().set_modified(long_ago)).unwrap();
}

#[tokio::test]
async fn a_new_or_edited_skill_counts_at_once_even_after_the_catalog_was_kept() {
    let dir = tempfile::tempdir().unwrap();
    write_skill(dir.path(), "a", &skill_md("alpha", "First version", "a"));
    for path in ["skills/a/SKILL.md", "skills/a", "skills"] {
        settle(&dir.path().join(path));
    }
    assert_eq!(load(dir.path(), &[]).await.get("alpha").unwrap().description, "First version");
    assert!(shared().fresh(&dir.path().join(SKILLS_DIR)).is_some(), "kept once settled");

    write_skill(dir.path(), "a", &skill_md("alpha", "Second version", "a"));
    assert_eq!(load(dir.path(), &[]).await.get("alpha").unwrap().description, "Second version");
    write_skill(dir.path(), "b", &skill_md("beta", "New", "b"));
    assert_eq!(load(dir.path(), &[]).await.len(), 2);
}

#[tokio::test]
async fn search_ranks_the_skill_whose_name_and_description_match_first() {
    let dir = tempfile::tempdir().unwrap();
    write_skill(
        dir.path(),
        "minutes",
        &skill_md("meeting-minutes", "Write minutes of a meeting", "Decisions, owners."),
    );
    write_skill(dir.path(), "mail", &skill_md("email-reply", "Answer an email", "Mention the meeting date if any."));
    write_skill(dir.path(), "trip", &skill_md("trip-plan", "Plan a trip", "Trains, hotels."));
    let catalog = load(dir.path(), &[]).await;
    let hits = catalog.search("notes from our meeting", 5);
    let names: Vec<&str> = hits.iter().map(|(skill, _)| skill.name.as_str()).collect();
    assert_eq!(names, ["meeting-minutes", "email-reply"], "{hits:?}");
    assert!(catalog.search("quantum chromodynamics", 5).is_empty());
    assert_eq!(catalog.search("plan", 1).len(), 1);
}
