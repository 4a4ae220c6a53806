//! Delivering outbound messages: Markdown rendered to Telegram HTML, split to the message limit
//! and sent in order, files after the text, each delivery acked once it is in the chat.
//!
//! One task takes deliveries off the bus and hands them to per-chat sequences: messages for
//! one chat are sent one after the other in arrival order, different chats concurrently
//! (at most 16 at a time), like teloxide's dispatcher does for updates.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use teloxide::prelude::*;
use teloxide::types::{MessageId, ParseMode, ReplyParameters, ThreadId};
use teloxide::{ApiError, RequestError};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::TelegramSettings;
use super::format::{MESSAGE_LIMIT, Part, render_parts};
use super::live::{DraftState, LiveRuns};
use super::retry::{Verdict, classify, describe, with_retry};
use super::upload::send_media;
use crate::bus::{Acker, Deliveries, Delivery};
use crate::contract::{OutboundKind, OutboundMessage, reply};
use crate::delivery::Ledger;

/// Chats whose messages are being sent at the same time.
const MAX_SENDING: usize = 16;
/// Deliveries taken off the bus and not yet acked, across all chats.
const MAX_HELD: usize = 256;
/// Outbound ids remembered as delivered, so a redelivery is not sent twice.
const DELIVERED_KEPT: usize = 1024;
/// Partly sent messages whose progress is remembered for their redelivery.
const PROGRESS_KEPT: usize = 256;
/// When Telegram cannot be reached, the bus offers the message again after this long.
const REDELIVER_AFTER: Duration = Duration::from_secs(30);
/// How long deliveries in flight may finish after shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Where a message goes: a chat, a forum topic in it, and the message to quote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub chat: ChatId,
    pub thread: Option<ThreadId>,
    /// Quoted by the first message sent (with `allow_sending_without_reply`).
    pub reply_to: Option<MessageId>,
}

#[derive(Debug, thiserror::Error)]
pub enum AddressError {
    #[error("chat id {0:?} is not a Telegram chat id")]
    Chat(String),
}

impl Target {
    /// The target of an outbound message: `reply_to` is kept in groups (negative chat ids)
    /// when `quote_in_groups` is on; private chats are never quoted. A thread or message id
    /// that is not a number is ignored with a log line rather than losing the message.
    pub fn of(settings: &TelegramSettings, msg: &OutboundMessage) -> Result<Target, AddressError> {
        let chat = msg.chat_id.parse::<i64>().map(ChatId).map_err(|_| AddressError::Chat(msg.chat_id.clone()))?;
        let thread = msg.thread_id.as_deref().and_then(|thread| match thread.parse::<i32>() {
            Ok(id) => Some(ThreadId(MessageId(id))),
            Err(_) => {
                tracing::warn!(thread, chat = chat.0, "thread id is not a Telegram topic id; sending to the chat");
                None
            }
        });
        let quote = chat.0 < 0 && settings.quote_in_groups;
        let reply_to = msg.reply_to.as_deref().filter(|_| quote).and_then(|id| id.parse::<i32>().ok()).map(MessageId);
        Ok(Target { chat, thread, reply_to })
    }

    pub(crate) fn reply_parameters(&self, first: bool) -> Option<ReplyParameters> {
        let message = self.reply_to.filter(|_| first)?;
        Some(ReplyParameters::new(message).allow_sending_without_reply())
    }
}

/// Renders `markdown` and sends it as one or more messages in order; the first quotes
/// `target.reply_to`. Returns the ids of the messages sent.
pub async fn send_markdown(
    bot: &Bot,
    target: &Target,
    markdown: &str,
    shutdown: &CancellationToken,
) -> Result<Vec<MessageId>, RequestError> {
    let mut sent = Vec::new();
    for (index, part) in render_parts(markdown, MESSAGE_LIMIT).iter().enumerate() {
        sent.push(send_part(bot, target, part, index == 0, shutdown).await?);
    }
    Ok(sent)
}

/// Sends one rendered part as HTML; if Telegram cannot parse it, sends its plain text instead.
pub(crate) async fn send_part(
    bot: &Bot,
    target: &Target,
    part: &Part,
    first: bool,
    shutdown: &CancellationToken,
) -> Result<MessageId, RequestError> {
    match send_text(bot, target, &part.html, Some(ParseMode::Html), first, shutdown).await {
        Err(RequestError::Api(ApiError::CantParseEntities(reason))) => {
            tracing::warn!(chat = target.chat.0, %reason, "Telegram refused the HTML; sending plain text");
            send_text(bot, target, &part.plain, None, first, shutdown).await
        }
        other => other,
    }
}

