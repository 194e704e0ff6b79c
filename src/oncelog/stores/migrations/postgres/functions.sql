-- The PostgreSQL server functions, the one live definition of each: applied after the
-- numbered migrations by every migration run that applies one (a new ledger included),
-- in the same transaction (_postgres_migrate). Every statement is CREATE OR REPLACE and
-- may run again. The transition functions (intent, outcome, recorded) are defined here
-- only: the migrations that wrote them (13, 15, 16, 18, 21, 22) keep only why. The
-- trigger functions and oncelog_server_life keep their earlier copies in the migrations
-- that made them, as a later migration's triggers and statements run against them before
-- this file is applied; whatever they left, this file replaces. A change here reaches an
-- existing ledger at its next open: _sql_guards.functions appends
-- oncelog_functions_version(), a digest of this text, and an open that finds another
-- applies the file again (_postgres_migrate._refresh_functions).
--
-- The states a transition may leave from and go to are not written here: a write's
-- name and "leaves" in double braces (its guard: "state = ..." or "state IN (...)"), or
-- its name and "enters" (the one state it writes), is filled in from the transition
-- table, records/_transitions.py, by stores/_sql_guards.functions, as in both stores'
-- SQL.
--
-- The transition functions (_postgres_transitions calls them) do what SQLStore's
-- transaction does, with the same locks in the same order (_sql_tx): the kill switch
-- (shared, intents only), the run's row (the fencing check, the lease extended once half
-- used), the step's row, then the run's journal (its head read after the lock). The
-- journal hash is _chain.link (rule 2): the client sends the record's head up to its time
-- ("chain head"); the time is only known here, and the data is hashed as it is stored,
-- after the head, never quoted again (rule 1 quoted it, to_json(p_data)). SQLSTATE OL000
-- hands the call back to SQLStore's transaction (rolled back whole); OL001: fenced out;
-- OL003: an outcome whose attempt is no longer in flight. Why each is written as it is: migrations
-- 13, 15, 16, 18 and 22.

-- Append-only, as an extra layer under the chain (the triggers of migrations 7 and 8).
CREATE OR REPLACE FUNCTION oncelog_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the oncelog % table is append-only', TG_TABLE_NAME;
END;
$$;

-- The budget totals (runs.used_*, agent_usage), kept by the steps triggers: nothing where
-- the writer said there is nothing to count (oncelog.uncounted, migrations 16, 18, 22).
CREATE OR REPLACE FUNCTION oncelog_count_steps() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    was INTEGER := 0;  -- 1: the old version counted
    now_counts INTEGER := (NEW.state <> 'failed')::integer;
