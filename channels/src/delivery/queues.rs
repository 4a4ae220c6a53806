//! Per-chat delivery sequences: a chat is in `chats` while one of its jobs runs; its later
//! jobs wait in the queue and start, in order, when the running one ends. Different chats are
//! served concurrently, at most [`MAX_SENDING`] at a time, like teloxide's dispatcher does for
//! updates.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::live::LiveRuns;
use super::outbound::Courier;
use super::platform::Platform;
use super::record::DeliveryPolicy;
use crate::bus::{Acker, Deliveries, Delivery};
use crate::contract::OutboundMessage;

/// Chats whose messages are being sent at the same time.
const MAX_SENDING: usize = 16;
/// Deliveries taken off the bus and not yet acked, across all chats.
pub(super) const MAX_HELD: usize = 256;
/// How long deliveries in flight may finish after shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// A delivery waiting for its turn in its chat.
struct Job {
    msg: OutboundMessage,
    acker: Box<dyn Acker>,
    /// How many times the bus offered it (1: the first time).
    attempt: u64,
}

pub(super) struct ChatQueues<P: Platform> {
    courier: Arc<Courier<P>>,
    sending: Arc<Semaphore>,
    running: JoinSet<()>,
    /// The chat of each running task, so that its queue moves on even if the task panicked.
    running_chats: HashMap<tokio::task::Id, String>,
    chats: HashMap<String, VecDeque<Job>>,
    held: usize,
}

impl<P: Platform> ChatQueues<P> {
    pub(super) fn new(courier: Arc<Courier<P>>) -> Self {
        Self {
            courier,
            sending: Arc::new(Semaphore::new(MAX_SENDING)),
            running: JoinSet::new(),
            running_chats: HashMap::new(),
            chats: HashMap::new(),
            held: 0,
        }
    }

    /// Takes deliveries and sends them until `shutdown` or the end of `replies`.
    pub(super) async fn run(mut self, mut replies: Deliveries, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                Some(finished) = self.running.join_next_with_id(), if !self.running.is_empty() => {
                    let task = match finished {
                        Ok((task, ())) => task,
                        Err(err) => {
                            tracing::error!(%err, "an outbound delivery task failed");
                            err.id()
                        }
                    };
                    self.finished(task);
                }
                next = replies.next(), if self.held < MAX_HELD => match next {
                    Some(Ok(delivery)) => self.accept(delivery).await,
                    Some(Err(err)) => {
                        tracing::warn!(%err, "receiving {} replies failed; retrying in 1 s", P::NAME);
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    None => break,
                },
            }
        }
        // Deliveries still queued are dropped unacked: the bus offers them again.
        let drained = tokio::time::timeout(SHUTDOWN_GRACE, async { while self.running.join_next().await.is_some() {} });
        if drained.await.is_err() {
            tracing::warn!("outbound deliveries still running at shutdown were abandoned");
        }
    }

    async fn accept(&mut self, delivery: Delivery) {
        let decoded = delivery.decode::<OutboundMessage>().map_err(|err| err.to_string());
        let msg = match decoded.and_then(|msg| msg.validate().map(|()| msg).map_err(|err| err.to_string())) {
            Ok(msg) => msg,
            Err(err) => {
                tracing::warn!(%err, subject = %delivery.subject, "undecodable {} reply dropped", P::NAME);
                if let Err(err) = delivery.ack().await {
                    tracing::warn!(%err, "cannot ack an undecodable reply");
                }
                return;
            }
        };
        if delivery.attempt > 1 {
            crate::meters::meters().redelivered(crate::meters::FlowLabel::outbound);
        }
        let (info, acker) = delivery.into_parts();
        let chat = self.courier.queue_key(&msg);
        let job = Job { msg, acker, attempt: info.attempt };
        self.held += 1;
        match self.chats.get_mut(&chat) {
            Some(waiting) => waiting.push_back(job),
            None => {
                self.chats.insert(chat.clone(), VecDeque::new());
                self.spawn(chat, job);
            }
        }
    }

    /// A chat's running job ended: its next one starts, or the chat leaves the map.
    fn finished(&mut self, task: tokio::task::Id) {
        self.held -= 1;
        let Some(chat) = self.running_chats.remove(&task) else { return };
        match self.chats.get_mut(&chat).and_then(VecDeque::pop_front) {
            Some(job) => self.spawn(chat, job),
            None => {
                self.chats.remove(&chat);
            }
        }
    }

    fn spawn(&mut self, chat: String, job: Job) {
        let (courier, sending) = (Arc::clone(&self.courier), Arc::clone(&self.sending));
        let task = self.running.spawn(async move {
            // The semaphore is never closed; without a permit the job would just run unlimited.
            let _permit = sending.acquire_owned().await.ok();
            courier.handle_attempt(job.msg, job.acker, job.attempt).await;
        });
        self.running_chats.insert(task.id(), chat);
    }
}

/// Takes the platform's outbound messages off the bus and delivers them until `shutdown` or
/// the end of `replies`. Replies to runs followed by [`run_live`](super::live::run_live) stop
/// their typing and take over their streamed drafts.
pub async fn run_outbound<P: Platform>(
    platform: Arc<P>,
    replies: Deliveries,
    live: Arc<LiveRuns<P>>,
    policy: DeliveryPolicy,
    shutdown: CancellationToken,
) {
    let courier = Arc::new(Courier::new(platform, live, shutdown.clone(), policy));
    ChatQueues::new(courier).run(replies, shutdown).await;
}
