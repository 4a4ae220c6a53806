//! The fake Discord driven by serenity 0.12.5's real client: proves it speaks the REST and
//! gateway protocols (READY, dispatches, heartbeats, RESUME with replay, uploads, errors).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use serenity::all::{
    Channel, ChannelId, ChannelType, ClientBuilder, Context, CreateAllowedMentions, CreateAttachment, CreateMessage,
    EditMessage, EventHandler, GatewayIntents, GuildId, Http, HttpBuilder, Message, MessageId, MessageType, Nonce,
    Ready, RoleId, ShardManager, UserId,
};
use serenity::http::HttpError;
use switchboard_testkit::fake_discord::{BOT_ID, Failure, FakeDiscord, LostAnswer, events};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::task::JoinHandle;

const WAIT: Duration = Duration::from_secs(5);
/// Every test finishes well within this.
const TEST_LIMIT: Duration = Duration::from_secs(10);
const GUILD: u64 = 100;
const CHANNEL: u64 = 200;
const DM_CHANNEL: u64 = 300;

fn http(fake: &FakeDiscord) -> Http {
    HttpBuilder::new(FakeDiscord::TOKEN).proxy(fake.url()).ratelimiter_disabled(true).build()
}

/// Forwards `ready` and `message` events to the test (no cache: the context is not used).
struct Forward {
    ready: UnboundedSender<Ready>,
    messages: UnboundedSender<Message>,
}

#[serenity::async_trait]
impl EventHandler for Forward {
    async fn ready(&self, _ctx: Context, ready: Ready) {
        let _ = self.ready.send(ready);
    }

    async fn message(&self, _ctx: Context, message: Message) {
        let _ = self.messages.send(message);
    }
}

/// A running serenity client connected to the fake.
struct Bot {
    ready: UnboundedReceiver<Ready>,
    messages: UnboundedReceiver<Message>,
    http: Arc<Http>,
    shard_manager: Arc<ShardManager>,
    task: JoinHandle<Result<(), serenity::Error>>,
}

impl Bot {
    async fn start(fake: &FakeDiscord) -> Bot {
        let (ready_tx, ready) = unbounded_channel();
        let (messages_tx, messages) = unbounded_channel();
        let intents =
            GatewayIntents::GUILD_MESSAGES | GatewayIntents::DIRECT_MESSAGES | GatewayIntents::MESSAGE_CONTENT;
        let mut client = ClientBuilder::new_with_http(http(fake), intents)
            .event_handler(Forward { ready: ready_tx, messages: messages_tx })
            .await
            .expect("serenity client");
        let (http, shard_manager) = (client.http.clone(), client.shard_manager.clone());
        let task = tokio::spawn(async move { client.start().await });
        fake.wait_connected(1, WAIT).await;
        Bot { ready, messages, http, shard_manager, task }
    }

    async fn next_message(&mut self) -> Message {
        tokio::time::timeout(WAIT, self.messages.recv()).await.expect("a message event in time").expect("handler alive")
    }

    async fn stop(self) {
        self.shard_manager.shutdown_all().await;
        let stopped = tokio::time::timeout(WAIT, self.task).await.expect("client stops in time");
        stopped.expect("client task").expect("client ends cleanly");
    }
}

async fn limited<F: Future<Output = ()>>(test: F) {
    tokio::time::timeout(TEST_LIMIT, test).await.expect("test finishes within 10 s");
}

fn unsuccessful(result: Result<impl std::fmt::Debug, serenity::Error>) -> serenity::http::ErrorResponse {
    match result {
        Err(serenity::Error::Http(HttpError::UnsuccessfulRequest(response))) => response,
        other => panic!("expected an unsuccessful request, got {other:?}"),
    }
}

#[tokio::test]
async fn ready_arrives_with_the_bot_and_guilds() {
    limited(async {
        let fake = FakeDiscord::start().await;
        fake.add_guild(GUILD, &[]);
        let mut bot = Bot::start(&fake).await;
        let ready = tokio::time::timeout(WAIT, bot.ready.recv()).await.expect("READY in time").expect("handler");
        assert_eq!(ready.user.id.get(), BOT_ID);
        assert_eq!(ready.user.name, "switchboard");
        assert_eq!(ready.application.id.get(), fake.bot().application_id);
        assert_eq!(ready.guilds.iter().map(|guild| guild.id.get()).collect::<Vec<_>>(), [GUILD]);
        assert_eq!(fake.calls_to("GET /gateway").len(), 1, "serenity took the gateway URL from the fake");
        assert_eq!((fake.identifies(), fake.resumes()), (1, 0));
        bot.stop().await;
    })
    .await;
}

