//! Memory scopes through the worker, for Telegram- and Discord-shaped chats, against the
//! scripted model: what the owner tells the bot in a direct message never reaches a request a
//! group chat makes (turns, memory flush, summary, sub-agents); a group's flush cannot touch
//! `MEMORY.md` and writes the group's own file; a person's notes stay in their direct chat; no
//! path trick reaches the owner's files from a group. See docs/memory.md.

use std::time::Duration;

use serde_json::{Value, json};
use switchboard::config::{BudgetsConfig, CompactionConfig, Level, PermissionsConfig, UsersConfig};
use switchboard::context::ContextSettings;
use switchboard::store::Store;
use switchboard::subagents::SubagentSettings;
use switchboard::users::AccessPolicy;
use switchboard::worker::WorkerSettings;
use switchboard_channels::Deliveries;
use switchboard_channels::contract::{ChatAddress, InboundMessage, Origin, OutboundMessage, Sender};
use switchboard_testkit::fake_llm::Scripted;

use crate::common::{BusKind, Harness, Setup, next_out};

/// What the owner told the bot in a direct message.
const SECRET: &str = "ZEBRA-4711";
/// What the owner wrote about themselves in USER.md.
const PROFILE_SECRET: &str = "born on 29 February";
const OWNER: &str = "42";
const MEMBER: &str = "9";
const STRANGER: &str = "7";
/// In the memory flush's instruction only.
const FLUSH_NEEDLE: &str = "is about to be summarised";
/// In the summary call's instruction only.
const SUMMARY_NEEDLE: &str = "is about to be replaced by a summary";

/// The chats of one platform, as its adapter puts them on the bus.
#[derive(Clone, Copy)]
struct Platform {
    channel: &'static str,
    group: &'static str,
    /// A direct chat's id: on Telegram the person's id, on Discord a channel of its own.
    dm_prefix: &'static str,
}

const TELEGRAM: Platform = Platform { channel: "telegram", group: "-1001234", dm_prefix: "" };
const DISCORD: Platform = Platform { channel: "discord", group: "555", dm_prefix: "9000" };

impl Platform {
    fn dm_chat(self, person: &str) -> String {
        format!("{}{person}", self.dm_prefix)
    }

    fn dm(self, person: &str, content: &str) -> InboundMessage {
        let sender = Sender { id: person.into(), name: format!("P{person}"), is_bot: false };
        InboundMessage::user(self.channel, &self.dm_chat(person), sender, content)
    }

    fn in_group(self, person: &str, content: &str) -> InboundMessage {
        let sender = Sender { id: person.into(), name: format!("P{person}"), is_bot: false };
        let mut msg = InboundMessage::user(self.channel, self.group, sender, content);
        msg.is_group = true;
        msg.mentioned = true;
        if self.channel == "discord" {
            msg.metadata.insert("guild_id".into(), json!("1"));
        }
        msg
    }

    fn group_file(self) -> String {
        format!("memory/groups/{}_{}.md", self.channel, self.group)
    }

    fn person_file(self, person: &str) -> String {
        format!("memory/users/{}_{person}.md", self.channel)
    }
}

/// The owner is `42` on both platforms; everyone may use the file tools, `message` and
/// `spawn` (so a group member can try every trick); a session is compacted past 7 messages.
fn settings() -> WorkerSettings {
    let owners = [TELEGRAM, DISCORD].iter().map(|p| format!("{}:{OWNER}", p.channel)).collect();
    let users = UsersConfig { owners, ..UsersConfig::default() };
    let mut permissions = PermissionsConfig::default();
    for tool in ["read_file", "write_file", "edit_file", "list_dir", "message", "spawn"] {
        permissions.tools.insert(tool.into(), Level::Guest);
    }
    let access = AccessPolicy::from_config(&users, &permissions, &BudgetsConfig::default()).unwrap();
    let compaction = CompactionConfig { max_messages: 7, keep_recent_messages: 2, ..CompactionConfig::default() };
    let mut settings = WorkerSettings {
        access,
        context: ContextSettings { compaction, ..ContextSettings::default() },
        ..WorkerSettings::default()
    };
    settings.queue.debounce = Duration::ZERO;
    settings
}

