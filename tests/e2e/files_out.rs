//! Files out: what a run writes under `outbox/` reaches the person with the reply — as
//! Telegram photos and documents, Discord attachments, API download links — once, also across
//! a crash; a file over the platform's limit is named in a note instead.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use switchboard_channels::api::access::token_sha256_hex;
use switchboard_testkit::fake_discord::{self, FakeDiscord, events};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};
use switchboard_testkit::fake_telegram::{self, Failure, FakeTelegram, updates};

use crate::discord::{ALICE as DISCORD_ALICE, DM, replies as discord_replies};
use crate::support::{Daemon, Launch};
use crate::telegram::{ALICE, replies_or_logs};

/// The daemon on the fake Bot API, Alice an owner (she may use the file tools and exec).
fn telegram<'a>(launch: Launch<'a>, fake: &FakeTelegram) -> Launch<'a> {
    crate::telegram::telegram(launch, fake).env("SWITCHBOARD_USERS__OWNERS", &format!("[\"telegram:{ALICE}\"]"))
}

fn write(path: &str, content: &str) -> (String, Value) {
    ("write_file".into(), json!({"path": path, "content": content}))
}

/// What each sent message was: (method, text or file name).
fn shown(sent: &[fake_telegram::SentMessage]) -> Vec<(String, String)> {
    let what = |m: &fake_telegram::SentMessage| m.file_name.clone().or(m.text.clone()).unwrap_or_default();
    sent.iter().map(|m| (m.method.clone(), what(m))).collect()
}

/// Asserts what was sent, in order, as (method, text or file name).
fn assert_shown(sent: &[fake_telegram::SentMessage], expected: &[(&str, &str)], daemon: &Daemon) {
    let expected: Vec<(String, String)> = expected.iter().map(|(m, w)| ((*m).to_owned(), (*w).to_owned())).collect();
    assert_eq!(shown(sent), expected, "{}", daemon.logs());
}

/// `switchboard run` in `dir` on the fake Bot API and model, up and answering.
async fn started(dir: &Path, name: &str, llm: &FakeLlm, fake: &FakeTelegram) -> Daemon {
    let mut daemon = telegram(Launch::new(dir, name, &["run"]).llm(&llm.base_url()), fake).spawn();
    daemon.wait_healthy().await;
    daemon
}

/// Starts the daemon again (the first one was killed) and checks that the chat got `text`, then
/// the document `file`, each once.
async fn restarted_sends(dir: &Path, llm: &FakeLlm, fake: &FakeTelegram, text: &str, file: (&str, &[u8])) {
    let second = started(dir, "tg-2", llm, fake).await;
    let sent = replies_or_logs(fake, 2, Some(&second)).await;
    assert_shown(&sent, &[("sendmessage", text), ("senddocument", file.0)], &second);
    assert_eq!(sent[1].file_bytes.as_deref(), Some(file.1));
}

/// Files left in the workspace's outbox folders of runs (none once a reply went out).
fn left_in_runs(data_dir: &Path) -> Vec<String> {
    let runs = data_dir.join("workspace/outbox/runs");
    let Ok(entries) = std::fs::read_dir(&runs) else { return Vec::new() };
    entries.flatten().map(|entry| entry.path().display().to_string()).collect()
}

#[tokio::test]
async fn files_written_to_the_outbox_reach_telegram_with_the_reply_once() {
    let (llm, fake) = (FakeLlm::start().await, FakeTelegram::start().await);
    llm.push(Scripted::ToolCalls(vec![write("outbox/report.csv", "a,b\n1,2\n"), write("outbox/chart.png", "png")]));
    llm.push(Scripted::Text("Here are the report and the chart.".into()));
    let dir = tempfile::tempdir().unwrap();
    let daemon = started(dir.path(), "tg", &llm, &fake).await;
    fake.push_message(updates::private_text(ALICE, "alice", 1, "the quarterly numbers, please"));
    let sent = replies_or_logs(&fake, 3, Some(&daemon)).await;
    let expected = [
        ("sendmessage", "Here are the report and the chart."),
        ("sendphoto", "chart.png"),
        ("senddocument", "report.csv"),
    ];
    assert_shown(&sent, &expected, &daemon);
    assert_eq!(sent[2].file_bytes.as_deref(), Some(&b"a,b\n1,2\n"[..]));
    assert!(sent.iter().all(|m| m.chat_id == ALICE));
    let result = llm.requests()[1]["messages"].to_string();
    assert!(result.contains("created `outbox/report.csv` (8 bytes); it goes with your reply"), "{result}");
    assert!(left_in_runs(dir.path()).is_empty(), "{:?}", left_in_runs(dir.path()));

    // The next answer carries nothing more: the files left the outbox with the first.
    fake.push_message(updates::private_text(ALICE, "alice", 2, "thanks"));
    let sent = replies_or_logs(&fake, 4, Some(&daemon)).await;
    assert_eq!(shown(&sent[3..]), [("sendmessage".to_owned(), "echo: thanks".to_owned())]);
}

