-- Per-session settings for chat commands. The transcript stays append-only: `/new` moves
-- `archived_through` to the session's newest transcript id, and history reads only rows after
-- it. `queue_mode` is set by `/queue <mode>`; NULL = the configured default.
ALTER TABLE sessions ADD COLUMN archived_through BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN queue_mode TEXT;
