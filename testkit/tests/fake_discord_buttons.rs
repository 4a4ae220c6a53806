//! Buttons and component interactions of the fake Discord, driven by serenity 0.12.5's real
//! client: components round-trip, a press arrives as serenity's `ComponentInteraction`, and the
//! response rules (3 s, once, follow-ups within the token's lifetime) hold.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use serenity::all::{
    ButtonStyle, ChannelId, ClientBuilder, ComponentInteraction, ComponentInteractionDataKind, Context,
    CreateActionRow, CreateButton, CreateInteractionResponse, CreateInteractionResponseFollowup,
    CreateInteractionResponseMessage, CreateMessage, EditInteractionResponse, EventHandler, GatewayIntents, Http,
    HttpBuilder, Interaction, Message, ShardManager,
};
use serenity::http::HttpError;
use switchboard_testkit::fake_discord::{ComponentButton, FakeDiscord, events};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

const WAIT: Duration = Duration::from_secs(5);
const GUILD: u64 = 100;
const CHANNEL: u64 = 200;
const DM_CHANNEL: u64 = 300;
const OWNER: u64 = 42;

fn http(fake: &FakeDiscord) -> Http {
    HttpBuilder::new(FakeDiscord::TOKEN).proxy(fake.url()).ratelimiter_disabled(true).build()
}

/// Forwards component interactions to the test.
struct Forward(UnboundedSender<ComponentInteraction>);

#[serenity::async_trait]
impl EventHandler for Forward {
    async fn interaction_create(&self, _ctx: Context, interaction: Interaction) {
        if let Interaction::Component(component) = interaction {
            let _ = self.0.send(component);
        }
    }
}

/// A serenity client connected to the fake, with its interactions.
struct Bot {
    interactions: UnboundedReceiver<ComponentInteraction>,
    http: Arc<Http>,
    shard_manager: Arc<ShardManager>,
}

impl Bot {
    async fn start(fake: &FakeDiscord) -> Bot {
        let (tx, interactions) = unbounded_channel();
        let intents = GatewayIntents::GUILD_MESSAGES | GatewayIntents::DIRECT_MESSAGES;
        let mut client =
            ClientBuilder::new_with_http(http(fake), intents).event_handler(Forward(tx)).await.expect("client");
        let (http, shard_manager) = (client.http.clone(), client.shard_manager.clone());
        tokio::spawn(async move { client.start().await });
        fake.wait_connected(1, WAIT).await;
        Bot { interactions, http, shard_manager }
    }

    async fn next_interaction(&mut self) -> ComponentInteraction {
        let next = tokio::time::timeout(WAIT, self.interactions.recv()).await;
        next.expect("an interaction in time").expect("handler alive")
    }

    /// Posts "Run it?" with Approve/Deny buttons.
    async fn ask(&self, channel: u64) -> Message {
        let message = CreateMessage::new().content("Run it?").components(approve_deny());
        ChannelId::new(channel).send_message(&self.http, message).await.expect("message with buttons")
    }

    async fn stop(self) {
        self.shard_manager.shutdown_all().await;
    }
}

fn approve_deny() -> Vec<CreateActionRow> {
    vec![CreateActionRow::Buttons(vec![
        CreateButton::new("approve:7").label("Approve").style(ButtonStyle::Success),
        CreateButton::new("deny:7").label("Deny").style(ButtonStyle::Danger),
    ])]
}

fn code_of(result: Result<impl std::fmt::Debug, serenity::Error>) -> (u16, isize) {
    match result {
        Err(serenity::Error::Http(HttpError::UnsuccessfulRequest(response))) => {
            (response.status_code.as_u16(), response.error.code)
        }
        other => panic!("expected an unsuccessful request, got {other:?}"),
    }
}

fn guild_fake_setup(fake: &FakeDiscord) {
    fake.add_guild(GUILD, &[]);
    fake.add_channel(events::text_channel(GUILD, CHANNEL));
}

