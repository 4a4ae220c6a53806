//! The owner's chat commands through the real daemon: strangers let in and turned away from
//! the owner's Telegram chat (and told), commands refused in a group; a configured owner's
//! level kept, and owners named by a reloaded config kept too.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::support::{Daemon, Launch, run_to_exit};
use serde_json::json;
use switchboard_testkit::fake_llm::FakeLlm;
use switchboard_testkit::fake_telegram::{FakeTelegram, updates};

const OWNER: i64 = 111;
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

    /// The next message the bot sent to `chat`.
    async fn next_to(&mut self, chat: i64) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        let read = self.read.entry(chat).or_default();
        loop {
            let sent: Vec<String> = self
                .fake
                .sent_messages()
                .into_iter()
                .filter(|message| message.chat_id == chat)
                .map(|message| message.text.unwrap_or_default())
                .collect();
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
        self.write(OWNER, "olga", command);
        self.next_to(OWNER).await
    }
}

fn pairing_code(text: &str) -> String {
    let after = text.split("pairing code: ").nth(1).unwrap_or_else(|| panic!("no code in {text:?}"));
    after.chars().take_while(char::is_ascii_alphanumeric).collect()
}

#[tokio::test]
async fn strangers_are_let_in_and_turned_away_from_the_owners_telegram_chat() {
    let (llm, fake) = (FakeLlm::start().await, FakeTelegram::start().await);
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Launch::new(dir.path(), "owner", &["run"])
        .llm(&llm.base_url())
        .env("TELEGRAM_BOT_TOKEN", FakeTelegram::TOKEN)
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__API_URL", &fake.api_url())
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__POLL_TIMEOUT_SECS", "1")
        .env("SWITCHBOARD_USERS__OWNERS", &format!(r#"["telegram:{OWNER}"]"#))
        .spawn();
    daemon.wait_healthy().await;
    let mut chats = Chats::new(&fake);

    chats.write(ANN, "ann", "hello, may I?");
    let ann_code = pairing_code(&chats.next_to(ANN).await);
    chats.write(BOB, "bob", "hi there");
    let bob_code = pairing_code(&chats.next_to(BOB).await);
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
    fake.push_message(updates::bot_command(updates::group_text(group, OWNER, "olga", 90, &command)));
    assert_eq!(chats.next_to(group).await, "Unknown command /pending. /help lists the commands.");

    let (status, stderr, listed) = run_to_exit(dir.path(), &["pairing", "list"], &[]);
    assert!(status.success(), "{stderr}");
    assert!(listed.lines().any(|line| line.contains(&ANN.to_string()) && line.contains("approved")), "{listed}");
    assert!(!listed.contains(&BOB.to_string()), "{listed}");
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
