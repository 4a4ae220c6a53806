//! The Matrix channel in the daemon's other shapes and conditions: a process of its own on
//! NATS, a homeserver that rate-limits the bot, one that is down when the daemon starts, and a
//! voice message for transcription.

use std::time::Duration;

use super::{WITHIN, World, matrix, start, world, world_limiting_messages};
use crate::support::{Launch, run_to_exit};
use switchboard_testkit::fake_llm::transcriptions::recording;
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};
use switchboard_testkit::matrix_person::Person;
use switchboard_testkit::matrix_person::matrix_sdk::Room;

#[test]
fn the_matrix_channel_alone_needs_a_login() {
    let dir = tempfile::tempdir().unwrap();
    let (status, stderr, _) = run_to_exit(dir.path(), &["channel", "matrix"], &[]);
    assert!(!status.success());
    assert!(stderr.contains("MATRIX_USER") && stderr.contains("MATRIX_PASSWORD"), "{stderr}");
}

/// The distributed shape: `switchboard channel matrix` and `switchboard agent` as separate
/// processes on NATS JetStream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matrix_channel_and_agent_processes_talk_over_nats() {
    let Some(world) = world().await else { return };
    let nats = switchboard_testkit::nats::NatsServer::start().await;
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let channel =
        matrix(Launch::new(dir.path(), "channel", &["channel", "matrix", "--nats", &nats.url()]), &world).spawn();
    let agent = Launch::new(dir.path(), "agent", &["agent", "--nats", &nats.url()]).llm(&llm.base_url()).spawn();
    channel.wait_for_log("Matrix connected").await;
    agent.wait_for_log("worker started").await;
    let alice = Person::login(&world.synapse.url(), &world.alice).await;
    let bot_id = world.bot.id();
    let room = alice.open_dm(&bot_id).await;
    alice.say(&room, "hello over nats").await;
    let answer = alice.try_next_from(&room, &bot_id, 0, WITHIN).await;
    let answer = answer.unwrap_or_else(|| panic!("no answer\n{}\n{}", channel.logs(), agent.logs()));
    assert_eq!(answer.body, "echo: hello over nats");
    assert!(answer.encrypted, "{answer:?}");
}

