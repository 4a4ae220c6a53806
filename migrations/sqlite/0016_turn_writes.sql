-- A turn's work, not more (docs/benchmarks.md, "What a turn writes").
--
-- A run's claim is one INSERT: creating its session row on first use is the trigger's job, so
-- the claim needs no transaction of its own around two statements.
CREATE TRIGGER runs_create_session BEFORE INSERT ON runs
BEGIN
    INSERT OR IGNORE INTO sessions (key, created_at, updated_at)
    VALUES (NEW.session_key, NEW.started_at, NEW.started_at);
END;

-- Counts every change to what a session's history shows (a finished run's rows appended, a
-- compaction, `/new`), so a process that keeps the history in memory can tell with one small
-- read whether its copy is still the session's.
ALTER TABLE sessions ADD COLUMN history_version BIGINT NOT NULL DEFAULT 0;
