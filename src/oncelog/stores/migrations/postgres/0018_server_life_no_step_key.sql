-- Which life of the server a connection was opened in (issue 15.3, durability modes),
-- no foreign key from a step to its run, no SET clause on the transition functions.
-- Every statement may run again (a test re-applies the later migrations).
--
-- With durability "intent" an outcome, a model call or a read commits without waiting
-- for its WAL flush, and with "process" every write does: a crash of the server (or of a
-- backend, which restarts them all), a power loss or a failover can lose those commits.
-- A process that went on writing its run after such a loss would leave holes in it (a
-- later step recorded after one that is gone) or complete a run whose outcome reverted
-- to in flight. So each pooled connection reads, when it is opened, the id of the
-- server's present life; the store writes a run only on connections of the life in
-- which it made that run's commits not yet flushed (_postgres.py).
--
-- An unlogged table is emptied by crash recovery (and is empty on a promoted standby),
-- and kept by a clean shutdown, after which nothing was lost: its one row is that id,
-- written again by the first connection of a new life.
CREATE UNLOGGED TABLE IF NOT EXISTS server_life (
    one BOOLEAN PRIMARY KEY DEFAULT true CHECK (one),
    id TEXT NOT NULL
);

CREATE OR REPLACE FUNCTION oncelog_server_life() RETURNS TEXT
LANGUAGE sql VOLATILE AS $$
    INSERT INTO server_life (id) VALUES (md5(random()::text || clock_timestamp()::text))
    ON CONFLICT (one) DO NOTHING;
    SELECT id FROM server_life;
$$;

-- The foreign key from a step to its run checked the run's row again at every intent
-- (about 32,000 of a call's instructions on the server). Every writer of a step has
-- already locked that row in the same transaction (the intent's function, and
-- SQLStore._begin_step through _sql_tx.fence, each refusing when it is missing), and no
-- run is ever deleted: the check could never refuse anything.
ALTER TABLE steps DROP CONSTRAINT IF EXISTS steps_run_id_fkey;

-- The transition functions plan their statements generically (see 0016) by the session's
-- setting, which every connection of the store makes (_postgres_settings), rather than a
-- SET clause of their own: a SET clause saved and restored the setting at every call, two
-- calls per effect. Both are written again below, without one.

-- The budget trigger's WHEN is parsed from its text, and prepared, at the start of every
-- statement that writes steps: on an UPDATE about 146,000 instructions of an outcome's
-- call (callgrind), more than any statement it ran, and 45,000 of an intent's on an
-- INSERT. Both now read only the setting by which a writer says there is nothing to
-- count (29,000), and the trigger's function looks at what changed (as the WHENs did)
-- before counting; the outcome's function says so where nothing can change (below).
-- Every other writer is counted as before.
DROP TRIGGER IF EXISTS steps_count_insert ON steps;
CREATE TRIGGER steps_count_insert AFTER INSERT ON steps FOR EACH ROW
    WHEN (current_setting('oncelog.uncounted', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION oncelog_count_steps();
DROP TRIGGER IF EXISTS steps_count_update ON steps;
CREATE TRIGGER steps_count_update AFTER UPDATE OF state, tokens_in, tokens_out, cost,
    irreversible, started_at ON steps FOR EACH ROW
    WHEN (current_setting('oncelog.uncounted', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION oncelog_count_steps();

CREATE OR REPLACE FUNCTION oncelog_count_steps() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    was INTEGER := 0;  -- 1: the old version counted
    now_counts INTEGER := (NEW.state <> 'failed')::integer;
BEGIN
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

-- The outcome's function of 0016 (SQLStore.write_outcome's transaction; given the intent's
-- call as its attempt, SQLStore.record_step's), which now says when the budget trigger has
-- nothing to count, and without a SET clause (above).
-- (oncelog_outcome: written here until the server functions moved to functions.sql,
-- their one definition, applied after the migrations.)

-- The intent's function of 0016, without a SET clause, and saying in its fencing read
-- that the budget trigger has nothing to count (a statement fewer).
-- SQLStore._begin_step for a new step without an approval or a run budget: its attempt
-- number, 1. With p_check_halt false (a model call or a read, recorded after it ran) the
-- kill switch is neither locked nor read.
-- (oncelog_intent: written here until the server functions moved to functions.sql,
-- their one definition, applied after the migrations.)
