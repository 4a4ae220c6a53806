//! A burst of 1,000 messages in one Telegram group: every message is either answered (once;
//! a person's burst is answered in a few merged turns) or named in the documented queue-full
//! notice ("… did not keep N of them …"); nothing is lost silently, nothing answered twice, and
//! the daemon's memory stays bounded.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use switchboard_testkit::fake_telegram::{FakeTelegram, updates};

use super::rig::{ALICE, Rig, Shape, TELEGRAM};

const BURST: usize = 1_000;
const GROUP: i64 = -100_555;
/// Generous: the burst may grow the daemon by this much at most.
const MAX_RSS_GROWTH_KIB: u64 = 100 * 1024;
/// How long the burst may go without one more message answered or refused.
const STALL_LIMIT: Duration = Duration::from_secs(30);

/// The fate of every message of the burst, as the group saw it.
#[derive(Debug, Default)]
struct Outcome {
    /// Burst numbers of the messages answered, with repeats (there must be none).
    answered: Vec<usize>,
    /// The sum of N over every "did not keep N of them" notice.
    refused: usize,
    notices: usize,
    /// Anything else the bot sent (the later parts of a long answer).
    other: Vec<String>,
}

/// The burst numbers a text names (`@bot m17` lines; a merged turn's answer names many, and a
/// long answer is split over several messages).
fn numbers(text: &str) -> Vec<usize> {
    text.split(|c: char| c.is_whitespace()).filter_map(|word| word.strip_prefix('m')?.parse().ok()).collect()
}

fn outcome(fake: &FakeTelegram) -> Outcome {
    let mut outcome = Outcome::default();
    for text in fake.sent_messages().into_iter().filter(|m| m.chat_id == GROUP).filter_map(|m| m.text) {
        if let Some(rest) = text.strip_prefix("Too many messages were waiting, so I did not keep ") {
            outcome.refused += rest.split_whitespace().next().unwrap().parse::<usize>().unwrap();
            outcome.notices += 1;
            continue;
        }
        let answered = numbers(&text);
        if answered.is_empty() {
            outcome.other.push(text);
        }
        outcome.answered.extend(answered);
    }
    outcome
}

/// The burst numbers the model was asked to answer, in order: the burst messages in the last
/// user message of each request (not the warm-up, nor a compaction's calls).
fn asked_for(requests: &[serde_json::Value]) -> Vec<usize> {
    let last_user =
        |request: &serde_json::Value| switchboard_testkit::fake_llm::user_texts(request).pop().unwrap_or_default();
    let is_burst = |text: &String| text.lines().all(|line| line.contains("@switchboard_test_bot m"));
    requests.iter().map(last_user).filter(is_burst).flat_map(|text| numbers(&text)).collect()
}

async fn burst_in_one_chat(shape: Shape) {
    // Alice as the owner: a thousand turns on a growing history would otherwise use up a
    // guest's monthly token budget, and its notices would mix into the count.
    let owners = format!(r#"["telegram:{ALICE}"]"#);
    let mut rig = Rig::start(shape, TELEGRAM, &[("SWITCHBOARD_USERS__OWNERS", owners.as_str())]).await;
    let bot = rig.telegram.bot().username;
    // Warm up (first turn, first reply) before measuring.
    rig.assert_still_healthy().await;
    let rss_before = rig.daemon.rss_kib();
    let started = Instant::now();
    for number in 0..BURST {
        let text = format!("@{bot} m{number}");
        let message = updates::group_text(GROUP, ALICE, "alice", 1 + number as i64, &text);
        rig.telegram.push_message(updates::mention_of(message, &bot));
    }
    // Wait while the burst is still being worked through: a debug build on a loaded CI machine
    // takes minutes for hundreds of turns, but a daemon that stops answering is caught quickly.
    let mut accounted = 0;
    let mut last_progress = Instant::now();
    while accounted < BURST && last_progress.elapsed() < STALL_LIMIT {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now_accounted = asked_for(&rig.llm.requests()).len() + outcome(&rig.telegram).refused;
        if now_accounted > accounted {
            accounted = now_accounted;
            last_progress = Instant::now();
        }
    }
    let elapsed = started.elapsed();
    // Nothing more comes after every message is accounted for: all of it settled.
    rig.wait_settled().await;
    let outcome = outcome(&rig.telegram);
    let rss_after = rig.daemon.rss_kib();
    eprintln!(
        "[bad_input] burst of {BURST} ({shape:?}): {} echoed back, {} refused in {} notice(s), settled in {:.1} s; \
         VmRSS {rss_before} KiB before, {rss_after} KiB after",
        outcome.answered.len(),
        outcome.refused,
        outcome.notices,
        elapsed.as_secs_f64()
    );

    // The echo of a long merged turn is cut at the answer's limit, so what the model read is
    // the measure of what was answered; a number echoed twice is a reply sent twice.
    let unique: BTreeSet<usize> = outcome.answered.iter().copied().collect();
    assert_eq!(unique.len(), outcome.answered.len(), "a message was answered twice: {:?}", outcome.answered);
    let asked = asked_for(&rig.llm.requests());
    let read: BTreeSet<usize> = asked.iter().copied().collect();
    assert_eq!(read.len(), asked.len(), "a message was read in two turns: {asked:?}");
    assert!(unique.is_subset(&read), "an answer to a message the model never read");
    assert_eq!(read.len() + outcome.refused, BURST, "messages lost silently: {outcome:?}\n{}", rig.logs());
    assert_eq!(outcome.notices >= 1, outcome.refused > 0, "what a full queue did not keep is said: {outcome:?}");
    assert!(read.iter().all(|&number| number < BURST));
    assert!(
        rss_after < rss_before + MAX_RSS_GROWTH_KIB,
        "VmRSS grew from {rss_before} KiB to {rss_after} KiB over a burst of {BURST}"
    );
    rig.assert_still_healthy().await;
    rig.report("burst of 1,000");
}

#[tokio::test]
async fn burst_of_1000_in_one_chat_embedded() {
    burst_in_one_chat(Shape::Embedded).await;
}

#[tokio::test]
async fn burst_of_1000_in_one_chat_nats() {
    burst_in_one_chat(Shape::Nats).await;
}
