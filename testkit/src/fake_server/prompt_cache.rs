//! Prompt caches as the fake model servers keep them, each the way its real server does
//! (checked against the providers' documentation and the real llama-cpp-python server):
//!
//! - [`OpenAiCache`]: any prefix of 1,024 tokens or more is kept, and a later request that
//!   starts with it is served from it, counted in 128-token steps;
//! - [`AnthropicCache`]: only prefixes that end at a `cache_control` breakpoint are kept (of at
//!   least 1,024 tokens), and a request finds one at its own breakpoints or up to 20 blocks
//!   before each; entries live 5 minutes (or an hour), renewed by every hit;
//! - [`SlotCache`]: llama.cpp's one slot, which reuses what a prompt shares with the one just
//!   before it, whatever that was.
//!
//! Tokens are counted as the fakes count them everywhere: about four characters each.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::lock;

/// The shortest prefix either hosted API caches.
pub const MIN_CACHED_TOKENS: usize = 1024;
/// OpenAI counts cached tokens in steps of this many beyond the minimum.
const OPENAI_STEP: usize = 128;
/// How many blocks before a breakpoint Anthropic looks for an earlier entry.
const LOOKBACK_BLOCKS: usize = 20;
/// Anthropic's limit of breakpoints in one request.
pub const MAX_BREAKPOINTS: usize = 4;
/// Prompts an [`OpenAiCache`] keeps (older ones are dropped, as a real cache evicts).
const OPENAI_ENTRIES: usize = 256;

fn tokens(chars: usize) -> usize {
    chars / 4
}

/// The characters two texts start with in common.
fn common_prefix(a: &str, b: &str) -> usize {
    a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count()
}

/// OpenAI's automatic prefix cache.
#[derive(Default)]
pub struct OpenAiCache {
    /// (model, the prompt as rendered), newest last.
    prompts: Mutex<Vec<(String, String)>>,
}

impl OpenAiCache {
    /// The tokens of `prompt` served from the cache, then keeps it for the requests to come.
    pub fn serve(&self, model: &str, prompt: &str) -> usize {
        let mut prompts = lock(&self.prompts);
        let shared = prompts
            .iter()
            .filter(|(seen_model, _)| seen_model == model)
            .map(|(_, seen)| common_prefix(seen, prompt))
            .max()
            .unwrap_or(0);
        prompts.push((model.to_owned(), prompt.to_owned()));
        if prompts.len() > OPENAI_ENTRIES {
            prompts.remove(0);
        }
        let shared = tokens(shared);
        if shared < MIN_CACHED_TOKENS {
            return 0;
        }
        MIN_CACHED_TOKENS + (shared - MIN_CACHED_TOKENS) / OPENAI_STEP * OPENAI_STEP
    }
}

/// What llama.cpp's single slot reused of a prompt: `Llama.generate: N prefix-match hit,
/// remaining M prompt tokens to eval`, as its log says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefixHit {
    /// Tokens reused from the slot.
    pub reused: usize,
    /// Tokens evaluated anew.
    pub evaluated: usize,
}

/// llama.cpp's one slot: the state of the last prompt evaluated, whatever it was.
#[derive(Default)]
pub struct SlotCache {
    last: Mutex<String>,
    hits: Mutex<Vec<PrefixHit>>,
}

impl SlotCache {
    pub fn serve(&self, prompt: &str) -> PrefixHit {
        let mut last = lock(&self.last);
        let reused = tokens(common_prefix(&last, prompt));
        let hit = PrefixHit { reused, evaluated: tokens(prompt.chars().count()).saturating_sub(reused) };
        prompt.clone_into(&mut last);
        lock(&self.hits).push(hit);
        hit
    }

    /// Every request's hit, in order.
    pub fn hits(&self) -> Vec<PrefixHit> {
        lock(&self.hits).clone()
    }
}

/// How Anthropic counted a request's input.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AnthropicUsage {
    /// After the last breakpoint: read at the full price.
    pub input: usize,
    pub cache_read: usize,
    pub cache_creation: usize,
}

/// Where a cache reads the time: the wall clock by default; tests of expiry pass their own.
pub type CacheClock = Arc<dyn Fn() -> Instant + Send + Sync>;

/// Anthropic's cache of prefixes ending at breakpoints.
pub struct AnthropicCache {
    /// Prefix (model, blocks rendered) → when it expires and its lifetime.
    entries: Mutex<HashMap<String, (Instant, Duration)>>,
    now: CacheClock,
}

impl Default for AnthropicCache {
    fn default() -> Self {
        Self::with_clock(Arc::new(Instant::now))
    }
}

/// A request rendered as Anthropic caches it: blocks in the order tools → system → messages,
/// and which of them are breakpoints (with their lifetime).
struct Rendered {
    blocks: Vec<String>,
    breakpoints: Vec<(usize, Duration)>,
}

impl AnthropicCache {
    /// A cache that reads the time from `now`, so entries can be aged without waiting.
    pub fn with_clock(now: CacheClock) -> Self {
        Self { entries: Mutex::default(), now }
    }

