//! Application (slash) commands: `GET`/`PUT /applications/{application}/commands` (the global
//! table) and `…/guilds/{guild}/commands` (a server's), and the invocations a test makes
//! ([`FakeDiscord::run_command`](super::FakeDiscord::run_command)).
//!
//! Discord's rules: a `PUT` replaces the whole table (bulk overwrite; a command keeps its id
//! when its name stays); at most 100 commands; a CHAT_INPUT (type 1) name is 1–32 lower-case
//! letters, digits, `-` or `_`, unique in the table; a description 1–100 characters; at most 25
//! options, each with a name and description by the same rules, a type 1–11, required ones
//! before the others, names unique; at most 25 choices of 1–100 characters; `contexts` among
//! 0 (servers), 1 (the bot's DMs), 2 (private channels); `integration_types` 0 or 1. A refusal
//! is 400 Invalid Form Body (50035) with the field's path (`0.options.1.name`). A wrong
//! application id is 404 `Unknown Application` (10002); a server the bot is not in, 403
//! `Missing Access` (50001). Listings are as Discord writes them: ids, `version`, defaults
//! filled in, `required` only when true and `options` only when there are some.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};

use super::APPLICATION_ID;
use super::form::{Refusal, bounded_list, invalid_form_body};
use super::state::State;
use super::wire::Answer;

const MAX_COMMANDS: usize = 100;
const MAX_OPTIONS: usize = 25;
const MAX_CHOICES: usize = 25;
const CHAT_INPUT: u64 = 1;
const STRING: u64 = 3;
/// Interaction contexts: a server, the bot's DMs.
pub(super) const IN_GUILDS: u64 = 0;
pub(super) const IN_BOT_DMS: u64 = 1;

/// The registered tables: the global one (`None`) and servers' (`Some(guild id)`).
#[derive(Default)]
pub(super) struct Commands {
    tables: HashMap<Option<u64>, Vec<Value>>,
    next_id: u64,
}

impl Commands {
    /// The table at `guild` (global for `None`), as Discord lists it.
    pub(super) fn table(&self, guild: Option<u64>) -> Vec<Value> {
        self.tables.get(&guild).cloned().unwrap_or_default()
    }

    /// The command a person in `guild` (a DM for `None`) sees under `name`: a server's own
    /// first, else a global one offered there.
    pub(super) fn visible(&self, guild: Option<u64>, name: &str) -> Option<Value> {
        let named = |table: Option<&Vec<Value>>| table?.iter().find(|command| command["name"] == name).cloned();
        let context = if guild.is_some() { IN_GUILDS } else { IN_BOT_DMS };
        let offered = |command: &Value| match command["contexts"].as_array() {
            Some(contexts) => contexts.iter().any(|found| found.as_u64() == Some(context)),
            None => true,
        };
        guild.and_then(|guild| named(self.tables.get(&Some(guild)))).or_else(|| {
            let global = named(self.tables.get(&None))?;
            offered(&global).then_some(global)
        })
    }

    fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        4_000_000 + self.next_id
    }
}

impl State {
    /// `GET /applications/{id}/commands` or `…/guilds/{guild}/commands`.
    pub(super) fn list_commands(&self, application: Option<u64>, guild: Option<u64>) -> Answer {
        match self.command_table_refused(application, guild) {
            Some(refused) => refused,
            None => Answer::ok(Value::Array(self.commands.table(guild))),
        }
    }

