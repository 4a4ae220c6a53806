use serde_json::json;

use super::*;
use crate::tokens::raw_messages;

fn call(id: &str) -> ToolCall {
    ToolCall { id: id.into(), name: "read_file".into(), arguments: json!({"path": "notes.txt"}) }
}

/// One user turn: a question, a tool call, its result, the answer.
fn tool_turn(n: usize, result: &str) -> Vec<ChatMessage> {
    let c = call(&format!("call_{n}"));
    vec![
        ChatMessage::user(format!("question {n}")),
        ChatMessage::assistant("", vec![c.clone()]),
        ChatMessage::tool_result(&c, result),
        ChatMessage::assistant(format!("answer {n}"), vec![]),
    ]
}

fn session(turns: usize, result: &str) -> Vec<ChatMessage> {
    (0..turns).flat_map(|n| tool_turn(n, result)).collect()
}

/// The pipeline for one turn without marks from an earlier one.
fn run(
    history: Vec<ChatMessage>,
    summary: Option<&str>,
    budget: Budget,
    config: &HistoryConfig,
    cal: &Calibration,
) -> Vec<ChatMessage> {
    prepare(history, summary, budget, config, cal, None).0
}

fn roomy() -> Budget {
    Budget { input: 1_000_000, fixed: 100, step: 0 }
}

fn tool_contents(messages: &[ChatMessage]) -> Vec<&str> {
    messages.iter().filter(|m| m.role == Role::Tool).map(|m| m.content.as_str()).collect()
}

/// Every tool result answers a call of the assistant message just before its block, and
/// every call has exactly one result.
fn assert_paired(messages: &[ChatMessage]) {
    let mut pending: Vec<String> = Vec::new();
    for m in messages {
        match m.role {
            Role::Tool => {
                let id = m.tool_call_id.clone().unwrap();
                let pos = pending.iter().position(|p| *p == id).unwrap_or_else(|| panic!("orphan {id}"));
                pending.remove(pos);
            }
            _ => {
                assert!(pending.is_empty(), "unanswered calls {pending:?}");
                pending = m.tool_calls.iter().map(|c| c.id.clone()).collect();
            }
        }
    }
    assert!(pending.is_empty(), "unanswered calls {pending:?}");
}

#[test]
fn a_small_history_passes_unchanged() {
    let history = session(3, "file text");
    let out = run(history.clone(), None, roomy(), &HistoryConfig::default(), &Calibration::default());
    assert_eq!(out, history);
}

#[test]
fn only_the_last_user_turns_are_kept_with_their_tool_messages() {
    let config = HistoryConfig { keep_user_turns: 2, ..HistoryConfig::default() };
    let out = run(session(5, "r"), None, roomy(), &config, &Calibration::default());
    assert_eq!(out.len(), 8);
    assert_eq!(out[0].content, "question 3");
    assert_paired(&out);
}

#[test]
fn orphan_results_are_dropped_and_missing_results_synthesized() {
    let c1 = call("a");
    let c2 = call("b");
    let history = vec![
        // The call of this result was cut off with an older turn.
        ChatMessage::tool_result(&call("gone"), "old result"),
        ChatMessage::user("do two things"),
        ChatMessage::assistant("", vec![c1.clone(), c2.clone()]),
        ChatMessage::tool_result(&c1, "first"),
        // c2's result was lost (the worker died mid-turn, say); the user wrote again.
        ChatMessage::user("well?"),
        ChatMessage::assistant("", vec![call("c")]),
    ];
    let out = repair_pairing(history);
    assert_paired(&out);
    assert_eq!(out[0].content, "do two things");
    assert_eq!(out[3].tool_call_id.as_deref(), Some("b"));
    assert_eq!(out[3].content, PLACEHOLDER);
    assert_eq!(out.last().unwrap().content, PLACEHOLDER);
    assert_eq!(out.last().unwrap().tool_call_id.as_deref(), Some("c"));
}

#[test]
fn a_result_after_another_message_is_an_orphan() {
    let c = call("x");
    let history = vec![
        ChatMessage::user("q"),
        ChatMessage::assistant("", vec![c.clone()]),
        ChatMessage::user("interrupting"),
        ChatMessage::tool_result(&c, "late"),
    ];
    let out = repair_pairing(history);
    assert_paired(&out);
    assert_eq!(tool_contents(&out), [PLACEHOLDER]);
}