async fn start(subagents: bool) -> Harness {
    let subagents = subagents.then(|| (SubagentSettings::default(), switchboard::clock::system()));
    let h = Setup { settings: settings(), file_tools: true, subagents, ..Setup::new(BusKind::InProcess) }.start().await;
    std::fs::write(h.workspace.join("USER.md"), format!("# About the owner\n\nThe owner was {PROFILE_SECRET}.\n"))
        .unwrap();
    h
}

async fn ask(h: &Harness, out: &mut Deliveries, msg: InboundMessage) -> OutboundMessage {
    h.send(&msg).await;
    next_out(out).await
}

fn system_text(request: &Value) -> &str {
    request["messages"][0]["content"].as_str().unwrap_or_default()
}

/// The tool results a request carries, in call order.
fn tool_results(request: &Value) -> Vec<String> {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let tools = messages.iter().filter(|m| m["role"] == "tool");
    tools.map(|m| m["content"].as_str().unwrap_or_default().to_owned()).collect()
}

fn call(tool: &str, arguments: Value) -> (String, Value) {
    (tool.to_owned(), arguments)
}

fn assert_no_secret(requests: &[Value]) {
    for (i, request) in requests.iter().enumerate() {
        let body = request.to_string();
        for secret in [SECRET, PROFILE_SECRET] {
            assert!(!body.contains(secret), "request {i} of the group carries {secret:?}: {body}");
        }
    }
}

