//! Photos reach vision models: a worker whose provider entry says `vision = true` sends the
//! photo of the message it answers as an image part (OpenAI `image_url` with a data URL,
//! Anthropic `image` block), checked by the fakes as the real APIs check them; without
//! `vision`, or for an image over the limit, the model gets the path line only.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;

use crate::common::{BusKind, Harness, Setup};
use switchboard_channels::contract::{InboundMessage, Media, OutboundMessage, Sender};
use switchboard_channels::{BusExt, Deliveries};
use switchboard_testkit::fake_anthropic::{self, FakeAnthropic};
use switchboard_testkit::fake_llm::{self, SentImage};

/// A real 1×1 PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x90, 0x77, 0x53, 0xde, 0x00, 0x00, 0x00, 0x0c, 0x49,
    0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0x00, 0x00, 0x03, 0x01, 0x01, 0x00, 0xc9, 0xfe, 0x92, 0xef,
    0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

async fn worker(vision: bool, anthropic: Option<&FakeAnthropic>) -> (Harness, Deliveries) {
    let setup = Setup { vision, anthropic: anthropic.map(FakeAnthropic::base_url), ..Setup::new(BusKind::InProcess) };
    let h = setup.start().await;
    let out = h.bus.outbound("test").await.unwrap();
    (h, out)
}

/// Saves `bytes` where an adapter saves media: the workspace's media directory.
fn save(h: &Harness, name: &str, bytes: &[u8]) -> PathBuf {
    let dir = h.workspace.join("media").join("test");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn photo_message(text: &str, path: &Path) -> InboundMessage {
    let sender = Sender { id: "u1".into(), name: "U".into(), is_bot: false };
    let mut msg = InboundMessage::user("test", "c1", sender, text);
    let size = std::fs::metadata(path).unwrap().len();
    msg.media = vec![Media {
        kind: "photo".into(),
        path: Some(path.display().to_string()),
        mime_type: Some("image/png".into()),
        size: Some(size),
        ..Media::default()
    }];
    msg
}

/// Sends `msg` and waits for the answer.
async fn turn(h: &Harness, out: &mut Deliveries, msg: &InboundMessage) {
    h.bus.publish_inbound(msg).await.unwrap();
    let delivery = tokio::time::timeout(Duration::from_secs(10), out.next()).await.expect("no reply").unwrap().unwrap();
    delivery.ack().await.unwrap();
}

/// The text of the last user message of a request (a string, or its text parts or blocks).
fn last_user_text(request: &Value) -> String {
    let messages = request["messages"].as_array().unwrap();
    let user = messages.iter().rev().find(|m| m["role"] == "user").unwrap();
    let text: String = match &user["content"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        other => panic!("content {other}"),
    };
    switchboard_testkit::fake_llm::without_context_line(&text).to_owned()
}

fn png() -> SentImage {
    SentImage { media_type: "image/png".into(), bytes: PNG.to_vec() }
}

#[tokio::test]
async fn openai_vision_model_gets_the_photo_as_a_data_url_and_later_turns_only_its_path() {
    let (h, mut out) = worker(true, None).await;
    let path = save(&h, "1-0-cat.png", PNG);
    turn(&h, &mut out, &photo_message("what is this?", &path)).await;
    let sender = Sender { id: "u1".into(), name: "U".into(), is_bot: false };
    turn(&h, &mut out, &InboundMessage::user("test", "c1", sender, "and now?")).await;
    let requests = h.llm.requests();
    assert_eq!(fake_llm::sent_images(&requests[0]), vec![png()]);
    let text = last_user_text(&requests[0]);
    assert!(
        text.contains("what is this?") && text.contains(&format!("[photo attached: {}]", path.display())),
        "{text}"
    );
    assert_eq!(fake_llm::sent_images(&requests[1]), vec![], "an earlier photo is not sent again");
    assert!(requests[1].to_string().contains(&format!("[photo attached: {}]", path.display())));
}

#[tokio::test]
async fn a_streamed_request_carries_the_photo_and_the_streamed_answer_is_delivered() {
    let setup = Setup { vision: true, stream: true, ..Setup::new(BusKind::InProcess) };
    let h = setup.start().await;
    let mut out = h.bus.outbound("test").await.unwrap();
    let path = save(&h, "1-0-cat.png", PNG);
    h.bus.publish_inbound(&photo_message("what is this?", &path)).await.unwrap();
    let delivery = tokio::time::timeout(Duration::from_secs(10), out.next()).await.expect("no reply").unwrap().unwrap();
    let reply: OutboundMessage = delivery.decode().unwrap();
    delivery.ack().await.unwrap();
    let request = &h.llm.requests()[0];
    assert_eq!(request["stream"], true);
    assert_eq!(fake_llm::sent_images(request), vec![png()]);
    assert!(reply.content.contains("what is this?"), "the fake's echo of the text: {}", reply.content);
}

#[tokio::test]
async fn without_vision_the_model_gets_the_path_only() {
    let (h, mut out) = worker(false, None).await;
    let path = save(&h, "1-0-cat.png", PNG);
    turn(&h, &mut out, &photo_message("what is this?", &path)).await;
    let request = &h.llm.requests()[0];
    assert_eq!(fake_llm::sent_images(request), vec![]);
    assert_eq!(last_user_text(request), format!("what is this?\n[photo attached: {}]", path.display()));
}

#[tokio::test]
async fn an_image_over_5_mib_stays_a_path_with_a_note() {
    let (h, mut out) = worker(true, None).await;
    let mut big = PNG.to_vec();
    big.resize(5 * 1024 * 1024 + 1, 0);
    let path = save(&h, "1-0-huge.png", &big);
    turn(&h, &mut out, &photo_message("look", &path)).await;
    let request = &h.llm.requests()[0];
    assert_eq!(fake_llm::sent_images(request), vec![]);
    let text = last_user_text(request);
    assert!(text.contains(&format!("[photo attached: {}]", path.display())), "{text}");
    assert!(text.contains("not shown to you: larger than 5 MiB"), "{text}");
}

#[tokio::test]
async fn anthropic_vision_model_gets_the_photo_as_a_base64_image_block() {
    let anthropic = FakeAnthropic::start().await;
    let (h, mut out) = worker(true, Some(&anthropic)).await;
    let path = save(&h, "1-0-cat.png", PNG);
    turn(&h, &mut out, &photo_message("what is this?", &path)).await;
    let request = &anthropic.requests()[0];
    assert_eq!(fake_anthropic::sent_images(request), vec![png()]);
    let blocks = request["messages"].as_array().unwrap().last().unwrap()["content"].as_array().unwrap().clone();
    assert_eq!(blocks[0]["type"], "image", "the image comes before the text: {blocks:?}");
    assert!(last_user_text(request).contains(&format!("[photo attached: {}]", path.display())));
    assert!(h.llm.requests().is_empty());
}

#[tokio::test]
async fn anthropic_without_vision_gets_the_path_only() {
    let anthropic = FakeAnthropic::start().await;
    let (h, mut out) = worker(false, Some(&anthropic)).await;
    let path = save(&h, "1-0-cat.png", PNG);
    turn(&h, &mut out, &photo_message("what is this?", &path)).await;
    let request = &anthropic.requests()[0];
    assert_eq!(fake_anthropic::sent_images(request), vec![]);
    assert!(last_user_text(request).ends_with(&format!("[photo attached: {}]", path.display())));
}
