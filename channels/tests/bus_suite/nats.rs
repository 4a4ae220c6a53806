//! NATS-only behaviours of the bus suite: setup errors, consumer settings and crashes.

use super::*;
use switchboard_channels::BusError;
use switchboard_channels::bus::StreamOrder;
use switchboard_channels::bus::nats::{NatsBus, NatsOptions};
use switchboard_testkit::nats::NatsServer;

/// Short enough to keep redelivery tests fast, long enough that a busy machine acks in time.
const ACK_WAIT: Duration = Duration::from_secs(2);

/// Pull requests outlive every test, so no redelivery falls in the gap between two requests,
/// where nats-server 2.9 postpones it by a whole `ack_wait` (see `puller.rs`).
fn options() -> NatsOptions {
    NatsOptions {
        ack_wait: ACK_WAIT,
        outbound_ack_wait: ACK_WAIT,
        pull_wait: Duration::from_secs(20),
        ..NatsOptions::default()
    }
}

async fn connect(server: &NatsServer) -> NatsBus {
    within(PATIENCE, "connect", NatsBus::connect(&server.url(), options())).await.expect("connect")
}

pub(super) async fn harness() -> Harness {
    let server = NatsServer::start().await;
    let bus = connect(&server).await;
    Harness { bus: Arc::new(bus), redelivery: ACK_WAIT, _server: Some(server) }
}

#[tokio::test]
async fn server_without_jetstream_is_refused() {
    let server = NatsServer::start_without_jetstream().await;
    let result = within(PATIENCE, "connect", NatsBus::connect(&server.url(), options())).await;
    let err = result.err().expect("connect must fail");
    assert!(matches!(err, BusError::NoJetStream(_)), "{err}");
    assert!(err.to_string().contains("-js"), "{err}");
}

/// An agent and a channel process started at once on a fresh server both find the streams
/// missing and both create them; the one that comes second must accept the streams the
/// other made instead of failing its start (seen in an end-to-end test: "subjects overlap
/// with an existing stream"). The window is a few milliseconds wide, so this runs many
/// rounds of six starts; it does not hit the window every time.
#[tokio::test]
async fn processes_starting_at_once_share_the_streams_they_create() {
    for round in 0..20 {
        let server = NatsServer::start().await;
        let url = server.url();
        let starts = (0..6).map(|_| NatsBus::connect(&url, options()));
        let results = within(PATIENCE, "connect", futures_util::future::join_all(starts)).await;
        for result in results {
            if let Err(err) = result {
                panic!("round {round}: a process starting at the same time failed: {err}");
            }
        }
    }
}

#[tokio::test]
async fn unreachable_server_fails_at_once_without_credentials_in_the_error() {
    let mut server = NatsServer::start().await;
    let url = format!("nats://user:s3cret@127.0.0.1:{}", server.port());
    server.kill().await;
    let fail_fast = NatsOptions { wait_for_server: false, ..options() };
    let result = within(PATIENCE, "connect", NatsBus::connect(&url, fail_fast)).await;
    let err = result.err().expect("connect must fail");
    assert!(matches!(err, BusError::Connect { .. }), "{err}");
    assert!(!err.to_string().contains("s3cret"), "{err}");
}

/// A process started before the server (at boot, both started by systemd) keeps trying and
/// is connected, with its streams, once the server is up.
#[tokio::test]
async fn connect_waits_for_a_server_that_is_not_up_yet() {
    let mut server = NatsServer::start().await;
    server.kill().await;
    let url = server.url();
    let connecting = tokio::spawn(async move { NatsBus::connect(&url, options()).await });
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!connecting.is_finished(), "connect gave up while the server was down");
    server.restart().await;
    let bus = within(PATIENCE, "connect", connecting).await.expect("task").expect("connected once the server is up");
    publish_on(&bus, "after the wait").await;
    let mut deliveries = bus.inbound().await.expect("inbound");
    assert_eq!(content_of(&take(&mut deliveries).await), "after the wait");
}

