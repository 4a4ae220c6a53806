//! `skill_get` and `skill_search`: the agent's way into the skills of its workspace
//! ([`crate::workspace::skills`]). Few skills are listed in the prompt and loaded with
//! `skill_get`; with many, `skill_search` finds them first (the worker offers it only then).

use std::path::{Component, Path, PathBuf};

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{TaskQuery, Tool, ToolContext, ToolError, required_str};
use crate::workspace::skills::{self, Catalog, SKILL_FILE, SKILLS_DIR, Skill, SkillSettings};

/// The names the worker offers or holds back by the number of skills.
pub const SKILL_GET: &str = "skill_get";
pub const SKILL_SEARCH: &str = "skill_search";

/// Bytes of one file of a skill's folder `skill_get` reads at most.
const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// Files of a skill's folder listed after its instructions at most.
const MAX_LISTED_FILES: usize = 50;
/// `skill_search`'s arguments: at most 20 hits, 5 unless asked.
const QUERY: TaskQuery = TaskQuery { max: 20, default: 5 };

/// Loads a skill's instructions, or one of the files its folder holds.
pub struct SkillGet {
    settings: SkillSettings,
}

impl SkillGet {
    pub fn new(settings: SkillSettings) -> Self {
        Self { settings }
    }
}

#[async_trait]
impl Tool for SkillGet {
    fn name(&self) -> &str {
        SKILL_GET
    }

    fn description(&self) -> &str {
        "Loads a skill: its instructions for a task, to follow before doing that task. With `file`, \
         reads one of the files the skill's instructions refer to."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The skill's name"},
                "file": {"type": "string", "description": "A file in the skill's folder, e.g. template.md"}
            },
            "required": ["name"]
        })
    }

    async fn execute(&self, arguments: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let name = required_str(&arguments, "name")?;
        let catalog = skills::load(&ctx.workspace, &self.settings.allow).await;
        let skill = catalog.get(name).ok_or_else(|| unknown(name, &catalog))?.clone();
        let folder = ctx.workspace.join(SKILLS_DIR).join(&skill.folder);
        let file = arguments.get("file").and_then(Value::as_str).map(str::to_owned);
        let read = tokio::task::spawn_blocking(move || match file {
            Some(file) => read_skill_file(&folder, &file),
            None => Ok(instructions(&skill, &folder)),
        });
        read.await.map_err(|err| ToolError::Failed(format!("the read stopped: {err}")))?
    }
}

/// A skill's instructions, with where its files are and which there are.
fn instructions(skill: &Skill, folder: &Path) -> String {
    let mut text =
        format!("Skill {} (folder {SKILLS_DIR}/{}/ in your workspace)\n\n{}", skill.name, skill.folder, skill.body);
    let files = folder_files(folder);
    if !files.is_empty() {
        text.push_str(&format!(
            "\n\nFiles in the skill's folder (read one with skill_get and `file`): {}",
            files.join(", ")
        ));
    }
    text
}

/// The files of a skill's folder other than `SKILL.md`, two levels deep, in name order.
fn folder_files(folder: &Path) -> Vec<String> {
    let mut files = Vec::new();
    let mut pending = vec![(folder.to_owned(), String::new())];
    while let Some((dir, prefix)) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.filter_map(Result::ok) {
            let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
            if name.starts_with('.') || name == SKILL_FILE {
                continue;
            }
            match entry.file_type() {
                Ok(kind) if kind.is_dir() && prefix.is_empty() => pending.push((entry.path(), format!("{name}/"))),
                Ok(kind) if kind.is_file() => files.push(name),
                _ => {}
            }
        }
    }
    files.sort();
    if files.len() > MAX_LISTED_FILES {
        let more = files.len() - MAX_LISTED_FILES;
        files.truncate(MAX_LISTED_FILES);
        files.push(format!("… and {more} more"));
    }
    files
}

/// One file of a skill's folder; the path may not leave the folder, by `..` or by a link.
fn read_skill_file(folder: &Path, file: &str) -> Result<String, ToolError> {
    let relative = PathBuf::from(file);
    if !relative.components().all(|part| matches!(part, Component::Normal(_) | Component::CurDir)) {
        return Err(ToolError::Refused(format!("`{file}` is not a path inside the skill's folder")));
    }
    let not_found = |err: std::io::Error| ToolError::Failed(format!("cannot read `{file}` of the skill: {err}"));
    let root = folder.canonicalize().map_err(not_found)?;
    let path = folder.join(&relative).canonicalize().map_err(not_found)?;
    if !path.starts_with(&root) {
        return Err(ToolError::Refused(format!("`{file}` leads outside the skill's folder")));
    }
    let meta = std::fs::metadata(&path).map_err(not_found)?;
    if !meta.is_file() {
        return Err(ToolError::InvalidArguments(format!("`{file}` is not a file")));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(ToolError::Failed(format!("`{file}` is {} bytes, more than skill_get reads", meta.len())));
    }
    let bytes = std::fs::read(&path).map_err(not_found)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The error for a name that is no skill, with the names there are when they are few.
fn unknown(name: &str, catalog: &Catalog) -> ToolError {
    let known = match catalog.len() {
        0 => "there are no skills".to_owned(),
        count if count <= QUERY.max => {
            let names: Vec<&str> = catalog.iter().map(|skill| skill.name.as_str()).collect();
            format!("the skills are: {}", names.join(", "))
        }
        count => format!("there are {count} skills: find one with {SKILL_SEARCH}"),
    };
    ToolError::InvalidArguments(format!("no skill is called `{name}`; {known}"))
}

/// Ranks the skills for a task described in words.
pub struct SkillSearch {
    settings: SkillSettings,
}

impl SkillSearch {
    pub fn new(settings: SkillSettings) -> Self {
        Self { settings }
    }
}

#[async_trait]
impl Tool for SkillSearch {
    fn name(&self) -> &str {
        SKILL_SEARCH
    }

    fn description(&self) -> &str {
        "Finds skills (instructions for particular tasks) that match a task described in a few words; \
         load the best one with skill_get."
    }

    fn parameters(&self) -> Value {
        QUERY.schema()
    }

    async fn execute(&self, arguments: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let (query, limit) = QUERY.read(&arguments)?;
        let catalog = skills::load(&ctx.workspace, &self.settings.allow).await;
        let hits = catalog.search(query, limit);
        if hits.is_empty() {
            return Ok(format!("No skill matches `{query}`. Skills in all: {}.", catalog.len()));
        }
        let lines: Vec<String> = hits
            .iter()
            .enumerate()
            .map(|(rank, (skill, _))| format!("{}. {}: {}", rank + 1, skill.name, skill.description))
            .collect();
        Ok(lines.join("\n"))
    }
}

#[cfg(test)]
mod tests;
