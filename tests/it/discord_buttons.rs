//! The Discord channel's buttons and direct messages against the fake Discord (REST and
//! gateway, driven by serenity) with a real in-process bus: buttons shown as message
//! components, messages to a person delivered in their DM channel, and presses handed to the
//! control desk and answered through the interaction, within Discord's 3 s.
//!
//! The desk here is a small stand-in for the daemon's (which decides presses from the store
//! and the config): it records the presses and answers as told.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use switchboard_channels::bus::in_process::InProcessBus;
use switchboard_channels::contract::{Button, Sender, TO_USER};
use switchboard_channels::control::{ControlDesk, OwnerLink, PairingNotice, Press, PressAnswer};
use switchboard_channels::delivery::DeliveryPolicy;
use switchboard_channels::discord::{DiscordChannel, DiscordSettings};
use switchboard_channels::{Bus, BusExt, Deliveries, OutboundMessage};
use switchboard_testkit::fake_discord::{FakeDiscord, SentMessage, events};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(5);
const GUILD: u64 = 100;
const CHANNEL: u64 = 200;
const ALICES_DM: u64 = 300;
const ALICE: u64 = 111;
const BOB: u64 = 222;
const OWNER: u64 = 999;
const CALLBACK: &str = "POST /interactions/{id}/{token}/callback";
const FOLLOW_UP: &str = "POST /webhooks/{id}/{token}";
const EDIT_ORIGINAL: &str = "PATCH /webhooks/{id}/{token}/messages/@original";
const OPEN_DM: &str = "POST /users/@me/channels";

/// A desk that records presses and answers each after `delay` with `answer`.
struct TestDesk {
    presses: Mutex<Vec<Press>>,
    answer: PressAnswer,
    delay: Duration,
}

impl TestDesk {
    fn answering(answer: PressAnswer, delay: Duration) -> Arc<TestDesk> {
        Arc::new(TestDesk { presses: Mutex::new(Vec::new()), answer, delay })
    }

