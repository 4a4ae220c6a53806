-- DM pairing: one-time codes strangers are given, and the senders the owner approved.
-- Self-contained: touches no earlier table. Times are unix milliseconds (UTC).

-- A code shown to a sender. A code is unique per channel; `used_at` is set when the owner
-- approves it. Rows are kept a while after they expire (so approving a stale code says
-- "expired" rather than "unknown") and then pruned by the next request.
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

-- A sender the owner approved (by code or by id). Revoking deletes the row.
CREATE TABLE pairing_approvals (
    channel     TEXT NOT NULL,
    sender_id   TEXT NOT NULL,
    sender_name TEXT NOT NULL DEFAULT '',
    approved_at BIGINT NOT NULL,
    PRIMARY KEY (channel, sender_id)
);