#[tokio::test]
async fn buttons_round_trip_and_are_recorded() {
    let fake = FakeDiscord::start().await;
    let http = http(&fake);
    let message = CreateMessage::new().content("Run it?").components(approve_deny());
    let sent = ChannelId::new(CHANNEL).send_message(&http, message).await.expect("create");
    assert_eq!(sent.components.len(), 1);
    assert_eq!(sent.components[0].components.len(), 2);
    let approve = ComponentButton {
        style: 3,
        label: Some("Approve".into()),
        custom_id: Some("approve:7".into()),
        url: None,
        disabled: false,
    };
    assert_eq!(fake.buttons(CHANNEL, sent.id.get())[0][0], approve);
    assert_eq!(fake.sent_messages()[0].components[0]["components"][1]["custom_id"], "deny:7");

    let edit = serenity::all::EditMessage::new().components(vec![]);
    ChannelId::new(CHANNEL).edit_message(&http, sent.id, edit).await.expect("edit removes the buttons");
    assert!(fake.buttons(CHANNEL, sent.id.get()).is_empty());
}

#[tokio::test]
async fn invalid_components_get_invalid_form_body_with_the_path() {
    let fake = FakeDiscord::start().await;
    let http = http(&fake);
    let long = CreateActionRow::Buttons(vec![CreateButton::new("x".repeat(101)).label("x")]);
    let result =
        ChannelId::new(CHANNEL).send_message(&http, CreateMessage::new().content("x").components(vec![long])).await;
    let Err(serenity::Error::Http(HttpError::UnsuccessfulRequest(response))) = result else {
        panic!("expected a 400, got {result:?}")
    };
    assert_eq!(
        (response.status_code.as_u16(), response.error.code, response.error.message.as_str()),
        (400, 50035, "Invalid Form Body")
    );
    let paths: Vec<_> = response.error.errors.iter().map(|error| (error.path.as_str(), error.code.as_str())).collect();
    assert_eq!(paths, [("components.0.components.0.custom_id", "BASE_TYPE_BAD_LENGTH")]);
    assert!(fake.sent_messages().is_empty());
}

#[tokio::test]
async fn a_guild_press_reaches_serenity_and_update_message_answers_it_once() {
    let fake = FakeDiscord::start().await;
    guild_fake_setup(&fake);
    let mut bot = Bot::start(&fake).await;
    let sent = bot.ask(CHANNEL).await;
    let pressed = fake.press_button(CHANNEL, sent.id.get(), OWNER, "approve:7");
    let interaction = bot.next_interaction().await;
    assert_eq!((interaction.id.get(), interaction.token.as_str()), (pressed.id, pressed.token.as_str()));
    assert_eq!(interaction.data.custom_id, "approve:7");
    assert!(matches!(interaction.data.kind, ComponentInteractionDataKind::Button));
    assert_eq!((interaction.guild_id.map(|id| id.get()), interaction.channel_id.get()), (Some(GUILD), CHANNEL));
    assert_eq!(
        (interaction.user.id.get(), interaction.member.as_ref().map(|member| member.user.id.get())),
        (OWNER, Some(OWNER))
    );
    assert_eq!((interaction.message.id, interaction.message.components.len()), (sent.id, 1));
    assert_eq!(fake.unacknowledged_interactions(), [pressed.id]);

    let update = CreateInteractionResponseMessage::new().content("Approved").components(vec![]);
    interaction.create_response(&bot.http, CreateInteractionResponse::UpdateMessage(update)).await.expect("in time");
    fake.assert_interactions_acknowledged();
    let message = fake.message(CHANNEL, sent.id.get()).expect("the pressed message");
    assert_eq!((message["content"].clone(), fake.buttons(CHANNEL, sent.id.get())), (json!("Approved"), Vec::new()));
    assert_eq!(fake.interaction_callbacks()[0].kind, 7);
    let again = interaction.create_response(&bot.http, CreateInteractionResponse::Acknowledge).await;
    assert_eq!(code_of(again), (400, 40060));
    bot.stop().await;
}

