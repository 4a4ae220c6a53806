//! What the model sees of a session: the token budget, the history pipeline, and compaction.
//!
//! The worker loads a generous slice of the transcript (`agent.history_limit`) and the
//! session's saved summary; [`ContextEngine::prepare`] turns them into the history of one
//! turn within the input budget of the model the turn calls first ([`Target`]). After the turn,
//! [`ContextEngine::learn`] corrects the token estimates with the provider's reported usage, and
//! [`compaction`] folds old history into a summary when the session grows long. The engine is
//! also the model chain's [`crate::provider::failover::Fitting`] ([`refit`]): a fallback model
//! with a smaller window gets the request refitted to it.

pub mod compaction;
pub mod pipeline;
mod refit;
mod window;

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use switchboard_channels::contract::SessionKey;

use crate::agent::Agent;
use crate::config::{CompactionConfig, HistoryConfig};
use crate::provider::ChatMessage;
use crate::tokens::{self, Calibration};
use crate::tools::ToolFilter;
use pipeline::Budget;
pub use window::{WindowChange, Windows};

pub use crate::config::{DEFAULT_OUTPUT_RESERVE, output_reserve};

/// The room the conversation keeps beside the fixed part of a turn (system prompt and tool
/// schemas) in an input budget of `input` tokens: a quarter of it, and in a small window half
/// of it up to [`CONVERSATION_FLOOR`] tokens. A 4,096-token window whose prompt and tools took
/// three quarters left the history room for two or three exchanges of a local model that calls
/// tools, so it was cut or compacted every few turns, each time re-read by the model.
fn conversation_room(input: u64) -> u64 {
    (input / 4).max((input / 2).min(CONVERSATION_FLOOR))
}

/// What the conversation keeps at least, where the input budget allows (see
/// [`conversation_room`]): about ten short exchanges.
const CONVERSATION_FLOOR: u64 = 1536;

/// The context settings a worker runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextSettings {
    /// The context window in tokens of a model its agent's settings give none
    /// (`agent.context_window`); the chains' models carry their own (`AgentSettings::context_windows`).
    pub context_window: u64,
    pub history: HistoryConfig,
    pub compaction: CompactionConfig,
}

impl Default for ContextSettings {
    fn default() -> Self {
        Self { context_window: 128_000, history: HistoryConfig::default(), compaction: CompactionConfig::default() }
    }
}

/// A turn's history, ready for the agent.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    pub history: Vec<ChatMessage>,
    /// The raw (uncorrected) estimate of what the first model call sends before the input:
    /// system prompt, history and tools; [`ContextEngine::learn`] compares it with the usage.
    pub raw_base: u64,
}

/// Sessions whose history marks are kept at most; past it they are all dropped (a session
/// without its marks costs one more read of its history by the provider, nothing else).
const MARKED_SESSIONS: usize = 10_000;

/// What a degraded fit was made for (see [`ContextEngine::kept_tools`]): a hash of the
/// session's summary (a compaction starts a new conversation, fitted afresh), the model, its
/// window and the tools offered.
fn fit_generation(target: Target<'_>, window: u64, summary: Option<&str>, offered: &ToolFilter) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (target.agent.settings().name.as_str(), target.model, window, summary).hash(&mut hasher);
    match offered {
        ToolFilter::All => 0u8.hash(&mut hasher),
        ToolFilter::Only(names) => names.hash(&mut hasher),
    }
    hasher.finish()
}

/// What a turn's budgets are for: an agent, calling one model of its chain first. The budgets
/// use that model's window; a fallback model with a smaller one gets the request refitted by the
/// chain (see [`refit`]).
#[derive(Clone, Copy)]
pub struct Target<'a> {
    pub agent: &'a Agent,
    /// `provider/model`, as the chain names it; empty for an agent without a chain.
    pub model: &'a str,
}

impl<'a> Target<'a> {
    /// `agent` calling `pick` first (a session's `/model`), or its chain's first model when
    /// nothing is picked or the pick is no longer in the chain.
    pub fn new(agent: &'a Agent, pick: Option<&str>) -> Self {
        let models = &agent.settings().models;
        let picked = models.iter().find(|model| Some(model.as_str()) == pick);
        Self { agent, model: picked.or(models.first()).map_or("", String::as_str) }
    }

    /// `agent` calling its chain in order, as compaction's calls do.
    pub fn primary(agent: &'a Agent) -> Self {
        Self::new(agent, None)
    }
}

