-- Estimated cost of a run in USD, from the configured price table. NULL = unknown (a model
-- without a price, or a run finished before this column existed), never to be read as zero.
ALTER TABLE runs ADD COLUMN cost_usd REAL;