#[tokio::test]
async fn a_deferred_dm_press_is_followed_up_through_the_webhook() {
    let fake = FakeDiscord::start().await;
    let mut bot = Bot::start(&fake).await;
    let sent = bot.ask(DM_CHANNEL).await;
    fake.press_button(DM_CHANNEL, sent.id.get(), OWNER, "deny:7");
    let interaction = bot.next_interaction().await;
    assert_eq!((interaction.guild_id, interaction.member.is_none(), interaction.user.id.get()), (None, true, OWNER));
    // Before any response the interaction's webhook does not exist yet.
    let early = interaction.create_followup(&bot.http, CreateInteractionResponseFollowup::new().content("x")).await;
    assert_eq!(code_of(early), (404, 10015));

    let defer = CreateInteractionResponse::Defer(CreateInteractionResponseMessage::new());
    interaction.create_response(&bot.http, defer).await.expect("deferred in time");
    let edited = interaction
        .edit_response(&bot.http, EditInteractionResponse::new().content("Denied"))
        .await
        .expect("edit @original");
    assert_eq!((edited.content.as_str(), edited.flags.map(|flags| flags.bits())), ("Denied", Some(0)));
    let followup = CreateInteractionResponseFollowup::new().content("Nothing was run.");
    let more = interaction.create_followup(&bot.http, followup).await.expect("follow-up");
    assert_eq!((more.channel_id.get(), more.content.as_str()), (DM_CHANNEL, "Nothing was run."));
    let fixed = CreateInteractionResponseFollowup::new().content("Nothing was run at all.");
    let fixed = interaction.edit_followup(&bot.http, more.id, fixed).await.expect("edit the follow-up");
    assert_eq!((fixed.id, fixed.content.as_str()), (more.id, "Nothing was run at all."));
    interaction.delete_response(&bot.http).await.expect("delete @original");
    assert_eq!(fake.message(DM_CHANNEL, edited.id.get()), None);
    assert_eq!(fake.calls_to("POST /interactions/{id}/{token}/callback").len(), 1);
    assert_eq!(fake.calls_to("PATCH /webhooks/{id}/{token}/messages/@original").len(), 1);
    assert_eq!(fake.calls_to("POST /webhooks/{id}/{token}").iter().filter(|call| !call.failed).count(), 1);
    bot.stop().await;
}

#[tokio::test]
async fn late_responses_are_unknown_and_expired_tokens_invalid() {
    let fake = FakeDiscord::start().await;
    fake.set_interaction_response_limit(Duration::from_millis(50));
    let mut bot = Bot::start(&fake).await;
    let sent = bot.ask(DM_CHANNEL).await;
    let late = fake.press_button(DM_CHANNEL, sent.id.get(), OWNER, "approve:7");
    let interaction = bot.next_interaction().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let result = interaction.create_response(&bot.http, CreateInteractionResponse::Acknowledge).await;
    assert_eq!(code_of(result), (404, 10062));
    assert_eq!(fake.unacknowledged_interactions(), [late.id]);
    assert!(std::panic::catch_unwind(|| fake.assert_interactions_acknowledged()).is_err());

    fake.set_interaction_response_limit(Duration::from_secs(3));
    fake.set_interaction_token_lifetime(Duration::from_millis(100));
    fake.press_button(DM_CHANNEL, sent.id.get(), OWNER, "deny:7");
    let interaction = bot.next_interaction().await;
    interaction.create_response(&bot.http, CreateInteractionResponse::Acknowledge).await.expect("type 6 in time");
    tokio::time::sleep(Duration::from_millis(150)).await;
    let expired = interaction.edit_response(&bot.http, EditInteractionResponse::new().content("late")).await;
    assert_eq!(code_of(expired), (401, 50027));
    bot.stop().await;
}

#[test]
fn button_interactions_decode_as_serenity_interactions() {
    let message = events::from_bot(events::dm_message(DM_CHANNEL, 1, "x", 9000, "Run it?"));
    let user = events::user(OWNER, "owner");
    for guild_id in [Some(GUILD), None] {
        let payload: Value =
            events::button_interaction(8_000_001, "tok", guild_id, message.clone(), user.clone(), "a:1");
        let decoded: Interaction = serde_json::from_value(payload).expect("an Interaction");
        let Interaction::Component(component) = decoded else { panic!("expected a component interaction") };
        assert_eq!((component.user.id.get(), component.guild_id.map(|id| id.get())), (OWNER, guild_id));
        assert_eq!((component.data.custom_id.as_str(), component.version), ("a:1", 1));
    }
}