    /// `PUT /applications/{id}/commands` or `…/guilds/{guild}/commands`: the bulk overwrite.
    pub(super) fn overwrite_commands(&mut self, application: Option<u64>, guild: Option<u64>, body: &Value) -> Answer {
        if let Some(refused) = self.command_table_refused(application, guild) {
            return refused;
        }
        if let Err(refusal) = check_table(body) {
            return invalid_form_body(refusal);
        }
        let previous = self.commands.table(guild);
        let commands = body.as_array().map(Vec::as_slice).unwrap_or_default();
        let listed: Vec<Value> = commands
            .iter()
            .map(|command| {
                let kept = previous.iter().find(|old| old["name"] == command["name"]).map(|old| old["id"].clone());
                let id = kept.unwrap_or_else(|| json!(self.commands.fresh_id().to_string()));
                let version = self.commands.fresh_id();
                as_listed(command, id, version, guild)
            })
            .collect();
        self.commands.tables.insert(guild, listed.clone());
        Answer::ok(Value::Array(listed))
    }

    /// Why the table at `guild` cannot be read or written with this application id, if so.
    fn command_table_refused(&self, application: Option<u64>, guild: Option<u64>) -> Option<Answer> {
        if application != Some(APPLICATION_ID) {
            return Some(Answer::error(404, "Unknown Application", 10002));
        }
        guild.filter(|guild| !self.guilds.contains_key(guild)).map(|_| Answer::error(403, "Missing Access", 50001))
    }
}

/// A command as Discord lists it after an overwrite.
fn as_listed(command: &Value, id: Value, version: u64, guild: Option<u64>) -> Value {
    let text = |key: &str| command[key].clone();
    let mut listed = json!({
        "id": id,
        "application_id": APPLICATION_ID.to_string(),
        "version": version.to_string(),
        "default_member_permissions": text("default_member_permissions"),
        "type": command["type"].as_u64().unwrap_or(CHAT_INPUT),
        "name": text("name"),
        "name_localizations": null,
        "description": text("description"),
        "description_localizations": null,
        "nsfw": command["nsfw"].as_bool().unwrap_or(false),
    });
    match guild {
        Some(guild) => listed["guild_id"] = json!(guild.to_string()),
        None => {
            listed["contexts"] = text("contexts");
            let installs = command.get("integration_types").filter(|found| !found.is_null());
            listed["integration_types"] = installs.cloned().unwrap_or_else(|| json!([0]));
            listed["dm_permission"] = json!(true);
        }
    }
    let options: Vec<Value> =
        command["options"].as_array().map(Vec::as_slice).unwrap_or_default().iter().map(listed_option).collect();
    if !options.is_empty() {
        listed["options"] = Value::Array(options);
    }
    listed
}

fn listed_option(option: &Value) -> Value {
    let mut listed = option.clone();
    if let Some(fields) = listed.as_object_mut() {
        if fields.get("required") != Some(&json!(true)) {
            fields.remove("required");
        }
        fields.retain(|_, value| !value.is_null());
    }
    listed
}

fn check_table(body: &Value) -> Result<(), Refusal> {
    let commands = bounded_list(body, MAX_COMMANDS)?;
    let mut names = HashSet::new();
    for (index, command) in commands.iter().enumerate() {
        let index = index.to_string();
        check_command(command).map_err(|refusal| refusal.under(&[&index]))?;
        if !names.insert(command["name"].as_str().unwrap_or_default()) {
            let message = "Application command names must be unique";
            return Err(Refusal::new(&[&index, "name"], "APPLICATION_COMMANDS_DUPLICATE_NAME", message));
        }
    }
    Ok(())
}

fn check_command(command: &Value) -> Result<(), Refusal> {
    let kind = command["type"].as_u64().unwrap_or(CHAT_INPUT);
    if !(1..=4).contains(&kind) {
        return Err(Refusal::new(&["type"], "BASE_TYPE_CHOICES", "Value must be one of {1, 2, 3, 4}."));
    }
    check_name(&command["name"], "APPLICATION_COMMAND_INVALID_NAME", "Command name is invalid")
        .map_err(|refusal| refusal.under(&["name"]))?;
    check_length(&command["description"], 1, 100).map_err(|refusal| refusal.under(&["description"]))?;
    check_numbers(&command["contexts"], 2).map_err(|refusal| refusal.under(&["contexts"]))?;
    check_numbers(&command["integration_types"], 1).map_err(|refusal| refusal.under(&["integration_types"]))?;
    let permissions = &command["default_member_permissions"];
    if !(permissions.is_null() || permissions.as_str().is_some_and(|bits| bits.bytes().all(|b| b.is_ascii_digit()))) {
        return Err(Refusal::new(
            &["default_member_permissions"],
            "BASE_TYPE_BAD_INT",
            "Value is not a valid integer.",
        ));
    }
    check_options(&command["options"]).map_err(|refusal| refusal.under(&["options"]))
}