BEGIN
    IF current_setting('oncelog.uncounted', true) = 'on' THEN
        RETURN NULL;  -- the writer found nothing to count (the triggers' WHEN until 0022)
    END IF;
    IF TG_OP = 'INSERT' AND NEW.state = 'failed' THEN
        RETURN NULL;  -- the INSERT trigger's WHEN until 0018: a failed step counts nothing
    END IF;
    IF TG_OP = 'UPDATE' THEN
        -- What the trigger's WHEN said until 0018: nothing it counts changed.
        IF (OLD.state = 'failed') IS NOT DISTINCT FROM (NEW.state = 'failed')
           AND (NEW.state = 'failed' OR (
               OLD.tokens_in IS NOT DISTINCT FROM NEW.tokens_in
               AND OLD.tokens_out IS NOT DISTINCT FROM NEW.tokens_out
               AND OLD.cost IS NOT DISTINCT FROM NEW.cost
               AND OLD.irreversible IS NOT DISTINCT FROM NEW.irreversible
               AND OLD.started_at IS NOT DISTINCT FROM NEW.started_at)) THEN
            RETURN NULL;
        END IF;
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


-- SQLStore._begin_step for a new step without an approval, a run budget or a subject: its
-- first attempt. With p_check_halt false the kill switch is neither locked nor read.
-- p_after: the id of a journal record of the run the caller appended last (NULL: none),
-- from which the chain's head is looked for; returns the id of the record it appends.
CREATE OR REPLACE FUNCTION oncelog_intent(
    p_run_id TEXT, p_owner TEXT, p_token BIGINT, p_ttl DOUBLE PRECISION, p_agent TEXT,
    p_seq INTEGER, p_step_id TEXT, p_type TEXT, p_tool TEXT, p_kind TEXT, p_key TEXT,
    p_args_hash TEXT, p_args TEXT, p_elapsed DOUBLE PRECISION, p_cost DOUBLE PRECISION,
    p_irreversible INTEGER, p_data TEXT, p_chain_head TEXT, p_check_halt BOOLEAN,
    p_after BIGINT) RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    held RECORD;
    now_at DOUBLE PRECISION;
    at DOUBLE PRECISION;
    locked TEXT;  -- what a lock's assignment leaves (nothing)
    appended BIGINT;
    chained TEXT;
BEGIN
    IF p_check_halt THEN
        locked := pg_advisory_xact_lock_shared(1869505381, 2);
    END IF;
    -- _sql_tx.fence: the run's row locked until the commit. The halts are read in the
    -- same statement: none can be committed while the shared lock above is held. In a run
    -- without a budget the budget trigger has nothing to count.
    SELECT owner, fencing_token, lease_expires_at,
        CASE WHEN budget IS NULL THEN set_config('oncelog.uncounted', 'on', true) END AS uncounted,
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
    INSERT INTO steps (run_id, seq, step_id, type, tool, kind, key, args_hash, args, state,
                       attempts, started_at, cost, irreversible)
    VALUES (p_run_id, p_seq, p_step_id, p_type, p_tool, p_kind, p_key, p_args_hash, p_args,
            {{ intent.enters }}, 1, date_part('epoch', clock_timestamp()) - p_elapsed, p_cost,
            p_irreversible)
    RETURNING started_at INTO at;
    -- _sql_tx.append: the journal's head read after its lock
    locked := pg_advisory_xact_lock(1869507180, hashtext(p_run_id));
    INSERT INTO journal (run_id, seq, event, data, at, hash)
    VALUES (p_run_id, p_seq, 'intent', p_data, at, encode(sha256(convert_to(
        (SELECT COALESCE(hash, repeat('0', 64)) FROM journal
         WHERE run_id = p_run_id AND id >= COALESCE(p_after, 0) ORDER BY id DESC LIMIT 1)
        || p_chain_head || oncelog_at_text(at) || ']' || p_data,
        'UTF8')), 'hex'))
    RETURNING id, hash INTO appended, chained;
    IF chained IS NULL THEN
        RAISE EXCEPTION 'time % is left to the client, or no record of the run from %',
            at, p_after USING ERRCODE = 'OL000';
    END IF;
    RETURN appended;
END;
$$;


-- SQLStore.write_outcome's transaction (_end_step, not probed).
CREATE OR REPLACE FUNCTION oncelog_outcome(
    p_run_id TEXT, p_owner TEXT, p_token BIGINT, p_ttl DOUBLE PRECISION, p_seq INTEGER,
    p_step_id TEXT, p_attempt INTEGER, p_state TEXT, p_result TEXT, p_error TEXT,
    p_tokens_in INTEGER, p_tokens_out INTEGER, p_cost DOUBLE PRECISION, p_retry_at DOUBLE PRECISION,
    p_data TEXT, p_chain_head TEXT, p_after BIGINT) RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    held RECORD;
    now_at DOUBLE PRECISION;
    locked TEXT;  -- what a lock's assignment leaves (nothing)
    appended BIGINT;
    chained TEXT;
BEGIN
    -- The fencing read says too whether the budget trigger has anything to count: not in
    -- a run without a budget, for a step neither failed nor costed here, whose agent's
    -- day (calls, cost, irreversible) it leaves as it was.
    SELECT owner, fencing_token, lease_expires_at,
        CASE WHEN budget IS NULL AND p_state <> 'failed' AND p_cost IS NULL
             THEN set_config('oncelog.uncounted', 'on', true) END AS uncounted
    INTO held FROM runs WHERE run_id = p_run_id FOR UPDATE;
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
      AND {{ outcome.leaves }};
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the attempt is no longer in flight' USING ERRCODE = 'OL003';
    END IF;
    locked := pg_advisory_xact_lock(1869507180, hashtext(p_run_id));
    now_at := date_part('epoch', clock_timestamp());
    INSERT INTO journal (run_id, seq, event, data, at, hash)
    VALUES (p_run_id, p_seq, 'outcome', p_data, now_at, encode(sha256(convert_to(
        (SELECT COALESCE(hash, repeat('0', 64)) FROM journal
         WHERE run_id = p_run_id AND id >= COALESCE(p_after, 0) ORDER BY id DESC LIMIT 1)
        || p_chain_head || oncelog_at_text(now_at) || ']' || p_data,
        'UTF8')), 'hex'))
    RETURNING id, hash INTO appended, chained;
    IF chained IS NULL THEN
        RAISE EXCEPTION 'time % is left to the client, or no record of the run from %',
            now_at, p_after USING ERRCODE = 'OL000';
    END IF;
    RETURN appended;
END;
$$;


-- SQLStore.record_step for a new step without an approval or a run budget, in one call:
-- a model call or a read, its row written as it ended, one "recorded" journal record.
CREATE OR REPLACE FUNCTION oncelog_recorded(
    p_run_id TEXT, p_owner TEXT, p_token BIGINT, p_ttl DOUBLE PRECISION, p_agent TEXT,
    p_seq INTEGER, p_step_id TEXT, p_type TEXT, p_tool TEXT, p_kind TEXT, p_key TEXT,
    p_args_hash TEXT, p_args TEXT, p_elapsed DOUBLE PRECISION, p_cost DOUBLE PRECISION,
    p_irreversible INTEGER, p_state TEXT, p_result TEXT, p_error TEXT, p_tokens_in INTEGER,
    p_tokens_out INTEGER, p_settled_cost DOUBLE PRECISION, p_retry_at DOUBLE PRECISION,
    p_data TEXT, p_chain_head TEXT, p_after BIGINT) RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    held RECORD;
    now_at DOUBLE PRECISION;
    at DOUBLE PRECISION;
    locked TEXT;  -- what a lock's assignment leaves (nothing)
    appended BIGINT;
    chained TEXT;
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
    INSERT INTO steps (run_id, seq, step_id, type, tool, kind, key, args_hash, args, result,
                       error, state, attempts, tokens_in, tokens_out, started_at, finished_at,
                       cost, irreversible, retry_at)
    VALUES (p_run_id, p_seq, p_step_id, p_type, p_tool, p_kind, p_key, p_args_hash, p_args,
            p_result, p_error, p_state, 1, p_tokens_in, p_tokens_out, at, now_at,
            COALESCE(p_settled_cost, p_cost), p_irreversible, p_retry_at);
    -- _sql_tx.append: the journal's head read after its lock
    locked := pg_advisory_xact_lock(1869507180, hashtext(p_run_id));
    INSERT INTO journal (run_id, seq, event, data, at, hash)
    VALUES (p_run_id, p_seq, 'recorded', p_data, at, encode(sha256(convert_to(
        (SELECT COALESCE(hash, repeat('0', 64)) FROM journal
         WHERE run_id = p_run_id AND id >= COALESCE(p_after, 0) ORDER BY id DESC LIMIT 1)
        || p_chain_head || oncelog_at_text(at) || ']' || p_data,
        'UTF8')), 'hex'))
    RETURNING id, hash INTO appended, chained;
    IF chained IS NULL THEN
        RAISE EXCEPTION 'time % is left to the client, or no record of the run from %',
            at, p_after USING ERRCODE = 'OL000';
    END IF;
    RETURN appended;
END;
$$;


-- The same three as a process of the previous version calls them (without p_after; the
-- intent returning its attempt, 1): what this version's do, the chain's head looked for
-- from the run's first record.
CREATE OR REPLACE FUNCTION oncelog_intent(
    p_run_id TEXT, p_owner TEXT, p_token BIGINT, p_ttl DOUBLE PRECISION, p_agent TEXT,
    p_seq INTEGER, p_step_id TEXT, p_type TEXT, p_tool TEXT, p_kind TEXT, p_key TEXT,
    p_args_hash TEXT, p_args TEXT, p_elapsed DOUBLE PRECISION, p_cost DOUBLE PRECISION,
    p_irreversible INTEGER, p_data TEXT, p_chain_head TEXT, p_check_halt BOOLEAN)
    RETURNS INTEGER
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM oncelog_intent(p_run_id, p_owner, p_token, p_ttl, p_agent, p_seq, p_step_id,
        p_type, p_tool, p_kind, p_key, p_args_hash, p_args, p_elapsed, p_cost,
        p_irreversible, p_data, p_chain_head, p_check_halt, NULL::BIGINT);
    RETURN 1;
END;
$$;

CREATE OR REPLACE FUNCTION oncelog_outcome(
    p_run_id TEXT, p_owner TEXT, p_token BIGINT, p_ttl DOUBLE PRECISION, p_seq INTEGER,
    p_step_id TEXT, p_attempt INTEGER, p_state TEXT, p_result TEXT, p_error TEXT,
    p_tokens_in INTEGER, p_tokens_out INTEGER, p_cost DOUBLE PRECISION, p_retry_at DOUBLE PRECISION,
    p_data TEXT, p_chain_head TEXT) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM oncelog_outcome(p_run_id, p_owner, p_token, p_ttl, p_seq, p_step_id, p_attempt,
        p_state, p_result, p_error, p_tokens_in, p_tokens_out, p_cost, p_retry_at, p_data,
        p_chain_head, NULL::BIGINT);
END;
$$;

CREATE OR REPLACE FUNCTION oncelog_recorded(
    p_run_id TEXT, p_owner TEXT, p_token BIGINT, p_ttl DOUBLE PRECISION, p_agent TEXT,
    p_seq INTEGER, p_step_id TEXT, p_type TEXT, p_tool TEXT, p_kind TEXT, p_key TEXT,
    p_args_hash TEXT, p_args TEXT, p_elapsed DOUBLE PRECISION, p_cost DOUBLE PRECISION,
    p_irreversible INTEGER, p_state TEXT, p_result TEXT, p_error TEXT, p_tokens_in INTEGER,
    p_tokens_out INTEGER, p_settled_cost DOUBLE PRECISION, p_retry_at DOUBLE PRECISION,
    p_data TEXT, p_chain_head TEXT) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM oncelog_recorded(p_run_id, p_owner, p_token, p_ttl, p_agent, p_seq, p_step_id,
        p_type, p_tool, p_kind, p_key, p_args_hash, p_args, p_elapsed, p_cost,
        p_irreversible, p_state, p_result, p_error, p_tokens_in, p_tokens_out,
        p_settled_cost, p_retry_at, p_data, p_chain_head, NULL::BIGINT);
END;
$$;

-- A kill switch set, cleared or removed, announced at the commit on the halts table's own
-- channel to the stores that keep the switches in memory (migration 28, _postgres_halts).
CREATE OR REPLACE FUNCTION oncelog_halts_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('oncelog_halts_' || TG_RELID::text, '');
    RETURN NULL;
END;
$$;

-- Which life of the server a connection was opened in (migration 18), run as its owner
-- so that a role that only reads the ledger can connect (migration 19).
CREATE OR REPLACE FUNCTION oncelog_server_life() RETURNS TEXT
LANGUAGE sql VOLATILE SECURITY DEFINER AS $$
    INSERT INTO server_life (id) VALUES (md5(random()::text || clock_timestamp()::text))
    ON CONFLICT (one) DO NOTHING;
    SELECT id FROM server_life;
$$;

-- The schema is named by the URL (options=-csearch_path=NAME), so it is written in here.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION oncelog_server_life() SET search_path = %I, pg_temp',
                   current_schema());
END;
$$;
