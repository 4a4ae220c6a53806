//! DM pairing: the SQLite store against a real file, and `switchboard pairing …` through the
//! binary.

use std::sync::Arc;
use std::time::Duration;

use switchboard::config::{Identity, Level};
use switchboard::store::Database;
use switchboard::store::StoreError;
use switchboard::store::pairing::{CODE_ALPHABET, CodeProblem, PairingState};
use switchboard::store::sqlite::SqliteStore;

use crate::stores::on_both_stores;
use switchboard_channels::pairing::PairingRequest;

const HOUR: Duration = Duration::from_secs(3600);

/// Asks for a code that must be given.
async fn code_for(store: &Arc<dyn Database>, channel: &str, sender: &str, ttl: Duration) -> PairingRequest {
    store.request(channel, sender, &format!("{sender} name"), ttl, 1000).await.unwrap().unwrap()
}

fn problem(err: &StoreError) -> Option<CodeProblem> {
    match err {
        StoreError::PairingCode { problem, .. } => Some(*problem),
        _ => None,
    }
}

/// Runs `switchboard pairing …` with the data dir and returns (success, stdout, stderr).
fn pairing_cli(dir: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let mut full = vec!["pairing"];
    full.extend_from_slice(args);
    let (status, stderr, stdout) = crate::support::run_to_exit(dir, &full, &[("SWITCHBOARD_LOG", "warn")]);
    (status.success(), stdout, stderr)
}

#[tokio::test]
async fn the_owner_approves_a_code_on_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Database> = Arc::new(SqliteStore::open(&dir.path().join("switchboard.db")).await.unwrap());
    let code = store.request("telegram", "123", "alice", HOUR, 10).await.unwrap().unwrap().code;

    let (ok, out, err) = pairing_cli(dir.path(), &["list", "telegram"]);
    assert!(ok, "{err}");
    let row = out.lines().nth(1).unwrap();
    assert!(row.contains("123") && row.contains("alice") && row.contains(&code) && row.contains("expires"), "{out}");

    let (ok, out, err) = pairing_cli(dir.path(), &["approve", "telegram", &code.to_lowercase()]);
    assert!(ok, "{err}");
    assert_eq!(out, "approved telegram user 123 (alice) as user\n");
    assert!(store.is_approved("telegram", "123").await.unwrap());
    // The person the owner approved is a user (everyday tools, a user's budget), not a guest.
    assert_eq!(level_of(&store, "telegram:123").await, Level::User);

    let (ok, out, err) = pairing_cli(dir.path(), &["list"]);
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 2, "{out}");
    let row = out.lines().nth(1).unwrap();
    assert!(row.starts_with("telegram") && row.contains("123") && row.contains("approved 20"), "{out}");

    let (ok, out, err) = pairing_cli(dir.path(), &["revoke", "telegram", "123"]);
    assert!(ok && out.starts_with("revoked telegram user 123\n"), "{out}{err}");
    assert!(out.contains("switchboard users set-level telegram:123 guest"), "{out}");
    assert!(!store.is_approved("telegram", "123").await.unwrap());

    let (ok, out, err) = pairing_cli(dir.path(), &["add", "discord", "77", "--name", "bob"]);
    assert!(ok && out == "approved discord user 77 (bob) as user\n", "{out}{err}");
    assert!(store.is_approved("discord", "77").await.unwrap());
    assert_eq!(level_of(&store, "discord:77").await, Level::User);
}

