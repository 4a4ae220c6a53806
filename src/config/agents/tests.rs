use std::collections::HashMap;

use crate::config::{Config, ConfigError};

fn load(text: &str) -> Result<Config, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(&path, format!("data_dir = {:?}\n{text}", dir.path().join("data"))).unwrap();
    Config::load(Some(&path), &HashMap::new())
}

#[test]
fn named_agents_and_bindings_load_with_defaults_filled() {
    let config = load(
        r#"
        [agent]
        default = "support"
        [agents.support]
        models = ["openai/gpt-4o-mini"]
        tools = ["current_time"]
        max_tokens = 300
        [agents.coder]
        workspace = "code"
        [[bindings]]
        agent = "main"
        chat = "telegram:-100:topic:7"
        [[bindings]]
        agent = "coder"
        guild = "discord:900"
        "#,
    )
    .unwrap();
    let data = config.data_dir().to_path_buf();
    assert_eq!(config.agents["support"].workspace, data.join("agents/support"));
    assert_eq!(config.agents["coder"].workspace, data.join("code"));
    assert_eq!(config.agents["support"].max_tokens, Some(300));
    assert_eq!(config.agents["coder"].system_prompt, None);
    assert_eq!(config.bindings.len(), 2);
    assert_eq!(config.bindings[1].targets().collect::<Vec<_>>(), [("guild", "discord:900")]);
}

#[test]
fn unknown_agents_and_bad_bindings_fail_with_the_key_path() {
    let cases = [
        ("[agent]\ndefault = \"nope\"", "agent.default"),
        ("[[bindings]]\nagent = \"nope\"\nchannel = \"api\"", "bindings[0]"),
        ("[[bindings]]\nagent = \"main\"", "bindings[0]"),
        ("[agents.x]\n[[bindings]]\nagent = \"x\"\nchat = \"api:1\"\ngroup = \"api:1\"", "bindings[0]"),
        ("[agents.main]", "agents.main"),
        ("[agents.\"a/b\"]", "agents.a/b"),
    ];
    for (text, key) in cases {
        let err = load(text).unwrap_err().to_string();
        assert!(err.contains(key), "{text:?}: {err}");
    }
    let err = load("[[bindings]]\nagent = \"main\"\nchat = \"api:1\"\ntopic = 3").unwrap_err().to_string();
    assert!(err.contains("bindings"), "{err}");
}

#[test]
fn loop_detection_is_off_or_at_least_two_and_named_agents_may_set_their_own() {
    let config = load("[agents.coder]\nloop_detection = 5\n").unwrap();
    assert_eq!((config.agent.loop_detection, config.agents["coder"].loop_detection), (3, Some(5)));
    assert_eq!(load("[agent]\nloop_detection = 0\n").unwrap().agent.loop_detection, 0);
    let message = load("[agent]\nloop_detection = 1\n").unwrap_err().to_string();
    assert!(message.starts_with("agent.loop_detection (in "), "{message}");
    let message = load("[agents.coder]\nloop_detection = 1\n").unwrap_err().to_string();
    assert!(message.starts_with("agents.coder.loop_detection (in "), "{message}");
}
