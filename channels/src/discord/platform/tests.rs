//! Discord's platform against the fake Discord, through the delivery core.

use std::sync::Mutex;

use serenity::all::HttpBuilder;
use switchboard_testkit::fake_discord::{Failure, FakeDiscord, LostAnswer};

use super::*;
use crate::bus::{Acker, BusError};
use crate::contract::RunEventBody;
use crate::delivery::{Courier, Ledger, LiveRuns};
use crate::discord::directory::ChannelKind;

/// Records what became of a delivery: `ack` or `nak <delay>`.
struct RecordingAcker(Arc<Mutex<Vec<String>>>);

#[async_trait::async_trait]
impl Acker for RecordingAcker {
    async fn ack(&mut self) -> Result<(), BusError> {
        self.0.lock().unwrap().push("ack".into());
        Ok(())
    }

    async fn nak(&mut self, delay: Option<Duration>) -> Result<(), BusError> {
        self.0.lock().unwrap().push(format!("nak {delay:?}"));
        Ok(())
    }

    async fn progress(&self) -> Result<(), BusError> {
        Ok(())
    }
}

#[tokio::test]
async fn an_outage_naks_for_later_and_a_refusal_acks() {
    const CREATE: &str = "POST /channels/{id}/messages";
    let fake = FakeDiscord::start().await;
    let http = Arc::new(HttpBuilder::new(FakeDiscord::TOKEN).proxy(fake.url()).ratelimiter_disabled(true).build());
    let rest = Arc::new(Rest::new(http));
    let retry =
        RetryPolicy { first_backoff: Duration::from_millis(1), max_backoff: Duration::from_millis(2), max_attempts: 3 };
    let ledger = Ledger::new(8, 256);
    let answers = Arc::new(Answers::new(Arc::clone(&rest), CancellationToken::new()));
    let platform =
        DiscordPlatform::new(rest, Arc::new(Directory::default()), answers, Arc::new(DiscordSettings::default()));
    let live = Arc::new(LiveRuns::new());
    let courier = Courier::with_ledger(Arc::new(platform.with_retry(retry)), live, CancellationToken::new(), ledger);
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let msg = OutboundMessage { content: "hi".into(), ..reply("200", None) };

    // The first attempt posts the message but its answer is lost; the retries fail.
    fake.fail_next(CREATE, Failure::AnswerLost(LostAnswer::ConnectionDropped));
    for _ in 0..2 {
        fake.fail_next(CREATE, Failure::ServerError);
    }
    courier.handle(msg.clone(), Box::new(RecordingAcker(Arc::clone(&outcomes)))).await;
    assert_eq!(fake.sent_messages().len(), 1);
    // Redelivered after the outage: its nonce makes Discord return the message posted then.
    courier.handle(msg.clone(), Box::new(RecordingAcker(Arc::clone(&outcomes)))).await;
    assert_eq!(fake.sent_messages().len(), 1);
    let forbidden =
        Failure::Status { code: 403, body: serde_json::json!({ "message": "Missing Access", "code": 50001 }) };
    fake.fail_next(CREATE, forbidden);
    let other = OutboundMessage { id: "o2".into(), ..msg };
    courier.handle(other, Box::new(RecordingAcker(Arc::clone(&outcomes)))).await;
    assert_eq!(*outcomes.lock().unwrap(), ["nak Some(30s)", "ack", "ack"]);
    assert_eq!(fake.calls_to(CREATE).len(), 5, "three failures, one success, one refusal");
}

fn event(session_key: &str, chat: &str, inbound_id: Option<&str>) -> RunEvent {
    RunEvent {
        v: 1,
        run_id: "r".into(),
        session_key: session_key.into(),
        channel: "discord".into(),
        chat_id: chat.into(),
        inbound_id: inbound_id.map(str::to_owned),
        thread_id: session_key.rsplit_once(":thread:").map(|(_, thread)| thread.to_owned()),
        reply_to: inbound_id.and_then(|id| id.rsplit_once(':')).map(|(_, message)| message.to_owned()),
        at: chrono::Utc::now(),
        body: RunEventBody::Started,
    }
}

fn platform(directory: Directory) -> DiscordPlatform {
    let http = Arc::new(HttpBuilder::new(FakeDiscord::TOKEN).build());
    let rest = Arc::new(Rest::new(http));
    let answers = Arc::new(Answers::new(Arc::clone(&rest), CancellationToken::new()));
    DiscordPlatform::new(rest, Arc::new(directory), answers, Arc::new(DiscordSettings::default()))
}

fn channel_of(event: &RunEvent) -> Option<ChannelId> {
    platform(Directory::default()).live_target(event).map(|target| target.channel)
}

#[test]
fn runs_show_in_their_thread_or_chat() {
    assert_eq!(channel_of(&event("discord:200:thread:201", "200", None)), Some(ChannelId::new(201)));
    assert_eq!(channel_of(&event("ops/discord:200:thread:9", "200", None)), Some(ChannelId::new(9)));
    assert_eq!(channel_of(&event("discord:200", "200", None)), Some(ChannelId::new(200)));
    assert_eq!(channel_of(&event("discord:x", "x", None)), None);
}

#[test]
fn drafts_reference_the_trigger_in_guild_channels_only() {
    let directory = Directory::default();
    directory.insert(7, ChannelKind::Direct);
    let platform = platform(directory);
    let guild = platform.live_target(&event("discord:200", "200", Some("discord:200:42"))).unwrap();
    assert_eq!(guild.reply_to, Some(MessageId::new(42)));
    let dm = platform.live_target(&event("discord:7", "7", Some("discord:7:42"))).unwrap();
    assert_eq!(dm.reply_to, None);
}

#[test]
fn a_draft_stops_growing_at_the_message_limit() {
    let text = "ab😀".repeat(3000);
    assert_eq!(platform(Directory::default()).visible_draft(&text).chars().count(), MESSAGE_LIMIT);
}

fn reply(chat: &str, thread: Option<&str>) -> OutboundMessage {
    OutboundMessage {
        id: "o1".into(),
        chat_id: chat.into(),
        thread_id: thread.map(str::to_owned),
        reply_to: Some("42".into()),
        ..OutboundMessage::default()
    }
}
