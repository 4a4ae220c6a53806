//! Per-sender rate limit (`[rate_limits]`): how many turns one person may start a minute.
//!
//! Checked at intake, in arrival order, before a message takes a place in its session's queue,
//! so a sender who floods a group cannot fill the queue other members' messages need. What
//! counts is a turn a sender starts, as bursts are merged (`batch`): a message that follows
//! the sender's own previous message in the same chat within a burst's gap (and within the
//! longest a burst lasts) joins that burst and counts nothing, so a forwarded conversation of
//! fifty messages counts once. Commands and switchboard's own messages never
//! count.
//!
//! A sender past their limit gets one notice saying when to send again; their later messages
//! in that spell are settled without an answer. A message whose sender the client names itself
//! (`flags.claimed_sender`, set by the API) is not limited: the client could name a new sender
//! for every message. The limit
//! is per worker process: with several workers on NATS a sender may get up to that many times
//! the rate.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use crate::config::Level;
use crate::config::RateLimitsConfig;

/// The window limits are counted over.
pub(super) const WINDOW: Duration = Duration::from_secs(60);
/// A burst lasts at most this many gaps after its first message, so a sender who never
/// pauses starts a new one that counts again.
const MAX_BURST_WINDOWS: u32 = 4;
/// Map sizes at which entries that no longer matter are pruned.
const PRUNE_AT: usize = 1024;

/// What the limiter says about one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Within the limit (or not counted): it goes to its session.
    Pass,
    /// Over the limit: `notify` when the sender has not been told in this spell yet;
    /// `retry_after` until a turn is free again.
    Limited { notify: bool, retry_after: Duration, per_minute: u32 },
    /// The sender's level is needed to decide: ask again with it.
    NeedLevel,
}

/// One sender's recent turns.
#[derive(Default)]
struct SenderRate {
    /// When their counted turns of the last window started, oldest first; never longer than
    /// their limit.
    started: VecDeque<Instant>,
    /// Their level as last looked up, and when (looked up again after a window).
    level: Option<(Level, Instant)>,
    /// Told about the limit since their last admitted turn.
    notified: bool,
}

/// The last message of a chat, to recognise a sender's burst.
struct LastMessage {
    sender: String,
    at: Instant,
    burst_started: Instant,
    /// What the burst's first message was told: a burst joins its first message's verdict.
    passed: bool,
}

/// The limiter's state: per sender identity, and per session key.
pub(super) struct RateLimiter {
    limits: RateLimitsConfig,
    /// Messages of one sender closer than this are one burst (the debounce, or `batch`'s gap).
    gap: Duration,
    senders: HashMap<String, SenderRate>,
    chats: HashMap<String, LastMessage>,
    /// Sizes at which the maps are pruned next (doubling while most entries are active, so
    /// a crowd of senders does not make every message scan the map).
    prune_at: (usize, usize),
}

impl RateLimiter {
    pub fn new(limits: RateLimitsConfig, debounce: Duration) -> Self {
        let gap = debounce.max(super::batch::BURST_GAP);
        Self { limits, gap, senders: HashMap::new(), chats: HashMap::new(), prune_at: (PRUNE_AT, PRUNE_AT) }
    }

    /// Decides about a person's message from `sender` in session `chat` arriving `now`.
    /// `level` is the sender's level when the caller looked it up after [`Verdict::NeedLevel`].
    /// Nothing is recorded until the verdict is `Pass` or `Limited`.
    /// Senders and chats remembered.
    pub fn remembered(&self) -> usize {
        self.senders.len() + self.chats.len()
    }

    pub fn check(&mut self, chat: &str, sender: &str, now: Instant, level: Option<Level>) -> Verdict {
        let Some(lowest) = self.limits.lowest() else { return Verdict::Pass };
        if let Some(passed) = self.continues_burst(chat, sender, now) {
            self.note_message(chat, sender, now, passed, false);
            return if passed {
                Verdict::Pass
            } else {
                let rate = self.senders.entry(sender.to_owned()).or_default();
                let (retry_after, per_minute) = retry(rate, now, lowest);
                Verdict::Limited { notify: false, retry_after, per_minute }
            };
        }
        let rate = self.senders.entry(sender.to_owned()).or_default();
        while rate.started.front().is_some_and(|&start| now.duration_since(start) >= WINDOW) {
            rate.started.pop_front();
        }
        if let Some(level) = level {
            rate.level = Some((level, now));
        }
        let count = rate.started.len();
        let limit = if count < lowest as usize {
            None
        } else {
            match rate.level.filter(|(_, at)| now.duration_since(*at) < WINDOW) {
                Some((level, _)) => self.limits.per_minute(level),
                None => return Verdict::NeedLevel,
            }
        };
        if limit.is_none_or(|limit| count < limit as usize) {
            rate.started.push_back(now);
            rate.notified = false;
            self.note_message(chat, sender, now, true, true);
            return Verdict::Pass;
        }
        let notify = !rate.notified;
        rate.notified = true;
        let (retry_after, _) = retry(rate, now, lowest);
        let per_minute = limit.unwrap_or(lowest);
        self.note_message(chat, sender, now, false, true);
        Verdict::Limited { notify, retry_after, per_minute }
    }

