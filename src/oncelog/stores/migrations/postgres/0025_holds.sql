-- Holds: a run's named, fenced lease on a resource it acts on across several steps. A
-- row is live while its holder keeps the lease it took it with, or has an effect in doubt
-- begun since ``acquired_at`` (stores/_sql_holds.py); the row is never deleted, so the
-- token of the next holder is always greater.
CREATE TABLE IF NOT EXISTS holds (
    resource     TEXT PRIMARY KEY,          -- canonical JSON array: the hold's name
    holder       TEXT NOT NULL,             -- run id of the run that took it last
    holder_token BIGINT NOT NULL,           -- that run's fencing token when it took it
    token        BIGINT NOT NULL,           -- one more at every taking: what providers check
    acquired_at  DOUBLE PRECISION NOT NULL, -- since when its holder has it (kept by a restart)
    released_at  DOUBLE PRECISION           -- NULL while it is held
);
