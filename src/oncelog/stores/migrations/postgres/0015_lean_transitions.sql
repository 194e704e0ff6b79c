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
-- (oncelog_link: written here until the server functions moved to functions.sql,
-- their one definition, applied after the migrations.)

-- SQLStore._begin_step for a new step without an approval or a run budget: its attempt
-- number, 1.
-- (oncelog_intent: written here until the server functions moved to functions.sql,
-- their one definition, applied after the migrations.)

-- SQLStore.write_outcome's transaction (_end_step, not probed). Given the intent's call
-- as its attempt, the two make SQLStore.record_step's transaction in one statement. The
-- step is named by both its keys: on a table whose statistics are stale (a new ledger)
-- the planner may take either unique index for the generic plan, and with only the run
-- in the other's condition it scans every step of the run.
-- (oncelog_outcome: written here until the server functions moved to functions.sql,
-- their one definition, applied after the migrations.)