#[tokio::test]
async fn guild_and_dm_messages_arrive_with_their_fields() {
    limited(async {
        let fake = FakeDiscord::start().await;
        let mut bot = Bot::start(&fake).await;
        let earlier = events::guild_message(GUILD, CHANNEL, 5000, "switchboard", 10, "earlier");
        let message = events::guild_message(GUILD, CHANNEL, 42, "ann", 11, "<@5000> hi <@&77>");
        let message =
            events::replying_to(events::mentioning_role(events::mentioning_user(message, BOT_ID), 77), earlier);
        fake.send_message_create(message);
        let got = bot.next_message().await;
        assert_eq!((got.id.get(), got.channel_id.get(), got.content.as_str()), (11, CHANNEL, "<@5000> hi <@&77>"));
        assert_eq!((got.author.id.get(), got.author.name.as_str(), got.author.bot), (42, "ann", false));
        assert_eq!(got.guild_id, Some(GuildId::new(GUILD)));
        assert_eq!(got.member.as_ref().map(|member| member.roles.len()), Some(0));
        assert_eq!(got.mentions.iter().map(|user| user.id.get()).collect::<Vec<_>>(), [BOT_ID]);
        assert_eq!(got.mention_roles, [RoleId::new(77)]);
        assert_eq!(got.kind, MessageType::InlineReply);
        let replied = got.referenced_message.as_ref().expect("referenced_message");
        assert_eq!((replied.id.get(), replied.author.id.get()), (10, BOT_ID));
        got.reply(&bot.http, "pong").await.expect("the client's own Http reaches the fake");
        assert_eq!(fake.sent_messages()[0].message_reference, Some(11));

        let url = fake.add_attachment("cat.png", b"png".to_vec());
        let dm = events::with_attachment(events::dm_message(DM_CHANNEL, 43, "bob", 12, "psst"), 1, "cat.png", 3, &url);
        fake.send_message_create(dm);
        let got = bot.next_message().await;
        assert_eq!((got.content.as_str(), got.author.id.get(), got.guild_id), ("psst", 43, None));
        assert_eq!(got.attachments[0].filename, "cat.png");
        assert_eq!(got.attachments[0].download().await.expect("download from the fake"), b"png");
        bot.stop().await;
    })
    .await;
}