#[tokio::test]
async fn the_owner_denies_a_code_on_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("switchboard.db");
    let store: Arc<dyn Database> = Arc::new(SqliteStore::open(&path).await.unwrap());
    let code = store.request("telegram", "5", "eve", HOUR, 10).await.unwrap().unwrap().code;
    store.close().await;

    let (ok, out, err) = pairing_cli(dir.path(), &["deny", "telegram", &code]);
    assert!(ok, "{err}");
    assert_eq!(out, "denied telegram user 5 (eve); they get no new code for a day\n");
    let (ok, out, _) = pairing_cli(dir.path(), &["list"]);
    assert!(ok && out.contains("(no pending or approved senders)"), "{out}");
    assert!(!out.contains("DECISION"), "decisions only when asked: {out}");
    // The decision, with who made it and when.
    let (ok, out, err) = pairing_cli(dir.path(), &["list", "--all"]);
    assert!(ok, "{err}");
    let decided = out.lines().find(|line| line.contains(&code)).unwrap_or_else(|| panic!("{out}"));
    let fields: Vec<&str> = decided.split_whitespace().collect();
    assert_eq!(fields[..6], ["telegram", "5", "eve", code.as_str(), "denied", "cli"], "{out}");
    assert!(decided.ends_with(" UTC") && fields[6].starts_with("20"), "{out}");
    let (ok, _, err) = pairing_cli(dir.path(), &["deny", "telegram", &code]);
    assert!(!ok && err.contains("was already used"), "{err}");

    let store: Arc<dyn Database> = Arc::new(SqliteStore::open(&path).await.unwrap());
    assert!(store.request("telegram", "5", "eve", HOUR, 10).await.unwrap().is_none(), "no new code for a day");
    assert!(!store.is_approved("telegram", "5").await.unwrap());
    store.close().await;
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(&path);
    let mut connection = sqlx::ConnectOptions::connect(&options).await.unwrap();
    let decided: (String, String) =
        sqlx::query_as("SELECT decision, decided_by FROM pairing_requests").fetch_one(&mut connection).await.unwrap();
    assert_eq!(decided, ("denied".to_owned(), "cli".to_owned()));
}

/// The stored level of the user behind `identity` (who exists already).
async fn level_of(store: &Arc<dyn Database>, identity: &str) -> Level {
    let identity: Identity = identity.parse().unwrap();
    store.resolve_user(&identity, "", Level::Guest).await.unwrap().level
}

#[tokio::test]
async fn the_configured_approved_level_is_given_and_a_higher_level_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Database> = Arc::new(SqliteStore::open(&dir.path().join("switchboard.db")).await.unwrap());
    // A stranger who wrote before (a guest in the store), and an admin who asks for a code.
    let stranger = store.request("telegram", "5", "eve", HOUR, 10).await.unwrap().unwrap().code;
    store.resolve_user(&"telegram:5".parse().unwrap(), "eve", Level::Guest).await.unwrap();
    let admin = store.request("telegram", "6", "ada", HOUR, 10).await.unwrap().unwrap().code;
    store.set_level(&"telegram:6".parse().unwrap(), Level::Admin).await.unwrap();
    store.close().await;

    let approve = |code: &str| {
        let args = ["pairing", "approve", "telegram", code];
        crate::support::run_to_exit(
            dir.path(),
            &args,
            &[("SWITCHBOARD_LOG", "warn"), ("SWITCHBOARD_USERS__APPROVED_LEVEL", "admin")],
        )
    };
    let (status, err, out) = approve(&stranger);
    assert!(status.success() && out == "approved telegram user 5 (eve) as admin\n", "{out}{err}");
    let (status, err, out) = approve(&admin);
    assert!(status.success() && out == "approved telegram user 6 (ada) as admin\n", "{out}{err}");

    let store: Arc<dyn Database> = Arc::new(SqliteStore::open(&dir.path().join("switchboard.db")).await.unwrap());
    assert_eq!(level_of(&store, "telegram:5").await, Level::Admin);
    // Approving never lowers: an owner approved at the default level stays owner.
    store.set_level(&"telegram:6".parse().unwrap(), Level::Owner).await.unwrap();
    let approval = store.approve_sender("telegram", "6", "", Level::User).await.unwrap();
    assert_eq!((approval.added, approval.level), (false, Level::Owner));
    assert_eq!(level_of(&store, "telegram:6").await, Level::Owner);
}

#[tokio::test]
async fn bad_codes_and_channels_fail_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, out, err) = pairing_cli(dir.path(), &["approve", "telegram", "ABCD-EFGH"]);
    assert!(!ok && out.is_empty(), "{out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("pairing code ABCDEFGH is unknown"), "{err}");

    let store: Arc<dyn Database> = Arc::new(SqliteStore::open(&dir.path().join("switchboard.db")).await.unwrap());
    let code = store.request("telegram", "1", "", Duration::ZERO, 10).await.unwrap().unwrap().code;
    let (ok, _, err) = pairing_cli(dir.path(), &["approve", "telegram", &code]);
    assert!(!ok && err.lines().count() == 1 && err.contains("has expired"), "{err}");

    let (ok, _, err) = pairing_cli(dir.path(), &["approve", "slack", "ABCDEFGH"]);
    assert!(!ok && err.contains("use telegram, discord or matrix"), "{err}");
}

