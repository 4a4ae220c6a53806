-- Heartbeats. One row per agent: when its next heartbeat is due and how the last slot went.
-- Schedulers claim a slot by moving `next_at` with a compare-and-set, so of several
-- schedulers on one database exactly one acts on each slot.
CREATE TABLE heartbeats (
    agent        TEXT PRIMARY KEY NOT NULL,
    next_at      BIGINT NOT NULL,
    last_at      BIGINT,
    last_outcome TEXT
);

-- The most recent direct chat of each owner with each agent: where `target = "owner"`
-- heartbeats go. Group chats are never recorded.
CREATE TABLE owner_chats (
    agent      TEXT NOT NULL,
    identity   TEXT NOT NULL,
    chat_json  TEXT NOT NULL,
    written_at BIGINT NOT NULL,
    PRIMARY KEY (agent, identity)
);

CREATE INDEX owner_chats_by_time ON owner_chats (agent, written_at);

-- Heartbeats skip a session while one of its runs is running.
CREATE INDEX runs_by_session_status ON runs (session_key, status);
