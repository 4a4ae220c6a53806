//! Slash commands of the fake Discord, driven by serenity 0.12.5's real client: tables put
//! with serenity's builders are listed back, Discord's rules refuse bad tables and unknown
//! servers, an invocation decodes as serenity's `CommandInteraction`, and it takes the
//! responses a command takes, in time.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use serenity::all::{
    ApplicationId, Command, CommandInteraction, CommandOptionType, CreateCommand, CreateCommandOption,
    CreateInteractionResponse, CreateInteractionResponseMessage, EditInteractionResponse, GuildId, Http, HttpBuilder,
    Interaction,
};
use serenity::http::HttpError;
use switchboard_testkit::fake_discord::{FakeDiscord, events};

const GUILD: u64 = 100;
const CHANNEL: u64 = 200;
const DM_CHANNEL: u64 = 300;
const ALICE: u64 = 42;

fn http(fake: &FakeDiscord) -> Arc<Http> {
    let http = HttpBuilder::new(FakeDiscord::TOKEN).proxy(fake.url()).ratelimiter_disabled(true).build();
    http.set_application_id(ApplicationId::new(fake.bot().application_id));
    Arc::new(http)
}

fn level_command() -> CreateCommand {
    let person = CreateCommandOption::new(CommandOptionType::String, "person", "who").required(true);
    let level = CreateCommandOption::new(CommandOptionType::String, "level", "what level")
        .required(true)
        .add_string_choice("user", "user")
        .add_string_choice("admin", "admin");
    CreateCommand::new("level").description("set a level").add_option(person).add_option(level)
}

/// Whether a call was refused with this HTTP status and Discord error code.
fn refused<T>(result: serenity::Result<T>, status: u16, code: isize) -> bool {
    matches!(result, Err(serenity::Error::Http(HttpError::UnsuccessfulRequest(response)))
        if response.status_code.as_u16() == status && response.error.code == code)
}

#[tokio::test]
async fn tables_are_overwritten_listed_and_checked() {
    let fake = FakeDiscord::start().await;
    let http = http(&fake);
    let status = CreateCommand::new("status").description("how things are");
    let put = Command::set_global_commands(&http, vec![status.clone(), level_command()]).await.expect("a valid table");
    assert_eq!(put.len(), 2);
    let listed = fake.application_commands(None);
    assert_eq!(
        listed.iter().map(|command| command["name"].clone()).collect::<Vec<_>>(),
        [json!("status"), json!("level")]
    );
    assert_eq!(listed[1]["options"][1]["choices"][1]["value"], "admin");

    // A second overwrite keeps the id of a command whose name stays, and drops the others.
    let again = Command::set_global_commands(&http, vec![status]).await.expect("a valid table");
    assert_eq!((again.len(), again[0].id), (1, put[0].id));
    assert_eq!(Command::get_global_commands(&http).await.expect("a listing").len(), 1);

    let shouting = CreateCommand::new("Status").description("how things are");
    assert!(refused(Command::set_global_commands(&http, vec![shouting]).await, 400, 50035));
    let stranger = GuildId::new(999);
    assert!(refused(stranger.set_commands(&http, vec![level_command()]).await, 403, 50001));
    fake.add_guild(GUILD, &[]);
    GuildId::new(GUILD).set_commands(&http, vec![level_command()]).await.expect("the bot is in the guild");
    assert_eq!(fake.application_commands(Some(GUILD))[0]["guild_id"], json!(GUILD.to_string()));
    let calls = fake.calls_to("PUT /applications/{id}/guilds/{id}/commands");
    assert_eq!(calls.iter().map(|call| call.status).collect::<Vec<_>>(), [403, 200]);
}

#[test]
fn command_interactions_decode_as_serenity_interactions() {
    let command = json!({ "id": "4000001", "name": "level", "type": 1, "guild_id": GUILD.to_string() });
    let options = vec![json!({ "name": "person", "type": 3, "value": "Ann" })];
    for guild_id in [Some(GUILD), None] {
        let user = events::user(ALICE, "alice");
        let payload =
            events::command_interaction((8_000_001, "tok"), guild_id, CHANNEL, user, &command, options.clone());
        let decoded: Interaction = serde_json::from_value(payload).expect("an Interaction");
        let Interaction::Command(invoked) = decoded else { panic!("expected a command interaction") };
        assert_eq!((invoked.user.id.get(), invoked.guild_id.map(|id| id.get())), (ALICE, guild_id));
        assert_eq!((invoked.data.name.as_str(), invoked.data.options[0].value.as_str()), ("level", Some("Ann")));
    }
}

/// An interaction payload decoded as serenity's client decodes it.
fn decoded(payload: Value) -> CommandInteraction {
    match serde_json::from_value(payload) {
        Ok(Interaction::Command(command)) => command,
        other => panic!("expected a command interaction: {other:?}"),
    }
}

#[tokio::test]
async fn an_invocation_is_answered_once_in_time_or_deferred_and_edited() {
    let fake = FakeDiscord::start().await;
    let http = http(&fake);
    let status = CreateCommand::new("status").description("how things are");
    Command::set_global_commands(&http, vec![status]).await.expect("a valid table");

    let first = fake.run_command(DM_CHANNEL, ALICE, "status", &[]);
    let mut command = decoded(events::command_interaction(
        (first.id, &first.token),
        None,
        DM_CHANNEL,
        events::user(ALICE, "alice"),
        &fake.application_commands(None)[0],
        Vec::new(),
    ));
    let update = CreateInteractionResponse::Acknowledge;
    assert!(refused(command.create_response(&http, update).await, 400, 50035), "no message to update");
    let answer = CreateInteractionResponse::Message(CreateInteractionResponseMessage::new().content("all fine"));
    command.create_response(&http, answer.clone()).await.expect("type 4 in time");
    assert!(refused(command.create_response(&http, answer).await, 400, 40060));
    assert_eq!(fake.sent_messages().last().map(|sent| sent.content.clone()).as_deref(), Some("all fine"));

    let second = fake.run_command(DM_CHANNEL, ALICE, "status", &[]);
    (command.id, command.token) = (second.id.into(), second.token);
    command.defer(&http).await.expect("type 5 in time");
    command.edit_response(&http, EditInteractionResponse::new().content("later")).await.expect("the edit");
    assert_eq!(fake.interaction_callbacks().iter().map(|callback| callback.kind).collect::<Vec<_>>(), [4, 5]);

    fake.set_interaction_response_limit(Duration::from_millis(100));
    let late = fake.run_command(DM_CHANNEL, ALICE, "status", &[]);
    tokio::time::sleep(Duration::from_millis(200)).await;
    (command.id, command.token) = (late.id.into(), late.token);
    assert!(refused(command.defer(&http).await, 404, 10062));
}

#[tokio::test]
#[should_panic(expected = "no /status is registered for guild 100")]
async fn a_command_offered_only_in_dms_cannot_be_used_in_a_server() {
    let fake = FakeDiscord::start().await;
    fake.add_guild(GUILD, &[]);
    fake.add_channel(events::text_channel(GUILD, CHANNEL));
    let dms_only = json!([{ "name": "status", "description": "how things are", "contexts": [1] }]);
    let http = http(&fake);
    http.create_global_commands(&dms_only).await.expect("a valid table");
    fake.run_command(CHANNEL, ALICE, "status", &[]);
}
