-- Runs submitted for workers: their input, and what stopped a run, so that a person's
-- decision (resolve, approve, a higher budget, a cleared halt) can queue it again.
ALTER TABLE runs ADD COLUMN input TEXT;       -- JSON given to the agent's handler, or NULL
ALTER TABLE runs ADD COLUMN stopped_by TEXT;  -- the error that stopped it: RunHalted, ...
