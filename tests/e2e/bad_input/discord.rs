//! The Discord door: unknown events and ops, frames that are not JSON, malformed message
//! payloads, edits, empty messages and attachments over the media limit.

use std::time::Duration;

use serde_json::json;
use switchboard_testkit::fake_discord::events;

use super::rig::{ALICE, DISCORD, DM, Rig, Shape, eventually};

fn dm(message_id: u64, content: &str) -> serde_json::Value {
    events::dm_message(DM, ALICE as u64, "alice", message_id, content)
}

async fn discord_corpus(shape: Shape) {
    let mut rig = Rig::start(shape, DISCORD, &[]).await;
    let fake = &rig.discord;
    // Never answered: events and ops switchboard does not know, broken payloads, an edit, a
    // message with nothing in it.
    fake.dispatch("FUTURE_EVENT_V11", json!({"anything": [1, 2, 3]}));
    assert!(fake.send_raw(r#"{"op": 42, "d": {"surprise": true}, "s": null, "t": null}"#));
    fake.dispatch("MESSAGE_CREATE", json!({"id": "not-a-snowflake", "content": 5}));
    fake.dispatch("MESSAGE_CREATE", json!("a string, not a message"));
    fake.dispatch("MESSAGE_UPDATE", dm(1, "an edit is not a new question"));
    fake.send_message_create(dm(2, ""));
    // Answered once each: a message after the garbage, one with an attachment over the limit.
    fake.send_message_create(dm(10, "after the garbage"));
    let url = fake.add_attachment("huge.zip", vec![0; 16]);
    fake.send_message_create(events::with_attachment(dm(11, "with a big file"), 77, "huge.zip", 30 << 20, &url));
    let expected = ["after the garbage", "huge.zip not saved: too large to download (31457280 bytes)"];

    // The two messages arrive together: they may be answered together (one burst).
    let texts = || rig.discord.sent_messages().into_iter().map(|m| m.content).collect::<Vec<_>>();
    let all_in = || expected.iter().all(|needle| texts().iter().any(|reply| reply.contains(needle)));
    let arrived = eventually(Duration::from_secs(20), all_in).await;
    // No signal says the gateway will not hand an event over again (a resumed session replays
    // what it missed), so a while passes before counting the answers.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let sent = texts();
    assert!(arrived, "{sent:#?}\n{}", rig.logs());
    assert!(sent.len() <= expected.len(), "{sent:#?}");
    for needle in expected {
        assert_eq!(sent.iter().filter(|reply| reply.contains(needle)).count(), 1, "{needle:?} in {sent:#?}");
    }
    let before = sent.len();
    assert!(rig.discord.calls_to("GET /attachments/{name}").is_empty(), "the big file was downloaded anyway");

    // A frame that is not JSON: the gateway connection may be dropped and resumed, and what
    // follows is still answered once.
    assert!(rig.discord.send_raw("{not json"));
    rig.discord.send_message_create(dm(12, "after a broken frame"));
    let answered = eventually(Duration::from_secs(30), || rig.discord.sent_messages().len() > before).await;
    assert!(answered, "{:#?}\n{}", rig.discord.sent_messages(), rig.logs());
    // As above: a resumed gateway session may replay events, and nothing says it is done.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let last: Vec<String> = rig.discord.sent_messages().into_iter().skip(before).map(|m| m.content).collect();
    assert_eq!(last, ["echo: after a broken frame"]);
    assert_eq!(rig.llm.requests().len(), before + 1, "one model call per answer\n{}", rig.logs());
    rig.assert_still_healthy().await;
    rig.report("Discord corpus");
}

#[tokio::test]
async fn discord_corpus_embedded() {
    discord_corpus(Shape::Embedded).await;
}

#[tokio::test]
async fn discord_corpus_nats() {
    discord_corpus(Shape::Nats).await;
}
