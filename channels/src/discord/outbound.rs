//! Delivering outbound messages: Markdown kept as is (Discord renders it), split at 2000
//! characters without breaking code blocks, sent in order with files on the last part, each
//! delivery acked once it is in the channel.
//!
//! One task takes deliveries off the bus and hands them to per-channel sequences: messages for
//! one channel (a thread is a channel) are sent one after the other in arrival order, different
//! channels concurrently (at most 16 at a time).
//!
//! Mentions: model text may ping users it names explicitly (`<@id>`, e.g. a reminder for its
//! owner), never `@everyone`/`@here` or roles, and a reply never pings the author of the
//! message it references.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use serenity::all::{
    ChannelId, CreateAllowedMentions, CreateAttachment, CreateMessage, EditMessage, MessageId, MessageReference,
    MessageReferenceKind, Nonce,
};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::directory::Directory;
use super::live::{DraftState, LiveRuns};
use super::rest::Rest;
use super::retry::{RetryPolicy, SendError, with_retry};
use super::upload::{self, Uploads};
use super::{DiscordSettings, MESSAGE_LIMIT};
use crate::bus::{Acker, Deliveries, Delivery};
use crate::chunking::split_markdown;
use crate::contract::{OutboundKind, OutboundMessage, reply};
use crate::delivery::Ledger;

/// Channels whose messages are being sent at the same time.
const MAX_SENDING: usize = 16;
/// Deliveries taken off the bus and not yet acked, across all channels.
const MAX_HELD: usize = 256;
/// Outbound ids remembered as delivered, so a redelivery is not sent twice.
const DELIVERED_KEPT: usize = 1024;
/// Partly sent messages whose progress is remembered for their redelivery.
const PROGRESS_KEPT: usize = 256;
/// When Discord cannot be reached, the bus offers the message again after this long.
const REDELIVER_AFTER: Duration = Duration::from_secs(30);
/// How long deliveries in flight may finish after shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Where a message goes: a channel (or thread), and the message the first part references.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Target {
    pub channel: ChannelId,
    pub reply_to: Option<MessageId>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum AddressError {
    #[error("channel id {0:?} is not a Discord channel id")]
    Channel(String),
}

impl Target {
    /// The thread if there is one, else the chat. The reply is referenced only in guild
    /// channels: in a DM it is obvious what a message answers.
    pub(crate) fn of(msg: &OutboundMessage, directory: &Directory) -> Result<Target, AddressError> {
        let channel_id = msg.thread_id.as_deref().unwrap_or(&msg.chat_id);
        let channel = parse_id(channel_id).ok_or_else(|| AddressError::Channel(channel_id.to_owned()))?;
        let reply_to = msg.reply_to.as_deref().and_then(parse_id).filter(|_| !directory.is_direct(channel));
        Ok(Target { channel: ChannelId::new(channel), reply_to: reply_to.map(MessageId::new) })
    }

    /// The message to create for a part; only the first references the reply's trigger.
    pub(crate) fn message(&self, text: &str, first: bool) -> CreateMessage {
        let mut message = CreateMessage::new().content(text).allowed_mentions(allowed_mentions());
        if let Some(reply_to) = self.reply_to.filter(|_| first) {
            // Send even if the trigger was deleted meanwhile, as a plain message.
            let reference = MessageReference::new(MessageReferenceKind::Default, self.channel)
                .message_id(reply_to)
                .fail_if_not_exists(false);
            message = message.reference_message(reference);
        }
        message
    }
}

/// The nonce of part `part` of the message known as `key` (an outbound or inbound message id):
/// the same for every attempt and redelivery, so that Discord, told to `enforce_nonce`, posts
/// it once. Discord takes at most 25 characters; this is 16 hex digits of a 64-bit FNV-1a hash
/// (stable across builds, unlike std's hasher).
pub(crate) fn nonce(key: &str, part: usize) -> String {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let bytes = key.bytes().chain([0xff]).chain((part as u64).to_le_bytes());
    let hash = bytes.fold(FNV_OFFSET, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME));
    format!("{hash:016x}")
}

