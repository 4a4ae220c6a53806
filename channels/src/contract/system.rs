//! The routing metadata of system messages (`docs/bus.md`, "System messages"): which agent
//! answers, in which session, on whose behalf, and whether the content is the reply itself.
//!
//! The readers see these keys only on `system` messages, so a person can never choose them
//! by writing them into a user message's metadata; the one exception is `agent` on a message
//! of the API channel, which the channel sets from a request's `model` within what its token
//! allows.

use serde_json::Value;

use super::{InboundKind, InboundMessage};

/// `metadata.agent`: the agent that answers, instead of the chat's binding.
const AGENT: &str = "agent";
/// `metadata.session`: the session the turn runs in, instead of the chat's.
const SESSION: &str = "session";
/// `metadata.on_behalf_of`: the identity (`telegram:42`) of the person whose cron job or
/// sub-agent made the message. The run gets that person's tools and budget, so a scheduled
/// job can never do more than its creator could; without it the run acts for the owner.
const ON_BEHALF_OF: &str = "on_behalf_of";
/// `metadata.deliver`: [`VERBATIM`] = the content is the reply, sent without the model.
const DELIVER: &str = "deliver";
const VERBATIM: &str = "verbatim";
/// The channel whose user messages may pick their agent.
const API_CHANNEL: &str = "api";

impl InboundMessage {
    /// The agent a system message names to answer it.
    pub fn system_agent(&self) -> Option<&str> {
        self.system_field(AGENT)
    }

    /// The session a system message names to run in (an isolated cron job: `cron:<job>`).
    pub fn system_session(&self) -> Option<&str> {
        self.system_field(SESSION)
    }

    /// The identity a system message acts for, as written (parsing it is the reader's job).
    pub fn on_behalf_of(&self) -> Option<&str> {
        self.system_field(ON_BEHALF_OF)
    }

    /// Whether a system message is a reminder whose content goes out as the reply.
    pub fn delivers_verbatim(&self) -> bool {
        self.system_field(DELIVER) == Some(VERBATIM)
    }

    /// The agent an API request picked with its `model` (the API channel checks it against the
    /// request's token). Only a user message of the `api` channel carries one: no chat platform
    /// lets a person set metadata, and a system message names its agent with `agent` itself.
    pub fn api_agent(&self) -> Option<&str> {
        if self.kind != InboundKind::User || self.channel != API_CHANNEL {
            return None;
        }
        self.metadata.get(AGENT).and_then(Value::as_str).filter(|value| !value.is_empty())
    }

    /// Names the agent an API request picked (see [`InboundMessage::api_agent`]).
    pub fn set_api_agent(&mut self, agent: &str) {
        self.metadata.insert(AGENT.into(), Value::from(agent));
    }

    /// Names the agent that answers. Like every setter here it writes the key whatever the
    /// kind; the readers only honour it on system messages.
    pub fn set_system_agent(&mut self, agent: &str) {
        self.metadata.insert(AGENT.into(), Value::from(agent));
    }

    pub fn set_system_session(&mut self, session: &str) {
        self.metadata.insert(SESSION.into(), Value::from(session));
    }

    pub fn set_on_behalf_of(&mut self, identity: &str) {
        self.metadata.insert(ON_BEHALF_OF.into(), Value::from(identity));
    }

    pub fn set_deliver_verbatim(&mut self) {
        self.metadata.insert(DELIVER.into(), Value::from(VERBATIM));
    }

    /// A non-empty string field of a system message's metadata.
    fn system_field(&self, key: &str) -> Option<&str> {
        if self.kind != InboundKind::System {
            return None;
        }
        self.metadata.get(key).and_then(Value::as_str).filter(|value| !value.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::contract::{ChatAddress, Origin};

    fn system() -> InboundMessage {
        let chat = ChatAddress::parse("telegram:42").expect("address");
        InboundMessage::system("cron:j:1".into(), chat, Origin { kind: "cron".into(), id: "j".into() }, "hi")
    }

    #[test]
    fn the_setters_write_the_keys_of_the_wire_format() {
        let mut msg = system();
        msg.set_system_agent("ops");
        msg.set_system_session("cron:j");
        msg.set_on_behalf_of("telegram:42");
        msg.set_deliver_verbatim();
        let wire = serde_json::to_value(&msg).expect("json");
        let expected =
            json!({"agent": "ops", "session": "cron:j", "on_behalf_of": "telegram:42", "deliver": "verbatim"});
        assert_eq!(wire["metadata"], expected);
    }

    #[test]
    fn the_readers_see_what_a_system_message_carries() {
        let mut msg = system();
        assert_eq!((msg.system_agent(), msg.system_session(), msg.on_behalf_of()), (None, None, None));
        assert!(!msg.delivers_verbatim());
        msg.metadata = serde_json::from_value(
            json!({"agent": "ops", "session": "cron:j", "on_behalf_of": "discord:7", "deliver": "verbatim"}),
        )
        .expect("metadata");
        assert_eq!(msg.system_agent(), Some("ops"));
        assert_eq!(msg.system_session(), Some("cron:j"));
        assert_eq!(msg.on_behalf_of(), Some("discord:7"));
        assert!(msg.delivers_verbatim());
    }

    #[test]
    fn a_user_message_and_empty_or_other_values_choose_nothing() {
        let mut user = InboundMessage::user("telegram", "42", Default::default(), "hi");
        user.set_system_agent("ops");
        user.set_on_behalf_of("telegram:1");
        user.metadata.insert(DELIVER.into(), json!(VERBATIM));
        assert_eq!((user.system_agent(), user.on_behalf_of()), (None, None));
        assert!(!user.delivers_verbatim());

        let mut msg = system();
        msg.set_system_session("");
        msg.metadata.insert(DELIVER.into(), json!("loud"));
        assert_eq!(msg.system_session(), None);
        assert!(!msg.delivers_verbatim());
    }
}