#[test]
fn long_results_are_soft_trimmed_past_the_soft_ratio_but_recent_turns_are_not() {
    let big = "x".repeat(10_000);
    let history = session(4, &big);
    let used = 100 + raw_messages(&history);
    // Past 0.5 of the budget, below 0.75.
    let budget = Budget { input: used * 10 / 6, fixed: 100, step: 0 };
    let out = run(history, None, budget, &HistoryConfig::default(), &Calibration::default());
    let tools = tool_contents(&out);
    assert_eq!(tools.len(), 4);
    for old in &tools[..3] {
        assert!(old.chars().count() < 4100 && old.contains("characters cut"), "{}", old.len());
    }
    // The last turn has two assistant messages, the protected two.
    assert_eq!(tools[3], big);
}

#[test]
fn below_the_soft_ratio_nothing_is_trimmed() {
    let big = "x".repeat(10_000);
    let history = session(4, &big);
    let budget = Budget { input: (100 + raw_messages(&history)) * 3, fixed: 100, step: 0 };
    let out = run(history.clone(), None, budget, &HistoryConfig::default(), &Calibration::default());
    assert_eq!(out, history);
}

#[test]
fn old_results_are_cleared_past_the_hard_ratio() {
    let big = "x".repeat(10_000);
    let history = session(4, &big);
    // Even after soft trimming the history is past 0.75 of this budget; cleared, it fits.
    let budget = Budget { input: 100 + raw_messages(&history) * 6 / 10, fixed: 100, step: 0 };
    let config = HistoryConfig { protect_recent_turns: 4, ..HistoryConfig::default() };
    let out = run(history, None, budget, &config, &Calibration::default());
    let tools = tool_contents(&out);
    assert_eq!(tools, [CLEARED, CLEARED, &big[..], &big[..]]);
    assert_paired(&out);
}

#[test]
fn the_budget_is_respected_by_dropping_the_oldest_turns() {
    let history = session(10, "short result");
    let cal = Calibration::default();
    let fixed = 500;
    let budget = Budget { input: fixed + raw_messages(&history) / 3, fixed, step: 0 };
    let out = run(history.clone(), None, budget, &HistoryConfig::default(), &cal);
    assert!(fixed + cal.messages(&out) <= budget.input);
    assert!(out.len() < history.len() && !out.is_empty());
    // The newest messages are the ones kept, starting at a user message.
    assert_eq!(out.last(), history.last());
    assert_eq!(out[0].role, Role::User);
    assert_paired(&out);
}

#[test]
fn fixed_parts_larger_than_the_budget_leave_no_history() {
    let out = run(
        session(2, "r"),
        None,
        Budget { input: 50, fixed: 100, step: 0 },
        &HistoryConfig::default(),
        &Calibration::default(),
    );
    assert!(out.is_empty(), "{out:?}");
}

#[test]
fn the_summary_starts_the_history_and_counts_against_the_budget() {
    let history = session(3, "r");
    let out = run(history.clone(), Some("we agreed on X"), roomy(), &HistoryConfig::default(), &Calibration::default());
    assert_eq!(out[0].role, Role::System);
    assert_eq!(out[0].content, "Summary of the earlier conversation: we agreed on X");
    assert_eq!(&out[1..], &history[..]);

    let long_summary = "s".repeat(4000);
    let summary_tokens = raw_messages(&[summary_message(&long_summary)]);
    let tight = Budget { input: 100 + summary_tokens + raw_messages(&history[8..]), fixed: 100, step: 0 };
    let out = run(history.clone(), Some(&long_summary), tight, &HistoryConfig::default(), &Calibration::default());
    assert_eq!(&out[1..], &history[8..]);
}

#[test]
fn a_higher_calibration_ratio_keeps_less() {
    let history = session(10, "some result text");
    let budget = Budget { input: 100 + raw_messages(&history), fixed: 100, step: 0 };
    let plain = run(history.clone(), None, budget, &HistoryConfig::default(), &Calibration::default());
    assert_eq!(plain.len(), history.len());
    let cal = Calibration::default();
    for _ in 0..20 {
        cal.observe(1000, 2000);
    }
    let corrected = run(history, None, budget, &HistoryConfig::default(), &cal);
    assert!(corrected.len() < plain.len() / 2 + 4, "{}", corrected.len());
}