/// A snowflake (a non-zero u64).
pub(crate) fn parse_id(text: &str) -> Option<u64> {
    text.parse::<u64>().ok().filter(|id| *id != 0)
}

/// Users named in the text may be pinged; `@everyone`, `@here`, roles and the replied-to
/// author are not.
pub(crate) fn allowed_mentions() -> CreateAllowedMentions {
    CreateAllowedMentions::new().all_users(true).replied_user(false)
}

/// Splits `markdown` at the message limit and sends the parts in order; the first references
/// `target.reply_to`. `key` names what is sent (the message answered), for the parts' nonces.
/// Returns the ids of the messages sent.
pub(crate) async fn send_markdown(
    rest: &Rest,
    target: &Target,
    key: &str,
    markdown: &str,
    shutdown: &CancellationToken,
) -> Result<Vec<MessageId>, SendError> {
    let mut sent = Vec::new();
    for (index, text) in split_markdown(markdown, MESSAGE_LIMIT).into_iter().enumerate() {
        let step = Step { text, files: Vec::new() };
        sent.push(
            send_part(rest, &RetryPolicy::DEFAULT, target, &step, &nonce(key, index), index == 0, shutdown).await?,
        );
    }
    Ok(sent)
}

/// Sends one part (at most the limit) with its files. Retries carry the same nonce, so a
/// create whose answer was lost is not posted twice.
async fn send_part(
    rest: &Rest,
    retry: &RetryPolicy,
    target: &Target,
    step: &Step,
    nonce: &str,
    first: bool,
    shutdown: &CancellationToken,
) -> Result<MessageId, SendError> {
    let message = target.message(&step.text, first).nonce(Nonce::String(nonce.to_owned())).enforce_nonce(true);
    with_retry(retry, "create message", shutdown, || rest.create_message(target.channel, &message, &step.files)).await
}

/// Edits a message into `text` (the first part of a reply).
async fn edit_text(
    rest: &Rest,
    retry: &RetryPolicy,
    channel: ChannelId,
    message: MessageId,
    text: &str,
    shutdown: &CancellationToken,
) -> Result<(), SendError> {
    let edit = EditMessage::new().content(text).allowed_mentions(allowed_mentions());
    with_retry(retry, "edit message", shutdown, || rest.edit_message(channel, message, &edit)).await
}

/// Deletes a message, logging instead of failing: used to remove streamed drafts.
async fn delete_quietly(rest: &Rest, channel: ChannelId, message: MessageId) {
    if let Err(err) = rest.delete_message(channel, message).await {
        tracing::info!(%channel, %message, error = %err, "cannot delete a streamed draft");
    }
}

/// One message of a delivery: a part of the text and the files it carries.
struct Step {
    text: String,
    files: Vec<CreateAttachment>,
}

/// The messages of a reply in order: the text parts, files on the last one, further file
/// batches (beyond ten files) after it.
fn plan_steps(content: &str, uploads: Uploads) -> Vec<Step> {
    let mut text = content.trim_end().to_owned();
    if !uploads.lines.is_empty() {
        if !text.trim().is_empty() {
            text.push_str("\n\n");
        }
        text.push_str(&uploads.lines.join("\n"));
    }
    let mut steps: Vec<Step> = if text.trim().is_empty() {
        Vec::new()
    } else {
        split_markdown(&text, MESSAGE_LIMIT).into_iter().map(|text| Step { text, files: Vec::new() }).collect()
    };
    let mut batches = uploads.batches.into_iter();
    if let Some(last) = steps.last_mut()
        && let Some(batch) = batches.next()
    {
        last.files = batch;
    }
    steps.extend(batches.map(|files| Step { text: String::new(), files }));
    steps
}

/// What became of one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// In the channel, or nothing to send: ack.
    Delivered,
    /// Can never be delivered (bad address, no access, unknown channel): ack after the log line.
    GivenUp,
    /// Discord could not be reached: let the bus offer it again later.
    Later,
}

