-- Retention (oncelog prune) removes completed runs. The journal and the checkpoints stay
-- closed to deletes, except for the records of a run that a prune transaction lists in
-- prune_permits; it lists a run only once it has checked it may go, and empties the table
-- again before it commits, so outside a prune no record can be deleted. Records of no
-- run (''), which carry every prune's anchor, are never deleted.
CREATE TABLE IF NOT EXISTS prune_permits (run_id TEXT PRIMARY KEY) WITHOUT ROWID;
DROP TRIGGER IF EXISTS journal_no_delete;
CREATE TRIGGER journal_no_delete BEFORE DELETE ON journal
WHEN OLD.run_id = '' OR NOT EXISTS (SELECT 1 FROM prune_permits WHERE run_id = OLD.run_id)
BEGIN SELECT RAISE(ABORT, 'the oncelog journal is append-only'); END;
DROP TRIGGER IF EXISTS checkpoints_no_delete;
CREATE TRIGGER checkpoints_no_delete BEFORE DELETE ON checkpoints
WHEN OLD.run_id = '' OR NOT EXISTS (SELECT 1 FROM prune_permits WHERE run_id = OLD.run_id)
BEGIN SELECT RAISE(ABORT, 'oncelog checkpoints are append-only'); END;

-- The retention policy (oncelog retention): how long runs are kept after they end, for the
-- ledger (agent '') and per agent; journalled as retention_set under no run.
CREATE TABLE IF NOT EXISTS retention_policy (
    agent   TEXT PRIMARY KEY,
    keep    DOUBLE PRECISION NOT NULL,  -- seconds after a run's end
    set_by  TEXT NOT NULL,
    set_at  DOUBLE PRECISION NOT NULL
);
