-- Cron jobs and their run history. Times are unix milliseconds (UTC).

-- A job. `next_run_at` NULL = finished (an `at` job that fired); `enabled` 0 = paused.
-- `chat` is a ChatAddress and `schedule` a Schedule, as JSON; `tz` is the zone times are shown in.
CREATE TABLE cron_jobs (
    id               TEXT PRIMARY KEY NOT NULL,
    name             TEXT NOT NULL,
    agent            TEXT NOT NULL,
    owner_session    TEXT NOT NULL,
    chat             TEXT NOT NULL,
    payload          TEXT NOT NULL,
    message          TEXT NOT NULL,
    schedule         TEXT NOT NULL,
    tz               TEXT NOT NULL,
    missed           TEXT NOT NULL,
    enabled          INTEGER NOT NULL DEFAULT 1,
    next_run_at      BIGINT,
    last_run_at      BIGINT,
    last_status      TEXT,
    last_error       TEXT,
    created_by_id    TEXT NOT NULL DEFAULT '',
    created_by_name  TEXT NOT NULL DEFAULT '',
    created_at       BIGINT NOT NULL,
    generation       INTEGER NOT NULL DEFAULT 0,
    parent_job       TEXT,
    created_by_run   TEXT,
    -- The identity the job's runs act for (its creator); NULL = the owner.
    on_behalf_of     TEXT,
    run_requested_at BIGINT
);

CREATE INDEX cron_jobs_due ON cron_jobs (next_run_at) WHERE enabled = 1 AND next_run_at IS NOT NULL;
CREATE INDEX cron_jobs_by_owner ON cron_jobs (owner_session);
CREATE INDEX cron_jobs_by_run ON cron_jobs (created_by_run);

-- One occurrence: pending (claimed) -> fired (published) -> completed | failed, or missed.
-- `inbound_id` is the system message's id (NULL for a missed occurrence, nothing published).
-- Bounded per job: the oldest rows are pruned when one is added.
CREATE TABLE cron_runs (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
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