/// The state shared by the delivery tasks.
struct Sender {
    rest: Arc<Rest>,
    retry: RetryPolicy,
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
        let result = match self.deliver(&msg).await {
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
        let target = match Target::of(msg, self.live.directory()) {
            Ok(target) => target,
            Err(err) => {
                tracing::warn!(%err, id = %msg.id, "outbound message cannot be addressed; dropped");
                return Outcome::GivenUp;
            }
        };
        let draft = self.take_draft(msg).await;
        if reply::says_nothing(msg) {
            if let DraftState::Shown(message) | DraftState::Broken(Some(message)) = draft {
                delete_quietly(&self.rest, target.channel, message).await;
            }
            return Outcome::Delivered;
        }
        let steps = plan_steps(&msg.content, upload::prepare(&msg.media).await);
        let mut done = self.ledger().progress_of(&msg.id);
        if done == 0 && self.finish_draft(draft, target.channel, steps.first()).await {
            done = 1;
            self.ledger().record_progress(&msg.id, done);
        }
        self.send_steps(msg, &target, &steps, done).await
    }

    /// Sends the steps from `done` on, recording progress.
    async fn send_steps(&self, msg: &OutboundMessage, target: &Target, steps: &[Step], mut done: usize) -> Outcome {
        while let Some(step) = steps.get(done) {
            let nonce = nonce(&msg.id, done);
            let sent = send_part(&self.rest, &self.retry, target, step, &nonce, done == 0, &self.shutdown).await;
            if let Err(err) = sent {
                return failed(msg, &err);
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
    /// to finish or the edit failed; then the draft is deleted (if possible) and the whole reply
    /// is sent as usual, so the channel shows it exactly once either way. A first part that
    /// carries files is sent anew too (files are not added by editing).
    async fn finish_draft(&self, draft: DraftState, channel: ChannelId, first: Option<&Step>) -> bool {
        let message = match draft {
            DraftState::Nothing | DraftState::Broken(None) => return false,
            DraftState::Broken(Some(message)) => {
                delete_quietly(&self.rest, channel, message).await;
                return false;
            }
            DraftState::Shown(message) => message,
        };
        let Some(step) = first.filter(|step| step.files.is_empty()) else {
            delete_quietly(&self.rest, channel, message).await;
            return false;
        };
        match edit_text(&self.rest, &self.retry, channel, message, &step.text, &self.shutdown).await {
            Ok(()) => true,
            Err(err) => {
                tracing::info!(%channel, %err, "cannot finish a streamed draft; sending the reply");
                delete_quietly(&self.rest, channel, message).await;
                false
            }
        }
    }
}

/// Logs a failed send once and decides between giving up and trying later.
fn failed(msg: &OutboundMessage, err: &SendError) -> Outcome {
    match err {
        SendError::Refused { .. } => {
            tracing::warn!(id = %msg.id, chat = %msg.chat_id, %err, "Discord refused an outbound message; dropped");
            Outcome::GivenUp
        }
        SendError::Unavailable { .. } => {
            tracing::warn!(id = %msg.id, chat = %msg.chat_id, %err, "Discord unavailable; the reply will be retried");
            Outcome::Later
        }
    }
}


/// A delivery waiting for its turn in its channel.
struct Job {
    msg: OutboundMessage,
    acker: Box<dyn Acker>,
}

/// Per-channel sequences: a channel is in `channels` while one of its jobs runs; its later jobs
/// wait in the queue and start, in order, when the running one ends.
#[derive(Default)]
struct ChannelQueues {
    running: JoinSet<()>,
    /// The channel of each running task, so that its queue moves on even if the task panicked.
    running_channels: HashMap<tokio::task::Id, String>,
    channels: HashMap<String, VecDeque<Job>>,
    held: usize,
}

/// Takes the channel's outbound messages off the bus and delivers them until `shutdown` or the
/// end of `replies`. Replies to runs followed by `run_live` stop their typing and take over
/// their streamed drafts.
pub(crate) async fn run_outbound(
    rest: Arc<Rest>,
    settings: Arc<DiscordSettings>,
    mut replies: Deliveries,
    live: Arc<LiveRuns>,
    shutdown: CancellationToken,
) {
    tracing::debug!(?settings, "Discord outbound started");
    let ledger = Ledger::new(DELIVERED_KEPT, PROGRESS_KEPT);
    let retry = RetryPolicy::DEFAULT;
    let sender = Arc::new(Sender { rest, retry, live, shutdown: shutdown.clone(), ledger: Mutex::new(ledger) });
    let sending = Arc::new(Semaphore::new(MAX_SENDING));
    let mut queues = ChannelQueues::default();
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
                    tracing::warn!(%err, "receiving Discord replies failed; retrying in 1 s");
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

impl ChannelQueues {
    async fn accept(&mut self, delivery: Delivery, sender: &Arc<Sender>, sending: &Arc<Semaphore>) {
        let decoded = delivery.decode::<OutboundMessage>().map_err(|err| err.to_string());
        let msg = match decoded.and_then(|msg| msg.validate().map(|()| msg).map_err(|err| err.to_string())) {
            Ok(msg) => msg,
            Err(err) => {
                tracing::warn!(%err, subject = %delivery.subject, "undecodable Discord reply dropped");
                if let Err(err) = delivery.ack().await {
                    tracing::warn!(%err, "cannot ack an undecodable reply");
                }
                return;
            }
        };
        let (_, acker) = delivery.into_parts();
        // Ordered per Discord channel: a thread is its own channel.
        let channel = msg.thread_id.clone().unwrap_or_else(|| msg.chat_id.clone());
        self.held += 1;
        let job = Job { msg, acker };
        match self.channels.get_mut(&channel) {
            Some(waiting) => waiting.push_back(job),
            None => {
                self.channels.insert(channel.clone(), VecDeque::new());
                self.spawn(channel, job, sender, sending);
            }
        }
    }

    /// A channel's running job ended: its next one starts, or the channel leaves the map.
    fn finished(&mut self, task: tokio::task::Id, sender: &Arc<Sender>, sending: &Arc<Semaphore>) {
        self.held -= 1;
        let Some(channel) = self.running_channels.remove(&task) else { return };
        match self.channels.get_mut(&channel).and_then(VecDeque::pop_front) {
            Some(job) => self.spawn(channel, job, sender, sending),
            None => {
                self.channels.remove(&channel);
            }
        }
    }

    fn spawn(&mut self, channel: String, job: Job, sender: &Arc<Sender>, sending: &Arc<Semaphore>) {
        let (sender, sending) = (Arc::clone(sender), Arc::clone(sending));
        let task = self.running.spawn(async move {
            // The semaphore is never closed; without a permit the job would just run unlimited.
            let _permit = sending.acquire_owned().await.ok();
            sender.handle(job.msg, job.acker).await;
        });
        self.running_channels.insert(task.id(), channel);
    }
}

#[cfg(test)]
mod tests {
    use serenity::all::HttpBuilder;
    use switchboard_testkit::fake_discord::{Failure, FakeDiscord, LostAnswer};

    use super::*;
    use crate::bus::BusError;
    use crate::discord::directory::ChannelKind;

    /// Records what became of a delivery: `ack` or `nak <delay>`.
    struct RecordingAcker(Arc<Mutex<Vec<String>>>);

    #[async_trait::async_trait]
    impl Acker for RecordingAcker {
        async fn ack(&mut self) -> Result<(), BusError> {
            self.0.lock().unwrap().push("ack".into());
            Ok(())
        }

        async fn nak(&mut self, delay: Option<Duration>) -> Result<(), BusError> {
            self.0.lock().unwrap().push(format!("nak {delay:?}"));
            Ok(())
        }

        async fn progress(&self) -> Result<(), BusError> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn an_outage_naks_for_later_and_a_refusal_acks() {
        const CREATE: &str = "POST /channels/{id}/messages";
        let fake = FakeDiscord::start().await;
        let http = Arc::new(HttpBuilder::new(FakeDiscord::TOKEN).proxy(fake.url()).ratelimiter_disabled(true).build());
        let rest = Arc::new(Rest::new(http));
        let retry = RetryPolicy {
            first_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(2),
            max_attempts: 3,
        };
        let ledger = Ledger::new(8, PROGRESS_KEPT);
        let live = Arc::new(LiveRuns::new(Arc::new(Directory::default())));
        let sender = Sender { rest, retry, live, shutdown: CancellationToken::new(), ledger: Mutex::new(ledger) };
        let outcomes = Arc::new(Mutex::new(Vec::new()));
        let msg = OutboundMessage { content: "hi".into(), ..reply("200", None) };

        // The first attempt posts the message but its answer is lost; the retries fail.
        fake.fail_next(CREATE, Failure::AnswerLost(LostAnswer::ConnectionDropped));
        for _ in 0..2 {
            fake.fail_next(CREATE, Failure::ServerError);
        }
        sender.handle(msg.clone(), Box::new(RecordingAcker(Arc::clone(&outcomes)))).await;
        assert_eq!(fake.sent_messages().len(), 1);
        // Redelivered after the outage: its nonce makes Discord return the message posted then.
        sender.handle(msg.clone(), Box::new(RecordingAcker(Arc::clone(&outcomes)))).await;
        assert_eq!(fake.sent_messages().len(), 1);
        let forbidden =
            Failure::Status { code: 403, body: serde_json::json!({ "message": "Missing Access", "code": 50001 }) };
        fake.fail_next(CREATE, forbidden);
        let other = OutboundMessage { id: "o2".into(), ..msg };
        sender.handle(other, Box::new(RecordingAcker(Arc::clone(&outcomes)))).await;
        assert_eq!(*outcomes.lock().unwrap(), ["nak Some(30s)", "ack", "ack"]);
        assert_eq!(fake.calls_to(CREATE).len(), 5, "three failures, one success, one refusal");
    }

    #[test]
    fn nonces_are_short_stable_and_differ_per_message_and_part() {
        let first = nonce("run-1:reply", 0);
        assert!(first.len() <= 25, "Discord takes at most 25 characters");
        assert_eq!(first, nonce("run-1:reply", 0));
        // Fixed by the algorithm, not by the build: a restarted daemon sends the same nonce.
        assert_eq!(nonce("", 0), "2032dd643620252e");
        let others = [nonce("run-1:reply", 1), nonce("run-2:reply", 0), nonce("run-1:repl", 0)];
        assert!(others.iter().all(|other| *other != first), "{first} {others:?}");
    }

    fn reply(chat: &str, thread: Option<&str>) -> OutboundMessage {
        OutboundMessage {
            id: "o1".into(),
            chat_id: chat.into(),
            thread_id: thread.map(str::to_owned),
            reply_to: Some("42".into()),
            ..OutboundMessage::default()
        }
    }

    #[test]
    fn targets_are_threads_or_chats_and_reference_only_in_guilds() {
        let directory = Directory::default();
        directory.insert(7, ChannelKind::Direct);
        let guild = Target::of(&reply("200", None), &directory).unwrap();
        assert_eq!(guild, Target { channel: ChannelId::new(200), reply_to: Some(MessageId::new(42)) });
        let thread = Target::of(&reply("200", Some("201")), &directory).unwrap();
        assert_eq!(thread.channel, ChannelId::new(201));
        assert_eq!(Target::of(&reply("7", None), &directory).unwrap().reply_to, None);
        assert!(Target::of(&reply("general", None), &directory).is_err());
    }

    #[test]
    fn files_ride_the_last_part_and_lines_follow_the_text() {
        let uploads = Uploads {
            batches: vec![vec![CreateAttachment::bytes(b"a".to_vec(), "a.txt")]],
            lines: vec!["https://example.com/x.png".into()],
        };
        let steps = plan_steps("Here", uploads);
        assert_eq!(steps.len(), 1);
        assert_eq!(steps[0].text, "Here\n\nhttps://example.com/x.png");
        assert_eq!(steps[0].files.len(), 1);
        let only_files = plan_steps("", Uploads { batches: vec![Vec::new(), Vec::new()], lines: Vec::new() });
        assert_eq!(only_files.len(), 2);
    }
}
