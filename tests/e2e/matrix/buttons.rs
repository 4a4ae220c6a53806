//! The owner's buttons on Matrix: reactions the bot offers under its own message, pressed by
//! a tap, settled by an edit and the removal of its reactions.

use super::{WITHIN, started, world};
use crate::support::run_to_exit;
use switchboard_testkit::fake_llm::FakeLlm;
use switchboard_testkit::matrix_person::Person;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_approves_a_stranger_by_tapping_a_reaction() {
    let Some(world) = world().await else { return };
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = started(dir.path(), &world, &llm).await;
    let bot_id = world.bot.id();
    let alice = Person::login(&world.synapse.url(), &world.alice).await;
    let owner_room = alice.open_dm(&bot_id).await;
    let bob = Person::login(&world.synapse.url(), &world.bob).await;
    let bob_room = bob.open_dm(&bot_id).await;
    bob.say(&bob_room, "hello, may I talk to you?").await;
    bob.next_from(&bob_room, &bot_id, 0, WITHIN).await;

    // The owner is told in their direct room, with the buttons listed and offered as reactions.
    let notice = alice.next_from(&owner_room, &bot_id, 0, WITHIN).await;
    assert!(notice.body.contains("React to answer: ✅ Approve · ❌ Deny"), "{notice:?}\n{}", daemon.logs());
    assert!(notice.body.contains(world.bob.user_id.as_str()), "{notice:?}");
    assert!(notice.notice, "what the bot says by itself is an m.notice: {notice:?}");
    let offered = alice
        .wait_for("the bot's two reactions", WITHIN, |alice| {
            let keys: Vec<String> = alice
                .reactions_to(&notice.event_id)
                .into_iter()
                .filter(|reaction| reaction.sender == bot_id)
                .map(|reaction| reaction.key)
                .collect();
            (keys.len() == 2).then_some(keys)
        })
        .await;
    assert_eq!(offered, ["✅", "❌"]);

    // Bob cannot decide his own request: he is not in the owner's room, and his reaction to a
    // message of his own room is not a press.
    let code_message = bob.next_from(&bob_room, &bot_id, 0, WITHIN).await;
    bob.react(&bob_room, &code_message.event_id, "✅").await;

    alice.react(&owner_room, &notice.event_id, "✅").await;
    let welcome = bob.next_from(&bob_room, &bot_id, 1, WITHIN).await;
    assert!(welcome.body.contains("approved"), "{welcome:?}\n{}", daemon.logs());
    let edit = alice
        .wait_for("the notice's edit", WITHIN, |alice| {
            alice.seen().into_iter().find(|seen| seen.replaces.as_ref() == Some(&notice.event_id))
        })
        .await;
    let new_body = edit.new_body.unwrap_or_default();
    assert!(new_body.contains("Approved by") && !new_body.contains("React to answer"), "{new_body}");
    alice
        .wait_for("the bot's reactions removed", WITHIN, |alice| {
            let left = alice.reactions_to(&notice.event_id).into_iter().filter(|r| r.sender == bot_id).count();
            (left == 0).then_some(())
        })
        .await;

    // A second tap finds the request settled: no new message, no second edit.
    alice.react(&owner_room, &notice.event_id, "❌").await;
    bob.say(&bob_room, "thanks!").await;
    let answer = bob.next_from(&bob_room, &bot_id, 2, WITHIN).await;
    assert!(answer.body.starts_with("echo:"), "approved: Bob is answered by the model: {answer:?}");
    let from_bot =
        alice.seen().into_iter().filter(|seen| seen.room == owner_room.room_id() && seen.sender == bot_id).count();
    assert_eq!(from_bot, 2, "the notice and its one edit: {:#?}", alice.seen());
    let (status, stderr, stdout) = run_to_exit(dir.path(), &["pairing", "list", "matrix"], &[]);
    assert!(status.success(), "{stderr}");
    assert!(stdout.contains("approved"), "{stdout}");
}
