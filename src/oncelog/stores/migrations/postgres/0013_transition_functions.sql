-- An intent and an outcome, each in one round trip (_postgres_transitions): one call,
-- in autocommit, so the call is its own transaction. Each does what the transaction of
-- _sql_store does, with the same locks in the same order (_sql_tx): the kill switch
-- (shared, intents only), the run's row (the fencing check, the lease extended once half
-- used), the step's row, then the run's journal (its head read after the lock, so it is
-- the head the previous holder committed; a VOLATILE function takes a snapshot per
-- statement). The journal hash is _chain.link: the client sends the canonical record up to
-- its data ("chain head"); the data and the time are only known here.
--
-- The functions do the common case only: a new step's intent, an outcome. A restarted
-- step, an approval or a run budget never comes here (the client knows); whatever else
-- needs the store's Python logic (a halt that is on, an agent with a daily budget, a time
-- whose text is not Python's) raises
-- SQLSTATE OL000, which rolls the call back whole, and the client runs the transaction of
-- _sql_store instead, which raises what it always raised. OL001: fenced out (another
-- owner or token); OL003: an outcome whose attempt is no longer in flight; a unique
-- violation: a step id already recorded at another position. Every CREATE is OR REPLACE: a later migration may
-- redefine them.

-- A time as Python's json.dumps writes it (_chain.canonical), or OL000. With
-- extra_float_digits > 0 (set on the callers) PostgreSQL writes the shortest text that
-- reads back exactly, as Python's repr does; Python adds ".0" to a whole number and uses
-- exponents in other ranges than PostgreSQL, so those are left to the client.
CREATE OR REPLACE FUNCTION oncelog_time_text(t DOUBLE PRECISION) RETURNS TEXT
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    written TEXT := t::text;
BEGIN
    IF written ~ '^-?[0-9]+$' THEN
        RETURN written || '.0';
    ELSIF written ~ '^-?[0-9]+\.[0-9]+$' THEN
        RETURN written;
    END IF;
    RAISE EXCEPTION 'time % is left to the client', written USING ERRCODE = 'OL000';
END;
$$;

-- The fencing check of _sql_tx.fence: the run's row locked until the commit, OL001 for a
-- stale owner, the lease extended once half of it is used.
CREATE OR REPLACE FUNCTION oncelog_fence(p_run_id TEXT, p_owner TEXT, p_token BIGINT,
                                         p_ttl DOUBLE PRECISION) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    held RECORD;
BEGIN
    SELECT owner, fencing_token, lease_expires_at - date_part('epoch', clock_timestamp())
        AS remaining
    INTO held FROM runs WHERE run_id = p_run_id FOR UPDATE;
    IF NOT FOUND OR held.owner IS DISTINCT FROM p_owner OR held.fencing_token != p_token THEN
        RAISE EXCEPTION 'fenced out' USING ERRCODE = 'OL001';
    END IF;
    IF held.remaining IS NULL OR held.remaining < p_ttl / 2 THEN
        UPDATE runs SET lease_expires_at = date_part('epoch', clock_timestamp()) + p_ttl
        WHERE run_id = p_run_id;
    END IF;
END;
$$;

-- _sql_tx.append; ``p_at`` NULL: now. The canonical record is the client's head, then
-- the data as a JSON string (to_json escapes as Python's json.dumps does: the same
-- characters, the same lowercase \u00XX), then the time.
CREATE OR REPLACE FUNCTION oncelog_append(p_run_id TEXT, p_seq INTEGER, p_event TEXT,
                                          p_data TEXT, p_at DOUBLE PRECISION,
                                          p_chain_head TEXT) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    previous TEXT;
    at DOUBLE PRECISION;
BEGIN
    PERFORM pg_advisory_xact_lock(1869507180, hashtext(p_run_id));
    SELECT hash INTO previous FROM journal WHERE run_id = p_run_id ORDER BY id DESC LIMIT 1;
    at := COALESCE(p_at, date_part('epoch', clock_timestamp()));
    INSERT INTO journal (run_id, seq, event, data, at, hash) VALUES (
        p_run_id, p_seq, p_event, p_data, at,
        encode(sha256(convert_to(COALESCE(previous, repeat('0', 64)) || p_chain_head
                                 || to_json(p_data)::text || ',' || oncelog_time_text(at)
                                 || ']', 'UTF8')), 'hex'));
