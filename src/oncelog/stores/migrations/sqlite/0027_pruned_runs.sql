-- A pruned run's tombstone: the run ids oncelog prune removed, so that entering one again
-- stops with RunPruned instead of starting a new run that performs its effects again.
-- Written by the transaction that removes the run; never pruned itself; removed only by a
-- person's `oncelog prune --forget RUN` (journalled as pruned_run_forgotten). The time and
-- the archive are the anchor's (anchor: the journal id of the runs_pruned record that
-- removed the run; records of no run are never deleted), so a tombstone holds only what
-- the anchor does not: the run's end and its agent.
CREATE TABLE IF NOT EXISTS pruned_runs (
    run_id  TEXT PRIMARY KEY,
    anchor  INTEGER NOT NULL,
    status  TEXT NOT NULL,  -- completed or failed: how the run ended
    agent   TEXT
) WITHOUT ROWID;