/// Waiting is for a server that is not up yet; one that refuses us will not change its mind,
/// so a refused login stops the start at once, without the password or token in the error (in
/// the URL's percent-encoded form or decoded).
#[tokio::test]
async fn refused_login_fails_at_once_even_when_waiting_for_the_server() {
    let server = NatsServer::start_with_auth("switchboard", "right-password").await;
    let url = format!("nats://switchboard:wr0ng%2Fp%40ss@127.0.0.1:{}", server.port());
    let err = within(PATIENCE, "connect", NatsBus::connect(&url, options())).await.err().expect("refused");
    assert_refused_without(&err, &["wr0ng", "p@ss", "p%40ss"]);

    let server = NatsServer::start_with_token("right-token").await;
    let url = format!("nats://wrong-token@127.0.0.1:{}", server.port());
    let err = within(PATIENCE, "connect", NatsBus::connect(&url, options())).await.err().expect("refused");
    assert_refused_without(&err, &["wrong-token"]);
}

fn assert_refused_without(err: &BusError, secrets: &[&str]) {
    assert!(matches!(err, BusError::Connect { .. }), "{err}");
    assert!(err.to_string().contains("authorization violation"), "{err}");
    for secret in secrets {
        assert!(!err.to_string().contains(secret), "{secret} in: {err}");
    }
}

/// Connects to `url` and passes one message through the bus.
async fn assert_logged_in(url: &str) {
    let bus =
        within(PATIENCE, "connect", NatsBus::connect(url, options())).await.expect("connect with the URL's login");
    publish_on(&bus, "logged in").await;
    let mut deliveries = bus.inbound().await.expect("inbound");
    assert_eq!(content_of(&take(&mut deliveries).await), "logged in");
}

/// `bus = "nats://user:password@host"` logs in with them; characters a URL cannot hold as they
/// are (`@ : /`) are written percent-encoded.
#[tokio::test]
async fn user_and_password_written_in_the_url_log_in() {
    let server = NatsServer::start_with_auth("switchboard", "p@ss:w/rd").await;
    assert_logged_in(&format!("nats://switchboard:p%40ss%3Aw%2Frd@127.0.0.1:{}", server.port())).await;
}

/// `nats://TOKEN@host`: a user part without a password is a token, as in other NATS clients.
#[tokio::test]
async fn token_written_in_the_url_logs_in() {
    let server = NatsServer::start_with_token("s3cret-token").await;
    assert_logged_in(&format!("nats://s3cret-token@127.0.0.1:{}", server.port())).await;
}

/// In a comma-separated server list the login may be written once; a server that is down is
/// passed over for one that is up.
#[tokio::test]
async fn a_server_list_shares_the_login_written_in_one_url() {
    let mut down = NatsServer::start().await;
    down.kill().await;
    let server = NatsServer::start_with_auth("switchboard", "right-password").await;
    let url = format!("nats://switchboard:right-password@127.0.0.1:{},nats://127.0.0.1:{}", down.port(), server.port());
    assert_logged_in(&url).await;
}

/// `docs/bus.md` tells adapters in other languages to publish with `Nats-Msg-Id: <id>`: such a
/// publish and switchboard's own publish of the same message are one message, in either order.
#[tokio::test]
async fn foreign_publish_with_the_documented_header_is_deduplicated_against_ours() {
    let h = harness().await;
    let server = h._server.as_ref().expect("nats harness");
    let js = async_nats::jetstream::new(
        within(PATIENCE, "connect", async_nats::connect(server.url())).await.expect("connect"),
    );
    let foreign_publish = |msg: &InboundMessage| {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", msg.id.as_str());
        let subject = Subjects::new(DEFAULT_PREFIX).expect("prefix").chat(Flow::In, &msg.channel, &msg.chat_id);
        let payload = Bytes::from(serde_json::to_vec(msg).expect("json"));
        let js = js.clone();
        async move { js.publish_with_headers(subject, headers, payload).await.expect("publish").await.expect("ack") }
    };
    let ours_first = inbound("c1", "ours first");
    publish(&h, &ours_first).await;
    let ack = within(PATIENCE, "foreign publish", foreign_publish(&ours_first)).await;
    assert!(ack.duplicate, "the server took the foreign copy as a new message");
    let theirs_first = inbound("c1", "theirs first");
    let ack = within(PATIENCE, "foreign publish", foreign_publish(&theirs_first)).await;
    assert!(!ack.duplicate);
    publish(&h, &theirs_first).await;

    let mut deliveries = h.bus.inbound().await.expect("inbound");
    for want in ["ours first", "theirs first"] {
        let delivery = take(&mut deliveries).await;
        assert_eq!(content_of(&delivery), want);
        within(PATIENCE, "ack", delivery.ack()).await.expect("ack");
    }
    assert_nothing(&mut deliveries, QUIET).await;
}

