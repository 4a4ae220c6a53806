//! Checks shared by the fuzz targets.

#![allow(dead_code)]

use switchboard_channels::contract::{ChatAddress, InboundMessage};
use switchboard_channels::subject::{Flow, Subjects, is_valid_token};

/// What every inbound message an adapter puts on the bus must satisfy: the worker accepts it,
/// its session key names its chat again, its subject is four safe tokens that parse back to its
/// chat, and its JSON decodes to itself.
pub fn check_inbound(message: &InboundMessage) {
    message.validate().unwrap_or_else(|err| panic!("the adapter made an invalid message: {err}: {message:?}"));
    let address = ChatAddress::parse(&message.session_key()).expect("a session key parses as a chat address");
    assert_eq!(address.channel, message.channel);
    assert_eq!(address.chat_id, message.chat_id);
    assert_eq!(address.thread_id, message.thread_id);
    check_subject(&message.channel, &message.chat_id);
    let json = serde_json::to_vec(message).expect("an inbound message serializes");
    let back: InboundMessage = serde_json::from_slice(&json).expect("an inbound message's JSON decodes");
    assert_eq!(&back, message, "JSON round trip changed the message");
}

/// The chat subject of (`channel`, `chat_id`) is four valid tokens and parses back to them.
pub fn check_subject(channel: &str, chat_id: &str) {
    let subjects = Subjects::new("switchboard").expect("the default prefix is valid");
    for flow in [Flow::In, Flow::Out, Flow::Events] {
        let subject = subjects.chat(flow, channel, chat_id);
        let tokens: Vec<&str> = subject.split('.').collect();
        assert_eq!(tokens.len(), 4, "subject {subject:?} is not four tokens");
        assert!(tokens.iter().all(|token| is_valid_token(token)), "subject {subject:?} has an invalid token");
        let (parsed_flow, parsed_channel, parsed_chat) = subjects.parse_chat(&subject).expect("own subject parses");
        assert_eq!(parsed_flow, flow);
        assert_eq!(parsed_channel, channel);
        assert_eq!(parsed_chat, chat_id);
    }
}

/// The characters of `text` that are not whitespace, in order.
pub fn non_space(text: &str) -> String {
    text.chars().filter(|c| !c.is_whitespace()).collect()
}

/// Whether `needle`'s characters appear in `haystack` in the same order.
pub fn is_subsequence(needle: &str, haystack: &str) -> bool {
    let mut rest = haystack.chars();
    needle.chars().all(|wanted| rest.any(|c| c == wanted))
}
