-- Who a run's usage was billed to (its billing identity, `channel` and `sender_id`), so usage
-- and cost can be summed per person and per day, and a person's last activity read. NULL for
-- runs billed to nobody (cron jobs and heartbeats acting for no one, commands) and for runs
-- finished before this column.
ALTER TABLE runs ADD COLUMN billed_channel TEXT;
ALTER TABLE runs ADD COLUMN billed_sender TEXT;
CREATE INDEX runs_by_payer ON runs (billed_channel, billed_sender, started_at);
