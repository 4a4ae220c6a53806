//! Files in the workspace that are not valid UTF-8, read by the agent through `read_file` (and
//! changed through `edit_file`): the model gets a clear result, the daemon carries on.

use serde_json::{Value, json};
use switchboard_testkit::fake_llm::Scripted;

use super::rig::{API_ONLY, Rig, Shape};

/// What the tool results say, in call order.
fn tool_results(request: &Value) -> Vec<String> {
    let messages = request["messages"].as_array().unwrap();
    messages.iter().filter(|m| m["role"] == "tool").map(|m| m["content"].as_str().unwrap().to_owned()).collect()
}

async fn invalid_utf8_files(shape: Shape) {
    // The API's default sender `api` as the owner, who may use the file tools.
    let mut rig = Rig::start(shape, API_ONLY, &[("SWITCHBOARD_USERS__OWNERS", r#"["api:api"]"#)]).await;
    let workspace = rig.workspace();
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("blob.bin"), [0xFF, 0xFE, 0x00, 0x80, 0xC3, 0x28]).unwrap();
    std::fs::write(workspace.join("latin1.txt"), b"line one\nna\xEFve in Latin-1\nline three\n").unwrap();
    // One line longer than read_file's byte budget (256 KiB), two bytes per character: the cut
    // must not split a character.
    std::fs::write(workspace.join("wide.txt"), "\u{e9}".repeat(200_001)).unwrap();
    let read = |path: &str, offset: Option<u64>| {
        let mut arguments = json!({"path": path});
        if let Some(offset) = offset {
            arguments["offset"] = json!(offset);
        }
        ("read_file".to_owned(), arguments)
    };
    let edit = ("edit_file".to_owned(), json!({"path": "latin1.txt", "old_text": "line one", "new_text": "x"}));
    rig.llm.push(Scripted::ToolCalls(vec![
        read("blob.bin", None),
        read("latin1.txt", None),
        read("latin1.txt", Some(3)),
        read("wide.txt", None),
        edit,
    ]));
    rig.llm.push(Scripted::Text("read them all".into()));

    let (status, body) = rig.daemon.post(json!({"chat_id": "files", "content": "read the odd files"})).await;
    assert_eq!((status, body["reply"].as_str()), (200, Some("read them all")), "{body}\n{}", rig.logs());
    let results = tool_results(&rig.llm.requests()[1]);
    assert_eq!(results.len(), 5, "{results:#?}");
    for (index, path) in [(0, "blob.bin"), (1, "latin1.txt"), (4, "latin1.txt")] {
        let result = &results[index];
        assert!(result.contains(&format!("`{path}` is not a UTF-8 text file")), "call {index}: {result}");
    }
    // File contents reach the model marked as untrusted; what is inside the marks is the file.
    assert_eq!(untrusted_inside(&results[2]), Some("line three\n"), "the lines after the bad one: {}", results[2]);
    let wide = &results[3];
    assert!(wide.contains("only its start is shown") && !wide.contains('\u{fffd}'), "{}", &wide[wide.len() - 300..]);
    let shown = untrusted_inside(wide).and_then(|inside| inside.split('\n').next()).unwrap();
    assert!(shown.chars().all(|c| c == '\u{e9}') && !shown.is_empty(), "a character was split");
    // The refused edit changed nothing.
    assert_eq!(std::fs::read(workspace.join("latin1.txt")).unwrap(), b"line one\nna\xEFve in Latin-1\nline three\n");
    rig.assert_still_healthy().await;
    rig.report("invalid UTF-8 files");
}

/// The text between the untrusted-content marks a tool result is wrapped in.
fn untrusted_inside(result: &str) -> Option<&str> {
    let (_, rest) = result.split_once(">>>\n")?;
    Some(rest.split_once("<<<END_UNTRUSTED_CONTENT>>>")?.0)
}

#[tokio::test]
async fn invalid_utf8_files_read_by_the_agent_embedded() {
    invalid_utf8_files(Shape::Embedded).await;
}

#[tokio::test]
async fn invalid_utf8_files_read_by_the_agent_nats() {
    invalid_utf8_files(Shape::Nats).await;
}
