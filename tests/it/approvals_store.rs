//! The approval store (`switchboard::store::approvals`) on SQLite and PostgreSQL alike: the
//! list the CLI, `/pending` and the console show; requests closed by `/stop` or the timeout;
//! "Allow for this chat" grants; and a restart closing the requests of the runs it ended.

use std::time::Duration;

use switchboard::store::approvals::{ApprovalStatus, DecideProblem, NewApproval, RESTART_REASON, Verdict};

use crate::stores::{Fresh, on_both_stores};

const WAIT: Duration = Duration::from_secs(600);

/// A call of `tool` in `chat` (a Telegram direct chat) by run `run`.
fn call(run: &str, chat: &str, tool: &str) -> NewApproval {
    NewApproval {
        run_id: run.into(),
        session_key: format!("telegram:{chat}"),
        channel: "telegram".into(),
        chat_id: chat.into(),
        tool: tool.into(),
        arguments: r#"{"command":"ls"}"#.into(),
        requested_by: format!("telegram:{chat}"),
    }
}

/// Requests `request` and returns its code; `later_ms` after the requests before it, so the
/// order by time is the test's (two requests can share a millisecond).
async fn ask(fresh: &Fresh, request: &NewApproval, later_ms: i64) -> String {
    let code = fresh.store.request_approval(request, WAIT).await.unwrap().code;
    let moved = fresh
        .execute(&format!("UPDATE approvals SET requested_at = requested_at + {later_ms} WHERE code = '{code}'"))
        .await;
    assert_eq!(moved, 1);
    code
}

async fn status(fresh: &Fresh, code: &str) -> ApprovalStatus {
    fresh.store.approval(code).await.unwrap().unwrap().status
}