/// A reply for a channel no adapter serves is dropped by the server after the outbound age
/// limit instead of waiting forever (and being delivered days late when an adapter appears).
#[tokio::test]
async fn outbound_messages_older_than_the_age_limit_are_dropped() {
    let server = NatsServer::start().await;
    let short =
        NatsOptions { outbound_max_age: Duration::from_secs(1), duplicate_window: Duration::from_secs(1), ..options() };
    let bus = within(PATIENCE, "connect", NatsBus::connect(&server.url(), short)).await.expect("connect");
    let stale = outbound("nobody", "c1", "too late");
    within(PATIENCE, "publish", bus.publish_outbound(&stale)).await.expect("publish");
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let fresh = outbound("nobody", "c1", "in time");
    within(PATIENCE, "publish", bus.publish_outbound(&fresh)).await.expect("publish");
    let mut deliveries = bus.outbound("nobody").await.expect("outbound");
    let got = take(&mut deliveries).await;
    assert_eq!(got.decode::<OutboundMessage>().expect("json").content, "in time");
    within(PATIENCE, "ack", got.ack()).await.expect("ack");
    assert_nothing(&mut deliveries, QUIET).await;
}

/// A server whose outbound stream an older switchboard made (no age limit) is brought up to
/// date at start, keeping what the stream holds; the start neither fails nor warns.
#[tokio::test]
async fn outbound_stream_without_an_age_limit_is_updated_in_place() {
    let server = NatsServer::start().await;
    let client = within(PATIENCE, "connect", async_nats::connect(server.url())).await.expect("connect");
    let js = async_nats::jetstream::new(client);
    let old = async_nats::jetstream::stream::Config {
        name: "SWITCHBOARD_OUT".into(),
        subjects: vec!["switchboard.out.>".into()],
        retention: async_nats::jetstream::stream::RetentionPolicy::WorkQueue,
        storage: async_nats::jetstream::stream::StorageType::File,
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    };
    within(PATIENCE, "create", js.create_stream(old)).await.expect("create the old stream");
    let waiting = outbound("telegram", "t1", "queued before the upgrade");
    let payload = Bytes::from(serde_json::to_vec(&waiting).expect("json"));
    within(PATIENCE, "publish", async { js.publish("switchboard.out.telegram.t1", payload).await?.await })
        .await
        .expect("publish");

    let bus = connect(&server).await;
    let mut stream = within(PATIENCE, "stream", js.get_stream("SWITCHBOARD_OUT")).await.expect("stream");
    let info = within(PATIENCE, "info", stream.info()).await.expect("info");
    assert_eq!(info.config.max_age, NatsOptions::default().outbound_max_age);
    assert_eq!(info.state.messages, 1, "the update kept the queued message");
    let mut deliveries = bus.outbound("telegram").await.expect("outbound");
    let got = take(&mut deliveries).await;
    assert_eq!(got.decode::<OutboundMessage>().expect("json").content, "queued before the upgrade");
    within(PATIENCE, "ack", got.ack()).await.expect("ack");
    // A second start finds nothing to change.
    drop(connect(&server).await);
}

/// What `docs/bus.md` promises about the outbound consumer an adapter takes its messages from.
#[tokio::test]
async fn outbound_consumer_has_the_documented_name_and_settings() {
    let h = harness().await;
    drop(h.bus.outbound("my chat").await.expect("outbound"));
    let server = h._server.as_ref().expect("nats harness");
    let js = async_nats::jetstream::new(
        within(PATIENCE, "connect", async_nats::connect(server.url())).await.expect("connect"),
    );
    let stream = within(PATIENCE, "stream", js.get_stream("SWITCHBOARD_OUT")).await.expect("stream");
    let info = within(PATIENCE, "consumer", stream.consumer_info("out-my~20chat")).await.expect("consumer");
    let config = &info.config;
    assert_eq!(config.durable_name.as_deref(), Some("out-my~20chat"));
    assert_eq!(config.filter_subject, "switchboard.out.my~20chat.*");
    assert_eq!(config.ack_policy, async_nats::jetstream::consumer::AckPolicy::Explicit);
    assert_eq!((config.ack_wait, config.max_ack_pending, config.max_deliver), (ACK_WAIT, 20_000, 10));
}

