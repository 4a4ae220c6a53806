//! The fake Discord's DMs to a person, driven by serenity 0.12.5's REST client: opening the DM
//! channel (`POST /users/@me/channels`) answers as Discord does.

use serenity::all::{ChannelType, CreateMessage, Http, HttpBuilder, UserId};
use serenity::http::HttpError;
use switchboard_testkit::fake_discord::{FakeDiscord, events};

const ALICE: u64 = 111;
const BOB: u64 = 222;
const ALICES_DM: u64 = 300;

fn http(fake: &FakeDiscord) -> Http {
    HttpBuilder::new(FakeDiscord::TOKEN).proxy(fake.url()).ratelimiter_disabled(true).build()
}

fn code_of(result: Result<impl std::fmt::Debug, serenity::Error>) -> (u16, isize) {
    match result {
        Err(serenity::Error::Http(HttpError::UnsuccessfulRequest(response))) => {
            (response.status_code.as_u16(), response.error.code)
        }
        other => panic!("expected an unsuccessful request, got {other:?}"),
    }
}

#[tokio::test]
async fn a_dm_channel_is_opened_once_per_person_and_is_the_one_their_dms_came_from() {
    let fake = FakeDiscord::start().await;
    let http = http(&fake);
    let bob = UserId::new(BOB).create_dm_channel(&http).await.unwrap();
    assert_eq!(bob.kind, ChannelType::Private);
    assert_eq!(bob.recipient.id.get(), BOB);
    assert_eq!(UserId::new(BOB).create_dm_channel(&http).await.unwrap().id, bob.id, "the same channel again");
    assert_eq!(fake.direct_channel_of(BOB), Some(bob.id.get()));

    fake.send_message_create(events::dm_message(ALICES_DM, ALICE, "alice", 10, "hi"));
    assert_eq!(UserId::new(ALICE).create_dm_channel(&http).await.unwrap().id.get(), ALICES_DM);

    let sent = bob.id.send_message(&http, CreateMessage::new().content("hello Bob")).await.unwrap();
    assert_eq!(fake.sent_messages()[0].channel_id, bob.id.get());
    assert_eq!(sent.content, "hello Bob");
    let calls = fake.calls_to("POST /users/@me/channels");
    assert_eq!(calls[0].body["recipient_id"], BOB.to_string());
}

#[tokio::test]
async fn unknown_users_and_closed_dms_are_refused_with_discords_codes() {
    let fake = FakeDiscord::start().await;
    let http = http(&fake);
    fake.forget_user(BOB);
    assert_eq!(code_of(UserId::new(BOB).create_dm_channel(&http).await), (400, 50033));

    fake.refuse_direct_messages(ALICE);
    let alice = UserId::new(ALICE).create_dm_channel(&http).await.unwrap();
    let refused = alice.id.send_message(&http, CreateMessage::new().content("hello")).await;
    assert_eq!(code_of(refused), (403, 50007));
    assert!(fake.sent_messages().is_empty());
}
