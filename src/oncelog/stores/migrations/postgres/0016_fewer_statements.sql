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
-- (oncelog_intent: written here until the server functions moved to functions.sql,
-- their one definition, applied after the migrations.)

-- SQLStore.write_outcome's transaction (_end_step, not probed). Given the intent's call
-- as its attempt, the two make SQLStore.record_step's transaction in one statement. The
-- step is named by both its keys (see 0015).
-- (oncelog_outcome: written here until the server functions moved to functions.sql,
-- their one definition, applied after the migrations.)
