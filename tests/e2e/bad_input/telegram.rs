//! The Telegram door: unknown and malformed updates, edits, messages without text, update ids
//! repeated and out of order, attachments over the media limit (declared, and lied about).

use std::time::Duration;

use serde_json::json;
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};
use switchboard_testkit::fake_telegram::{FakeTelegram, updates};

use super::rig::{ALICE, Rig, Shape, TELEGRAM, eventually};

/// `channels.telegram.media_max_bytes` for the corpus: small, so "too large" is cheap to hit.
const MEDIA_MAX: u64 = 4096;

fn text(message_id: i64, content: &str) -> serde_json::Value {
    updates::private_text(ALICE, "alice", message_id, content)
}

/// Queues the corpus; returns what each answered message's reply must contain, in any order.
fn push_corpus(fake: &FakeTelegram, llm: &FakeLlm) -> Vec<String> {
    // Never answered: an update kind switchboard does not know, a known kind with a broken
    // body, an edit, a message with nothing to read.
    fake.push_update(json!({"poll_answer_v9": {"poll_id": "1", "option_ids": [0]}}));
    fake.push_update(json!({"message": "not an object"}));
    fake.push_update(json!({"message": {"message_id": "NaN", "chat": 5}}));
    fake.push_update(json!({"edited_message": text(1, "an edit is not a new question")}));
    let mut no_text = text(2, "");
    no_text.as_object_mut().unwrap().remove("text");
    no_text["location"] = json!({"latitude": 52.52, "longitude": 13.40});
    fake.push_message(no_text);

    // Out of order, and the same update twice: each message answered once.
    fake.push_update(json!({"update_id": 500, "message": text(10, "later id first")}));
    fake.push_update(json!({"update_id": 450, "message": text(11, "earlier id second")}));
    fake.push_update(json!({"update_id": 600, "message": text(12, "same update twice")}));
    fake.push_update(json!({"update_id": 600, "message": text(12, "same update twice")}));

    // Over the media limit: declared so (not downloaded), or lying about its size (cut off).
    let declared = updates::document(text(13, "declared big"), "big-doc", "big.bin", "application/zip", 30 << 20);
    fake.push_message(declared);
    fake.add_file("liar-doc", vec![b'a'; (MEDIA_MAX * 3) as usize]);
    fake.push_message(updates::document(text(14, "lies about size"), "liar-doc", "liar.txt", "text/plain", 100));

    // Text that is hard to look at: long, control characters, bidi overrides, zero-width.
    llm.push_when("long long", Scripted::Text("read the long one".into()));
    fake.push_message(text(15, &"long ".repeat(20_000)));
    fake.push_message(text(16, "bell\u{7} esc\u{1b}[2J rtl\u{202e}olleh zw\u{200b}j"));
    vec![
        "later id first".into(),
        "earlier id second".into(),
        "same update twice".into(),
        "big.bin not saved: too large to download (31457280 bytes)".into(),
        "liar.txt not saved: too large to download (".into(),
        "read the long one".into(),
        "rtl".into(),
    ]
}

async fn telegram_corpus(shape: Shape) {
    let max = MEDIA_MAX.to_string();
    let mut expected = Vec::new();
    let env = [("SWITCHBOARD_CHANNELS__TELEGRAM__MEDIA_MAX_BYTES", max.as_str())];
    let mut rig = Rig::start_with(shape, TELEGRAM, &env, |fake, llm| expected = push_corpus(fake, llm)).await;
    // Messages of one person that arrive together may be answered together (one burst).
    let texts = || rig.telegram.sent_messages().into_iter().filter_map(|m| m.text).collect::<Vec<_>>();
    let all_in = || expected.iter().all(|needle| texts().iter().any(|reply| reply.contains(needle.as_str())));
    let arrived = eventually(Duration::from_secs(30), all_in).await;
    rig.wait_settled().await;
    let sent = texts();
    assert!(arrived, "{sent:#?}\n{}", rig.logs());
    assert!(sent.len() <= expected.len(), "answered a message twice or answered garbage: {sent:#?}");
    for needle in &expected {
        let matching = sent.iter().filter(|reply| reply.contains(needle.as_str())).count();
        assert_eq!(matching, 1, "{needle:?} in {sent:#?}");
    }
    assert_eq!(rig.llm.requests().len(), sent.len(), "one model call per answer\n{}", rig.logs());
    // The long one was cut for the model; no partial download is left behind.
    let long = rig.llm.requests().into_iter().map(|r| r.to_string()).find(|r| r.contains("long long")).unwrap();
    assert!(long.len() < 60_000, "{} bytes reached the model", long.len());
    let media = rig.workspace().join("media/telegram").join(ALICE.to_string());
    let leftovers: Vec<_> =
        std::fs::read_dir(&media).map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    assert!(leftovers.is_empty(), "files left in {}: {leftovers:?}", media.display());
    rig.assert_still_healthy().await;
    rig.report("Telegram corpus");
}

#[tokio::test]
async fn telegram_corpus_embedded() {
    telegram_corpus(Shape::Embedded).await;
}

#[tokio::test]
async fn telegram_corpus_nats() {
    telegram_corpus(Shape::Nats).await;
}
