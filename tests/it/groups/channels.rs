//! Group access through the real Telegram and Discord channels against their fakes, with the
//! worker on the same in-process bus: what a member of a configured group notices in the chat.

use std::sync::Arc;
use std::time::Duration;

use switchboard::config::Level;
use switchboard::tools::Tool;
use switchboard::worker::WorkerSettings;
use switchboard_channels::control::OwnerLink;
use switchboard_channels::delivery::DeliveryPolicy;
use switchboard_channels::discord::{DiscordChannel, DiscordSettings};
use switchboard_channels::telegram::TelegramChannel;
use switchboard_testkit::fake_discord::{self, FakeDiscord};
use switchboard_testkit::fake_telegram::{FakeTelegram, updates};
use tokio_util::sync::CancellationToken;

use super::{GUEST_TOOLS, USER_TOOLS, policy};
use crate::common::NamedTool;
use crate::common::{BusKind, Harness, Setup};

const WAIT: Duration = Duration::from_secs(10);
const ALICE: i64 = 111;

/// The worker with the dummy `write_file` tool, under `[users.groups]` entries.
async fn worker(groups: &[(&str, Level, u64)]) -> Harness {
    let settings = WorkerSettings { access: policy(groups, Default::default()), ..WorkerSettings::default() };
    let tools: Vec<Arc<dyn Tool>> = vec![Arc::new(NamedTool("write_file"))];
    Setup { settings, message_tool: false, tools, ..Setup::new(BusKind::InProcess) }.start().await
}

/// The tool names the `i`-th model request offered.
fn offered(h: &Harness, i: usize) -> Vec<String> {
    let requests = h.llm.requests();
    let tools = requests[i]["tools"].as_array().cloned().unwrap_or_default();
    tools.iter().map(|t| t["function"]["name"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn a_telegram_family_group_gives_a_new_member_user_tools_and_usage_says_so() {
    const FAMILY: i64 = -1001234567890;
    let h = worker(&[(&format!("telegram:{FAMILY}"), Level::User, 0)]).await;
    let fake = FakeTelegram::start().await;
    let settings = crate::common::fake_telegram_settings(&fake, h.dir.path(), ALICE);
    let shutdown = CancellationToken::new();
    let channel = TelegramChannel::start(
        Arc::clone(&h.bus),
        settings,
        OwnerLink::default(),
        DeliveryPolicy::default(),
        shutdown.clone(),
    )
    .await
    .unwrap();
    let bot = fake.bot().username;

    let hello = updates::group_text(FAMILY, ALICE, "alice", 1, &format!("@{bot} hello"));
    fake.push_message(updates::mention_of(hello, &bot));
    let sent = fake.wait_for_calls("sendmessage", 1, WAIT).await;
    assert_eq!(sent[0].params["chat_id"], FAMILY);
    assert_eq!(offered(&h, 0), USER_TOOLS, "Alice never had a level of her own, yet gets the user tools here");

    fake.push_message(updates::private_text(ALICE, "alice", 2, "and in private?"));
    fake.wait_for_calls("sendmessage", 2, WAIT).await;
    assert_eq!(offered(&h, 1), GUEST_TOOLS, "in her DM she is a guest");

    fake.push_message(updates::bot_command(updates::group_text(FAMILY, ALICE, "alice", 3, "/usage")));
    fake.wait_for_calls("sendmessage", 3, WAIT).await;
    let usage = fake.sent_messages()[2].text.clone().unwrap_or_default();
    assert!(usage.starts_with("Your level here: user (this group"), "{usage}");
    assert!(usage.contains("your own is guest)\n"), "{usage}");
    assert!(usage.contains("\nYour allowance: 1000000 tokens a month, "), "{usage}");
    assert_eq!(h.llm.requests().len(), 2, "/usage calls no model");

    shutdown.cancel();
    channel.stop().await;
    h.stop().await;
}

#[tokio::test]
async fn a_discord_server_entry_gives_its_thread_members_user_tools_and_a_pool() {
    const GUILD: u64 = 100;
    const CHANNEL: u64 = 200;
    const THREAD: u64 = 400;
    const DM: u64 = 300;
    const ALICE: u64 = 111;
    let h = worker(&[(&format!("discord:guild:{GUILD}"), Level::User, 1)]).await;
    let fake = FakeDiscord::start().await;
    fake.add_guild(GUILD, &[]);
    fake.add_channel(fake_discord::events::text_channel(GUILD, CHANNEL));
    fake.add_channel(fake_discord::events::thread(GUILD, THREAD, CHANNEL));
    let settings = DiscordSettings {
        token: FakeDiscord::TOKEN.into(),
        proxy_url: Some(fake.url()),
        allow_from: vec![ALICE.to_string()],
        media_dir: h.dir.path().join("media"),
        ..DiscordSettings::default()
    };
    let shutdown = CancellationToken::new();
    let channel = DiscordChannel::start(
        Arc::clone(&h.bus),
        settings,
        OwnerLink::default(),
        DeliveryPolicy::default(),
        shutdown.clone(),
    )
    .await
    .unwrap();
    fake.wait_connected(1, WAIT).await;
    let in_thread = |id: u64, text: &str| {
        let message = fake_discord::events::guild_message(GUILD, THREAD, ALICE, "alice", id, text);
        fake_discord::events::mentioning_user(message, fake_discord::BOT_ID)
    };
    let posted = "POST /channels/{id}/messages";

    let bot = fake_discord::BOT_ID;
    fake.send_message_create(in_thread(10, &format!("<@{bot}> hello from the thread")));
    fake.wait_for_calls(posted, 1, WAIT).await;
    assert_eq!(fake.sent_messages()[0].channel_id, THREAD);
    assert_eq!(offered(&h, 0), USER_TOOLS);

    // The server's pool of 1 token is used up: the next message there gets the notice.
    fake.send_message_create(in_thread(11, &format!("<@{bot}> once more")));
    fake.wait_for_calls(posted, 2, WAIT).await;
    let notice = &fake.sent_messages()[1].content;
    assert!(notice.starts_with("This group has used its shared allowance for this month (1 tokens)."), "{notice}");
    assert_eq!(h.llm.requests().len(), 1);

    // `/usage` (the command first, then the mention) still answers, with the pool used up.
    fake.send_message_create(in_thread(12, &format!("/usage <@{bot}>")));
    fake.wait_for_calls(posted, 3, WAIT).await;
    let usage = &fake.sent_messages()[2].content;
    assert!(usage.starts_with("Your level here: user (this group"), "{usage}");
    assert!(usage.contains("\nThis group's shared allowance: 1 tokens a month, "), "{usage}");
    assert!(usage.contains(" used, 0 left\n"), "{usage}");

    // A DM is not the server's: answered, as a guest.
    fake.add_channel(fake_discord::events::dm_channel(DM, ALICE));
    fake.send_message_create(fake_discord::events::dm_message(DM, ALICE, "alice", 13, "in private"));
    fake.wait_for_calls(posted, 4, WAIT).await;
    assert_eq!(offered(&h, 1), GUEST_TOOLS);

    shutdown.cancel();
    tokio::time::timeout(WAIT, channel.stop()).await.unwrap();
    h.stop().await;
}
