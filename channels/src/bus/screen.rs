//! What an adapter cannot deliver goes to the dead letters, not into a log line.
//!
//! Anything with access to the bus can publish on a channel's outbound subject. A payload there
//! that is not a valid [`OutboundMessage`] can never be delivered; the adapter would drop it
//! with a warning and the evidence would be gone. [`deliverable_outbound`] takes such payloads
//! out of a channel's outbound deliveries and republishes them on `…dead.out` with the reason
//! (docs/bus.md, "DeadLetter"), like the workers do for inbound messages.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;

use super::{Bus, BusError, Deliveries, Delivery};
use crate::contract::{DeadLetter, OutboundMessage};
use crate::subject::Flow;

/// When publishing the dead letter fails, the bus offers the message again after this long.
const RETRY_DEAD_LETTER: Duration = Duration::from_secs(5);

/// `channel`'s outbound deliveries without those that are not valid outbound messages: these
/// are dead-lettered (then acked) as they pass. `capacity`: how many the consumer holds at
/// once (see [`Bus::outbound_within`]).
pub async fn deliverable_outbound(bus: Arc<dyn Bus>, channel: &str, capacity: usize) -> Result<Deliveries, BusError> {
    let deliveries = bus.outbound_within(channel, capacity).await?;
    let screened = deliveries.filter_map(move |item| {
        let bus = Arc::clone(&bus);
        async move {
            let delivery = match item {
                Ok(delivery) => delivery,
                Err(err) => return Some(Err(err)),
            };
            match undeliverable(&delivery) {
                None => Some(Ok(delivery)),
                Some(reason) => {
                    dead_letter(bus.as_ref(), Flow::Out, delivery, reason).await;
                    None
                }
            }
        }
    });
    Ok(screened.boxed())
}

/// Why a delivery can never be delivered, if it cannot.
fn undeliverable(delivery: &Delivery) -> Option<String> {
    match delivery.decode::<OutboundMessage>() {
        Err(err) => Some(format!("not a valid OutboundMessage: {err}")),
        Ok(msg) => msg.validate().err().map(|err| format!("invalid OutboundMessage: {err}")),
    }
}

/// Republishes `delivery` on the flow's dead-letter subject with `reason` and acks it; if the
/// dead letter cannot be published, naks it so it is kept and tried again.
pub async fn dead_letter(bus: &dyn Bus, flow: Flow, delivery: Delivery, reason: String) {
    tracing::warn!(subject = %delivery.subject, %reason, "dead-lettering a message");
    let letter = DeadLetter {
        subject: delivery.subject.clone(),
        reason,
        payload: String::from_utf8_lossy(&delivery.payload).into_owned(),
        ..DeadLetter::default()
    };
    let settled = match bus.dead_letter(flow, &letter).await {
        Ok(()) => delivery.ack().await,
        Err(err) => {
            tracing::error!(%err, "cannot publish a dead letter");
            delivery.nak(Some(RETRY_DEAD_LETTER)).await
        }
    };
    if let Err(err) = settled {
        tracing::warn!(%err, "cannot settle a dead-lettered message");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::BusExt;
    use crate::bus::in_process::InProcessBus;

    #[tokio::test]
    async fn undeliverable_outbound_is_dead_lettered_and_the_rest_passes() {
        let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(16));
        let mut replies = deliverable_outbound(Arc::clone(&bus), "telegram", 1).await.unwrap();
        bus.publish_raw(Flow::Out, "telegram", "1", None, "{not json".into()).await.unwrap();
        let message = |v, id: &str| OutboundMessage {
            v,
            id: id.into(),
            channel: "telegram".into(),
            chat_id: "1".into(),
            ..OutboundMessage::default()
        };
        bus.publish_outbound(&message(9, "v9")).await.unwrap();
        bus.publish_outbound(&message(1, "ok")).await.unwrap();

        let delivery = tokio::time::timeout(Duration::from_secs(5), replies.next()).await.unwrap().unwrap().unwrap();
        assert_eq!(delivery.decode::<OutboundMessage>().unwrap().id, "ok");
        delivery.ack().await.unwrap();
        let letters = bus.dead_letters(Flow::Out, 10).await.unwrap();
        assert_eq!(letters.len(), 2, "{letters:?}");
        assert!(letters.iter().any(|l| l.payload == "{not json" && l.reason.contains("not a valid")), "{letters:?}");
        assert!(letters.iter().any(|l| l.reason.contains("version 9")), "{letters:?}");
    }
}
