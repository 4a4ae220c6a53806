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

-- finish_runs (0009) adding the run's cost (or its tokens, when the cost is unknown) to the month's usage.
CREATE OR REPLACE FUNCTION finish_runs(finishes JSONB)
RETURNS TABLE (
    finished_run    TEXT,
    run_session     TEXT,
    prior_status    TEXT,
    new_version     BIGINT,
    reply_row       BIGINT,
    usage_counted   BOOLEAN
)
LANGUAGE plpgsql AS $$
DECLARE
    f        JSONB;
    prior    RECORD;
    at       BIGINT;
    inputs   BIGINT;
    outputs  BIGINT;
    cached   BIGINT;
    cost     DOUBLE PRECISION;
    unpriced BIGINT;
    billed   TEXT;
BEGIN
    FOR f IN SELECT value FROM jsonb_array_elements(finishes) LOOP
        finished_run := f ->> 'run_id';
        run_session := NULL; prior_status := NULL; new_version := NULL; reply_row := NULL; usage_counted := NULL;
        SELECT r.session_key, r.status INTO prior FROM runs AS r WHERE r.run_id = finished_run FOR UPDATE;
        IF NOT FOUND THEN
            RETURN NEXT;
            CONTINUE;
        END IF;
        run_session := prior.session_key;
        prior_status := prior.status;
        -- Only a running run is finished: another worker may have resumed this one and
        -- finished first, and then its reply is the one kept.
        IF prior.status <> 'running' THEN
            RETURN NEXT;
            CONTINUE;
        END IF;
        at := (f ->> 'finished_at')::BIGINT;
        inputs := (f ->> 'input_tokens')::BIGINT;
        outputs := (f ->> 'output_tokens')::BIGINT;
        cached := (f ->> 'cache_read_tokens')::BIGINT;
        billed := f ->> 'billing_month';
        cost := COALESCE((f ->> 'cost_usd')::DOUBLE PRECISION, 0);
        unpriced := CASE WHEN f ->> 'cost_usd' IS NULL THEN inputs + outputs ELSE 0 END;
        UPDATE runs SET status = f ->> 'status', model = f ->> 'model', input_tokens = inputs,
            output_tokens = outputs, cache_read_tokens = cached,
            cache_write_tokens = (f ->> 'cache_write_tokens')::BIGINT,
            context_tokens = (f ->> 'context_tokens')::BIGINT, iterations = (f ->> 'iterations')::BIGINT, error = f ->> 'error',
            reply_json = f ->> 'reply_json', finished_at = at,
            cost_usd = (f ->> 'cost_usd')::DOUBLE PRECISION,
            usage_estimated = (f ->> 'usage_estimated')::BOOLEAN,
            reply_delivered = reply_delivered OR f ->> 'reply_payload' IS NOT NULL,
            billed_channel = f ->> 'billing_channel', billed_sender = f ->> 'billing_sender'
            WHERE run_id = finished_run;
        -- Transcript ids are taken in commit order, as SQLite's one writer takes them: a
        -- session's history reads its rows by id, and the memory index reads every scope's rows
        -- past the last id it indexed, so a row committed after a higher id would be skipped
        -- for good. The lock is held to the end of this call's transaction.
        PERFORM pg_advisory_xact_lock(7526466);
        -- The transcript comes as [[role, message JSON], …], in order.
        INSERT INTO transcript (session_key, run_id, seq, role, message_json, created_at, memory_scope)
            SELECT prior.session_key, finished_run, t.n - 1, t.pair ->> 0, t.pair ->> 1, at, f ->> 'memory_scope'
            FROM jsonb_array_elements(f -> 'transcript') WITH ORDINALITY AS t (pair, n)
            ORDER BY t.n;
        usage_counted := TRUE;
        IF billed IS NOT NULL THEN
            INSERT INTO usage_monthly AS u (user_id, month, input_tokens, output_tokens, cache_read_tokens,
                    cost_usd, unpriced_tokens)
                SELECT i.user_id, billed, inputs, outputs, cached, cost, unpriced FROM identities AS i
                WHERE i.channel = f ->> 'billing_channel' AND i.sender_id = f ->> 'billing_sender'
                ON CONFLICT (user_id, month) DO UPDATE SET
                    input_tokens = u.input_tokens + excluded.input_tokens,
                    output_tokens = u.output_tokens + excluded.output_tokens,
                    cache_read_tokens = u.cache_read_tokens + excluded.cache_read_tokens,
                    cost_usd = u.cost_usd + excluded.cost_usd,
                    unpriced_tokens = u.unpriced_tokens + excluded.unpriced_tokens;
            usage_counted := FOUND;
            IF f ->> 'billing_group' IS NOT NULL THEN
                INSERT INTO group_usage_monthly AS g (group_key, month, input_tokens, output_tokens, cache_read_tokens,
                        cost_usd, unpriced_tokens)
                    VALUES (f ->> 'billing_group', billed, inputs, outputs, cached, cost, unpriced)
                    ON CONFLICT (group_key, month) DO UPDATE SET
                        input_tokens = g.input_tokens + excluded.input_tokens,
                        output_tokens = g.output_tokens + excluded.output_tokens,
                        cache_read_tokens = g.cache_read_tokens + excluded.cache_read_tokens,
                        cost_usd = g.cost_usd + excluded.cost_usd,
                        unpriced_tokens = g.unpriced_tokens + excluded.unpriced_tokens;
            END IF;
        END IF;
        UPDATE sessions SET updated_at = at, history_version = history_version + 1
            WHERE key = prior.session_key RETURNING history_version INTO new_version;
        -- A pending row with the reply's dedupe id means it is journaled already.
        IF f ->> 'reply_payload' IS NOT NULL THEN
            INSERT INTO bus_journal (flow, channel, subject, dedupe_id, payload, created_at)
                VALUES (f ->> 'reply_flow', f ->> 'reply_channel', f ->> 'reply_subject',
                    f ->> 'reply_dedupe_id', convert_to(f ->> 'reply_payload', 'UTF8'), at)
                ON CONFLICT (dedupe_id) DO NOTHING
                RETURNING seq INTO reply_row;
        END IF;
        IF f ->> 'answered_seq' IS NOT NULL THEN
            DELETE FROM bus_journal WHERE seq = (f ->> 'answered_seq')::BIGINT;
        END IF;
        RETURN NEXT;
    END LOOP;
END;
$$;
