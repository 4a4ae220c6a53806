//! The slash commands waiting for their answer, and how an answer reaches the person.
//!
//! Discord fails an interaction that gets no response within 3 s. The first answer is the
//! response itself (a message, type 4) when it comes in time; a command that is slow by nature,
//! or whose answer has not come after [`ANSWER_WITHIN`], is acknowledged with a deferred
//! response (type 5, Discord shows "thinking…") and its answer then edits that message
//! (`@original`). Further messages are follow-ups. The token works for 15 minutes; after that,
//! or when Discord refused the interaction's response, the answer goes to the channel as a
//! plain message, so it is never lost, only no longer attached to the command.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use serenity::all::{ApplicationId, CommandInteraction, CreateActionRow, InteractionId};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::discord::rest::{AnswerPart, Rest};
use crate::discord::retry::{RetryPolicy, SendError, once, with_retry};
use crate::discord::target::allowed_mentions;

/// How long an answer may take before the command is acknowledged with a deferred response:
/// well inside Discord's 3 s, leaving time for the callback itself.
pub(crate) const ANSWER_WITHIN: Duration = Duration::from_secs(2);
/// How long the interaction's token is used: Discord's 15 minutes, less a margin.
const TOKEN_USABLE: Duration = Duration::from_secs(14 * 60);

/// Interaction response types and the ephemeral flag.
const CHANNEL_MESSAGE: u8 = 4;
const DEFERRED_CHANNEL_MESSAGE: u8 = 5;
const EPHEMERAL: u64 = 64;

/// Where an interaction's answer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// No response yet: the answer is the response.
    Open,
    /// Acknowledged: the answer edits the "thinking…" message.
    Deferred,
    /// Answered: more messages are follow-ups.
    Answered,
    /// Discord refused the response: the answer goes to the channel.
    Failed,
}

/// A slash command waiting for (more of) its answer.
struct Pending {
    id: InteractionId,
    application: ApplicationId,
    token: String,
    /// Shown to the person alone.
    ephemeral: bool,
    received: Instant,
    /// Held while a response is sent, so the deferral and the answer never both respond.
    stage: tokio::sync::Mutex<Stage>,
}

/// The slash commands of the last 15 minutes, by interaction id.
pub(crate) struct Answers {
    rest: Arc<Rest>,
    open: Mutex<HashMap<u64, Arc<Pending>>>,
    shutdown: CancellationToken,
}

impl Answers {
    pub(crate) fn new(rest: Arc<Rest>, shutdown: CancellationToken) -> Answers {
        Answers { rest, open: Mutex::new(HashMap::new()), shutdown }
    }

    /// Starts waiting for the answer to `interaction`, received at `received`. False when it
    /// is known already (the gateway replayed it): it was taken on the first time.
    pub(crate) fn open(&self, interaction: &CommandInteraction, ephemeral: bool, received: Instant) -> bool {
        let mut open = self.lock();
        open.retain(|_, pending| pending.received.elapsed() < TOKEN_USABLE);
        if open.contains_key(&interaction.id.get()) {
            return false;
        }
        let pending = Pending {
            id: interaction.id,
            application: interaction.application_id,
            token: interaction.token.clone(),
            ephemeral,
            received,
            stage: tokio::sync::Mutex::new(Stage::Open),
        };
        open.insert(interaction.id.get(), Arc::new(pending));
        true
    }

    /// Whether replies to `id` can still go through the interaction.
    pub(crate) fn is_open(&self, id: u64) -> bool {
        let young = self.lock().get(&id).map(|pending| pending.received.elapsed() < TOKEN_USABLE);
        if young == Some(false) {
            tracing::info!(
                interaction_id = id,
                "a slash command's interaction has expired; its answer goes to the channel"
            );
        }
        young == Some(true)
    }

