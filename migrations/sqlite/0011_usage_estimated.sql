-- Usage the provider did not report (many local servers send none in streamed answers) is
-- estimated by switchboard; these flags say which counts are estimates.
ALTER TABLE runs ADD COLUMN usage_estimated BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE subagents ADD COLUMN usage_estimated BOOLEAN NOT NULL DEFAULT FALSE;