#[tokio::test]
async fn incompatible_stream_is_refused_with_the_fix() {
    let server = NatsServer::start().await;
    let client = within(PATIENCE, "connect", async_nats::connect(server.url())).await.expect("connect");
    let config = async_nats::jetstream::stream::Config {
        name: "SWITCHBOARD_IN".into(),
        subjects: vec!["switchboard.in.>".into()],
        ..Default::default()
    };
    within(PATIENCE, "create", async_nats::jetstream::new(client).create_stream(config)).await.expect("create");
    let err = within(PATIENCE, "connect", NatsBus::connect(&server.url(), options())).await.err().expect("refused");
    let text = err.to_string();
    assert!(text.contains("retention") && text.contains("nats stream rm SWITCHBOARD_IN"), "{text}");
}

#[tokio::test]
async fn consumer_settings_update_and_conflicts_are_explained() {
    let server = NatsServer::start().await;
    let first = connect(&server).await;
    drop(within(PATIENCE, "inbound", first.inbound()).await.expect("inbound"));
    let slower = NatsOptions { ack_wait: Duration::from_secs(5), ..options() };
    let second = within(PATIENCE, "connect", NatsBus::connect(&server.url(), slower)).await.expect("connect");
    drop(within(PATIENCE, "inbound", second.inbound()).await.expect("changed settings are applied"));
    let js = async_nats::jetstream::new(second.client().clone());
    let stream = within(PATIENCE, "stream", js.get_stream("SWITCHBOARD_IN")).await.expect("stream");
    let info = within(PATIENCE, "info", stream.consumer_info("workers")).await.expect("consumer");
    assert_eq!(info.config.ack_wait, Duration::from_secs(5));
    // Messages waiting for an older one of their chat are handed back often: no delivery limit.
    assert_eq!(info.config.max_deliver, -1);
    let other = NatsOptions { worker_consumer: "others".into(), ..options() };
    let third = within(PATIENCE, "connect", NatsBus::connect(&server.url(), other)).await.expect("connect");
    let err = within(PATIENCE, "inbound", third.inbound()).await.err().expect("second unfiltered consumer");
    assert!(err.to_string().contains("nats consumer ls SWITCHBOARD_IN"), "{err}");
}

#[tokio::test]
async fn unacked_message_survives_a_server_restart() {
    let mut server = NatsServer::start().await;
    // Short pull requests: the one outstanding when the server dies is lost with it, and is
    // only renewed once it should have expired.
    let opts = NatsOptions { pull_wait: Duration::from_secs(1), ..options() };
    let bus = within(PATIENCE, "connect", NatsBus::connect(&server.url(), opts)).await.expect("connect");
    let mut deliveries = bus.inbound().await.expect("inbound");
    for content in ["taken", "waiting"] {
        publish_on(&bus, content).await;
    }
    let held = take(&mut deliveries).await;
    let held_content = content_of(&held);
    server.restart().await;
    let mut got = Vec::new();
    while got.len() < 2 {
        let delivery = within(Duration::from_secs(30), "delivery after restart", deliveries.next())
            .await
            .expect("stream ended")
            .expect("delivery");
        got.push((content_of(&delivery), delivery.attempt));
        within(PATIENCE, "ack", delivery.ack()).await.expect("ack");
    }
    drop(held);
    // The attempt count is not asserted: the server may not have written the consumer's
    // delivery state to disk before it was killed.
    let contents: HashSet<&str> = got.iter().map(|(c, _)| c.as_str()).collect();
    assert!(contents.contains(held_content.as_str()), "the unacked message came back: {got:?}");
    assert_eq!(contents, HashSet::from(["taken", "waiting"]));
    // The bus keeps working after the restart.
    publish_on(&bus, "after").await;
    assert_eq!(content_of(&take(&mut deliveries).await), "after");
}

async fn publish_on(bus: &NatsBus, content: &str) {
    within(PATIENCE, "publish", bus.publish_inbound(&inbound("c1", content))).await.expect("publish");
}

