use std::fs;

use serde_json::json;

use super::*;

fn workspace_with_a_skill() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("skills/minutes");
    fs::create_dir_all(folder.join("examples")).unwrap();
    fs::write(
        folder.join(SKILL_FILE),
        "---\nname: meeting-minutes\ndescription: Minutes from a transcript\n---\n\nUse template.md.\n",
    )
    .unwrap();
    fs::write(folder.join("template.md"), "## Decisions\n## Action items\n").unwrap();
    fs::write(folder.join("examples/board.md"), "An example.").unwrap();
    fs::write(dir.path().join("secret.txt"), "hunter2").unwrap();
    dir
}

fn ctx(dir: &tempfile::TempDir) -> ToolContext {
    ToolContext { workspace: dir.path().to_owned(), ..ToolContext::default() }
}

#[tokio::test]
async fn skill_get_gives_the_instructions_and_the_folders_files() {
    let dir = workspace_with_a_skill();
    let tool = SkillGet::new(SkillSettings::default());
    let text = tool.execute(json!({"name": "meeting-minutes"}), &ctx(&dir)).await.unwrap();
    assert!(text.starts_with("Skill meeting-minutes (folder skills/minutes/"), "{text}");
    assert!(text.contains("Use template.md."), "{text}");
    assert!(text.ends_with("examples/board.md, template.md"), "{text}");
    assert!(!text.contains("name: meeting-minutes"), "front matter left in:\n{text}");

    let file = tool.execute(json!({"name": "meeting-minutes", "file": "template.md"}), &ctx(&dir)).await.unwrap();
    assert_eq!(file, "## Decisions\n## Action items\n");
}

#[tokio::test]
async fn skill_get_does_not_leave_the_skills_folder() {
    let dir = workspace_with_a_skill();
    std::os::unix::fs::symlink(dir.path().join("secret.txt"), dir.path().join("skills/minutes/link.md")).unwrap();
    let tool = SkillGet::new(SkillSettings::default());
    for file in ["../../secret.txt", "/etc/passwd", "link.md"] {
        let err = tool.execute(json!({"name": "meeting-minutes", "file": file}), &ctx(&dir)).await.unwrap_err();
        assert!(matches!(err, ToolError::Refused(_)), "{file}: {err}");
    }
}

#[tokio::test]
async fn an_unknown_or_disallowed_skill_is_named_with_the_ones_there_are() {
    let dir = workspace_with_a_skill();
    let err = SkillGet::new(SkillSettings::default()).execute(json!({"name": "taxes"}), &ctx(&dir)).await.unwrap_err();
    assert_eq!(err.to_string(), "invalid arguments: no skill is called `taxes`; the skills are: meeting-minutes");
    let narrowed = SkillSettings { allow: vec!["other".into()], ..SkillSettings::default() };
    let err = SkillGet::new(narrowed).execute(json!({"name": "meeting-minutes"}), &ctx(&dir)).await.unwrap_err();
    assert!(err.to_string().contains("there are no skills"), "{err}");
}

#[tokio::test]
async fn skill_search_lists_the_best_matches_with_their_descriptions() {
    let dir = workspace_with_a_skill();
    let tool = SkillSearch::new(SkillSettings::default());
    let text = tool.execute(json!({"query": "write up the meeting"}), &ctx(&dir)).await.unwrap();
    assert_eq!(text, "1. meeting-minutes: Minutes from a transcript");
    let none = tool.execute(json!({"query": "tax return"}), &ctx(&dir)).await.unwrap();
    assert_eq!(none, "No skill matches `tax return`. Skills in all: 1.");
}
