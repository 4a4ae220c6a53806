-- The estimated cost of each month's usage, per user and per configured group, added with its
-- tokens when a run finishes: `cost_usd` sums the runs whose cost is known, `unpriced_tokens`
-- counts the tokens of those whose model has no price (left out of `cost_usd`). Tokens counted
-- before this migration have no known cost.
ALTER TABLE usage_monthly ADD COLUMN cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0.0;
ALTER TABLE usage_monthly ADD COLUMN unpriced_tokens BIGINT NOT NULL DEFAULT 0;
UPDATE usage_monthly SET unpriced_tokens = input_tokens + output_tokens;
ALTER TABLE group_usage_monthly ADD COLUMN cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0.0;
ALTER TABLE group_usage_monthly ADD COLUMN unpriced_tokens BIGINT NOT NULL DEFAULT 0;
UPDATE group_usage_monthly SET unpriced_tokens = input_tokens + output_tokens;