    /// `Some(verdict of the burst)` when this message joins the sender's burst in `chat`.
    fn continues_burst(&self, chat: &str, sender: &str, now: Instant) -> Option<bool> {
        let last = self.chats.get(chat).filter(|last| last.sender == sender)?;
        let recent = now.duration_since(last.at) < self.gap;
        let young = now.duration_since(last.burst_started) < self.gap * MAX_BURST_WINDOWS;
        (recent && young).then_some(last.passed)
    }

    fn note_message(&mut self, chat: &str, sender: &str, now: Instant, passed: bool, starts_burst: bool) {
        let burst_started = match self.chats.get(chat) {
            Some(last) if !starts_burst => last.burst_started,
            _ => now,
        };
        self.chats.insert(chat.to_owned(), LastMessage { sender: sender.to_owned(), at: now, burst_started, passed });
        self.prune(now);
    }

    /// Forgets senders with no turn in the window and chats quiet for a window, once the maps
    /// are large, so memory follows the active senders, not all senders ever seen.
    fn prune(&mut self, now: Instant) {
        if self.senders.len() >= self.prune_at.0 {
            self.senders.retain(|_, rate| rate.started.back().is_some_and(|&at| now.duration_since(at) < WINDOW));
            self.prune_at.0 = PRUNE_AT.max(self.senders.len() * 2);
        }
        if self.chats.len() >= self.prune_at.1 {
            self.chats.retain(|_, last| now.duration_since(last.at) < WINDOW);
            self.prune_at.1 = PRUNE_AT.max(self.chats.len() * 2);
        }
    }

    #[cfg(test)]
    fn tracked(&self) -> (usize, usize) {
        (self.senders.len(), self.chats.len())
    }
}

/// How long until the sender's oldest counted turn leaves the window, and the limit to name
/// (their count, which is their limit once they are over it).
fn retry(rate: &SenderRate, now: Instant, lowest: u32) -> (Duration, u32) {
    let retry_after =
        rate.started.front().map_or(Duration::ZERO, |&start| (start + WINDOW).saturating_duration_since(now));
    let per_minute = u32::try_from(rate.started.len()).unwrap_or(u32::MAX).max(lowest);
    (retry_after, per_minute)
}

