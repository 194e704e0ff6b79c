-- Less work on the server for each intent and outcome (issue 15.3, second pass).
--
-- The budget trigger of 0009 ran a plpgsql function with the whole row on every write of
-- a step, twice for an UPDATE (take away the old version, add the new). Most writes change
-- nothing it counts: an outcome of a step that cost nothing moves it from in_flight to
-- done, both counted alike. The trigger now fires on an UPDATE only when what it counts
-- changes (a step entering or leaving 'failed', its tokens, cost, irreversibility, or the
-- day it started, which names its agent's day), and on an INSERT only for a step that
-- counts. What it does when it fires is unchanged, so the totals are the same.
DROP TRIGGER steps_count ON steps;
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

-- A time as Python's json.dumps writes it, or OL000. The functions no longer carry
-- ``SET extra_float_digits``: a SET clause saves and restores the setting on every call.
-- Every connection of the store sets it (_postgres_settings.session_settings), and any
-- value above 0 writes the shortest text that reads back exactly, as Python's repr does;
-- a session that set it lower gets OL000 and the client's way, never a wrong hash.
CREATE OR REPLACE FUNCTION oncelog_time_text(t DOUBLE PRECISION) RETURNS TEXT
LANGUAGE plpgsql STABLE AS $$
DECLARE
    written TEXT := t::text;
BEGIN
    IF current_setting('extra_float_digits')::integer > 0 THEN
        IF written ~ '^-?[0-9]+$' THEN
            RETURN written || '.0';
        ELSIF written ~ '^-?[0-9]+\.[0-9]+$' THEN
            RETURN written;
        END IF;
    END IF;
    RAISE EXCEPTION 'time % is left to the client', written USING ERRCODE = 'OL000';
END;
$$;
ALTER FUNCTION oncelog_intent(TEXT, TEXT, BIGINT, DOUBLE PRECISION, TEXT, INTEGER, TEXT, TEXT,
    TEXT, TEXT, TEXT, TEXT, TEXT, DOUBLE PRECISION, DOUBLE PRECISION, INTEGER, TEXT, TEXT)
    RESET extra_float_digits;
ALTER FUNCTION oncelog_outcome(TEXT, TEXT, BIGINT, DOUBLE PRECISION, INTEGER, TEXT, INTEGER,
    TEXT, TEXT, TEXT, INTEGER, INTEGER, DOUBLE PRECISION, DOUBLE PRECISION, TEXT, TEXT)
    RESET extra_float_digits;
