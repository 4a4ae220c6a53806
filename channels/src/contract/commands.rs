//! The chat commands switchboard understands: one table for the worker (which parses and
//! answers them, and lists them in `/help`) and for the platforms' command menus.

/// A chat command as people type it: `/name [args]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChatCommand {
    /// Without the slash, lower case.
    pub name: &'static str,
    /// What may follow the name (empty when nothing).
    pub args: &'static str,
    /// One line, lower case: what the command does.
    pub description: &'static str,
}

/// The commands the worker answers, in the order menus and `/help` list them.
pub const COMMANDS: &[ChatCommand] = &[
    ChatCommand { name: "help", args: "", description: "this list" },
    ChatCommand { name: "new", args: "", description: "start a new conversation (earlier messages are forgotten)" },
    ChatCommand { name: "reset", args: "", description: "the same as /new" },
    ChatCommand { name: "stop", args: "", description: "stop the current answer and drop messages waiting behind it" },
    ChatCommand {
        name: "compact",
        args: "",
        description: "summarise the conversation so far now (done by itself when it grows long)",
    },
    ChatCommand { name: "status", args: "", description: "model, tokens used, messages waiting, queue mode" },
    ChatCommand { name: "usage", args: "", description: "your level here, tokens used this month and what is left" },
    ChatCommand {
        name: "queue",
        args: "[followup|collect|interrupt|steer|drop]",
        description: "show or set what messages sent during an answer do",
    },
    ChatCommand { name: "model", args: "[name|default]", description: "show the models, or pick one for this chat" },
    ChatCommand { name: "verbose", args: "[on|off]", description: "short progress messages while tools run" },
];

/// The owner's commands: answered in the owner's direct chats only (anyone else is told the
/// command is unknown), and listed by `/help` there.
pub const OWNER_COMMANDS: &[ChatCommand] = &[
    ChatCommand {
        name: "pending",
        args: "",
        description: "people asking to talk to me, and tool calls waiting for you",
    },
    ChatCommand {
        name: "approve",
        args: "<code> [chat]",
        description: "let a person in, or a waiting tool call run (with chat: that tool in that chat from now on)",
    },
    ChatCommand { name: "deny", args: "<code>", description: "turn a person away, or refuse a waiting tool call" },
    ChatCommand { name: "users", args: "", description: "people, their levels and what they used this month" },
    ChatCommand {
        name: "level",
        args: "<person> <level>",
        description: "set someone's level: guest, user, admin or owner",
    },
    ChatCommand { name: "cron", args: "", description: "cron jobs, with buttons to pause, resume or delete them" },
    ChatCommand { name: "spend", args: "", description: "this month's tokens and cost, by person and by group" },
];

/// The command `name` (any case), if switchboard knows it: everyone's or the owner's.
pub fn find(name: &str) -> Option<&'static ChatCommand> {
    COMMANDS.iter().chain(OWNER_COMMANDS).find(|command| command.name.eq_ignore_ascii_case(name))
}

/// Reads `/name`, `/name@botname`, then arguments, from a message's text: the command's name
/// (as typed) and the words after it. `None` when the text is not a command.
pub fn split(content: &str) -> Option<(&str, std::str::SplitWhitespace<'_>)> {
    let mut words = content.trim_start().strip_prefix('/')?.split_whitespace();
    let name = words.next()?;
    Some((name.split_once('@').map_or(name, |(name, _bot)| name), words))
}

/// One line per command: `/name args: description`, under `heading`.
pub fn help_text(heading: &str) -> String {
    lines(heading, COMMANDS)
}

/// [`help_text`] of the owner's commands.
pub fn owner_help_text(heading: &str) -> String {
    lines(heading, OWNER_COMMANDS)
}

fn lines(heading: &str, table: &[ChatCommand]) -> String {
    let mut text = heading.to_owned();
    for command in table {
        let args = if command.args.is_empty() { String::new() } else { format!(" {}", command.args) };
        text.push_str(&format!("\n/{}{args}: {}", command.name, command.description));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_found_and_split_from_text() {
        assert_eq!(find("Queue").map(|command| command.name), Some("queue"));
        assert!(find("start").is_none());
        let (name, mut args) = split("  /queue@bot collect").unwrap();
        assert_eq!((name, args.next()), ("queue", Some("collect")));
        assert!(split("stop").is_none());
        let help = help_text("Commands:");
        assert!(help.contains("\n/queue [followup|collect|interrupt|steer|drop]: show or set"));
        assert!(help.starts_with("Commands:\n/help: this list"));
    }
}