#[tokio::test]
async fn heartbeats_are_acknowledged_and_the_session_survives() {
    limited(async {
        let fake = FakeDiscord::start().await;
        fake.set_heartbeat_interval(Duration::from_millis(500));
        let mut bot = Bot::start(&fake).await;
        let started = std::time::Instant::now();
        while fake.heartbeats() < 3 {
            assert!(started.elapsed() < WAIT, "heartbeats so far: {}", fake.heartbeats());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(started.elapsed() >= Duration::from_millis(1000), "three heartbeats span two intervals");
        assert_eq!((fake.identifies(), fake.resumes()), (1, 0), "no reconnect: every heartbeat was acked");
        fake.send_message_create(events::dm_message(DM_CHANNEL, 43, "bob", 12, "still here"));
        assert_eq!(bot.next_message().await.content, "still here");
        bot.stop().await;
    })
    .await;
}

#[tokio::test]
async fn resume_replays_a_dispatch_missed_while_disconnected_once() {
    limited(async {
        let fake = FakeDiscord::start().await;
        let mut bot = Bot::start(&fake).await;
        fake.send_message_create(events::dm_message(DM_CHANNEL, 43, "bob", 1, "before"));
        assert_eq!(bot.next_message().await.content, "before");

        fake.drop_connection();
        let seq = fake.send_message_create(events::dm_message(DM_CHANNEL, 43, "bob", 2, "while away"));
        assert_eq!(seq, 3, "READY is 1, the first message 2");
        fake.wait_connected(2, WAIT).await;
        assert_eq!((fake.identifies(), fake.resumes()), (1, 1));
        assert_eq!(bot.next_message().await.content, "while away");
        fake.send_message_create(events::dm_message(DM_CHANNEL, 43, "bob", 3, "after"));
        assert_eq!(bot.next_message().await.content, "after", "the missed message came exactly once");
        bot.stop().await;
    })
    .await;
}

#[tokio::test]
async fn an_invalidated_session_makes_serenity_identify_again() {
    limited(async {
        let fake = FakeDiscord::start().await;
        let mut bot = Bot::start(&fake).await;
        let started = std::time::Instant::now();
        fake.invalidate_session();
        let seq = fake.send_message_create(events::dm_message(DM_CHANNEL, 43, "bob", 1, "queued"));
        assert_eq!(seq, 2, "it follows the new session's READY");
        fake.wait_connected(2, Duration::from_secs(8)).await;
        assert_eq!((fake.identifies(), fake.resumes()), (2, 0));
        assert_eq!(bot.next_message().await.content, "queued");
        eprintln!("re-identified after {:?}", started.elapsed());
        bot.stop().await;
    })
    .await;
}

#[tokio::test]
async fn dispatches_before_the_first_identify_follow_ready() {
    limited(async {
        let fake = FakeDiscord::start().await;
        assert_eq!(fake.send_message_create(events::dm_message(DM_CHANNEL, 43, "bob", 1, "early")), 2);
        let mut bot = Bot::start(&fake).await;
        assert_eq!(bot.next_message().await.content, "early");
        bot.stop().await;
    })
    .await;
}

#[tokio::test]
async fn sent_messages_record_replies_and_allowed_mentions() {
    limited(async {
        let fake = FakeDiscord::start().await;
        let http = http(&fake);
        let channel = ChannelId::new(CHANNEL);
        let said = channel.say(&http, "hello").await.expect("say");
        assert_eq!((said.id.get(), said.author.id.get(), said.content.as_str()), (9000, BOT_ID, "hello"));
        let builder = CreateMessage::new()
            .content("a reply")
            .reference_message((channel, MessageId::new(11)))
            .allowed_mentions(CreateAllowedMentions::new().replied_user(false).users([UserId::new(42)]));
        let reply = channel.send_message(&http, builder).await.expect("send_message");
        assert_eq!(reply.message_reference.and_then(|reference| reference.message_id), Some(MessageId::new(11)));

        let sent = fake.sent_messages();
        assert_eq!(sent.len(), 2);
        assert_eq!((sent[0].message_id, sent[0].channel_id, sent[0].content.as_str()), (9000, CHANNEL, "hello"));
        assert_eq!((sent[1].message_id, sent[1].message_reference), (9001, Some(11)));
        let allowed = sent[1].allowed_mentions.clone().expect("allowed_mentions");
        assert_eq!((allowed["replied_user"].clone(), allowed["users"].clone()), (json!(false), json!(["42"])));
        assert_eq!(fake.wait_for_calls("POST /channels/{id}/messages", 2, WAIT).await.len(), 2);
    })
    .await;
}

#[tokio::test]
async fn edits_deletes_typing_and_uploads_are_recorded() {
    limited(async {
        let fake = FakeDiscord::start().await;
        let http = http(&fake);
        let channel = ChannelId::new(CHANNEL);
        let sent = channel.say(&http, "draft").await.expect("say");
        let edited = channel.edit_message(&http, sent.id, EditMessage::new().content("final")).await.expect("edit");
        assert_eq!((edited.content.as_str(), edited.edited_timestamp.is_some()), ("final", true));
        let unknown = channel.edit_message(&http, MessageId::new(1), EditMessage::new().content("x")).await;
        let unknown = unsuccessful(unknown);
        assert_eq!((unknown.status_code.as_u16(), unknown.error.code), (404, 10008));
        fake.send_message_create(events::dm_message(CHANNEL, 43, "bob", 12, "not yours"));
        let theirs =
            unsuccessful(channel.edit_message(&http, MessageId::new(12), EditMessage::new().content("x")).await);
        assert_eq!((theirs.status_code.as_u16(), theirs.error.code), (403, 50005));
        assert_eq!(fake.edits().len(), 1);
        assert_eq!(fake.edits()[0].body["content"], "final");

        channel.delete_message(&http, sent.id).await.expect("delete");
        channel.broadcast_typing(&http).await.expect("typing");
        assert_eq!(fake.calls_to("DELETE /channels/{id}/messages/{id}").len(), 1);
        assert_eq!(fake.calls_to("POST /channels/{id}/typing").len(), 1);

        let file = CreateAttachment::bytes(b"hello file".to_vec(), "notes.txt");
        let upload = channel.send_message(&http, CreateMessage::new().content("see file").add_file(file)).await;
        let upload = upload.expect("upload");
        assert_eq!((upload.attachments[0].filename.as_str(), upload.attachments[0].size), ("notes.txt", 10));
        assert_eq!(upload.attachments[0].download().await.expect("download"), b"hello file");
        let last = fake.sent_messages().pop().expect("the upload");
        assert_eq!((last.content.as_str(), last.file_names), ("see file", vec!["notes.txt".to_owned()]));
        let call = fake.calls_to("POST /channels/{id}/messages").pop().expect("upload call");
        assert_eq!(call.body["files"][0]["field"], "files[0]");
    })
    .await;
}

/// A message create sent without serenity, so that status, headers and body all stay visible.
async fn raw_create(fake: &FakeDiscord, channel: u64, body: Value) -> reqwest::Result<reqwest::Response> {
    reqwest::Client::new()
        .post(format!("{}/api/v10/channels/{channel}/messages", fake.url()))
        .header("Authorization", format!("Bot {}", FakeDiscord::TOKEN))
        .json(&body)
        .send()
        .await
}

#[tokio::test]
async fn a_scripted_429_reaches_the_bot_as_an_error() {
    limited(async {
        let fake = FakeDiscord::start().await;
        let http = http(&fake);
        let channel = ChannelId::new(CHANNEL);
        fake.fail_next("POST /channels/{id}/messages", Failure::RateLimited { retry_after_secs: 0.3, global: false });
        let response = unsuccessful(channel.say(&http, "too fast").await);
        assert_eq!(response.status_code.as_u16(), 429);
        // serenity keeps status, URL, method and {code, message}: Discord's 429 body has no `code`,
        // so decoding fails (code -1) and neither `retry_after` nor `Retry-After` survive.
        assert_eq!(response.error.code, -1);
        assert!(response.error.message.contains("Could not decode"), "{}", response.error.message);
        assert!(response.url.ends_with("/api/v10/channels/200/messages"));
        assert!(fake.sent_messages().is_empty());
        assert!(fake.calls_to("POST /channels/{id}/messages")[0].failed);
        tokio::time::sleep(Duration::from_millis(320)).await;
        channel.say(&http, "later").await.expect("the limit has passed");

        // The fake does send both; a raw client sees them.
        fake.fail_next("POST /channels/{id}/messages", Failure::RateLimited { retry_after_secs: 1.5, global: false });
        let raw = raw_create(&fake, CHANNEL, json!({ "content": "raw" })).await.expect("raw request");
        assert_eq!(raw.status().as_u16(), 429);
        assert_eq!(raw.headers()["retry-after"], "2");
        assert_eq!(raw.headers()["x-ratelimit-reset-after"], "1.500");
        assert!(raw.headers().get("x-ratelimit-global").is_none());
        let body: Value = raw.json().await.expect("429 body");
        assert_eq!(body["message"], "You are being rate limited.");
        assert_eq!((body["retry_after"].as_f64(), body["global"].as_bool()), (Some(1.5), Some(false)));
        assert!(body.get("code").is_none(), "Discord's 429 body has no code");
    })
    .await;
}

#[tokio::test]
async fn a_rate_limited_route_answers_429_until_retry_after_has_passed() {
    limited(async {
        let fake = FakeDiscord::start().await;
        fake.fail_next("POST /channels/{id}/messages", Failure::RateLimited { retry_after_secs: 0.4, global: false });
        let first = raw_create(&fake, CHANNEL, json!({ "content": "a" })).await.expect("first");
        assert_eq!(first.status().as_u16(), 429);
        // Too early, on the same path: another 429 with the time left. Another channel is free.
        let early = raw_create(&fake, CHANNEL, json!({ "content": "b" })).await.expect("early");
        assert_eq!(early.status().as_u16(), 429);
        let left = early.json::<Value>().await.expect("body")["retry_after"].as_f64().unwrap_or_default();
        assert!(left > 0.0 && left <= 0.4, "{left}");
        let elsewhere = raw_create(&fake, DM_CHANNEL, json!({ "content": "c" })).await.expect("elsewhere");
        assert_eq!(elsewhere.status().as_u16(), 200);
        tokio::time::sleep(Duration::from_millis(420)).await;
        let later = raw_create(&fake, CHANNEL, json!({ "content": "d" })).await.expect("later");
        assert_eq!(later.status().as_u16(), 200);
        assert_eq!(fake.rate_limited_calls(), 2);

        // The global limit holds back every route, and says so.
        fake.fail_next("POST /channels/{id}/typing", Failure::RateLimited { retry_after_secs: 0.3, global: true });
        let typing = http(&fake).broadcast_typing(ChannelId::new(CHANNEL)).await;
        assert_eq!(unsuccessful(typing).status_code.as_u16(), 429);
        let held = raw_create(&fake, DM_CHANNEL, json!({ "content": "e" })).await.expect("held");
        assert_eq!(held.headers()["x-ratelimit-global"], "true");
        assert_eq!(held.json::<Value>().await.expect("body")["global"], true);
        let contents: Vec<String> = fake.sent_messages().into_iter().map(|m| m.content).collect();
        assert_eq!(contents, ["c", "d"]);
    })
    .await;
}

#[tokio::test]
async fn a_repeated_enforced_nonce_returns_the_first_message() {
    limited(async {
        let fake = FakeDiscord::start().await;
        let http = http(&fake);
        let channel = ChannelId::new(CHANNEL);
        let once = || CreateMessage::new().content("once").nonce(Nonce::String("a1b2c3".into())).enforce_nonce(true);
        let first = channel.send_message(&http, once()).await.expect("first");
        let again = channel.send_message(&http, once()).await.expect("again");
        assert_eq!(again.id, first.id);
        assert!(matches!(&first.nonce, Some(Nonce::String(nonce)) if nonce == "a1b2c3"), "{:?}", first.nonce);
        // Without enforce_nonce, a nonce is only echoed: a second message is posted.
        let loose = || CreateMessage::new().content("twice").nonce(Nonce::String("d4".into()));
        let one = channel.send_message(&http, loose()).await.expect("one");
        let two = channel.send_message(&http, loose()).await.expect("two");
        assert_ne!(one.id, two.id);
        let sent: Vec<(String, Option<String>)> =
            fake.sent_messages().into_iter().map(|m| (m.content, m.nonce)).collect();
        let nonce = |text: &str| Some(text.to_owned());
        assert_eq!(
            sent,
            [("once".into(), nonce("a1b2c3")), ("twice".into(), nonce("d4")), ("twice".into(), nonce("d4"))]
        );

        let long = CreateMessage::new().content("x").nonce(Nonce::String("n".repeat(26))).enforce_nonce(true);
        let refused = unsuccessful(channel.send_message(&http, long).await);
        assert_eq!((refused.status_code.as_u16(), refused.error.code), (400, 50035));
    })
    .await;
}

#[tokio::test]
async fn a_lost_answer_still_creates_the_message() {
    limited(async {
        let fake = FakeDiscord::start().await;
        let create = "POST /channels/{id}/messages";
        fake.fail_next(create, Failure::AnswerLost(LostAnswer::ServerError));
        let server = raw_create(&fake, CHANNEL, json!({ "content": "first" })).await.expect("an answer");
        assert_eq!(server.status().as_u16(), 500);
        fake.fail_next(create, Failure::AnswerLost(LostAnswer::ConnectionDropped));
        let dropped = raw_create(&fake, CHANNEL, json!({ "content": "second" })).await;
        assert!(dropped.is_err(), "the connection closes before any answer: {dropped:?}");
        let contents: Vec<String> = fake.sent_messages().into_iter().map(|m| m.content).collect();
        assert_eq!(contents, ["first", "second"]);
        let statuses: Vec<u16> = fake.calls_to(create).iter().map(|call| call.status).collect();
        assert_eq!(statuses, [500, 0]);
    })
    .await;
}

#[tokio::test]
async fn scripted_statuses_and_a_wrong_token_are_errors() {
    limited(async {
        let fake = FakeDiscord::start().await;
        let wrong = HttpBuilder::new("wrong-token").proxy(fake.url()).ratelimiter_disabled(true).build();
        let response = unsuccessful(wrong.get_current_user().await);
        assert_eq!((response.status_code.as_u16(), response.error.message.as_str()), (401, "401: Unauthorized"));
        assert!(fake.calls_to("GET /users/@me")[0].failed);

        let http = http(&fake);
        let body = json!({ "message": "Missing Permissions", "code": 50013 });
        fake.fail_next("POST /channels/{id}/messages", Failure::Status { code: 403, body });
        fake.fail_next("POST /channels/{id}/messages", Failure::ServerError);
        let forbidden = unsuccessful(ChannelId::new(CHANNEL).say(&http, "x").await);
        assert_eq!((forbidden.status_code.as_u16(), forbidden.error.code), (403, 50013));
        let server = unsuccessful(ChannelId::new(CHANNEL).say(&http, "x").await);
        assert_eq!(server.status_code.as_u16(), 500);
        let unknown = unsuccessful(http.get_channel(ChannelId::new(999)).await);
        assert_eq!((unknown.status_code.as_u16(), unknown.error.code), (404, 10003));
    })
    .await;
}

#[tokio::test]
async fn a_wrong_token_fails_identify_and_stops_the_client() {
    limited(async {
        let fake = FakeDiscord::start().await;
        let http = HttpBuilder::new("wrong-token").proxy(fake.url()).ratelimiter_disabled(true).build();
        let mut client = ClientBuilder::new_with_http(http, GatewayIntents::DIRECT_MESSAGES).await.expect("client");
        let result = tokio::time::timeout(WAIT, client.start()).await.expect("the client gives up in time");
        assert!(
            matches!(result, Err(serenity::Error::Gateway(serenity::gateway::GatewayError::InvalidAuthentication))),
            "{result:?}"
        );
        assert_eq!(fake.identifies(), 0);
        assert_eq!(fake.calls_to("GET /gateway").len(), 1, "GET /gateway needs no token, as on Discord");
    })
    .await;
}

#[tokio::test]
async fn rest_lookups_answer_serenity_models() {
    limited(async {
        let fake = FakeDiscord::start().await;
        fake.add_guild(GUILD, &[77, 78]);
        fake.add_channel(events::text_channel(GUILD, CHANNEL));
        fake.add_channel(events::thread(GUILD, 201, CHANNEL));
        fake.add_channel(events::dm_channel(DM_CHANNEL, 43));
        let http = http(&fake);
        let me = http.get_current_user().await.expect("users/@me");
        assert_eq!((me.id.get(), me.name.as_str(), me.bot), (BOT_ID, "switchboard", true));
        let app = http.get_current_application_info().await.expect("applications/@me");
        assert_eq!(app.id.get(), fake.bot().application_id);
        assert_eq!(http.get_bot_gateway().await.expect("gateway/bot").url, fake.gateway_url());

        let Channel::Guild(thread) = http.get_channel(ChannelId::new(201)).await.expect("thread") else {
            panic!("a guild channel")
        };
        assert_eq!((thread.kind, thread.parent_id), (ChannelType::PublicThread, Some(ChannelId::new(CHANNEL))));
        let Channel::Private(dm) = http.get_channel(ChannelId::new(DM_CHANNEL)).await.expect("dm") else {
            panic!("a private channel")
        };
        assert_eq!(dm.recipient.id.get(), 43);
        let member = http.get_member(GuildId::new(GUILD), UserId::new(BOT_ID)).await.expect("bot member");
        assert_eq!(member.roles, [RoleId::new(77), RoleId::new(78)]);
        let roles = http.get_guild_roles(GuildId::new(GUILD)).await.expect("roles");
        assert_eq!(roles.len(), 3);
    })
    .await;
}

#[test]
fn every_builder_deserializes_as_serenity_models() {
    let guild = events::guild_message(GUILD, CHANNEL, 42, "ann", 11, "hi");
    let dm = events::dm_message(DM_CHANNEL, 43, "bob", 12, "psst");
    let messages = [
        guild.clone(),
        dm.clone(),
        events::mentioning_user(guild.clone(), BOT_ID),
        events::mentioning_user(dm.clone(), 44),
        events::mentioning_role(guild.clone(), 77),
        events::replying_to(guild.clone(), events::from_bot(dm.clone())),
        events::replying_to(dm.clone(), dm.clone()),
        events::from_bot(guild.clone()),
        events::by_other_bot(events::from_bot(dm.clone())),
        events::with_attachment(guild, 1, "a.png", 3, "http://127.0.0.1:1/attachments/a.png"),
    ];
    for message in messages {
        let parsed: Message =
            serde_json::from_value(message.clone()).unwrap_or_else(|error| panic!("{error}: {message}"));
        assert_eq!(parsed.id.get().to_string(), message["id"].as_str().expect("string id"));
    }
    let other: Message = serde_json::from_value(events::by_other_bot(events::from_bot(dm))).expect("message");
    assert_eq!((other.author.id.get(), other.author.bot), (events::OTHER_BOT_ID, true));
    let user: serenity::all::User = serde_json::from_value(events::user(42, "ann")).expect("user");
    assert_eq!(user.global_name.as_deref(), Some("Ann"));
    for channel in [events::text_channel(GUILD, CHANNEL), events::thread(GUILD, 201, CHANNEL), events::dm_channel(1, 2)]
    {
        serde_json::from_value::<Channel>(channel.clone()).unwrap_or_else(|error| panic!("{error}: {channel}"));
    }
}