    /// Counts `request`'s input as the API would, reading and writing the cache; an error
    /// message for a request the API refuses (more than four breakpoints).
    pub fn serve(&self, request: &Value) -> Result<AnthropicUsage, String> {
        let rendered = render(request);
        if rendered.breakpoints.len() > MAX_BREAKPOINTS {
            return Err(format!(
                "A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {}.",
                rendered.breakpoints.len()
            ));
        }
        let model = request["model"].as_str().unwrap_or_default();
        // Prefix keys and token counts at each block's end.
        let mut key = model.to_owned();
        let mut ends = Vec::with_capacity(rendered.blocks.len());
        let mut chars = 0;
        for block in &rendered.blocks {
            key.push('\u{1}');
            key.push_str(block);
            chars += block.chars().count();
            ends.push((key.clone(), tokens(chars)));
        }
        let total = tokens(chars);
        let now = (self.now)();
        let mut entries = lock(&self.entries);
        entries.retain(|_, (expires, _)| *expires > now);
        let hit = rendered
            .breakpoints
            .iter()
            .flat_map(|&(at, _)| (at.saturating_sub(LOOKBACK_BLOCKS)..=at).rev())
            .filter(|&at| entries.contains_key(&ends[at].0))
            .max();
        if let Some(at) = hit
            && let Some((expires, ttl)) = entries.get_mut(&ends[at].0)
        {
            *expires = now + *ttl;
        }
        let read = hit.map_or(0, |at| ends[at].1);
        let mut written_to = read;
        for &(at, ttl) in &rendered.breakpoints {
            let (prefix, size) = &ends[at];
            if *size >= MIN_CACHED_TOKENS && hit.is_none_or(|hit| at > hit) {
                entries.insert(prefix.clone(), (now + ttl, ttl));
                written_to = written_to.max(*size);
            }
        }
        let creation = written_to - read;
        Ok(AnthropicUsage { input: total - read - creation, cache_read: read, cache_creation: creation })
    }
}

/// The lifetime a `cache_control` asks for: 5 minutes, or an hour with `"ttl": "1h"`.
fn ttl_of(control: &Value) -> Duration {
    match control["ttl"].as_str() {
        Some("1h") => Duration::from_secs(3600),
        _ => Duration::from_secs(300),
    }
}

/// The `cache_control` breakpoints of a request.
pub fn breakpoints(request: &Value) -> usize {
    render(request).breakpoints.len()
}

