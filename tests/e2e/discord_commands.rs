//! Slash commands on Discord, through the real daemon and the fake Discord: the chat commands
//! registered at start (and not again on a restart with the same table; never with `off`),
//! invocations answered within Discord's 3 s with what the typed command answers, the owner's
//! commands refused to others as when typed, a slow command acknowledged at once and answered
//! later, and the access paths of typed messages: a stranger under the pairing policy gets the
//! pairing answer, and someone not allowed where they are gets a refusal for their eyes only,
//! with nothing reaching the agent or the model.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchboard_testkit::fake_discord::{BOT_ID, Call, FakeDiscord, Interaction, InteractionCallback, events};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};

use sqlx::Connection;

use crate::support::{Daemon, Launch};

const GUILD: u64 = 100;
const CHANNEL: u64 = 200;
const ALICE: u64 = 111;
const ALICES_DM: u64 = 300;
const OWNER: u64 = 999;
const OWNERS_DM: u64 = 301;
const MALLORY: u64 = 777;
const MALLORYS_DM: u64 = 302;
const STRANGER: u64 = 555;
const STRANGERS_DM: u64 = 303;
/// A channel of the server outside a `channels` allowlist.
const OTHER_CHANNEL: u64 = 201;
const GLOBAL_PUT: &str = "PUT /applications/{id}/commands";
const WAIT: Duration = Duration::from_secs(20);

