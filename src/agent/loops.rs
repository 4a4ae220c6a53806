//! Tool-loop detection. Small local models (and sometimes large ones) ask for the same tool
//! call after every result, each step re-sending the whole conversation, until the iteration
//! limit: twenty calls of a growing prompt for one answer.
//!
//! A loop is the same tool with the same arguments asked for `limit` times in one run
//! (`agent.loop_detection`, 3 by default), or two steps alternating `limit − 1` times (`A, B,
//! A, B` with 3). Arguments are compared as parsed JSON, so neither key order nor spacing
//! hides a repeat. The first loop is not run: its calls get a result saying so, and the model
//! can still answer. The next loop ends the run. So a model that repeats one call gets
//! `limit + 1` model calls, one that alternates two gets `2 × (limit − 1) + 1`.
//!
//! Nothing else in the request changes (no `tool_choice: none`, which makes llama-cpp-python
//! render another prompt head and re-read all of it), so the provider's prompt cache holds.

use serde_json::Value;

use crate::provider::ToolCall;

/// What one step's tool calls are.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Verdict {
    /// No loop: run them.
    Run,
    /// The run's first loop: the calls at `looping` (indexes into the step) are answered with
    /// `note` instead of run; the others run.
    Warn { looping: Vec<usize>, note: String },
    /// A loop after the warning: the run ends, every call answered with `note`.
    Stop { note: String, tools: String },
}

/// One tool call as the detector compares it.
#[derive(Debug, Clone, PartialEq)]
struct Asked {
    name: String,
    arguments: Value,
}

impl Asked {
    /// Arguments a model wrote as a JSON string holding JSON (`"{\"path\": \"a\"}"`) are
    /// compared as what the string holds. `Value`'s equality ignores key order.
    fn of(call: &ToolCall) -> Self {
        let arguments = match &call.arguments {
            Value::String(text) => serde_json::from_str(text).unwrap_or_else(|_| call.arguments.clone()),
            other => other.clone(),
        };
        Self { name: call.name.clone(), arguments }
    }
}

/// The tool calls of one run, counted.
#[derive(Debug)]
pub(super) struct LoopDetector {
    /// Asked this many times is a loop; 0 = off.
    limit: u32,
    /// Each different call asked for in the run, with how often.
    counts: Vec<(Asked, u32)>,
    /// Each step's calls, in order: what alternation is looked for in.
    steps: Vec<Vec<Asked>>,
    warned: bool,
}

impl LoopDetector {
    pub(super) fn new(limit: u32) -> Self {
        Self { limit, counts: Vec::new(), steps: Vec::new(), warned: false }
    }

    /// Notes the calls one model response asked for, and says what to do with them.
    pub(super) fn check(&mut self, calls: &[ToolCall]) -> Verdict {
        if self.limit == 0 || calls.is_empty() {
            return Verdict::Run;
        }
        let step: Vec<Asked> = calls.iter().map(Asked::of).collect();
        let limit = self.limit;
        let repeated: Vec<(usize, u32)> =
            step.iter().enumerate().map(|(at, asked)| (at, self.count(asked))).filter(|&(_, n)| n >= limit).collect();
        self.steps.push(step);
        let note = match (repeated.first(), self.alternating()) {
            (Some(&(at, times)), _) => repeated_note(&calls[at].name, times),
            (None, Some((a, b))) => alternating_note(&a, &b),
            (None, None) => return Verdict::Run,
        };
        let tools = names(calls);
        if self.warned {
            return Verdict::Stop { note, tools };
        }
        self.warned = true;
        // An alternation is the whole step repeating; a repeat, only the calls repeated.
        let looping =
            if repeated.is_empty() { (0..calls.len()).collect() } else { repeated.iter().map(|&(at, _)| at).collect() };
        Verdict::Warn { looping, note }
    }

    /// Counts one more of `asked`; returns how many times it was asked for now.
    fn count(&mut self, asked: &Asked) -> u32 {
        match self.counts.iter_mut().find(|(seen, _)| seen == asked) {
            Some((_, count)) => {
                *count += 1;
                *count
            }
            None => {
                self.counts.push((asked.clone(), 1));
                1
            }
        }
    }

    /// The two steps' tool names when the latest steps alternate between two different steps
    /// `limit − 1` times (at least twice) each.
    fn alternating(&self) -> Option<(String, String)> {
        let span = 2 * usize::try_from(self.limit.saturating_sub(1).max(2)).unwrap_or(usize::MAX);
        let recent = self.steps.len().checked_sub(span).map(|from| &self.steps[from..])?;
        let (a, b) = (&recent[0], &recent[1]);
        let alternates = a != b && recent.chunks(2).all(|pair| pair[0] == *a && pair[1] == *b);
        let step_names =
            |step: &[Asked]| step.iter().map(|asked| format!("`{}`", asked.name)).collect::<Vec<_>>().join(" and ");
        alternates.then(|| (step_names(a), step_names(b)))
    }
}

