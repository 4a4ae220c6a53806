-- Tool calls waiting for an approver, and every decision (who, when, what).
CREATE TABLE approvals (
    code         TEXT PRIMARY KEY,
    run_id       TEXT NOT NULL,
    session_key  TEXT NOT NULL,
    channel      TEXT NOT NULL,
    chat_id      TEXT NOT NULL,
    tool         TEXT NOT NULL,
    -- The call's arguments as shown to the approver: shortened, secrets redacted.
    arguments    TEXT NOT NULL,
    requested_by TEXT NOT NULL,
    requested_at BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL,
    -- pending, allowed, denied, expired (timeout or restart), cancelled (/stop)
    status       TEXT NOT NULL,
    -- For an allowed call: once, or chat (every later call of the tool in the session).
    scope        TEXT NOT NULL DEFAULT '',
    decided_by   TEXT NOT NULL DEFAULT '',
    decided_at   BIGINT,
    reason       TEXT NOT NULL DEFAULT ''
);
CREATE INDEX approvals_by_status ON approvals (status, requested_at);

-- "Allow for this chat": the tool runs in that session without asking again.
CREATE TABLE approval_grants (
    session_key TEXT NOT NULL,
    tool        TEXT NOT NULL,
    granted_by  TEXT NOT NULL,
    granted_at  BIGINT NOT NULL,
    PRIMARY KEY (session_key, tool)
);
