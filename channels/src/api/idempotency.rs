//! Idempotency keys: a client that sends `Idempotency-Key` may retry a request safely. The
//! message id becomes a function of (channel, chat, sender, key), so the bus and the worker,
//! which both drop a second message with an id they have seen, run one turn for all tries.

use axum::http::HeaderMap;
use sha2::{Digest, Sha256};

use super::CHANNEL;
use super::replies::Fingerprint;
use crate::contract::InboundMessage;
use crate::hex::hex;

pub(crate) const HEADER: &str = "idempotency-key";
/// Longest key accepted; a UUID or a hash fits many times over.
pub(crate) const MAX_KEY_LEN: usize = 255;
/// Ids derived from a key start with this, so their replies are known to be worth caching.
const ID_PREFIX: &str = "api:idem:";

/// The request's idempotency key, if it has one; an error text when it is unusable.
pub(crate) fn key(headers: &HeaderMap) -> Result<Option<String>, String> {
    let mut values = headers.get_all(HEADER).iter();
    let Some(value) = values.next() else { return Ok(None) };
    if values.next().is_some() {
        return Err("send one Idempotency-Key header, not several".into());
    }
    let key =
        value.to_str().ok().filter(|key| key.chars().all(|c| c.is_ascii_graphic())).ok_or_else(|| {
            "Idempotency-Key must be printable ASCII without spaces (a UUID is a good choice)".to_owned()
        })?;
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(format!("Idempotency-Key must be 1 to {MAX_KEY_LEN} characters long"));
    }
    Ok(Some(key.to_owned()))
}

/// Gives `msg` the id its key stands for and asks the worker to answer a replay.
pub(crate) fn apply(msg: &mut InboundMessage, key: &str) {
    let mut hash = Sha256::new();
    // Length-prefixed, so no two different tuples hash the same bytes.
    for part in [CHANNEL, msg.chat_id.as_str(), msg.sender.id.as_str(), key] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    msg.id = format!("{ID_PREFIX}{}", hex(&hash.finalize()));
    // A retry after the first reply was handed out (the API process may have restarted and
    // lost it) asks for the reply again.
    msg.flags.resend_reply = true;
}

/// What the request asked, beyond what the id already covers (chat and sender).
pub(crate) fn fingerprint(content: &str) -> Fingerprint {
    Sha256::digest(content.as_bytes()).into()
}

/// True for ids made by [`apply`].
pub(crate) fn is_keyed(id: &str) -> bool {
    id.starts_with(ID_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::Sender;

    fn keyed(chat: &str, sender: &str, key: &str) -> String {
        let sender = Sender { id: sender.into(), name: sender.into(), is_bot: false };
        let mut msg = InboundMessage::user(CHANNEL, chat, sender, "hi");
        apply(&mut msg, key);
        msg.id
    }

    #[test]
    fn the_id_depends_on_chat_sender_and_key() {
        let id = keyed("c", "s", "k");
        assert_eq!(id, keyed("c", "s", "k"));
        assert!(is_keyed(&id));
        assert_ne!(id, keyed("c2", "s", "k"));
        assert_ne!(id, keyed("c", "s2", "k"));
        assert_ne!(id, keyed("c", "s", "k2"));
        // The parts are kept apart: moving a character from one to the next changes the id.
        assert_ne!(keyed("ab", "c", "k"), keyed("a", "bc", "k"));
    }

    #[test]
    fn a_keyed_message_asks_for_its_reply_again_by_flag() {
        let mut msg = InboundMessage::user(CHANNEL, "c", Sender { id: "s".into(), ..Sender::default() }, "hi");
        apply(&mut msg, "k");
        assert!(msg.flags.resend_reply);
        // Not the metadata key of earlier versions, which workers still read.
        assert!(msg.metadata.is_empty());
    }

    #[test]
    fn keys_are_checked() {
        let mut headers = HeaderMap::new();
        assert_eq!(key(&headers), Ok(None));
        headers.insert(HEADER, "a b".parse().unwrap());
        assert!(key(&headers).is_err());
        headers.insert(HEADER, "x".repeat(MAX_KEY_LEN + 1).parse().unwrap());
        assert!(key(&headers).is_err());
        headers.insert(HEADER, "6f1c-retry".parse().unwrap());
        assert_eq!(key(&headers), Ok(Some("6f1c-retry".into())));
        headers.append(HEADER, "other".parse().unwrap());
        assert!(key(&headers).is_err());
    }
}
