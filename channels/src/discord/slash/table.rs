//! The chat commands of [`crate::contract::commands`] as Discord application commands (type 1,
//! CHAT_INPUT): name and description from the table, the arguments as STRING options (with
//! choices where the values are fixed), and where each may be used.
//!
//! Everyone's commands work in servers and in the bot's DMs; the owner's only in DMs, where the
//! worker answers them (anyone else is told the command is unknown there, as when typed).

use serde_json::{Value, json};

use crate::contract::commands::{COMMANDS, ChatCommand, OWNER_COMMANDS};

/// Discord's interaction contexts: a server channel, the bot's DM.
const IN_GUILDS: u8 = 0;
const IN_BOT_DMS: u8 = 1;
/// Installed to a server (not to a user's account).
const GUILD_INSTALL: u8 = 0;
const CHAT_INPUT: u8 = 1;
const STRING: u8 = 3;

/// An argument of a command as a Discord option.
struct Argument {
    name: &'static str,
    description: &'static str,
    required: bool,
    /// The values Discord offers; empty = free text.
    choices: &'static [&'static str],
}

const fn optional(name: &'static str, description: &'static str, choices: &'static [&'static str]) -> Argument {
    Argument { name, description, required: false, choices }
}

const fn required(name: &'static str, description: &'static str, choices: &'static [&'static str]) -> Argument {
    Argument { name, description, required: true, choices }
}

/// The options of the commands that take arguments, in the order the typed command takes its
/// words.
const ARGUMENTS: &[(&str, &[Argument])] = &[
    (
        "queue",
        &[optional(
            "mode",
            "what messages sent during an answer do",
            &["followup", "collect", "interrupt", "steer", "drop"],
        )],
    ),
    ("model", &[optional("name", "a model's name, or default", &[])]),
    ("verbose", &[optional("setting", "on or off", &["on", "off"])]),
    (
        "approve",
        &[
            required("code", "the request's code", &[]),
            optional("scope", "once (this call), or chat: that tool in that chat from now on", &["once", "chat"]),
        ],
    ),
    ("deny", &[required("code", "the request's code", &[])]),
    (
        "level",
        &[
            required("person", "a name as /users shows it, or an identity like discord:123", &[]),
            required("level", "the level to give", &["guest", "user", "admin", "owner"]),
        ],
    ),
];

/// The options of the command `name` (none for most).
fn arguments(name: &str) -> &'static [Argument] {
    ARGUMENTS.iter().find(|(command, _)| *command == name).map_or(&[], |(_, arguments)| arguments)
}

/// Where a table is registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The global table; `in_guilds`: everyone's commands are offered in servers too (else
    /// only in DMs, the servers having their own).
    Global { in_guilds: bool },
    /// One server's table: everyone's commands (the owner's work in DMs only).
    Guild,
}

/// The commands to register in `scope`.
pub(crate) fn table(scope: Scope) -> Vec<Value> {
    match scope {
        Scope::Global { in_guilds } => {
            let everyone: &[u8] = if in_guilds { &[IN_GUILDS, IN_BOT_DMS] } else { &[IN_BOT_DMS] };
            let everyones = COMMANDS.iter().map(|command| command_json(command, Some(everyone)));
            let owners = OWNER_COMMANDS.iter().map(|command| command_json(command, Some(&[IN_BOT_DMS])));
            everyones.chain(owners).collect()
        }
        Scope::Guild => COMMANDS.iter().map(|command| command_json(command, None)).collect(),
    }
}

/// One command; `contexts` only for global ones (Discord ignores them on a server's).
fn command_json(command: &ChatCommand, contexts: Option<&[u8]>) -> Value {
    let options: Vec<Value> = arguments(command.name).iter().map(option_json).collect();
    let mut json = json!({
        "type": CHAT_INPUT,
        "name": command.name,
        "description": command.description,
        "options": options,
        // Everyone may use them; the daemon checks who may do what, as for typed commands.
        "default_member_permissions": null,
    });
    if let Some(contexts) = contexts {
        json["contexts"] = json!(contexts);
        json["integration_types"] = json!([GUILD_INSTALL]);
    }
    json
}

fn option_json(argument: &Argument) -> Value {
    let mut json = json!({ "type": STRING, "name": argument.name, "description": argument.description });
    if argument.required {
        json["required"] = json!(true);
    }
    if !argument.choices.is_empty() {
        let choices: Vec<Value> =
            argument.choices.iter().map(|choice| json!({ "name": choice, "value": choice })).collect();
        json["choices"] = json!(choices);
    }
    json
}

/// Whether the commands Discord has (`current`, as it lists them, with ids and defaults of its
/// own) are `wanted`: the same names, each with the fields switchboard sets equal.
pub(crate) fn same_table(wanted: &[Value], current: &[Value]) -> bool {
    wanted.len() == current.len()
        && wanted.iter().all(|command| {
            let found = current.iter().find(|have| have["name"] == command["name"]);
            found.is_some_and(|have| covers(command, have))
        })
}

/// Whether `have` says what `want` says. Discord leaves out what is empty or false (`required`,
/// `options`) and adds fields of its own (ids, versions, localizations): those do not count.
fn covers(want: &Value, have: &Value) -> bool {
    match (want, have) {
        (Value::Object(want), _) => {
            want.iter().all(|(key, value)| covers(value, have.get(key).unwrap_or(&Value::Null)))
        }
        (Value::Array(want), Value::Array(have)) => {
            want.len() == have.len() && want.iter().zip(have).all(|(want, have)| covers(want, have))
        }
        _ if blank(want) && blank(have) => true,
        _ => want == have,
    }
}