/// The budget and the estimate correction of one worker.
#[derive(Debug)]
pub struct ContextEngine {
    settings: ContextSettings,
    calibration: Calibration,
    windows: Windows,
    /// Where each session's history was cut and pruned last (see [`pipeline::Marks`]).
    marks: Mutex<HashMap<SessionKey, pipeline::Marks>>,
    /// Per agent and model: the room its last turn left for the history, what compaction
    /// measures a history against (see [`ContextEngine::history_room`]).
    rooms: Mutex<HashMap<(String, String), u64>>,
    /// The tools of each session whose prompt was last fitted in a degraded form (the minimal
    /// prompt, tools dropped), with the generation the fit was made for.
    fits: Mutex<HashMap<SessionKey, (u64, ToolFilter)>>,
}

impl ContextEngine {
    pub fn new(settings: ContextSettings) -> Self {
        Self {
            settings,
            calibration: Calibration::default(),
            windows: Windows::default(),
            marks: Mutex::default(),
            rooms: Mutex::default(),
            fits: Mutex::default(),
        }
    }

    /// The windows models' servers named (see [`Windows`]).
    pub fn windows(&self) -> &Windows {
        &self.windows
    }

    pub fn settings(&self) -> &ContextSettings {
        &self.settings
    }

    pub fn calibration(&self) -> &Calibration {
        &self.calibration
    }

    /// The window `model` has in `agent`'s chain as configured: its own, else
    /// `agent.context_window`.
    pub fn configured_window(&self, agent: &Agent, model: &str) -> u64 {
        agent.settings().context_windows.get(model).copied().unwrap_or(self.settings.context_window)
    }

    /// The window of the target's model: as configured, or smaller as its server named it.
    pub fn window(&self, target: Target<'_>) -> u64 {
        self.windows.of(target.model, self.configured_window(target.agent, target.model))
    }

    /// Context window − output reserve − the offered tools' schemas (`tool_tokens`, their
    /// heuristic count: [`Agent::tool_tokens`]).
    pub fn input_budget(&self, target: Target<'_>, tool_tokens: u64) -> u64 {
        let tools = self.calibration.correct(tool_tokens);
        self.window_for_input(target).saturating_sub(tools)
    }

    /// The tokens a turn of the target has for its history: the input budget less the system
    /// prompt, with the tools its last turn offered (a small window drops tools, and an
    /// estimate with all of them would leave no room at all). Before any turn: with every tool.
    pub fn history_room(&self, target: Target<'_>) -> u64 {
        let last = self.rooms.lock().unwrap_or_else(PoisonError::into_inner).get(&room_key(target)).copied();
        last.unwrap_or_else(|| self.input_budget(target, target.agent.tool_tokens(&ToolFilter::All)))
    }

    /// The longest answer of a call of the target's model: the output reserve its budgets keep
    /// (`agent.max_tokens`, else an eighth of the window up to 4096), so a model that would
    /// write on and on stops where the window has room.
    pub fn answer_limit(&self, target: Target<'_>) -> u32 {
        let reserve = output_reserve(self.window(target), target.agent.settings().max_tokens);
        u32::try_from(reserve).unwrap_or(u32::MAX)
    }

    /// The most one model call of the target's runs may send, in heuristic tokens (see
    /// [`crate::agent::Turn::budget`]): context window − output reserve, the estimate's
    /// correction taken out.
    pub fn run_budget(&self, target: Target<'_>) -> u64 {
        (self.window_for_input(target) as f64 / self.calibration.ratio()).floor() as u64
    }

    /// Context window − output reserve.
    fn window_for_input(&self, target: Target<'_>) -> u64 {
        let window = self.window(target);
        window.saturating_sub(output_reserve(window, target.agent.settings().max_tokens))
    }

    /// Whether a turn with this system prompt and tools of `tool_tokens` (heuristic) leaves
    /// room for the conversation: the prompt and the schemas leave it its share of the input
    /// budget ([`conversation_room`]), and the message being answered fits beside them.
    pub fn fixed_part_fits(
        &self,
        target: Target<'_>,
        system_prompt: &str,
        tool_tokens: u64,
        input: &ChatMessage,
    ) -> bool {
        let room = self.window_for_input(target);
        let fixed = self.calibration.correct(tokens::raw_text(system_prompt)) + self.calibration.correct(tool_tokens);
        let input = self.calibration.messages(std::slice::from_ref(input));
        fixed <= room - conversation_room(room) && fixed + input <= room
    }

    /// The tools `session_key`'s last turn kept beside the minimal prompt, if its fit was made for
    /// the same summary, model, window and offered tools. The tool schemas and the system prompt
    /// are the head of every request: a session keeps a degraded fit until it is compacted, so
    /// that a new estimate or a shorter message does not change that head back and forth; the
    /// caller still checks that it holds. A prompt fitted whole is fitted whole again as long as
    /// it holds, so it needs nothing kept.
    pub fn kept_tools(
        &self,
        target: Target<'_>,
        session_key: &SessionKey,
        summary: Option<&str>,
        offered: &ToolFilter,
    ) -> Option<ToolFilter> {
        let fits = self.fits.lock().unwrap_or_else(PoisonError::into_inner);
        let (made_for, tools) = fits.get(session_key)?;
        (*made_for == fit_generation(target, self.window(target), summary, offered)).then(|| tools.clone())
    }

