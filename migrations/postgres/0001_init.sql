-- The PostgreSQL store's schema: the same tables as the SQLite store after its migrations
-- 0001–0016 (migrations/sqlite), in one step, since no PostgreSQL database predates them.
-- Times are unix milliseconds (UTC) as there, so both stores share their row decoding.

CREATE TABLE sessions (
    key               TEXT PRIMARY KEY,
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL,
    summary           TEXT,
    compaction_count  BIGINT NOT NULL DEFAULT 0,
    compacted_through BIGINT NOT NULL DEFAULT 0,
    compacting_since  BIGINT,
    archived_through  BIGINT NOT NULL DEFAULT 0,
    queue_mode        TEXT,
    -- Counts every change to what the session's history shows (see the SQLite store's 0016).
    history_version   BIGINT NOT NULL DEFAULT 0
);

CREATE TABLE runs (
    run_id          TEXT PRIMARY KEY,
    inbound_id      TEXT NOT NULL UNIQUE,
    session_key     TEXT NOT NULL REFERENCES sessions (key),
    status          TEXT NOT NULL CHECK (status IN ('running', 'completed', 'failed')),
    attempt         BIGINT NOT NULL DEFAULT 1,
    model           TEXT NOT NULL DEFAULT '',
    input_tokens    BIGINT NOT NULL DEFAULT 0,
    output_tokens   BIGINT NOT NULL DEFAULT 0,
    usage_estimated BOOLEAN NOT NULL DEFAULT FALSE,
    cost_usd        DOUBLE PRECISION,
    iterations      BIGINT NOT NULL DEFAULT 0,
    error           TEXT,
    reply_json      TEXT,
    reply_delivered BOOLEAN NOT NULL DEFAULT FALSE,
    started_at      BIGINT NOT NULL,
    finished_at     BIGINT
);
CREATE INDEX runs_by_start ON runs (started_at, run_id);
CREATE INDEX runs_by_session_status ON runs (session_key, status);

CREATE TABLE transcript (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_key  TEXT NOT NULL REFERENCES sessions (key),
    run_id       TEXT NOT NULL REFERENCES runs (run_id),
    seq          BIGINT NOT NULL,
    role         TEXT NOT NULL,
    message_json TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    memory_scope TEXT,
    UNIQUE (run_id, seq)
);
CREATE INDEX transcript_by_session ON transcript (session_key, id);
CREATE INDEX transcript_by_memory_scope ON transcript (memory_scope, id) WHERE memory_scope IS NOT NULL;