#[tokio::test]
async fn a_file_over_telegrams_limit_is_named_with_its_size_and_the_limit() {
    let (llm, fake) = (FakeLlm::start().await, FakeTelegram::start().await);
    let command = "truncate -s 60M \"$OUTBOX/video.mp4\" && echo small > \"$OUTBOX/notes.txt\"";
    llm.push(Scripted::ToolCalls(vec![("exec".into(), json!({"command": command}))]));
    llm.push(Scripted::Text("The recording and my notes.".into()));
    let dir = tempfile::tempdir().unwrap();
    let daemon = started(dir.path(), "tg", &llm, &fake).await;
    fake.push_message(updates::private_text(ALICE, "alice", 1, "send me the recording"));
    let sent = replies_or_logs(&fake, 3, Some(&daemon)).await;
    let note = "(video.mp4 was not sent: it is 60 MB, more than the 50 MB Telegram accepts from bots)";
    let expected =
        [("sendmessage", "The recording and my notes."), ("senddocument", "notes.txt"), ("sendmessage", note)];
    assert_shown(&sent, &expected, &daemon);
    assert!(fake.calls_to("senddocument").iter().all(|call| !call.failed), "nothing over the limit was uploaded");
}

/// The daemon is killed while the reply's file is on its way (its text already in the chat):
/// after the restart the file arrives, and the text is not sent again.
#[tokio::test]
async fn a_crash_while_the_file_goes_out_sends_neither_text_nor_file_twice() {
    let (llm, fake) = (FakeLlm::start().await, FakeTelegram::start().await);
    llm.push(Scripted::ToolCalls(vec![write("outbox/report.csv", "x,y\n")]));
    llm.push(Scripted::Text("The report.".into()));
    fake.fail_next("sendDocument", Failure::Hang(Duration::from_secs(30)));
    let dir = tempfile::tempdir().unwrap();
    let mut first = started(dir.path(), "tg-1", &llm, &fake).await;
    fake.push_message(updates::private_text(ALICE, "alice", 1, "the report"));
    fake.wait_for_held("sendDocument", Duration::from_secs(20)).await;
    first.kill_hard();

    restarted_sends(dir.path(), &llm, &fake, "The report.", ("report.csv", b"x,y\n")).await;
    assert_eq!(llm.requests().len(), 2, "the run was not run again");
}

/// The daemon is killed in the middle of the run, after the model wrote the file: the run is
/// done again after the restart and the file, written by the first attempt, still goes out.
#[tokio::test]
async fn a_run_resumed_after_a_crash_sends_the_file_its_first_attempt_wrote() {
    let (llm, fake) = (FakeLlm::start().await, FakeTelegram::start().await);
    llm.push(Scripted::ToolCalls(vec![write("outbox/draft.txt", "first attempt")]));
    llm.push(Scripted::Delay(Duration::from_secs(60), Box::new(Scripted::Text("never".into()))));
    llm.push(Scripted::Text("Here is the draft.".into()));
    let dir = tempfile::tempdir().unwrap();
    let mut first = started(dir.path(), "tg-1", &llm, &fake).await;
    fake.push_message(updates::private_text(ALICE, "alice", 1, "a draft"));
    llm.wait_for_requests(2, Duration::from_secs(10)).await;
    first.kill_hard();

    restarted_sends(dir.path(), &llm, &fake, "Here is the draft.", ("draft.txt", b"first attempt")).await;
}

const GUILD: u64 = 500;
const CHANNEL: u64 = 501;

/// The daemon on the fake Discord, Alice an owner.
fn discord<'a>(launch: Launch<'a>, fake: &FakeDiscord) -> Launch<'a> {
    crate::discord::discord(launch, fake).env("SWITCHBOARD_USERS__OWNERS", &format!("[\"discord:{DISCORD_ALICE}\"]"))
}

