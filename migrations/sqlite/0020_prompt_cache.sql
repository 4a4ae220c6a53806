-- What the provider's prompt cache served (`cache_read_tokens`) and stored
-- (`cache_write_tokens`) of a run's input: both are part of `input_tokens`, priced apart.
ALTER TABLE runs ADD COLUMN cache_read_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN cache_write_tokens BIGINT NOT NULL DEFAULT 0;
-- What a run was: a turn answering a message, or a compaction's `memory_flush` or `summary`
-- call, which nobody waits for but somebody pays for.
ALTER TABLE runs ADD COLUMN kind TEXT NOT NULL DEFAULT 'turn';
-- What the conversation weighed after the run, as the provider counted its last call (input
-- and output): about what the session's next turn sends. Shown by `/status`.
ALTER TABLE runs ADD COLUMN context_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_monthly ADD COLUMN cache_read_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE group_usage_monthly ADD COLUMN cache_read_tokens BIGINT NOT NULL DEFAULT 0;
