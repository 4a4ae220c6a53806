//! Reply metadata: what a worker writes into an [`OutboundMessage`]'s `metadata` about the run
//! that produced it, and what adapters and the API channel read back. The keys are part of the
//! bus contract (`docs/bus.md`); nothing outside this file spells them.

use serde_json::{Map, Value, json};

use super::{InboundMessage, MAX_CHANNEL_BYTES, OutboundMessage, Usage};

/// The run that produced the reply (a run id; also a key of the run's live feedback).
pub const RUN_ID: &str = "run_id";
/// The session the run belongs to.
pub const SESSION_KEY: &str = "session_key";
/// The model that answered.
pub const MODEL: &str = "model";
/// Token counts of the run ([`Usage`]).
pub const USAGE: &str = "usage";
/// Estimated cost in USD; `null` when unknown, so it is never taken for zero.
pub const COST_USD: &str = "cost_usd";
/// `true` when the model chose not to answer (`NO_REPLY`); the content is then empty.
pub const SUPPRESSED: &str = "suppressed";
/// `true` on the notice answering a message its session did not keep (its queue was full, or
/// `drop` mode): no turn ran for it and none will; sending it again is the way.
pub const NOT_KEPT: &str = "not_kept";
/// In an inbound message's metadata: `<channel>@<instance>`, set by an adapter that runs as
/// several processes so that the replies reach the one that is waiting for them.
pub const REPLY_CHANNEL: &str = "reply_channel";

/// `inbound`'s [`REPLY_CHANNEL`], when it names an instance of the message's own channel.
pub(super) fn routed_channel(inbound: &InboundMessage) -> Option<&str> {
    inbound.metadata.get(REPLY_CHANNEL).and_then(Value::as_str).filter(|routed| {
        let instance = routed.strip_prefix(inbound.channel.as_str()).and_then(|rest| rest.strip_prefix('@'));
        routed.len() <= MAX_CHANNEL_BYTES && instance.is_some_and(|instance| !instance.is_empty())
    })
}

/// The fields the API channel copies from a reply into its JSON answer, in this order.
pub const API_FIELDS: [&str; 6] = [RUN_ID, MODEL, USAGE, COST_USD, SUPPRESSED, NOT_KEPT];

/// Names the run (and its session) that produced `reply`.
pub fn set_run(reply: &mut OutboundMessage, run_id: &str, session_key: &str) {
    reply.metadata.insert(RUN_ID.into(), json!(run_id));
    reply.metadata.insert(SESSION_KEY.into(), json!(session_key));
}

/// Marks a reply the model chose not to give.
pub fn set_suppressed(reply: &mut OutboundMessage) {
    reply.metadata.insert(SUPPRESSED.into(), json!(true));
}

/// Marks the notice answering a message that was not kept.
pub fn set_not_kept(reply: &mut OutboundMessage) {
    reply.metadata.insert(NOT_KEPT.into(), json!(true));
}

/// Whether `reply` says its message was not kept (see [`NOT_KEPT`]).
pub fn is_not_kept(reply: &OutboundMessage) -> bool {
    reply.metadata.get(NOT_KEPT).and_then(Value::as_bool) == Some(true)
}

/// Records which model answered and what it cost.
pub fn set_model(reply: &mut OutboundMessage, model: &str, usage: Usage, cost_usd: Option<f64>) {
    reply.metadata.insert(MODEL.into(), json!(model));
    set_cost(&mut reply.metadata, usage, cost_usd);
}

/// Records token counts and cost in any message's metadata (replies, and the system messages
/// that announce a sub-agent's end).
pub fn set_cost(metadata: &mut Map<String, Value>, usage: Usage, cost_usd: Option<f64>) {
    metadata.insert(USAGE.into(), json!(usage));
    metadata.insert(COST_USD.into(), json!(cost_usd));
}

/// The run that produced `reply`, if it says.
pub fn run_id(reply: &OutboundMessage) -> Option<&str> {
    reply.metadata.get(RUN_ID).and_then(Value::as_str)
}

/// Whether the model chose not to answer.
pub fn is_suppressed(reply: &OutboundMessage) -> bool {
    reply.metadata.get(SUPPRESSED).and_then(Value::as_bool) == Some(true)
}

/// Empty content means "nothing to say" (unless files come with it); a suppressed reply sends
/// nothing at all.
pub fn says_nothing(reply: &OutboundMessage) -> bool {
    reply.content.trim().is_empty() && (is_suppressed(reply) || reply.media.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_go_to_the_named_instance_of_the_same_channel_only() {
        let mut msg = InboundMessage { channel: "api".into(), ..InboundMessage::default() };
        assert_eq!(msg.reply_channel(), "api");
        for (routed, expected) in [
            ("api@host-8787", "api@host-8787"),
            ("telegram", "api"),
            ("telegram@x", "api"),
            ("api@", "api"),
            ("apix@y", "api"),
        ] {
            msg.metadata.insert(REPLY_CHANNEL.into(), routed.into());
            assert_eq!(msg.reply_channel(), expected, "{routed}");
        }
        msg.metadata.insert(REPLY_CHANNEL.into(), format!("api@{}", "x".repeat(64)).into());
        assert_eq!(msg.reply_channel(), "api", "too long for a channel");
    }

    #[test]
    fn written_metadata_reads_back() {
        let mut reply = OutboundMessage::default();
        set_run(&mut reply, "r1", "api:me");
        assert_eq!(run_id(&reply), Some("r1"));
        assert!(!is_suppressed(&reply));
        assert!(says_nothing(&reply));
        set_suppressed(&mut reply);
        reply.media.push(super::super::Media::default());
        assert!(is_suppressed(&reply) && says_nothing(&reply));
        set_model(&mut reply, "m", Usage::new(1, 2), None);
        assert_eq!(reply.metadata[COST_USD], Value::Null);
        assert_eq!(reply.metadata[USAGE]["output_tokens"], 2);
    }
}