/// Every message the bot sent to `room`, each with the text of its last edit, in order.
fn bot_messages(alice: &Person, world: &World, room: &Room) -> Vec<String> {
    let seen = alice.seen();
    let bot_id = world.bot.id();
    seen.iter()
        .filter(|part| part.room == room.room_id() && part.sender == bot_id && part.replaces.is_none())
        .map(|part| {
            let edits = seen.iter().rev().filter(|edit| edit.replaces.as_ref() == Some(&part.event_id));
            edits.filter_map(|edit| edit.new_body.clone()).next().unwrap_or_else(|| part.body.clone())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_bot_waits_as_told_and_sends_every_part_once() {
    // Two messages at once, then one every two seconds: a four-part answer meets 429s.
    let Some(world) = world_limiting_messages("{per_second: 0.5, burst_count: 2}").await else { return };
    let llm = FakeLlm::start().await;
    // Each paragraph over half a message (6,000 characters), the whole within the model's
    // 4,096 output tokens.
    let paragraph = |n: usize| format!("Paragraph {n}: {}", "a long sentence about the plan. ".repeat(97));
    let long = (0..4).map(paragraph).collect::<Vec<_>>().join("\n\n");
    llm.push(Scripted::Text(long.clone()));
    let dir = tempfile::tempdir().unwrap();
    let daemon = start(matrix(Launch::new(dir.path(), "mx", &["run"]).llm(&llm.base_url()), &world)).await;
    let alice = Person::login(&world.synapse.url(), &world.alice).await;
    let room = alice.open_dm(&world.bot.id()).await;
    alice.say(&room, "the whole plan, please").await;
    let shown = |text: &str| text.replace([' ', '\n'], "");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let parts = loop {
        let parts = bot_messages(&alice, &world, &room);
        if shown(&parts.concat()) == shown(&long) {
            break parts;
        }
        let late = tokio::time::Instant::now() > deadline;
        assert!(!late, "the answer never showed whole: {parts:#?}\n{}", daemon.logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(parts.len(), 4, "one message per paragraph, none twice");
    let log = std::fs::read_to_string(world.synapse.log_path()).unwrap_or_default();
    assert!(log.contains(" 429 "), "the homeserver did rate-limit the bot:\n{log}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(bot_messages(&alice, &world, &room).len(), 4, "no part came again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_homeserver_down_at_start_is_waited_for() {
    let Some(mut world) = world().await else { return };
    world.synapse.stop().await;
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = matrix(Launch::new(dir.path(), "mx", &["run"]).llm(&llm.base_url()), &world).spawn();
    daemon.wait_healthy().await;
    daemon.wait_for_log("cannot reach the Matrix homeserver").await;
    world.synapse.restart().await;
    daemon.wait_for_log("Matrix connected").await;
    let alice = Person::login(&world.synapse.url(), &world.alice).await;
    let bot_id = world.bot.id();
    let room = alice.open_dm(&bot_id).await;
    alice.say(&room, "are you there now?").await;
    let answer = alice.next_from(&room, &bot_id, 0, WITHIN).await;
    assert_eq!(answer.body, "echo: are you there now?", "{}", daemon.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voice_message_reaches_the_model_as_its_words() {
    let Some(world) = world().await else { return };
    let llm = FakeLlm::start().await;
    llm.push_transcript(Scripted::Text("Remind me to buy oat milk tomorrow.".into()));
    let dir = tempfile::tempdir().unwrap();
    let launch = matrix(Launch::new(dir.path(), "mx", &["run"]).llm(&llm.base_url()), &world);
    let daemon = start(launch.env("SWITCHBOARD_TRANSCRIPTION__PROVIDER", "openai")).await;
    let alice = Person::login(&world.synapse.url(), &world.alice).await;
    let bot_id = world.bot.id();
    let room = alice.open_dm(&bot_id).await;
    let voice = recording(3000);
    alice.send_voice(&room, &voice).await;
    alice.next_from(&room, &bot_id, 0, WITHIN).await;
    let calls = llm.transcriptions();
    assert_eq!(calls.len(), 1, "{}", daemon.logs());
    assert_eq!(calls[0].bytes_len, voice.len(), "decrypted and sent whole");
    let request = llm.requests().last().cloned().unwrap().to_string();
    assert!(request.contains("[voice note, transcribed] Remind me to buy oat milk tomorrow."), "{request}");
}

/// More happened in a room while the daemon was down than one sync carries (Synapse sends the
/// newest ten events and a `limited` timeline): the gap is read back, so a mention early in it
/// is still answered, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mention_early_in_a_busy_downtime_is_still_answered() {
    let Some(world) = world().await else { return };
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = super::started(dir.path(), &world, &llm).await;
    let (alice, bob, room, bob_room) = super::room_of_three(&world).await;
    let bot_id = world.bot.id();
    alice.say_to(&room, &bot_id, "bot: hello").await;
    alice.next_from(&room, &bot_id, 0, WITHIN).await;
    daemon.signal("TERM");
    daemon.wait_exit(Duration::from_secs(20)).await;

    // Synapse answers the stopped daemon's last long poll with the first event that comes and
    // keeps that answer for the same request from the restarted one: a first message of its
    // own, so the mention is in the gap either way.
    bob.say(&bob_room, "is it down?").await;
    alice.say_to(&room, &bot_id, "bot: what did I miss?").await;
    for n in 0..25 {
        bob.say(&bob_room, &format!("chatter {n}")).await;
    }
    let daemon = super::started(dir.path(), &world, &llm).await;
    let answer = alice.try_next_from(&room, &bot_id, 1, WITHIN).await;
    let answer = answer.unwrap_or_else(|| panic!("the mention in the gap was not answered\n{}", daemon.logs()));
    assert!(answer.body.contains("what did I miss?"), "{answer:?}");
    assert!(daemon.logs().contains("read back a gap"), "{}", daemon.logs());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let from_bot = alice.seen().iter().filter(|seen| seen.sender == bot_id).count();
    assert_eq!(from_bot, 2, "answered once: {:#?}", alice.seen());
}

/// With `groups` set, an invitation to any other room is declined (`other_invites = "decline"`,
/// the default): the inviter sees the bot refuse it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invitation_to_a_room_not_in_groups_is_declined() {
    use switchboard_testkit::matrix_person::matrix_sdk::ruma::events::room::member::MembershipState;
    let Some(world) = world().await else { return };
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let launch = matrix(Launch::new(dir.path(), "mx", &["run"]).llm(&llm.base_url()), &world);
    let daemon = start(launch.env("SWITCHBOARD_CHANNELS__MATRIX__GROUPS", "[\"!elsewhere:localhost\"]")).await;
    let bob = Person::login(&world.synapse.url(), &world.bob).await;
    let bot_id = world.bot.id();
    let room = bob.open_group(&[&bot_id]).await;
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let _ = room.sync_members().await;
        let member = room.get_member_no_sync(&bot_id).await.ok().flatten();
        if member.is_some_and(|member| *member.membership() == MembershipState::Leave) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the invitation was not declined\n{}", daemon.logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(daemon.logs().contains("the room is not in groups"), "{}", daemon.logs());
}