/// A dead letter whose JSON would exceed the server's max payload (escaping makes a control
/// character six bytes) is published cut to fit, saying so, rather than refused.
#[tokio::test]
async fn a_dead_letter_too_large_for_the_server_is_truncated_to_fit() {
    let server = NatsServer::start().await;
    let bus = connect(&server).await;
    let payload = "\u{1}".repeat(1_000_000);
    let letter =
        DeadLetter { subject: "switchboard.in.api.x".into(), reason: "bad".into(), payload, ..Default::default() };
    within(PATIENCE, "dead letter", bus.dead_letter(Flow::In, &letter)).await.expect("published");
    let kept = within(PATIENCE, "read", bus.dead_letters(Flow::In, 10)).await.expect("read");
    assert_eq!(kept.len(), 1);
    assert!(kept[0].truncated && kept[0].original_bytes == Some(1_000_000), "{:?}", kept[0].original_bytes);
    assert!(kept[0].payload.len() > 100_000, "kept {} bytes", kept[0].payload.len());
    assert!(kept[0].payload.bytes().all(|b| b == 1));
}

/// The oldest message still stored on a chat's subject is what a worker checks before it runs
/// a later one: acked messages are gone from the work queue, unacked ones are not.
#[tokio::test]
async fn stored_inbound_names_the_oldest_unacked_message_of_a_chat() {
    let server = NatsServer::start().await;
    let bus = connect(&server).await;
    let mut deliveries = bus.inbound().await.expect("inbound");
    for content in ["first", "second"] {
        publish_on(&bus, content).await;
    }
    within(PATIENCE, "other chat", bus.publish_inbound(&inbound("c2", "elsewhere"))).await.expect("publish");
    let first = take(&mut deliveries).await;
    let second = take(&mut deliveries).await;
    let (first_seq, second_seq) = (first.stream_seq.expect("seq"), second.stream_seq.expect("seq"));
    assert!(first_seq < second_seq);
    let subject = first.subject.clone();
    let seq_at = |from| {
        let (bus, subject) = (&bus, &subject);
        async move { bus.stored_inbound(subject, from).await.expect("lookup").map(|stored| stored.seq) }
    };
    let oldest = bus.stored_inbound(&subject, 1).await.expect("lookup").expect("stored");
    let first_id = first.decode::<InboundMessage>().expect("json").id;
    assert_eq!((oldest.seq, oldest.id.as_deref()), (first_seq, Some(first_id.as_str())), "with its message id");
    assert_eq!(seq_at(first_seq + 1).await, Some(second_seq));
    within(PATIENCE, "ack", first.ack()).await.expect("ack");
    assert_eq!(seq_at(1).await, Some(second_seq));
    within(PATIENCE, "ack", second.ack()).await.expect("ack");
    assert_eq!(seq_at(1).await, None);
}

/// A message the stream still holds after its turn was done (its ack lost with a server
/// killed at the wrong moment) can be removed, so its chat is not held up by it.
#[tokio::test]
async fn a_stored_inbound_message_can_be_discarded() {
    let server = NatsServer::start().await;
    let bus = connect(&server).await;
    let mut deliveries = bus.inbound().await.expect("inbound");
    publish_on(&bus, "kept by mistake").await;
    let delivery = take(&mut deliveries).await;
    let (seq, subject) = (delivery.stream_seq.expect("seq"), delivery.subject.clone());
    within(PATIENCE, "discard", bus.discard_inbound(seq)).await.expect("discard");
    assert_eq!(bus.stored_inbound(&subject, 1).await.expect("lookup"), None);
    within(PATIENCE, "again", bus.discard_inbound(seq)).await.expect("a message already gone is no error");
}

