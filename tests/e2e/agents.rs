//! Named agents and bindings through the real binary and a config file.

use crate::support::{Launch, run_to_exit};
use serde_json::json;
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};

const CONFIG: &str = r#"
[agents.support]
models = ["openai/support-model"]
tools = ["current_time"]
system_prompt = "Escalate billing questions."

[[bindings]]
agent = "support"
chat = "api:help"
"#;

fn write_config(dir: &std::path::Path, text: &str) {
    let path = dir.join("config/switchboard/config.toml");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[tokio::test]
async fn a_chat_bound_in_the_config_gets_its_agent() {
    let llm = FakeLlm::start().await;
    llm.push(Scripted::Text("from support".into()));
    llm.push(Scripted::Text("from main".into()));
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), CONFIG);
    // The named agent's workspace defaults to <data_dir>/agents/<name>.
    let support_ws = dir.path().join("agents/support");
    std::fs::create_dir_all(&support_ws).unwrap();
    std::fs::write(support_ws.join("SOUL.md"), "You are Sparky, the support desk.").unwrap();
    let mut daemon = Launch::new(dir.path(), "run", &["run"]).llm(&llm.base_url()).spawn();
    daemon.wait_healthy().await;

    let (status, body) = daemon.post(json!({"chat_id": "help", "content": "hi", "sender": "alice"})).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = daemon.post(json!({"chat_id": "me", "content": "hi", "sender": "alice"})).await;
    assert_eq!(status, 200, "{body}");
    let requests = llm.requests();
    let prompt = |i: usize| requests[i]["messages"][0]["content"].as_str().unwrap().to_owned();
    assert!(prompt(0).contains("Sparky") && prompt(0).contains("Escalate billing questions."), "{}", prompt(0));
    assert_eq!(requests[0]["model"], "support-model");
    assert!(!prompt(1).contains("Sparky"), "{}", prompt(1));
    assert_eq!(requests[1]["model"], "fake-model");
}

#[test]
fn a_binding_to_an_unknown_agent_fails_start_up_with_the_key() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "[[bindings]]\nagent = \"nope\"\nchannel = \"api\"\n");
    let env = [("OPENAI_API_KEY", "sk-test"), ("SWITCHBOARD_MODEL", "m")];
    let (status, stderr, stdout) = run_to_exit(dir.path(), &["run"], &env);
    assert!(!status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("bindings[0]") && stderr.contains("nope"), "{stderr}");
}
