use switchboard_channels::contract::{InboundMessage, Sender};

use super::{Binding, Target, resolve};

fn msg(channel: &str, chat: &str, thread: Option<&str>, guild: Option<serde_json::Value>) -> InboundMessage {
    let sender = Sender { id: "u1".into(), name: "U".into(), is_bot: false };
    let mut msg = InboundMessage::user(channel, chat, sender, "hi");
    msg.thread_id = thread.map(str::to_owned);
    if let Some(guild) = guild {
        msg.metadata.insert("guild_id".into(), guild);
    }
    msg
}

fn bind(agent: &str, target: Target) -> Binding {
    Binding { agent: agent.into(), target }
}

#[test]
fn most_specific_binding_wins() {
    use Target::*;
    // Listed least specific first, so order alone cannot explain the results.
    let bindings = vec![
        bind("tg", Channel("telegram".into())),
        bind("group", Group("telegram:-100".into())),
        bind("chat", Chat("telegram:-100".into())),
        bind("topic", Chat("telegram:-100:topic:7".into())),
        bind("guild", Guild("discord:900".into())),
        bind("thread", Chat("discord:55:thread:9".into())),
    ];
    let table: &[(InboundMessage, Option<&str>)] = &[
        // chat beats group beats channel
        (msg("telegram", "-100", None, None), Some("chat")),
        // a topic binding beats the chat's; another topic falls to the group binding
        (msg("telegram", "-100", Some("7"), None), Some("topic")),
        (msg("telegram", "-100", Some("8"), None), Some("group")),
        // a chat with no binding of its own: the channel's
        (msg("telegram", "42", None, None), Some("tg")),
        // guild from metadata, as a string or a number; the thread binding beats it
        (msg("discord", "55", None, Some(serde_json::json!("900"))), Some("guild")),
        (msg("discord", "56", None, Some(serde_json::json!(900))), Some("guild")),
        (msg("discord", "55", Some("9"), Some(serde_json::json!("900"))), Some("thread")),
        (msg("discord", "57", None, Some(serde_json::json!("901"))), None),
        (msg("discord", "57", None, None), None),
        // nothing matches: the default agent
        (msg("api", "me", None, None), None),
    ];
    for (msg, expected) in table {
        assert_eq!(resolve(&bindings, msg), *expected, "{}", msg.session_key());
    }
}

#[test]
fn ties_go_to_the_first_binding() {
    let bindings = vec![bind("a", Target::Channel("api".into())), bind("b", Target::Channel("api".into()))];
    assert_eq!(resolve(&bindings, &msg("api", "me", None, None)), Some("a"));
    assert_eq!(resolve(&[], &msg("api", "me", None, None)), None);
}

fn agent(name: &str) -> std::sync::Arc<crate::agent::Agent> {
    use crate::provider::openai::{OpenAiConfig, OpenAiProvider};
    let provider = OpenAiProvider::new(OpenAiConfig {
        name: "unused".into(),
        base_url: "http://127.0.0.1:9".into(),
        api_key: None,
        request_timeout: std::time::Duration::from_secs(1),
        stream: false,
        vision: false,
        extra_headers: vec![],
        hints: Default::default(),
    })
    .unwrap();
    let settings = crate::agent::AgentSettings {
        name: name.into(),
        system_prompt: String::new(),
        model: "m".into(),
        max_iterations: 1,
        loop_detection: 3,
        max_tokens: None,
        temperature: None,
        stream: false,
        tool_choice: Default::default(),
        prices: Default::default(),
        workspace: std::path::PathBuf::new(),
        skills: Default::default(),
        protected: Default::default(),
        heartbeat_ack_max_chars: 300,
        models: Vec::new(),
        context_windows: Default::default(),
    };
    std::sync::Arc::new(crate::agent::Agent::new(std::sync::Arc::new(provider), Default::default(), settings))
}

#[test]
fn system_messages_name_their_agent_and_session_but_people_cannot() {
    use super::Agents;
    use switchboard_channels::contract::{ChatAddress, Origin};
    let agents = Agents::new(vec![agent("main"), agent("ops")], "main", vec![]).unwrap();
    let chat =
        ChatAddress { channel: "telegram".into(), chat_id: "-100".into(), thread_id: Some("7".into()), is_group: true };
    let origin = Origin { kind: "cron".into(), id: "job1".into() };
    let mut system = InboundMessage::system("cron:job1:1".into(), chat, origin, "daily summary");
    assert_eq!(agents.route(&system).key, "telegram:-100:topic:7");
    system.set_system_agent("ops");
    assert_eq!(agents.route(&system).key, "ops/telegram:-100:topic:7");
    system.set_system_session("cron:job1");
    let route = agents.route(&system);
    assert_eq!((route.agent.settings().name.as_str(), route.key.as_str()), ("ops", "ops/cron:job1"));
    // An unknown agent falls back to the bindings and the default.
    system.set_system_agent("gone");
    assert_eq!(agents.route(&system).key, "cron:job1");
    // The same metadata on a person's message is ignored.
    let mut user = msg("telegram", "-100", Some("7"), None);
    user.metadata = system.metadata.clone();
    user.set_system_agent("ops");
    assert_eq!(agents.route(&user).key, "telegram:-100:topic:7");
}