    /// Remembers the tools a degraded fit of `session_key`'s turn kept (see
    /// [`ContextEngine::kept_tools`]). A fit for another generation left behind is never used.
    pub fn keep_tools(
        &self,
        target: Target<'_>,
        session_key: &SessionKey,
        summary: Option<&str>,
        offered: &ToolFilter,
        kept: ToolFilter,
    ) {
        let generation = fit_generation(target, self.window(target), summary, offered);
        let mut fits = self.fits.lock().unwrap_or_else(PoisonError::into_inner);
        if fits.len() >= MARKED_SESSIONS && !fits.contains_key(session_key) {
            fits.clear();
        }
        fits.insert(session_key.clone(), (generation, kept));
    }

    /// Chooses the history of a turn of `session_key`: `history` is the session's recent
    /// transcript, `summary` its saved summary, `input` the message being answered with the
    /// tools in `filter`.
    #[expect(clippy::too_many_arguments, reason = "one call per turn, each argument a part of the turn")]
    pub fn prepare(
        &self,
        target: Target<'_>,
        session_key: &SessionKey,
        system_prompt: &str,
        history: Vec<ChatMessage>,
        summary: Option<&str>,
        input: &ChatMessage,
        filter: &ToolFilter,
    ) -> Prepared {
        let tool_tokens = target.agent.tool_tokens(filter);
        // The prompt is counted once, not copied into a message to be counted (it is the
        // largest text of most turns).
        let system_raw = tokens::raw_text(system_prompt);
        let fixed = self.calibration.correct(system_raw + tokens::raw_message(input));
        let input_budget = self.input_budget(target, tool_tokens);
        let room = input_budget.saturating_sub(self.calibration.correct(system_raw));
        // Steps of a third of the history's room, by the heuristic count: a cut frees at least a
        // step, so the turns after it grow into that room before the next cut. The room stays
        // the same from turn to turn while the prompt and the tools do (see `kept_tools`); a step
        // that changed with it moves only the next cut (see `pipeline::cut_points`).
        let step = (room as f64 / 3.0 / self.calibration.ratio()) as u64;
        let budget = Budget { input: input_budget, fixed, step };
        self.rooms.lock().unwrap_or_else(PoisonError::into_inner).insert(room_key(target), room);
        let before = self.marks.lock().unwrap_or_else(PoisonError::into_inner).get(session_key).copied();
        let (history, marks) =
            pipeline::prepare(history, summary, budget, &self.settings.history, &self.calibration, before);
        if Some(marks) != before {
            let mut all = self.marks.lock().unwrap_or_else(PoisonError::into_inner);
            if all.len() >= MARKED_SESSIONS && !all.contains_key(session_key) {
                all.clear();
            }
            all.insert(session_key.clone(), marks);
        }
        let raw_base = system_raw + tokens::raw_messages(&history) + tool_tokens;
        Prepared { history, raw_base }
    }

    /// Learns from a finished turn: its transcript (input first) was sent on top of `raw_base`,
    /// with more of the tool results it holds shortened and less of the history when a call was
    /// refused as too long, and the provider counted its input tokens over all its calls.
    pub fn learn(&self, raw_base: u64, turn: &crate::agent::TurnResult) {
        let sent = tokens::turn_input(raw_base, &turn.transcript) + turn.shortened_tokens_sent;
        // Counting the dropped history as sent taught a ratio too low, so the next turn was
        // fitted too loosely and refused again: one wasted call on every turn.
        self.calibration.observe(sent.saturating_sub(turn.unsent_history_tokens), turn.usage.input_tokens);
    }
}

fn room_key(target: Target<'_>) -> (String, String) {
    (target.agent.settings().name.clone(), target.model.to_owned())
}

#[cfg(test)]
mod tests {
    use super::conversation_room;

    #[test]
    fn a_small_window_keeps_half_its_input_for_the_conversation_and_a_large_one_a_quarter() {
        // Input budgets of 2,048-, 4,096-, 8,192- and 128,000-token windows, less their answers.
        assert_eq!(conversation_room(1536), 768);
        assert_eq!(conversation_room(3072), 1536);
        assert_eq!(conversation_room(6144), 1536);
        assert_eq!(conversation_room(96_000), 24_000);
    }
}
