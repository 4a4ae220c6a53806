//! The Matrix test tools against each other: a real Synapse, a person's client and a second
//! client standing in for a bot exchange messages in an encrypted direct room.

use std::time::Duration;

use matrix_sdk::config::SyncSettings;
use matrix_sdk::ruma::events::room::message::RoomMessageEventContent;
use switchboard_testkit::matrix_person::Person;
use switchboard_testkit::synapse::Synapse;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_talk_in_an_encrypted_direct_room() {
    let python = match Synapse::python() {
        Ok(python) => python,
        Err(reason) => return eprintln!("skipped: {reason}"),
    };
    let started = std::time::Instant::now();
    let synapse = Synapse::start(&python).await;
    eprintln!("synapse up in {:?}", started.elapsed());
    let alice = synapse.register("alice", "alice-pw").await;
    let bot_account = synapse.register("bot", "bot-pw").await;
    let bot = Person::login(&synapse.url(), &bot_account).await;
    // The bot accepts the invitation as soon as its sync shows it.
    let joiner = bot.client.clone();
    bot.client.add_event_handler(
        move |_: matrix_sdk::ruma::events::room::member::StrippedRoomMemberEvent, room: matrix_sdk::Room| {
            let _ = &joiner;
            async move {
                if room.state() == matrix_sdk::RoomState::Invited {
                    room.join().await.unwrap();
                }
            }
        },
    );
    let person = Person::login(&synapse.url(), &alice).await;
    let room = person.open_dm(&bot.user_id()).await;
    assert!(room.latest_encryption_state().await.unwrap().is_encrypted());
    person.say(&room, "hello bot").await;
    let bot_room = bot.client.get_room(room.room_id()).unwrap();
    let heard = bot.next_from(&bot_room, &person.user_id(), 0, Duration::from_secs(20)).await;
    assert_eq!(heard.body, "hello bot");
    assert!(heard.encrypted, "{heard:?}");
    bot_room.send(RoomMessageEventContent::text_html("**hi** alice", "<strong>hi</strong> alice")).await.unwrap();
    let answer = person.next_from(&room, &bot.user_id(), 0, Duration::from_secs(20)).await;
    assert_eq!((answer.body.as_str(), answer.html.as_deref()), ("**hi** alice", Some("<strong>hi</strong> alice")));
    let _ = bot.client.sync_once(SyncSettings::default().timeout(Duration::ZERO)).await;
    eprintln!("done in {:?}", started.elapsed());
}
