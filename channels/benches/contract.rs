//! Encoding and decoding of the bus contract, as every message on the bus goes through them: a
//! publisher encodes with `serde_json::to_vec` (`BusExt::publish_*`), a consumer decodes with
//! `serde_json::from_slice` (`Delivery::decode`) and checks the result with `validate`.
//!
//! `cargo bench -p switchboard-channels --bench contract`

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a benchmark fails loudly on a broken fixture")]

use std::hint::black_box;

use chrono::{DateTime, Utc};
use criterion::{Criterion, criterion_group, criterion_main};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use switchboard_channels::contract::{
    InboundMessage, Media, OutboundKind, OutboundMessage, RepliedTo, RunEvent, RunEventBody, Sender, Usage,
};

mod support;

fn at() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-26T12:00:00Z").map_or_else(|_| Utc::now(), |at| at.with_timezone(&Utc))
}

fn metadata() -> Map<String, Value> {
    let mut metadata = Map::new();
    metadata.insert("message_id".into(), json!("4242"));
    metadata.insert("chat_type".into(), json!("supergroup"));
    metadata
}

/// A one-line question in a direct chat.
fn short_inbound() -> InboundMessage {
    InboundMessage {
        id: "telegram:123456789:4242".into(),
        channel: "telegram".into(),
        chat_id: "123456789".into(),
        sender: Sender { id: "123456789".into(), name: "Ann".into(), is_bot: false },
        content: "what's the weather in Lisbon tomorrow?".into(),
        received_at: at(),
        metadata: metadata(),
        ..InboundMessage::default()
    }
}

/// A long message in a forum topic: ~2,000 characters of pasted log, a photo, and a reply to
/// one of the bot's long answers (cut to 1,000 characters) with a quoted fragment.
fn long_inbound() -> InboundMessage {
    let log = "2026-11-26T11:59:58Z ERROR api: connection to db-1:5432 refused (\"too many clients\")\n".repeat(24);
    let bot = Sender { id: "999".into(), name: "switchboard".into(), is_bot: true };
    let answer = support::typical_answer();
    InboundMessage {
        id: "telegram:-1001234567890:4242".into(),
        channel: "telegram".into(),
        chat_id: "-1001234567890".into(),
        sender: Sender { id: "123456789".into(), name: "Ann Example".into(), is_bot: false },
        content: format!("It still fails after step 2, here is the log:\n\n{log}"),
        media: vec![Media {
            kind: "photo".into(),
            path: Some("media/telegram/AgACAgIAAxkBAAIBYmVh.jpg".into()),
            mime_type: Some("image/jpeg".into()),
            size: Some(183_422),
            ..Media::default()
        }],
        reply_to: Some("4200".into()),
        replied_to: Some(RepliedTo::new("4200".into(), bot, true, &answer.repeat(2), Some("WorkingDirectory"))),
        thread_id: Some("17".into()),
        is_group: true,
        mentioned: true,
        received_at: at(),
        metadata: metadata(),
        ..InboundMessage::default()
    }
}

fn outbound(inbound: &InboundMessage, content: String) -> OutboundMessage {
    let mut msg = OutboundMessage::answering(
        inbound,
        "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b".into(),
        OutboundKind::Reply,
        content,
    );
    msg.created_at = at();
    msg.metadata.insert("run_id".into(), json!("0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c"));
    msg
}

/// The event that ends every run; it carries the whole reply again.
fn completed(inbound: &InboundMessage, reply: String) -> RunEvent {
    let body = RunEventBody::completed(reply, Usage::new(12_345, 678), "gpt-4o-mini", Some(0.0023));
    let mut event = RunEvent::answering(inbound, "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c", &inbound.session_key(), body);
    event.at = at();
    event
}

/// Encode, and decode + validate, of one message; `validate` is `None` for types without it.
fn bench_type<T: Serialize + DeserializeOwned>(
    c: &mut Criterion,
    name: &str,
    cases: &[(&str, T)],
    validate: Option<fn(&T) -> bool>,
) {
    let mut group = c.benchmark_group(name);
    for (size, msg) in cases {
        let Ok(encoded) = serde_json::to_vec(msg) else { panic!("{name} {size} does not encode") };
        println!("{name}/{size}: {} bytes of JSON", encoded.len());
        group.bench_function(format!("encode/{size}"), |b| b.iter(|| serde_json::to_vec(black_box(msg))));
        group.bench_function(format!("decode/{size}"), |b| {
            b.iter(|| {
                let decoded: T = serde_json::from_slice(black_box(&encoded)).expect("decodes");
                validate.is_none_or(|validate| validate(&decoded))
            })
        });
    }
    group.finish();
}

fn contract(c: &mut Criterion) {
    let (short_in, long_in) = (short_inbound(), long_inbound());
    let short_out = outbound(&short_in, "Sunny, 21 °C, light wind from the north-west.".into());
    let long_out = outbound(&long_in, support::long_answer());
    let (short_done, long_done) =
        (completed(&short_in, short_out.content.clone()), completed(&long_in, long_out.content.clone()));
    bench_type(
        c,
        "inbound",
        &[("short", short_in), ("long", long_in)],
        Some(|msg: &InboundMessage| msg.validate().is_ok()),
    );
    bench_type(
        c,
        "outbound",
        &[("short", short_out), ("long", long_out)],
        Some(|msg: &OutboundMessage| msg.validate().is_ok()),
    );
    bench_type(c, "event_completed", &[("short", short_done), ("long", long_done)], None);
}

criterion_group!(benches, contract);
criterion_main!(benches);