/// In a DM the limit is 10 MiB; in a server at boost level 2, which the adapter asks Discord
/// about, the same 12 MiB file goes out.
#[tokio::test]
async fn discord_attachments_follow_the_limit_discord_reports() {
    let (llm, fake) = (FakeLlm::start().await, FakeDiscord::start().await);
    let command = "truncate -s 12M \"$OUTBOX/video.mp4\" && printf 'a,b' > \"$OUTBOX/table.csv\"";
    for _ in 0..2 {
        llm.push(Scripted::ToolCalls(vec![("exec".into(), json!({"command": command}))]));
        llm.push(Scripted::Text("Your files.".into()));
    }
    fake.add_guild(GUILD, &[]);
    fake.add_channel(events::text_channel(GUILD, CHANNEL));
    fake.set_premium_tier(GUILD, 2);
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = discord(Launch::new(dir.path(), "dc", &["run"]).llm(&llm.base_url()), &fake).spawn();
    daemon.wait_healthy().await;
    fake.wait_connected(1, Duration::from_secs(10)).await;

    fake.send_message_create(events::dm_message(DM, DISCORD_ALICE, "alice", 10, "the files"));
    let sent = discord_replies(&fake, 1).await;
    let note = "(video.mp4 was not sent: it is 12 MB, more than the 10 MB Discord accepts here)";
    assert_eq!(sent[0].content, format!("Your files.\n\n{note}"), "{}", daemon.logs());
    assert_eq!(sent[0].file_names, ["table.csv"]);
    assert_eq!(sent[0].file_bytes, [b"a,b".to_vec()]);

    let mention = events::guild_message(GUILD, CHANNEL, DISCORD_ALICE, "alice", 11, "<@5000> the files");
    fake.send_message_create(events::mentioning_user(mention, fake_discord::BOT_ID));
    let sent = discord_replies(&fake, 2).await;
    assert_eq!(sent[1].content, "Your files.", "{}", daemon.logs());
    assert_eq!(sent[1].file_names, ["table.csv", "video.mp4"]);
    assert_eq!(sent[1].file_bytes[1].len(), 12 << 20);
    assert_eq!(fake.calls_to("GET /guilds/{id}").len(), 1, "the boost level was asked once");
}

const API_ALICE: &str = "sb_alice_files_0123";
const API_BOB: &str = "sb_bob_files_0123";

/// The API answers with the files as attachments whose URLs serve them, to the token of the
/// chat only.
#[tokio::test]
async fn the_api_answers_with_download_links_for_its_chat_only() {
    let llm = FakeLlm::start().await;
    llm.push(Scripted::ToolCalls(vec![write("outbox/Q3 notes.txt", "hello file")]));
    llm.push(Scripted::Text("Attached.".into()));
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[users]\nowners = [\"api:alice\"]\n\
         [channels.api.tokens.alice]\nsha256 = \"{}\"\n[channels.api.tokens.bob]\nsha256 = \"{}\"\n",
        token_sha256_hex(API_ALICE),
        token_sha256_hex(API_BOB),
    );
    let path = dir.path().join("config.toml");
    std::fs::write(&path, config).unwrap();
    let path = path.to_string_lossy().into_owned();
    let mut daemon = Launch::new(dir.path(), "api", &["run", "--config", &path]).llm(&llm.base_url()).spawn();
    daemon.wait_healthy().await;

    let (status, body) = daemon.post_with(json!({"chat_id": "k", "content": "notes please"}), Some(API_ALICE)).await;
    assert_eq!((status, body["reply"].as_str()), (200, Some("Attached.")), "{body}");
    let attachments = body["attachments"].as_array().unwrap();
    assert_eq!(attachments.len(), 1, "{body}");
    assert_eq!((attachments[0]["name"].as_str(), attachments[0]["size"].as_u64()), (Some("Q3_notes.txt"), Some(10)));
    let url = attachments[0]["url"].as_str().unwrap();
    assert!(url.starts_with("/v1/files/") && url.ends_with("/Q3_notes.txt"), "{url}");
    assert!(!body.to_string().contains(&dir.path().display().to_string()), "no server path is shown: {body}");

    let client = reqwest::Client::new();
    let get = |token: Option<&'static str>, url: String| {
        let request = client.get(daemon.url(&url));
        let request = match token {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        async move { request.send().await.unwrap() }
    };
    let file = get(Some(API_ALICE), url.to_owned()).await;
    assert_eq!(file.status(), 200);
    let disposition = file.headers()["content-disposition"].to_str().unwrap().to_owned();
    assert_eq!(disposition, "attachment; filename*=UTF-8''Q3_notes.txt");
    assert_eq!(file.text().await.unwrap(), "hello file");
    assert_eq!(get(Some(API_BOB), url.to_owned()).await.status(), 404, "another person's chat");
    assert_eq!(get(None, url.to_owned()).await.status(), 401);
    let guessed = format!("/v1/files/{}/Q3_notes.txt", "0".repeat(32));
    assert_eq!(get(Some(API_ALICE), guessed).await.status(), 404);
}
