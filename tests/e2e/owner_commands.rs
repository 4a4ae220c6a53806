//! The owner's chat commands through the real daemon: strangers let in and turned away from
//! the owner's Telegram chat (and told), commands refused in a group, `/cron`'s jobs with
//! buttons that work; a configured owner's level kept, and owners named by a reloaded config
//! kept too.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::owner_buttons::{OWNER, button_data, owner, owner_bot, press, sent_to, settled_text, started};
use crate::support::{Daemon, Launch, run_to_exit};
use serde_json::json;
use switchboard_testkit::fake_llm::FakeLlm;
use switchboard_testkit::fake_telegram::{FakeTelegram, updates};

const ANN: i64 = 222;
const BOB: i64 = 333;

/// What the bot sent, chat by chat, read in order.
struct Chats<'a> {
    fake: &'a FakeTelegram,
    read: HashMap<i64, usize>,
    next_id: i64,
}

impl<'a> Chats<'a> {
    fn new(fake: &'a FakeTelegram) -> Self {
        Self { fake, read: HashMap::new(), next_id: 1 }
    }

    /// `user` writes `text` in their direct chat (a command marked as Telegram marks it).
    fn write(&mut self, user: i64, username: &str, text: &str) {
        self.next_id += 1;
        let message = updates::private_text(user, username, self.next_id, text);
        self.fake.push_message(if text.starts_with('/') { updates::bot_command(message) } else { message });
    }