/// Sends plain text as one message (it must fit the limit).
pub(crate) async fn send_plain(
    bot: &Bot,
    target: &Target,
    text: &str,
    first: bool,
    shutdown: &CancellationToken,
) -> Result<MessageId, RequestError> {
    send_text(bot, target, text, None, first, shutdown).await
}

async fn send_text(
    bot: &Bot,
    target: &Target,
    text: &str,
    parse_mode: Option<ParseMode>,
    first: bool,
    shutdown: &CancellationToken,
) -> Result<MessageId, RequestError> {
    let sent = with_retry("sendMessage", shutdown, || {
        let mut request = bot.send_message(target.chat, text);
        if let Some(mode) = parse_mode {
            request = request.parse_mode(mode);
        }
        if let Some(thread) = target.thread {
            request = request.message_thread_id(thread);
        }
        if let Some(reply) = target.reply_parameters(first) {
            request = request.reply_parameters(reply);
        }
        request.send()
    })
    .await?;
    Ok(sent.id)
}

/// Edits a message into a rendered part, with the same plain-text fallback as [`send_part`].
async fn edit_part(
    bot: &Bot,
    chat: ChatId,
    message: MessageId,
    part: &Part,
    shutdown: &CancellationToken,
) -> Result<(), RequestError> {
    let result = match edit_text(bot, chat, message, &part.html, Some(ParseMode::Html), shutdown).await {
        Err(RequestError::Api(ApiError::CantParseEntities(reason))) => {
            tracing::warn!(chat = chat.0, %reason, "Telegram refused the HTML of an edit; using plain text");
            edit_text(bot, chat, message, &part.plain, None, shutdown).await
        }
        other => other,
    };
    match result {
        Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => Ok(()),
        Err(err) => Err(err),
    }
}

async fn edit_text(
    bot: &Bot,
    chat: ChatId,
    message: MessageId,
    text: &str,
    parse_mode: Option<ParseMode>,
    shutdown: &CancellationToken,
) -> Result<(), RequestError> {
    let edited = with_retry("editMessageText", shutdown, || {
        let mut request = bot.edit_message_text(chat, message, text);
        if let Some(mode) = parse_mode {
            request = request.parse_mode(mode);
        }
        request.send()
    });
    edited.await.map(drop)
}

/// Deletes a message, logging instead of failing: used to remove streamed drafts.
async fn delete_quietly(bot: &Bot, chat: ChatId, message: MessageId) {
    if let Err(err) = bot.delete_message(chat, message).send().await {
        tracing::info!(chat = chat.0, message = message.0, error = %describe(&err), "cannot delete a streamed draft");
    }
}

/// What became of one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// In the chat, or nothing to send: ack.
    Delivered,
    /// Can never be delivered (bad address, bot blocked, chat gone): ack after the log line.
    GivenUp,
    /// Telegram could not be reached: let the bus offer it again later.
    Later,
}

/// The state shared by the delivery tasks.
struct Sender {
    bot: Bot,
    settings: Arc<TelegramSettings>,
    live: Arc<LiveRuns>,
    shutdown: CancellationToken,
    ledger: Mutex<Ledger>,
}

impl Sender {
    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Delivers one message and acks or naks it.
    async fn handle(&self, msg: OutboundMessage, mut acker: Box<dyn Acker>) {
        let outcome = self.deliver(&msg).await;
        let result = match outcome {
            Outcome::Delivered | Outcome::GivenUp => {
                self.ledger().record_delivered(&msg.id);
                acker.ack().await
            }
            Outcome::Later => acker.nak(Some(REDELIVER_AFTER)).await,
        };
        if let Err(err) = result {
            tracing::warn!(%err, id = %msg.id, "cannot acknowledge an outbound delivery");
        }
    }