fn names(calls: &[ToolCall]) -> String {
    let mut names: Vec<&str> = calls.iter().map(|call| call.name.as_str()).collect();
    names.dedup();
    names.join(",")
}

fn repeated_note(tool: &str, times: u32) -> String {
    format!(
        "error: not run: this is a loop. You asked for `{tool}` with exactly these arguments {times} times in this \
         run, and its result is above. Do not ask for it again: answer with what you have, or try something \
         different."
    )
}

fn alternating_note(a: &str, b: &str) -> String {
    format!(
        "error: not run: this is a loop. You keep alternating between {a} and {b} with the same arguments, and \
         their results are above. Do not ask for them again: answer with what you have, or try something \
         different."
    )
}

/// What the person reads when the run ends in a loop: the truth, and what helps.
pub(super) fn stopped_reply() -> String {
    "I kept repeating the same step without getting further, so I stopped. Ask me again, perhaps more \
     precisely or in smaller steps."
        .to_owned()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(name: &str, arguments: Value) -> ToolCall {
        ToolCall { id: format!("id-{name}"), name: name.into(), arguments }
    }

    fn verdicts(limit: u32, steps: &[Vec<ToolCall>]) -> Vec<Verdict> {
        let mut detector = LoopDetector::new(limit);
        steps.iter().map(|step| detector.check(step)).collect()
    }

    fn kind(verdict: &Verdict) -> &'static str {
        match verdict {
            Verdict::Run => "run",
            Verdict::Warn { .. } => "warn",
            Verdict::Stop { .. } => "stop",
        }
    }

    #[test]
    fn the_same_call_is_a_loop_the_nth_time_whatever_its_key_order_or_spacing() {
        let written = [
            json!({"path": "a.txt", "limit": 10}),
            serde_json::from_str("{ \"limit\" : 10,\n \"path\": \"a.txt\" }").unwrap(),
            Value::String("{\"limit\":10,\"path\":\"a.txt\"}".into()),
            json!({"path": "a.txt", "limit": 10}),
        ];
        let steps: Vec<_> = written.into_iter().map(|args| vec![call("read_file", args)]).collect();
        let kinds: Vec<_> = verdicts(3, &steps).iter().map(kind).collect();
        assert_eq!(kinds, ["run", "run", "warn", "stop"]);
    }

    #[test]
    fn other_arguments_are_other_calls() {
        let steps: Vec<_> = (0..8).map(|n| vec![call("read_file", json!({"path": format!("{n}.txt")}))]).collect();
        assert!(verdicts(3, &steps).iter().all(|verdict| *verdict == Verdict::Run));
    }

    #[test]
    fn two_steps_alternating_are_a_loop_before_either_is_asked_for_the_nth_time() {
        let a = vec![call("read_file", json!({"path": "a"}))];
        let b = vec![call("list_dir", json!({"path": "."}))];
        let steps = [a.clone(), b.clone(), a.clone(), b.clone(), a.clone()];
        let verdicts = verdicts(3, &steps);
        let kinds: Vec<_> = verdicts.iter().map(kind).collect();
        assert_eq!(kinds, ["run", "run", "run", "warn", "stop"]);
        let Verdict::Warn { looping, note } = &verdicts[3] else { unreachable!() };
        assert_eq!(looping, &[0]);
        assert!(note.contains("alternating between `read_file` and `list_dir`"), "{note}");
        // With a higher limit it takes more rounds.
        let longer: Vec<_> = (0..8).map(|n| if n % 2 == 0 { a.clone() } else { b.clone() }).collect();
        let kinds: Vec<_> = super::tests::verdicts(4, &longer).iter().map(kind).collect();
        assert_eq!(kinds, ["run", "run", "run", "run", "run", "warn", "stop", "stop"]);
    }

    #[test]
    fn only_the_repeated_calls_of_a_step_are_held_back() {
        let time = call("current_time", json!({}));
        let steps: Vec<_> =
            (0..3).map(|n| vec![time.clone(), call("read_file", json!({"path": format!("{n}")}))]).collect();
        let verdicts = verdicts(3, &steps);
        let Verdict::Warn { looping, note } = &verdicts[2] else { panic!("{verdicts:?}") };
        assert_eq!(looping, &[0]);
        assert!(note.contains("`current_time` with exactly these arguments 3 times"), "{note}");
    }

    #[test]
    fn zero_turns_the_detection_off() {
        let steps: Vec<_> = (0..10).map(|_| vec![call("current_time", json!({}))]).collect();
        assert!(verdicts(0, &steps).iter().all(|verdict| *verdict == Verdict::Run));
    }
}