    fn presses(&self) -> Vec<Press> {
        self.presses.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl ControlDesk for TestDesk {
    async fn press(&self, press: &Press) -> PressAnswer {
        self.presses.lock().unwrap().push(press.clone());
        tokio::time::sleep(self.delay).await;
        self.answer.clone()
    }

    async fn pairing_requested(&self, _notice: &PairingNotice) {}
}

struct Rig {
    fake: FakeDiscord,
    bus: Arc<InProcessBus>,
    inbound: Deliveries,
    shutdown: CancellationToken,
    channel: Option<DiscordChannel>,
    _dir: tempfile::TempDir,
}

impl Rig {
    async fn start(desk: Option<Arc<TestDesk>>) -> Rig {
        let fake = FakeDiscord::start().await;
        fake.add_guild(GUILD, &[]);
        fake.add_channel(events::text_channel(GUILD, CHANNEL));
        let dir = tempfile::tempdir().unwrap();
        let bus = Arc::new(InProcessBus::new(64));
        let inbound = bus.inbound().await.unwrap();
        let settings = DiscordSettings {
            token: FakeDiscord::TOKEN.into(),
            proxy_url: Some(fake.url()),
            allow_from: vec![ALICE.to_string()],
            media_dir: dir.path().join("media"),
            ..DiscordSettings::default()
        };
        let shutdown = CancellationToken::new();
        let owner = OwnerLink { pairing: None, desk: desk.map(|desk| desk as Arc<dyn ControlDesk>) };
        let channel = DiscordChannel::start(
            Arc::clone(&bus) as Arc<dyn Bus>,
            settings,
            owner,
            DeliveryPolicy::default(),
            shutdown.clone(),
        )
        .await
        .unwrap();
        fake.wait_connected(1, WAIT).await;
        Rig { fake, bus, inbound, shutdown, channel: Some(channel), _dir: dir }
    }

    async fn publish(&self, msg: OutboundMessage) {
        self.bus.publish_outbound(&msg).await.unwrap();
    }

    /// The first `n` messages the bot created, waiting for them.
    async fn sent(&self, n: usize) -> Vec<SentMessage> {
        self.fake.wait_for_calls("POST /channels/{id}/messages", n, WAIT).await;
        self.fake.sent_messages()
    }

    /// Sends an Approve/Deny notification to `chat` and returns the message holding the buttons.
    async fn notification(&self, chat: u64) -> SentMessage {
        self.publish(with_buttons(outbound("n1", &chat.to_string(), "Ann (@ann, 123) asks to pair: \"hi\""))).await;
        self.sent(1).await.remove(0)
    }

    async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(channel) = self.channel.take() {
            tokio::time::timeout(WAIT, channel.stop()).await.expect("the channel stops in time");
        }
    }
}

fn outbound(id: &str, chat: &str, content: &str) -> OutboundMessage {
    OutboundMessage {
        id: id.into(),
        channel: "discord".into(),
        chat_id: chat.into(),
        content: content.into(),
        ..OutboundMessage::default()
    }
}

fn with_buttons(msg: OutboundMessage) -> OutboundMessage {
    let buttons = vec![vec![Button::new("Approve", "pa:K7PX2QMD"), Button::new("Deny", "pd:K7PX2QMD")]];
    OutboundMessage { buttons, ..msg }
}

fn to_person(id: &str, user: u64, content: &str) -> OutboundMessage {
    let mut msg = outbound(id, &user.to_string(), content);
    msg.metadata.insert(TO_USER.into(), Value::Bool(true));
    msg
}

/// (style, custom id) of each button, row by row.
fn buttons_of(components: &Value) -> Vec<Vec<(u64, String)>> {
    let rows = components.as_array().cloned().unwrap_or_default();
    rows.iter()
        .map(|row| {
            let items = row["components"].as_array().cloned().unwrap_or_default();
            items.iter().map(|b| (b["style"].as_u64().unwrap(), b["custom_id"].as_str().unwrap().to_owned())).collect()
        })
        .collect()
}

async fn wait_for_callback(fake: &FakeDiscord) -> switchboard_testkit::fake_discord::InteractionCallback {
    fake.wait_for_calls(CALLBACK, 1, WAIT).await;
    fake.interaction_callbacks().remove(0)
}

#[tokio::test]
async fn buttons_go_under_the_last_part_as_components_coloured_by_meaning() {
    let rig = Rig::start(None).await;
    let long = "A long notice. ".repeat(200);
    rig.publish(with_buttons(outbound("o1", &CHANNEL.to_string(), &long))).await;
    let sent = rig.sent(2).await;
    assert_eq!(sent.len(), 2, "split at 2000 characters");
    assert_eq!(sent[0].components, json!([]), "no buttons on the first part");
    let expected = vec![vec![(3, "pa:K7PX2QMD".to_owned()), (4, "pd:K7PX2QMD".to_owned())]];
    assert_eq!(buttons_of(&sent[1].components), expected);
    let shown = rig.fake.buttons(CHANNEL, sent[1].message_id);
    assert_eq!(shown[0][0].label.as_deref(), Some("Approve"));
    rig.stop().await;
}

#[tokio::test]
async fn a_message_to_a_person_goes_to_their_dm_opened_once() {
    let mut rig = Rig::start(None).await;
    rig.publish(to_person("o1", BOB, "Hello Bob")).await;
    rig.publish(to_person("o2", BOB, "Hello again")).await;
    let sent = rig.sent(2).await;
    let bobs_dm = rig.fake.direct_channel_of(BOB).expect("a DM channel was opened");
    assert!(sent.iter().all(|msg| msg.channel_id == bobs_dm), "{sent:?}");
    assert_eq!(rig.fake.calls_to(OPEN_DM).len(), 1, "opened once, then remembered");

    // Someone who wrote to the bot in a DM is reached there without opening anything.
    rig.fake.send_message_create(events::dm_message(ALICES_DM, ALICE, "alice", 10, "hi"));
    tokio::time::timeout(WAIT, rig.inbound.next()).await.expect("Alice's DM reaches the bus");
    rig.publish(to_person("o3", ALICE, "Hello Alice")).await;
    let sent = rig.sent(3).await;
    assert_eq!(sent[2].channel_id, ALICES_DM);
    assert_eq!(rig.fake.calls_to(OPEN_DM).len(), 1);

    // A person Discord does not know: the message is given up, later ones still go out.
    rig.fake.forget_user(OWNER);
    rig.publish(to_person("o4", OWNER, "Lost")).await;
    rig.publish(to_person("o5", BOB, "Still here")).await;
    let sent = rig.sent(4).await;
    assert_eq!(sent.iter().map(|msg| msg.content.as_str()).collect::<Vec<_>>()[3], "Still here");
    assert!(sent.iter().all(|msg| msg.content != "Lost"));
    rig.stop().await;
}

#[tokio::test]
async fn a_press_reaches_the_desk_and_settles_the_message() {
    let desk = TestDesk::answering(PressAnswer::settled("Approved.", "Approved by User999."), Duration::ZERO);
    let rig = Rig::start(Some(Arc::clone(&desk))).await;
    let notification = rig.notification(CHANNEL).await;
    rig.fake.press_button(CHANNEL, notification.message_id, OWNER, "pa:K7PX2QMD");

    let callback = wait_for_callback(&rig.fake).await;
    assert_eq!(callback.kind, 7, "UPDATE_MESSAGE");
    let settled = format!("{}\n\nApproved by User999.", notification.content);
    assert_eq!(callback.data["content"], json!(settled));
    assert_eq!(callback.data["components"], json!([]));
    let message = rig.fake.message(CHANNEL, notification.message_id).unwrap();
    assert_eq!(message["content"], json!(settled));
    assert!(rig.fake.buttons(CHANNEL, notification.message_id).is_empty(), "the buttons are gone");

    let presser = Sender { id: OWNER.to_string(), name: "User999".into(), is_bot: false };
    let expected =
        Press { channel: "discord".into(), chat_id: CHANNEL.to_string(), presser, data: "pa:K7PX2QMD".into() };
    assert_eq!(desk.presses(), [expected]);
    // The toast: an ephemeral follow-up.
    let follow_up = rig.fake.wait_for_calls(FOLLOW_UP, 1, WAIT).await.remove(0);
    assert_eq!((follow_up.body["content"].clone(), follow_up.body["flags"].clone()), (json!("Approved."), json!(64)));
    rig.fake.assert_interactions_acknowledged();
    rig.stop().await;
}

#[tokio::test]
async fn a_toast_alone_is_shown_to_the_presser_only_and_silence_is_a_quiet_acknowledgement() {
    let desk = TestDesk::answering(PressAnswer::toast("Only the owner can decide."), Duration::ZERO);
    let rig = Rig::start(Some(Arc::clone(&desk))).await;
    rig.fake.send_message_create(events::dm_message(ALICES_DM, ALICE, "alice", 10, "hi"));
    let notification = rig.notification(ALICES_DM).await;
    rig.fake.press_button(ALICES_DM, notification.message_id, ALICE, "pd:K7PX2QMD");
    let callback = wait_for_callback(&rig.fake).await;
    assert_eq!((callback.kind, callback.data["flags"].clone()), (4, json!(64)), "an ephemeral message");
    assert_eq!(callback.data["content"], json!("Only the owner can decide."));
    assert_eq!(desk.presses()[0].presser.id, ALICE.to_string(), "a DM press names its user");
    assert_eq!(rig.fake.buttons(ALICES_DM, notification.message_id).len(), 1, "the buttons stay");
    rig.stop().await;

    let rig = Rig::start(Some(TestDesk::answering(PressAnswer::default(), Duration::ZERO))).await;
    let notification = rig.notification(CHANNEL).await;
    rig.fake.press_button(CHANNEL, notification.message_id, OWNER, "pa:K7PX2QMD");
    assert_eq!(wait_for_callback(&rig.fake).await.kind, 6, "DEFERRED_UPDATE_MESSAGE");
    rig.stop().await;
}

#[tokio::test]
async fn a_slow_desk_is_deferred_in_time_and_its_outcome_edits_the_message_later() {
    let desk = TestDesk::answering(PressAnswer::settled("Denied.", "Denied by User999."), Duration::from_millis(3500));
    let rig = Rig::start(Some(desk)).await;
    let notification = rig.notification(CHANNEL).await;
    rig.fake.press_button(CHANNEL, notification.message_id, OWNER, "pd:K7PX2QMD");

    let callback = wait_for_callback(&rig.fake).await;
    assert_eq!(callback.kind, 6, "deferred before Discord's 3 s ran out");
    let edit = rig.fake.wait_for_calls(EDIT_ORIGINAL, 1, WAIT).await.remove(0);
    assert!(!edit.failed, "{edit:?}");
    let settled = format!("{}\n\nDenied by User999.", notification.content);
    let message = rig.fake.message(CHANNEL, notification.message_id).unwrap();
    assert_eq!(message["content"], json!(settled));
    assert!(rig.fake.buttons(CHANNEL, notification.message_id).is_empty());
    let follow_up = rig.fake.wait_for_calls(FOLLOW_UP, 1, WAIT).await.remove(0);
    assert_eq!(follow_up.body["flags"], json!(64));
    assert!(rig.fake.calls_to(CALLBACK).iter().all(|call| !call.failed), "no 10062 Unknown interaction");
    rig.fake.assert_interactions_acknowledged();
    rig.stop().await;
}

#[tokio::test]
async fn without_a_desk_a_press_is_refused_politely_and_never_reaches_the_bus() {
    let mut rig = Rig::start(None).await;
    let notification = rig.notification(CHANNEL).await;
    rig.fake.press_button(CHANNEL, notification.message_id, OWNER, "pa:K7PX2QMD");
    let callback = wait_for_callback(&rig.fake).await;
    assert_eq!((callback.kind, callback.data["flags"].clone()), (4, json!(64)));
    assert_eq!(callback.data["content"], json!("These buttons don't work here."));
    let nothing = tokio::time::timeout(Duration::from_millis(500), rig.inbound.next()).await;
    assert!(nothing.is_err(), "a press is not a message for the agent");
    rig.stop().await;
}
