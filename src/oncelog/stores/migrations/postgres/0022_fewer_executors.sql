-- Less work on the server for each intent, outcome and recorded step (issue 15, ninth
-- pass). Every statement may run again (a test re-applies the later migrations).
--
-- Counted with callgrind on a private server, backend instructions per effect (a run of
-- 250): 1,039,000 before, 940,000 after.
-- - The chain's head was found by a backward scan of journal_by_run from the run's end,
--   and PostgreSQL 15 reads a whole leaf page on such a scan, whatever the LIMIT: each
--   of the run's entries on that page was compared with the run's id, up to a few
--   hundred of them in a long run (68,000 of the instructions at 250 effects, more in a
--   longer run). The functions below take the id of a journal record the caller knows
--   (p_after: the one its previous call for the run appended; NULL: none) and look for
--   the head only from there, which ends the scan at that record. The hint cannot make a
--   link wrong: ids follow the run's commits, so if any of the run's records is at or
--   after p_after, the last of those is the run's last; where there is none (p_after
--   past the run's last record, which no caller that appended it gives) the call hands
--   the step back (OL000) before it commits, and the store's transaction reads the head
--   itself. Each returns the id of the record it appended, the caller's next hint. A
--   head without a hash (a record older than 0007) links from the genesis, as before.
-- - PERFORM runs its SELECT through the executor (a plan started and ended, its
--   projection built); the advisory locks are taken in assignments instead, which
--   PL/pgSQL evaluates as simple expressions (14,000). The order of the locks, and the
--   statements that read after them (each takes a new snapshot), are unchanged.
-- - The budget trigger's WHEN was parsed from its text and prepared at the start of every
--   statement that writes steps; the triggers now have none, and their function asks the
--   same question (oncelog.uncounted, see 0016 and 0018) first (17,000).
-- - The time's text (oncelog_at_text) is made inside the journal's INSERT, and one test
--   of the hash it wrote hands the step back (OL000) both where the time's text is left
--   to the client and where the hint found no record, rather than an assignment and a
--   test of their own (11,000). The call's writes are rolled back with it, as before.
--
-- The functions of the same names with the previous arguments stay as they were: a
-- process of the previous version may still call them.

DROP TRIGGER IF EXISTS steps_count_insert ON steps;
CREATE TRIGGER steps_count_insert AFTER INSERT ON steps FOR EACH ROW
    EXECUTE FUNCTION oncelog_count_steps();
DROP TRIGGER IF EXISTS steps_count_update ON steps;
CREATE TRIGGER steps_count_update AFTER UPDATE OF state, tokens_in, tokens_out, cost,
    irreversible, started_at ON steps FOR EACH ROW
    EXECUTE FUNCTION oncelog_count_steps();

-- 0018's, asking first what the triggers' WHEN asked.
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

-- 0018's oncelog_intent: SQLStore._begin_step for a new step without an approval or a run
-- budget, its attempt number 1. With p_check_halt false the kill switch is neither locked
-- nor read.
-- (oncelog_intent: written here until the server functions moved to functions.sql,
-- their one definition, applied after the migrations.)

-- 0018's oncelog_outcome: SQLStore.write_outcome's transaction (_end_step, not probed).
-- (oncelog_outcome: written here until the server functions moved to functions.sql,
-- their one definition, applied after the migrations.)

-- 0021's oncelog_recorded: SQLStore.record_step for a new step without an approval or a
-- run budget, in one call.
-- (oncelog_recorded: written here until the server functions moved to functions.sql,
-- their one definition, applied after the migrations.)
