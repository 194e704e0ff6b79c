-- The journal's hash chain (oncelog.records._chain): each record carries the hash that covers the
-- record before it in its run. Records written before this version have none.
ALTER TABLE journal ADD COLUMN hash TEXT;

-- Signed checkpoints: a run's chain length and head at a moment, signed with Ed25519, so
-- a truncated tail or a rewritten chain is found by a holder of the public key.
CREATE TABLE checkpoints (
    id        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id    TEXT NOT NULL,
    entries   INTEGER NOT NULL,
    head      TEXT NOT NULL,
    at        DOUBLE PRECISION NOT NULL,
    key_id    TEXT NOT NULL,
    signature TEXT NOT NULL
);
CREATE INDEX checkpoints_by_run ON checkpoints (run_id, id);

-- Append-only, as an extra layer under the chain (TRUNCATE included).
CREATE FUNCTION oncelog_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the oncelog % table is append-only', TG_TABLE_NAME;
END;
$$;
CREATE TRIGGER journal_append_only BEFORE UPDATE OR DELETE ON journal
    FOR EACH ROW EXECUTE FUNCTION oncelog_append_only();
CREATE TRIGGER journal_no_truncate BEFORE TRUNCATE ON journal
    FOR EACH STATEMENT EXECUTE FUNCTION oncelog_append_only();
CREATE TRIGGER checkpoints_append_only BEFORE UPDATE OR DELETE ON checkpoints
    FOR EACH ROW EXECUTE FUNCTION oncelog_append_only();
CREATE TRIGGER checkpoints_no_truncate BEFORE TRUNCATE ON checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION oncelog_append_only();