/// What a sender past the limit is told; named in a group, where others read it too.
pub(super) fn notice(sender_name: &str, is_group: bool, per_minute: u32, retry_after: Duration) -> String {
    let secs = retry_after.as_secs().max(1);
    let who = if is_group && !sender_name.is_empty() { format!("{sender_name}, you are") } else { "You are".into() };
    format!(
        "{who} sending messages faster than I answer them (at most {per_minute} a minute). I did not answer \
         this one and will not answer more for {secs} s; send again after that."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const GUEST: RateLimitsConfig = RateLimitsConfig { guest: 3, user: 5, admin: 0, owner: 0 };

    fn pass_all(limiter: &mut RateLimiter, chat: &str, sender: &str, now: Instant, level: Level) -> Verdict {
        match limiter.check(chat, sender, now, None) {
            Verdict::NeedLevel => limiter.check(chat, sender, now, Some(level)),
            verdict => verdict,
        }
    }

    #[test]
    fn a_guest_gets_three_turns_a_minute_and_one_notice() {
        let mut limiter = RateLimiter::new(GUEST, Duration::ZERO);
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        for i in 0..3 {
            assert_eq!(limiter.check("c", "sam", at(i), None), Verdict::Pass, "turn {i}");
        }
        // The level is only looked up once the lowest limit is reached.
        assert_eq!(limiter.check("c", "sam", at(3), None), Verdict::NeedLevel);
        let limited = limiter.check("c", "sam", at(3), Some(Level::Guest));
        assert_eq!(limited, Verdict::Limited { notify: true, retry_after: Duration::from_secs(57), per_minute: 3 });
        // Told once; the level is remembered.
        let again = limiter.check("c", "sam", at(10), None);
        assert_eq!(again, Verdict::Limited { notify: false, retry_after: Duration::from_secs(50), per_minute: 3 });
        // Another sender in the same chat is not affected.
        assert_eq!(limiter.check("c", "ann", at(11), None), Verdict::Pass);
        // A minute after the first turn, one turn is free again, and a new spell is told again.
        assert_eq!(limiter.check("c", "sam", at(60), None), Verdict::Pass);
        // (In another chat: in this one, a message right after is the same burst.)
        assert!(matches!(limiter.check("c2", "sam", at(60), None), Verdict::Limited { notify: true, .. }));
    }

    #[test]
    fn levels_have_their_own_limits_and_zero_is_unlimited() {
        let mut limiter = RateLimiter::new(GUEST, Duration::ZERO);
        let now = Instant::now();
        // Two seconds apart: separate turns, not one burst.
        let passed = |limiter: &mut RateLimiter, sender: &str, level| {
            let at = |i: u64| now + Duration::from_secs(2 * i);
            (0..20).filter(|&i| pass_all(limiter, "c", sender, at(i), level) == Verdict::Pass).count()
        };
        assert_eq!(passed(&mut limiter, "guest", Level::Guest), 3);
        assert_eq!(passed(&mut limiter, "user", Level::User), 5);
        assert_eq!(passed(&mut limiter, "admin", Level::Admin), 20);
        assert_eq!(passed(&mut limiter, "owner", Level::Owner), 20);
        let mut off = RateLimiter::new(RateLimitsConfig::UNLIMITED, Duration::ZERO);
        assert_eq!(passed(&mut off, "guest", Level::Guest), 20);
    }

    #[test]
    fn a_burst_merged_by_the_debounce_counts_once() {
        let debounce = Duration::from_millis(1500);
        let mut limiter = RateLimiter::new(GUEST, debounce);
        let start = Instant::now();
        // A forwarded conversation: 50 messages 5 ms apart.
        for i in 0..50 {
            let now = start + Duration::from_millis(5 * i);
            assert_eq!(pass_all(&mut limiter, "c", "sam", now, Level::Guest), Verdict::Pass, "message {i}");
        }
        // Someone else writing in between ends the burst: the next message starts a turn.
        let later = start + Duration::from_secs(1);
        assert_eq!(limiter.check("c", "ann", later, None), Verdict::Pass);
        assert_eq!(limiter.check("c", "sam", later, None), Verdict::Pass);
        assert_eq!(limiter.check("c", "sam", later + debounce * 2, None), Verdict::Pass);
        // A fourth turn is over the limit, and so is the rest of its burst, without a second notice.
        let fourth = later + debounce * 4;
        assert!(matches!(
            pass_all(&mut limiter, "c", "sam", fourth, Level::Guest),
            Verdict::Limited { notify: true, .. }
        ));
        let rest = limiter.check("c", "sam", fourth + Duration::from_millis(5), None);
        assert!(matches!(rest, Verdict::Limited { notify: false, .. }), "{rest:?}");
    }

    #[test]
    fn a_never_ending_burst_counts_every_few_windows() {
        let debounce = Duration::from_millis(1500);
        let mut limiter = RateLimiter::new(GUEST, debounce);
        let start = Instant::now();
        // One message a second never leaves a quiet window, but a turn waits at most 4 windows
        // (6 s), so the stream starts a turn every 6 s: the fourth, at 18 s, is over the limit.
        let verdicts: Vec<Verdict> =
            (0..20).map(|i| pass_all(&mut limiter, "c", "sam", start + Duration::from_secs(i), Level::Guest)).collect();
        let first_limited = verdicts.iter().position(|v| *v != Verdict::Pass);
        assert_eq!(first_limited, Some(18), "{verdicts:?}");
    }

    #[test]
    fn memory_follows_the_active_senders() {
        let mut limiter = RateLimiter::new(GUEST, Duration::ZERO);
        let start = Instant::now();
        for i in 0..5000 {
            let now = start + Duration::from_millis(i * 100);
            limiter.check(&format!("chat{i}"), &format!("sender{i}"), now, None);
        }
        let (senders, chats) = limiter.tracked();
        // 600 senders wrote within the last minute; older ones are forgotten at each prune.
        assert!(senders <= 2 * PRUNE_AT && chats <= 2 * PRUNE_AT, "{senders} senders, {chats} chats");
    }

    #[test]
    fn the_notice_says_how_many_and_when() {
        assert_eq!(
            notice("Sam", true, 10, Duration::from_millis(41_500)),
            "Sam, you are sending messages faster than I answer them (at most 10 a minute). I did not answer \
             this one and will not answer more for 41 s; send again after that."
        );
        assert!(notice("Sam", false, 10, Duration::ZERO).starts_with("You are sending"));
    }
}
