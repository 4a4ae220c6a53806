//! Chat-id / subject encoding: any string becomes one safe NATS token that decodes back to it;
//! any token that decodes is the one spelling of its string; a chat subject parses back.

#![no_main]

#[path = "../common/mod.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use switchboard_channels::subject::{decode_token, encode_token, is_valid_token};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let token = encode_token(text);
    assert!(is_valid_token(&token), "{text:?} encoded to the invalid token {token:?}");
    assert!(
        token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'~'),
        "{text:?} encoded to {token:?}, outside [A-Za-z0-9_~-]"
    );
    assert_eq!(decode_token(&token).as_deref(), Ok(text), "{text:?} did not round-trip through {token:?}");
    // Decoding accepts exactly one spelling per string.
    if let Ok(decoded) = decode_token(text) {
        assert_eq!(encode_token(&decoded), text, "{text:?} decoded to {decoded:?}, which encodes differently");
    }
    // A channel name and a chat id, split at the first NUL.
    let (channel, chat_id) = text.split_once('\0').unwrap_or((text, ""));
    common::check_subject(channel, chat_id);
});
