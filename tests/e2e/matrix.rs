//! `switchboard run` with the Matrix channel logged in to a real Synapse homeserver, and people
//! on it with a real client (end-to-end encryption included): direct rooms, pairing, rooms of
//! several people, and restarts that answer nothing twice.

use std::time::Duration;

mod buttons;
mod shapes;

use crate::support::{Daemon, Launch, run_to_exit};
use switchboard_testkit::fake_llm::{FakeLlm, Quirks, Scripted};
use switchboard_testkit::lossy_proxy::LossyProxy;
use switchboard_testkit::matrix_person::matrix_sdk::Room;
use switchboard_testkit::matrix_person::{CollectStrategy, Person};
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
    world_limiting_messages("{per_second: 10000, burst_count: 10000}").await
}

/// The same, on a homeserver that limits each user's messages as `rc_message` says.
async fn world_limiting_messages(rc_message: &str) -> Option<World> {
    let python = match Synapse::python() {
        Ok(python) => python,
        Err(reason) => {
            eprintln!("skipped: {reason}");
            return None;
        }
    };
    let synapse = Synapse::start_with_message_limit(&python, rc_message).await;
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
    start(matrix(Launch::new(dir, "mx", &["run"]).llm(&llm.base_url()), world)).await
}

/// `launch` (of [`matrix`]) started, once it is healthy and connected.
async fn start(launch: Launch<'_>) -> Daemon {
    let mut daemon = launch.spawn();
    daemon.wait_healthy().await;
    daemon.wait_for_log("Matrix connected").await;
    daemon
}