/// The rules the strictest providers check (Anthropic, and chat templates such as Mistral's):
/// after the system messages, the conversation starts with the user, user and assistant
/// alternate (the results of one assistant message's calls are one user turn, as Anthropic
/// sends them), and the turn's own input follows an assistant message.
fn assert_strictly_alternating(history: &[ChatMessage]) {
    let mut conversation: Vec<Role> = history.iter().map(|m| m.role).filter(|role| *role != Role::System).collect();
    conversation.dedup_by(|b, a| *a == Role::Tool && *b == Role::Tool);
    let conversation: Vec<Role> =
        conversation.into_iter().map(|role| if role == Role::Tool { Role::User } else { role }).collect();
    if let Some(first) = conversation.first() {
        assert_eq!(*first, Role::User, "{history:?}");
    }
    for pair in conversation.windows(2) {
        assert_ne!(pair[0], pair[1], "{history:?}");
    }
    assert_ne!(conversation.last(), Some(&Role::User), "the input would follow a user message: {history:?}");
}

#[test]
fn failed_turns_leave_a_history_that_strict_providers_accept() {
    // Two turns failed in a row (their inputs were stored without replies), then a normal one.
    let mut history = vec![ChatMessage::user("first"), ChatMessage::user("second?")];
    history.extend(tool_turn(1, "r"));
    history.push(ChatMessage::user("still there?"));
    let out = run(history, None, roomy(), &HistoryConfig::default(), &Calibration::default());
    assert_strictly_alternating(&out);
    assert_paired(&out);
    let texts: Vec<&str> = out.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(texts[..3], ["first", UNANSWERED, "second?"]);
    assert_eq!(out.last().map(|m| m.content.as_str()), Some(UNANSWERED));
}

#[test]
fn every_cut_of_a_mixed_history_stays_valid() {
    // Plain turns, tool turns and failed turns, cut at every budget from nothing to everything.
    let mut history = Vec::new();
    for n in 0..6 {
        match n % 3 {
            0 => history.extend(tool_turn(n, &"x".repeat(300))),
            1 => history.push(ChatMessage::user(format!("failed {n}"))),
            _ => history.extend([ChatMessage::user(format!("q {n}")), ChatMessage::assistant("a", vec![])]),
        }
    }
    let total = raw_messages(&history);
    for room in (0..=total + 10).step_by(7) {
        let budget = Budget { input: 100 + room, fixed: 100, step: 0 };
        let out = run(history.clone(), Some("earlier"), budget, &HistoryConfig::default(), &Calibration::default());
        assert_strictly_alternating(&out);
        assert_paired(&out);
    }
}

/// A conversation growing turn by turn past its budget: the history is cut now and then, in
/// steps, and between cuts every turn starts where the one before started (what a provider's
/// prompt cache needs), always within the budget.
#[test]
fn a_growing_history_is_cut_in_steps_and_keeps_its_start_between_them() {
    let cal = Calibration::default();
    let turn = |n: usize| {
        vec![
            ChatMessage::user(format!("question {n} {}", "q".repeat(400))),
            ChatMessage::assistant(format!("answer {n} {}", "a".repeat(600)), vec![]),
        ]
    };
    let room = 5_000;
    let budget = Budget { input: 100 + room, fixed: 100, step: room / 2 };
    let mut history = Vec::new();
    let mut starts = Vec::new();
    let mut marks = None;
    let config = HistoryConfig { keep_user_turns: 1000, ..HistoryConfig::default() };
    for n in 0..60 {
        history.extend(turn(n));
        // The new message's size changes the room a little from turn to turn.
        let budget = Budget { fixed: 100 + (n as u64 * 37) % 200, ..budget };
        let (out, next) = prepare(history.clone(), None, budget, &config, &cal, marks);
        marks = Some(next);
        assert!(budget.fixed + cal.messages(&out) <= budget.input, "turn {n} over the budget");
        assert_eq!(out.last(), history.last());
        starts.push(out[0].content.clone());
    }
    let cut_at: Vec<usize> = (1..starts.len()).filter(|&n| starts[n] != starts[n - 1]).collect();
    // 60 turns of ~260 tokens: ~15,600 tokens through a 5,000-token room in ~2,500-token steps.
    assert!((4..=8).contains(&cut_at.len()), "cuts at {cut_at:?}: {starts:?}");
    // Each cut frees a step's room: the ~9 turns after it grow into it before the next.
    assert!(cut_at.windows(2).all(|pair| pair[1] - pair[0] >= 8), "cuts at {cut_at:?}");
}

