//! One update in: classify, decide who is answered, answer locally what needs no agent
//! (`/start`, `/help`, pairing codes), and put the rest on the bus.
//!
//! [`Ingress::handle`] fails only when the bus did not accept a message; the caller then must
//! not confirm the update to Telegram, so it is fetched (or posted) again.

use std::sync::{Arc, Mutex, PoisonError};

use chrono::Utc;
use serde_json::{Map, Value};
use teloxide::Bot;
use teloxide::types::{ChatId, MessageId, ThreadId, Update, UpdateKind};
use tokio_util::sync::CancellationToken;

use super::download::fetch_attachments;
use super::gate::{Verdict, judge};
use super::inbound::{BotIdentity, Incoming, START, classify};
use super::press::Presses;
use super::send::send_markdown;
use super::target::Target;
use super::{CHANNEL, TelegramSettings};
use crate::bus::{Bus, BusError, BusExt};
use crate::contract::{InboundMessage, Media, Sender, commands};
use crate::control::OwnerLink;
use crate::delivery::group_context::GroupContext;
use crate::delivery::pairing::{PairingCheck, Stranger};
use crate::pairing::PairingAnswer;

/// A message ready for the bus (see [`Ingress::prepare`]).
pub(crate) struct Prepared {
    pub inbound: InboundMessage,
    /// The group place whose remembered context the message carries.
    context_place: Option<String>,
}

/// The inbound half of the Telegram channel.
pub(crate) struct Ingress {
    pub bot: Bot,
    pub bus: Arc<dyn Bus>,
    pub settings: Arc<TelegramSettings>,
    pub me: BotIdentity,
    pairing: PairingCheck,
    presses: Arc<Presses>,
    context: Mutex<GroupContext>,
    /// Local answers stop retrying when the channel shuts down.
    shutdown: CancellationToken,
}

impl Ingress {
    pub fn new(
        bot: Bot,
        bus: Arc<dyn Bus>,
        settings: Arc<TelegramSettings>,
        me: BotIdentity,
        owner: OwnerLink,
        shutdown: CancellationToken,
    ) -> Self {
        let context = Mutex::new(GroupContext::new(settings.group_context_messages));
        let presses = Arc::new(Presses::new(
            bot.clone(),
            &me,
            owner.desk.clone(),
            settings.press_answer_within,
            shutdown.clone(),
        ));
        let pairing = PairingCheck::new(CHANNEL, owner, settings.pairing_ttl, settings.pairing_max_pending);
        Self { bot, bus, settings, me, pairing, presses, context, shutdown }
    }

    /// Handles one update. `Err` means the bus did not take the message: retry the update.
    pub async fn handle(&self, update: &Update) -> Result<(), BusError> {
        let Some(prepared) = self.prepare(update).await else { return Ok(()) };
        self.bus.publish_inbound(&prepared.inbound).await?;
        self.use_context(&prepared);
        tracing::debug!(id = %prepared.inbound.id, "telegram message accepted");
        Ok(())
    }

    /// Everything but the publishing: classifies the update, answers locally what needs no
    /// agent, keeps group chatter as context, and returns the message for the bus, if any.
    /// Once the bus took it, [`Ingress::use_context`] must follow.
    /// A button press is handed to the control desk on a task of its own: it never reaches
    /// the bus, and the update counts as handled at once.
    pub async fn prepare(&self, update: &Update) -> Option<Prepared> {
        let message = match &update.kind {
            UpdateKind::Message(message) => message,
            UpdateKind::CallbackQuery(query) => {
                self.presses.spawn(query.clone());
                return None;
            }
            // Only messages and presses are asked for (see `ALLOWED_UPDATES`).
            _ => return None,
        };
        let msg = match classify(message, &self.me) {
            Ok(msg) => msg,
            Err(skip) => {
                tracing::debug!(update_id = update.id.0, ?skip, "telegram message skipped");
                return None;
            }
        };
        match judge(&msg, &self.settings) {
            Verdict::Forward => self.forward(&msg).await,
            Verdict::KeepAsContext => {
                self.lock_context().remember(msg.place(), &msg.author.name, &msg.text, msg.date);
                None
            }
            Verdict::CheckPairing => self.check_pairing(&msg).await,
            Verdict::Ignore(reason) => {
                tracing::debug!(chat_id = msg.chat_id, sender = msg.author.id, reason, "telegram message ignored");
                None
            }
        }
    }

    /// Forgets the group context a prepared message carries: it is used up once the bus
    /// took the message, and a message that is prepared again must find it still there.
    pub fn use_context(&self, prepared: &Prepared) {
        if let Some(place) = &prepared.context_place {
            self.lock_context().clear(place);
        }
    }

