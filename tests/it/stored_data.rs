//! What a store reads of a session when part of what it stored does not decode: that part is
//! left out (the rest is read), and only that: a store that cannot be reached still fails.

use std::sync::Arc;

use switchboard::provider::ChatMessage;
use switchboard::store::{HistorySummary, RunClaim, StoreError};

use crate::stores::{finished_turn, on_both_stores};

const SESSION: &str = "api:c";

fn texts(history: &[ChatMessage]) -> Vec<&str> {
    history.iter().map(|message| message.content.as_str()).collect()
}

on_both_stores! {
    async fn a_transcript_row_that_does_not_decode_is_left_out_of_the_history(fresh) {
        let store = Arc::clone(&fresh.store);
        finished_turn(&*store, SESSION, "in-1", "one").await;
        finished_turn(&*store, SESSION, "in-2", "two").await;
        let broken = fresh
            .execute("UPDATE transcript SET message_json = '{\"role\": 7}' WHERE message_json LIKE '%re: one%'")
            .await;
        assert_eq!(broken, 1);

        // Another handle: nothing of the session in its memory.
        let other = fresh.another().await;
        let conversation = other.conversation(SESSION, 50).await.unwrap();
        assert_eq!(texts(&conversation.history), ["one", "two", "re: two"]);
        let rows = other.history_rows(SESSION, 50).await.unwrap();
        assert_eq!(rows.len(), 3);
        // A turn after it reads the same, plus its own rows.
        finished_turn(&*other, SESSION, "in-3", "three").await;
        let conversation = other.conversation(SESSION, 50).await.unwrap();
        assert_eq!(texts(&conversation.history), ["one", "two", "re: two", "three", "re: three"]);
    }

    async fn a_summary_count_out_of_range_keeps_the_summary(fresh) {
        let store = Arc::clone(&fresh.store);
        finished_turn(&*store, SESSION, "in-1", "one").await;
        fresh.execute("UPDATE sessions SET summary = 'tea', compaction_count = -1").await;
        let other = fresh.another().await;
        let conversation = other.conversation(SESSION, 50).await.unwrap();
        assert_eq!(conversation.summary, Some(HistorySummary { text: "tea".to_owned(), compactions: 1 }));
        assert_eq!(texts(&conversation.history), ["one", "re: one"]);
        assert_eq!(other.session_info(SESSION).await.unwrap().compactions, 0);
    }

    async fn a_finished_runs_reply_that_does_not_decode_settles_its_redelivery(fresh) {
        let store = Arc::clone(&fresh.store);
        finished_turn(&*store, SESSION, "in-1", "one").await;
        assert_eq!(fresh.execute("UPDATE runs SET reply_json = 'not a reply', reply_delivered = false").await, 1);
        // The message comes again (its ack was lost): finished, nothing left to deliver, where
        // an error would give it back to the bus until it aged out.
        let other = fresh.another().await;
        let claim = other.claim_run("in-1", SESSION).await.unwrap();
        assert!(matches!(claim, RunClaim::Finished { reply: None, .. }), "{claim:?}");
    }

    async fn a_store_that_cannot_be_reached_still_fails(fresh) {
        let store = Arc::clone(&fresh.store);
        finished_turn(&*store, SESSION, "in-1", "one").await;
        store.close().await;
        let err = store.conversation(SESSION, 50).await.unwrap_err();
        assert!(matches!(err, StoreError::Database(_)), "{err:?}");
        assert!(store.session_prefs(SESSION).await.is_err());
    }
}