/// The step follows the history's room, which moves with the estimate: a history that still
/// fits where it started keeps that start, whatever the new step's points are.
#[test]
fn a_changed_step_does_not_move_a_history_that_still_fits() {
    let turn = |n: usize| [ChatMessage::user(format!("q{n} {}", "q".repeat(300))), ChatMessage::assistant("a", vec![])];
    let mut history: Vec<ChatMessage> = (0..12).flat_map(turn).collect();
    let cal = Calibration::default();
    let total = raw_messages(&history);
    let budget = Budget { input: 100 + total * 2 / 3, fixed: 100, step: total / 5 };
    let (cut, marks) = prepare(history.clone(), None, budget, &HistoryConfig::default(), &cal, None);
    assert!(cut.len() < history.len());
    history.push(ChatMessage::user("one more"));
    history.push(ChatMessage::assistant("b", vec![]));
    for step in [total / 7, total / 4, total / 3] {
        let (again, _) =
            prepare(history.clone(), None, Budget { step, ..budget }, &HistoryConfig::default(), &cal, Some(marks));
        assert_eq!(again[0], cut[0], "step {step}: the start moved");
    }
}

#[test]
fn more_user_turns_than_kept_are_cut_in_steps_of_half_of_them() {
    let config = HistoryConfig { keep_user_turns: 6, ..HistoryConfig::default() };
    let mut history = Vec::new();
    let mut kept = Vec::new();
    let mut marks = None;
    for n in 0..30 {
        history.extend([ChatMessage::user(format!("q{n}")), ChatMessage::assistant("a", vec![])]);
        let budget = Budget { step: 10_000, ..roomy() };
        let (out, next) = prepare(history.clone(), None, budget, &config, &Calibration::default(), marks);
        marks = Some(next);
        kept.push(out.iter().filter(|m| m.role == Role::User).count());
    }
    assert!(kept.iter().all(|&turns| turns <= 6), "{kept:?}");
    // Cut 3 turns at a time: 4, 5, 6, then 4 again.
    assert_eq!(kept[10..16], [5, 6, 4, 5, 6, 4], "{kept:?}");
}

#[test]
fn old_tool_results_are_pruned_in_steps_too() {
    let big = "x".repeat(10_000);
    let cal = Calibration::default();
    let mut history = Vec::new();
    let mut pruned_counts = Vec::new();
    let mut marks = None;
    for n in 0..24 {
        history.extend(tool_turn(n, &big));
        let used = 100 + raw_messages(&history);
        // Always past the soft ratio, never past the hard one.
        let budget = Budget { input: used * 10 / 6, fixed: 100, step: 10_000 };
        let (out, next) = prepare(history.clone(), None, budget, &HistoryConfig::default(), &cal, marks);
        marks = Some(next);
        pruned_counts.push(tool_contents(&out).iter().filter(|text| text.contains("characters cut")).count());
    }
    let changes = pruned_counts.windows(2).filter(|pair| pair[0] != pair[1]).count();
    assert!(changes <= 24 / 3, "what is pruned changed {changes} times in 24 turns: {pruned_counts:?}");
    assert!(pruned_counts.last().is_some_and(|&n| n >= 16), "{pruned_counts:?}");
}

/// A shorter message or a lower estimate leaves more room for one turn: the cut stays where it
/// was rather than moving back (which would change the history's start twice).
#[test]
fn a_cut_never_moves_back() {
    let turn = |n: usize| [ChatMessage::user(format!("q{n} {}", "q".repeat(300))), ChatMessage::assistant("a", vec![])];
    let history: Vec<ChatMessage> = (0..12).flat_map(turn).collect();
    let cal = Calibration::default();
    let total = raw_messages(&history);
    let tight = Budget { input: 100 + total / 2, fixed: 100, step: total / 8 };
    let (cut, marks) = prepare(history.clone(), None, tight, &HistoryConfig::default(), &cal, None);
    assert!(cut.len() < history.len());
    let roomier = Budget { input: 100 + total * 3 / 4, ..tight };
    let (again, _) = prepare(history.clone(), None, roomier, &HistoryConfig::default(), &cal, Some(marks));
    assert_eq!(again, cut);
    // A new history (compacted, or `/new`) starts without the old marks.
    let (fresh, _) = prepare(history[8..].to_vec(), None, roomier, &HistoryConfig::default(), &cal, Some(marks));
    assert_eq!(fresh, history[8..]);
}