fn render(request: &Value) -> Rendered {
    let mut rendered = Rendered { blocks: Vec::new(), breakpoints: Vec::new() };
    let mut push = |block: &Value, label: &str| {
        let mut plain = block.clone();
        if let Some(object) = plain.as_object_mut()
            && let Some(control) = object.remove("cache_control")
        {
            rendered.breakpoints.push((rendered.blocks.len(), ttl_of(&control)));
        }
        rendered.blocks.push(format!("{label}{plain}"));
    };
    for tool in request["tools"].as_array().into_iter().flatten() {
        push(tool, "tool:");
    }
    match &request["system"] {
        Value::String(text) => push(&Value::String(text.clone()), "system:"),
        Value::Array(blocks) => blocks.iter().for_each(|block| push(block, "system:")),
        _ => {}
    }
    for message in request["messages"].as_array().into_iter().flatten() {
        let role = message["role"].as_str().unwrap_or_default();
        match &message["content"] {
            Value::Array(blocks) => blocks.iter().for_each(|block| push(block, role)),
            other => push(other, role),
        }
    }
    rendered
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn long(tag: &str, tokens: usize) -> String {
        format!("{tag}{}", "x".repeat(tokens * 4))
    }

    #[test]
    fn openai_caches_prefixes_of_1024_tokens_in_128_token_steps() {
        let cache = OpenAiCache::default();
        let head = long("head", 1500);
        assert_eq!(cache.serve("m", &format!("{head}first")), 0, "nothing seen yet");
        // 1,501 tokens shared: 1,024 + 3 steps of 128.
        assert_eq!(cache.serve("m", &format!("{head}second")), 1408);
        assert_eq!(cache.serve("other-model", &format!("{head}third")), 0, "each model has its own cache");
        assert_eq!(cache.serve("m", &long("short", 1000)), 0, "under the minimum nothing is cached");
    }

    #[test]
    fn llama_cpp_reuses_only_what_the_last_prompt_shared() {
        let slot = SlotCache::default();
        slot.serve("system prompt, turn one");
        assert_eq!(slot.serve("system prompt, turn two").reused, tokens("system prompt, turn ".len()));
        slot.serve("a summary call in between");
        assert_eq!(slot.serve("system prompt, turn three").reused, 0, "the call in between evicted it");
    }

    fn request(messages: Vec<Value>) -> Value {
        let breakpoint = json!({"type": "ephemeral"});
        json!({"model": "claude", "tools": [{"name": "t", "description": long("", 600), "cache_control": breakpoint}],
            "system": [{"type": "text", "text": long("sys", 800), "cache_control": breakpoint}], "messages": messages})
    }

    fn user(text: &str, breakpoint: bool) -> Value {
        let mut block = json!({"type": "text", "text": text});
        if breakpoint {
            block["cache_control"] = json!({"type": "ephemeral"});
        }
        json!({"role": "user", "content": [block]})
    }

    #[test]
    fn anthropic_caches_at_breakpoints_and_finds_earlier_ones_behind_them() {
        let cache = AnthropicCache::default();
        let first = cache.serve(&request(vec![user(&long("q1", 300), true)])).unwrap();
        assert_eq!(first.cache_read, 0);
        assert!(first.cache_creation >= 1700 && first.input == 0, "{first:?}");
        let answer = json!({"role": "assistant", "content": [{"type": "text", "text": "a1"}]});
        let second =
            cache.serve(&request(vec![user(&long("q1", 300), false), answer, user(&long("q2", 300), true)])).unwrap();
        assert_eq!(second.cache_read, first.cache_creation, "the first request's breakpoint, found 2 blocks back");
        assert!(second.cache_creation >= 300, "{second:?}");
        let many = json!({"type": "ephemeral"});
        let mut five = request(vec![user("x", true)]);
        five["messages"][0]["content"] = json!([
            {"type": "text", "text": "a", "cache_control": many}, {"type": "text", "text": "b", "cache_control": many},
            {"type": "text", "text": "c", "cache_control": many}]);
        assert!(cache.serve(&five).unwrap_err().contains("Found 5"));
    }

    #[test]
    fn anthropic_caches_nothing_without_breakpoints_or_below_the_minimum() {
        let cache = AnthropicCache::default();
        let plain = json!({"model": "claude", "system": long("s", 3000), "messages": [user("hi", false)]});
        for _ in 0..2 {
            let usage = cache.serve(&plain).unwrap();
            assert_eq!((usage.cache_read, usage.cache_creation), (0, 0));
        }
        let small = json!({"model": "claude", "system": [{"type": "text", "text": "short", "cache_control": {"type": "ephemeral"}}],
            "messages": [user("hi", false)]});
        assert_eq!(cache.serve(&small).unwrap().cache_creation, 0);
    }

    /// A clock that moves only when the test moves it.
    struct TestClock(Arc<Mutex<Instant>>);

    impl TestClock {
        fn new() -> (Self, CacheClock) {
            let now = Arc::new(Mutex::new(Instant::now()));
            let read = Arc::clone(&now);
            (Self(now), Arc::new(move || *lock(&read)))
        }

        fn advance(&self, minutes: u64, seconds: u64) {
            *lock(&self.0) += Duration::from_secs(minutes * 60 + seconds);
        }
    }

    /// A system prompt of 1,500 tokens with one breakpoint, `ttl` as written (none: 5 minutes).
    fn cached_system(ttl: Option<&str>) -> Value {
        cached_text("sys", ttl)
    }

    fn cached_text(text: &str, ttl: Option<&str>) -> Value {
        let mut control = json!({"type": "ephemeral"});
        if let Some(ttl) = ttl {
            control["ttl"] = json!(ttl);
        }
        json!({"model": "claude", "system": [{"type": "text", "text": long(text, 1500), "cache_control": control}],
            "messages": [user("hi", false)]})
    }

    /// Whether `request` was read from `cache` (and so renewed it), or written anew.
    fn served_from(cache: &AnthropicCache, request: &Value) -> bool {
        let usage = cache.serve(request).unwrap();
        assert!(usage.cache_read > 0 || usage.cache_creation > 0, "nothing cacheable: {usage:?}");
        usage.cache_read > 0
    }

    #[test]
    fn anthropic_entries_expire_five_minutes_after_their_last_use() {
        let (clock, now) = TestClock::new();
        let cache = AnthropicCache::with_clock(now);
        let request = cached_system(None);
        assert!(!served_from(&cache, &request), "the first request writes the entry");
        clock.advance(4, 59);
        assert!(served_from(&cache, &request), "still there just before 5 minutes");
        // 8 minutes after it was written, 4 after the hit that renewed it.
        clock.advance(4, 0);
        assert!(served_from(&cache, &request), "a hit renews the 5 minutes");
        clock.advance(5, 0);
        assert!(!served_from(&cache, &request), "5 minutes without a hit: gone, written again");
        clock.advance(1, 0);
        assert!(served_from(&cache, &request), "the entry written again is served");
    }

    #[test]
    fn anthropic_entries_with_a_1h_ttl_last_an_hour() {
        let (clock, now) = TestClock::new();
        let cache = AnthropicCache::with_clock(now);
        let (hour, five_minutes) = (cached_text("hour", Some("1h")), cached_text("five", Some("5m")));
        assert!(!served_from(&cache, &hour));
        assert!(!served_from(&cache, &five_minutes));
        clock.advance(59, 59);
        assert!(served_from(&cache, &hour), "an hour's entry lasts the hour");
        assert!(!served_from(&cache, &five_minutes), "the 5-minute one did not");
        clock.advance(60, 0);
        assert!(!served_from(&cache, &hour), "an hour without a hit: gone");
    }
}
