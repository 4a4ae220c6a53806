//! `switchboard run` with the Matrix channel logged in to a real Synapse homeserver, and people
//! on it with a real client (end-to-end encryption included): direct rooms, pairing, rooms of
//! several people, and restarts that answer nothing twice.

use std::time::Duration;

use crate::support::{Daemon, Launch, run_to_exit};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};
use switchboard_testkit::matrix_person::Person;
use switchboard_testkit::synapse::{Account, Synapse};

/// A homeserver with the bot's account and two people, Alice (the owner) and Bob.
struct World {
    synapse: Synapse,
    bot: Account,
    alice: Account,
    bob: Account,
}

/// The world, or `None` (the test skips) where Synapse is not installed outside CI.
async fn world() -> Option<World> {
    let python = match Synapse::python() {
        Ok(python) => python,
        Err(reason) => {
            eprintln!("skipped: {reason}");
            return None;
        }
    };
    let synapse = Synapse::start(&python).await;
    let bot = synapse.register("bot", "bot-password").await;
    let alice = synapse.register("alice", "alice-password").await;
    let bob = synapse.register("bob", "bob-password").await;
    Some(World { synapse, bot, alice, bob })
}

fn matrix<'a>(launch: Launch<'a>, world: &World) -> Launch<'a> {
    launch
        .env("MATRIX_HOMESERVER", &world.synapse.url())
        .env("MATRIX_USER", &world.bot.user_id)
        .env("MATRIX_PASSWORD", &world.bot.password)
        .env("SWITCHBOARD_USERS__OWNERS", &format!("[\"matrix:{}\"]", world.alice.user_id))
}

async fn started(dir: &std::path::Path, world: &World, llm: &FakeLlm) -> Daemon {
    let mut daemon = matrix(Launch::new(dir, "mx", &["run"]).llm(&llm.base_url()), world).spawn();
    daemon.wait_healthy().await;
    daemon.wait_for_log("Matrix connected").await;
    daemon
}

const WITHIN: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owners_encrypted_direct_room_is_answered() {
    let Some(world) = world().await else { return };
    let llm = FakeLlm::start().await;
    llm.push(Scripted::Text("**Hello** Alice".into()));
    let dir = tempfile::tempdir().unwrap();
    let daemon = started(dir.path(), &world, &llm).await;
    let alice = Person::login(&world.synapse.url(), &world.alice).await;
    let room = alice.open_dm(&world.bot.id()).await;
    assert!(room.latest_encryption_state().await.unwrap().is_encrypted(), "Element's DMs are encrypted");
    alice.say(&room, "hi there").await;
    let bot_id = world.bot.id();
    let answer = alice.next_from(&room, &bot_id, 0, WITHIN).await;
    assert!(answer.encrypted, "the reply is encrypted too: {answer:?}\n{}", daemon.logs());
    assert_eq!(answer.body, "**Hello** Alice");
    assert_eq!(answer.html.as_deref(), Some("<p><strong>Hello</strong> Alice</p>"));
    let request = llm.requests().last().unwrap().to_string();
    assert!(request.contains("hi there"), "{request}");
    let (status, stderr, stdout) = run_to_exit(dir.path(), &["runs"], &[]);
    assert!(status.success(), "{stderr}");
    assert!(stdout.contains(&format!("matrix:{}", room.room_id())), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strangers_direct_room_gets_a_pairing_code() {
    let Some(world) = world().await else { return };
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = started(dir.path(), &world, &llm).await;
    let bob = Person::login(&world.synapse.url(), &world.bob).await;
    let room = bob.open_dm(&world.bot.id()).await;
    bob.say(&room, "hello, who are you?").await;
    let bot_id = world.bot.id();
    let answer = bob.next_from(&room, &bot_id, 0, WITHIN).await;
    assert!(answer.body.contains("code"), "{answer:?}\n{}", daemon.logs());
    assert!(llm.requests().is_empty(), "a stranger reaches no model");
    let (status, stderr, stdout) = run_to_exit(dir.path(), &["pairing", "list", "matrix"], &[]);
    assert!(status.success(), "{stderr}");
    assert!(stdout.contains(&world.bob.user_id), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_room_of_three_only_mentions_are_answered_with_the_speakers_named() {
    let Some(world) = world().await else { return };
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = started(dir.path(), &world, &llm).await;
    let alice = Person::login(&world.synapse.url(), &world.alice).await;
    let bob = Person::login(&world.synapse.url(), &world.bob).await;
    let bot_id = world.bot.id();
    let room = alice.open_group(&[&bot_id, &bob.user_id()]).await;
    bob.join(room.room_id()).await;
    alice.wait_for_member(&room, &bot_id).await;
    let bob_room = bob.client.get_room(room.room_id()).unwrap();
    bob.say(&bob_room, "I would like pasta tonight").await;
    alice.say(&room, "and I would like rice").await;
    alice.say_to(&room, &bot_id, "bot: what do we each want?").await;
    let answer = alice.next_from(&room, &bot_id, 0, WITHIN).await;
    assert!(answer.body.starts_with("echo:"), "{answer:?}\n{}", daemon.logs());
    let requests = llm.requests();
    assert_eq!(requests.len(), 1, "only the mention is answered: {requests:#?}\n{}", daemon.logs());
    let request = requests[0].to_string();
    assert!(request.contains("pasta") && request.contains("rice"), "the room's talk is context: {request}");
    assert!(request.contains("bob"), "the speakers are named: {request}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_answers_what_came_while_down_and_nothing_twice() {
    let Some(world) = world().await else { return };
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = started(dir.path(), &world, &llm).await;
    let alice = Person::login(&world.synapse.url(), &world.alice).await;
    let bot_id = world.bot.id();
    let room = alice.open_dm(&bot_id).await;
    alice.say(&room, "one").await;
    assert_eq!(alice.next_from(&room, &bot_id, 0, WITHIN).await.body, "echo: one");
    daemon.signal("TERM");
    daemon.wait_exit(Duration::from_secs(20)).await;
    alice.say(&room, "two").await;
    let mut daemon = started(dir.path(), &world, &llm).await;
    assert_eq!(alice.next_from(&room, &bot_id, 1, WITHIN).await.body, "echo: two", "{}", daemon.logs());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let from_bot = alice.seen().iter().filter(|seen| seen.sender == bot_id).count();
    assert_eq!(from_bot, 2, "{:#?}", alice.seen());
    assert_eq!(llm.requests().len(), 2, "each message ran once");
    daemon.signal("TERM");
    daemon.wait_exit(Duration::from_secs(20)).await;
}
