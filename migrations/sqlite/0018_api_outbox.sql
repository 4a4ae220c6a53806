-- Messages for API chats that no request was waiting for (a cron reminder, a `message` sent
-- from another chat, a reply whose client gave up): kept for GET /v1/sessions/{key}/messages
-- and, when a webhook is configured, posted to it until it takes them.
CREATE TABLE api_outbox (
    seq              INTEGER PRIMARY KEY AUTOINCREMENT,
    outbound_id      TEXT NOT NULL UNIQUE,
    session_key      TEXT NOT NULL,
    message_json     TEXT NOT NULL,
    -- A turn of the session wrote it: its transcript holds it already.
    in_transcript    BOOLEAN NOT NULL,
    created_at       INTEGER NOT NULL,
    webhook_attempts INTEGER NOT NULL DEFAULT 0,
    -- When the next webhook post is due; NULL: none (no webhook, delivered, or given up).
    webhook_due_at   INTEGER
);
CREATE INDEX api_outbox_by_session ON api_outbox (session_key, created_at);
CREATE INDEX api_outbox_webhook_due ON api_outbox (webhook_due_at) WHERE webhook_due_at IS NOT NULL;