async fn wait_for_summary(store: &dyn Store, session: &str) {
    for _ in 0..200 {
        if store.session_summary(session).await.unwrap().is_some() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{session} was never compacted");
}

/// The owner tells a secret in a direct message (and the bot writes it to MEMORY.md); then a
/// group talks long enough to be compacted, its flush trying MEMORY.md and SOUL.md before its
/// own file. No request of the group carries the secret, MEMORY.md and SOUL.md are unchanged,
/// the group's next prompt shows its own memory and the owner's next prompt does not.
async fn a_dm_secret_never_reaches_the_group(p: Platform) {
    let h = start(false).await;
    std::fs::write(h.workspace.join("SOUL.md"), "Calm and kind.\n").unwrap();
    let mut out = h.outbound(p.channel).await;
    let noted = format!("- The safe code is {SECRET}.\n");
    h.llm.push(Scripted::ToolCalls(vec![call("write_file", json!({"path": "MEMORY.md", "content": noted}))]));
    h.llm.push(Scripted::Text("Noted.".into()));
    let told = ask(&h, &mut out, p.dm(OWNER, &format!("Remember: the safe code is {SECRET}."))).await;
    assert_eq!(told.content, "Noted.");
    let memory = std::fs::read(h.workspace.join("MEMORY.md")).unwrap();
    assert_eq!(memory, noted.as_bytes(), "the owner's direct chat writes MEMORY.md");

    let group_from = h.llm.requests().len();
    let flush = vec![
        call("write_file", json!({"path": "MEMORY.md", "content": "- The group owns this now.\n"})),
        call("write_file", json!({"path": "SOUL.md", "content": "Rude.\n"})),
        call("write_file", json!({"path": p.group_file(), "content": "- The group plays chess on Fridays.\n"})),
    ];
    h.llm.push_when(FLUSH_NEEDLE, Scripted::ToolCalls(flush));
    h.llm.push_when(FLUSH_NEEDLE, Scripted::Text("NO_REPLY".into()));
    h.llm.push_when(SUMMARY_NEEDLE, Scripted::Text("The group talked about chess.".into()));
    for n in 1..=4 {
        ask(&h, &mut out, p.in_group(MEMBER, &format!("{n}: what is the owner's safe code?"))).await;
    }
    wait_for_summary(h.store.as_ref(), &format!("{}:{}", p.channel, p.group)).await;
    ask(&h, &mut out, p.in_group(MEMBER, "What do we do on Fridays?")).await;
    let group_to = h.llm.requests().len();
    ask(&h, &mut out, p.dm(OWNER, "What is the safe code?")).await;

    let requests = h.llm.requests();
    let group = &requests[group_from..group_to];
    assert_eq!(group.len(), 8, "four turns, two flush calls, the summary, one more turn");
    assert_no_secret(group);
    let flushed = group.iter().find(|r| r.to_string().contains(FLUSH_NEEDLE) && !tool_results(r).is_empty());
    let results = tool_results(flushed.expect("the flush's second call"));
    assert!(results[0].contains("`MEMORY.md` is not available here") && results[0].contains("owner's private memory"));
    assert!(results[1].contains("may use only this chat's memory file"), "{}", results[1]);
    assert!(results[2].starts_with(&format!("created `{}`", p.group_file())), "{}", results[2]);
    assert_eq!(std::fs::read(h.workspace.join("MEMORY.md")).unwrap(), memory, "MEMORY.md is untouched");
    assert_eq!(std::fs::read_to_string(h.workspace.join("SOUL.md")).unwrap(), "Calm and kind.\n");

    let next_group_turn = system_text(&group[7]);
    assert!(next_group_turn.contains("- The group plays chess on Fridays."), "{next_group_turn}");
    assert!(next_group_turn.contains(&format!("{} is the memory of this group chat", p.group_file())));
    let owner = system_text(requests.last().unwrap());
    assert!(owner.contains(SECRET) && owner.contains(PROFILE_SECRET), "{owner}");
    assert!(!owner.contains("chess"), "a group's memory stays in the group: {owner}");
    h.stop().await;
}

/// A group member's model tries every way around the guard in one go: each is refused and
/// says why, listings do not even name the private files, and nothing private comes back.
async fn path_tricks_are_refused_in_a_group(p: Platform) {
    let h = start(false).await;
    let ws = h.workspace.canonicalize().unwrap();
    std::fs::write(ws.join("MEMORY.md"), format!("- The safe code is {SECRET}.\n")).unwrap();
    let private = [("STRANGER-NOTE", p.person_file(STRANGER)), ("OTHER-GROUP-NOTE", "memory/groups/x_1.md".into())];
    for (text, file) in &private {
        std::fs::create_dir_all(ws.join(file).parent().unwrap()).unwrap();
        std::fs::write(ws.join(file), text).unwrap();
    }
    std::fs::write(ws.join(p.group_file()), "- own note\n").unwrap();
    std::fs::create_dir(ws.join("notes")).unwrap();
    std::os::unix::fs::symlink("../MEMORY.md", ws.join("notes/link.md")).unwrap();
    std::fs::hard_link(ws.join("MEMORY.md"), ws.join("copy.md")).unwrap();
    let before = [std::fs::read(ws.join("MEMORY.md")).unwrap(), std::fs::read(ws.join("USER.md")).unwrap()];
    let mut out = h.outbound(p.channel).await;

    let read = |path: &str| call("read_file", json!({"path": path}));
    let absolute = ws.join("MEMORY.md").display().to_string();
    let refused = vec![
        read("MEMORY.md"),
        read("../MEMORY.md"),
        read("./memory/../USER.md"),
        read("memory/../MEMORY.md"),
        read(&absolute),
        read("notes/link.md"),
        read("copy.md"),
        read(&p.person_file(STRANGER).replacen("memory", "Memory", 1)),
        read("memory/groups/x_1.md"),
        call("write_file", json!({"path": "MEMORY.md", "content": "gone"})),
        call("edit_file", json!({"path": "USER.md", "old_text": "owner", "new_text": "x"})),
        call("write_file", json!({"path": "notes/link.md", "content": "gone"})),
        call("list_dir", json!({"path": "memory/users"})),
        call("message", json!({"content": "here it is", "files": ["MEMORY.md"]})),
    ];
    let refusals = refused.len();
    let mut calls = refused;
    calls.extend([
        read(&p.group_file()),
        call("list_dir", json!({"path": "."})),
        call("list_dir", json!({"path": "memory"})),
        call("list_dir", json!({"path": "memory/groups"})),
    ]);
    h.llm.push(Scripted::ToolCalls(calls));
    h.llm.push(Scripted::Text("Done.".into()));
    assert_eq!(ask(&h, &mut out, p.in_group(MEMBER, "Show me the owner's files.")).await.content, "Done.");
    h.nothing_more(&mut out).await;

    let requests = h.llm.requests();
    assert_no_secret(&requests);
    for (text, _) in &private {
        assert!(!requests.iter().any(|r| r.to_string().contains(text)), "{text} reached the group");
    }
    let results = tool_results(requests.last().unwrap());
    for (i, result) in results[..refusals].iter().enumerate() {
        assert!(result.starts_with("error: refused:"), "call {i}: {result}");
    }
    assert!(results[0].contains("owner's private memory"), "{}", results[0]);
    assert!(results[8].contains("another chat's memory"), "{}", results[8]);
    let [own, root, memory, groups] = &results[refusals..] else { panic!("{results:?}") };
    assert!(own.contains("\n- own note\n"), "its own file can be read: {own}");
    assert!(root.contains("notes/") && root.contains("memory/"), "{root}");
    assert!(!root.contains("MEMORY.md") && !root.contains("USER.md"), "{root}");
    assert!(memory.contains("groups/") && !memory.contains("users"), "{memory}");
    assert!(groups.contains(&format!("{}_{}.md", p.channel, p.group)) && !groups.contains("x_1"), "{groups}");
    let after = [std::fs::read(ws.join("MEMORY.md")).unwrap(), std::fs::read(ws.join("USER.md")).unwrap()];
    assert_eq!(after, before, "MEMORY.md and USER.md are byte-identical");
    assert!(ws.join("notes/link.md").symlink_metadata().unwrap().file_type().is_symlink());
    h.stop().await;
}

/// A person's notes come back in their direct chat only: not to another person, not to a group
/// they are in, not to the owner's chat.
async fn a_persons_notes_stay_in_their_direct_chat(p: Platform) {
    let h = start(false).await;
    let mut out = h.outbound(p.channel).await;
    let notes = json!({"path": p.person_file(STRANGER), "content": "- Likes jazz.\n"});
    h.llm.push(Scripted::ToolCalls(vec![call("write_file", notes)]));
    h.llm.push(Scripted::Text("Noted.".into()));
    ask(&h, &mut out, p.dm(STRANGER, "I like jazz.")).await;
    let asked = h.llm.requests().len();
    ask(&h, &mut out, p.dm(STRANGER, "What do I like?")).await;
    ask(&h, &mut out, p.dm("8", "What does 7 like?")).await;
    ask(&h, &mut out, p.in_group(STRANGER, "What do I like?")).await;
    ask(&h, &mut out, p.dm(OWNER, "What does 7 like?")).await;

    let requests = h.llm.requests();
    let own = system_text(&requests[asked]);
    assert!(own.contains("- Likes jazz.") && own.contains(&format!("{} is the memory of", p.person_file(STRANGER))));
    assert!(!own.contains(PROFILE_SECRET), "{own}");
    for (who, request) in ["another person", "a group", "the owner"].iter().zip(&requests[asked + 1..]) {
        assert!(!request.to_string().contains("Likes jazz"), "{who} saw the notes");
    }
    h.stop().await;
}

/// A sub-agent started from a group keeps the group's scope.
async fn a_subagent_from_a_group_keeps_the_groups_scope(p: Platform) {
    let h = start(true).await;
    std::fs::write(h.workspace.join("MEMORY.md"), format!("- The safe code is {SECRET}.\n")).unwrap();
    let mut out = h.outbound(p.channel).await;
    let task = "SUBTASK: report what MEMORY.md says";
    h.llm.push(Scripted::ToolCalls(vec![call("spawn", json!({"task": task}))]));
    h.llm.push(Scripted::Text("A sub-agent is on it.".into()));
    h.llm.push_when("SUBTASK", Scripted::ToolCalls(vec![call("read_file", json!({"path": "MEMORY.md"}))]));
    h.llm.push_when("SUBTASK", Scripted::Text("MEMORY.md is not available.".into()));
    ask(&h, &mut out, p.in_group(MEMBER, "Find out the owner's safe code.")).await;
    // The announcement's turn answers in the group.
    next_out(&mut out).await;

    let requests = h.llm.requests();
    assert_no_secret(&requests);
    let sub: Vec<&Value> = requests.iter().filter(|r| system_text(r).contains("prompt mode minimal")).collect();
    assert_eq!(sub.len(), 2, "the sub-agent's two calls");
    assert!(system_text(sub[0]).contains(&p.group_file()), "{}", system_text(sub[0]));
    let result = &tool_results(sub[1])[0];
    assert!(result.contains("owner's private memory"), "{result}");
    h.stop().await;
}

/// System messages (heartbeats, operator jobs) get the owner's memory in a direct chat an
/// owner wrote in, and not elsewhere; one acting for a person gets that person's.
async fn system_messages_get_the_owners_memory_only_in_the_owners_chat(p: Platform) {
    let h = start(false).await;
    std::fs::write(h.workspace.join("MEMORY.md"), format!("- The safe code is {SECRET}.\n")).unwrap();
    let mut out = h.outbound(p.channel).await;
    ask(&h, &mut out, p.dm(OWNER, "hello")).await;
    let system = |chat: &str, n: u32| {
        let address = ChatAddress { channel: p.channel.into(), chat_id: chat.into(), thread_id: None, is_group: false };
        let origin = Origin { kind: "heartbeat".into(), id: n.to_string() };
        InboundMessage::system(format!("memory-test:{n}"), address, origin, "Check the task list.")
    };
    ask(&h, &mut out, system(&p.dm_chat(OWNER), 1)).await;
    ask(&h, &mut out, system(&p.dm_chat(STRANGER), 2)).await;
    let mut for_stranger = system(&p.dm_chat(OWNER), 3);
    for_stranger.set_on_behalf_of(&format!("{}:{STRANGER}", p.channel));
    ask(&h, &mut out, for_stranger).await;

    let requests = h.llm.requests();
    assert!(system_text(&requests[1]).contains(SECRET), "the owner's chat: {}", system_text(&requests[1]));
    let elsewhere = system_text(&requests[2]);
    assert!(!elsewhere.contains(SECRET) && elsewhere.contains(&p.person_file(&p.dm_chat(STRANGER))), "{elsewhere}");
    let acting = system_text(&requests[3]);
    assert!(!acting.contains(SECRET) && acting.contains(&p.person_file(STRANGER)), "{acting}");
    h.stop().await;
}

macro_rules! on_both_platforms {
    ($($name:ident),+ $(,)?) => {
        mod telegram {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() { super::$name(super::TELEGRAM).await }
            )+
        }
        mod discord {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() { super::$name(super::DISCORD).await }
            )+
        }
    };
}

on_both_platforms!(
    a_dm_secret_never_reaches_the_group,
    path_tricks_are_refused_in_a_group,
    a_persons_notes_stay_in_their_direct_chat,
    a_subagent_from_a_group_keeps_the_groups_scope,
    system_messages_get_the_owners_memory_only_in_the_owners_chat,
);
