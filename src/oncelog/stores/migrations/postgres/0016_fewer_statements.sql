-- Less work on the server for each intent and outcome (issue 15.3, third pass). Every
-- statement may run again (a test re-applies the later migrations).
--
-- Counted with callgrind on a private server: most of a call's instructions went to
-- starting and ending the executor of each statement the functions ran (nine for an
-- effect's intent, counting the budget trigger's two and the foreign key's check), not
-- to the rows written. So:
-- - the fencing read of the run's row also answers the kill switch and the agent-budget
--   question (one statement, where there were three);
-- - the journal's head is read inside the journal's INSERT (one statement, where there
--   were two), still after the journal's lock, and hashed there as _chain.link does: the
--   previous hash, the client's head of the canonical record, the data as a JSON string
--   (to_json escapes as Python's json.dumps does), the time's text (oncelog_at_text). Not
--   through a SQL function: one given a subquery is not inlined, and a SQL function called
--   as such costs more than the statement it saves;
-- - the budget trigger is not fired by a function that found the run without a budget:
--   what it would have counted, it would have added to nothing (runs.budget IS NULL) or
--   to an agent's day the function refused to handle (OL000). The function says so in a
--   transaction-local setting, oncelog.uncounted, which the triggers' WHEN reads; every
--   other writer leaves it unset and is counted as before;
-- - both functions plan their statements once per session, generically: left to the
--   plan cache, the fencing read with its EXISTS subqueries was planned again on every
--   call (a custom plan costs less than the generic one when the parameters are known),
--   and planning was a third of the call. That takes a SET clause, which 0015 removed for
--   what it costs (the setting saved and restored per call): far less than the planning
--   (server instructions per effect, callgrind: 1.48 M without it, 1.21 M with it);
-- - a model call or a read, whose kill switch the client looked at before it ran, is
--   recorded without a second look (p_check_halt false), as SQLStore.record_step does:
--   a halt set while it ran stops the next step, and the result already paid for is
--   kept. It used to come back with OL000 and take a transaction of its own.

-- The budget trigger, skipped where the transition function found nothing to count.
DROP TRIGGER IF EXISTS steps_count_insert ON steps;
DROP TRIGGER IF EXISTS steps_count_update ON steps;
CREATE TRIGGER steps_count_insert AFTER INSERT ON steps FOR EACH ROW
    WHEN (NEW.state <> 'failed'
          AND current_setting('oncelog.uncounted', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION oncelog_count_steps();
CREATE TRIGGER steps_count_update AFTER UPDATE OF state, tokens_in, tokens_out, cost,
    irreversible, started_at ON steps FOR EACH ROW
    WHEN (((OLD.state = 'failed') IS DISTINCT FROM (NEW.state = 'failed')
          OR (NEW.state <> 'failed' AND (
              OLD.tokens_in IS DISTINCT FROM NEW.tokens_in
              OR OLD.tokens_out IS DISTINCT FROM NEW.tokens_out
              OR OLD.cost IS DISTINCT FROM NEW.cost
              OR OLD.irreversible IS DISTINCT FROM NEW.irreversible
              OR OLD.started_at IS DISTINCT FROM NEW.started_at)))
          AND current_setting('oncelog.uncounted', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION oncelog_count_steps();

DROP FUNCTION IF EXISTS oncelog_intent(TEXT, TEXT, BIGINT, DOUBLE PRECISION, TEXT, INTEGER,
    TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, DOUBLE PRECISION, DOUBLE PRECISION, INTEGER,
    TEXT, TEXT);
DROP FUNCTION IF EXISTS oncelog_link(TEXT, TEXT, TEXT, DOUBLE PRECISION);

-- A time as json.dumps writes it, or NULL where PostgreSQL's text is not Python's (a
-- whole number gets ".0"; exponents are left to the client; a session writing floats
-- short, extra_float_digits <= 0, is left to the client whatever the number).
CREATE OR REPLACE FUNCTION oncelog_at_text(p_at DOUBLE PRECISION) RETURNS TEXT
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN current_setting('extra_float_digits')::integer <= 0 THEN NULL
        WHEN p_at::text ~ '^-?[0-9]+$' THEN p_at::text || '.0'
        WHEN p_at::text ~ '^-?[0-9]+\.[0-9]+$' THEN p_at::text END
$$;

-- SQLStore._begin_step for a new step without an approval or a run budget: its attempt
-- number, 1. With p_check_halt false (a model call or a read, recorded after it ran) the
-- kill switch is neither locked nor read.
CREATE OR REPLACE FUNCTION oncelog_intent(
    p_run_id TEXT, p_owner TEXT, p_token BIGINT, p_ttl DOUBLE PRECISION, p_agent TEXT,
    p_seq INTEGER, p_step_id TEXT, p_type TEXT, p_tool TEXT, p_kind TEXT, p_key TEXT,
    p_args_hash TEXT, p_args TEXT, p_elapsed DOUBLE PRECISION, p_cost DOUBLE PRECISION,
    p_irreversible INTEGER, p_data TEXT, p_chain_head TEXT, p_check_halt BOOLEAN)
    RETURNS INTEGER
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    held RECORD;
    now_at DOUBLE PRECISION;
    at DOUBLE PRECISION;
    at_text TEXT;
BEGIN
    IF p_check_halt THEN
        PERFORM pg_advisory_xact_lock_shared(1869505381, 2);
    END IF;
    -- _sql_tx.fence: the run's row locked until the commit. The halts are read in the
    -- same statement: none can be committed while the shared lock above is held.
    SELECT owner, fencing_token, lease_expires_at, budget IS NULL AS unbudgeted,
        (p_check_halt AND EXISTS (SELECT 1 FROM halts WHERE cleared_at IS NULL AND (
            (scope = 'global' AND target = '')
            OR (scope = 'agent' AND target = COALESCE(p_agent, ''))
            OR (scope = 'run' AND target = p_run_id))))
        OR (p_type = 'effect' AND p_agent IS NOT NULL
            AND EXISTS (SELECT 1 FROM agent_budgets WHERE agent = p_agent)) AS long_way
    INTO held FROM runs WHERE run_id = p_run_id FOR UPDATE;
    IF NOT FOUND OR held.owner IS DISTINCT FROM p_owner OR held.fencing_token != p_token THEN
        RAISE EXCEPTION 'fenced out' USING ERRCODE = 'OL001';
    END IF;
    IF held.long_way THEN
        RAISE EXCEPTION 'a halt or an agent budget' USING ERRCODE = 'OL000';
    END IF;
    now_at := date_part('epoch', clock_timestamp());
    IF held.lease_expires_at IS NULL OR held.lease_expires_at - now_at < p_ttl / 2 THEN
        UPDATE runs SET lease_expires_at = now_at + p_ttl WHERE run_id = p_run_id;
    END IF;
    IF held.unbudgeted THEN
        PERFORM set_config('oncelog.uncounted', 'on', true);
    END IF;
    INSERT INTO steps (run_id, seq, step_id, type, tool, kind, key, args_hash, args, state,
                       attempts, started_at, cost, irreversible)
    VALUES (p_run_id, p_seq, p_step_id, p_type, p_tool, p_kind, p_key, p_args_hash, p_args,
            'in_flight', 1, date_part('epoch', clock_timestamp()) - p_elapsed, p_cost,
            p_irreversible)
    RETURNING started_at INTO at;
    at_text := oncelog_at_text(at);
    IF at_text IS NULL THEN
        RAISE EXCEPTION 'time % is left to the client', at USING ERRCODE = 'OL000';
    END IF;
    -- _sql_tx.append: the journal's head read after its lock
    PERFORM pg_advisory_xact_lock(1869507180, hashtext(p_run_id));
    INSERT INTO journal (run_id, seq, event, data, at, hash)
    VALUES (p_run_id, p_seq, 'intent', p_data, at, encode(sha256(convert_to(COALESCE(
        (SELECT hash FROM journal WHERE run_id = p_run_id ORDER BY id DESC LIMIT 1),
        repeat('0', 64)) || p_chain_head || to_json(p_data)::text || ',' || at_text || ']',
        'UTF8')), 'hex'));
    RETURN 1;
END;
$$;

-- SQLStore.write_outcome's transaction (_end_step, not probed). Given the intent's call
-- as its attempt, the two make SQLStore.record_step's transaction in one statement. The
-- step is named by both its keys (see 0015).
CREATE OR REPLACE FUNCTION oncelog_outcome(
    p_run_id TEXT, p_owner TEXT, p_token BIGINT, p_ttl DOUBLE PRECISION, p_seq INTEGER,
    p_step_id TEXT, p_attempt INTEGER, p_state TEXT, p_result TEXT, p_error TEXT,
    p_tokens_in INTEGER, p_tokens_out INTEGER, p_cost DOUBLE PRECISION, p_retry_at DOUBLE PRECISION,
    p_data TEXT, p_chain_head TEXT) RETURNS void
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    held RECORD;
    now_at DOUBLE PRECISION;
    at_text TEXT;
BEGIN
    SELECT owner, fencing_token, lease_expires_at INTO held
    FROM runs WHERE run_id = p_run_id FOR UPDATE;
    IF NOT FOUND OR held.owner IS DISTINCT FROM p_owner OR held.fencing_token != p_token THEN
        RAISE EXCEPTION 'fenced out' USING ERRCODE = 'OL001';
    END IF;
    now_at := date_part('epoch', clock_timestamp());
    IF held.lease_expires_at IS NULL OR held.lease_expires_at - now_at < p_ttl / 2 THEN
        UPDATE runs SET lease_expires_at = now_at + p_ttl WHERE run_id = p_run_id;
    END IF;
    UPDATE steps SET state = p_state, result = p_result, error = p_error,
        tokens_in = p_tokens_in, tokens_out = p_tokens_out, cost = COALESCE(p_cost, cost),
        finished_at = date_part('epoch', clock_timestamp()), retry_at = p_retry_at
    WHERE run_id = p_run_id AND seq = p_seq AND step_id = p_step_id AND attempts = p_attempt
      AND state = 'in_flight';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the attempt is no longer in flight' USING ERRCODE = 'OL003';
    END IF;
    PERFORM pg_advisory_xact_lock(1869507180, hashtext(p_run_id));
    now_at := date_part('epoch', clock_timestamp());
    at_text := oncelog_at_text(now_at);
    IF at_text IS NULL THEN
        RAISE EXCEPTION 'time % is left to the client', now_at USING ERRCODE = 'OL000';
    END IF;
    INSERT INTO journal (run_id, seq, event, data, at, hash)
    VALUES (p_run_id, p_seq, 'outcome', p_data, now_at, encode(sha256(convert_to(COALESCE(
        (SELECT hash FROM journal WHERE run_id = p_run_id ORDER BY id DESC LIMIT 1),
        repeat('0', 64)) || p_chain_head || to_json(p_data)::text || ',' || at_text || ']',
        'UTF8')), 'hex'));
END;
$$;