fn blank(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => true,
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}

/// What a person would type for the invoked command `name` with `given` (option name, value):
/// `/name value value`, the values in the order of the command's options. `None` for a name
/// switchboard has no command for.
pub(crate) fn typed_text(name: &str, given: &[(String, String)]) -> Option<String> {
    let command = COMMANDS.iter().chain(OWNER_COMMANDS).find(|command| command.name == name)?;
    let mut text = format!("/{}", command.name);
    for argument in arguments(command.name) {
        let value = given.iter().find(|(option, _)| option == argument.name).map(|(_, value)| value.trim());
        if let Some(value) = value.filter(|value| !value.is_empty()) {
            text.push(' ');
            text.push_str(value);
        }
    }
    Some(text)
}

/// Whether the command's answer is for the person alone (in a server: shown to them only).
pub(crate) fn is_personal(name: &str) -> bool {
    matches!(name, "help" | "usage") || OWNER_COMMANDS.iter().any(|command| command.name == name)
}

/// Whether the command may well take longer than Discord's 3 s (a model call, waiting for a
/// stopped run): acknowledged before it is even handed on.
pub(crate) fn is_slow(name: &str) -> bool {
    matches!(name, "compact" | "new" | "reset")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Discord's rules for CHAT_INPUT names: 1–32 lower-case letters, digits, `-` or `_`.
    fn valid_name(name: &str) -> bool {
        let chars = name.chars().count();
        (1..=32).contains(&chars)
            && name.chars().all(|c| (c.is_alphanumeric() || c == '-' || c == '_') && c.to_lowercase().eq([c]))
    }

    fn valid_description(text: &str) -> bool {
        (1..=100).contains(&text.chars().count())
    }

    #[test]
    fn every_command_keeps_discords_rules() {
        for command in table(Scope::Global { in_guilds: true }) {
            let name = command["name"].as_str().unwrap();
            assert!(valid_name(name), "{name}");
            assert!(valid_description(command["description"].as_str().unwrap()), "{name}");
            let mut optional_seen = false;
            for option in command["options"].as_array().unwrap() {
                assert!(valid_name(option["name"].as_str().unwrap()), "{option}");
                assert!(valid_description(option["description"].as_str().unwrap()), "{option}");
                let required = option["required"] == json!(true);
                assert!(!(required && optional_seen), "required options come first: {name}");
                optional_seen |= !required;
            }
        }
    }

    #[test]
    fn commands_with_arguments_have_options_and_their_choices_are_the_typed_ones() {
        for command in COMMANDS.iter().chain(OWNER_COMMANDS) {
            let arguments = arguments(command.name);
            assert_eq!(command.args.is_empty(), arguments.is_empty(), "/{}", command.name);
            let said = format!("{} {}", command.args, command.description);
            for choice in arguments.iter().flat_map(|argument| argument.choices) {
                assert!(said.contains(choice) || *choice == "once", "/{} {choice}", command.name);
            }
        }
    }

    #[test]
    fn owners_commands_are_offered_in_dms_only_and_servers_get_everyones() {
        let global = table(Scope::Global { in_guilds: true });
        let pending = global.iter().find(|command| command["name"] == "pending").unwrap();
        assert_eq!(pending["contexts"], json!([IN_BOT_DMS]));
        let status = global.iter().find(|command| command["name"] == "status").unwrap();
        assert_eq!(status["contexts"], json!([IN_GUILDS, IN_BOT_DMS]));
        let dms_only = table(Scope::Global { in_guilds: false });
        assert!(dms_only.iter().all(|command| command["contexts"] == json!([IN_BOT_DMS])));
        let guild = table(Scope::Guild);
        assert_eq!(guild.len(), COMMANDS.len());
        assert!(guild.iter().all(|command| command.get("contexts").is_none()));
    }

    #[test]
    fn discords_listing_of_the_same_table_is_the_same_table() {
        let wanted = table(Scope::Global { in_guilds: true });
        // As Discord lists them: ids and versions added, `required: false` and empty lists left out.
        let mut listed: Vec<Value> = wanted.iter().rev().cloned().collect();
        for (n, command) in listed.iter_mut().enumerate() {
            command["id"] = json!(format!("{}", 100 + n));
            command["version"] = json!("1");
            command["nsfw"] = json!(false);
            if command["options"] == json!([]) {
                command.as_object_mut().unwrap().remove("options");
            }
        }
        assert!(same_table(&wanted, &listed));
        let mut changed = listed.clone();
        changed[0]["description"] = json!("something else");
        assert!(!same_table(&wanted, &changed));
        assert!(!same_table(&wanted, &listed[1..]));
        assert!(same_table(&[], &[]));
        assert!(!same_table(&[], &listed));
    }

    #[test]
    fn an_invoked_command_reads_as_typed() {
        let given = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs.iter().map(|(name, value)| ((*name).to_owned(), (*value).to_owned())).collect()
        };
        assert_eq!(typed_text("status", &[]).as_deref(), Some("/status"));
        let level = given(&[("level", "user"), ("person", "Ann Smith")]);
        assert_eq!(typed_text("level", &level).as_deref(), Some("/level Ann Smith user"));
        assert_eq!(typed_text("approve", &given(&[("code", " K7PX ")])).as_deref(), Some("/approve K7PX"));
        assert_eq!(typed_text("start", &[]), None);
    }
}