on_both_stores! {
    async fn the_same_sender_gets_the_same_code_again(fresh) {
        let store = Arc::clone(&fresh.store);
        let first = code_for(&store, "telegram", "1", HOUR).await;
        assert!(first.new);
        let again = code_for(&store, "telegram", "1", HOUR).await;
        assert_eq!(again, PairingRequest { new: false, ..first.clone() });
        // Another sender, and the same id on another channel, get codes of their own.
        assert_ne!(code_for(&store, "telegram", "2", HOUR).await.code, first.code);
        assert_ne!(code_for(&store, "discord", "1", HOUR).await.code, first.code);
    }

    async fn codes_are_eight_characters_of_the_alphabet(fresh) {
        let store = Arc::clone(&fresh.store);
        for sender in 0..50 {
            let code = code_for(&store, "telegram", &sender.to_string(), HOUR).await.code;
            assert_eq!(code.len(), 8, "{code}");
            assert!(code.bytes().all(|b| CODE_ALPHABET.contains(&b)), "{code}");
        }
    }

    async fn an_expired_code_is_replaced_and_cannot_be_approved(fresh) {
        let store = Arc::clone(&fresh.store);
        let old = code_for(&store, "telegram", "1", Duration::from_millis(1)).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let fresh = code_for(&store, "telegram", "1", HOUR).await;
        assert!(fresh.new);
        assert_ne!(fresh.code, old.code);

        let err = store.approve_pairing("telegram", &old.code, Level::User, "cli").await.unwrap_err();
        assert_eq!(problem(&err), Some(CodeProblem::Expired), "{err}");
        assert!(err.to_string().contains("expired"), "{err}");
        assert!(!store.is_approved("telegram", "1").await.unwrap());
        // A ttl of zero is expired at once.
        let zero = code_for(&store, "telegram", "2", Duration::ZERO).await;
        let err = store.approve_pairing("telegram", &zero.code, Level::User, "cli").await.unwrap_err();
        assert_eq!(problem(&err), Some(CodeProblem::Expired), "{err}");
    }

    async fn the_pending_cap_refuses_new_senders_but_not_waiting_ones(fresh) {
        let store = Arc::clone(&fresh.store);
        let first = store.request("telegram", "1", "one", HOUR, 2).await.unwrap().unwrap();
        store.request("telegram", "2", "two", HOUR, 2).await.unwrap().unwrap();
        assert_eq!(store.request("telegram", "3", "three", HOUR, 2).await.unwrap(), None);
        // A sender who already has a code keeps getting it.
        let again = store.request("telegram", "1", "one", HOUR, 2).await.unwrap().unwrap();
        assert_eq!((again.code, again.new), (first.code.clone(), false));
        // The cap is per channel.
        assert!(store.request("discord", "3", "three", HOUR, 2).await.unwrap().is_some());
        // An approved code no longer counts.
        store.approve_pairing("telegram", &first.code, Level::User, "cli").await.unwrap();
        assert!(store.request("telegram", "3", "three", HOUR, 2).await.unwrap().is_some());
    }

    async fn approval_holds_on_its_channel_until_revoked(fresh) {
        let store = Arc::clone(&fresh.store);
        let request = code_for(&store, "telegram", "123", HOUR).await;
        assert!(!store.is_approved("telegram", "123").await.unwrap());
        let approved = store.approve_pairing("telegram", &request.code, Level::User, "cli").await.unwrap();
        assert_eq!((approved.channel.as_str(), approved.sender_id.as_str()), ("telegram", "123"));
        assert_eq!(approved.sender_name, "123 name");
        assert!(store.is_approved("telegram", "123").await.unwrap());
        assert!(!store.is_approved("discord", "123").await.unwrap());

        // The code is spent.
        let err = store.approve_pairing("telegram", &request.code, Level::User, "cli").await.unwrap_err();
        assert_eq!(problem(&err), Some(CodeProblem::Used), "{err}");

        assert!(store.revoke_pairing("telegram", "123").await.unwrap());
        assert!(!store.is_approved("telegram", "123").await.unwrap());
        assert!(!store.revoke_pairing("telegram", "123").await.unwrap());
    }

    async fn a_denied_sender_is_not_let_in_nor_given_a_new_code(fresh) {
        let store = Arc::clone(&fresh.store);
        let request = code_for(&store, "telegram", "66", HOUR).await;
        let denied = store.deny_pairing("telegram", &request.code, "telegram:1").await.unwrap();
        assert_eq!((denied.sender_id.as_str(), denied.sender_name.as_str()), ("66", "66 name"));
        assert!(!store.is_approved("telegram", "66").await.unwrap());
        // Decided: neither an approval nor a second denial goes through ...
        let err = store.approve_pairing("telegram", &request.code, Level::User, "cli").await.unwrap_err();
        assert_eq!(problem(&err), Some(CodeProblem::Used), "{err}");
        let err = store.deny_pairing("telegram", &request.code, "cli").await.unwrap_err();
        assert_eq!(problem(&err), Some(CodeProblem::Used), "{err}");
        // ... and writing again does not ask the owner again; other senders still get codes.
        assert_eq!(store.request("telegram", "66", "", HOUR, 10).await.unwrap(), None);
        assert!(code_for(&store, "telegram", "67", HOUR).await.new);
        // Approving by id still works: the owner may change their mind.
        assert!(store.approve_sender("telegram", "66", "", Level::User).await.unwrap().added);
    }

    async fn approval_ignores_case_spaces_and_dashes(fresh) {
        let store = Arc::clone(&fresh.store);
        let code = code_for(&store, "telegram", "1", HOUR).await.code;
        let typed = format!(" {}-{} ", code[..4].to_lowercase(), code[4..].to_lowercase());
        store.approve_pairing("telegram", &typed, Level::User, "cli").await.unwrap();
        assert!(store.is_approved("telegram", "1").await.unwrap());
    }

    async fn unknown_codes_and_codes_of_another_channel_are_refused(fresh) {
        let store = Arc::clone(&fresh.store);
        let code = code_for(&store, "telegram", "1", HOUR).await.code;
        let err = store.approve_pairing("discord", &code, Level::User, "cli").await.unwrap_err();
        assert_eq!(problem(&err), Some(CodeProblem::Unknown), "{err}");
        let err = store.approve_pairing("telegram", "ZZZZZZZZ", Level::User, "cli").await.unwrap_err();
        assert_eq!(problem(&err), Some(CodeProblem::Unknown), "{err}");
        assert!(!store.is_approved("telegram", "1").await.unwrap());
    }

    async fn concurrent_requests_of_one_sender_get_one_code(fresh) {
        let store = Arc::clone(&fresh.store);
        let store = Arc::new(store);
        let tasks: Vec<_> = (0..20)
            .map(|_| {
                let store = Arc::clone(&store);
                tokio::spawn(async move { code_for(&store, "telegram", "1", HOUR).await })
            })
            .collect();
        let mut requests = Vec::new();
        for task in tasks {
            requests.push(task.await.unwrap());
        }
        assert!(requests.iter().all(|r| r.code == requests[0].code), "{requests:?}");
        assert_eq!(requests.iter().filter(|r| r.new).count(), 1, "{requests:?}");
        assert_eq!(store.list_pairings(None).await.unwrap().len(), 1);
    }

    async fn the_list_shows_pending_and_approved_senders(fresh) {
        let store = Arc::clone(&fresh.store);
        let waiting = code_for(&store, "telegram", "1", HOUR).await;
        code_for(&store, "telegram", "2", Duration::ZERO).await;
        assert!(store.approve_sender("discord", "9", "nine", Level::User).await.unwrap().added);
        assert!(!store.approve_sender("discord", "9", "", Level::User).await.unwrap().added);

        let all = store.list_pairings(None).await.unwrap();
        assert_eq!(all.len(), 2, "the expired code is not listed: {all:?}");
        assert_eq!(all[0].state, PairingState::Pending { code: waiting.code, expires_at: waiting.expires_at });
        assert_eq!((all[0].sender_id.as_str(), all[0].sender_name.as_str()), ("1", "1 name"));
        assert!(matches!(all[1].state, PairingState::Approved { .. }), "{all:?}");
        assert_eq!((all[1].channel.as_str(), all[1].sender_name.as_str()), ("discord", "nine"));

        let discord = store.list_pairings(Some("discord")).await.unwrap();
        assert_eq!(discord.len(), 1);
        assert!(store.is_approved("discord", "9").await.unwrap());
    }

    async fn approving_by_id_spends_the_senders_code(fresh) {
        let store = Arc::clone(&fresh.store);
        let code = code_for(&store, "telegram", "1", HOUR).await.code;
        store.approve_sender("telegram", "1", "", Level::User).await.unwrap();
        let entries = store.list_pairings(None).await.unwrap();
        assert_eq!(entries.len(), 1, "no pending entry left: {entries:?}");
        let err = store.approve_pairing("telegram", &code, Level::User, "cli").await.unwrap_err();
        assert_eq!(problem(&err), Some(CodeProblem::Used), "{err}");
    }
}
