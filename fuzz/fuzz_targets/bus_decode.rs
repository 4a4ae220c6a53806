//! Bus message decoding: any payload on an inbound, outbound, events or dead-letter subject.
//! A payload that decodes must encode and decode back to the same message with the same
//! validation verdict; the dead letter the worker makes of any payload must decode to itself.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde::Serialize;
use serde::de::DeserializeOwned;
use switchboard_channels::contract::{DeadLetter, InboundMessage, OutboundMessage, RunEvent};

fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(message: &T) -> T {
    let json = serde_json::to_vec(message).expect("a decoded message encodes");
    let back: T = serde_json::from_slice(&json).unwrap_or_else(|err| {
        panic!("{message:?} encoded as {} does not decode: {err}", String::from_utf8_lossy(&json))
    });
    assert_eq!(&back, message, "JSON round trip changed the message");
    back
}

fuzz_target!(|payload: &[u8]| {
    if let Ok(inbound) = serde_json::from_slice::<InboundMessage>(payload) {
        let verdict = inbound.validate();
        assert_eq!(round_trip(&inbound).validate(), verdict);
        if verdict.is_ok() {
            // Valid: its session key and subject are usable.
            assert!(inbound.session_key().starts_with(&format!("{}:", inbound.channel)));
        }
    }
    if let Ok(outbound) = serde_json::from_slice::<OutboundMessage>(payload) {
        let verdict = outbound.validate();
        assert_eq!(round_trip(&outbound).validate(), verdict);
    }
    if let Ok(event) = serde_json::from_slice::<RunEvent>(payload) {
        round_trip(&event);
    }
    if let Ok(letter) = serde_json::from_slice::<DeadLetter>(payload) {
        round_trip(&letter);
    }
    // What the worker publishes for an undecodable payload (src/worker/mod.rs).
    let letter = DeadLetter {
        subject: "switchboard.in.api.me".into(),
        reason: "not a valid InboundMessage".into(),
        payload: String::from_utf8_lossy(payload).into_owned(),
        ..DeadLetter::default()
    };
    let back = round_trip(&letter);
    if let Ok(text) = std::str::from_utf8(payload) {
        assert_eq!(back.payload, text, "a UTF-8 payload is kept exactly");
    }
});