/// A daemon with the Discord channel on the fake, a server with one channel, `discord:999` as
/// owner, and Alice and Mallory answered in DMs.
fn bot<'a>(launch: Launch<'a>, llm: &FakeLlm, fake: &FakeDiscord) -> Launch<'a> {
    launch
        .llm(&llm.base_url())
        .env("DISCORD_BOT_TOKEN", FakeDiscord::TOKEN)
        .env("SWITCHBOARD_CHANNELS__DISCORD__PROXY_URL", &fake.url())
        .env("SWITCHBOARD_CHANNELS__DISCORD__ALLOW_FROM", &format!(r#"["{ALICE}", "{MALLORY}"]"#))
        .env("SWITCHBOARD_USERS__OWNERS", &format!(r#"["discord:{OWNER}"]"#))
        .env("SWITCHBOARD_WORKER__DEBOUNCE_MS", "0")
}

fn fake_with_a_server(fake: &FakeDiscord) {
    fake.add_guild(GUILD, &[]);
    fake.add_channel(events::text_channel(GUILD, CHANNEL));
}

/// A healthy daemon whose slash commands are registered.
async fn started(dir: &Path, llm: &FakeLlm, fake: &FakeDiscord, launch: impl FnOnce(Launch) -> Launch) -> Daemon {
    let mut daemon = launch(bot(Launch::new(dir, "dc-slash", &["run"]), llm, fake)).spawn();
    daemon.wait_healthy().await;
    fake.wait_connected(1, Duration::from_secs(10)).await;
    fake.wait_for_calls(GLOBAL_PUT, 1, WAIT).await;
    daemon
}

/// The initial response to `interaction`, once there is one.
async fn response_to(fake: &FakeDiscord, interaction: &Interaction) -> InteractionCallback {
    let deadline = Instant::now() + WAIT;
    loop {
        let callbacks = fake.interaction_callbacks();
        if let Some(found) = callbacks.into_iter().find(|found| found.interaction_id == interaction.id) {
            return found;
        }
        assert!(Instant::now() < deadline, "never answered: {:#?}", fake.calls());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs `/name` and returns its initial response, asserting it came within Discord's 3 s.
async fn run(fake: &FakeDiscord, channel: u64, user: u64, name: &str, options: &[(&str, &str)]) -> InteractionCallback {
    let asked = Instant::now();
    let interaction = fake.run_command(channel, user, name, options);
    let response = response_to(fake, &interaction).await;
    assert!(response.at.duration_since(asked) < Duration::from_secs(3), "/{name} answered late: {response:?}");
    response
}

fn names(table: &[Value]) -> Vec<&str> {
    table.iter().filter_map(|command| command["name"].as_str()).collect()
}

fn find<'t>(table: &'t [Value], name: &str) -> &'t Value {
    table.iter().find(|command| command["name"] == name).unwrap_or_else(|| panic!("no /{name}: {table:#?}"))
}

fn content(response: &InteractionCallback) -> &str {
    response.data["content"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn slash_commands_are_registered_at_start_and_not_again_after_a_restart() {
    let (llm, fake) = (FakeLlm::start().await, FakeDiscord::start().await);
    fake_with_a_server(&fake);
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = started(dir.path(), &llm, &fake, |launch| launch).await;

    let table = fake.application_commands(None);
    let everyones = ["help", "new", "reset", "stop", "compact", "status", "usage", "queue", "model", "verbose"];
    let owners = ["pending", "approve", "deny", "users", "level", "cron", "spend"];
    assert_eq!(names(&table), everyones.iter().chain(&owners).copied().collect::<Vec<_>>());
    assert_eq!(find(&table, "status")["contexts"], json!([0, 1]), "in servers and DMs");
    assert_eq!(find(&table, "pending")["contexts"], json!([1]), "the owner's in DMs only");
    let level = &find(&table, "level")["options"];
    assert_eq!((level[0]["name"].clone(), level[0]["required"].clone()), (json!("person"), json!(true)));
    let choices: Vec<&Value> = level[1]["choices"].as_array().unwrap().iter().map(|choice| &choice["value"]).collect();
    assert_eq!(choices, [&json!("guest"), &json!("user"), &json!("admin"), &json!("owner")]);
    assert!(fake.application_commands(Some(GUILD)).is_empty(), "no server table next to the global one");

    daemon.signal("TERM");
    daemon.wait_exit(WAIT).await;
    let listed_before = fake.calls_to("GET /applications/{id}/commands").len();
    let mut again = bot(Launch::new(dir.path(), "dc-slash-again", &["run"]), &llm, &fake).spawn();
    again.wait_healthy().await;
    fake.wait_for_calls("GET /applications/{id}/commands", listed_before + 1, WAIT).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(fake.calls_to(GLOBAL_PUT).len(), 1, "the same table is not put again:\n{}", again.logs());
}

#[tokio::test]
async fn in_guilds_mode_servers_get_their_own_table_and_dms_the_global_one() {
    let (llm, fake) = (FakeLlm::start().await, FakeDiscord::start().await);
    fake_with_a_server(&fake);
    let dir = tempfile::tempdir().unwrap();
    let _daemon = started(dir.path(), &llm, &fake, |launch| {
        launch
            .env("SWITCHBOARD_CHANNELS__DISCORD__SLASH_COMMANDS", "guilds")
            .env("SWITCHBOARD_CHANNELS__DISCORD__GUILDS", &format!(r#"["{GUILD}"]"#))
    })
    .await;
    fake.wait_for_calls("PUT /applications/{id}/guilds/{id}/commands", 1, WAIT).await;
    let server = fake.application_commands(Some(GUILD));
    assert!(names(&server).contains(&"status") && !names(&server).contains(&"pending"), "{server:#?}");
    let global = fake.application_commands(None);
    assert!(global.iter().all(|command| command["contexts"] == json!([1])), "DMs only: {global:#?}");
    let response = run(&fake, CHANNEL, ALICE, "status", &[]).await;
    assert!(content(&response).starts_with("Model: "), "{response:?}");
}

/// In a server channel no mention is needed; the answer is the typed command's (written there
/// with a mention), and personal answers are shown to the person alone.
#[tokio::test]
async fn status_as_a_slash_command_is_answered_at_once_with_the_typed_answer() {
    let (llm, fake) = (FakeLlm::start().await, FakeDiscord::start().await);
    fake_with_a_server(&fake);
    let dir = tempfile::tempdir().unwrap();
    let daemon = started(dir.path(), &llm, &fake, |launch| launch).await;

    let typed = events::guild_message(GUILD, CHANNEL, ALICE, "alice", 10, &format!("/status <@{BOT_ID}>"));
    fake.send_message_create(events::mentioning_user(typed, BOT_ID));
    fake.wait_for_calls("POST /channels/{id}/messages", 1, WAIT).await;
    let typed_answer = fake.sent_messages()[0].content.clone();
    assert!(typed_answer.starts_with("Model: "), "{typed_answer}");

    let status = run(&fake, CHANNEL, ALICE, "status", &[]).await;
    assert_eq!((status.kind, content(&status)), (4, typed_answer.as_str()), "{}", daemon.logs());
    assert!(status.data.get("flags").is_none(), "the channel's status is for everyone: {status:?}");
    let usage = run(&fake, CHANNEL, ALICE, "usage", &[]).await;
    assert_eq!((usage.kind, usage.data["flags"].clone()), (4, json!(64)), "for Alice alone: {usage:?}");
    assert!(content(&usage).contains("guest"), "{usage:?}");
    assert_eq!(fake.calls_to("POST /channels/{id}/messages").len(), 1, "answers go through the interactions");
    fake.assert_interactions_acknowledged();
}

#[tokio::test]
async fn an_owner_command_by_someone_else_is_refused_as_when_typed() {
    let (llm, fake) = (FakeLlm::start().await, FakeDiscord::start().await);
    let dir = tempfile::tempdir().unwrap();
    let daemon = started(dir.path(), &llm, &fake, |launch| launch).await;

    let refused = run(&fake, MALLORYS_DM, MALLORY, "pending", &[]).await;
    assert_eq!(content(&refused), "Unknown command /pending. /help lists the commands.", "{}", daemon.logs());
    let level = run(&fake, MALLORYS_DM, MALLORY, "level", &[("person", "Mallory"), ("level", "owner")]).await;
    assert_eq!(content(&level), "Unknown command /level. /help lists the commands.");
    let owners = run(&fake, OWNERS_DM, OWNER, "pending", &[]).await;
    assert_eq!(content(&owners), "Nothing waits for you.");
}

/// `/compact` calls the model: acknowledged at once (Discord shows "thinking…"), its answer
/// edits that message when it comes, after Discord's 3 s.
#[tokio::test]
async fn a_slow_command_is_deferred_then_its_answer_follows() {
    let (llm, fake) = (FakeLlm::start().await, FakeDiscord::start().await);
    let dir = tempfile::tempdir().unwrap();
    let _daemon =
        started(dir.path(), &llm, &fake, |launch| launch.env("SWITCHBOARD_COMPACTION__KEEP_RECENT_MESSAGES", "2"))
            .await;
    for (n, text) in [(1, "one"), (2, "two")] {
        fake.send_message_create(events::dm_message(ALICES_DM, ALICE, "alice", n, text));
        fake.wait_for_calls("POST /channels/{id}/messages", n as usize, WAIT).await;
    }
    let slow = Scripted::Delay(Duration::from_millis(3500), Box::new(Scripted::Text("They said one.".into())));
    llm.push(slow.clone());
    llm.push(slow);

    let asked = Instant::now();
    let compact = run(&fake, ALICES_DM, ALICE, "compact", &[]).await;
    assert_eq!(compact.kind, 5, "deferred: {compact:?}");
    let edits = fake.wait_for_calls("PATCH /webhooks/{id}/{token}/messages/@original", 1, WAIT).await;
    let edit: &Call = &edits[0];
    assert!(asked.elapsed() > Duration::from_secs(3), "the answer came after Discord's 3 s");
    assert_eq!(edit.status, 200, "{edit:?}");
    let said = edit.body["content"].as_str().unwrap_or_default();
    assert!(said.starts_with("Compacted: "), "{said}");
    assert_eq!(fake.calls_to("POST /channels/{id}/messages").len(), 2, "only the two echoes went to the channel");
}

/// The sessions of the runs the worker recorded: every command that reaches it has one (a
/// command's run is stored before it is answered).
async fn sessions_with_runs(dir: &Path) -> Vec<String> {
    let url = format!("sqlite://{}", dir.join("switchboard.db").display());
    let mut connection = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let rows: Vec<(String,)> = sqlx::query_as("SELECT session_key FROM runs").fetch_all(&mut connection).await.unwrap();
    connection.close().await.unwrap();
    rows.into_iter().map(|(key,)| key).collect()
}

#[tokio::test]
async fn a_strangers_command_under_the_pairing_policy_gets_the_pairing_answer() {
    let (llm, fake) = (FakeLlm::start().await, FakeDiscord::start().await);
    let dir = tempfile::tempdir().unwrap();
    let daemon = started(dir.path(), &llm, &fake, |launch| launch).await;

    let first = run(&fake, STRANGERS_DM, STRANGER, "status", &[]).await;
    assert_eq!(first.kind, 4, "{first:?}");
    assert!(content(&first).contains("Your pairing code: "), "{first:?}\n{}", daemon.logs());
    let again = run(&fake, STRANGERS_DM, STRANGER, "status", &[]).await;
    assert_eq!(content(&again), "Your request to talk to me is waiting for the owner's approval.");
    let posted = fake.calls_to("POST /channels/{id}/messages");
    let to_the_stranger = format!("/channels/{STRANGERS_DM}/messages");
    assert!(posted.iter().all(|call| call.path != to_the_stranger), "answered through the interactions: {posted:#?}");
    // Alice's command is answered by the worker, which records a run; the stranger's never got there.
    let alices = run(&fake, ALICES_DM, ALICE, "status", &[]).await;
    assert!(content(&alices).starts_with("Model: "), "{alices:?}");
    let runs = sessions_with_runs(dir.path()).await;
    assert_eq!(runs, [format!("discord:{ALICES_DM}")]);
    assert!(llm.requests().is_empty(), "no model call: {:#?}", llm.requests());
}

/// Under the `allowlist` policy with a `channels` allowlist: a person not on `allow_from`, and
/// a channel not on `channels`, get the refusal shown to that person alone, before any
/// deferral (`/compact` is slow and would call the model), and nothing goes further.
#[tokio::test]
async fn a_command_where_the_bot_does_not_answer_is_refused_to_the_person_alone() {
    let (llm, fake) = (FakeLlm::start().await, FakeDiscord::start().await);
    fake_with_a_server(&fake);
    fake.add_channel(events::text_channel(GUILD, OTHER_CHANNEL));
    let dir = tempfile::tempdir().unwrap();
    let daemon = started(dir.path(), &llm, &fake, |launch| {
        launch
            .env("SWITCHBOARD_CHANNELS__DISCORD__DM_POLICY", "allowlist")
            .env("SWITCHBOARD_CHANNELS__DISCORD__CHANNELS", &format!(r#"["{CHANNEL}"]"#))
    })
    .await;

    let strangers = run(&fake, STRANGERS_DM, STRANGER, "compact", &[]).await;
    let elsewhere = run(&fake, OTHER_CHANNEL, ALICE, "compact", &[]).await;
    for refused in [&strangers, &elsewhere] {
        let shown = (refused.kind, content(refused), refused.data["flags"].clone());
        assert_eq!(shown, (4, "I don't take commands here.", json!(64)), "{}", daemon.logs());
    }
    assert_eq!(fake.interaction_callbacks().len(), 2, "one answer each, no deferral first");

    // Alice's /status where the bot answers reaches the worker; the refused ones did not.
    let allowed = run(&fake, CHANNEL, ALICE, "status", &[]).await;
    assert!(content(&allowed).starts_with("Model: "), "{allowed:?}");
    assert_eq!(sessions_with_runs(dir.path()).await, [format!("discord:{CHANNEL}")]);
    assert!(llm.requests().is_empty(), "no model call: {:#?}", llm.requests());
    let posted = fake.calls_to("POST /channels/{id}/messages");
    assert!(posted.is_empty(), "nothing posted: {posted:#?}");
}

fn slash_off(launch: Launch<'_>) -> Launch<'_> {
    launch.env("SWITCHBOARD_CHANNELS__DISCORD__SLASH_COMMANDS", "off")
}

/// `off` registers nothing on a new application, and empties a table registered before.
#[tokio::test]
async fn with_slash_commands_off_no_table_is_put() {
    let (llm, fake) = (FakeLlm::start().await, FakeDiscord::start().await);
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = slash_off(bot(Launch::new(dir.path(), "dc-slash-off", &["run"]), &llm, &fake)).spawn();
    daemon.wait_healthy().await;
    fake.wait_for_calls("GET /applications/{id}/commands", 1, WAIT).await;
    daemon.wait_for_log("the slash commands are registered already").await;
    assert!(fake.calls_to(GLOBAL_PUT).is_empty(), "{:#?}", fake.calls());
    assert!(fake.application_commands(None).is_empty());
    daemon.signal("TERM");
    daemon.wait_exit(WAIT).await;

    // A table from an earlier `global` run is emptied once.
    let mut global = bot(Launch::new(dir.path(), "dc-slash-global", &["run"]), &llm, &fake).spawn();
    global.wait_healthy().await;
    fake.wait_for_calls(GLOBAL_PUT, 1, WAIT).await;
    global.signal("TERM");
    global.wait_exit(WAIT).await;
    let _again = slash_off(bot(Launch::new(dir.path(), "dc-slash-off-again", &["run"]), &llm, &fake)).spawn();
    let puts = fake.wait_for_calls(GLOBAL_PUT, 2, WAIT).await;
    assert_eq!(puts[1].body, json!([]), "{:#?}", puts[1]);
    assert!(fake.application_commands(None).is_empty());
}
