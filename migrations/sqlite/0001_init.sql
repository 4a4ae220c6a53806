-- Initial schema. Times are unix milliseconds (UTC) in BIGINT columns; booleans are BOOLEAN.
-- Kept close to PostgreSQL so the PostgreSQL folder can mirror it with few changes
-- (there: BIGINT GENERATED ALWAYS AS IDENTITY instead of INTEGER ... AUTOINCREMENT).

-- One row per conversation, keyed `channel:chat_id[:topic:N|:thread:N]`.
CREATE TABLE sessions (
    key        TEXT PRIMARY KEY NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

-- One row per inbound message that a worker claimed. The unique inbound id is what makes a
-- redelivered message resume or replay its run instead of starting a second one.
CREATE TABLE runs (
    run_id          TEXT PRIMARY KEY NOT NULL,
    inbound_id      TEXT NOT NULL UNIQUE,
    session_key     TEXT NOT NULL REFERENCES sessions (key),
    status          TEXT NOT NULL CHECK (status IN ('running', 'completed', 'failed')),
    attempt         BIGINT NOT NULL DEFAULT 1,
    model           TEXT NOT NULL DEFAULT '',
    input_tokens    BIGINT NOT NULL DEFAULT 0,
    output_tokens   BIGINT NOT NULL DEFAULT 0,
    iterations      BIGINT NOT NULL DEFAULT 0,
    error           TEXT,
    reply_json      TEXT,
    reply_delivered BOOLEAN NOT NULL DEFAULT FALSE,
    started_at      BIGINT NOT NULL,
    finished_at     BIGINT
);

-- Operators list the newest runs first.
CREATE INDEX runs_by_start ON runs (started_at, run_id);

-- Append-only: rows are only ever inserted, by a finishing run, in one transaction.
-- `id` gives the session's message order; `seq` is the position within its run.
CREATE TABLE transcript (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    session_key  TEXT NOT NULL REFERENCES sessions (key),
    run_id       TEXT NOT NULL REFERENCES runs (run_id),
    seq          BIGINT NOT NULL,
    role         TEXT NOT NULL,
    message_json TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    UNIQUE (run_id, seq)
);

-- History reads the last N messages of one session.
CREATE INDEX transcript_by_session ON transcript (session_key, id);