END;
$$;

-- SQLStore._begin_step for a new step without an approval or a run budget: its attempt
-- number, 1.
CREATE OR REPLACE FUNCTION oncelog_intent(
    p_run_id TEXT, p_owner TEXT, p_token BIGINT, p_ttl DOUBLE PRECISION, p_agent TEXT,
    p_seq INTEGER, p_step_id TEXT, p_type TEXT, p_tool TEXT, p_kind TEXT, p_key TEXT,
    p_args_hash TEXT, p_args TEXT, p_elapsed DOUBLE PRECISION, p_cost DOUBLE PRECISION,
    p_irreversible INTEGER, p_data TEXT, p_chain_head TEXT) RETURNS INTEGER
LANGUAGE plpgsql SET extra_float_digits = 1 AS $$
DECLARE
    at DOUBLE PRECISION;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1869505381, 2);
    PERFORM oncelog_fence(p_run_id, p_owner, p_token, p_ttl);
    IF EXISTS (SELECT 1 FROM halts WHERE cleared_at IS NULL AND (
            (scope = 'global' AND target = '')
            OR (scope = 'agent' AND target = COALESCE(p_agent, ''))
            OR (scope = 'run' AND target = p_run_id)))
       OR (p_type = 'effect' AND p_agent IS NOT NULL
           AND EXISTS (SELECT 1 FROM agent_budgets WHERE agent = p_agent)) THEN
        RAISE EXCEPTION 'a halt or an agent budget' USING ERRCODE = 'OL000';
    END IF;
    INSERT INTO steps (run_id, seq, step_id, type, tool, kind, key, args_hash, args, state,
                       attempts, started_at, cost, irreversible)
    VALUES (p_run_id, p_seq, p_step_id, p_type, p_tool, p_kind, p_key, p_args_hash, p_args,
            'in_flight', 1, date_part('epoch', clock_timestamp()) - p_elapsed, p_cost,
            p_irreversible)
    RETURNING started_at INTO at;
    PERFORM oncelog_append(p_run_id, p_seq, 'intent', p_data, at, p_chain_head);
    RETURN 1;
END;
$$;

-- SQLStore.write_outcome's transaction (_end_step, not probed). Given the intent's call
-- as its attempt, the two make SQLStore.record_step's transaction in one statement. The
-- step is named by both its keys: on a table whose statistics are stale (a new ledger)
-- the planner may take either unique index for the generic plan, and with only the run
-- in the other's condition it scans every step of the run.
CREATE OR REPLACE FUNCTION oncelog_outcome(
    p_run_id TEXT, p_owner TEXT, p_token BIGINT, p_ttl DOUBLE PRECISION, p_seq INTEGER,
    p_step_id TEXT, p_attempt INTEGER, p_state TEXT, p_result TEXT, p_error TEXT, p_tokens_in INTEGER,
    p_tokens_out INTEGER, p_cost DOUBLE PRECISION, p_retry_at DOUBLE PRECISION,
    p_data TEXT, p_chain_head TEXT) RETURNS void
LANGUAGE plpgsql SET extra_float_digits = 1 AS $$
BEGIN
    PERFORM oncelog_fence(p_run_id, p_owner, p_token, p_ttl);
    UPDATE steps SET state = p_state, result = p_result, error = p_error,
        tokens_in = p_tokens_in, tokens_out = p_tokens_out, cost = COALESCE(p_cost, cost),
        finished_at = date_part('epoch', clock_timestamp()), retry_at = p_retry_at
    WHERE run_id = p_run_id AND seq = p_seq AND step_id = p_step_id AND attempts = p_attempt
      AND state = 'in_flight';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the attempt is no longer in flight' USING ERRCODE = 'OL003';
    END IF;
    PERFORM oncelog_append(p_run_id, p_seq, 'outcome', p_data, NULL, p_chain_head);
END;
$$;
