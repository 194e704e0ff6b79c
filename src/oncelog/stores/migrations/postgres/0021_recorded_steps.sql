-- A step recorded after it ran (a model call, a read: SQLStore.record_step) is one
-- journal record, "recorded", where it was two: an intent and an outcome written in the
-- same transaction. A step recorded after it ran has no moment between its intent and its
-- outcome, so the intent said nothing the outcome did not; its record cost about a third
-- of the record's work. The record carries the fields of both (_shared.recorded_json),
-- its time is the row's start, and verify replays it as the intent followed by the
-- outcome. oncelog_intent and oncelog_outcome stay: effects use them, and a process of the
-- previous version may still record a model call as the pair, which verifies as before.
-- Every statement may run again (a test re-applies the later migrations).
--
-- SQLStore.record_step for a new step without an approval or a run budget, in one call:
-- oncelog_intent's locks and checks in its order (the run's row, then the run's journal;
-- the kill switch neither locked nor read: the client looked at it before the call ran,
-- as with p_check_halt false), the row written as it ended, started p_elapsed before now
-- and finished now, and one journal record timed by that start, hashed as the intent's
-- was. The budget trigger is skipped in a run without a budget, as the intent's does;
-- where it fires, the row counts what the intent's insert and the outcome's update
-- counted together (a failed step nothing).
CREATE OR REPLACE FUNCTION oncelog_recorded(
    p_run_id TEXT, p_owner TEXT, p_token BIGINT, p_ttl DOUBLE PRECISION, p_agent TEXT,
    p_seq INTEGER, p_step_id TEXT, p_type TEXT, p_tool TEXT, p_kind TEXT, p_key TEXT,
    p_args_hash TEXT, p_args TEXT, p_elapsed DOUBLE PRECISION, p_cost DOUBLE PRECISION,
    p_irreversible INTEGER, p_state TEXT, p_result TEXT, p_error TEXT, p_tokens_in INTEGER,
    p_tokens_out INTEGER, p_settled_cost DOUBLE PRECISION, p_retry_at DOUBLE PRECISION,
    p_data TEXT, p_chain_head TEXT) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    held RECORD;
    now_at DOUBLE PRECISION;
    at DOUBLE PRECISION;
    at_text TEXT;
BEGIN
    -- _sql_tx.fence: the run's row locked until the commit; an effect of an agent with a
    -- daily budget goes the transaction's way, as with oncelog_intent.
    SELECT owner, fencing_token, lease_expires_at,
        CASE WHEN budget IS NULL THEN set_config('oncelog.uncounted', 'on', true) END AS uncounted,
        (p_type = 'effect' AND p_agent IS NOT NULL
            AND EXISTS (SELECT 1 FROM agent_budgets WHERE agent = p_agent)) AS long_way
    INTO held FROM runs WHERE run_id = p_run_id FOR UPDATE;
    IF NOT FOUND OR held.owner IS DISTINCT FROM p_owner OR held.fencing_token != p_token THEN
        RAISE EXCEPTION 'fenced out' USING ERRCODE = 'OL001';
    END IF;
    IF held.long_way THEN
        RAISE EXCEPTION 'an agent budget' USING ERRCODE = 'OL000';
    END IF;
    now_at := date_part('epoch', clock_timestamp());
    IF held.lease_expires_at IS NULL OR held.lease_expires_at - now_at < p_ttl / 2 THEN
        UPDATE runs SET lease_expires_at = now_at + p_ttl WHERE run_id = p_run_id;
    END IF;
    at := now_at - p_elapsed;
    at_text := oncelog_at_text(at);
    IF at_text IS NULL THEN
        RAISE EXCEPTION 'time % is left to the client', at USING ERRCODE = 'OL000';
    END IF;
    INSERT INTO steps (run_id, seq, step_id, type, tool, kind, key, args_hash, args, result,
                       error, state, attempts, tokens_in, tokens_out, started_at, finished_at,
                       cost, irreversible, retry_at)
    VALUES (p_run_id, p_seq, p_step_id, p_type, p_tool, p_kind, p_key, p_args_hash, p_args,
            p_result, p_error, p_state, 1, p_tokens_in, p_tokens_out, at, now_at,
            COALESCE(p_settled_cost, p_cost), p_irreversible, p_retry_at);
    -- _sql_tx.append: the journal's head read after its lock
    PERFORM pg_advisory_xact_lock(1869507180, hashtext(p_run_id));
    INSERT INTO journal (run_id, seq, event, data, at, hash)
    VALUES (p_run_id, p_seq, 'recorded', p_data, at, encode(sha256(convert_to(COALESCE(
        (SELECT hash FROM journal WHERE run_id = p_run_id ORDER BY id DESC LIMIT 1),
        repeat('0', 64)) || p_chain_head || to_json(p_data)::text || ',' || at_text || ']',
        'UTF8')), 'hex'));
END;
$$;