/// A worker finds an older message of its chat answered but still stored and removes it, while
/// that message's own worker acks it: the ack may win. However the message went (acked, or
/// removed before), wherever it sat in the stream, the removal is no error: an error here
/// hands the later message back for a second, a stall its chat feels.
#[tokio::test]
async fn discarding_a_message_already_acked_is_no_error() {
    let server = NatsServer::start().await;
    let bus = connect(&server).await;
    let mut deliveries = bus.inbound().await.expect("inbound");
    for content in ["first", "middle", "last", "kept"] {
        publish_on(&bus, content).await;
    }
    let mut taken = Vec::new();
    for _ in 0..4 {
        taken.push(Some(take(&mut deliveries).await));
    }
    let seqs: Vec<u64> = taken.iter().flatten().map(|delivery| delivery.stream_seq.expect("seq")).collect();
    let subject = taken[0].as_ref().expect("taken").subject.clone();
    // Acked in an order that leaves a gap in the middle, then the first, then the last.
    for index in [1, 0, 2] {
        let delivery = taken[index].take().expect("taken once");
        within(PATIENCE, "ack", delivery.ack()).await.expect("ack");
        within(PATIENCE, "discard", bus.discard_inbound(seqs[index])).await.expect("a message acked meanwhile is gone");
    }
    for &seq in &seqs[..3] {
        within(PATIENCE, "again", bus.discard_inbound(seq)).await.expect("a message already gone is no error");
    }
    let oldest = bus.stored_inbound(&subject, 1).await.expect("lookup").expect("stored");
    assert_eq!(oldest.seq, seqs[3], "the unacked message is still stored");
}

/// A deployment upgraded from a version whose workers' consumer stopped after 10 deliveries
/// gets the unlimited one at the next start (a message waiting for an older one of its chat is
/// handed back many times).
#[tokio::test]
async fn an_older_workers_consumer_is_updated_to_unlimited_deliveries() {
    use async_nats::jetstream::consumer::{AckPolicy, pull};
    let server = NatsServer::start().await;
    drop(connect(&server).await);
    let js = async_nats::jetstream::new(within(PATIENCE, "connect", async_nats::connect(server.url())).await.unwrap());
    let old = pull::Config {
        durable_name: Some("workers".into()),
        ack_policy: AckPolicy::Explicit,
        ack_wait: Duration::from_secs(30),
        max_deliver: 10,
        max_ack_pending: 64,
        ..pull::Config::default()
    };
    within(PATIENCE, "old consumer", js.create_consumer_on_stream(old, "SWITCHBOARD_IN")).await.expect("create");
    let bus = connect(&server).await;
    drop(within(PATIENCE, "inbound", bus.inbound()).await.expect("updated"));
    let stream = within(PATIENCE, "stream", js.get_stream("SWITCHBOARD_IN")).await.expect("stream");
    let info = within(PATIENCE, "info", stream.consumer_info("workers")).await.expect("consumer");
    assert_eq!((info.config.max_deliver, info.config.ack_wait), (-1, ACK_WAIT));
}

/// Deliveries the server has handed to the workers' consumer and not yet had acked.
async fn handed_out(server: &NatsServer) -> (u64, u64) {
    let client = within(PATIENCE, "connect", async_nats::connect(server.url())).await.expect("connect");
    let stream = async_nats::jetstream::new(client).get_stream("SWITCHBOARD_IN").await.expect("stream");
    let info = within(PATIENCE, "consumer", stream.consumer_info("workers")).await.expect("consumer");
    (u64::try_from(info.num_ack_pending).unwrap_or(u64::MAX), info.num_pending)
}

/// A consumer with room for four is sent four at once (one pull request, not one per message),
/// never more than it has room for: the rest stay on the server for other workers, and acks
/// make room for as many more.
#[tokio::test]
async fn a_batch_never_exceeds_the_room_the_consumer_has() {
    let h = harness().await;
    let server = h._server.as_ref().expect("nats harness");
    for n in 0..10 {
        publish(&h, &inbound(&format!("chat-{n}"), &format!("message {n}"))).await;
    }
    let mut deliveries = h.bus.inbound_within(4).await.expect("inbound");
    let mut held = vec![take(&mut deliveries).await];
    // Asked for one, sent all four it has room for.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(handed_out(server).await, (4, 6));
    for _ in 0..3 {
        held.push(take(&mut deliveries).await);
    }
    assert_eq!(handed_out(server).await, (4, 6));
    // Full, yet asked: the one asked for, not another four.
    held.push(take(&mut deliveries).await);
    assert_eq!(handed_out(server).await, (5, 5));
    for delivery in held.drain(..3) {
        within(PATIENCE, "ack", delivery.ack()).await.expect("ack");
    }
    // Two held: the next request asks for the two that fit.
    held.push(take(&mut deliveries).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(handed_out(server).await, (4, 3));
}