fn check_options(options: &Value) -> Result<(), Refusal> {
    let options = if options.is_null() { &[] } else { bounded_list(options, MAX_OPTIONS)? };
    let (mut names, mut optional_seen) = (HashSet::new(), false);
    for (index, option) in options.iter().enumerate() {
        let index = index.to_string();
        check_option(option).map_err(|refusal| refusal.under(&[&index]))?;
        let required = option["required"] == json!(true);
        if required && optional_seen {
            let message = "Required options must be placed before non-required options";
            return Err(Refusal::new(&[], "APPLICATION_COMMAND_OPTIONS_REQUIRED_INVALID", message));
        }
        optional_seen |= !required;
        if !names.insert(option["name"].as_str().unwrap_or_default()) {
            let message = "Option names must be unique";
            return Err(Refusal::new(&[&index, "name"], "APPLICATION_COMMAND_OPTIONS_DUPLICATE_NAME", message));
        }
    }
    Ok(())
}

fn check_option(option: &Value) -> Result<(), Refusal> {
    if !option["type"].as_u64().is_some_and(|kind| (1..=11).contains(&kind)) {
        return Err(Refusal::new(&["type"], "BASE_TYPE_CHOICES", "Value must be one of {1, 2, …, 11}."));
    }
    check_name(&option["name"], "APPLICATION_COMMAND_INVALID_NAME", "Option name is invalid")
        .map_err(|refusal| refusal.under(&["name"]))?;
    check_length(&option["description"], 1, 100).map_err(|refusal| refusal.under(&["description"]))?;
    let choices = match &option["choices"] {
        Value::Null => &[],
        choices => bounded_list(choices, MAX_CHOICES).map_err(|refusal| refusal.under(&["choices"]))?,
    };
    for (index, choice) in choices.iter().enumerate() {
        let index = index.to_string();
        check_length(&choice["name"], 1, 100).map_err(|refusal| refusal.under(&["choices", &index, "name"]))?;
        if option["type"].as_u64() == Some(STRING) {
            check_length(&choice["value"], 1, 100).map_err(|refusal| refusal.under(&["choices", &index, "value"]))?;
        }
    }
    Ok(())
}

/// A CHAT_INPUT name: 1–32 letters, digits, `-` or `_`, lower case where a letter has cases.
fn check_name(name: &Value, code: &'static str, message: &str) -> Result<(), Refusal> {
    let name = name.as_str().unwrap_or_default();
    let allowed = |c: char| (c.is_alphanumeric() || c == '-' || c == '_') && c.to_lowercase().eq([c]);
    if (1..=32).contains(&name.chars().count()) && name.chars().all(allowed) {
        Ok(())
    } else {
        Err(Refusal::new(&[], code, message))
    }
}

fn check_length(text: &Value, min: usize, max: usize) -> Result<(), Refusal> {
    let chars = text.as_str().map(|text| text.chars().count());
    if chars.is_some_and(|chars| (min..=max).contains(&chars)) {
        Ok(())
    } else {
        Err(Refusal::new(&[], "BASE_TYPE_BAD_LENGTH", format!("Must be between {min} and {max} in length.")))
    }
}

