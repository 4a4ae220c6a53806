//! The rule of a run's finish, written once for both stores: what finishing a running run
//! writes, statement by statement. Each store runs the statements in one call, generated from
//! here: the SQLite store as the body of a TEMP `INSTEAD OF` trigger (`sqlite/finish.rs`), the
//! PostgreSQL store as the body of a function in each connection's temporary schema
//! (`postgres/finish.rs`); what is theirs is only how a finish arrives, how its result is read
//! back and how concurrent finishes are kept apart.
//!
//! A statement reads the finish's fields (see [`FIELDS`], serialised from `FinishRow`) as
//! `NEW.<field>`, and the few things each store has its own way as placeholders:
//!
//! - `{running}`: the run was running when its finish began. Only a running run is finished:
//!   another worker may have resumed this one and finished first, and then its reply is the
//!   one kept (appending this transcript would duplicate the turn).
//! - `{session}`: the run's session key.
//! - `{transcript}`: the transcript's messages as a table `pairs (key, value)`: the message's
//!   place from 0 and its `[role, message JSON]` pair.
//! - `{payload}`: the reply's journal payload as bytes.

/// How a field is carried: its SQL type on PostgreSQL, and how SQLite reads it from JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::store) enum Kind {
    Text,
    Integer,
    Real,
    Boolean,
    /// JSON kept as JSON (the transcript).
    Json,
    /// Text stored as bytes (the reply's payload).
    Bytes,
}

/// The finish's fields, in the order the SQLite store binds them.
pub(in crate::store) const FIELDS: [(&str, Kind); 26] = [
    ("run_id", Kind::Text),
    ("status", Kind::Text),
    ("model", Kind::Text),
    ("input_tokens", Kind::Integer),
    ("output_tokens", Kind::Integer),
    ("iterations", Kind::Integer),
    ("error", Kind::Text),
    ("reply_json", Kind::Text),
    ("finished_at", Kind::Integer),
    ("cost_usd", Kind::Real),
    ("usage_estimated", Kind::Boolean),
    ("memory_scope", Kind::Text),
    ("transcript", Kind::Json),
    ("billing_channel", Kind::Text),
    ("billing_sender", Kind::Text),
    ("billing_month", Kind::Text),
    ("billing_group", Kind::Text),
    ("reply_flow", Kind::Text),
    ("reply_channel", Kind::Text),
    ("reply_subject", Kind::Text),
    ("reply_dedupe_id", Kind::Text),
    ("reply_payload", Kind::Bytes),
    ("answered_seq", Kind::Integer),
    ("cache_read_tokens", Kind::Integer),
    ("cache_write_tokens", Kind::Integer),
    ("context_tokens", Kind::Integer),
];

/// A statement of the rule, named for the stores that read something back after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::store) enum Step {
    /// The run's row: outcome, usage, cost, reply, payer.
    Run,
    /// The transcript's rows, in order.
    Transcript,
    /// The usage and cost added to the payer's month; nothing when the payer has no user.
    UserUsage,
    /// The same for the group the run was in, if configured.
    GroupUsage,
    /// The session's history version, which every change to its history increments.
    Session,
    /// The reply's journal row (in-process bus), unless a row with its dedupe id is pending.
    Reply,
    /// The answered message's journal row, removed.
    Answered,
}

