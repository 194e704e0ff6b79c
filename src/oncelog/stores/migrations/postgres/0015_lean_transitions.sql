-- Less work on the server for each intent and outcome (issue 15.3, second pass). Every
-- statement may run again (a test re-applies the later migrations).
--
-- The budget trigger of 0009 ran a plpgsql function with the whole row on every write of
-- a step, twice for an UPDATE (take away the old version, add the new). Most writes change
-- nothing it counts: an outcome of a step that cost nothing moves it from in_flight to
-- done, both counted alike. The trigger now fires on an UPDATE only when what it counts
-- changes (a step entering or leaving 'failed', its tokens, cost, irreversibility, or the
-- day it started, which names its agent's day), and on an INSERT only for a step that
-- counts. When it fires it adds what the new version counts and takes away what the old
-- one counted, as before, in the trigger's own body: the nested call with a whole row per
-- version cost more than the statements it ran.
CREATE OR REPLACE FUNCTION oncelog_count_steps() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    was INTEGER := 0;  -- 1: the old version counted
    now_counts INTEGER := (NEW.state <> 'failed')::integer;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        was := (OLD.state <> 'failed')::integer;
    END IF;
    UPDATE runs SET used_steps = used_steps + now_counts - was,
        used_tokens = used_tokens + now_counts * (NEW.tokens_in + NEW.tokens_out)
            - CASE WHEN was = 1 THEN OLD.tokens_in + OLD.tokens_out ELSE 0 END,
        used_cost = used_cost + now_counts * NEW.cost - CASE WHEN was = 1 THEN OLD.cost ELSE 0 END,
        used_irreversible = used_irreversible + now_counts * NEW.irreversible
            - CASE WHEN was = 1 THEN OLD.irreversible ELSE 0 END
    WHERE run_id = NEW.run_id AND budget IS NOT NULL;
    IF NEW.type <> 'effect' THEN
        RETURN NULL;
    END IF;
    IF was = 1 THEN
        UPDATE agent_usage SET calls = calls - 1, cost = cost - OLD.cost,
            irreversible = irreversible - OLD.irreversible
        WHERE agent = (SELECT agent FROM runs WHERE run_id = OLD.run_id)
          AND day = floor(OLD.started_at / 86400) * 86400;
    END IF;
    IF now_counts = 1 THEN
        INSERT INTO agent_usage AS u (agent, day, calls, cost, irreversible)
        SELECT runs.agent, floor(NEW.started_at / 86400) * 86400, 1, NEW.cost, NEW.irreversible
        FROM runs JOIN agent_budgets ON agent_budgets.agent = runs.agent
        WHERE runs.run_id = NEW.run_id
        ON CONFLICT (agent, day) DO UPDATE SET calls = u.calls + 1,
            cost = u.cost + excluded.cost, irreversible = u.irreversible + excluded.irreversible;
    END IF;
    RETURN NULL;
END;
$$;
DROP FUNCTION IF EXISTS oncelog_count_step(steps, INTEGER);
DROP TRIGGER IF EXISTS steps_count ON steps;
DROP TRIGGER IF EXISTS steps_count_insert ON steps;
DROP TRIGGER IF EXISTS steps_count_update ON steps;
CREATE TRIGGER steps_count_insert AFTER INSERT ON steps FOR EACH ROW
    WHEN (NEW.state <> 'failed') EXECUTE FUNCTION oncelog_count_steps();
CREATE TRIGGER steps_count_update AFTER UPDATE OF state, tokens_in, tokens_out, cost,
    irreversible, started_at ON steps FOR EACH ROW
    WHEN ((OLD.state = 'failed') IS DISTINCT FROM (NEW.state = 'failed')
          OR (NEW.state <> 'failed' AND (
              OLD.tokens_in IS DISTINCT FROM NEW.tokens_in
              OR OLD.tokens_out IS DISTINCT FROM NEW.tokens_out
              OR OLD.cost IS DISTINCT FROM NEW.cost
              OR OLD.irreversible IS DISTINCT FROM NEW.irreversible
              OR OLD.started_at IS DISTINCT FROM NEW.started_at)))
    EXECUTE FUNCTION oncelog_count_steps();


-- The transition functions of 0013 with their parts written out in their bodies: each
-- nested call (the fencing check, the append, the time's text) was a statement of its own
-- in the caller, with a plpgsql frame set up per call. Same locks in the same order, the
-- same refusals. No SET clause: a SET on a function saves and restores the setting on
-- every call. Every connection of the store sets extra_float_digits
-- (_postgres_settings.session_settings); any value above 0 writes a float as the shortest
-- text that reads back exactly, as Python's repr does, and a session that set it lower
-- gets OL000 and the client's way, never a wrong hash.
DROP FUNCTION IF EXISTS oncelog_intent(TEXT, TEXT, BIGINT, DOUBLE PRECISION, TEXT, INTEGER,
    TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, DOUBLE PRECISION, DOUBLE PRECISION, INTEGER,
    TEXT, TEXT);
DROP FUNCTION IF EXISTS oncelog_outcome(TEXT, TEXT, BIGINT, DOUBLE PRECISION, INTEGER, TEXT,
    INTEGER, TEXT, TEXT, TEXT, INTEGER, INTEGER, DOUBLE PRECISION, DOUBLE PRECISION, TEXT,
    TEXT);
DROP FUNCTION IF EXISTS oncelog_fence(TEXT, TEXT, BIGINT, DOUBLE PRECISION);
DROP FUNCTION IF EXISTS oncelog_append(TEXT, INTEGER, TEXT, TEXT, DOUBLE PRECISION, TEXT);
DROP FUNCTION IF EXISTS oncelog_time_text(DOUBLE PRECISION);

-- The journal's hash of _chain.link: the previous hash, the client's head of the canonical
-- record, the data as a JSON string (to_json escapes as Python's json.dumps does), the
-- time as json.dumps writes it: NULL when PostgreSQL's text is not Python's (a whole
-- number gets ".0"; exponents are left to the client).
CREATE OR REPLACE FUNCTION oncelog_link(p_previous TEXT, p_chain_head TEXT, p_data TEXT,
                             p_at DOUBLE PRECISION) RETURNS TEXT
LANGUAGE sql STABLE AS $$
    SELECT encode(sha256(convert_to(COALESCE(p_previous, repeat('0', 64)) || p_chain_head
        || to_json(p_data)::text || ',' || CASE
            WHEN current_setting('extra_float_digits')::integer <= 0 THEN NULL
            WHEN p_at::text ~ '^-?[0-9]+$' THEN p_at::text || '.0'
            WHEN p_at::text ~ '^-?[0-9]+\.[0-9]+$' THEN p_at::text END
        || ']', 'UTF8')), 'hex')
$$;

-- SQLStore._begin_step for a new step without an approval or a run budget: its attempt
-- number, 1.
CREATE OR REPLACE FUNCTION oncelog_intent(
    p_run_id TEXT, p_owner TEXT, p_token BIGINT, p_ttl DOUBLE PRECISION, p_agent TEXT,
    p_seq INTEGER, p_step_id TEXT, p_type TEXT, p_tool TEXT, p_kind TEXT, p_key TEXT,
    p_args_hash TEXT, p_args TEXT, p_elapsed DOUBLE PRECISION, p_cost DOUBLE PRECISION,
    p_irreversible INTEGER, p_data TEXT, p_chain_head TEXT) RETURNS INTEGER
LANGUAGE plpgsql AS $$
DECLARE
    held RECORD;
    now_at DOUBLE PRECISION;
    at DOUBLE PRECISION;
    previous TEXT;
    linked TEXT;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1869505381, 2);
    -- _sql_tx.fence: the run's row locked until the commit, the lease extended once half used
    SELECT owner, fencing_token, lease_expires_at INTO held
    FROM runs WHERE run_id = p_run_id FOR UPDATE;
    IF NOT FOUND OR held.owner IS DISTINCT FROM p_owner OR held.fencing_token != p_token THEN
        RAISE EXCEPTION 'fenced out' USING ERRCODE = 'OL001';
    END IF;
    now_at := date_part('epoch', clock_timestamp());
    IF held.lease_expires_at IS NULL OR held.lease_expires_at - now_at < p_ttl / 2 THEN
        UPDATE runs SET lease_expires_at = now_at + p_ttl WHERE run_id = p_run_id;
    END IF;
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
    -- _sql_tx.append: the journal's head read after its lock
    PERFORM pg_advisory_xact_lock(1869507180, hashtext(p_run_id));
    SELECT hash INTO previous FROM journal WHERE run_id = p_run_id ORDER BY id DESC LIMIT 1;
    linked := oncelog_link(previous, p_chain_head, p_data, at);
    IF linked IS NULL THEN
        RAISE EXCEPTION 'time % is left to the client', at USING ERRCODE = 'OL000';
    END IF;
    INSERT INTO journal (run_id, seq, event, data, at, hash)
    VALUES (p_run_id, p_seq, 'intent', p_data, at, linked);
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
    p_step_id TEXT, p_attempt INTEGER, p_state TEXT, p_result TEXT, p_error TEXT,
    p_tokens_in INTEGER, p_tokens_out INTEGER, p_cost DOUBLE PRECISION, p_retry_at DOUBLE PRECISION,
    p_data TEXT, p_chain_head TEXT) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    held RECORD;
    now_at DOUBLE PRECISION;
    previous TEXT;
    linked TEXT;
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
    SELECT hash INTO previous FROM journal WHERE run_id = p_run_id ORDER BY id DESC LIMIT 1;
    now_at := date_part('epoch', clock_timestamp());
    linked := oncelog_link(previous, p_chain_head, p_data, now_at);
    IF linked IS NULL THEN
        RAISE EXCEPTION 'time % is left to the client', now_at USING ERRCODE = 'OL000';
    END IF;
    INSERT INTO journal (run_id, seq, event, data, at, hash)
    VALUES (p_run_id, p_seq, 'outcome', p_data, now_at, linked);
END;
$$;
