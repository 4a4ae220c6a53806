//! The chat adapters' delivery record in the store (the distributed shape): a reply delivered by
//! one adapter process is not sent again by the next one (a restart, or the bus lost the ack),
//! a reply partly sent resumes where it stopped, and a reply too old is dropped. Against the
//! fake Bot API, on both stores.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use switchboard_channels::bus::in_process::InProcessBus;
use switchboard_channels::contract::OutboundMessage;
use switchboard_channels::control::OwnerLink;
use switchboard_channels::delivery::{DeliveryPolicy, DeliveryRecord, Sent};
use switchboard_channels::subject::Flow;
use switchboard_channels::telegram::TelegramChannel;
use switchboard_channels::{Bus, BusExt};
use switchboard_testkit::fake_telegram::{FakeTelegram, SentMessage};
use tokio_util::sync::CancellationToken;

use crate::stores::on_both_stores;

const CHAT: &str = "111";

/// One adapter process: its own bus and memory, the store's record.
struct Adapter {
    bus: Arc<InProcessBus>,
    channel: TelegramChannel,
    shutdown: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Adapter {
    async fn stop(self) {
        self.shutdown.cancel();
        self.channel.stop().await;
    }
}

async fn adapter(fake: &FakeTelegram, record: Arc<dyn DeliveryRecord>, max_age: Duration) -> Adapter {
    let dir = tempfile::tempdir().unwrap();
    let bus = Arc::new(InProcessBus::new(64));
    let settings = crate::common::fake_telegram_settings(fake, dir.path(), 111);
    let shutdown = CancellationToken::new();
    let policy = DeliveryPolicy { max_age, record: Some(record), partial_only: false };
    let channel = TelegramChannel::start(
        Arc::clone(&bus) as Arc<dyn Bus>,
        settings,
        OwnerLink::default(),
        policy,
        shutdown.clone(),
    );
    Adapter { bus, channel: channel.await.unwrap(), shutdown, _dir: dir }
}

fn reply(id: &str, content: &str) -> OutboundMessage {
    OutboundMessage {
        id: id.into(),
        in_reply_to: Some(format!("telegram:{CHAT}:42")),
        channel: "telegram".into(),
        chat_id: CHAT.into(),
        content: content.into(),
        ..OutboundMessage::default()
    }
}

/// Publishes `msg` past the bus's dedupe of its id, as a redelivery arrives.
async fn redeliver(adapter: &Adapter, msg: &OutboundMessage) {
    let payload = Bytes::from(serde_json::to_vec(msg).unwrap());
    adapter.bus.publish_raw(Flow::Out, "telegram", CHAT, None, payload).await.unwrap();
}

/// The texts sent once `barrier` has arrived (replies to one chat go out in order, so
/// everything published before it was dealt with).
async fn texts_up_to(fake: &FakeTelegram, barrier: &str) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let sent: Vec<SentMessage> = fake.sent_messages();
        let texts: Vec<String> = sent.iter().map(|m| m.text.clone().unwrap_or_default()).collect();
        if texts.iter().any(|text| text == barrier) {
            return texts;
        }
        assert!(tokio::time::Instant::now() < deadline, "no {barrier:?} in {texts:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

on_both_stores! {
    /// The adapter restarts (or another takes over) and the reply comes again: not sent twice.
    async fn a_reply_delivered_before_a_restart_is_not_sent_again(fresh) {
        let fake = FakeTelegram::start().await;
        let msg = reply("run-1:reply", "only once");
        let first = adapter(&fake, Arc::clone(&fresh.store) as Arc<dyn DeliveryRecord>, Duration::ZERO).await;
        first.bus.publish_outbound(&msg).await.unwrap();
        texts_up_to(&fake, "only once").await;
        first.stop().await;

        let second = adapter(&fake, fresh.another().await as Arc<dyn DeliveryRecord>, Duration::ZERO).await;
        redeliver(&second, &msg).await;
        second.bus.publish_outbound(&reply("r2", "barrier")).await.unwrap();
        assert_eq!(texts_up_to(&fake, "barrier").await, ["only once", "barrier"]);
        assert_eq!(fresh.store.sent("telegram", "run-1:reply").await.unwrap(), Some(Sent::All));
    }

    /// An earlier process sent the first part of a long reply and died: the next sends the rest.
    async fn a_partly_sent_reply_resumes_after_the_part_that_went_out(fresh) {
        let fake = FakeTelegram::start().await;
        let long = format!("{}\n\n{}", "a".repeat(4000), "b".repeat(100));
        fresh.store.record_sent("telegram", "run-2:reply", Sent::Steps(1)).await.unwrap();
        let adapter = adapter(&fake, Arc::clone(&fresh.store) as Arc<dyn DeliveryRecord>, Duration::ZERO).await;
        adapter.bus.publish_outbound(&reply("run-2:reply", &long)).await.unwrap();
        adapter.bus.publish_outbound(&reply("r3", "barrier")).await.unwrap();
        let texts = texts_up_to(&fake, "barrier").await;
        assert_eq!(texts.len(), 2, "{texts:?}");
        assert_eq!(texts[0], "b".repeat(100), "only the second part");
        assert_eq!(fresh.store.sent("telegram", "run-2:reply").await.unwrap(), Some(Sent::All));
    }

    /// Many adapters finish their sends at once (their records share statements on SQLite):
    /// each record is kept, and a message's later progress overrides its earlier one.
    async fn records_made_at_once_are_each_kept(fresh) {
        let record = Arc::clone(&fresh.store) as Arc<dyn DeliveryRecord>;
        let writes = (0..64).map(|n| {
            let record = Arc::clone(&record);
            tokio::spawn(async move {
                let id = format!("run-{n}:reply");
                record.record_sent("telegram", &id, Sent::Steps(1)).await.unwrap();
                if n % 2 == 0 {
                    record.record_sent("telegram", &id, Sent::All).await.unwrap();
                }
            })
        });
        for write in futures_util::future::join_all(writes).await {
            write.unwrap();
        }
        for n in 0..64 {
            let expected = if n % 2 == 0 { Sent::All } else { Sent::Steps(1) };
            assert_eq!(record.sent("telegram", &format!("run-{n}:reply")).await.unwrap(), Some(expected), "run-{n}");
        }
        assert_eq!(record.sent("discord", "run-0:reply").await.unwrap(), None, "another channel's record");
    }

    /// After a long outage, a reply older than the limit is dropped, not sent an hour late.
    async fn a_reply_older_than_the_limit_is_dropped(fresh) {
        let fake = FakeTelegram::start().await;
        let adapter = adapter(&fake, Arc::clone(&fresh.store) as Arc<dyn DeliveryRecord>, Duration::from_secs(3600)).await;
        let mut stale = reply("run-3:reply", "an hour late");
        stale.created_at = chrono::Utc::now() - chrono::Duration::minutes(61);
        adapter.bus.publish_outbound(&stale).await.unwrap();
        adapter.bus.publish_outbound(&reply("r4", "barrier")).await.unwrap();
        assert_eq!(texts_up_to(&fake, "barrier").await, ["barrier"]);
    }
}