    async fn deliver(&self, msg: &OutboundMessage) -> Outcome {
        if self.ledger().is_delivered(&msg.id) {
            tracing::info!(id = %msg.id, "outbound message already delivered; not sent again");
            return Outcome::Delivered;
        }
        let mut target = match Target::of(&self.settings, msg) {
            Ok(target) => target,
            Err(err) => {
                tracing::warn!(%err, id = %msg.id, "outbound message cannot be addressed; dropped");
                return Outcome::GivenUp;
            }
        };
        let draft = self.take_draft(msg).await;
        if reply::says_nothing(msg) {
            if let DraftState::Shown(message) | DraftState::Broken(Some(message)) = draft {
                delete_quietly(&self.bot, target.chat, message).await;
            }
            return Outcome::Delivered;
        }
        let parts = if msg.content.trim().is_empty() { Vec::new() } else { render_parts(&msg.content, MESSAGE_LIMIT) };
        let mut done = self.ledger().progress_of(&msg.id);
        if done == 0 && self.finish_draft(draft, target.chat, parts.first()).await {
            done = 1;
            self.ledger().record_progress(&msg.id, done);
        }
        self.send_steps(msg, &mut target, &parts, done).await
    }

    /// Sends the rendered parts, then the files, from step `done` on, recording progress.
    async fn send_steps(&self, msg: &OutboundMessage, target: &mut Target, parts: &[Part], mut done: usize) -> Outcome {
        let mut migrated = false;
        while done < parts.len() + msg.media.len() {
            let first = done == 0;
            let sent = match parts.get(done) {
                Some(part) => send_part(&self.bot, target, part, first, &self.shutdown).await.map(drop),
                None => send_media(&self.bot, target, &msg.media[done - parts.len()], first, &self.shutdown).await,
            };
            match sent {
                Ok(()) => {}
                // The group became a supergroup: the same step goes there (once; two moves is odd).
                Err(RequestError::MigrateToChatId(to)) if !migrated => {
                    tracing::info!(from = target.chat.0, to = to.0, "group moved to a supergroup; sending there");
                    target.chat = to;
                    migrated = true;
                    continue;
                }
                Err(err) => return self.failed(msg, &err),
            }
            done += 1;
            self.ledger().record_progress(&msg.id, done);
        }
        Outcome::Delivered
    }

    /// Finishes the run this message answers (a reply or notice, not a progress update): stops
    /// its typing and takes over its streamed draft, if any.
    async fn take_draft(&self, msg: &OutboundMessage) -> DraftState {
        if msg.kind == OutboundKind::Progress {
            return DraftState::Nothing;
        }
        let run_id = reply::run_id(msg);
        let mut state = DraftState::Nothing;
        for key in msg.in_reply_to.as_deref().into_iter().chain(run_id) {
            if let Some(draft) = self.live.finish(key) {
                state = draft.settle().await;
            }
        }
        state
    }

    /// Turns a streamed draft into the first part of the reply. False when there was no draft
    /// to finish or the edit failed; then the draft is deleted (if possible) and the whole
    /// reply is sent as usual, so the chat shows it exactly once either way.
    async fn finish_draft(&self, draft: DraftState, chat: ChatId, first_part: Option<&Part>) -> bool {
        let message = match draft {
            DraftState::Nothing | DraftState::Broken(None) => return false,
            DraftState::Broken(Some(message)) => {
                delete_quietly(&self.bot, chat, message).await;
                return false;
            }
            DraftState::Shown(message) => message,
        };
        let Some(part) = first_part else {
            delete_quietly(&self.bot, chat, message).await;
            return false;
        };
        match edit_part(&self.bot, chat, message, part, &self.shutdown).await {
            Ok(()) => true,
            Err(err) => {
                tracing::info!(chat = chat.0, error = %describe(&err), "cannot finish a streamed draft; sending the reply");
                delete_quietly(&self.bot, chat, message).await;
                false
            }
        }
    }

    fn failed(&self, msg: &OutboundMessage, err: &RequestError) -> Outcome {
        let error = describe(err);
        if classify(err) == Verdict::Final {
            tracing::warn!(id = %msg.id, chat = %msg.chat_id, %error, "Telegram refused an outbound message; given up");
            Outcome::GivenUp
        } else {
            tracing::warn!(id = %msg.id, chat = %msg.chat_id, %error, "Telegram unreachable; the message will be retried");
            Outcome::Later
        }
    }
}


/// A delivery waiting for its turn in its chat.
struct Job {
    msg: OutboundMessage,
    acker: Box<dyn Acker>,
}