/// A list of small enumerated numbers, each at most `max` (or no list).
fn check_numbers(list: &Value, max: u64) -> Result<(), Refusal> {
    let items = list.as_array().map(Vec::as_slice).unwrap_or_default();
    match items.iter().position(|item| item.as_u64().is_none_or(|value| value > max)) {
        Some(index) => Err(Refusal::new(&[&index.to_string()], "BASE_TYPE_CHOICES", "Value is not a valid choice.")),
        None => Ok(()),
    }
}

/// The options of an invocation of `command` with `given` (name, value), as Discord sends them;
/// panics on what Discord's client would not let a person send.
pub(super) fn invocation_options(command: &Value, given: &[(&str, &str)]) -> Vec<Value> {
    let declared = command["options"].as_array().map(Vec::as_slice).unwrap_or_default();
    let name = &command["name"];
    for (option, value) in given {
        let Some(found) = declared.iter().find(|declared| declared["name"] == *option) else {
            panic!("run_command: /{name} has no option {option:?}: {declared:?}")
        };
        let choices = found["choices"].as_array().map(Vec::as_slice).unwrap_or_default();
        let offered = choices.is_empty() || choices.iter().any(|choice| choice["value"] == *value);
        assert!(offered, "run_command: {value:?} is not a choice of /{name} {option}: {choices:?}");
    }
    for required in declared.iter().filter(|declared| declared["required"] == json!(true)) {
        let present = given.iter().any(|(option, _)| required["name"] == *option);
        assert!(present, "run_command: /{name} needs its option {}", required["name"]);
    }
    given.iter().map(|(option, value)| json!({ "name": option, "type": STRING, "value": value })).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status() -> Value {
        json!({ "name": "status", "description": "model and tokens", "contexts": [0, 1] })
    }

    fn refused(table: Value) -> Value {
        match check_table(&table) {
            Err(refusal) => match invalid_form_body(refusal) {
                Answer::Json(400, body) => body,
                other => panic!("{other:?}"),
            },
            Ok(()) => panic!("accepted: {table}"),
        }
    }

    #[test]
    fn names_descriptions_and_options_follow_discords_rules() {
        assert!(check_table(&json!([status()])).is_ok());
        let body = refused(json!([status(), { "name": "Status", "description": "x" }]));
        assert_eq!(body["errors"]["1"]["name"]["_errors"][0]["code"], "APPLICATION_COMMAND_INVALID_NAME");
        let body = refused(json!([{ "name": "status", "description": "" }]));
        assert_eq!(body["errors"]["0"]["description"]["_errors"][0]["code"], "BASE_TYPE_BAD_LENGTH");
        let body = refused(json!([status(), status()]));
        assert_eq!(body["errors"]["1"]["name"]["_errors"][0]["code"], "APPLICATION_COMMANDS_DUPLICATE_NAME");
        let options = json!([
            { "type": 3, "name": "a", "description": "a" },
            { "type": 3, "name": "b", "description": "b", "required": true },
        ]);
        let body = refused(json!([{ "name": "level", "description": "x", "options": options }]));
        assert_eq!(
            body["errors"]["0"]["options"]["_errors"][0]["code"],
            "APPLICATION_COMMAND_OPTIONS_REQUIRED_INVALID"
        );
        let body = refused(json!([{ "name": "x".repeat(33), "description": "x" }]));
        assert_eq!(body["code"], 50035);
    }

    #[test]
    fn a_listing_leaves_out_what_is_empty_or_false() {
        let options = json!([{ "type": 3, "name": "mode", "description": "m", "required": false }]);
        let listed =
            as_listed(&json!({ "name": "queue", "description": "q", "options": options }), json!("1"), 2, None);
        assert_eq!(listed["options"][0].get("required"), None);
        assert_eq!(listed["integration_types"], json!([0]));
        let plain = as_listed(&status(), json!("3"), 4, Some(100));
        assert_eq!((plain.get("options"), plain["guild_id"].clone()), (None, json!("100")));
    }
}