    async fn forward(&self, msg: &Incoming) -> Option<Prepared> {
        let local_answer = match msg.command.as_deref() {
            Some(START) => Some(self.greeting()),
            Some("help") => Some(self.help()),
            _ => None,
        };
        if let Some(answer) = local_answer {
            self.answer_locally(msg, &answer).await;
            return None;
        }
        let inbound = self.to_inbound(msg).await;
        let context_place = (msg.command.is_none() && !msg.private).then(|| msg.place());
        Some(Prepared { inbound, context_place })
    }

    async fn to_inbound(&self, msg: &Incoming) -> InboundMessage {
        let (media, markers) =
            fetch_attachments(&self.bot, msg, &self.settings.media_dir, self.settings.media_max_bytes, &self.shutdown)
                .await;
        let mut content = msg.text.clone();
        for marker in markers {
            if !content.is_empty() {
                content.push('\n');
            }
            content.push_str(&marker);
        }
        // Commands stay first in the text, where the worker looks for them.
        if msg.command.is_none() && !msg.private {
            content = self.lock_context().before(&msg.place(), content, Utc::now());
        }
        inbound_message(msg, content, media)
    }

    async fn check_pairing(&self, msg: &Incoming) -> Option<Prepared> {
        let sender = Sender { id: msg.author.id.to_string(), name: msg.author.name.clone(), is_bot: false };
        let chat_id = msg.chat_id.to_string();
        let stranger =
            Stranger { sender: &sender, username: msg.author.username.as_deref(), chat_id: &chat_id, text: &msg.text };
        let answer = self.pairing.check(stranger).await;
        match answer {
            PairingAnswer::Approved => return self.forward(msg).await,
            PairingAnswer::Reply(text) => self.answer_locally(msg, &text).await,
            PairingAnswer::Silent => {}
        }
        None
    }

    /// Sends a short answer that needs no agent, quoting the message in groups. Best effort
    /// (429s and outages are retried for a while): a failure is logged.
    async fn answer_locally(&self, msg: &Incoming, markdown: &str) {
        let target = Target {
            chat: ChatId(msg.chat_id),
            thread: msg.topic.map(|topic| ThreadId(MessageId(topic))),
            reply_to: Some(MessageId(msg.message_id)).filter(|_| !msg.private && self.settings.quote_in_groups),
        };
        if let Err(err) = send_markdown(&self.bot, &target, markdown, &self.shutdown).await {
            tracing::warn!(chat_id = msg.chat_id, %err, "cannot send a local answer");
        }
    }

    fn greeting(&self) -> String {
        format!("Hello! I'm @{}, an AI assistant. Just write to me.\n\n{}", self.me.username, self.help())
    }

    fn help(&self) -> String {
        let intro = format!(
            "In a direct chat, every message is for me. In groups, mention @{name} or reply to one of my \
             messages.\n",
            name = self.me.username
        );
        commands::help_text(&intro)
    }

    fn lock_context(&self) -> std::sync::MutexGuard<'_, GroupContext> {
        self.context.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The bus message for a classified message, with its content (text, attachment markers and
/// group context) and downloaded media already put together.
pub(crate) fn inbound_message(msg: &Incoming, content: String, media: Vec<Media>) -> InboundMessage {
    InboundMessage {
        id: format!("{CHANNEL}:{}:{}", msg.chat_id, msg.message_id),
        channel: CHANNEL.to_owned(),
        chat_id: msg.chat_id.to_string(),
        sender: Sender { id: msg.author.id.to_string(), name: msg.author.name.clone(), is_bot: msg.author.is_bot },
        content,
        media,
        reply_to: msg.replied_to.as_ref().map(|replied| replied.message_id.clone()),
        replied_to: msg.replied_to.clone(),
        thread_id: msg.topic.map(|topic| topic.to_string()),
        is_group: !msg.private,
        mentioned: msg.addressed(),
        received_at: Utc::now(),
        metadata: metadata(msg),
        ..InboundMessage::default()
    }
}

fn metadata(msg: &Incoming) -> Map<String, Value> {
    let mut metadata = Map::new();
    metadata.insert(crate::contract::MESSAGE_ID.into(), Value::String(msg.message_id.to_string()));
    metadata.insert("chat_type".into(), Value::String(msg.chat_type.to_owned()));
    if let Some(title) = &msg.chat_title {
        metadata.insert("chat_title".into(), Value::String(title.clone()));
    }
    if let Some(username) = &msg.author.username {
        metadata.insert("username".into(), Value::String(username.clone()));
    }
    if msg.burst {
        metadata.insert(crate::contract::BURST.into(), Value::Bool(true));
    }
    metadata
}
