-- The in-process bus's journal: inbound and outbound messages written before they are queued
-- and deleted when acked, so messages accepted before a crash are delivered after the restart.
CREATE TABLE bus_journal (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    flow       TEXT NOT NULL CHECK (flow IN ('in', 'out')),
    channel    TEXT NOT NULL,
    subject    TEXT NOT NULL,
    -- Unique while pending: a second publish of the same message id is dropped.
    dedupe_id  TEXT UNIQUE,
    payload    BLOB NOT NULL,
    created_at BIGINT NOT NULL
);
