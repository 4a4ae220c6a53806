//! What the API reads and keeps in the store, on both stores: sessions by who may see them,
//! their messages paged with the outbox in between, deletion, webhook posts taken once
//! however many API processes ask, and rows that no longer decode left out of all of them.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use switchboard_channels::api::store::{OutboxEntry, RunFilter, SessionScope};
use switchboard_channels::contract::OutboundMessage;

use switchboard::provider::{ChatMessage, ToolCall};
use switchboard::store::{RunClaim, RunOutcome};

use crate::stores::{completed, finished_turn as turn, on_both_stores};

fn outbox(id: &str, chat: &str, content: &str, webhook: bool) -> OutboxEntry {
    let message = OutboundMessage {
        id: id.into(),
        channel: "api".into(),
        chat_id: chat.into(),
        content: content.into(),
        ..OutboundMessage::default()
    };
    OutboxEntry { message, session_key: format!("api:{chat}"), in_transcript: false, webhook }
}

on_both_stores! {
    /// A chat token sees its identity's API chats under every agent, and nothing else.
    async fn sessions_are_listed_by_who_may_see_them(fresh) {
        let store = fresh.store.as_ref();
        for (session, inbound) in [("api:alice/k", "1"), ("helper/api:alice/x", "2"), ("api:alicia/k", "3"), ("telegram:42", "4")] {
            turn(store, session, inbound, "hi").await;
        }
        let scope = SessionScope::ApiChatsUnder("alice/".into());
        let mut keys: Vec<String> = store.sessions(&scope, None, 50).await.unwrap().into_iter().map(|s| s.key).collect();
        keys.sort();
        assert_eq!(keys, ["api:alice/k", "helper/api:alice/x"]);
        let all = store.sessions(&SessionScope::All, None, 50).await.unwrap();
        assert_eq!(all.len(), 4);
        assert!(all.iter().all(|s| s.messages == 2), "{all:?}");
        // `_` is no wildcard in an identity.
        let underscore = store.sessions(&SessionScope::ApiChatsUnder("a_ice/".into()), None, 50).await.unwrap();
        assert!(underscore.is_empty());
    }

    /// A chat that only received outbox lines has no session row: it is listed all the same,
    /// in its place by time and with its count, among the chats of whoever may see it.
    async fn a_chat_with_only_outbox_lines_is_listed(fresh) {
        let store = fresh.store.as_ref();
        store.keep_outbound(&outbox("o1", "alice/news", "first", false)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        turn(store, "api:alice/k", "1", "hi").await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        store.keep_outbound(&outbox("o2", "alice/news", "second", false)).await.unwrap();
        store.keep_outbound(&outbox("o3", "bob/news", "not alice's", false)).await.unwrap();
        let scope = SessionScope::ApiChatsUnder("alice/".into());
        let listed = store.sessions(&scope, None, 50).await.unwrap();
        let listed: Vec<(&str, u64)> = listed.iter().map(|s| (s.key.as_str(), s.messages)).collect();
        assert_eq!(listed, [("api:alice/news", 2), ("api:alice/k", 2)], "newest first");
        assert_eq!(store.sessions(&SessionScope::All, None, 50).await.unwrap().len(), 3);
        // Paged by the time of its newest line, as a session by its last change.
        let first = store.sessions(&scope, None, 1).await.unwrap();
        let rest = store.sessions(&scope, Some(first[0].updated_at), 1).await.unwrap();
        assert_eq!((first[0].key.as_str(), rest[0].key.as_str()), ("api:alice/news", "api:alice/k"));
    }

    /// A session's cost is the sum of its runs' known costs; a session whose runs had no price
    /// has none (not $0).
    async fn a_session_costs_what_its_runs_cost(fresh) {
        let store = fresh.store.as_ref();
        for (inbound, cost) in [("1", Some(0.25)), ("2", Some(0.5)), ("3", None)] {
            let RunClaim::New { run_id } = store.claim_run(inbound, "api:priced").await.unwrap() else { panic!("not new") };
            let exchange = vec![ChatMessage::user("hi"), ChatMessage::assistant("hello", Vec::new())];
            store.finish_run(&run_id, &RunOutcome { cost_usd: cost, ..completed(exchange) }).await.unwrap();
        }
        turn(store, "api:free", "4", "hi").await;
        store.keep_outbound(&outbox("o1", "news", "only received", false)).await.unwrap();
        let all = store.sessions(&SessionScope::All, None, 50).await.unwrap();
        let mut costs: Vec<(&str, Option<f64>)> = all.iter().map(|s| (s.key.as_str(), s.cost_usd)).collect();
        costs.sort_by_key(|(key, _)| *key);
        assert_eq!(costs, [("api:free", None), ("api:news", None), ("api:priced", Some(0.75))]);
    }

    /// Pages go back in time; outbox lines show between the turns they came between, once.
    async fn messages_page_back_with_the_outbox_between_the_turns(fresh) {
        let store = fresh.store.as_ref();
        turn(store, "api:k", "1", "one").await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(store.keep_outbound(&outbox("o1", "k", "reminder", false)).await.unwrap());
        assert!(!store.keep_outbound(&outbox("o1", "k", "reminder", false)).await.unwrap(), "kept twice");
        tokio::time::sleep(Duration::from_millis(5)).await;
        turn(store, "api:k", "2", "two").await;
        let page = store.session_messages("api:k", None, 50).await.unwrap();
        let lines: Vec<(&str, &str)> = page.messages.iter().map(|m| (m.role.as_str(), m.content.as_str())).collect();
        assert_eq!(lines, [("user", "one"), ("assistant", "re: one"), ("outbox", "reminder"), ("user", "two"), ("assistant", "re: two")]);
        assert_eq!(page.before, None);

        let newest = store.session_messages("api:k", None, 2).await.unwrap();
        let contents: Vec<&str> = newest.messages.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(contents, ["two", "re: two"]);
        let older = store.session_messages("api:k", newest.before, 2).await.unwrap();
        let contents: Vec<&str> = older.messages.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(contents, ["one", "re: one", "reminder"]);
    }

    /// Deleting a session removes what was said, keeps its runs, and the next turn starts afresh.
    async fn a_deleted_session_keeps_only_its_runs(fresh) {
        let store = fresh.store.as_ref();
        turn(store, "api:k", "1", "secret plan").await;
        store.keep_outbound(&outbox("o1", "k", "reminder", false)).await.unwrap();
        assert!(store.delete_session("api:k").await.unwrap());
        assert!(store.session_messages("api:k", None, 50).await.unwrap().messages.is_empty());
        assert!(store.history("api:k", 50).await.unwrap().is_empty());
        assert!(store.sessions(&SessionScope::All, None, 50).await.unwrap().is_empty());
        let filter = RunFilter { session: Some("api:k"), ..RunFilter::default() };
        assert_eq!(store.runs(&filter, 50).await.unwrap().len(), 1);
        assert!(!store.delete_session("api:nothing").await.unwrap());
    }

    /// Two API processes asking for due posts at once take each post once; a retry is due only
    /// at its time, and a post done is never due again.
    async fn webhook_posts_are_taken_once(fresh) {
        let (a, b) = (Arc::clone(&fresh.store), fresh.another().await);
        for n in 0..10 {
            a.keep_outbound(&outbox(&format!("o{n}"), "k", "hi", true)).await.unwrap();
        }
        a.keep_outbound(&outbox("quiet", "k", "no webhook", false)).await.unwrap();
        let lease = Duration::from_secs(60);
        let (first, second) = tokio::join!(a.claim_webhooks(lease, 10), b.claim_webhooks(lease, 10));
        let mut taken: Vec<i64> = first.unwrap().iter().chain(&second.unwrap()).map(|due| due.seq).collect();
        taken.sort();
        let count = taken.len();
        taken.dedup();
        assert_eq!((count, taken.len()), (10, 10), "a post was taken twice or not at all");
        assert!(a.claim_webhooks(lease, 10).await.unwrap().is_empty(), "leased posts are not due");

        a.webhook_outcome(taken[0], None).await.unwrap();
        a.webhook_outcome(taken[1], Some(Utc::now() - chrono::Duration::seconds(1))).await.unwrap();
        let again = a.claim_webhooks(lease, 10).await.unwrap();
        assert_eq!(again.iter().map(|due| (due.seq, due.attempt)).collect::<Vec<_>>(), [(taken[1], 2)]);
    }

    /// A transcript or outbox row broken by hand is left out of the session's messages, the
    /// run's tool calls and the webhook's posts; the rows beside it are all still there, and
    /// the broken post is given up rather than claimed again after every lease.
    async fn rows_that_do_not_decode_are_left_out_of_every_view(fresh) {
        let store = fresh.store.as_ref();
        let RunClaim::New { run_id } = store.claim_run("1", "api:k").await.unwrap() else { panic!("not new") };
        let call = ToolCall { id: "c1".into(), name: "current_time".into(), arguments: serde_json::json!({}) };
        let exchange = vec![
            ChatMessage::user("what time is it"),
            ChatMessage::assistant("", vec![call.clone()]),
            ChatMessage::tool_result(&call, "12:00"),
            ChatMessage::assistant("noon", Vec::new()),
        ];
        store.finish_run(&run_id, &completed(exchange)).await.unwrap();
        for id in ["o1", "o2"] {
            store.keep_outbound(&outbox(id, "k", &format!("reminder {id}"), true)).await.unwrap();
        }
        let broken = fresh
            .execute("UPDATE transcript SET message_json = 'not json' WHERE session_key = 'api:k' AND role = 'user'")
            .await;
        assert_eq!(broken, 1);
        assert_eq!(fresh.execute("UPDATE api_outbox SET message_json = '{' WHERE outbound_id = 'o1'").await, 1);

        let page = store.session_messages("api:k", None, 50).await.unwrap();
        let lines: Vec<(&str, &str)> = page.messages.iter().map(|m| (m.role.as_str(), m.content.as_str())).collect();
        assert_eq!(lines, [("assistant", ""), ("tool", "12:00"), ("assistant", "noon"), ("outbox", "reminder o2")]);
        let run = store.run(&run_id).await.unwrap().unwrap();
        let calls = run.tool_calls.unwrap();
        assert_eq!((calls.len(), calls[0]["result"].as_str()), (1, Some("12:00")), "{calls:?}");

        // A lease of nothing: whatever is not done is due again at once.
        let due = store.claim_webhooks(Duration::ZERO, 10).await.unwrap();
        assert_eq!(due.iter().map(|d| d.message.id.as_str()).collect::<Vec<_>>(), ["o2"]);
        let again = store.claim_webhooks(Duration::ZERO, 10).await.unwrap();
        assert_eq!(again.iter().map(|d| (d.message.id.as_str(), d.attempt)).collect::<Vec<_>>(), [("o2", 2)]);
    }
}
