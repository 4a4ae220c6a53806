-- Compaction: old history folded into a summary. The transcript stays append-only; a session
-- only remembers up to which transcript id its history is covered by the summary.
ALTER TABLE sessions ADD COLUMN summary TEXT;
ALTER TABLE sessions ADD COLUMN compaction_count BIGINT NOT NULL DEFAULT 0;
-- history() returns only transcript rows with a greater id.
ALTER TABLE sessions ADD COLUMN compacted_through BIGINT NOT NULL DEFAULT 0;
-- Set (unix ms) while a compaction of the session runs, so no second one starts; a stale
-- value (a process died mid-compaction) is taken over after a while.
ALTER TABLE sessions ADD COLUMN compacting_since BIGINT;