on_both_stores! {
    /// Newest first, every field as stored, the open ones alone when asked, cut at the limit.
    async fn list_approvals_shows_the_newest_first_and_the_open_ones_alone(fresh) {
        let store = &fresh.store;
        let allowed = ask(fresh, &call("r1", "2", "exec"), 0).await;
        let cancelled = ask(fresh, &call("r2", "3", "write_file"), 1000).await;
        let open = ask(fresh, &call("r3", "4", "exec"), 2000).await;
        store.decide_approval(&allowed, Verdict::AllowOnce, "telegram:9").await.unwrap().unwrap();
        assert!(store.close_approval(&cancelled, ApprovalStatus::Cancelled, "the run was stopped").await.unwrap());

        let all = store.list_approvals(false, 10).await.unwrap();
        let codes: Vec<&str> = all.iter().map(|approval| approval.code.as_str()).collect();
        assert_eq!(codes, [open.as_str(), cancelled.as_str(), allowed.as_str()]);
        let decided = &all[2];
        assert_eq!(decided.request, call("r1", "2", "exec"));
        assert_eq!((decided.status, decided.scope.as_str(), decided.decided_by.as_str()), (ApprovalStatus::Allowed, "once", "telegram:9"));
        assert!(decided.decided_at.is_some_and(|at| at >= decided.requested_at));
        assert_eq!(decided.expires_at - decided.requested_at, chrono::Duration::seconds(600));
        assert_eq!((all[1].status, all[1].reason.as_str()), (ApprovalStatus::Cancelled, "the run was stopped"));
        assert_eq!((all[0].status, all[0].decided_at), (ApprovalStatus::Pending, None));

        let pending = store.list_approvals(true, 10).await.unwrap();
        assert_eq!(pending.iter().map(|approval| approval.code.as_str()).collect::<Vec<_>>(), [open.as_str()]);
        let newest_two = store.list_approvals(false, 2).await.unwrap();
        assert_eq!(newest_two.iter().map(|approval| approval.code.as_str()).collect::<Vec<_>>(), [open.as_str(), cancelled.as_str()]);
        assert!(store.list_approvals(false, 0).await.unwrap().is_empty());
    }

    /// `/stop` closes a request as cancelled, the timeout as expired, once: a closed request
    /// is neither closed again nor decided, and a decided one is not closed.
    async fn close_approval_closes_an_open_request_once(fresh) {
        let store = &fresh.store;
        let stopped = ask(fresh, &call("r1", "2", "exec"), 0).await;
        assert!(store.close_approval(&stopped, ApprovalStatus::Cancelled, "the run was stopped").await.unwrap());
        let closed = store.approval(&stopped).await.unwrap().unwrap();
        assert_eq!((closed.status, closed.reason.as_str(), closed.decided_by.as_str()), (ApprovalStatus::Cancelled, "the run was stopped", ""));
        assert!(closed.decided_at.is_some());
        assert!(!store.close_approval(&stopped, ApprovalStatus::Expired, "nobody decided in time").await.unwrap());
        assert_eq!(status(fresh, &stopped).await, ApprovalStatus::Cancelled);
        let late = store.decide_approval(&stopped, Verdict::AllowOnce, "telegram:9").await.unwrap();
        assert_eq!(late.unwrap_err(), DecideProblem::Closed(ApprovalStatus::Cancelled));

        // Past its time and not yet closed by its run: no decision takes it; the run closes it.
        let timed_out = fresh.store.request_approval(&call("r2", "3", "exec"), Duration::ZERO).await.unwrap().code;
        let late = store.decide_approval(&timed_out, Verdict::AllowOnce, "telegram:9").await.unwrap();
        assert_eq!(late.unwrap_err(), DecideProblem::Closed(ApprovalStatus::Expired));
        assert_eq!(status(fresh, &timed_out).await, ApprovalStatus::Pending);
        assert!(store.close_approval(&timed_out, ApprovalStatus::Expired, "nobody decided in time").await.unwrap());
        let expired = store.approval(&timed_out).await.unwrap().unwrap();
        assert_eq!((expired.status, expired.reason.as_str()), (ApprovalStatus::Expired, "nobody decided in time"));

        let denied = ask(fresh, &call("r3", "4", "exec"), 0).await;
        store.decide_approval(&denied, Verdict::Deny, "telegram:9").await.unwrap().unwrap();
        assert!(!store.close_approval(&denied, ApprovalStatus::Cancelled, "the run was stopped").await.unwrap());
        assert_eq!(status(fresh, &denied).await, ApprovalStatus::Denied);
        assert!(!store.close_approval("NOSUCHCD", ApprovalStatus::Cancelled, "the run was stopped").await.unwrap());
        let unknown = store.decide_approval("NOSUCHCD", Verdict::Deny, "telegram:9").await.unwrap();
        assert_eq!(unknown.unwrap_err(), DecideProblem::Unknown);
    }

    /// "Allow for this chat" grants that tool in that chat, seen by every process; allowing
    /// once or denying grants nothing.
    async fn a_chat_grant_covers_one_tool_in_one_chat(fresh) {
        let store = &fresh.store;
        let once = ask(fresh, &call("r1", "2", "exec"), 0).await;
        store.decide_approval(&once, Verdict::AllowOnce, "telegram:9").await.unwrap().unwrap();
        let denied = ask(fresh, &call("r2", "2", "exec"), 0).await;
        store.decide_approval(&denied, Verdict::Deny, "telegram:9").await.unwrap().unwrap();
        assert!(!store.chat_grant("telegram:2", "exec").await.unwrap());

        let chat = ask(fresh, &call("r3", "2", "exec"), 0).await;
        let allowed = store.decide_approval(&chat, Verdict::AllowChat, "telegram:9").await.unwrap().unwrap();
        assert_eq!(allowed.code, chat);
        assert_eq!(store.approval(&chat).await.unwrap().unwrap().scope, "chat");
        let other = fresh.another().await;
        assert!(other.chat_grant("telegram:2", "exec").await.unwrap(), "another process sees the grant");
        assert!(!store.chat_grant("telegram:2", "write_file").await.unwrap(), "another tool");
        assert!(!store.chat_grant("telegram:3", "exec").await.unwrap(), "another chat");

        // Allowed for the chat again (asked before the grant): the grant stands, no error.
        let again = ask(fresh, &call("r4", "2", "exec"), 0).await;
        store.decide_approval(&again, Verdict::AllowChat, "telegram:1").await.unwrap().unwrap();
        assert!(store.chat_grant("telegram:2", "exec").await.unwrap());
    }

    /// A restart closes the open requests of a run it ended as expired and returns the newest
    /// (whose chat is told); decided requests and other runs' stay as they are.
    async fn close_run_approvals_expires_one_runs_open_requests(fresh) {
        let store = &fresh.store;
        let decided = ask(fresh, &call("r1", "2", "exec"), 0).await;
        store.decide_approval(&decided, Verdict::AllowOnce, "telegram:9").await.unwrap().unwrap();
        let older = ask(fresh, &call("r1", "2", "exec"), 1000).await;
        let newest = ask(fresh, &call("r1", "2", "write_file"), 2000).await;
        let elsewhere = ask(fresh, &call("r2", "3", "exec"), 3000).await;

        let closed = store.close_run_approvals("r1", RESTART_REASON).await.unwrap().unwrap();
        assert_eq!((closed.code.as_str(), closed.request.tool.as_str()), (newest.as_str(), "write_file"));
        for code in [&older, &newest] {
            let expired = store.approval(code).await.unwrap().unwrap();
            assert_eq!((expired.status, expired.reason.as_str()), (ApprovalStatus::Expired, RESTART_REASON), "{code}");
        }
        assert_eq!(status(fresh, &decided).await, ApprovalStatus::Allowed);
        assert_eq!(status(fresh, &elsewhere).await, ApprovalStatus::Pending);
        let late = store.decide_approval(&newest, Verdict::AllowOnce, "telegram:9").await.unwrap();
        assert_eq!(late.unwrap_err(), DecideProblem::Closed(ApprovalStatus::Expired));

        assert!(store.close_run_approvals("r1", RESTART_REASON).await.unwrap().is_none(), "nothing left open");
        assert!(store.close_run_approvals("no-such-run", RESTART_REASON).await.unwrap().is_none());
    }
}
