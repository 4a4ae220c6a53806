-- Tokens used per configured group (`[users.groups]`, by its key such as
-- `telegram:-1001234567890` or `discord:guild:123`) and UTC calendar month (`YYYY-MM`): the
-- usage a group's pooled budget is checked against. Added to in the same transaction as the
-- run's own usage.
CREATE TABLE group_usage_monthly (
    group_key     TEXT NOT NULL,
    month         TEXT NOT NULL,
    input_tokens  BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (group_key, month)
);