    fn usable(&self, id: u64) -> Option<Arc<Pending>> {
        self.lock().get(&id).filter(|pending| pending.received.elapsed() < TOKEN_USABLE).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Pending>>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Defers `id` once [`ANSWER_WITHIN`] has passed since it was received, unless answered by then.
    pub(crate) fn defer_unless_answered(self: &Arc<Self>, id: u64) {
        let Some(pending) = self.usable(id) else { return };
        let answers = Arc::clone(self);
        tokio::spawn(async move {
            tokio::select! {
                _ = answers.shutdown.cancelled() => {}
                _ = tokio::time::sleep_until(pending.received + ANSWER_WITHIN) => answers.defer(id).await,
            }
        });
    }

    /// Acknowledges `id` with a deferred response, unless it has had a response.
    pub(crate) async fn defer(&self, id: u64) {
        let Some(pending) = self.usable(id) else { return };
        let mut stage = pending.stage.lock().await;
        if *stage != Stage::Open {
            return;
        }
        let mut response = json!({ "type": DEFERRED_CHANNEL_MESSAGE });
        if pending.ephemeral {
            response["data"] = json!({ "flags": EPHEMERAL });
        }
        match self.rest.answer_interaction(AnswerPart::Response(pending.id), &pending.token, &response).await {
            Ok(()) => {
                tracing::debug!(interaction_id = id, "slash command acknowledged; its answer follows");
                *stage = Stage::Deferred;
            }
            Err(err) => {
                tracing::warn!(%err, interaction_id = id, "cannot acknowledge a slash command; its answer goes to the channel");
                *stage = Stage::Failed;
            }
        }
    }

    /// Sends a message of the answer to `id` through the interaction. False when it must go
    /// to the channel instead (unknown or expired interaction, or Discord refused it; logged).
    pub(crate) async fn say(&self, id: u64, content: &str, components: &[CreateActionRow]) -> bool {
        self.send(id, content, components, false).await
    }

    /// [`Answers::say`], shown to the person alone wherever the command was used (a refusal is
    /// nobody else's business), unless a deferral already made the answer public.
    pub(crate) async fn say_privately(&self, id: u64, content: &str) -> bool {
        self.send(id, content, &[], true).await
    }

    async fn send(&self, id: u64, content: &str, components: &[CreateActionRow], private: bool) -> bool {
        let Some(pending) = self.usable(id) else { return false };
        let mut stage = pending.stage.lock().await;
        let message = message_json(content, components, pending.ephemeral || private);
        let sent = match *stage {
            Stage::Open => {
                let response = json!({ "type": CHANNEL_MESSAGE, "data": message });
                // Once: a retry could only meet "already acknowledged" or the 3 s limit.
                let part = AnswerPart::Response(pending.id);
                once("answer a slash command", self.rest.answer_interaction(part, &pending.token, &response)).await
            }
            Stage::Deferred => {
                let mut edit = message;
                // The deferral fixed whether it is ephemeral; an edit may not change it.
                edit.as_object_mut().map(|fields| fields.remove("flags"));
                self.retried(AnswerPart::EditOriginal(pending.application), &pending.token, &edit).await
            }
            Stage::Answered => self.retried(AnswerPart::FollowUp(pending.application), &pending.token, &message).await,
            Stage::Failed => return false,
        };
        match sent {
            Ok(()) => {
                *stage = Stage::Answered;
                true
            }
            Err(err) => {
                tracing::warn!(%err, interaction_id = id, "cannot answer a slash command; the answer goes to the channel");
                if *stage == Stage::Open {
                    *stage = Stage::Failed;
                }
                false
            }
        }
    }

    /// A webhook call (edit or follow-up), retried as message creates are.
    async fn retried(&self, part: AnswerPart, token: &str, body: &Value) -> Result<(), SendError> {
        let call = || self.rest.answer_interaction(part, token, body);
        with_retry(&RetryPolicy::DEFAULT, "answer a slash command", &self.shutdown, call).await
    }
}

/// A message of an answer: the text, its buttons, who may ping whom; ephemeral if personal.
fn message_json(content: &str, components: &[CreateActionRow], ephemeral: bool) -> Value {
    let mut message = json!({ "content": content, "allowed_mentions": allowed_mentions() });
    if !components.is_empty() {
        message["components"] = json!(components);
    }
    if ephemeral {
        message["flags"] = json!(EPHEMERAL);
    }
    message
}

#[cfg(test)]
mod tests {
    use serenity::all::{HttpBuilder, Interaction};
    use switchboard_testkit::fake_discord::{FakeDiscord, events};

    use super::*;

    const DM: u64 = 300;
    const ALICE: u64 = 42;

