-- Sub-agents started by the `spawn` tool: one row each, from queued to its end, so a result
-- is announced once and a sub-agent lost to a crashed worker is reported, never forgotten.
-- Self-contained: touches no earlier table. Times are unix milliseconds (UTC).
CREATE TABLE subagents (
    id               TEXT PRIMARY KEY NOT NULL,
    -- The full session key of the run that spawned it (`<agent>/…` for non-main agents).
    parent_session   TEXT NOT NULL,
    parent_agent     TEXT NOT NULL,
    -- The chat the result is announced to: a ChatAddress as JSON.
    chat             TEXT NOT NULL,
    -- The parent's isolated session (`metadata.session`), when it ran in one.
    session          TEXT,
    label            TEXT NOT NULL DEFAULT '',
    -- The person the spawning run acted for (`telegram:42`); NULL = the owner.
    on_behalf_of     TEXT,
    task             TEXT NOT NULL,
    -- queued, running, completed, failed, timed_out, cancelled, lost
    status           TEXT NOT NULL,
    result           TEXT,
    error            TEXT,
    -- The worker instance that runs it, and until when its claim holds without renewal.
    worker           TEXT NOT NULL,
    lease_until      BIGINT NOT NULL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    created_at       BIGINT NOT NULL,
    started_at       BIGINT,
    finished_at      BIGINT,
    announced        INTEGER NOT NULL DEFAULT 0,
    -- The model usage of its turn, and its estimated cost (NULL when the model has no price).
    input_tokens     BIGINT NOT NULL DEFAULT 0,
    output_tokens    BIGINT NOT NULL DEFAULT 0,
    cost_usd         REAL
);

-- The per-session cap and `/stop` look up a session's live children.
CREATE INDEX subagents_by_parent ON subagents (parent_session, status);
-- The reaper looks for expired leases and unannounced results.
CREATE INDEX subagents_by_status ON subagents (status, lease_until);