/// The rule: each statement, in the order they run.
pub(in crate::store) const STEPS: [(Step, &str); 7] = [
    (
        Step::Run,
        "UPDATE runs SET status = NEW.status, model = NEW.model, input_tokens = NEW.input_tokens,
        output_tokens = NEW.output_tokens, cache_read_tokens = NEW.cache_read_tokens,
        cache_write_tokens = NEW.cache_write_tokens, context_tokens = NEW.context_tokens,
        iterations = NEW.iterations, error = NEW.error,
        reply_json = NEW.reply_json, finished_at = NEW.finished_at, cost_usd = NEW.cost_usd,
        usage_estimated = NEW.usage_estimated,
        reply_delivered = reply_delivered OR NEW.reply_payload IS NOT NULL,
        billed_channel = NEW.billing_channel, billed_sender = NEW.billing_sender
        WHERE run_id = NEW.run_id AND status = 'running'",
    ),
    (
        Step::Transcript,
        "INSERT INTO transcript (session_key, run_id, seq, role, message_json, created_at, memory_scope)
        SELECT {session}, NEW.run_id, pairs.key, pairs.value ->> 0, pairs.value ->> 1, NEW.finished_at,
            NEW.memory_scope
        FROM {transcript} WHERE {running} ORDER BY pairs.key",
    ),
    // A run's cost, when known, is added to the month's; else its tokens count as unpriced.
    (
        Step::UserUsage,
        "INSERT INTO usage_monthly (user_id, month, input_tokens, output_tokens, cache_read_tokens,
            cost_usd, unpriced_tokens)
        SELECT i.user_id, NEW.billing_month, NEW.input_tokens, NEW.output_tokens, NEW.cache_read_tokens,
            COALESCE(NEW.cost_usd, 0.0),
            CASE WHEN NEW.cost_usd IS NULL THEN NEW.input_tokens + NEW.output_tokens ELSE 0 END
        FROM identities AS i
        WHERE NEW.billing_month IS NOT NULL AND i.channel = NEW.billing_channel
            AND i.sender_id = NEW.billing_sender AND {running}
        ON CONFLICT (user_id, month) DO UPDATE SET
            input_tokens = usage_monthly.input_tokens + excluded.input_tokens,
            output_tokens = usage_monthly.output_tokens + excluded.output_tokens,
            cache_read_tokens = usage_monthly.cache_read_tokens + excluded.cache_read_tokens,
            cost_usd = usage_monthly.cost_usd + excluded.cost_usd,
            unpriced_tokens = usage_monthly.unpriced_tokens + excluded.unpriced_tokens",
    ),
    (
        Step::GroupUsage,
        "INSERT INTO group_usage_monthly (group_key, month, input_tokens, output_tokens,
            cache_read_tokens, cost_usd, unpriced_tokens)
        SELECT NEW.billing_group, NEW.billing_month, NEW.input_tokens, NEW.output_tokens,
            NEW.cache_read_tokens, COALESCE(NEW.cost_usd, 0.0),
            CASE WHEN NEW.cost_usd IS NULL THEN NEW.input_tokens + NEW.output_tokens ELSE 0 END
        WHERE NEW.billing_group IS NOT NULL AND {running}
        ON CONFLICT (group_key, month) DO UPDATE SET
            input_tokens = group_usage_monthly.input_tokens + excluded.input_tokens,
            output_tokens = group_usage_monthly.output_tokens + excluded.output_tokens,
            cache_read_tokens = group_usage_monthly.cache_read_tokens + excluded.cache_read_tokens,
            cost_usd = group_usage_monthly.cost_usd + excluded.cost_usd,
            unpriced_tokens = group_usage_monthly.unpriced_tokens + excluded.unpriced_tokens",
    ),
    (
        Step::Session,
        "UPDATE sessions SET updated_at = NEW.finished_at, history_version = history_version + 1
        WHERE key = {session} AND {running}",
    ),
    // A pending row with the reply's dedupe id means it is journaled already.
    (
        Step::Reply,
        "INSERT INTO bus_journal (flow, channel, subject, dedupe_id, payload, created_at)
        SELECT NEW.reply_flow, NEW.reply_channel, NEW.reply_subject, NEW.reply_dedupe_id, {payload},
            NEW.finished_at
        WHERE NEW.reply_payload IS NOT NULL AND {running}
        ON CONFLICT (dedupe_id) DO NOTHING",
    ),
    (Step::Answered, "DELETE FROM bus_journal WHERE seq = NEW.answered_seq AND {running}"),
];

/// How a store writes the placeholders of [`STEPS`].
pub(in crate::store) struct Dialect {
    pub running: &'static str,
    pub session: &'static str,
    pub transcript: &'static str,
    pub payload: &'static str,
}

/// A statement of the rule in `dialect`'s words.
pub(in crate::store) fn statement(sql: &str, dialect: &Dialect) -> String {
    sql.replace("{running}", dialect.running)
        .replace("{session}", dialect.session)
        .replace("{transcript}", dialect.transcript)
        .replace("{payload}", dialect.payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_a_statement_reads_is_a_field_of_the_finish() {
        let field = regex::Regex::new(r"NEW\.(\w+)").unwrap();
        for (step, sql) in STEPS {
            for read in field.captures_iter(sql) {
                assert!(FIELDS.iter().any(|(name, _)| *name == &read[1]), "{step:?} reads NEW.{}", &read[1]);
            }
        }
    }

    #[test]
    fn no_placeholder_is_left_unwritten() {
        let dialect = Dialect { running: "r", session: "s", transcript: "t", payload: "p" };
        for (_, sql) in STEPS {
            assert!(!statement(sql, &dialect).contains('{'), "{sql}");
        }
    }
}