CREATE TABLE bus_journal (
    seq        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    flow       TEXT NOT NULL CHECK (flow IN ('in', 'out')),
    channel    TEXT NOT NULL,
    subject    TEXT NOT NULL,
    dedupe_id  TEXT UNIQUE,
    payload    BYTEA NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE users (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    level         TEXT NOT NULL CHECK (level IN ('guest', 'user', 'admin', 'owner')),
    budget_tokens BIGINT CHECK (budget_tokens >= 0),
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL
);

CREATE TABLE identities (
    channel      TEXT NOT NULL,
    sender_id    TEXT NOT NULL,
    user_id      BIGINT NOT NULL REFERENCES users (id),
    display_name TEXT NOT NULL DEFAULT '',
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (channel, sender_id)
);
CREATE INDEX identities_by_user ON identities (user_id);

CREATE TABLE usage_monthly (
    user_id       BIGINT NOT NULL REFERENCES users (id),
    month         TEXT NOT NULL,
    input_tokens  BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (user_id, month)
);

CREATE TABLE group_usage_monthly (
    group_key     TEXT NOT NULL,
    month         TEXT NOT NULL,
    input_tokens  BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (group_key, month)
);

CREATE TABLE pairing_requests (
    channel     TEXT NOT NULL,
    code        TEXT NOT NULL,
    sender_id   TEXT NOT NULL,
    sender_name TEXT NOT NULL DEFAULT '',
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL,
    used_at     BIGINT,
    PRIMARY KEY (channel, code)
);
CREATE INDEX pairing_requests_by_sender ON pairing_requests (channel, sender_id);

CREATE TABLE pairing_approvals (
    channel     TEXT NOT NULL,
    sender_id   TEXT NOT NULL,
    sender_name TEXT NOT NULL DEFAULT '',
    approved_at BIGINT NOT NULL,
    PRIMARY KEY (channel, sender_id)
);

CREATE TABLE cron_jobs (
    id               TEXT PRIMARY KEY,
    name             TEXT NOT NULL,
    agent            TEXT NOT NULL,
    owner_session    TEXT NOT NULL,
    chat             TEXT NOT NULL,
    payload          TEXT NOT NULL,
    message          TEXT NOT NULL,
    schedule         TEXT NOT NULL,
    tz               TEXT NOT NULL,
    missed           TEXT NOT NULL,
    enabled          BIGINT NOT NULL DEFAULT 1,
    next_run_at      BIGINT,
    last_run_at      BIGINT,
    last_status      TEXT,
    last_error       TEXT,
    created_by_id    TEXT NOT NULL DEFAULT '',
    created_by_name  TEXT NOT NULL DEFAULT '',
    created_at       BIGINT NOT NULL,
    generation       BIGINT NOT NULL DEFAULT 0,
    parent_job       TEXT,
    created_by_run   TEXT,
    on_behalf_of     TEXT,
    run_requested_at BIGINT
);
CREATE INDEX cron_jobs_due ON cron_jobs (next_run_at) WHERE enabled = 1 AND next_run_at IS NOT NULL;
CREATE INDEX cron_jobs_by_owner ON cron_jobs (owner_session);
CREATE INDEX cron_jobs_by_run ON cron_jobs (created_by_run);

CREATE TABLE cron_runs (
    seq           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        TEXT NOT NULL REFERENCES cron_jobs (id) ON DELETE CASCADE,
    scheduled_for BIGINT NOT NULL,
    inbound_id    TEXT UNIQUE,
    claimed_at    BIGINT NOT NULL,
    fired_at      BIGINT,
    status        TEXT NOT NULL,
    note          TEXT NOT NULL DEFAULT '',
    error         TEXT
);
CREATE INDEX cron_runs_by_job ON cron_runs (job_id, seq);
CREATE INDEX cron_runs_pending ON cron_runs (status) WHERE status = 'pending';

CREATE TABLE subagents (
    id               TEXT PRIMARY KEY,
    parent_session   TEXT NOT NULL,
    parent_agent     TEXT NOT NULL,
    chat             TEXT NOT NULL,
    session          TEXT,
    label            TEXT NOT NULL DEFAULT '',
    on_behalf_of     TEXT,
    task             TEXT NOT NULL,
    status           TEXT NOT NULL,
    result           TEXT,
    error            TEXT,
    worker           TEXT NOT NULL,
    lease_until      BIGINT NOT NULL,
    cancel_requested BIGINT NOT NULL DEFAULT 0,
    created_at       BIGINT NOT NULL,
    started_at       BIGINT,
    finished_at      BIGINT,
    announced        BIGINT NOT NULL DEFAULT 0,
    input_tokens     BIGINT NOT NULL DEFAULT 0,
    output_tokens    BIGINT NOT NULL DEFAULT 0,
    cost_usd         DOUBLE PRECISION,
    usage_estimated  BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX subagents_by_parent ON subagents (parent_session, status);
CREATE INDEX subagents_by_status ON subagents (status, lease_until);

CREATE TABLE heartbeats (
    agent        TEXT PRIMARY KEY,
    next_at      BIGINT NOT NULL,
    last_at      BIGINT,
    last_outcome TEXT
);

CREATE TABLE owner_chats (
    agent      TEXT NOT NULL,
    identity   TEXT NOT NULL,
    chat_json  TEXT NOT NULL,
    written_at BIGINT NOT NULL,
    PRIMARY KEY (agent, identity)
);
CREATE INDEX owner_chats_by_time ON owner_chats (agent, written_at);

CREATE TABLE memory_files (
    root        TEXT NOT NULL,
    path        TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    indexed_at  BIGINT NOT NULL,
    PRIMARY KEY (root, path)
);

-- Full-text search is PostgreSQL's own (a generated tsvector with a GIN index) where the
-- SQLite store has FTS5.
CREATE TABLE memory_chunks (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    root       TEXT NOT NULL,
    path       TEXT NOT NULL,
    start_line BIGINT NOT NULL,
    end_line   BIGINT NOT NULL,
    body       TEXT NOT NULL,
    scope      TEXT,
    words      TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple', body)) STORED
);
CREATE INDEX memory_chunks_by_file ON memory_chunks (root, path);
CREATE INDEX memory_chunks_by_scope ON memory_chunks (root, scope) WHERE scope IS NOT NULL;
CREATE INDEX memory_chunks_words ON memory_chunks USING GIN (words);

CREATE TABLE memory_transcripts (
    root            TEXT NOT NULL,
    scope           TEXT NOT NULL,
    indexed_through BIGINT NOT NULL,
    PRIMARY KEY (root, scope)
);

CREATE TABLE memory_embeddings (
    model      TEXT NOT NULL,
    text_hash  TEXT NOT NULL,
    vector     BYTEA NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (model, text_hash)
);

-- A run's finish in one call, so one round trip and one transaction (the SQLite store does the
-- same with a trigger on a view): the outcome, the transcript, the usage counters, the
-- session's history version, the reply's journal row and the removal of the answered
-- message's row. `finishes` is a JSON array of the objects the store sends (see
-- src/store/postgres/finish.rs); one result row per finish, in order.
CREATE FUNCTION finish_runs(finishes JSONB)
RETURNS TABLE (
    finished_run    TEXT,
    run_session     TEXT,
    prior_status    TEXT,
    new_version     BIGINT,
    reply_row       BIGINT,
    usage_counted   BOOLEAN
)
LANGUAGE plpgsql AS $$
DECLARE
    f        JSONB;
    prior    RECORD;
    at       BIGINT;
    inputs   BIGINT;
    outputs  BIGINT;
    billed   TEXT;
