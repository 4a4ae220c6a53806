-- Per-session choices made with chat commands: `/model <name>` (a model of the agent's chain,
-- tried first) and `/verbose on|off` (progress messages while tools run).
ALTER TABLE sessions ADD COLUMN model TEXT;
ALTER TABLE sessions ADD COLUMN show_progress BOOLEAN NOT NULL DEFAULT FALSE;