    /// The next message the bot sent to `chat`, as Telegram shows it.
    async fn next_to(&mut self, chat: i64) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        let read = self.read.entry(chat).or_default();
        loop {
            let sent: Vec<String> =
                self.fake.sent_messages().iter().filter(|message| message.chat_id == chat).map(|m| m.shown()).collect();
            if let Some(text) = sent.get(*read) {
                *read += 1;
                return text.clone();
            }
            assert!(Instant::now() < deadline, "nothing more sent to {chat}: {sent:#?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The owner's command, answered in their direct chat.
    async fn owner(&mut self, command: &str) -> String {
        self.write(OWNER, "owner", command);
        self.next_to(OWNER).await
    }

    /// A stranger writes; the code they are given (the owner is told about them too).
    async fn stranger(&mut self, user: i64, username: &str, text: &str) -> String {
        self.write(user, username, text);
        let given = self.next_to(user).await;
        let after = given.split("pairing code: ").nth(1).unwrap_or_else(|| panic!("no code in {given:?}"));
        let code: String = after.chars().take_while(char::is_ascii_alphanumeric).collect();
        let told = self.next_to(OWNER).await;
        assert!(told.contains(&format!("id {user} on")) && told.contains(&code), "{told}");
        code
    }
}

fn daemon(dir: &std::path::Path, llm: &FakeLlm, fake: &FakeTelegram) -> Daemon {
    owner_bot(Launch::new(dir, "commands", &["run"]), fake, llm).spawn()
}

#[tokio::test]
async fn strangers_are_let_in_and_turned_away_from_the_owners_telegram_chat() {
    let (_llm, fake, dir, _daemon) = started(daemon).await;
    let mut chats = Chats::new(&fake);
    let ann_code = chats.stranger(ANN, "ann", "hello, may I?").await;
    let bob_code = chats.stranger(BOB, "bob", "hi there").await;
    let pending = chats.owner("/pending").await;
    for line in
        [format!("\n{ann_code} Ann (telegram {ANN}), expires "), format!("\n{bob_code} Bob (telegram {BOB}), expires ")]
    {
        assert!(pending.contains(&line), "{line:?} in {pending}");
    }

    let approved = chats.owner(&format!("/approve {}", ann_code.to_lowercase())).await;
    assert_eq!(approved, format!("Approved Ann (telegram {ANN}) as user. I told them they can write to me now."));
    assert_eq!(chats.next_to(ANN).await, "Good news: my owner approved you. Write me anything.");
    chats.write(ANN, "ann", "thank you");
    assert_eq!(chats.next_to(ANN).await, "echo: thank you");

    let denied = chats.owner(&format!("/deny {bob_code}")).await;
    assert_eq!(denied, format!("Turned Bob (telegram {BOB}) away. I told them, and they get no new code for a day."));
    assert_eq!(chats.next_to(BOB).await, "Sorry, my owner declined your request to talk to me.");
    assert_eq!(
        chats.owner(&format!("/approve {bob_code}")).await,
        format!("Nothing waits under {bob_code}; /pending lists what does.")
    );
    assert_eq!(chats.owner("/pending").await, "Nothing waits for you.");

    // In a group, even the owner's commands are unknown.
    let group = -100_777;
    let command = format!("/pending@{}", fake.bot().username);
    fake.push_message(updates::bot_command(updates::group_text(group, OWNER, "owner", 90, &command)));
    assert_eq!(chats.next_to(group).await, "Unknown command /pending. /help lists the commands.");

    let (status, stderr, listed) = run_to_exit(dir.path(), &["pairing", "list"], &[]);
    assert!(status.success(), "{stderr}");
    assert!(listed.lines().any(|line| line.contains(&ANN.to_string()) && line.contains("approved")), "{listed}");
    assert!(!listed.contains(&BOB.to_string()), "{listed}");
}

/// `/cron` on Telegram: a message per job with its buttons as an inline keyboard, which work.
#[tokio::test]
async fn cron_jobs_come_with_buttons_the_owner_can_press() {
    let (_llm, fake, dir, _daemon) = started(daemon).await;
    let add = [
        "cron",
        "add",
        "--to",
        "telegram:42",
        "--every",
        "1d",
        "--tz",
        "Europe/Berlin",
        "--message",
        "water",
        "--name",
        "Plants",
    ];
    let (status, stderr, added) = run_to_exit(dir.path(), &add, &[]);
    assert!(status.success(), "{stderr}");
    let id = added.split_whitespace().nth(1).unwrap_or_else(|| panic!("no id in {added}")).to_owned();
    let mut chats = Chats::new(&fake);
    let notice = chats.owner("/cron").await;
    assert!(notice.starts_with(&format!("Plants ({id})\nevery 1d, to telegram:42\nNext run: ")), "{notice}");
    assert!(notice.ends_with(" CET") || notice.ends_with(" CEST"), "in the job's zone: {notice}");
    assert_eq!(chats.next_to(OWNER).await, "1 cron job, above.");

    let sent = sent_to(&fake, OWNER, |sent| sent.shown().starts_with("Plants")).await;
    assert_eq!(button_data(&fake, &sent), [vec![format!("Pause=cp:{id}"), format!("Delete=cx:{id}")]]);
    assert!(press(&fake, &sent, owner(), &format!("cp:{id}")).await.text.is_some());
    settled_text(&fake, &sent).await;
    let (_, _, listed) = run_to_exit(dir.path(), &["cron", "list"], &[]);
    assert!(listed.contains("paused"), "{listed}");
}

const OWNERS_BEFORE: &str = r#"
[users]
owners = ["api:boss"]
"#;

const OWNERS_AFTER: &str = r#"
[users]
owners = ["api:boss", "api:deputy"]
"#;

async fn boss(daemon: &Daemon, command: &str) -> String {
    let (status, body) = daemon.post(json!({"chat_id": "boss", "sender": "boss", "content": command})).await;
    assert_eq!(status, 200, "{body}");
    body["reply"].as_str().unwrap_or_default().to_owned()
}

/// `/level` cannot lower an owner named in the config, and a reload's new owners are as safe.
#[tokio::test]
async fn configured_owners_keep_their_level_also_after_a_reload() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("switchboard.toml");
    std::fs::write(&path, OWNERS_BEFORE).unwrap();
    let mut daemon =
        Launch::new(dir.path(), "owners", &["run", "--config", path.to_str().unwrap()]).llm(&llm.base_url()).spawn();
    daemon.wait_healthy().await;

    let refused =
        "is an owner in the config (users.owners), and the config wins: remove them there to change their level.";
    assert_eq!(boss(&daemon, "/level api:boss guest").await, format!("api:boss {refused}"));
    assert_eq!(boss(&daemon, "/level api:deputy admin").await, "api:deputy is admin now (was guest).");

    std::fs::write(&path, OWNERS_AFTER).unwrap();
    daemon.signal("HUP");
    daemon.wait_for_log("config reloaded").await;
    assert_eq!(boss(&daemon, "/level api:deputy guest").await, format!("api:deputy {refused}"));
    let users = boss(&daemon, "/users").await;
    assert!(users.contains(", owner: api:deputy; nothing yet"), "{users}");
}