BEGIN
    FOR f IN SELECT value FROM jsonb_array_elements(finishes) LOOP
        finished_run := f ->> 'run_id';
        run_session := NULL; prior_status := NULL; new_version := NULL; reply_row := NULL; usage_counted := NULL;
        SELECT r.session_key, r.status INTO prior FROM runs AS r WHERE r.run_id = finished_run FOR UPDATE;
        IF NOT FOUND THEN
            RETURN NEXT;
            CONTINUE;
        END IF;
        run_session := prior.session_key;
        prior_status := prior.status;
        -- Only a running run is finished: another worker may have resumed this one and
        -- finished first, and then its reply is the one kept.
        IF prior.status <> 'running' THEN
            RETURN NEXT;
            CONTINUE;
        END IF;
        at := (f ->> 'finished_at')::BIGINT;
        inputs := (f ->> 'input_tokens')::BIGINT;
        outputs := (f ->> 'output_tokens')::BIGINT;
        billed := f ->> 'billing_month';
        UPDATE runs SET status = f ->> 'status', model = f ->> 'model', input_tokens = inputs,
            output_tokens = outputs, iterations = (f ->> 'iterations')::BIGINT, error = f ->> 'error',
            reply_json = f ->> 'reply_json', finished_at = at,
            cost_usd = (f ->> 'cost_usd')::DOUBLE PRECISION,
            usage_estimated = (f ->> 'usage_estimated')::BOOLEAN,
            reply_delivered = reply_delivered OR f ->> 'reply_payload' IS NOT NULL
            WHERE run_id = finished_run;
        -- Transcript ids are taken in commit order, as SQLite's one writer takes them: a
        -- session's history reads its rows by id, and the memory index reads every scope's rows
        -- past the last id it indexed, so a row committed after a higher id would be skipped
        -- for good. The lock is held to the end of this call's transaction.
        PERFORM pg_advisory_xact_lock(7526466);
        -- The transcript comes as [[role, message JSON], …], in order.
        INSERT INTO transcript (session_key, run_id, seq, role, message_json, created_at, memory_scope)
            SELECT prior.session_key, finished_run, t.n - 1, t.pair ->> 0, t.pair ->> 1, at, f ->> 'memory_scope'
            FROM jsonb_array_elements(f -> 'transcript') WITH ORDINALITY AS t (pair, n)
            ORDER BY t.n;
        usage_counted := TRUE;
        IF billed IS NOT NULL THEN
            INSERT INTO usage_monthly AS u (user_id, month, input_tokens, output_tokens)
                SELECT i.user_id, billed, inputs, outputs FROM identities AS i
                WHERE i.channel = f ->> 'billing_channel' AND i.sender_id = f ->> 'billing_sender'
                ON CONFLICT (user_id, month) DO UPDATE SET
                    input_tokens = u.input_tokens + excluded.input_tokens,
                    output_tokens = u.output_tokens + excluded.output_tokens;
            usage_counted := FOUND;
            IF f ->> 'billing_group' IS NOT NULL THEN
                INSERT INTO group_usage_monthly AS g (group_key, month, input_tokens, output_tokens)
                    VALUES (f ->> 'billing_group', billed, inputs, outputs)
                    ON CONFLICT (group_key, month) DO UPDATE SET
                        input_tokens = g.input_tokens + excluded.input_tokens,
                        output_tokens = g.output_tokens + excluded.output_tokens;
            END IF;
        END IF;
        UPDATE sessions SET updated_at = at, history_version = history_version + 1
            WHERE key = prior.session_key RETURNING history_version INTO new_version;
        -- A pending row with the reply's dedupe id means it is journaled already.
        IF f ->> 'reply_payload' IS NOT NULL THEN
            INSERT INTO bus_journal (flow, channel, subject, dedupe_id, payload, created_at)
                VALUES (f ->> 'reply_flow', f ->> 'reply_channel', f ->> 'reply_subject',
                    f ->> 'reply_dedupe_id', convert_to(f ->> 'reply_payload', 'UTF8'), at)
                ON CONFLICT (dedupe_id) DO NOTHING
                RETURNING seq INTO reply_row;
        END IF;
        IF f ->> 'answered_seq' IS NOT NULL THEN
            DELETE FROM bus_journal WHERE seq = (f ->> 'answered_seq')::BIGINT;
        END IF;
        RETURN NEXT;
    END LOOP;
END;
$$;
