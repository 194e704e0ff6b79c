-- Retention (oncelog prune) removes completed runs. The journal and the checkpoints stay
-- closed to updates, truncation and deletes, except a delete of the records of a run that
-- a prune transaction lists in prune_permits; it lists a run only once it has checked it
-- may go, and empties the table again before it commits, so outside a prune no record can
-- be deleted. Records of no run (''), which carry every prune's anchor, are never deleted.
CREATE TABLE IF NOT EXISTS prune_permits (run_id TEXT PRIMARY KEY);
CREATE OR REPLACE FUNCTION oncelog_append_only_but_pruned() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND OLD.run_id <> ''
       AND EXISTS (SELECT 1 FROM prune_permits WHERE run_id = OLD.run_id) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'the oncelog % table is append-only', TG_TABLE_NAME;
END;
$$;
DROP TRIGGER IF EXISTS journal_append_only ON journal;
CREATE TRIGGER journal_append_only BEFORE UPDATE OR DELETE ON journal
    FOR EACH ROW EXECUTE FUNCTION oncelog_append_only_but_pruned();
DROP TRIGGER IF EXISTS checkpoints_append_only ON checkpoints;
CREATE TRIGGER checkpoints_append_only BEFORE UPDATE OR DELETE ON checkpoints
    FOR EACH ROW EXECUTE FUNCTION oncelog_append_only_but_pruned();

-- The retention policy (oncelog retention): how long runs are kept after they end, for the
-- ledger (agent '') and per agent; journalled as retention_set under no run.
CREATE TABLE IF NOT EXISTS retention_policy (
    agent   TEXT PRIMARY KEY,
    keep    DOUBLE PRECISION NOT NULL,  -- seconds after a run's end
    set_by  TEXT NOT NULL,
    set_at  DOUBLE PRECISION NOT NULL
);