    /// The fake with `/status` registered, the adapter's REST client, and an invocation of it.
    async fn invoked(fake: &FakeDiscord, rest: &Rest) -> CommandInteraction {
        let application = ApplicationId::new(fake.bot().application_id);
        let table = [json!({ "name": "status", "description": "how things are" })];
        rest.overwrite_commands(application, None, &table).await.unwrap();
        let dispatched = fake.run_command(DM, ALICE, "status", &[]);
        let command = &fake.application_commands(None)[0];
        let user = events::user(ALICE, "alice");
        let payload = events::command_interaction((dispatched.id, &dispatched.token), None, DM, user, command, vec![]);
        match serde_json::from_value(payload) {
            Ok(Interaction::Command(command)) => command,
            other => panic!("{other:?}"),
        }
    }

    /// The fake, the answers of a client pointed at it, and an invocation of `/status` there.
    async fn started() -> (FakeDiscord, Arc<Answers>, CommandInteraction) {
        let fake = FakeDiscord::start().await;
        let http = HttpBuilder::new(FakeDiscord::TOKEN).proxy(fake.url()).ratelimiter_disabled(true).build();
        let rest = Arc::new(Rest::new(Arc::new(http)));
        let command = invoked(&fake, &rest).await;
        (fake, Arc::new(Answers::new(rest, CancellationToken::new())), command)
    }

    #[tokio::test]
    async fn an_answer_in_time_is_the_response_and_the_deferral_stands_down() {
        let (fake, answers, command) = started().await;
        assert!(answers.open(&command, false, Instant::now()));
        assert!(!answers.open(&command, false, Instant::now()), "a replay is not taken on twice");
        answers.defer_unless_answered(command.id.get());
        assert!(answers.say(command.id.get(), "All fine.", &[]).await);
        tokio::time::sleep(ANSWER_WITHIN + Duration::from_millis(300)).await;
        let kinds: Vec<u8> = fake.interaction_callbacks().iter().map(|callback| callback.kind).collect();
        assert_eq!(kinds, [CHANNEL_MESSAGE]);
        assert_eq!(fake.interaction_callbacks()[0].data["content"], "All fine.");
    }

    #[tokio::test]
    async fn a_late_answer_is_deferred_in_time_then_edits_the_response_and_follows_up() {
        let (fake, answers, command) = started().await;
        let id = command.id.get();
        assert!(answers.open(&command, true, Instant::now()));
        answers.defer_unless_answered(id);
        tokio::time::sleep(ANSWER_WITHIN + Duration::from_millis(300)).await;
        let callbacks = fake.interaction_callbacks();
        assert_eq!((callbacks.len(), callbacks[0].kind), (1, DEFERRED_CHANNEL_MESSAGE));
        assert_eq!(callbacks[0].data["flags"], json!(EPHEMERAL), "deferred as the answer will be shown");
        assert!(answers.say(id, "Part one.", &[]).await);
        assert!(answers.say(id, "Part two.", &[]).await);
        let edit = &fake.calls_to("PATCH /webhooks/{id}/{token}/messages/@original")[0];
        assert_eq!((edit.status, edit.body["content"].clone()), (200, json!("Part one.")));
        let follow_up = &fake.calls_to("POST /webhooks/{id}/{token}")[0];
        assert_eq!((follow_up.status, follow_up.body["flags"].clone()), (200, json!(EPHEMERAL)));
        assert!(!answers.say(ALICE, "Not an interaction.", &[]).await, "unknown ids go to the channel");
    }

    #[test]
    fn an_answer_is_ephemeral_only_when_personal_and_keeps_its_buttons() {
        let rows = crate::discord::components::action_rows(&[vec![crate::contract::Button::new("Pause", "cp:j1")]]);
        let personal = message_json("Level: user", &[], true);
        assert_eq!(personal["flags"], json!(EPHEMERAL));
        assert!(personal.get("components").is_none());
        let shared = message_json("Jobs", &rows, false);
        assert!(shared.get("flags").is_none());
        assert_eq!(shared["components"][0]["components"][0]["custom_id"], json!("cp:j1"));
        assert_eq!(shared["allowed_mentions"]["replied_user"], json!(false));
    }
}
