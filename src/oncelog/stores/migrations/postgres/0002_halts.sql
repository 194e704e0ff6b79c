-- The kill switch: durable halts at global, agent and run scope. A halt is set by code or
-- a person and cleared only by a named person; a cleared halt keeps its row, with who
-- cleared it and when, and both changes are also in the journal.
ALTER TABLE runs ADD COLUMN agent TEXT; -- the named scope a run belongs to, if any

CREATE TABLE halts (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scope      TEXT NOT NULL,          -- global | agent | run
    target     TEXT NOT NULL,          -- the agent or run id; '' for global
    reason     TEXT NOT NULL,
    set_by     TEXT NOT NULL,
    set_at     DOUBLE PRECISION NOT NULL,
    cleared_by TEXT,
    cleared_at DOUBLE PRECISION,
    note       TEXT                    -- why it was cleared
);
-- At most one active halt per switch; the intent transaction looks them up here.
CREATE UNIQUE INDEX halts_active ON halts (scope, target) WHERE cleared_at IS NULL;