/// Alice's room with the bot and Bob, everyone joined: Alice's client, Bob's, and the room as
/// each of them sees it.
async fn room_of_three(world: &World) -> (Person, Person, Room, Room) {
    let alice = Person::login(&world.synapse.url(), &world.alice).await;
    let bob = Person::login(&world.synapse.url(), &world.bob).await;
    let bot_id = world.bot.id();
    let room = alice.open_group(&[&bot_id, &bob.user_id()]).await;
    bob.join(room.room_id()).await;
    alice.wait_for_member(&room, &bot_id).await;
    let bob_room = bob.client.get_room(room.room_id()).unwrap_or_else(|| panic!("Bob is in {}", room.room_id()));
    (alice, bob, room, bob_room)
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
    // matrix-sdk's own lines (one per sync, per event sent, a key-backup warning per sync)
    // stay out of an `info` log.
    let logs = daemon.logs();
    let chatty: Vec<&str> = logs
        .lines()
        .filter(|line| line.contains("matrix_sdk") && (line.contains(" INFO ") || line.contains("backup room keys")))
        .collect();
    assert!(chatty.is_empty(), "{chatty:#?}");
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
    let (alice, bob, room, bob_room) = room_of_three(&world).await;
    let bot_id = world.bot.id();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_checks_the_homeserver_the_session_and_a_sync() {
    let Some(world) = world().await else { return };
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("MATRIX_HOMESERVER", world.synapse.url()),
        ("MATRIX_USER", world.bot.user_id.clone()),
        ("MATRIX_PASSWORD", world.bot.password.clone()),
        ("OPENAI_BASE_URL", llm.base_url()),
        ("OPENAI_API_KEY", "sk-test".to_owned()),
        ("SWITCHBOARD_MODEL", "fake-model".to_owned()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(key, value)| (*key, value.as_str())).collect();
    let matrix_line = |stdout: &str| stdout.lines().find(|line| line.contains("matrix")).unwrap_or_default().to_owned();
    let (_, stderr, stdout) = run_to_exit(dir.path(), &["doctor"], &env);
    let line = matrix_line(&stdout);
    assert!(line.contains("not logged in yet"), "{line}\n{stdout}\n{stderr}");
    let mut daemon = started(dir.path(), &world, &llm).await;
    daemon.signal("TERM");
    daemon.wait_exit(Duration::from_secs(20)).await;
    let (_, stderr, stdout) = run_to_exit(dir.path(), &["doctor"], &env);
    let line = matrix_line(&stdout);
    assert!(line.contains("@bot:localhost (device ") && line.contains("sync answers"), "{line}\n{stdout}\n{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_room_answers_reply_to_their_message_and_a_thread_is_answered_in_it() {
    let Some(world) = world().await else { return };
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = started(dir.path(), &world, &llm).await;
    let alice = Person::login(&world.synapse.url(), &world.alice).await;
    let bot_id = world.bot.id();
    let room = alice.open_group(&[&bot_id, &world.bob.id()]).await;
    alice.wait_for_member(&room, &bot_id).await;
    let asked = alice.say_to(&room, &bot_id, "bot: first question").await;
    let answer = alice.next_from(&room, &bot_id, 0, WITHIN).await;
    assert_eq!(answer.body, "echo: bot: first question", "{}", daemon.logs());
    assert_eq!((answer.reply_to.as_ref(), answer.thread.as_ref()), (Some(&asked), None), "a reply to the question");
    let root = alice.say(&room, "Planning the trip").await;
    let in_thread = alice.say_in_thread(&room, &root, &bot_id, "bot: where do we stay?").await;
    let answer = alice.next_from(&room, &bot_id, 1, WITHIN).await;
    assert_eq!(answer.body, "echo: bot: where do we stay?");
    assert_eq!((answer.thread.as_ref(), answer.reply_to.as_ref()), (Some(&root), Some(&in_thread)), "in the thread");
    let (status, stderr, stdout) = run_to_exit(dir.path(), &["runs"], &[]);
    assert!(status.success(), "{stderr}");
    assert!(stdout.contains(&format!(":thread:{root}")), "the thread is a session of its own: {stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_answer_streams_by_edits_and_a_long_one_is_split() {
    let Some(world) = world().await else { return };
    let quirks = Quirks { stream_pace: Some(Duration::from_millis(600)), ..Quirks::default() };
    let llm = FakeLlm::start_with_quirks(quirks).await;
    let answer = "We could cook fried rice with the peas and the eggs, then add kimchi at the end.";
    llm.push(Scripted::Text(answer.into()));
    let paragraph = |n: usize| format!("Paragraph {n}: {}", "a long sentence about the plan. ".repeat(120));
    let long = (0..4).map(paragraph).collect::<Vec<_>>().join("\n\n");
    llm.push(Scripted::Text(long.clone()));
    let dir = tempfile::tempdir().unwrap();
    let daemon = started(dir.path(), &world, &llm).await;
    let alice = Person::login(&world.synapse.url(), &world.alice).await;
    let bot_id = world.bot.id();
    let room = alice.open_dm(&bot_id).await;
    alice.say(&room, "what do we cook?").await;
    let first = alice.next_from(&room, &bot_id, 0, WITHIN).await;
    assert!(answer.starts_with(&first.body) && first.body.len() < answer.len(), "a draft first: {first:?}");
    let deadline = tokio::time::Instant::now() + WITHIN;
    let edited = loop {
        let seen = alice.seen();
        let last = seen.iter().rev().find(|seen| seen.replaces.as_ref() == Some(&first.event_id)).cloned();
        if let Some(last) = last.filter(|last| last.new_body.as_deref() == Some(answer)) {
            break last;
        }
        assert!(tokio::time::Instant::now() < deadline, "never edited into the answer: {seen:#?}\n{}", daemon.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(edited.new_body.as_deref(), Some(answer));
    alice.say(&room, "and tell me the plan in detail").await;
    let shown = |text: &str| text.replace([' ', '\n'], "");
    let deadline = tokio::time::Instant::now() + WITHIN;
    let parts = loop {
        let seen = alice.seen();
        // The bot's messages after the first answer, each with the text of its last edit.
        let parts: Vec<String> = seen
            .iter()
            .filter(|part| part.sender == bot_id && part.replaces.is_none() && part.event_id != first.event_id)
            .map(|part| {
                let edits = seen.iter().rev().filter(|edit| edit.replaces.as_ref() == Some(&part.event_id));
                edits.filter_map(|edit| edit.new_body.clone()).next().unwrap_or_else(|| part.body.clone())
            })
            .collect();
        if shown(&parts.concat()) == shown(&long) {
            break parts;
        }
        assert!(tokio::time::Instant::now() < deadline, "the long answer never showed whole: {parts:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(parts.len() >= 3, "a long answer in several messages: {}", parts.len());
    assert!(parts.iter().all(|part| part.chars().count() <= 6000), "each under the part limit");
}

/// A real 1×1 PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x90, 0x77, 0x53, 0xde, 0x00, 0x00, 0x00, 0x0c, 0x49,
    0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0x00, 0x00, 0x03, 0x01, 0x01, 0x00, 0xc9, 0xfe, 0x92, 0xef,
    0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_image_reaches_a_vision_model() {
    let Some(world) = world().await else { return };
    let llm = FakeLlm::start().await;
    llm.push(Scripted::Text("A single pixel.".into()));
    let dir = tempfile::tempdir().unwrap();
    let launch = Launch::new(dir.path(), "mx", &["run"]).llm(&llm.base_url());
    let daemon = start(matrix(launch, &world).env("SWITCHBOARD_PROVIDER__VISION", "true")).await;
    let alice = Person::login(&world.synapse.url(), &world.alice).await;
    let bot_id = world.bot.id();
    let room = alice.open_dm(&bot_id).await;
    alice.send_image(&room, "pixel.png", PNG).await;
    let answer = alice.next_from(&room, &bot_id, 0, WITHIN).await;
    assert_eq!(answer.body, "A single pixel.", "{}", daemon.logs());
    let request = llm.requests().last().cloned().unwrap();
    let images = switchboard_testkit::fake_llm::sent_images(&request);
    assert_eq!(images.len(), 1, "{request}");
    assert_eq!(images[0].bytes, PNG, "decrypted and saved as sent");
    let saved = std::fs::read_dir(dir.path().join("workspace/media/matrix")).unwrap().count();
    assert_eq!(saved, 1, "saved in the workspace's media directory");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_whose_answer_was_lost_is_not_posted_twice() {
    let Some(world) = world().await else { return };
    let proxy = LossyProxy::start(&world.synapse.url()).await;
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let launch = Launch::new(dir.path(), "mx", &["run"]).llm(&llm.base_url());
    // After `matrix`'s own MATRIX_HOMESERVER: the proxy's address wins.
    let daemon = start(matrix(launch, &world).env("MATRIX_HOMESERVER", &proxy.url())).await;
    let alice = Person::login(&world.synapse.url(), &world.alice).await;
    let bot_id = world.bot.id();
    let room = alice.open_dm(&bot_id).await;
    // First the connection drops after the homeserver made the event, then a proxy answers 504.
    proxy.drop_send_answers(1);
    alice.say(&room, "are you there?").await;
    let answer = alice.next_from(&room, &bot_id, 0, Duration::from_secs(60)).await;
    assert_eq!(answer.body, "echo: are you there?", "{}", daemon.logs());
    assert_eq!(proxy.lost(), 1, "the answer to the send was dropped");
    proxy.lose_send_answers(1);
    alice.say(&room, "still there?").await;
    let answer = alice.next_from(&room, &bot_id, 1, Duration::from_secs(60)).await;
    assert_eq!(answer.body, "echo: still there?", "{}", daemon.logs());
    assert_eq!(proxy.lost(), 2, "the answer to the second send was a 504");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let from_bot: Vec<_> = alice.seen().into_iter().filter(|seen| seen.sender == bot_id).collect();
    assert_eq!(from_bot.len(), 2, "sent again with the same transaction id, posted once: {from_bot:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_homeserver_restarted_mid_conversation_loses_and_doubles_nothing() {
    let Some(mut world) = world().await else { return };
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = started(dir.path(), &world, &llm).await;
    let alice = Person::login(&world.synapse.url(), &world.alice).await;
    let bot_id = world.bot.id();
    let room = alice.open_dm(&bot_id).await;
    alice.say(&room, "before").await;
    assert_eq!(alice.next_from(&room, &bot_id, 0, WITHIN).await.body, "echo: before");
    world.synapse.restart().await;
    alice.say(&room, "after").await;
    let answer = alice.try_next_from(&room, &bot_id, 1, Duration::from_secs(60)).await;
    let answer =
        answer.unwrap_or_else(|| panic!("no answer after the restart: {:#?}\n{}", alice.seen(), daemon.logs()));
    assert_eq!(answer.body, "echo: after", "{}", daemon.logs());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let from_bot = alice.seen().iter().filter(|seen| seen.sender == bot_id).count();
    assert_eq!(from_bot, 2, "{:#?}", alice.seen());
    assert_eq!(llm.requests().len(), 2, "each message ran once");
}

/// Element X shares room keys only with devices their owner signed: the bot signs its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_shares_keys_only_with_signed_devices_is_read() {
    let Some(world) = world().await else { return };
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = started(dir.path(), &world, &llm).await;
    let strategy = CollectStrategy::IdentityBasedStrategy;
    let alice = Person::login_sharing_keys(&world.synapse.url(), &world.alice, strategy).await;
    let bot_id = world.bot.id();
    let room = alice.open_dm(&bot_id).await;
    alice.say(&room, "can you read me?").await;
    let answer = alice.try_next_from(&room, &bot_id, 0, WITHIN).await;
    let answer = answer.unwrap_or_else(|| panic!("no answer: {}", daemon.logs()));
    assert_eq!(answer.body, "echo: can you read me?");
}

/// A client that shares keys only with devices it verified never gives the bot one: the
/// room is told, once, and nothing reaches the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_the_bot_cannot_decrypt_are_told_once() {
    let Some(world) = world().await else { return };
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = started(dir.path(), &world, &llm).await;
    let strategy = CollectStrategy::OnlyTrustedDevices;
    let alice = Person::login_sharing_keys(&world.synapse.url(), &world.alice, strategy).await;
    let bot_id = world.bot.id();
    let room = alice.open_dm(&bot_id).await;
    alice.say(&room, "secret one").await;
    let told = alice.try_next_from(&room, &bot_id, 0, WITHIN).await;
    let told = told.unwrap_or_else(|| panic!("the room was not told: {}", daemon.logs()));
    assert!(told.body.contains("could not read a message"), "{told:?}");
    alice.say(&room, "secret two").await;
    daemon.wait_for_log("could not be decrypted").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let from_bot = alice.seen().iter().filter(|seen| seen.sender == bot_id).count();
    assert_eq!(from_bot, 1, "told once: {:#?}", alice.seen());
    assert!(llm.requests().is_empty(), "nothing reached the model");
}