/// Per-chat sequences: a chat is in `chats` while one of its jobs runs; its later jobs wait
/// in the queue and start, in order, when the running one ends.
struct ChatQueues {
    running: JoinSet<()>,
    /// The chat of each running task, so that its queue moves on even if the task panicked.
    running_chats: HashMap<tokio::task::Id, String>,
    chats: HashMap<String, VecDeque<Job>>,
    held: usize,
}

/// Takes the channel's outbound messages off the bus and delivers them until `shutdown` or the
/// end of `replies`. Replies to runs followed by [`run_live`](super::live::run_live) stop
/// their typing and take over their streamed drafts.
pub async fn run_outbound(
    bot: Bot,
    settings: Arc<TelegramSettings>,
    mut replies: Deliveries,
    live: Arc<LiveRuns>,
    shutdown: CancellationToken,
) {
    let ledger = Ledger::new(DELIVERED_KEPT, PROGRESS_KEPT);
    let sender = Arc::new(Sender { bot, settings, live, shutdown: shutdown.clone(), ledger: Mutex::new(ledger) });
    let sending = Arc::new(Semaphore::new(MAX_SENDING));
    let mut queues =
        ChatQueues { running: JoinSet::new(), running_chats: HashMap::new(), chats: HashMap::new(), held: 0 };
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            Some(finished) = queues.running.join_next_with_id(), if !queues.running.is_empty() => {
                let task = match finished {
                    Ok((task, ())) => task,
                    Err(err) => {
                        tracing::error!(%err, "an outbound delivery task failed");
                        err.id()
                    }
                };
                queues.finished(task, &sender, &sending);
            }
            next = replies.next(), if queues.held < MAX_HELD => match next {
                Some(Ok(delivery)) => queues.accept(delivery, &sender, &sending).await,
                Some(Err(err)) => {
                    tracing::warn!(%err, "receiving Telegram replies failed; retrying in 1 s");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                None => break,
            },
        }
    }
    // Deliveries still queued are dropped unacked: the bus offers them again.
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async { while queues.running.join_next().await.is_some() {} });
    if drained.await.is_err() {
        tracing::warn!("outbound deliveries still running at shutdown were abandoned");
    }
}

impl ChatQueues {
    async fn accept(&mut self, delivery: Delivery, sender: &Arc<Sender>, sending: &Arc<Semaphore>) {
        let decoded = delivery.decode::<OutboundMessage>().map_err(|err| err.to_string());
        let msg = match decoded.and_then(|msg| msg.validate().map(|()| msg).map_err(|err| err.to_string())) {
            Ok(msg) => msg,
            Err(err) => {
                tracing::warn!(%err, subject = %delivery.subject, "undecodable Telegram reply dropped");
                if let Err(err) = delivery.ack().await {
                    tracing::warn!(%err, "cannot ack an undecodable reply");
                }
                return;
            }
        };
        let (_, acker) = delivery.into_parts();
        let chat = msg.chat_id.clone();
        let job = Job { msg, acker };
        self.held += 1;
        match self.chats.get_mut(&chat) {
            Some(waiting) => waiting.push_back(job),
            None => {
                self.chats.insert(chat.clone(), VecDeque::new());
                self.spawn(chat, job, sender, sending);
            }
        }
    }

    /// A chat's running job ended: its next one starts, or the chat leaves the map.
    fn finished(&mut self, task: tokio::task::Id, sender: &Arc<Sender>, sending: &Arc<Semaphore>) {
        self.held -= 1;
        let Some(chat) = self.running_chats.remove(&task) else { return };
        match self.chats.get_mut(&chat).and_then(VecDeque::pop_front) {
            Some(job) => self.spawn(chat, job, sender, sending),
            None => {
                self.chats.remove(&chat);
            }
        }
    }

    fn spawn(&mut self, chat: String, job: Job, sender: &Arc<Sender>, sending: &Arc<Semaphore>) {
        let (sender, sending) = (Arc::clone(sender), Arc::clone(sending));
        let task = self.running.spawn(async move {
            // The semaphore is never closed; without a permit the job would just run unlimited.
            let _permit = sending.acquire_owned().await.ok();
            sender.handle(job.msg, job.acker).await;
        });
        self.running_chats.insert(task.id(), chat);
    }
}
