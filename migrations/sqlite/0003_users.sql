-- Users, the platform identities that belong to them, and their token usage per month.
-- Self-contained: touches no earlier table. Times are unix milliseconds (UTC).

-- One row per person. `budget_tokens` is the user's own monthly budget (0 = unlimited);
-- NULL means the budget of the user's level from the config.
CREATE TABLE users (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    level         TEXT NOT NULL CHECK (level IN ('guest', 'user', 'admin', 'owner')),
    budget_tokens BIGINT CHECK (budget_tokens >= 0),
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL
);

-- A sender on a platform. The primary key is what makes two first messages from one sender
-- at once end up as one user.
CREATE TABLE identities (
    channel      TEXT NOT NULL,
    sender_id    TEXT NOT NULL,
    user_id      BIGINT NOT NULL REFERENCES users (id),
    display_name TEXT NOT NULL DEFAULT '',
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (channel, sender_id)
);

CREATE INDEX identities_by_user ON identities (user_id);

-- Tokens used per user and UTC calendar month (`YYYY-MM`). Keyed by month, so a new month
-- starts from zero with no reset job.
CREATE TABLE usage_monthly (
    user_id       BIGINT NOT NULL REFERENCES users (id),
    month         TEXT NOT NULL,
    input_tokens  BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (user_id, month)
);
